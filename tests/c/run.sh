#!/usr/bin/env bash
# Runs the hipFile C ABI tests: installs the library, header and pkg-config
# file into a temporary PREFIX with `make install-files`, compiles every test
# with gcc and `pkg-config --cflags --libs hipfile`, and runs them.
#
#   tests/c/run.sh                      # builds target/release/libhipfile.so first
#   HIPFILE_LIB=path/libhipfile.so tests/c/run.sh   # tests an already built library
#   tests/c/run.sh driver io            # only these tests
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

lib=${HIPFILE_LIB:-}
if [ -z "$lib" ]; then
    (cd "$root" && cargo build --release -p hipfile-capi)
    lib=$root/target/release/libhipfile.so
fi
[ -f "$lib" ] || { echo "run.sh: no library at $lib" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/hipfile-c-abi.XXXXXX")
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
prefix=$work/prefix

make -s -C "$root" install-hipfile PREFIX="$prefix" HIPFILE_LIB="$lib" >/dev/null
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
flags=$(pkg-config --cflags --libs hipfile)
cflags=$(pkg-config --cflags hipfile)
libdir=$(pkg-config --variable=libdir hipfile)

fail=0
pass=0
note() { printf '%-10s %s\n' "$1" "$2"; }

# The installed layout: the .so.0 SONAME chain and the exported symbols.
soname=$(readelf -d "$libdir/libhipfile.so" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
if [ "$soname" = libhipfile.so.0 ] && [ -L "$libdir/libhipfile.so" ] && [ -L "$libdir/libhipfile.so.0" ]; then
    note symbols "SONAME $soname, symlink chain ok"
else
    note symbols "FAIL: SONAME '$soname' or missing symlinks"; fail=1
fi
nm -D --defined-only "$libdir/libhipfile.so" | awk '{print $3}' | sort >"$work/exported.txt"
if diff -u "$here/symbols.txt" "$work/exported.txt"; then
    note symbols "exactly the $(wc -l <"$work/exported.txt") hipFile* functions exported"
    pass=$((pass + 1))
else
    note symbols "FAIL: exported dynamic symbols differ from tests/c/symbols.txt"; fail=1
fi

# The header alone must be clean C99/C11 and C++ with every warning on.
printf '#include <hipfile.h>\nint main(void){return 0;}\n' >"$work/hdr.c"
cp "$work/hdr.c" "$work/hdr.cpp"
if gcc -std=c99 -pedantic -Wall -Wextra -Werror "$work/hdr.c" -o "$work/hdr" $flags &&
    g++ -std=c++11 -pedantic -Wall -Wextra -Werror "$work/hdr.cpp" -o "$work/hdrpp" $flags; then
    note header "compiles as C99 and C++11 (-pedantic -Werror)"
    pass=$((pass + 1))
else
    note header "FAIL"; fail=1
fi

# Where the HIP runtime headers exist, the layout must hold with them too
# (the AMD Python bindings compile the header with __HIP_PLATFORM_AMD__).
if printf '#include <hip/hip_runtime_api.h>\n' | gcc -D__HIP_PLATFORM_AMD__ -E -x c - >/dev/null 2>&1; then
    if gcc -std=c11 -Wall -Wextra -Werror -D__HIP_PLATFORM_AMD__ "$here/layout.c" -o "$work/layout-hip" $flags &&
        LD_LIBRARY_PATH=$libdir "$work/layout-hip" >/dev/null; then
        note header "layout holds with <hip/hip_runtime_api.h> (__HIP_PLATFORM_AMD__)"
        pass=$((pass + 1))
    else
        note header "FAIL: layout with the HIP runtime header"; fail=1
    fi
else
    note header "no HIP runtime headers here: stand-in hipError_t/hipStream_t only"
fi

# The installed CMake package: find_package(hipfile) gives hip::hipfile.
if command -v cmake >/dev/null; then
    mkdir -p "$work/cmake-src" "$work/cmake-build"
    cat >"$work/cmake-src/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(hipfile_consumer C)
find_package(hipfile 0.5 CONFIG REQUIRED)
add_executable(consumer main.c)
target_link_libraries(consumer PRIVATE hip::hipfile)
CMAKE
    printf '#include <hipfile.h>\n#include <stdio.h>\nint main(void){unsigned a,b,c; hipFileGetVersion(&a,&b,&c); printf("%%u.%%u.%%u\\n",a,b,c); return !(a==HIPFILE_VERSION_MAJOR && b==HIPFILE_VERSION_MINOR);}\n' >"$work/cmake-src/main.c"
    cmake -S "$work/cmake-src" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" >"$work/cmake.log" 2>&1 &&
        cmake --build "$work/cmake-build" >>"$work/cmake.log" 2>&1 || true
    if [ -x "$work/cmake-build/consumer" ] && [ "$("$work/cmake-build/consumer")" = 0.5.0 ]; then
        note cmake "find_package(hipfile 0.5) -> hip::hipfile builds and runs (0.5.0, RPATH from the package)"
        pass=$((pass + 1))
    else
        note cmake "FAIL"; sed 's/^/    /' "$work/cmake.log"; fail=1
    fi
else
    note cmake "FAIL: cmake is missing (scripts/setup.sh test installs it)"; fail=1
fi

all=(layout driver io userspace batch stream stats dlopen)
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=("${all[@]}")

# Keep the library's environment knobs from changing what the tests see.
unset HIPFILE_ALLOW_COMPAT_MODE HIPFILE_FORCE_COMPAT_MODE HIPFILE_STATS_LEVEL \
    HIPFILE_UNSUPPORTED_FILE_SYSTEMS HIPFILE_LOGGING_LEVEL HIPFS_GPU_RUNTIME
export HIPFS_GPU_RUNTIME=host

for t in "${tests[@]}"; do
    src=$here/$t.c
    # The dlopen test must not link the library: it loads it like ctypes.
    link=$flags
    [ "$t" = dlopen ] && link=$cflags
    if ! gcc -std=c11 -O1 -g -Wall -Wextra -Werror -pthread "$src" -o "$work/$t" $link -ldl; then
        note "$t" "FAIL (compile)"; fail=1; continue
    fi
    if [ "$t" = dlopen ] && readelf -d "$work/$t" | grep -q 'NEEDED.*libhipfile'; then
        note "$t" "FAIL: the dlopen test links libhipfile"; fail=1; continue
    fi
    scratch=$work/scratch-$t
    mkdir -p "$scratch"
    if out=$(LD_LIBRARY_PATH=$libdir timeout 120 "$work/$t" "$scratch" "$libdir/libhipfile.so.0" 2>&1); then
        note "$t" "ok"
        pass=$((pass + 1))
    else
        note "$t" "FAIL (exit $?)"
        fail=1
    fi
    printf '%s\n' "$out" | sed 's/^/    /'
done

# The same round trip through Python's ctypes, when python3 is there.
if command -v python3 >/dev/null; then
    mkdir -p "$work/scratch-ctypes"
    if out=$(timeout 120 python3 "$here/ctypes_roundtrip.py" "$work/scratch-ctypes" "$libdir/libhipfile.so.0" 2>&1); then
        note ctypes "ok"; pass=$((pass + 1))
    else
        note ctypes "FAIL"; fail=1
    fi
    printf '%s\n' "$out" | sed 's/^/    /'
fi

echo "c-abi: $pass passed, $([ $fail = 0 ] && echo 0 || echo some) failed"
exit $fail
