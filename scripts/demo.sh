#!/usr/bin/env bash
# The main job on an embedded default: build hipfs, generate a dataset,
# read it through the hipFile API into GPU memory (host memory where there is
# no GPU) beside the parallel-pread ceiling, and show the per-path counters.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "demo: needs Rust (cargo)" >&2; exit 1; }
cargo build --release -q -p hipfs
BIN=target/release/hipfs
WORK=${HIPFS_DEMO_DIR:-/tmp/hipfs-demo}
mkdir -p "$WORK"
$BIN check "$WORK"
echo
HIPFS_STATS=1 $BIN bench read "$WORK/dataset.bin" --create "${HIPFS_DEMO_SIZE:-1G}" --repeats 3
