#!/usr/bin/env bash
# Aggregate read throughput of a multi-server mount for 1, 2 and 3 servers,
# measured in one run (docs/MULTI_SERVER.md).
#
# Three `hipfs serve` processes export one directory (the stand-in for a
# shared filesystem), each in its own network namespace, reached over its
# own veth pair whose server side is rate-limited with `tc tbf` (RATE).
# `hipfs bench spread` then mounts the first 1, 2 and 3 of them in turn and
# reads one file through FUSE (direct_io) and through UserspaceFs handles.
#
# --dirs D1,D2,D3: server i exports Di instead (three mounts of one
# distributed filesystem, e.g. the GlusterFS mounts of
# scripts/gluster-multi.sh); the test file is written through D1.
#
# Needs root, iproute2 (ip netns, tc), /dev/fuse.
# Usage: scripts/bench-multi.sh [--size 256M] [--rate 400mbit] [--repeats 2] [--dirs D1,D2,D3]
#        HIPFS_BIN=target/release/hipfs scripts/bench-multi.sh
set -euo pipefail

SIZE=256M
RATE=400mbit
REPEATS=2
DIRS=""
while [ $# -gt 0 ]; do
    case "$1" in
        --size) SIZE=$2; shift 2 ;;
        --rate) RATE=$2; shift 2 ;;
        --repeats) REPEATS=$2; shift 2 ;;
        --dirs) DIRS=$2; shift 2 ;;
        *) echo "usage: $0 [--size 256M] [--rate 400mbit] [--repeats 2] [--dirs D1,D2,D3]" >&2; exit 2 ;;
    esac
done

. "$(dirname "$0")/lib/hipfs-bin.sh"
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces, tc, FUSE)" >&2; exit 1; }

work=$(mktemp -d /tmp/hipfs-bench-multi.XXXXXX)
tag=hbm$$
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    for i in 1 2 3; do ip netns del "$tag$i" 2>/dev/null || true; done
    if [ -n "$DIRS" ] && [ -n "${dirs[0]:-}" ]; then rm -f "${dirs[0]}/hipfs-bench-$$.bin"; fi
    rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/export"
if [ -n "$DIRS" ]; then
    IFS=, read -r -a dirs <<< "$DIRS"
    [ "${#dirs[@]}" = 3 ] || { echo "--dirs needs three directories" >&2; exit 2; }
    file=hipfs-bench-$$.bin
else
    dirs=("$work/export" "$work/export" "$work/export")
    file=data.bin
fi
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token"
chmod 600 "$work/token"
echo "generating $SIZE test file..."
head -c "$SIZE" /dev/urandom > "${dirs[0]}/$file"
sync

servers=()
for i in 1 2 3; do
    ns=$tag$i
    ip netns add "$ns"
    ip link add "${tag}h$i" type veth peer name "${tag}s$i"
    ip link set "${tag}s$i" netns "$ns"
    ip addr add "10.77.$i.1/24" dev "${tag}h$i"
    ip link set "${tag}h$i" up
    ip netns exec "$ns" ip addr add "10.77.$i.2/24" dev "${tag}s$i"
    ip netns exec "$ns" ip link set "${tag}s$i" up
    ip netns exec "$ns" ip link set lo up
    # Server -> client is where read data flows: that side is the link's rate.
    ip netns exec "$ns" tc qdisc add dev "${tag}s$i" root tbf rate "$RATE" burst 1mb latency 100ms
    tc qdisc add dev "${tag}h$i" root tbf rate "$RATE" burst 1mb latency 100ms
    ip netns exec "$ns" "$bin" serve "${dirs[$((i - 1))]}" --listen "10.77.$i.2:7471" \
        --token-file "$work/token" --transport tcp \
        --local-socket "$work/serve$i.sock" > "$work/serve$i.out" 2> "$work/serve$i.err" &
    pids+=($!)
    servers+=("10.77.$i.2:7471")
done
for i in 1 2 3; do
    wait_listening "$work/serve$i.out" || { cat "$work/serve$i.err" >&2; exit 1; }
done
echo "3 servers, each behind a $RATE link (tc tbf), exporting one namespace:"
grep -h "export id" "$work"/serve*.err | sed 's/^/  /'
list=$(IFS=,; echo "${servers[*]}")
"$bin" bench spread "$file" --servers "$list" -o "token_file=$work/token,transport=tcp,timeout=10" --repeats "$REPEATS"
