//! Runs every conformance suite under `tests/vectors/` natively. The same files run as wasm
//! under Node and in Chromium (see `wasm/tests/vectors.rs`).

use std::path::Path;

#[test]
fn conformance_vectors_pass_natively() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors");
    let mut failed = Vec::new();
    let mut count = 0;
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/vectors exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let results = weft_core::conformance::run_suite(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for r in results {
            count += 1;
            if !r.passed() {
                failed.push(format!(
                    "{}/{}:\n  {}",
                    path.display(),
                    r.name,
                    r.failures.join("\n  ")
                ));
            }
        }
    }
    assert!(count > 0, "no vectors ran");
    assert!(failed.is_empty(), "failing vectors:\n{}", failed.join("\n"));
}
