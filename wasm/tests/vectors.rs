//! The shared conformance vectors, run inside WebAssembly (under Node by default; in headless
//! Chromium when the runner is pointed at a browser, see `tests/run-all.sh`).

use wasm_bindgen_test::*;

/// Every suite under `tests/vectors/`, embedded at compile time (wasm has no file system).
const SUITES: &[(&str, &str)] = &[
    ("jobs", include_str!("../../tests/vectors/jobs.json")),
    ("actors", include_str!("../../tests/vectors/actors.json")),
    ("ops", include_str!("../../tests/vectors/ops.json")),
    ("frames", include_str!("../../tests/vectors/frames.json")),
    ("tools", include_str!("../../tests/vectors/tools.json")),
    ("models", include_str!("../../tests/vectors/models.json")),
    ("agents", include_str!("../../tests/vectors/agents.json")),
];

#[wasm_bindgen_test]
fn conformance_vectors_pass_in_wasm() {
    let mut failed = Vec::new();
    let mut count = 0;
    for (name, text) in SUITES {
        for r in weft_core::conformance::run_suite(text).expect("suite loads") {
            count += 1;
            if !r.passed() {
                failed.push(format!("{name}/{}: {:?}", r.name, r.failures));
            }
        }
    }
    assert!(count > 0, "no vectors ran");
    assert!(failed.is_empty(), "failing vectors:\n{}", failed.join("\n"));
}
