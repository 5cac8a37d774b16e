#!/bin/bash
# Packs this machine's perf with every library it links and the dynamic
# loader into .gpu/perf, for scripts/gpu/perf-phase.sh on the GPU machine
# (which has no perf): run there through the packed loader, it uses none of
# that machine's libraries.
set -euo pipefail
cd "$(dirname "$0")/../.."
P=.gpu/perf
rm -rf "$P"; mkdir -p "$P"
bin=$(readlink -f "$(command -v perf)")
cp "$bin" "$P/perf"
ldd "$bin" | awk '/=>/ {print $3} /ld-linux/ {print $1}' | while read -r lib; do
    [ -f "$lib" ] && cp -L "$lib" "$P/"
done
[ -f "$P/ld-linux-x86-64.so.2" ] || cp -L /lib64/ld-linux-x86-64.so.2 "$P/"
du -sh "$P"
