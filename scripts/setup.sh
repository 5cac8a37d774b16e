#!/usr/bin/env bash
# Installs the system packages hipfs needs on Debian 12 / Ubuntu 24.04, and
# only those missing. Called by scripts/demo.sh (`setup.sh demo`), by
# scripts/test.sh and .ci/run (`setup.sh test`); safe to run again.
#
#   bash scripts/setup.sh [demo|test] [--dry-run]
#
# `demo` is what building and running hipfs needs; `test` adds what the whole
# test suite uses (the verbs VM, the hip feature build, the Python stage,
# POSIX tools). Each group says why it is needed. Without root or without
# apt-get it prints the one command to run and exits 1 (only when something
# is missing).
set -euo pipefail

want=demo
dry=0
for a in "$@"; do
    case "$a" in
        demo | test) want=$a ;;
        --dry-run) dry=1 ;;
        -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "setup: unknown argument '$a' (use demo, test, --dry-run)" >&2; exit 2 ;;
    esac
done

# group|why|packages
groups=(
    "build|a C toolchain and pkg-config for the -sys crates|build-essential pkg-config"
    "verbs|the verbs transport (default cargo feature \`verbs\`): rdma-core headers, libclang for bindgen|libibverbs-dev librdmacm-dev libclang-dev clang"
    "rdma runtime|libibverbs/librdmacm at run time and the soft-RoCE provider|libibverbs1 librdmacm1 ibverbs-providers"
    "fuse|fusermount3 and mount -t fuse.hipfs (FUSE mounts as non-root, auto_unmount)|fuse3"
    "demo tools|python3 and util-linux's mountpoint, used by scripts/demo.sh|python3 util-linux ca-certificates"
)
if [ "$want" = test ]; then
    groups+=(
        "verbs VM|the soft-RoCE QEMU VMs of the verbs tests (scripts/test.d/30)|qemu-system-x86 busybox-static kmod cpio iproute2 ibverbs-utils rdmacm-utils perftest"
        "hip|the \`hip\` feature build against AMD's headers (no AMD device needed)|libamdhip64-dev"
        "python|the Python package's tests in a fresh venv (scripts/test.d/20)|python3-pip python3-venv"
        "posix tools|tools the mount tests drive (fio, tar, rsync, xattr and ACL tools)|fio rsync tar attr acl"
        "sshfs peer|the peer of mount-scripts/bench-vs-sshfs.sh|openssh-server sshfs"
        "cmake|the C ABI test of the installed CMake package (find_package(hipfile), tests/c/run.sh)|cmake"
        "pjdfstest|building pjdfstest for scripts/pjdfstest.sh (which installs them itself too)|autoconf automake"
    )
fi

command -v cargo >/dev/null 2>&1 || {
    echo "setup: Rust is missing (cargo not on PATH). Install it from https://rustup.rs, then run this again." >&2
    exit 1
}

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "setup: this is not a Debian/Ubuntu system (no dpkg); install the equivalents of:" >&2
    for g in "${groups[@]}"; do IFS='|' read -r name why pkgs <<<"$g"; echo "  $name: $pkgs  ($why)" >&2; done
    exit 1
fi

missing=()
for g in "${groups[@]}"; do
    IFS='|' read -r name why pkgs <<<"$g"
    need=()
    for p in $pkgs; do installed "$p" || need+=("$p"); done
    if [ ${#need[@]} -gt 0 ]; then
        echo "setup: $name: ${need[*]} -- $why"
        missing+=("${need[@]}")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: every package for '$want' is present"
    exit 0
fi
if [ "$dry" = 1 ]; then
    echo "setup: would install: ${missing[*]}"
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    why="not root"
    command -v apt-get >/dev/null 2>&1 || why="no apt-get"
    echo "setup: cannot install ($why). Run as root: apt-get install ${missing[*]}" >&2
    exit 1
fi
echo "setup: installing ${#missing[@]} package(s) with apt-get"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"
