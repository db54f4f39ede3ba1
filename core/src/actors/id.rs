//! Node identifiers: validated once, so a node id can always be used as a directory name.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The longest node id, in bytes. Ids name directories, so they stay well under file-name limits.
pub const MAX_NODE_ID_BYTES: usize = 64;

/// Characters that are path separators or invalid in file names on common file systems.
const FORBIDDEN: &[char] = &['/', '\\', ':', '*', '?', '"', '<', '>', '|'];

/// Invisible formatting characters that change how text around them is displayed: the bidi
/// embeddings, overrides, isolates and marks (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F,
/// U+061C), zero-width characters and joiners (U+200B–U+200D, U+2060–U+2064, U+FEFF). An id
/// holding one could display as another id.
fn is_display_control(c: char) -> bool {
    matches!(c,
        '\u{061C}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

/// A stable node identifier, also the last component of the node's address
/// (`$CHAT_ROOT/nodes/{id}/`). Construction validates it (see [`NodeId::parse`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(String);

impl NodeId {
    /// Validates `s` as a node id: non-empty, at most [`MAX_NODE_ID_BYTES`] bytes, no path
    /// separators or characters file systems reject, no NUL, control characters (C0, DEL, C1)
    /// or whitespace, no bidi overrides or other invisible display controls, not `.`/`..` and
    /// no leading `.` (reserved for store temporaries). Returns the reason when `s` is not
    /// acceptable (callers report it as `INVALID_NODE_ID`).
    pub fn parse(s: &str) -> Result<NodeId, String> {
        Self::check(s)?;
        Ok(NodeId(s.to_owned()))
    }

    fn check(s: &str) -> Result<(), String> {
        // The common case, checked in one pass: ASCII letters, digits, `-`, `_`, `.` (not
        // first), short enough. Everything else goes through the rules one by one.
        if !s.is_empty()
            && s.len() <= MAX_NODE_ID_BYTES
            && !s.starts_with('.')
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return Ok(());
        }
        if s.is_empty() {
            return Err("is empty".into());
        }
        if s.len() > MAX_NODE_ID_BYTES {
            return Err(format!(
                "is {} bytes long (at most {MAX_NODE_ID_BYTES})",
                s.len()
            ));
        }
        if s == "." || s == ".." {
            return Err("is a relative path component".into());
        }
        if s.starts_with('.') {
            return Err("starts with '.', which is reserved for store temporaries".into());
        }
        if let Some(c) = s.chars().find(|c| FORBIDDEN.contains(c)) {
            return Err(format!(
                "contains {c:?}, a path separator or a character file names cannot hold"
            ));
        }
        if s.contains('\0') {
            return Err("contains NUL".into());
        }
        if let Some(c) = s.chars().find(|c| c.is_control()) {
            return Err(format!("contains the control character {:?}", c));
        }
        if s.chars().any(char::is_whitespace) {
            return Err("contains whitespace".into());
        }
        if let Some(c) = s.chars().find(|c| is_display_control(*c)) {
            return Err(format!(
                "contains U+{:04X}, an invisible character that changes how text is displayed",
                c as u32
            ));
        }
        Ok(())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for NodeId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for NodeId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl Serialize for NodeId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for NodeId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match NodeId::check(&s) {
            Ok(()) => Ok(NodeId(s)),
            Err(why) => Err(serde::de::Error::custom(format!("node id {s:?} {why}"))),
        }
    }
}

/// A readable id base from free text: lowercase ASCII letters and digits, other runs folded to
/// one `-`, at most 48 bytes (the same shape dev-centr/harness produces, so ids stay familiar).
pub fn slugify(text: &str) -> String {
    let mut s = String::new();
    let mut dash = false;
    for c in text.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            s.push(c);
            dash = false;
        } else if !dash && !s.is_empty() {
            s.push('-');
            dash = true;
        }
    }
    while s.ends_with('-') {
        s.pop();
    }
    s.truncate(48);
    while s.ends_with('-') {
        s.pop();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_could_escape_or_confuse_a_directory_are_refused() {
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "a/b",
            "a\\b",
            "a\0b",
            "a\nb",
            "a\u{7f}",
            "a\u{85}b",
            "a\u{9b}b",
            "abc\u{202e}gpj.exe",
            "a\u{2066}b",
            "a\u{200f}",
            "zero\u{200b}width",
            "\u{feff}bom",
            "a b",
            "c:",
            "x?",
            &"a".repeat(65),
        ] {
            assert!(NodeId::parse(bad).is_err(), "{bad:?} accepted");
        }
        for good in [
            "coordinator",
            "docs-sync",
            "disambig-boundary-2",
            "a.b",
            "Ünïcode_ok",
            &"a".repeat(64),
        ] {
            assert!(NodeId::parse(good).is_ok(), "{good:?} refused");
        }
    }

    #[test]
    fn slugs_match_the_harness_shape() {
        assert_eq!(slugify("CI fix (flaky test)"), "ci-fix-flaky-test");
        assert_eq!(
            slugify("Side note: the bot config lives in .github"),
            "side-note-the-bot-config-lives-in-github"
        );
        assert_eq!(
            slugify("Who can sign the CLA for the org, and when exactly?!"),
            "who-can-sign-the-cla-for-the-org-and-when-exactl"
        );
        assert_eq!(slugify("!!!"), "");
    }
}
