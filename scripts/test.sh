#!/usr/bin/env bash
# The whole test suite: format and lint, the Rust tests (unit, end to end
# with real files, a real FUSE mount and a real server on loopback, the C ABI
# compiled with gcc), the HIP feature build, the Python package, and the verbs
# transport's tests inside a soft-RoCE VM. Each stage prints its name.
set -euo pipefail
cd "$(dirname "$0")/.."

stage() { printf '\n==== %s ====\n' "$*"; }

stage "system packages (scripts/setup.sh test)"
bash scripts/setup.sh test

stage "cargo fmt --check"
cargo fmt --all -- --check

stage "layers: no module cycle in the core (scripts/check-layers.py)"
python3 scripts/check-layers.py >/dev/null

stage "unsafe only in the FFI, syscall and lent-memory layers (scripts/check-unsafe.sh)"
bash scripts/check-unsafe.sh

stage "cargo clippy (all targets, warnings are errors)"
cargo clippy --all-targets -- -D warnings

stage "build without default features (no verbs: needs no rdma-core headers, no libclang)"
cargo check --workspace --no-default-features

stage "cargo test (workspace)"
cargo test --no-fail-fast

stage "hip feature build (Debian libamdhip64-dev, no AMD device)"
if [ -e /usr/include/hip/hip_runtime_api.h ]; then
    HIP_PATH=/usr cargo build -p hipfs-cli --features hip
    HIP_PATH=/usr cargo run -q -p hipfs-cli --features hip -- check . | tee /tmp/hipfs-hip-check.txt
    grep -q "runtime in use   ok   host" /tmp/hipfs-hip-check.txt
else
    echo "skipped: /usr/include/hip missing (install libamdhip64-dev)"
fi

for extra in scripts/test.d/*.sh; do
    [ -e "$extra" ] || continue
    stage "$extra"
    bash "$extra"
done

stage "all tests passed"
