#!/usr/bin/env bash
# ci-remote-verbs.sh - hipfs remote over the verbs transport, end to end, on
# real (soft-RoCE) ibverbs inside a QEMU VM:
#   1. cli/tests/it/remote_verbs_vm.rs: a verbs-only server on rxe0, a FUSE mount
#      with transport=verbs, UserspaceFs reads/writes into host memory at
#      random offsets checked against the exported file, rxe0 packet counters;
#   2. cli/tests/it/remote_verbs_device_vm.rs: the same into device memory:
#      of the dmabuf-test runtime (vgem dumb buffers), which rxe0 refuses as
#      a dmabuf and as peer memory, so reads and writes stage, every step
#      logged and counted; and of the pinnable-test runtime, registered by
#      address, which the server RDMA-WRITEs into with nothing staged;
#   3. the CLI: `hipfs serve --transport verbs` and `hipfs mount -o
#      transport=verbs` as separate processes, a file compared through the
#      mount, `hipfs bench read --gpu` of it into dmabuf-test device memory
#      (OPAQUE_FD, the mount's direct path), and `hipfs check`'s
#      registration probes (host and device memory).
# Builds on the host, runs in the VM (the host root is shared read-only).
# Exit status: 0 only if every step passed. Needs root (see run-in-vm.sh).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

# Step 3, inside the VM: ci-remote-verbs.sh --guest-cli HIPFS_BIN
if [ "${1:-}" = "--guest-cli" ]; then
  BIN=$2
  [ "${HIPFS_VM:-}" = 1 ] || { echo "--guest-cli runs inside the VM only" >&2; exit 2; }
  D=$(mktemp -d /dev/shm/hipfs-export.XXXX); M=$(mktemp -d /dev/shm/hipfs-mnt.XXXX)
  ADDR=${HIPFS_VM_IP:-10.99.0.1}:7479
  head -c 3000017 /dev/urandom > "$D/f"
  # Not loopback, so no default ticket socket: name one on the guest's tmpfs
  # (root's ticket makes the mount a trusted host, as on a real client).
  "$BIN" serve "$D" --listen "$ADDR" --transport verbs --insecure --local-socket "$D.sock" 2>"$D.serve.log" &
  SPID=$!
  # || true: set -e applies inside the trap too and would replace our status.
  trap 'umount -l "$M" 2>/dev/null || true; kill $SPID 2>/dev/null || true; wait $SPID 2>/dev/null || true' EXIT
  ok=0
  for _ in $(seq 50); do
    if "$BIN" mount "$ADDR" "$M" -o transport=verbs,timeout=20,local_socket="$D.sock" 2>"$D.mount.log"; then ok=1; break; fi
    sleep 0.2
  done
  [ $ok = 1 ] || { echo "hipfs mount -o transport=verbs failed:"; cat "$D.mount.log" "$D.serve.log"; exit 1; }
  t0=$(date +%s.%N)
  cmp "$D/f" "$M/f" || { echo "file differs through the verbs mount"; exit 1; }
  t1=$(date +%s.%N)
  echo "cli: 3000017 bytes read through 'hipfs mount -o transport=verbs' match ($(python3 -c "print(f'{3000017/($t1-$t0)/1e6:.1f}')") MB/s)"
  echo "through the mount" > "$M/g" && [ "$(cat "$D/g")" = "through the mount" ] || { echo "write through the verbs mount lost"; exit 1; }
  echo "cli: a write through the mount reached the export"
  # Device memory through the mount's direct path (OPAQUE_FD): the bench
  # reads the file into a dmabuf-test allocation and checks every byte. The
  # allocation is offered to rxe0 as a dmabuf (refused), then by address
  # (peer memory; refused: vgem maps VM_PFNMAP), then the read stages
  # through pinned host memory: each step is logged, and counted in the
  # stats printed at exit.
  HIPFS_GPU_RUNTIME=dmabuf-test HIPFS_STATS=1 RUST_LOG=hipfs=info \
    "$BIN" bench read "$M/f" --gpu --repeats 1 > "$D.bench" 2>&1 ||
    { echo "hipfs bench read --gpu through the verbs mount failed:"; cat "$D.bench"; exit 1; }
  grep -E "GPU runtime|device memory|^remote|bench read" "$D.bench" | awk '!seen[$0]++'
  grep -q "device memory registration: the NIC refused the dmabuf of 3000017 bytes" "$D.bench" &&
    grep -q "(peer memory) failed: .*; staging through pinned host memory" "$D.bench" &&
    grep -qE "^device memory registrations: 0 dmabuf, 0 peer memory, [1-9][0-9]* staged \(refused: [1-9][0-9]* dmabuf, [1-9][0-9]* peer memory\)" "$D.bench" &&
    grep -qE "^remote +3000017 " "$D.bench" ||
    { echo "the device-memory read did not log and count dmabuf refused, peer memory refused, staged:"; cat "$D.bench"; exit 1; }
  echo "cli: 3000017 bytes read into device memory through the verbs mount's direct path: dmabuf and peer memory refused by rxe0, staged, every byte checked"
  "$BIN" umount "$M"
  # The device-memory registration probe on rxe0: a real dmabuf (a vgem
  # dumb buffer: this kernel has no udmabuf) is offered to the NIC, which
  # must answer (rxe refuses dmabufs; the answer is what is checked).
  "$BIN" check "$D" > "$D.check" 2>&1 || true
  grep -E "^rdma|dmabuf" "$D.check" || true
  grep -qE "^rdma rxe0 gpu memory .*dmabuf \[host dmabuf[^]]*\]: (refused|accepted)" "$D.check" ||
    { echo "hipfs check did not offer rxe0 a dmabuf:"; cat "$D.check"; exit 1; }
  echo "cli: hipfs check offered rxe0 a real dmabuf and got its answer"
  # With device memory (the dmabuf-test runtime: vgem dumb buffers mapped
  # into the process) the probe exports a device allocation and offers
  # rxe0 both its dmabuf and its address (peer memory). rxe implements no
  # dmabuf registration, and vgem's mapping is VM_PFNMAP, which ibv_reg_mr
  # cannot pin: both are refused, and each refusal is reported.
  HIPFS_GPU_RUNTIME=dmabuf-test "$BIN" check "$D" > "$D.check-dev" 2>&1 || true
  grep -E "^gpu|^rdma .*gpu memory" "$D.check-dev" || true
  grep -qE "^gpu dmabuf export +ok +device memory exports as a dmabuf" "$D.check-dev" &&
    grep -qE "^rdma rxe0 gpu memory .*dmabuf \[device\]: refused \(.*\); peer memory: refused \(.*\)" "$D.check-dev" ||
    { echo "hipfs check with device memory did not report both probes on rxe0:"; cat "$D.check-dev"; exit 1; }
  echo "cli: hipfs check offered rxe0 device memory as a dmabuf and by address (peer memory); both answered"
  # Pinnable device memory (pinnable-test: no dmabuf exporter, so the probe
  # offers the host dmabuf) is registered by address: the probe says so.
  HIPFS_GPU_RUNTIME=pinnable-test "$BIN" check "$D" > "$D.check-pin" 2>&1 || true
  grep -E "^gpu|^rdma .*gpu memory" "$D.check-pin" || true
  grep -qE "^rdma rxe0 gpu memory +ok +dmabuf \[host dmabuf[^]]*\]: refused \(.*\); peer memory: accepted$" "$D.check-pin" ||
    { echo "hipfs check with pinnable device memory did not report peer memory accepted on rxe0:"; cat "$D.check-pin"; exit 1; }
  echo "cli: hipfs check: rxe0 registers pinnable device memory by address (peer memory accepted)"
  exit 0
