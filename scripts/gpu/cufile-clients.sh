#!/bin/bash
# Runs unchanged cuFile clients on hipfs' libcufile.so.0 on the GPU machine,
# preloaded (LD_PRELOAD) so it wins over the nvidia-cufile wheel's copy that
# PyTorch (RPATH) and cuda.pathfinder would load otherwise. From the
# repository root, with .gpu/ built by scripts/gpu/run-gpu-checks.sh:
#
#   bash scripts/gpu/cufile-clients.sh          (device tool: carry [".gpu"], timeout_s 600)
#   CUFILE_STEPS=probe,cudapython,torch bash scripts/gpu/cufile-clients.sh
#
# Steps (CUFILE_STEPS, comma list; default all): probe, cudapython (cuda-python's
# test_cufile.py), kvikio (KvikIO's test_basic_io/test_async_io/test_cufile_driver/
# test_defaults with KVIKIO_COMPAT_MODE=OFF), torch (GdsFile round trips +
# gds_register_buffer, GdsFile vs torch.load), bench (KvikIO through hipfs'
# libcufile vs KvikIO POSIX vs `hipfs bench read --gpu`, same file, same run),
# mount (KvikIO reading a file on a hipfs mount through hipfs' libcufile, which
# binds it to the direct remote path, beside `hipfs bench userspace --gpu`), nvidia (cuda-python's tests on NVIDIA's own libcufile, for comparison; off by
# default). Each step prints a PASS/FAIL/SKIP line; the summary at the end
# lists them, and the exit status is 1 if any step failed.
# Output goes to stdout and, when $OUT is set (device tool), to $OUT/cufile-clients.log.
set -u
cd "$(dirname "$0")/../.."
R=$PWD
G=$R/.gpu
LIB=$G/lib/libcufile.so.0
LOG=${OUT:-/tmp}/cufile-clients.log
exec > >(tee "$LOG") 2>&1
STEPS=${CUFILE_STEPS:-probe,cudapython,kvikio,torch,bench,mount}
BENCH_SIZE=${CUFILE_BENCH_SIZE:-8G}
step() { [[ ",$STEPS," == *",$1,"* ]]; }
say() { echo; echo "== $* ($(date +%T))"; }
declare -a SUMMARY=()
FAILED=0
result() { # NAME PASS|FAIL|SKIP DETAIL
    SUMMARY+=("$(printf '%-12s %-4s %s' "$1" "$2" "$3")")
    echo "$1: $2 $3"
    [ "$2" = FAIL ] && FAILED=1
    return 0
}
[ -f "$LIB" ] || { echo "no $LIB: run scripts/gpu/run-gpu-checks.sh here first"; exit 2; }

# A working directory on a real disk (ext4/xfs: O_DIRECT, and cuda-python's
# file tests check `findmnt -T .`).
W=
for d in /var/tmp /root /tmp "$G"; do
    if [ -d "$d" ] && [ "$(stat -f -c %T "$d")" != tmpfs ]; then W=$d/hipfs-cufile; break; fi
done
mkdir -p "$W"
FS=$(findmnt -no FSTYPE -T "$W" 2>/dev/null || echo unknown)
# KvikIO counts cuFile as available only if /run/udev is a directory; hipfs
# needs nothing from udev, so an empty one is enough.
if [ ! -d /run/udev ]; then
    mkdir -p /run/udev 2>/dev/null && echo "note: created an empty /run/udev (KvikIO's cuFile availability check)"
fi
# KvikIO and cuda-python's async tests go through cuFile only with a config file.
echo '{}' > "$W/cufile.json"
export CUFILE_ENV_PATH_JSON=${CUFILE_ENV_PATH_JSON:-$W/cufile.json}
unset CI
# KvikIO's wheels (as on-device.sh installs them).
if ls "$G"/whl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site/kvikio ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$G"/whl/*.whl
fi
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}

# pytest with our library preloaded; prints the summary line and failures.
run_pytest() { # NAME DIR ARGS...
    local name=$1 dir=$2; shift 2
    local xml=$W/$name.xml
    (cd "$dir" && env LD_PRELOAD="$LIB" timeout "${PYTEST_TIMEOUT:-400}" python3 -m pytest -p no:cacheprovider \
        -q -rfE --junitxml="$xml" "$@")
    local rc=$?
    local counts
    counts=$(python3 - "$xml" <<'PY' 2>/dev/null
import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot()
s = r if r.tag == "testsuite" else r.find("testsuite")
t, f, e, k = (int(s.get(a, 0)) for a in ("tests", "failures", "errors", "skipped"))
print(f"{t - f - e - k} passed, {f} failed, {e} errors, {k} skipped of {t}")
for c in s.iter("testcase"):
    for bad in ("failure", "error"):
        x = c.find(bad)
        if x is not None:
            msg = (x.get("message") or "").splitlines()[0][:160] if x.get("message") else ""
            print(f"    {bad}: {c.get('classname')}::{c.get('name')}: {msg}")
PY
)
    echo "$counts"
    if [ $rc -eq 0 ]; then result "$name" PASS "$(echo "$counts" | head -1)"
    elif [ $rc -eq 5 ]; then result "$name" SKIP "no tests collected"
    else result "$name" FAIL "$(echo "$counts" | head -1) (pytest exit $rc)"; fi
}

