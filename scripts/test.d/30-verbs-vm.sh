#!/usr/bin/env bash
# The verbs transport on real ibverbs: soft-RoCE inside QEMU VMs (one VM for
# the crate's verbs tests, two VMs for a cross-host connection).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash mount-scripts/rdma-vm/ci-verbs-tests.sh
bash mount-scripts/rdma-vm/ci-remote-verbs.sh
