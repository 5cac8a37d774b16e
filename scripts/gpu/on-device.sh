#!/bin/bash
# Runs on the GPU machine, from the repository root, with .gpu/ built by
# scripts/gpu/run-gpu-checks.sh: the GPU tests, then hipfs's benchmarks
# beside the copy ceiling, the C baselines and RAPIDS KvikIO, all in one run.
# Output goes to stdout and, when $OUT is set (device tool), to $OUT/gpu-checks.log.
set -u
cd "$(dirname "$0")/../.."
G=$PWD/.gpu
[ -x "$G/bin/hipfs" ] || { echo "run scripts/gpu/run-gpu-checks.sh first (no $G/bin/hipfs)"; exit 2; }
LOG=${OUT:-/tmp}/gpu-checks.log
exec > >(tee "$LOG") 2>&1
STEPS=${HIPFS_GPU_STEPS:-tests,userspace,uslanes,python,loader,read,peers,write,cold}
USIZE=${HIPFS_USERSPACE_SIZE:-4G}
SIZE=${HIPFS_BENCH_SIZE:-8G}
COLD=${HIPFS_COLD_SIZE:-4G}
WSIZE=${HIPFS_WRITE_SIZE:-2G}
LSIZE=${HIPFS_LOADER_SIZE_GIB:-3}
CONFIGS=${HIPFS_BENCH_CONFIGS:-16x1M,16x2M,16x4M,24x2M}
export RUST_LOG=${RUST_LOG:-info}
step() { [[ ",$STEPS," == *",$1,"* ]]; }
say() { echo; echo "== $* ($(date +%T))"; }
fail=0

say machine
nvidia-smi -L; nproc; grep -E 'MemTotal|Hugepagesize' /proc/meminfo
cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null
# A directory on a real disk (O_DIRECT, page cache), not tmpfs.
W=
for d in /var/tmp /root /tmp "$PWD/.gpu"; do
    if [ -d "$d" ] && [ "$(stat -f -c %T "$d")" != tmpfs ]; then W=$d/hipfs-gpu; break; fi
done
mkdir -p "$W"; df -hT "$W"
F=$W/read-$SIZE.bin; FC=$W/cold-$COLD.bin; FW=$W/write-$WSIZE.bin
"$G/bin/hipfs" check "$W" || true