fi

cd "$REPO"
echo "== building (cargo test -p hipfs-cli --test it --no-run)"
mapfile -t BINS < <(HIPFS_REQUIRE_VERBS=1 cargo test -p hipfs-cli --test it --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    try: m = json.loads(l)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and (m["target"]["name"], m["target"]["kind"][0]) in (("it", "test"), ("hipfs", "bin")):
        print(m["target"]["name"], m["executable"])')
TEST=""; HIPFS=""
for b in "${BINS[@]}"; do
  case ${b%% *} in it) TEST=${b#* } ;; hipfs) HIPFS=${b#* } ;; esac
done
[ -n "$TEST" ] && [ -n "$HIPFS" ] || { echo "could not find the test binary or hipfs (build failed?)" >&2; exit 1; }

fail=0
echo "== UserspaceFs over verbs (cli/tests/it/remote_verbs_vm.rs) in the soft-RoCE VM"
# One thread: each test boots a server and a mount; two vCPUs under TCG.
"$HERE/run-in-vm.sh" -t 600 -e HIPFS_VM=1 -e RUST_BACKTRACE=1 -- "$TEST" remote_verbs_vm:: --test-threads=1 --nocapture || fail=1

# Processes of their own: the GPU runtime is chosen once per process.
echo "== device memory over verbs, refused (remote_verbs_device_vm.rs, HIPFS_GPU_RUNTIME=dmabuf-test) in the soft-RoCE VM"
"$HERE/run-in-vm.sh" -t 600 -e HIPFS_VM=1 -e HIPFS_GPU_RUNTIME=dmabuf-test -e RUST_BACKTRACE=1 -- "$TEST" remote_verbs_device_vm::vgem_ --test-threads=1 --nocapture || fail=1
echo "== device memory over verbs, registered (remote_verbs_device_vm.rs, HIPFS_GPU_RUNTIME=pinnable-test) in the soft-RoCE VM"
"$HERE/run-in-vm.sh" -t 600 -e HIPFS_VM=1 -e HIPFS_GPU_RUNTIME=pinnable-test -e RUST_BACKTRACE=1 -- "$TEST" remote_verbs_device_vm::pinnable_ --test-threads=1 --nocapture || fail=1

echo "== hipfs serve/mount --transport verbs (CLI) in the soft-RoCE VM"
"$HERE/run-in-vm.sh" -t 300 -- "$HERE/ci-remote-verbs.sh" --guest-cli "$HIPFS" || fail=1

[ $fail = 0 ] && echo "== remote over verbs: all steps passed" || echo "== remote over verbs: FAILED" >&2
exit $fail
