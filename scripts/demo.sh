#!/usr/bin/env bash
# The main job on an embedded default: build hipfs, generate a dataset, serve
# it (`hipfs serve`) and mount it (`hipfs mount`) on loopback, show it with
# POSIX tools, read it through the hipFile API into GPU memory (host memory
# where there is no GPU) beside the ceiling measured in the same run, then
# unmount. Needs root (FUSE mounts) and /dev/fuse.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh demo
[ -e /dev/fuse ] || { echo "demo: /dev/fuse is missing (modprobe fuse)" >&2; exit 1; }
cargo build --release -q -p hipfs-cli
BIN=$PWD/target/release/hipfs
WORK=${HIPFS_DEMO_DIR:-/tmp/hipfs-demo}
SIZE=${HIPFS_DEMO_SIZE:-1G}
PORT=${HIPFS_DEMO_PORT:-$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")}
DATA=$WORK/export
MNT=$WORK/mnt
mkdir -p "$DATA/small" "$MNT"

cleanup() {
    "$BIN" umount "$MNT" 2>/dev/null || true
    [ -n "${SERVER:-}" ] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null || true
}
trap cleanup EXIT

echo "== hipfs check"
"$BIN" check "$WORK"

echo "== a dataset: one $SIZE shard and 100 small files in $DATA"
[ -f "$DATA/shard-0.bin" ] || "$BIN" bench read "$DATA/shard-0.bin" --create "$SIZE" --repeats 1 --quiet >/dev/null
for i in $(seq 1 100); do printf 'sample %d\n' "$i" > "$DATA/small/$i.txt"; done

echo "== hipfs serve $DATA on 127.0.0.1:$PORT, hipfs mount on $MNT"
"$BIN" serve "$DATA" --listen "127.0.0.1:$PORT" &
SERVER=$!
for _ in $(seq 50); do
    kill -0 "$SERVER" 2>/dev/null || { echo "demo: hipfs serve exited" >&2; exit 1; }
    "$BIN" mount "127.0.0.1:$PORT" "$MNT" 2>/dev/null && break
    sleep 0.2
done
mountpoint -q "$MNT"
grep " $MNT " /proc/mounts

echo "== POSIX tools on the mount"
ls -l "$MNT" | head
ls "$MNT/small" | wc -l
cat "$MNT/small/42.txt"
a=$(sha256sum < "$DATA/shard-0.bin" | cut -d' ' -f1)
b=$(sha256sum < "$MNT/shard-0.bin" | cut -d' ' -f1)
echo "sha256 local $a"
echo "sha256 mount $b"
[ "$a" = "$b" ]

echo "== the hipFile API reads the shard from the mount"
if "$BIN" check "$WORK" | grep -q "runtime in use   ok   cuda"; then
    "$BIN" bench read "$MNT/shard-0.bin" --gpu --repeats 3
else
    HIPFS_STATS=1 "$BIN" bench read "$MNT/shard-0.bin" --repeats 3 --quiet
fi

echo "== UserspaceFs: the library reads the shard straight from the server (no FUSE on the data path)"
"$BIN" bench userspace "$DATA/shard-0.bin" --repeats 1 --request 16M

echo "== unmount"
"$BIN" umount "$MNT"
! mountpoint -q "$MNT"
echo "demo done"
