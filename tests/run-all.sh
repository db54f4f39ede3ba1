#!/usr/bin/env bash
# The test command: installs what the tests need (tests/setup.sh) and runs every test.
# Stages: format, lint, native tests, the wasm package, its TypeScript declarations, wasm tests
# under Node and in headless Chromium, Node tests of the JS package, browser tests with Playwright.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
export CHROMEDRIVER=${CHROMEDRIVER:-/usr/bin/chromedriver}
START=$SECONDS
stage() { printf '\n=== %s (at %ds) ===\n' "$*" $((SECONDS - START)); }
fail() { printf '\nFAILED in stage: %s\n' "$current" >&2; }
trap fail ERR
current=setup; stage "setup"; tests/setup.sh

current=format; stage "cargo fmt --check"
cargo fmt --all -- --check

current=clippy; stage "cargo clippy (native and wasm32)"
# Also the crash-injection crate tests/failpoints (weft-failpoints: test machinery, never shipped).
cargo clippy --workspace --all-targets -- -D warnings
# The shipped core, without the test-only `conformance` runner.
cargo clippy -p weft-core -- -D warnings
cargo clippy -p weft-wasm --target wasm32-unknown-unknown --all-targets -- -D warnings

current=native; stage "native tests"
# Includes the crash tests (tests/failpoints: weft-failpoints aborts at durability steps).
cargo test --workspace
# The DGP HTTP checks again, unchanged, against PostgreSQL (a throwaway cluster, support/pg.rs).
WEFT_TEST_STORE=postgres cargo test -p weft-host --test dgp_http

current=package; stage "build the wasm package"
wasm/build.sh

current=types; stage "TypeScript declarations (tsc --strict against the packed package)"
(cd tests/js && node types/check.mjs)

current=lab; stage "build the diffusion lab (Vite, against the built package)"
(cd examples/diffusion-lab && npx vite build --logLevel warn)

current=wasm-node; stage "wasm tests under Node"
cargo test -p weft-wasm --target wasm32-unknown-unknown

current=wasm-chromium; stage "wasm tests in headless Chromium"
WASM_BINDGEN_USE_BROWSER=1 cargo test -p weft-wasm --target wasm32-unknown-unknown

current=node; stage "Node tests of the JS package"
(cd tests/js && node --test --test-concurrency=1 --test-reporter=spec node/)

current=browser; stage "browser tests (Playwright, Chromium)"
(cd tests/js && node --test --test-concurrency=1 --test-reporter=spec browser/)

trap - ERR
printf '\nall tests passed in %ds\n' $((SECONDS - START))
