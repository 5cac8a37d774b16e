#!/usr/bin/env bash
# ci-verbs-tests.sh - build hipfs-rdma's test binaries on the host and run
# the verbs tests on real (soft-RoCE) ibverbs inside QEMU VMs:
#   1. the crate's unit tests and tests/verbs.rs in one VM (rxe0 on a dummy
#      netdev; client and server are two ends in one kernel),
#   2. a cross-host run: two VMs, each with rxe0 on a virtio NIC joined by a
#      UDP socket on 127.0.0.1; the peer VM serves, the main VM connects.
# With --bench also: ib_write_bw / ib_read_bw (perftest) and the crate's own
# transport benchmark in the same VM.
# Exit status: 0 only if every step passed. Needs root (see run-in-vm.sh).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
VM=$HERE/run-in-vm.sh
BENCH=0
[ "${1:-}" = "--bench" ] && BENCH=1
cd "$REPO"

echo "== building test binaries (cargo test -p hipfs-rdma --features verbs-tests --no-run)"
mapfile -t BINS < <(cargo test -p hipfs-rdma --features verbs-tests --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    try: m = json.loads(l)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] in ("hipfs_rdma", "verbs"):
        print(m["target"]["name"], m["executable"])')
LIB=""; VERBS=""
for b in "${BINS[@]}"; do
  case ${b%% *} in hipfs_rdma) LIB=${b#* } ;; verbs) VERBS=${b#* } ;; esac
done
[ -n "$LIB" ] && [ -n "$VERBS" ] || { echo "could not find the test binaries" >&2; exit 1; }

fail=0
echo "== unit tests + verbs tests in the soft-RoCE VM"
"$VM" -t 900 -- bash -c "'$LIB' && '$VERBS' --test-threads=1" || fail=1

echo "== cross-host: two VMs"
"$VM" -t 300 -p "'$VERBS' --ignored --exact verbs_cross_host_peer_server --nocapture" \
  -- "$VERBS" --ignored --exact verbs_cross_host_client --nocapture || fail=1

if [ $BENCH = 1 ]; then
  echo "== benchmarks in the VM (perftest beside hipfs-rdma)"
  cargo build --release -p hipfs-cli --bin hipfs
  "$VM" -t 600 -- "$HERE/bench-verbs.sh" "$REPO/target/release/hipfs" 1024 64 || fail=1
fi

[ $fail = 0 ] && echo "== all verbs steps passed" || echo "== verbs steps FAILED" >&2
exit $fail
