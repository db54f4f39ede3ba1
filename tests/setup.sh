#!/usr/bin/env bash
# Installs what the tests need, skipping whatever is already there: the wasm32 target,
# wasm-bindgen-cli 0.2.130, Debian's Chromium + ChromeDriver, Debian's PostgreSQL, Python's
# jsonschema, and the npm packages of wasm/tools (esbuild, which wasm/build.sh minifies the JS
# package with) and tests/js.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  echo "setup: adding the wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown
fi

if [ "$(wasm-bindgen --version 2>/dev/null || true)" != "wasm-bindgen 0.2.130" ]; then
  echo "setup: installing wasm-bindgen-cli 0.2.130 (about 3 minutes)"
  cargo install wasm-bindgen-cli --version 0.2.130
fi

if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  echo "setup: installing chromium and chromium-driver"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver
fi

# The PostgreSQL tests (node-host/tests/dgp_postgres.rs, and dgp_http with
# WEFT_TEST_STORE=postgres) run a throwaway cluster of Debian's postgresql (initdb, postgres).
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && [ -z "${WEFT_PG_BIN:-}" ]; then
  echo "setup: installing postgresql"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql
fi

# Python's jsonschema validates DGP records in the node-host tests and runs the shared smoke check.
if ! python3 -c 'import jsonschema' 2>/dev/null; then
  echo "setup: installing the Python jsonschema package"
  python3 -m pip install --quiet jsonschema 2>/dev/null || python3 -m pip install --quiet --break-system-packages jsonschema
fi

npm_install() { # dir: npm ci when the lock changed since the last install
  local dir=$1
  if [ ! -f "$dir/node_modules/.weft-lock" ] || ! cmp -s "$dir/package-lock.json" "$dir/node_modules/.weft-lock"; then
    echo "setup: npm ci in $dir"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$dir/package-lock.json" "$dir/node_modules/.weft-lock"
  fi
}
for lock in wasm/tools/package-lock.json tests/js/package-lock.json examples/*/package-lock.json; do
  [ -f "$lock" ] && npm_install "$(dirname "$lock")"
done
exit 0
