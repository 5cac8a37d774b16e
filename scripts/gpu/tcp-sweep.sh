#!/bin/bash
# UserspaceFs and OPAQUE_FD over TCP on loopback, into device and host
# memory, across pieces in flight per call (HIPFS_REMOTE_INFLIGHT) and with
# the server sending from the file (--sendfile): where the direct path's
# time goes against the one- and N-socket ceilings of the same run.
# Runs on the GPU machine with .gpu/bin/hipfs (scripts/gpu/run-gpu-checks.sh).
set -u
cd "$(dirname "$0")/../.."
G=$PWD/.gpu
W=/var/tmp/hipfs-sweep; mkdir -p "$W"
F=$W/us-${SWEEP_SIZE:-4G}.bin
nproc
for inflight in ${SWEEP_INFLIGHT:-8 16 32 64}; do
    echo "== in flight $inflight"
    HIPFS_REMOTE_INFLIGHT=$inflight timeout 120 "$G/bin/hipfs" bench userspace "$F" --create "${SWEEP_SIZE:-4G}" --gpu --repeats 1
done
echo "== in flight ${SWEEP_BEST:-32}, server --sendfile"
HIPFS_REMOTE_INFLIGHT=${SWEEP_BEST:-32} timeout 120 "$G/bin/hipfs" bench userspace "$F" --gpu --repeats 1 --sendfile
echo "== host memory, in flight ${SWEEP_BEST:-32}"
HIPFS_REMOTE_INFLIGHT=${SWEEP_BEST:-32} timeout 120 "$G/bin/hipfs" bench userspace "$F" --repeats 1
