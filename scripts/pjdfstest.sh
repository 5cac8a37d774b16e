#!/usr/bin/env bash
# Runs pjdfstest (github.com/pjd/pjdfstest) as root on a local directory
# and through a hipfs mount of a directory on the same filesystem (default
# mount options, `hipfs mount --local`), and prints for each the files
# passed and failed, then the files whose outcome differs.
#
#   sudo bash scripts/pjdfstest.sh [TESTS...]     # e.g. chmod rename/00.t
#
# pjdfstest is never part of this repository: it is taken into
# .thirdparty/pjdfstest (git-ignored) from PJDFSTEST_GIT (a git directory,
# e.g. a mirror) or cloned from GitHub, then built there (autoconf, automake
# and a C compiler; installed with apt-get when missing, as scripts/setup.sh
# test does). HIPFS_BIN: the hipfs binary (default target/release/hipfs).
# PJDFSTEST_JOBS: test files run at once (default 2). WORK: where the
# directories go (default a fresh one under /tmp).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
src=$repo/.thirdparty/pjdfstest
hipfs=${HIPFS_BIN:-$repo/target/release/hipfs}
jobs=${PJDFSTEST_JOBS:-2}

[ "$(id -u)" = 0 ] || { echo "pjdfstest.sh: run as root (pjdfstest switches users)" >&2; exit 2; }
[ -x "$hipfs" ] || { echo "pjdfstest.sh: no hipfs binary at $hipfs (cargo build --release -p hipfs-cli, or set HIPFS_BIN)" >&2; exit 2; }
command -v prove >/dev/null || { echo "pjdfstest.sh: prove (perl) is missing" >&2; exit 2; }

missing=()
for t in autoreconf:autoconf automake:automake cc:build-essential make:build-essential; do
    command -v "${t%%:*}" >/dev/null || missing+=("${t#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "pjdfstest.sh: installing ${missing[*]}"
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x "$src/pjdfstest" ]; then
    rm -rf "$src"
    mkdir -p "$src"
    if [ -n "${PJDFSTEST_GIT:-}" ]; then
        git --git-dir="$PJDFSTEST_GIT" archive HEAD | tar -x -C "$src"
    else
        git clone -q --depth 1 https://github.com/pjd/pjdfstest "$src"
    fi
    (cd "$src" && autoreconf -ifs >/dev/null 2>&1 && ./configure -q >/dev/null && make -s pjdfstest >/dev/null)
fi

work=${WORK:-$(mktemp -d /tmp/hipfs-pjdfstest.XXXXXX)}
mkdir -p "$work/local" "$work/export" "$work/mnt"
cleanup() {
    "$hipfs" umount "$work/mnt" 2>/dev/null || true
    sleep 0.3
    [ -n "${WORK:-}" ] || rm -rf "$work"
}
trap cleanup EXIT INT TERM

tests=()
if [ $# -eq 0 ]; then
    tests=("$src/tests")
else
    for t in "$@"; do tests+=("$src/tests/$t"); done
fi

# prove's progress lines: one per file, "NAME ..... ok" or "..... Failed N/M
# subtests" (the summary report after them, which also lists files whose
# TODO tests passed, is not counted).
run() { # DIR LABEL
    local dir=$1 label=$2
    mkdir -p "$dir/pjd"
    (cd "$dir/pjd" && prove -r -j "$jobs" "${tests[@]}" 2>/dev/null || true) |
        sed -n -E "s|^$src/tests/([^ ]+\.t) \.+ (.*)$|\1 \2|p" |
        awk '{ f=$1; $1=""; sub(/^ /,""); print f "\t" ($0 ~ /^ok/ ? "ok" : "FAIL " $0) }' |
        sort >"$work/$label.txt"
}

echo "pjdfstest.sh: local directory $work/local"
run "$work/local" local
"$hipfs" mount --local "$work/export" "$work/mnt"
echo "pjdfstest.sh: hipfs mount --local $work/export $work/mnt (default options)"
run "$work/mnt" mount

for label in local mount; do
    total=$(wc -l <"$work/$label.txt")
    failed=$(grep -c $'\tFAIL' "$work/$label.txt" || true)
    echo "pjdfstest $label: $((total - failed)) of $total files passed, $failed failed"
done
echo "files that differ (local | mount):"
join -t $'\t' "$work/local.txt" "$work/mount.txt" | awk -F'\t' '$2 != $3 { print "  " $1 ": " $2 " | " $3 }'
