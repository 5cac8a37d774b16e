# Sourced by the scripts that drive a built `hipfs` (bench-multi.sh,
# fault-campaign.sh, gluster-multi.sh): sets `here` (the repository root)
# and `bin` (HIPFS_BIN, else the release build, else the debug build), or
# exits saying what to build; and `wait_listening`, below.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${HIPFS_BIN:-}
if [ -z "$bin" ]; then
    for b in "$here/target/release/hipfs" "$here/target/debug/hipfs"; do
        [ -x "$b" ] && { bin=$b; break; }
    done
fi
[ -x "${bin:-}" ] || { echo "no hipfs binary: cargo build -p hipfs-cli (or HIPFS_BIN=...)" >&2; exit 1; }

# wait_listening OUT: waits (10 s at most) until the `hipfs serve` whose
# stdout goes to OUT says where it listens; false if it never does.
wait_listening() {
    for _ in $(seq 100); do
        grep -q "listening on" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    grep -q "listening on" "$1" 2>/dev/null
}
