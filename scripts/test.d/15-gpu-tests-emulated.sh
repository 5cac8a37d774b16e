#!/usr/bin/env bash
# The core's GPU tests (gpu_roundtrip, gpu_userspace, batch_async's device
# tests, and readahead_budget in a process of its own) without a GPU: built as for a GPU machine (HIPFS_REQUIRE_GPU=1, so
# they are not ignored) and run against the pinnable-test runtime, whose
# device memory is anonymous shared pages and whose copies are memcpy
# (src/gpu/dumb.rs). What this checks is the core's device paths (staging,
# bounce lanes, stream order, batches, range checks), not a GPU driver:
# async copies here complete before they return, and there is no copy-server
# kernel, so async I/O takes its worker-side path.
set -euo pipefail
cd "$(dirname "$0")/../.."
HIPFS_REQUIRE_GPU=1 HIPFS_GPU_RUNTIME=pinnable-test \
    cargo test -p hipfs --test it --test readahead_budget -- gpu_ batch_async
# The TCP lanes' device staging (HIPFS_TCP_LANE_STAGING, off by default):
# the UserspaceFs tests through a real mount again in each mode, which
# assert that the bytes went through it; one at a time, so that the
# process-wide counters they read count their own bytes only.
for mode in direct pipeline; do
    HIPFS_TCP_LANE_STAGING=$mode HIPFS_REQUIRE_GPU=1 HIPFS_GPU_RUNTIME=pinnable-test \
        cargo test -p hipfs --test it -- gpu_userspace --test-threads=1
done
# Bounce and readahead slabs pinned by registering huge-page-advised memory
# (HIPFS_BOUNCE_PIN=register, a measuring knob) instead of the runtime's
# pinned allocator: the same UserspaceFs tests.
HIPFS_BOUNCE_PIN=register HIPFS_REQUIRE_GPU=1 HIPFS_GPU_RUNTIME=pinnable-test \
    cargo test -p hipfs --test it -- gpu_userspace --test-threads=1
