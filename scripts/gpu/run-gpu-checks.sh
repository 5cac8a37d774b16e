#!/bin/bash
# Builds the GPU test and benchmark binaries here (the device machine has no
# Rust), gathers them with the peer baselines in .gpu/ (ignored by git), and
# prints the one command that runs everything on the device machine.
#
#   scripts/gpu/run-gpu-checks.sh            # build + print the device command
#
# Then, with the device tool: run(command="bash scripts/gpu/on-device.sh",
# carry=[".gpu"], timeout_s=600). On any NVIDIA host with this checkout,
# `bash scripts/gpu/on-device.sh` does the same.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
G=.gpu
T=${CARGO_TARGET_DIR:-$root/target}
baseline=${GPU_BASELINE_DIR:-$root/../shared/tools/gpu-baseline}
mkdir -p "$G/bin" "$G/tests"

echo "== building (release)"
cargo build --release -p hipfs-cli --bin hipfs
tests=()
# The core's one test binary; on-device.sh runs its GPU modules (gpu_*, batch_async).
tests+=(--test it)
# Readahead's process-wide pinned budget, in a process of its own.
tests+=(--test readahead_budget)
# The test executables' paths come from cargo's JSON messages. Built with
# HIPFS_REQUIRE_GPU=1: the GPU tests are then not ignored (this machine has
# no GPU), and on the device a missing GPU fails them instead of passing.
HIPFS_REQUIRE_GPU=1 cargo test --release -p hipfs --no-run "${tests[@]}" --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["target"]["name"], m["executable"])
' > "$G/tests.txt"
[ -s "$G/tests.txt" ] || { echo "no GPU test executables found" >&2; exit 1; }

# hipfs' libcufile.so.0 for scripts/gpu/cufile-clients.sh (preloaded there).
cargo build --release -p hipfs-cufile
mkdir -p "$G/lib"
strip -o "$G/lib/libcufile.so.0" "$T/release/libcufile.so"
# Third-party client tests for cufile-clients.sh: taken from their
# repositories at the tags matching the device's wheels, never committed
# (.gpu/ is ignored). KvikIO: v26.10.00a from a local mirror (the `fetch`
# tool's copy, or KVIKIO_REPO). cuda-python is too large to mirror here:
# put test_cufile.py and cufile.json (cuda_bindings/tests/ at the cuda-bindings
# tag) into CUDA_PYTHON_TESTS, or straight into .gpu/thirdparty/cuda-python/.
kv_repo=${KVIKIO_REPO:-/work/.mirror/rapidsai+kvikio/repo}
kv_tag=${KVIKIO_TAG:-v26.10.00a}
if git -C "$kv_repo" rev-parse -q --verify "$kv_tag^{commit}" >/dev/null 2>&1; then
    rm -rf "$G/thirdparty/kvikio-tests" && mkdir -p "$G/thirdparty/kvikio-tests"
    for f in conftest.py utils.py test_basic_io.py test_async_io.py test_cufile_driver.py test_defaults.py; do
        git -C "$kv_repo" show "$kv_tag:python/kvikio/tests/$f" > "$G/thirdparty/kvikio-tests/$f"
    done
    echo "$kv_tag $(git -C "$kv_repo" rev-parse "$kv_tag^{commit}")" > "$G/thirdparty/kvikio-tests/SOURCE"
else
    echo "note: no KvikIO repository with $kv_tag at $kv_repo (set KVIKIO_REPO); its tests will be skipped"
fi
if [ -n "${CUDA_PYTHON_TESTS:-}" ]; then
    mkdir -p "$G/thirdparty/cuda-python"
    cp "$CUDA_PYTHON_TESTS/test_cufile.py" "$CUDA_PYTHON_TESTS/cufile.json" "$G/thirdparty/cuda-python/"
fi
[ -f "$G/thirdparty/cuda-python/test_cufile.py" ] ||
    echo "note: no .gpu/thirdparty/cuda-python/test_cufile.py (set CUDA_PYTHON_TESTS); that suite will be skipped"

# Debug info is dropped: the carried folder must stay small.
rm -f "$G"/tests/*
strip -o "$G/bin/hipfs" "$T/release/hipfs"
while read -r name exe; do strip -o "$G/tests/$name" "$exe"; done < "$G/tests.txt"

if [ -d "$baseline" ]; then
    rm -rf "$G/gpu-baseline" && cp -r "$baseline" "$G/gpu-baseline" && chmod -R u+w "$G/gpu-baseline"
else
    echo "note: no baseline folder at $baseline (set GPU_BASELINE_DIR); peers will be skipped"
fi
# RAPIDS KvikIO, the strongest peer, travels as wheels (see the baseline README).
if ! ls "$G"/whl/kvikio_cu13-*.whl >/dev/null 2>&1; then
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
        -d "$G/whl" kvikio-cu13==26.10.0 'libkvikio-cu13==26.10.*' 'rapids-logger==0.3.*' ||
        echo "note: KvikIO wheels not downloaded; its rows will be missing"
fi
# The Python package, as a wheel for the device machine's Python 3.12.
py312=${HIPFS_PY312:-}
for c in python3.12 /root/.pyenv/versions/3.12*/bin/python3.12; do
    [ -z "$py312" ] && "$c" -c 'import sys' 2>/dev/null && py312=$c
done
if [ -n "$py312" ]; then
    python3 -m pip install -q 'maturin>=1.9,<2' >/dev/null 2>&1 || true
    rm -rf "$G/pywhl" && mkdir -p "$G/pywhl"
    (cd python && python3 -m maturin build --release -q --auditwheel skip -i "$py312" -o "$root/$G/pywhl") ||
        echo "note: the hipfile wheel did not build; the Python steps will be skipped"
else
    echo "note: no python3.12 here (set HIPFS_PY312); the Python steps will be skipped"
fi
du -sh "$G"
cat <<MSG

Built into $G/. Run on the GPU machine (device tool), from the repository root:
    bash scripts/gpu/on-device.sh          carry: [".gpu"]   timeout_s: 600
    bash scripts/gpu/cufile-clients.sh     carry: [".gpu"]   timeout_s: 600  (cuFile clients on hipfs' libcufile)
Environment knobs: HIPFS_BENCH_SIZE (8G), HIPFS_COLD_SIZE (4G), HIPFS_WRITE_SIZE (2G),
HIPFS_BENCH_CONFIGS (THREADSxCHUNK list), HIPFS_GPU_STEPS (tests,userspace,uslanes,python,loader,read,peers,write,cold).
MSG
