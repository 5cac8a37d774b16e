#!/bin/bash
# UserspaceFs and OPAQUE_FD over TCP on loopback, into device memory,
# across piece sizes (HIPFS_REMOTE_PIECE_KB), pieces in flight per call
# (HIPFS_REMOTE_INFLIGHT), client lanes (HIPFS_REMOTE_LANES) and bounce
# slabs per worker (HIPFS_BOUNCE_DEPTH): where the direct path's time goes
# against the one- and N-socket ceilings (and the file-backed one) of the
# same run. Runs on the GPU machine with .gpu/bin/hipfs
# (scripts/gpu/run-gpu-checks.sh). A point is PIECE_KB:INFLIGHT[:LANES[:DEPTH]];
# an empty field keeps the library's default.
#   SWEEP_SIZE=2G SWEEP="1024:8 4096:8 4096:16:16 4096::16:4" bash scripts/gpu/tcp-sweep.sh
set -u
cd "$(dirname "$0")/../.."
G=$PWD/.gpu
W=/var/tmp/hipfs-sweep; mkdir -p "$W"
F=$W/us-${SWEEP_SIZE:-2G}.bin
nproc
for point in ${SWEEP:-4096:8 4096:16 4096:16:16 2048:16 4096::8:4}; do
    IFS=: read -r kb inflight lanes depth <<<"$point"
    echo "== piece ${kb:-default} KiB, in flight ${inflight:-default}, lanes ${lanes:-default}, depth ${depth:-default} ${SWEEP_ARGS:-}"
    env ${kb:+HIPFS_REMOTE_PIECE_KB=$kb} ${inflight:+HIPFS_REMOTE_INFLIGHT=$inflight} \
        ${lanes:+HIPFS_REMOTE_LANES=$lanes} ${depth:+HIPFS_BOUNCE_DEPTH=$depth} timeout 150 \
        "$G/bin/hipfs" bench userspace "$F" --create "${SWEEP_SIZE:-2G}" --gpu --repeats "${SWEEP_REPEATS:-1}" ${SWEEP_ARGS:-}
done
