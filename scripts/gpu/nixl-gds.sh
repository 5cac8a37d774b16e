#!/bin/bash
# NVIDIA NIXL's own GDS example (examples/python/nixl_gds_example.py,
# unchanged) on hipfs' libcufile.so.0, preloaded so that NIXL's GDS plugin
# (which links libcufile.so.0) gets ours: a host buffer written to a file
# through cuFile and read back, checked by the example. Runs once on a file
# of the local disk and once on a file of a hipfs mount (the direct path).
#
# Here (needs PyPI and the `fetch` tool's NIXL mirror): bash scripts/gpu/nixl-gds.sh fetch
# GPU machine (device tool): bash scripts/gpu/nixl-gds.sh   carry: [".thirdparty/nixl/carry"]
#
# The wheels (about 56 MiB) are cut to what the GDS plugin loads so that
# they fit the device tool's carry limit; nothing of NIXL is committed.
set -u
cd "$(dirname "$0")/../.."
C=$PWD/.thirdparty/nixl/carry
if [ "${1:-}" = fetch ]; then
    set -e
    repo=${NIXL_REPO:-/work/.mirror/ai-dynamo+nixl/repo}
    T=$(mktemp -d)
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 -d "$T" nixl nixl-cu13
    rm -rf "$C" "$T/site" && mkdir -p "$C/site" "$T/site"
    for w in "$T"/*.whl; do (cd "$T/site" && unzip -q -o "$w"); done
    # The GDS plugin, NIXL's Python modules and what they load, nothing else.
    (cd "$T/site" && python3 - "$C/site" <<'PY'
import os, re, shutil, subprocess, sys
libs = {}
for d, _, fs in os.walk("."):
    for f in fs:
        if ".so" in f:
            libs.setdefault(f, []).append(os.path.join(d, f))
def needed(p):
    out = subprocess.run(["readelf", "-d", p], capture_output=True, text=True).stdout
    return re.findall(r"NEEDED.*\[(.*)\]", out)
keep = {p for p in sum(libs.values(), []) if re.search(r"nixl_cu13/_(bindings|utils)|libplugin_GDS\.so$", p)}
todo = list(keep)
while todo:
    for n in needed(todo.pop()):
        for q in libs.get(n, []):
            if q not in keep:
                keep.add(q)
                todo.append(q)
for d, _, fs in os.walk("."):
    for f in fs:
        p = os.path.join(d, f)
        if ".so" not in f and (p.endswith(".py") or ".dist-info" in p):
            keep.add(p)
for p in keep:
    dst = os.path.join(sys.argv[1], p)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copy2(p, dst)
print(len(keep), "files kept")
PY
    )
    git -C "$repo" show HEAD:examples/python/nixl_gds_example.py > "$C/nixl_gds_example.py"
    echo "nixl_gds_example.py at $(git -C "$repo" rev-parse HEAD); wheels: $(cd "$T" && ls *.whl | tr '\n' ' ')" > "$C/SOURCE"
    cp .gpu/lib/libcufile.so.0 .gpu/bin/hipfs "$C/"
    rm -rf "$T"
    du -sh "$C"
    exit 0
fi
[ -f "$C/nixl_gds_example.py" ] || { echo "no $C: run 'bash scripts/gpu/nixl-gds.sh fetch' here first"; exit 2; }
cat "$C/SOURCE"
export PYTHONPATH=$C/site${PYTHONPATH:+:$PYTHONPATH}
# The plugin copy whose RUNPATH ($ORIGIN/..) finds libnixl_common.so and
# libfile_utils.so (the auditwheel copy in nixl_cu13.libs/nixl does not).
export NIXL_PLUGIN_DIR=$C/site/.nixl_cu13.mesonpy.libs/plugins
# libcudart.so.13 comes with PyTorch's CUDA wheels.
CUDART=$(python3 -c 'import glob, os, nvidia; print(":".join(sorted({os.path.dirname(p) for d in nvidia.__path__ for p in glob.glob(d + "/**/libcudart.so.13", recursive=True)})))' 2>/dev/null)
export LD_LIBRARY_PATH=${CUDART}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "libcudart.so.13 from: ${CUDART:-not found}"
W=/var/tmp/hipfs-nixl; rm -rf "$W"; mkdir -p "$W/export" "$W/mnt"
fail=0
run() { # WHAT FILE
    echo "== NIXL GDS example, $1"
    if env LD_PRELOAD="$C/libcufile.so.0" RUST_LOG=hipfs=info timeout 120 python3 "$C/nixl_gds_example.py" "$2" 2>&1 | tee "$W/out.txt" |
        grep -E "Test Complete|Error|ERR|error|hipfs|direct path|Traceback|assert" | head -20; then :; fi
    if grep -q "Test Complete" "$W/out.txt" && grep -q "hipfs" "$W/out.txt"; then
        echo "nixl-gds $1: PASS (NIXL's example completed on hipfs' libcufile)"
    else
        echo "nixl-gds $1: FAIL"; tail -20 "$W/out.txt"; fail=1
    fi
}
run "local ext4 file" "$W/local.bin"
"$C/hipfs" serve "$W/export" --listen 127.0.0.1:0 > "$W/serve.log" 2>&1 &
SP=$!
for _ in $(seq 50); do grep -q "listening on" "$W/serve.log" && break; sleep 0.1; done
ADDR=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$W/serve.log" | head -1)
if "$C/hipfs" mount "$ADDR:/" "$W/mnt" > "$W/mount.log" 2>&1; then
    run "file on a hipfs mount" "$W/mnt/nixl.bin"
    "$C/hipfs" stats "$W/mnt" 2>&1 | grep -i "direct" || true
    cmp "$W/mnt/nixl.bin" "$W/export/nixl.bin" && echo "the mount and the export hold the same bytes"
    "$C/hipfs" umount "$W/mnt" 2>/dev/null || umount "$W/mnt"
else
    echo "nixl-gds mount: FAIL (hipfs mount did not start)"; cat "$W/mount.log"; fail=1
fi
kill "$SP" 2>/dev/null
exit $fail
