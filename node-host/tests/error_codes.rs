//! Every code a host creates is listed once in the core (`weft_core::codes::ALL`).
//!
//! Reads the sources: every JS file of the package (`wasm/js`), the JS the Rust hosts inline
//! (`#[wasm_bindgen(inline_js = ...)]`), and every Rust host (`node-host/src`, `wasm/src`). A
//! JS error is `new WeftError(CODE, ...)` with a literal code the core lists or a constant of
//! the generated `wasm/js/codes.js` (the code may be on the next line; a template literal
//! without `${}` is a literal); an error record is `code: 'CODE'`; a Rust host names codes as
//! literals the core lists (or takes them from `HostError`); no host builds a code from a
//! string (`toUpperCase`, `format!("X_{...}")`, `` `X_${...}` ``).
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

/// The text after each `marker` in `src` (whitespace and line breaks skipped: the token may
/// be on a later line), with the line number of that token.
fn after<'a>(src: &'a str, marker: &str) -> Vec<(usize, &'a str)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = src[from..].find(marker) {
        let end = from + i + marker.len();
        let rest = src[end..].trim_start();
        let at = src.len() - rest.len();
        out.push((1 + src[..at].matches('\n').count(), rest));
        from = end;
    }
    out
}

/// A leading `'CODE'` / `"CODE"` / `` `CODE` `` literal, a template literal that interpolates
/// (a built string), or a leading identifier.
enum Token<'a> {
    Literal(&'a str),
    Built(&'a str),
    Ident(&'a str),
    Other,
}

fn token(s: &str) -> Token<'_> {
    if let Some(q) = s.chars().next().filter(|c| matches!(c, '\'' | '"' | '`')) {
        return match s[1..].find(q) {
            Some(end) if q == '`' && s[1..1 + end].contains("${") => Token::Built(&s[1..1 + end]),
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

/// The template literals of JS source `src`: (line, static text pieces, whether it
/// interpolates). Comments and quoted strings are skipped (a backtick in them is no
/// template); `${...}` nests (templates inside an interpolation are found too).
fn templates(src: &str) -> Vec<(usize, Vec<String>, bool)> {
    let b = src.as_bytes();
    let (mut i, mut line) = (0, 1);
    let mut out: Vec<(usize, Vec<String>, bool)> = Vec::new();
    // Open templates (index into `out`) and, per open interpolation, its brace depth.
    let mut open: Vec<usize> = Vec::new();
    let mut braces: Vec<usize> = Vec::new();
    let mut in_template = false;
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
        }
        if in_template {
            let t = *open.last().expect("an open template");
            match c {
                b'\\' => {
                    out[t]
                        .1
                        .last_mut()
                        .expect("a piece")
                        .push(b.get(i + 1).map_or(' ', |c| *c as char));
                    i += 2;
                    continue;
                }
                b'`' => {
                    open.pop();
                    in_template = false;
                }
                b'$' if b.get(i + 1) == Some(&b'{') => {
                    out[t].2 = true;
                    out[t].1.push(String::new());
                    braces.push(0);
                    in_template = false;
                    i += 2;
                    continue;
                }
                _ => out[t].1.last_mut().expect("a piece").push(c as char),
            }
            i += 1;
            continue;
        }
        match c {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    line += usize::from(b[i] == b'\n');
                    i += 1;
                }
                i += 2;
                continue;
            }
            b'\'' | b'"' => {
                // A quoted string ends at its quote or, unterminated, at the line's end.
                i += 1;
                while i < b.len() && b[i] != c && b[i] != b'\n' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'`' => {
                out.push((line, vec![String::new()], false));
                open.push(out.len() - 1);
                in_template = true;
            }
            b'{' if !braces.is_empty() => *braces.last_mut().expect("open") += 1,
            b'}' if !braces.is_empty() => {
                let depth = braces.last_mut().expect("open");
                if *depth == 0 {
                    braces.pop();
                    in_template = true;
                } else {
                    *depth -= 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The JS of `#[wasm_bindgen(inline_js = ...)]` attributes in Rust source `src`: (the line
/// the JS starts on, the JS). Raw (`r#"..."#`) and plain string literals.
fn inline_js(src: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (_, rest) in after(src, "inline_js") {
        let Some(rest) = rest.strip_prefix('=').map(str::trim_start) else {
            continue;
        };
        let at = src.len() - rest.len();
        let line = 1 + src[..at].matches('\n').count();
        if let Some(raw) = rest.strip_prefix('r') {
            let hashes = raw.len() - raw.trim_start_matches('#').len();
            let body = &raw[hashes..];
            let close = format!("\"{}", "#".repeat(hashes));
            if let (Some(body), Some(end)) = (body.strip_prefix('"'), body.find(&close)) {
                out.push((line, body[..end - 1].to_owned()));
            }
        } else if let Some(body) = rest.strip_prefix('"') {
            let mut js = String::new();
            let mut chars = body.chars();
            while let Some(c) = chars.next() {
                match c {
                    '"' => break,
                    '\\' => match chars.next() {
                        Some('n') => js.push('\n'),
                        Some(e) => js.push(e),
                        None => break,
                    },
                    c => js.push(c),
                }
            }
            out.push((line, js));
        }
    }
    out
}

/// The checks of one JS source (a package file or a host's inline JS, its lines numbered from
/// `first`): every failure into `bad`, every code checked counted.
fn check_js(name: &str, first: usize, src: &str, checked: &mut usize, bad: &mut Vec<String>) {
    let host: Vec<&str> = HostError::ALL.iter().map(|h| h.code()).collect();
    let at = |line: usize| line + first - 1;
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
                    *checked += 1;
                    if !is_listed(lit) {
                        bad.push(format!(
                            "{name}:{}: code {lit} is not in weft_core::codes::ALL",
                            at(n + 1)
                        ));
                    }
                }
            }
        }
    }
    // The same of template literals; one that interpolates into code-shaped text
    // (`` `STORE_${what}` ``) builds a code.
    for (line, pieces, interpolates) in templates(src) {
        let text: String = pieces.concat();
        let codeish = |p: &String| {
            p.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        };
        if interpolates {
            if text.contains('_') && pieces.iter().all(codeish) {
                bad.push(format!(
                    "{name}:{}: a code built by a template literal: `{}`",
                    at(line),
                    pieces.join("${..}")
                ));
            }
        } else if is_code_shape(&text) && text.contains('_') {
            *checked += 1;
            if !is_listed(&text) {
                bad.push(format!(
                    "{name}:{}: code {text} is not in weft_core::codes::ALL",
                    at(line)
                ));
            }
        }
    }
    let created = after(src, "new WeftError(")
        .into_iter()
        .chain(after(src, "code:"));
    for (line, rest) in created {
        let line = at(line);
        match token(rest) {
            Token::Literal(c) if is_code_shape(c) => {
                *checked += 1;
                if !is_listed(c) {
                    bad.push(format!(
                        "{name}:{line}: code {c} is not in weft_core::codes::ALL"
                    ));
                }
            }
            Token::Literal(c) => {
                bad.push(format!("{name}:{line}: `{c}` is not a code"));
            }
            Token::Built(c) => {
                bad.push(format!(
                    "{name}:{line}: a code built by a template literal: `{c}`"
                ));
            }
            // A constant of codes.js (imported by name): a host outcome of the core.
            Token::Ident(c) if is_code_shape(c) => {
                *checked += 1;
                if !host.contains(&c) {
                    bad.push(format!("{name}:{line}: {c} is not a HostError code"));
                }
            }
            // A code carried from elsewhere (`e.code`, `o.error.code`): the core's.
            Token::Ident(_) | Token::Other => {}
        }
    }
}

#[test]
fn every_code_the_js_package_creates_is_listed_in_the_core() {
    let mut js = Vec::new();
    files(&root().join("wasm/js"), &["js", "mjs"], &mut js);
    assert!(js.len() > 10, "found only {} JS files", js.len());
    let (mut checked, mut bad) = (0, Vec::new());
    for (name, src) in sources(&js) {
        check_js(&name, 1, &src, &mut checked, &mut bad);
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(
        checked > 50,
        "only {checked} created codes found in wasm/js"
    );
}

/// The JS the Rust hosts inline (`#[wasm_bindgen(inline_js = ...)]`) is checked as the
/// package's is: the Rust scan below reads only its `"`-quoted literals.
#[test]
fn every_code_the_inline_js_of_the_hosts_creates_is_listed_in_the_core() {
    let mut rs = Vec::new();
    files(&root().join("node-host/src"), &["rs"], &mut rs);
    files(&root().join("wasm/src"), &["rs"], &mut rs);
    let (mut blocks, mut checked, mut bad) = (0, 0, Vec::new());
    for (name, src) in sources(&rs) {
        for (line, js) in inline_js(&src) {
            blocks += 1;
            check_js(&name, line, &js, &mut checked, &mut bad);
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(
        blocks >= 2,
        "found only {blocks} inline_js blocks in the hosts"
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
