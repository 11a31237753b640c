#!/usr/bin/env bash
# The project's test command (README): installs what the tests need beyond the Rust toolchain
# -- groff for the man-page checks, a local Python virtual environment with the official MCP
# SDK client -- and then runs every test with cargo.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v groff >/dev/null 2>&1 || need_apt+=(groff-base)
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "tests/run.sh: please install: ${need_apt[*]}" >&2
    exit 1
  fi
fi

if [ -f tests/requirements.txt ]; then
  if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
  fi
  if ! .venv/bin/python -c 'import mcp' >/dev/null 2>&1; then
    .venv/bin/pip install -q --disable-pip-version-check -r tests/requirements.txt
  fi
  export PEER_TEST_PYTHON="$PWD/.venv/bin/python"
fi

cargo test --locked "$@"
