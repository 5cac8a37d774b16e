#!/bin/bash
# Where UserspaceFs-into-device-memory time goes on the GPU machine: the
# bench with all five loopback ceilings (--more-ceilings) under several
# client settings, with vmstat sampling the CPUs throughout. Runs on the
# GPU machine with .gpu/bin/hipfs (scripts/gpu/run-gpu-checks.sh).
#   PROFILE_POINTS="default ahead0 lanes8 chunk8m" bash scripts/gpu/tcp-profile.sh
# A point "other" runs the same as "default" with $PROFILE_OTHER_BIN (another
# build, for an A/B in one run); "bin:NAME" the same with .gpu/bin/NAME;
# "host" reads into host memory instead; "ccsystem" runs lanes and ceilings
# on the system's congestion control (the behaviour before 2026-12-07).
# PROFILE_REQUEST (e.g. 4M) sets every point's request size.
# PROFILE_THREADS=1 runs each point under scripts/gpu/thread-cpu.py: the CPU
# seconds of the bench's threads by name (receivers, fetchers, senders).
set -u
cd "$(dirname "$0")/../.."
G=$PWD/.gpu/bin/hipfs
W=/var/tmp/hipfs-profile; mkdir -p "$W"
F=$W/us-4G.bin
LOG=${OUT:-/tmp}
exec > >(tee "$LOG/profile.log") 2>&1
nvidia-smi -L; nproc; lscpu | grep -E 'Model name|NUMA|Socket|MHz|L3' ; free -g | head -2
# The TCP defaults the lanes start from (see HIPFS_TCP_CONGESTION).
sysctl net.ipv4.tcp_congestion_control net.ipv4.tcp_allowed_congestion_control net.core.default_qdisc 2>/dev/null
"$G" check "$W" 2>&1 | grep -iE 'dmabuf|gpu' | head -5
[ -f "$F" ] || "$G" bench userspace "$F" --create 4G --repeats 1 >/dev/null 2>&1 || head -c 4G /dev/urandom > "$F"
vmstat 1 > "$LOG/vmstat.log" 2>&1 &
vm=$!
wrap=(); [ "${PROFILE_THREADS:-0}" = 1 ] && wrap=(python3 scripts/gpu/thread-cpu.py --)
for point in ${PROFILE_POINTS:-default ahead0 lanes8 lanes12 chunk8m chunk2m depth4 req1g}; do
    env=(); args=(${PROFILE_REQUEST:+--request "$PROFILE_REQUEST"}); bin=$G; mem=(--gpu)
    case $point in
        default) ;;
        other) bin=${PROFILE_OTHER_BIN:?set PROFILE_OTHER_BIN} ;;
        bin:*) bin=$PWD/.gpu/bin/${point#bin:} ;;
        ahead0) env=(HIPFS_READAHEAD_MB=0) ;;
        ahead64) env=(HIPFS_READAHEAD_MB=64) ;;
        ahead128) env=(HIPFS_READAHEAD_MB=128) ;;
        ahead256) env=(HIPFS_READAHEAD_MB=256) ;;
        lanes8) env=(HIPFS_REMOTE_LANES=8) ;;
        lanes12) env=(HIPFS_REMOTE_LANES=12) ;;
        chunk8m) env=(HIPFS_CHUNK_KB=8192) ;;
        chunk2m) env=(HIPFS_CHUNK_KB=2048) ;;
        chunk1m) env=(HIPFS_CHUNK_KB=1024) ;;
        depth4) env=(HIPFS_BOUNCE_DEPTH=4) ;;
        pinreg) env=(HIPFS_BOUNCE_PIN=register) ;;
        spin0) env=(HIPFS_CUDA_SPIN=0) ;;
        stripe256k) env=(HIPFS_TCP_STRIPE_KB=256) ;;
        stripe4m) env=(HIPFS_TCP_STRIPE_KB=4096) ;;
        srv256) env=(HIPFS_BENCH_SERVER_INFLIGHT_MB=256) ;;
        srv32) env=(HIPFS_BENCH_SERVER_INFLIGHT_MB=32) ;;
        ccsystem) env=(HIPFS_TCP_CONGESTION=system) ;;
        cccubic) env=(HIPFS_TCP_CONGESTION=cubic) ;;
        threads8) env=(HIPFS_READAHEAD_THREADS=8) ;;
        threads16) env=(HIPFS_READAHEAD_THREADS=16) ;;
        threads48) env=(HIPFS_READAHEAD_THREADS=48) ;;
        req1g) args=(--request 1G) ;;
        req256m) args=(--request 256M) ;;
        host) mem=() ;;
        lspipe) env=(HIPFS_TCP_LANE_STAGING=pipeline) ;;
        lsdirect) env=(HIPFS_TCP_LANE_STAGING=direct) ;;
        lspipe512k) env=(HIPFS_TCP_LANE_STAGING=pipeline HIPFS_TCP_LANE_STAGING_KB=512) ;;
        lspipe2m) env=(HIPFS_TCP_LANE_STAGING=pipeline HIPFS_TCP_LANE_STAGING_KB=2048) ;;
        lsdirect1g) env=(HIPFS_TCP_LANE_STAGING=direct); args=(--request 1G) ;;
        *) echo "unknown point $point"; continue ;;
    esac
    echo "== $point ${env[*]} ${args[*]} ($(date +%T))"
    env "${env[@]}" timeout 150 "${wrap[@]}" "$bin" bench userspace "$F" "${mem[@]}" --repeats 3 --more-ceilings "${args[@]}"
done
kill $vm
echo "== vmstat (us sy id wa per second)"
awk 'NR>2 {print $13, $14, $15, $16}' "$LOG/vmstat.log" | tr '\n' '|'
