//! Every code a host creates is listed once in the core (`weft_core::codes::ALL`).
//!
//! Reads the sources: every JS file of the package (`wasm/js`) and every Rust host
//! (`node-host/src`, `wasm/src`). A JS error is `new WeftError(CODE, ...)` with a literal code
//! the core lists or a constant of the generated `wasm/js/codes.js`; an error record is
//! `code: 'CODE'`; a Rust host names codes as literals the core lists (or takes them from
//! `HostError`); no host builds a code from a string (`toUpperCase`, `format!("X_{...}")`).
//! `wasm/js/codes.js` is generated from `HostError::ALL`: rerun with `WEFT_BLESS=1` to rewrite
//! it after adding an outcome.

use std::fs;
use std::path::{Path, PathBuf};

use weft_core::codes::{ALL, HostError, is_listed};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Files under `dir` (recursively) whose names end with one of `exts`.
fn files(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files(&p, exts, out);
        } else if exts
            .iter()
            .any(|x| p.to_string_lossy().ends_with(&format!(".{x}")))
        {
            out.push(p);
        }
    }
}

/// Each file's name relative to the repository root, with its text.
fn sources(paths: &[PathBuf]) -> Vec<(String, String)> {
    paths
        .iter()
        .map(|path| {
            let name = path
                .strip_prefix(root())
                .unwrap_or(path)
                .display()
                .to_string();
            (name, fs::read_to_string(path).expect("read"))
        })
        .collect()
}

fn is_code_shape(s: &str) -> bool {
    s.len() > 1
        && s.starts_with(|c: char| c.is_ascii_uppercase())
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// The generated `wasm/js/codes.js`: one exported constant per host outcome.
fn codes_js() -> String {
    let mut s = String::from(
        "// Generated from weft-core's `codes::HostError` (core/src/codes.rs); checked by\n\
         // `cargo test -p weft-host --test error_codes` (WEFT_BLESS=1 rewrites it). Do not edit.\n\
         // The outcomes only a host observes; every other code comes from the core's errors.\n\n",
    );
    for h in HostError::ALL {
        s.push_str(&format!(
            "/** {} */\nexport const {} = '{}';\n",
            h,
            h.code(),
            h.code()
        ));
    }
    s
}

#[test]
fn codes_js_is_generated_from_the_core() {
    let path = root().join("wasm/js/codes.js");
    let want = codes_js();
    if std::env::var_os("WEFT_BLESS").is_some() {
        fs::write(&path, &want).expect("write codes.js");
    }
    let have = fs::read_to_string(&path).expect("wasm/js/codes.js exists");
    assert_eq!(
        have, want,
        "wasm/js/codes.js differs from HostError::ALL: rerun with WEFT_BLESS=1"
    );
}

/// The token after each `marker` in `src`, with its line number.
fn after<'a>(src: &'a str, marker: &str) -> Vec<(usize, &'a str)> {
    let mut out = Vec::new();
    for (n, line) in src.lines().enumerate() {
        let mut rest = line;
        while let Some(i) = rest.find(marker) {
            rest = rest[i + marker.len()..].trim_start();
            out.push((n + 1, rest));
        }
    }
    out
}

/// A leading `'CODE'` / `"CODE"` literal, or a leading identifier.
enum Token<'a> {
    Literal(&'a str),
    Ident(&'a str),
    Other,
}

fn token(s: &str) -> Token<'_> {
    if let Some(q) = s.chars().next().filter(|c| *c == '\'' || *c == '"') {
        return match s[1..].find(q) {
            Some(end) => Token::Literal(&s[1..1 + end]),
            None => Token::Other,
        };
    }
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '$'))
        .unwrap_or(s.len());
    if end == 0 {
        Token::Other
    } else {
        Token::Ident(&s[..end])
    }
}

#[test]
fn every_code_the_js_package_creates_is_listed_in_the_core() {
    let host: Vec<&str> = HostError::ALL.iter().map(|h| h.code()).collect();
    let mut js = Vec::new();
    files(&root().join("wasm/js"), &["js", "mjs"], &mut js);
    assert!(js.len() > 10, "found only {} JS files", js.len());
    let (mut checked, mut bad) = (0, Vec::new());
    for (name, src) in sources(&js) {
        if src.contains("toUpperCase()") {
            bad.push(format!(
                "{name}: builds a string with toUpperCase() (codes are not built)"
            ));
        }
        // Any code-shaped literal of more than one word (`'NO_COMPUTE'` handed to the core as a
        // calculation's failure code, a comparison): a code, so one the core lists.
        for (n, line) in src.lines().enumerate() {
            for q in ['\'', '"'] {
                for lit in line.split(q).skip(1).step_by(2) {
                    if is_code_shape(lit) && lit.contains('_') {
                        checked += 1;
                        if !is_listed(lit) {
                            bad.push(format!(
                                "{name}:{}: code {lit} is not in weft_core::codes::ALL",
                                n + 1
                            ));
                        }
                    }
                }
            }
        }
        let created = after(&src, "new WeftError(")
            .into_iter()
            .chain(after(&src, "code: "));
        for (line, rest) in created {
            match token(rest) {
                Token::Literal(c) if is_code_shape(c) => {
                    checked += 1;
                    if !is_listed(c) {
                        bad.push(format!(
                            "{name}:{line}: code {c} is not in weft_core::codes::ALL"
                        ));
                    }
                }
                Token::Literal(c) => {
                    bad.push(format!("{name}:{line}: `{c}` is not a code"));
                }
                // A constant of codes.js (imported by name): a host outcome of the core.
                Token::Ident(c) if is_code_shape(c) => {
                    checked += 1;
                    if !host.contains(&c) {
                        bad.push(format!("{name}:{line}: {c} is not a HostError code"));
                    }
                }
                // A code carried from elsewhere (`e.code`, `o.error.code`): the core's.
                Token::Ident(_) | Token::Other => {}
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(
        checked > 50,
        "only {checked} created codes found in wasm/js"
    );
}

#[test]
fn every_code_a_rust_host_names_is_listed_in_the_core() {
    let mut rs = Vec::new();
    files(&root().join("node-host/src"), &["rs"], &mut rs);
    files(&root().join("wasm/src"), &["rs"], &mut rs);
    let (mut checked, mut bad) = (0, Vec::new());
    for (name, src) in sources(&rs) {
        for (n, line) in src.lines().enumerate() {
            let t = line.trim_start();
            // Environment variable names, doc comments and clap attributes are not codes.
            if t.starts_with("//") || line.contains("env") || t.starts_with("#[") {
                continue;
            }
            let mentions_code = line.contains("code") || line.contains("coded");
            for lit in line.split('"').skip(1).step_by(2) {
                if lit.contains("_{") && lit.starts_with(|c: char| c.is_ascii_uppercase()) {
                    bad.push(format!("{name}:{}: a code built by format!: {lit}", n + 1));
                }
                // `WEFT_*` are the product's environment variables, never codes.
                let multi_word = lit.contains('_') && !lit.starts_with("WEFT_");
                if is_code_shape(lit) && (multi_word || mentions_code) {
                    checked += 1;
                    if !is_listed(lit) {
                        bad.push(format!(
                            "{name}:{}: code {lit} is not in weft_core::codes::ALL",
                            n + 1
                        ));
                    }
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(
        checked > 10,
        "only {checked} code literals found in the Rust hosts"
    );
    assert!(ALL.len() > 100);
}
