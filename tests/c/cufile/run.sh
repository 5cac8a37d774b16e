#!/usr/bin/env bash
# Runs the cuFile C ABI tests: installs libcufile.so.0 and cufile.h into a
# temporary PREFIX with `make install-cufile`, checks the SONAME and the
# exported symbols (exactly the cuFile* list in symbols.txt), compiles the
# header as C99/C++11, then compiles every test with gcc and runs it.
#
#   tests/c/cufile/run.sh                             # builds target/release/libcufile.so first
#   CUFILE_LIB=path/libcufile.so tests/c/cufile/run.sh   # tests an already built library
#   tests/c/cufile/run.sh driver io                   # only these tests
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)

lib=${CUFILE_LIB:-}
if [ -z "$lib" ]; then
    (cd "$root" && cargo build --release -p hipfs-cufile)
    lib=$root/target/release/libcufile.so
fi
[ -f "$lib" ] || { echo "run.sh: no library at $lib" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/cufile-c-abi.XXXXXX")
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
prefix=$work/prefix
make -s -C "$root" install-cufile PREFIX="$prefix" CUFILE_LIB="$lib" >/dev/null
libdir=$prefix/lib
inc=$prefix/include

fail=0
pass=0
note() { printf '%-10s %s\n' "$1" "$2"; }

soname=$(readelf -d "$libdir/libcufile.so" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
if [ "$soname" = libcufile.so.0 ] && [ -L "$libdir/libcufile.so" ] && [ -L "$libdir/libcufile.so.0" ]; then
    note symbols "SONAME $soname, symlink chain ok"
else
    note symbols "FAIL: SONAME '$soname' or missing symlinks"; fail=1
fi
nm -D --defined-only "$libdir/libcufile.so" | awk '{print $3}' | sort >"$work/exported.txt"
if diff -u "$here/symbols.txt" "$work/exported.txt" && ! grep -qv '^cuFile' "$work/exported.txt"; then
    note symbols "exactly the $(wc -l <"$work/exported.txt") cuFile* functions exported"
    pass=$((pass + 1))
else
    note symbols "FAIL: exported dynamic symbols differ from tests/c/cufile/symbols.txt"; fail=1
fi
# Unversioned, as NVIDIA's: clients bind plain names.
if readelf -V "$libdir/libcufile.so" | grep -q 'Version definition'; then
    note symbols "FAIL: the library defines symbol versions"; fail=1
fi

printf '#include <cufile.h>\nint main(void){CUfileError_t e = cuFileDriverClose(); return (int)e.err;}\n' >"$work/hdr.c"
cp "$work/hdr.c" "$work/hdr.cpp"
if gcc -std=c99 -pedantic -Wall -Wextra -Werror -I"$inc" "$work/hdr.c" -o "$work/hdr" -L"$libdir" -lcufile &&
    g++ -std=c++11 -pedantic -Wall -Wextra -Werror -I"$inc" "$work/hdr.cpp" -o "$work/hdrpp" -L"$libdir" -lcufile &&
    nm "$work/hdr" | grep -q ' U cuFileDriverClose_v2$'; then
    note header "compiles as C99 and C++11 (-pedantic -Werror); cuFileDriverClose binds cuFileDriverClose_v2"
    pass=$((pass + 1))
else
    note header "FAIL"; fail=1
fi

all=(layout driver io batch stream dlopen)
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=("${all[@]}")

unset HIPFILE_ALLOW_COMPAT_MODE HIPFILE_FORCE_COMPAT_MODE HIPFILE_STATS_LEVEL \
    HIPFILE_UNSUPPORTED_FILE_SYSTEMS HIPFILE_LOGGING_LEVEL HIPFS_GPU_RUNTIME
export HIPFS_GPU_RUNTIME=host

for t in "${tests[@]}"; do
    link="-L$libdir -lcufile"
    [ "$t" = dlopen ] && link=""
    if ! gcc -std=c11 -O1 -g -Wall -Wextra -Werror -pthread -I"$inc" "$here/$t.c" -o "$work/$t" $link -ldl; then
        note "$t" "FAIL (compile)"; fail=1; continue
    fi
    if [ "$t" = dlopen ] && readelf -d "$work/$t" | grep -q 'NEEDED.*libcufile'; then
        note "$t" "FAIL: the dlopen test links libcufile"; fail=1; continue
    fi
    scratch=$work/scratch-$t
    mkdir -p "$scratch"
    if out=$(LD_LIBRARY_PATH=$libdir timeout 120 "$work/$t" "$scratch" 2>&1); then
        note "$t" "ok"
        pass=$((pass + 1))
    else
        note "$t" "FAIL (exit $?)"
        fail=1
    fi
    printf '%s\n' "$out" | sed 's/^/    /'
done

echo "cufile-c-abi: $pass passed, $([ $fail = 0 ] && echo 0 || echo some) failed"
exit $fail
