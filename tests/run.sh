#!/usr/bin/env bash
# The project's test command (README): installs what the tests need beyond the Rust toolchain
# -- groff and man-db for the man-page checks, Node.js for the dsh-ask-peer transport tests,
# Debian's chromium for the owner page's browser test, a local Python virtual environment with
# the official MCP and A2A SDK clients and Playwright, the A2A JS SDK client under
# tests/a2a_js -- and then runs every test with cargo.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v groff >/dev/null 2>&1 || need_apt+=(groff-base)
command -v man >/dev/null 2>&1 || need_apt+=(man-db)
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
command -v script >/dev/null 2>&1 || need_apt+=(util-linux)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
# Node's standard library stands in for dsh-ask-peer's transport (tests/dsh_node.rs).
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
# `python3 -m venv` needs ensurepip, which Debian ships separately as python3-venv.
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  need_apt+=(python3-venv)
fi
# The owner page's browser test drives Debian's chromium; without it (and not root to install
# it) that one test prints "skipped: ..." instead of failing the run.
if ! [ -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then
    need_apt+=(chromium)
  else
    echo "tests/run.sh: chromium is missing; the owner page's browser test will be skipped" >&2
  fi
fi
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
  # The pinned SDK version, from the one line of tests/requirements.txt that names it.
  sdk=$(sed -n 's/^mcp==\([0-9.]*\).*/\1/p' tests/requirements.txt)
  # A venv left half-created (no python, no pip) by an interrupted run is made again.
  if ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
    rm -rf .venv
    python3 -m venv .venv
  fi
  have=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("mcp"))' 2>/dev/null || true)
  a2a=$(sed -n 's/^a2a-sdk\(\[[^]]*\]\)\{0,1\}==\([0-9.]*\).*/\2/p' tests/requirements.txt)
  have_a2a=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("a2a-sdk"))' 2>/dev/null || true)
  # Playwright's pin likewise; its browser download is never run: the test uses /usr/bin/chromium.
  pw=$(sed -n 's/^playwright==\([0-9.]*\).*/\1/p' tests/requirements.txt)
  have_pw=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("playwright"))' 2>/dev/null || true)
  if [ "$have" != "$sdk" ] || [ "$have_a2a" != "$a2a" ] || [ "$have_pw" != "$pw" ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check -r tests/requirements.txt
  fi
  export PEER_TEST_PYTHON="$PWD/.venv/bin/python"
fi

# The official A2A JS SDK client for tests/a2a.rs, pinned by tests/a2a_js/package-lock.json.
if ! command -v node >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
if command -v npm >/dev/null 2>&1; then
  (cd tests/a2a_js && npm ci --no-audit --no-fund --silent)
fi

cargo test --locked "$@"
