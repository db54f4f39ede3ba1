#!/usr/bin/env bash
# Runs every benchmark program and prints its figures (no assertions; not part of the tests).
# Needs what tests/setup.sh installs. Usage: tests/bench/run-all.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
tests/setup.sh >/dev/null
echo "== wasm package size (release: lto, opt-level s)"
wasm/build.sh 2>/dev/null | tail -n 1
echo "== registry throughput, native"
cargo run -q --release -p weft-bench --bin registry 2>/dev/null
echo "== actor graph: durable spawns/messages vs the raw fsync rate, audit walk"
cargo run -q --release -p weft-bench --bin actors 2>/dev/null
echo "== operation overhead (observe round trips), native"
cargo run -q --release -p weft-bench --bin ops 2>/dev/null
echo "== agent scheduling overhead per tool call, native"
cargo run -q --release -p weft-bench --bin tools 2>/dev/null
echo "== model streams: decoding tokens/s and first-delta latency, native"
cargo run -q --release -p weft-bench --bin model_stream 2>/dev/null
echo "== agents on nodes: turn overhead vs the RAM-only session, resume of 1,000 agent nodes"
cargo run -q --release -p weft-bench --bin agent_turns 2>/dev/null
echo "== DGP over HTTP: SQLite vs PostgreSQL (one and two instances on one database), side by side"
cargo build -q --release -p weft-host --bin weft 2>/dev/null
cargo run -q --release -p weft-bench --bin dgp-load -- --store both --seconds 5 --clients 32 2>/dev/null
cd tests/js
echo "== registry throughput, wasm under Node"
node --expose-gc bench/registry.mjs 2>/dev/null
echo "== operation overhead (observe round trips), wasm under Node"
node --expose-gc bench/ops.mjs 2>/dev/null
echo "== worker round trip (weft vs piscina vs workerpool)"
node bench/roundtrip.mjs
echo "== cancel latency (Node and Chromium, weft vs workerpool)"
node bench/cancel-latency.mjs
echo "== agent scheduling overhead per tool call, JS agent in Node"
node bench/tools.bench.mjs
echo "== model streaming: tokens/s parsed in wasm under Node, first-delta latency"
node bench/model-stream.mjs
