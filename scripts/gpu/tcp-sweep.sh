#!/bin/bash
# UserspaceFs and OPAQUE_FD over TCP on loopback, into device memory,
# across piece sizes (HIPFS_REMOTE_PIECE_KB) and pieces in flight per call
# (HIPFS_REMOTE_INFLIGHT): where the direct path's time goes against the
# one- and N-socket ceilings of the same run. Runs on the GPU machine with
# .gpu/bin/hipfs (scripts/gpu/run-gpu-checks.sh).
#   SWEEP_SIZE=2G SWEEP="1024:8 4096:8 4096:16" bash scripts/gpu/tcp-sweep.sh
set -u
cd "$(dirname "$0")/../.."
G=$PWD/.gpu
W=/var/tmp/hipfs-sweep; mkdir -p "$W"
F=$W/us-${SWEEP_SIZE:-2G}.bin
nproc
for point in ${SWEEP:-1024:8 4096:8 8192:8 4096:16}; do
    kb=${point%%:*}; inflight=${point#*:}
    echo "== piece ${kb} KiB, in flight $inflight ${SWEEP_ARGS:-}"
    HIPFS_REMOTE_PIECE_KB=$kb HIPFS_REMOTE_INFLIGHT=$inflight timeout 120 \
        "$G/bin/hipfs" bench userspace "$F" --create "${SWEEP_SIZE:-2G}" --gpu --repeats 1 ${SWEEP_ARGS:-}
done
