#!/usr/bin/env bash
# A multi-server mount over a real distributed filesystem: a GlusterFS
# volume of three bricks on this machine, mounted three times (glusterfs
# FUSE client), each mount exported by its own `hipfs serve`; then two
# multi-server hipfs mounts over those three servers (docs/MULTI_SERVER.md).
#
# Checks: the three servers agree on the export id without being told (kept
# in the volume's root as an xattr), files written through one hipfs mount
# (fsync) read back byte for byte through the other (reads spread over all
# three servers, per-server stats printed), a server killed mid-read leaves
# the read correct.
#
# Needs root, /dev/fuse, Debian's glusterfs-server and glusterfs-client
# (apt-get install glusterfs-server glusterfs-client); starts glusterd if it
# is not running. Usage: scripts/gluster-multi.sh [--files 50]
set -euo pipefail

FILES=50
while [ $# -gt 0 ]; do
    case "$1" in
        --files) FILES=$2; shift 2 ;;
        *) echo "usage: $0 [--files 50]" >&2; exit 2 ;;
    esac
done
. "$(dirname "$0")/lib/hipfs-bin.sh"
[ "$(id -u)" = 0 ] || { echo "needs root" >&2; exit 1; }
command -v gluster > /dev/null || { echo "needs glusterfs-server and glusterfs-client (Debian packages)" >&2; exit 1; }

work=$(mktemp -d /tmp/hipfs-gluster.XXXXXX)
vol=hipfs$$
host=$(hostname)
spids=()
cleanup() {
    for m in "$work/h1" "$work/h2"; do umount -l "$m" 2>/dev/null || true; done
    for p in "${spids[@]}"; do kill "$p" 2>/dev/null || true; done
    sleep 0.5
    for i in 1 2 3; do umount -l "$work/g$i" 2>/dev/null || true; done
    gluster --mode=script volume stop "$vol" force > /dev/null 2>&1 || true
    gluster --mode=script volume delete "$vol" > /dev/null 2>&1 || true
    if [ -n "${glusterd_pid:-}" ]; then kill "$glusterd_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

if ! gluster peer status > /dev/null 2>&1; then
    # Started here, in the foreground of a background job: stopped again
    # on the way out.
    mkdir -p /var/log/glusterfs /var/lib/glusterd
    glusterd -N --log-file="$work/glusterd.log" &
    glusterd_pid=$!
    for _ in $(seq 50); do gluster peer status > /dev/null 2>&1 && break; sleep 0.2; done
fi
mkdir -p "$work"/b{1,2,3} "$work"/g{1,2,3} "$work"/h{1,2}
gluster --mode=script volume create "$vol" "$host:$work/b1" "$host:$work/b2" "$host:$work/b3" force
gluster --mode=script volume start "$vol"
for i in 1 2 3; do
    mount -t glusterfs "$host:/$vol" "$work/g$i"
done
echo "GlusterFS volume $vol: 3 bricks (distribute), mounted 3 times"

ports=()
for i in 1 2 3; do
    "$bin" serve "$work/g$i" --listen 127.0.0.1:0 --transport tcp \
        > "$work/serve$i.out" 2> "$work/serve$i.err" &
    spids+=($!)
done
for i in 1 2 3; do
    wait_listening "$work/serve$i.out" || { cat "$work/serve$i.err" >&2; exit 1; }
    ports+=("$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/serve$i.out")")
    sed 's/^/  /' "$work/serve$i.err"
done
s1="127.0.0.1:${ports[0]}"; s2="127.0.0.1:${ports[1]}"; s3="127.0.0.1:${ports[2]}"
"$bin" mount "$s1,$s2,$s3:/" "$work/h1" -o transport=tcp,soft,timeout=10
"$bin" mount "$s3,$s2,$s1:/" "$work/h2" -o transport=tcp,soft,timeout=10,direct_io

echo "writing $FILES files (up to 4 MiB, fsync) through mount 1, reading them through mount 2..."
bad=0
for n in $(seq "$FILES"); do
    size=$(( (RANDOM * 32768 + RANDOM) % (4 << 20) + 1 ))
    head -c "$size" /dev/urandom > "$work/src"
    want=$(sha256sum < "$work/src" | cut -c1-64)
    dd if="$work/src" of="$work/h1/f$n" bs=1M conv=fsync status=none
    got=$(sha256sum < "$work/h2/f$n" | cut -c1-64)
    [ "$got" = "$want" ] || { echo "WRONG: f$n"; bad=$((bad + 1)); }
done
echo "  $FILES files checked, $bad wrong"
echo "the bricks hold them (distributed by GlusterFS):"
for i in 1 2 3; do echo "  brick $i: $(ls "$work/b$i" | wc -l) files"; done

head -c 256M /dev/urandom > "$work/src"
want=$(sha256sum < "$work/src" | cut -c1-64)
cp "$work/src" "$work/h1/big"
sync
echo "reading a 256 MiB file through mount 2 while server 2 is killed..."
( sleep 0.5; kill -9 "${spids[1]}" ) &
killer=$!
got=$(timeout 120 sha256sum < "$work/h2/big" | cut -c1-64) || true
wait "$killer" 2>/dev/null || true
[ "$got" = "$want" ] && echo "  bytes right" || { echo "  WRONG bytes"; bad=$((bad + 1)); }
"$bin" stats "$work/h2" | sed 's/^/  /'
[ "$bad" = 0 ] && echo "PASSED" || { echo "FAILED"; exit 1; }
