#!/usr/bin/env bash
# Lists every Rust file that contains `unsafe` outside the layers allowed to
# hold it, and exits 1 if there is any. Test folders (tests/) are ignored.
#
# Allowed: the syscall layer (sys/), the GPU runtimes (src/gpu/cuda.rs,
# hip.rs, host.rs, dumb.rs (the test runtime: only the trait's raw-pointer
# contracts passed on to sys/), and the RAII handles in src/gpu/mod.rs and
# src/gpu/slots.rs), the verbs layer
# (rdma/src/verbs/), the transport's raw socket and memory layer
# (rdma/src/tcp/sock.rs, rdma/src/mem.rs), the C ABIs (capi/, cufile/ and
# the code they share, cabi/; src/capi/),
# the Python extension's FFI (python/src/), and the lent-memory module
# (src/lent.rs): the one place where memory callers lend by address (C,
# Python, `unsafe Buffer::new`) becomes `&[u8]`/`&mut [u8]`; its module doc
# says where that promise is made.
#
# Scanned: the core (src/), the transports (rdma/src/), the FUSE adapter
# (fusefs/src/), the CLI and benchmarks (cli/src/), the syscall layer, the
# C ABI and the Python extension.
set -euo pipefail
cd "$(dirname "$0")/.."

allowed='^(sys/|src/lent\.rs$|src/gpu/(cuda|hip|host|dumb|mod|slots)\.rs$|rdma/src/verbs/|rdma/src/tcp/(sock|stream)\.rs$|rdma/src/mem\.rs$|capi/|cabi/|cufile/|src/capi/|python/src/)'

# What counts: `unsafe { ... }` blocks and `unsafe impl`s, outside comments.
# With `unsafe_op_in_unsafe_fn = "deny"` every unsafe operation sits in such
# a block, so a bare `unsafe fn` declaration (a contract passed on to the
# callers, whose blocks are counted) is not listed.
pattern='^[^/]*\bunsafe[[:space:]]*(\{|impl\b)'

bad=0
while IFS= read -r f; do
    f=${f#./}
    [[ $f =~ $allowed ]] && continue
    n=$(grep -cE "$pattern" "$f" || true)
    echo "$f: $n unsafe block(s)/impl(s)"
    bad=1
done < <(grep -rlE --include='*.rs' "$pattern" src rdma/src fusefs/src cli/src sys/src capi cabi cufile python/src 2>/dev/null | sort)

if [[ $bad -ne 0 ]]; then
    echo "check-unsafe: unsafe outside the allowed layers (see the list above)" >&2
    exit 1
fi
echo "check-unsafe: unsafe only in the allowed layers"
