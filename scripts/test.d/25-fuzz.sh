#!/usr/bin/env bash
# The wire-protocol fuzz target (fuzz/), run for a bounded time on stable
# Rust: the target is built with libFuzzer's coverage instrumentation
# (sancov flags rustc accepts on stable; cargo-fuzz itself wants nightly),
# then libFuzzer runs it for HIPFS_FUZZ_SECONDS
# (default 60). A crash fails the stage and leaves the input in
# $HIPFS_FUZZ_DIR/artifacts.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${HIPFS_FUZZ_SECONDS:-60}
DIR=${HIPFS_FUZZ_DIR:-/tmp/hipfs-fuzz}
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
mkdir -p "$DIR/corpus" "$DIR/artifacts"
# --target keeps the instrumentation off build scripts and proc macros.
RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks" \
    cargo build --release -q --manifest-path fuzz/Cargo.toml --target "$TRIPLE" \
    --target-dir "${CARGO_TARGET_DIR:-target}/fuzz"
BIN=${CARGO_TARGET_DIR:-target}/fuzz/$TRIPLE/release/proto_decode
echo "fuzzing the protocol decoders for ${SECS} s"
"$BIN" "$DIR/corpus" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$DIR/artifacts/" -print_final_stats=1 2>&1 | grep -E "^(#|stat::number_of_executed_units|stat::peak_rss|==|SUMMARY|panicked)|Done" | tail -8