if step probe; then
    say "probe"
    nvidia-smi -L
    python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "gds", hasattr(torch._C, "_gds_register_buffer"))' 2>&1
    python3 -m pip show cuda-bindings nvidia-cufile cupy-cuda13x 2>/dev/null | grep -E '^(Name|Version|Location)'
    TL=$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so"))' 2>/dev/null)
    if [ -f "$TL" ]; then
        readelf -d "$TL" | grep -E 'NEEDED.*cufile|RPATH|RUNPATH'
        echo "cuFile symbols libtorch_cuda.so needs: $(nm -D --undefined-only "$TL" | awk '/cuFile/{print $2}' | tr '\n' ' ')"
    fi
    echo "work dir $W ($FS); /run/udev: $([ -d /run/udev ] && echo present || echo absent); CUFILE_ENV_PATH_JSON=$CUFILE_ENV_PATH_JSON"
    "$G/bin/hipfs" check "$W" 2>&1 | grep -E '^cufile' || true
    env LD_PRELOAD="$LIB" "$G/bin/hipfs" check "$W" 2>&1 | grep -E '^cufile' || true
    # The preload must be what a Python process maps, and cuFileGetVersion must be ours.
    v=$(env LD_PRELOAD="$LIB" python3 -c '
import ctypes
lib = ctypes.CDLL("libcufile.so.0")
v = ctypes.c_int(0)
e = lib.cuFileGetVersion(ctypes.byref(v))
maps = {l.split()[-1] for l in open("/proc/self/maps") if "libcufile" in l}
print(v.value, sorted(maps))' 2>&1)
    echo "preloaded: cuFileGetVersion -> $v"
    case "$v" in 1150*"$LIB"*) result probe PASS "hipfs libcufile preloaded (version 1150), fs $FS" ;;
        *) result probe FAIL "preload not effective: $v" ;; esac
fi

if step cudapython; then
    say "cuda-python cuda_bindings/tests/test_cufile.py on hipfs' libcufile"
    T=$G/thirdparty/cuda-python
    if [ -f "$T/test_cufile.py" ] && [ -f "$T/cufile.json" ]; then
        rm -rf "$W/cp" && mkdir -p "$W/cp" && cp "$T/test_cufile.py" "$T/cufile.json" "$W/cp/"
        run_pytest cuda-python "$W/cp" test_cufile.py
    else
        result cuda-python SKIP "no $T/test_cufile.py + cufile.json (see run-gpu-checks.sh: CUDA_PYTHON_TESTS)"
    fi
fi

if step nvidia; then
    say "cuda-python test_cufile.py on NVIDIA's libcufile (no preload), for comparison"
    T=$G/thirdparty/cuda-python
    if [ -f "$T/test_cufile.py" ]; then
        rm -rf "$W/cpn" && mkdir -p "$W/cpn" && cp "$T/test_cufile.py" "$T/cufile.json" "$W/cpn/"
        (cd "$W/cpn" && timeout 300 python3 -m pytest -p no:cacheprovider -q test_cufile.py 2>&1 | tail -3)
        result nvidia-ref SKIP "reference only (NVIDIA's library; not counted)"
    else
        result nvidia-ref SKIP "no test file"
    fi
fi

if step kvikio; then
    say "KvikIO tests with KVIKIO_COMPAT_MODE=OFF on hipfs' libcufile"
    T=$G/thirdparty/kvikio-tests
    if ! python3 -c 'import kvikio' 2>/dev/null; then
        result kvikio SKIP "kvikio is not importable (no wheels in $G/whl)"
    elif [ ! -f "$T/test_basic_io.py" ]; then
        result kvikio SKIP "no KvikIO tests in $T (run-gpu-checks.sh copies them from the KvikIO repository)"
    else
        rm -rf "$W/kv" && cp -r "$T" "$W/kv"
        env LD_PRELOAD="$LIB" KVIKIO_COMPAT_MODE=OFF python3 -c '
import kvikio, kvikio.defaults, kvikio.cufile_driver as d
print("kvikio", kvikio.__version__, "compat_mode", kvikio.defaults.get("compat_mode"),
      "libcufile", d.libcufile_version())' 2>&1
        export KVIKIO_COMPAT_MODE=OFF
        run_pytest kvikio "$W/kv" test_basic_io.py test_async_io.py test_cufile_driver.py test_defaults.py
        unset KVIKIO_COMPAT_MODE
    fi
fi

