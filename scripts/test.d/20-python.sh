#!/usr/bin/env bash
# The Python package: pip install ./python into a fresh venv, then pytest.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${HIPFS_PY_VENV:-/tmp/hipfs-ci-venv}
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q -r python/requirements-test.txt
"$VENV/bin/pip" install -q ./python
"$VENV/bin/python" -m pytest -q python/tests
