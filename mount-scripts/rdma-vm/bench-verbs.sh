#!/usr/bin/env bash
# bench-verbs.sh - run INSIDE the soft-RoCE VM (ci-verbs-tests.sh --bench
# starts it): perftest's ib_write_bw / ib_read_bw and hipfs-rdma's own
# RDMA WRITE / READ with the same message size on the same rxe0, and the
# ratio of ours to perftest's. Under TCG absolute numbers are tiny; the
# ratio is what is meaningful.
# Usage: bench-verbs.sh HIPFS_BINARY [MSG_KiB] [ITERS]   (runs `hipfs bench transport-ops`)
set -u
BIN=$1; KIB=${2:-1024}; ITERS=${3:-64}
IP=${HIPFS_VM_IP:?run inside run-in-vm.sh}
BYTES=$((KIB * 1024))
perf() {  # tool -> average GB/s
  local t=$1 out srv
  $t -d rxe0 -x 1 -F -s "$BYTES" -n "$ITERS" --report_gbits >/dev/null 2>&1 & srv=$!
  sleep 1
  out=$(timeout 300 $t -d rxe0 -x 1 -F -s "$BYTES" -n "$ITERS" --report_gbits "$IP" 2>/dev/null | awk -v b="$BYTES" '$1 == b { print $4 }')
  wait $srv
  awk -v g="${out:-0}" 'BEGIN { printf "%.4f", g / 8 }'
}
ours() {  # WRITE|READ lanes depth -> GB/s
  "$BIN" bench transport-ops verbs $((KIB * ITERS / 1024)) "$2" "$IP" "$KIB" "$3" | awk -v op="$(echo "$1" | tr A-Z a-z)" '$2 == op { print $(NF-1) }'
}
w=$(perf ib_write_bw); r=$(perf ib_read_bw)
printf '%-40s %10s %8s\n' "what ($KIB KiB messages, $ITERS of them)" "GB/s" "ratio"
printf '%-40s %10s %8s\n' "ib_write_bw (perftest)" "$w" "1.00"
for cfg in "1 1" "4 4"; do
  set -- $cfg
  o=$(ours WRITE "$1" "$2")
  printf '%-40s %10s %8s\n' "hipfs-rdma write, $1 lanes, depth $2" "$o" "$(awk -v a="$o" -v b="$w" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')"
done
printf '%-40s %10s %8s\n' "ib_read_bw (perftest)" "$r" "1.00"
for cfg in "1 1" "4 4"; do
  set -- $cfg
  o=$(ours READ "$1" "$2")
  printf '%-40s %10s %8s\n' "hipfs-rdma read, $1 lanes, depth $2" "$o" "$(awk -v a="$o" -v b="$r" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')"
done