if step tests; then
    say "GPU tests (default parameters)"
    for t in "$G"/tests/*; do
        HIPFS_REQUIRE_GPU=1 HIPFS_TEST_DIR=$W/t timeout 120 "$t" gpu_ batch_async:: --test-threads=4 || fail=1
    done
    say "GPU tests again with 64 KiB chunks and 5 workers (many chunks per request)"
    for t in "$G"/tests/*; do
        HIPFS_REQUIRE_GPU=1 HIPFS_CHUNK_KB=64 HIPFS_IO_THREADS=5 HIPFS_TEST_DIR=$W/t timeout 120 "$t" gpu_ batch_async:: --test-threads=4 || fail=1
    done
    say "GPU UserspaceFs tests with the TCP lanes' device staging (HIPFS_TCP_LANE_STAGING=direct, then pipeline)"
    for mode in direct pipeline; do
        for t in "$G"/tests/*; do
            HIPFS_TCP_LANE_STAGING=$mode HIPFS_REQUIRE_GPU=1 HIPFS_TEST_DIR=$W/t timeout 120 "$t" gpu_userspace --test-threads=1 || fail=1
        done
    done
    rm -rf "$W/t"
fi

if step userspace; then
    say "UserspaceFs over TCP on loopback: into device memory, with and without readahead, then host memory ($USIZE); then 256 MiB and 1 GiB requests"
    timeout 200 "$G/bin/hipfs" bench userspace "$W/us-$USIZE.bin" --create "$USIZE" --gpu || fail=1
    say "the same into device memory without readahead (HIPFS_READAHEAD_MB=0)"
    HIPFS_READAHEAD_MB=0 timeout 200 "$G/bin/hipfs" bench userspace "$W/us-$USIZE.bin" --gpu || fail=1
    timeout 200 "$G/bin/hipfs" bench userspace "$W/us-$USIZE.bin" || fail=1
    HIPFS_STATS=1 timeout 200 "$G/bin/hipfs" bench userspace "$W/us-$USIZE.bin" --gpu --repeats 1 --request 256M || fail=1
    # Whole-checkpoint reads (the loader reads all tensor data in one call): large requests.
    timeout 200 "$G/bin/hipfs" bench userspace "$W/us-$USIZE.bin" --gpu --repeats 2 --request 1G || fail=1
fi

if step uslanes; then
    say "UserspaceFs into device memory: client lanes 4, 8, 16, then the server staging its reads (--no-sendfile)"
    [ -f "$W/us-$USIZE.bin" ] || head -c $((${USIZE%G} << 30)) /dev/urandom > "$W/us-$USIZE.bin"
    for l in 4 8 16; do
        HIPFS_REMOTE_LANES=$l timeout 200 "$G/bin/hipfs" bench userspace "$W/us-$USIZE.bin" --gpu --repeats 2 || fail=1
    done
    timeout 200 "$G/bin/hipfs" bench userspace "$W/us-$USIZE.bin" --gpu --repeats 2 --no-sendfile || fail=1
fi

if step python; then
    if ls "$G"/pywhl/*.whl >/dev/null 2>&1; then
        say "Python package: GPU round trips (CuPy, torch), USERSPACE_FS from a hipfs mount, benchmark"
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/pysite "$G"/pywhl/*.whl &&
            export PYTHONPATH=/tmp/pysite${PYTHONPATH:+:$PYTHONPATH}
        M=$W/mnt; E=$W/export; mkdir -p "$M" "$E"
        head -c $((64 << 20)) /dev/urandom > "$E/shard.bin"
        "$G/bin/hipfs" mount --local "$E" "$M" || fail=1
        PYTHONUNBUFFERED=1 timeout 200 python3 python/tests/gpu_check.py --dir "$W" --hipfs-file "$M/shard.bin" || fail=1
        "$G/bin/hipfs" umount "$M" || fail=1
        PYTHONUNBUFFERED=1 timeout 200 python3 python/bench.py --size-mib 4096 --repeat 3 --dir "$W" || fail=1
    else
        say "Python package: no wheel in $G/pywhl (run-gpu-checks.sh builds it with python3.12); skipped"
    fi
fi

if step loader; then
    if ls "$G"/pywhl/*.whl >/dev/null 2>&1; then
        say "safetensors loader: hipfile.torch.load_file against safetensors.torch.load_file on CUDA (${LSIZE} GiB), local disk and a hipfs mount --local of it"
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/pysite "$G"/pywhl/*.whl || fail=1
        LE=$W/loader; LM=$W/loader-mnt; mkdir -p "$LE" "$LM"
        mnt=(--mount "$LM")
        "$G/bin/hipfs" mount --local "$LE" "$LM" || { fail=1; mnt=(); echo "hipfs mount failed: local disk only"; }
        PYTHONPATH=/tmp/pysite${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 timeout 300 \
            python3 scripts/gpu/loader_bench.py --dir "$LE" "${mnt[@]}" --size-gib "$LSIZE" --repeat 3 || fail=1
        [ ${#mnt[@]} -eq 0 ] || "$G/bin/hipfs" umount "$LM" || fail=1
    else
        say "safetensors loader: no wheel in $G/pywhl (run-gpu-checks.sh builds it with python3.12); skipped"
    fi
fi

if step read; then
    say "hipfs read $SIZE, page cache (configs $CONFIGS)"
    timeout 200 "$G/bin/hipfs" bench read "$F" --create "$SIZE" --configs "$CONFIGS" --gpu || fail=1
    say "library defaults"
    timeout 200 "$G/bin/hipfs" bench read "$F" --gpu || fail=1
fi

if step peers; then
    [ -f "$F" ] || timeout 200 "$G/bin/hipfs" bench read "$F" --gpu --create "$SIZE" --repeats 1
    if [ -d "$G/gpu-baseline" ]; then
        say "C baselines (gpu-baseline/run.sh)"
        timeout 150 bash "$G/gpu-baseline/run.sh" "$F" h2d 16 naive 16 dbuf 8 mt8 8 mt16 8 mt16 2
    fi
    if ls "$G"/whl/*.whl >/dev/null 2>&1; then
        say "RAPIDS KvikIO"
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$G"/whl/*.whl &&
            PYTHONPATH=/tmp/site timeout 150 python3 scripts/gpu/kvikio_rw.py "$F" read 3
    fi
    say "hipfs again right after the peers (same state of the machine)"
    timeout 200 "$G/bin/hipfs" bench read "$F" --configs 16x2M,16x4M --gpu || fail=1
fi

if step write; then
    say "writes from device memory ($WSIZE)"
    timeout 200 "$G/bin/hipfs" bench write "$FW" --create "$WSIZE" --configs 16x4M --gpu || fail=1
    if ls "$G"/whl/*.whl >/dev/null 2>&1; then
        PYTHONPATH=/tmp/site timeout 150 python3 scripts/gpu/kvikio_rw.py "$FW" write 3
    fi
fi

if step cold; then
    say "cold O_DIRECT reads ($COLD) beside dd iflag=direct"
    timeout 200 "$G/bin/hipfs" bench read "$FC" --create "$COLD" --direct --configs 16x4M --gpu || fail=1
fi
say "done (failures: $fail)"
exit $fail