if step torch; then
    say "PyTorch torch.cuda.gds.GdsFile on hipfs' libcufile"
    if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
        if env LD_PRELOAD="$LIB" timeout 300 python3 "$R/scripts/gpu/torch_gds_roundtrip.py" "$W" "${CUFILE_TORCH_MIB:-1024}"; then
            result torch-gds PASS "round trips exact (see bench line above)"
        else
            result torch-gds FAIL "see torch-gds lines above"
        fi
    else
        result torch-gds SKIP "torch with CUDA not importable"
    fi
fi

if step bench; then
    say "benchmark: KvikIO on hipfs' libcufile (compat OFF) vs KvikIO POSIX (compat ON) vs hipfs bench read --gpu ($BENCH_SIZE, page cache)"
    F=$W/bench-$BENCH_SIZE.bin
    timeout 200 "$G/bin/hipfs" bench read "$F" --create "$BENCH_SIZE" --gpu --repeats 1 >/dev/null 2>&1 || true
    if python3 -c 'import kvikio, cupy' 2>/dev/null; then
        echo "-- KvikIO through hipfs' libcufile"
        env LD_PRELOAD="$LIB" KVIKIO_COMPAT_MODE=OFF timeout 200 python3 "$R/scripts/gpu/kvikio_rw.py" "$F" read 3 | tee "$W/kv-hipfs.txt"
        echo "-- KvikIO POSIX (its own thread pool, no cuFile)"
        env KVIKIO_COMPAT_MODE=ON timeout 200 python3 "$R/scripts/gpu/kvikio_rw.py" "$F" read 3 | tee "$W/kv-posix.txt"
        echo "-- hipfs bench read --gpu (same file, same run)"
        timeout 200 "$G/bin/hipfs" bench read "$F" --gpu | tee "$W/hipfs-bench.txt"
        best() { grep -o 'GiB/s=[0-9.]*' "$1" | cut -d= -f2 | sort -g | tail -1; }
        a=$(best "$W/kv-hipfs.txt"); b=$(best "$W/kv-posix.txt")
        if [ -n "$a" ] && [ -n "$b" ]; then
            r=$(python3 -c "print(f'{$a/$b:.2f}')")
            echo "KvikIO best: through hipfs libcufile $a GiB/s, POSIX $b GiB/s, ratio $r (hipfs bench lines above)"
            if python3 -c "import sys; sys.exit(0 if $a >= $b else 1)"; then
                result bench PASS "KvikIO on hipfs libcufile $a GiB/s >= KvikIO POSIX $b GiB/s (x$r)"
            else
                result bench FAIL "KvikIO on hipfs libcufile $a GiB/s < KvikIO POSIX $b GiB/s (x$r)"
            fi
        else
            result bench FAIL "a KvikIO run printed no figure"
        fi
    else
        result bench SKIP "kvikio/cupy not importable"
    fi
    rm -f "$F"
fi

if step mount; then
    say "KvikIO on a hipfs mount through hipfs' libcufile (direct remote path) vs hipfs bench userspace --gpu (${MOUNT_SIZE:=4G})"
    E=$W/export; M=$W/mnt; mkdir -p "$E" "$M"
    timeout 200 "$G/bin/hipfs" bench read "$E/kv.bin" --create "$MOUNT_SIZE" --repeats 1 >/dev/null 2>&1 || true
    if ! python3 -c 'import kvikio, cupy' 2>/dev/null; then
        result mount SKIP "kvikio/cupy not importable"
    elif ! "$G/bin/hipfs" mount --local "$E" "$M"; then
        result mount FAIL "hipfs mount --local failed"
    else
        # HIPFS_STATS=1: the library prints which path moved the bytes at driver close.
        env LD_PRELOAD="$LIB" KVIKIO_COMPAT_MODE=OFF HIPFS_STATS=1 timeout 200 python3 "$R/scripts/gpu/kvikio_rw.py" "$M/kv.bin" read 3 2>&1 |
            tee "$W/kv-mount.txt"
        "$G/bin/hipfs" umount "$M" || true
        echo "-- the direct path's own figure: hipfs bench userspace --gpu (same file, loopback server)"
        timeout 200 "$G/bin/hipfs" bench userspace "$E/kv.bin" --gpu --repeats 3 2>&1 | tee "$W/us-bench.txt"
        a=$(grep -o 'GiB/s=[0-9.]*' "$W/kv-mount.txt" | cut -d= -f2 | sort -g | tail -1)
        remote=$(awk '$1 == "remote" {print $2}' "$W/kv-mount.txt" | tail -1)
        if [ -n "$a" ]; then
            result mount PASS "KvikIO on a hipfs mount $a GiB/s; bytes through the direct remote path at close: ${remote:-not printed} (compare the bench userspace lines)"
        else
            result mount FAIL "KvikIO printed no figure on the mount (see above)"
        fi
    fi
    rm -f "$E/kv.bin"
fi

say "summary"
printf '%s\n' "${SUMMARY[@]}"
echo "cufile-clients: $([ $FAILED = 0 ] && echo PASS || echo FAIL)"
exit $FAILED
