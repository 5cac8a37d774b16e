#!/usr/bin/env bash
# The proof that the README's two commands work on a fresh machine:
# debootstrap a minimal Debian 12 root into a scratch folder, bind-mount this
# machine's Rust toolchain (read-only), /dev (for /dev/fuse), /proc and /sys,
# clone this repository inside, and run the README's two commands there as
# root. Slow (a debootstrap, package installs and the whole test suite), so
# it is not part of CI; run it before claiming the setup works.
#
#   bash scripts/fresh-machine-check.sh [--demo-only] [--keep]
#
# HIPFS_FRESH_DIR (default /var/tmp/hipfs-fresh) holds the cached debootstrap
# tarball and the scratch root. The log of each command is printed and kept
# in $HIPFS_FRESH_DIR/*.log. Needs root, debootstrap (installed if missing),
# and access to deb.debian.org and crates.io.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
DIR=${HIPFS_FRESH_DIR:-/var/tmp/hipfs-fresh}
SUITE=${HIPFS_FRESH_SUITE:-bookworm}
MIRROR=${HIPFS_FRESH_MIRROR:-http://deb.debian.org/debian}
demo_only=0
keep=0
for a in "$@"; do
    case "$a" in
        --demo-only) demo_only=1 ;;
        --keep) keep=1 ;;
        *) echo "usage: $0 [--demo-only] [--keep]" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "fresh-machine-check: needs root (debootstrap, chroot, mounts)" >&2; exit 1; }
command -v debootstrap >/dev/null || { apt-get update -q && apt-get install -y -q debootstrap; }
RUSTUP_HOME=${RUSTUP_HOME:-$(rustup show home)}
CARGO_BIN=$(dirname "$(command -v cargo)")

mkdir -p "$DIR"
TARBALL=$DIR/$SUITE-minbase.tar
if [ ! -f "$TARBALL" ]; then
    echo "== debootstrap --variant=minbase $SUITE (cached in $TARBALL)"
    rm -rf "$DIR/boot"
    debootstrap --variant=minbase "$SUITE" "$DIR/boot" "$MIRROR" >"$DIR/debootstrap.log" 2>&1 ||
        { tail -20 "$DIR/debootstrap.log"; exit 1; }
    tar -C "$DIR/boot" -cf "$TARBALL" .
    rm -rf "$DIR/boot"
fi

ROOT=$DIR/root
cleanup() {
    # Everything mounted under the root (binds, and any FUSE mount the
    # commands left), deepest first; then remove the root without ever
    # crossing into a mount that is still there.
    awk -v r="$ROOT/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r |
        xargs -r -n1 umount -l 2>/dev/null || true
    while awk -v r="$ROOT" '$2 == r {f=1} END {exit !f}' /proc/mounts; do umount -l "$ROOT" || break; done
    [ "$keep" = 1 ] || rm -rf --one-file-system "$ROOT"
}
trap cleanup EXIT
cleanup
mkdir -p "$ROOT"
tar -C "$ROOT" -xf "$TARBALL"
# The root is a mount point, as / is on a real machine: fusermount3's
# auto_unmount watcher makes its mounts private with mount(MS_PRIVATE) on
# "/", which fails with EINVAL where "/" is a plain directory of a chroot
# (seen: mounts outlived their killed daemons).
mount --bind "$ROOT" "$ROOT"
echo "== fresh root: $(. "$ROOT/etc/os-release"; echo "$PRETTY_NAME"), $(chroot "$ROOT" dpkg-query -W | wc -l) packages"
mkdir -p "$ROOT/opt/rustup" "$ROOT/opt/cargo-bin"
mount --bind "$RUSTUP_HOME" "$ROOT/opt/rustup" && mount -o remount,bind,ro "$ROOT/opt/rustup"
mount --bind "$CARGO_BIN" "$ROOT/opt/cargo-bin" && mount -o remount,bind,ro "$ROOT/opt/cargo-bin"
mount --rbind /dev "$ROOT/dev"
mount -t proc proc "$ROOT/proc"
mount --rbind /sys "$ROOT/sys"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# Networks that intercept TLS (as this workplace's does) need their CA: the
# host's bundle is handed over through the usual variables, and nothing else
# of the host's configuration is.
CA_ENV=()
if [ -f "${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}" ]; then
    cp "${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}" "$ROOT/opt/host-ca.crt"
    for v in CARGO_HTTP_CAINFO SSL_CERT_FILE PIP_CERT REQUESTS_CA_BUNDLE CURL_CA_BUNDLE GIT_SSL_CAINFO; do
        CA_ENV+=("$v=/opt/host-ca.crt")
    done
fi
git clone -q --no-local "$REPO" "$ROOT/root/hipfs"
echo "== cloned $(git -C "$ROOT/root/hipfs" log --oneline -1)"

in_root() {
    chroot "$ROOT" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
        RUSTUP_HOME=/opt/rustup CARGO_HOME=/root/.cargo RUSTUP_TOOLCHAIN=stable "${CA_ENV[@]}" \
        PATH=/opt/cargo-bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        /bin/bash -c "cd /root/hipfs && $1"
}

status=0
run_cmd() {
    local name=$1 cmd=$2 log=$DIR/$1.log t0=$SECONDS rc=0
    echo "== [fresh root] $cmd"
    in_root "$cmd" >"$log" 2>&1 || rc=$?
    tail -n "${HIPFS_FRESH_TAIL:-40}" "$log"
    echo "== [fresh root] '$cmd' exited $rc after $((SECONDS - t0)) s (full log: $log)"
    [ "$rc" = 0 ] || status=1
}
# The README's two commands, read from the README itself.
mapfile -t cmds < <(awk '/^```sh/{f=1;next} /^```/{if(f)exit} f' "$REPO/README.md" | sed 's/ *#.*//' | grep -v '^$')
[ ${#cmds[@]} -ge 2 ] || { echo "fresh-machine-check: README.md does not start with two commands" >&2; exit 1; }
run_cmd demo "${cmds[0]}"
[ "$demo_only" = 1 ] || run_cmd tests "${cmds[1]}"
[ "$status" = 0 ] && echo "== fresh-machine-check: PASSED" || echo "== fresh-machine-check: FAILED"
exit "$status"
