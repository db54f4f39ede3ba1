//! In-place growth of the two records a spawn changes ([`Op::Patch`](super::Op::Patch)):
//! `graph.json` gains an entry in `nodes`, the parent's `meta.json` a child in `spawned` (and
//! a new `lastEventAt`).
//!
//! The core writes both records in a canonical form (`serde_json`'s pretty form, two-space
//! indent, a final newline) whose growing part comes last: `graph.json`'s last key is `nodes`,
//! a node record ends with `spawned` and then `lastEventAt`. A spawn then replaces only the
//! few closing bytes of each record: the bytes before the patch are never written, so the
//! cost of a spawn does not depend on how many nodes the root holds.
//!
//! Before patching a record the core checks that the bytes it holds (read at open, or written
//! by itself) end in exactly that canonical shape; a record written otherwise (another tool's
//! key order or formatting) is rewritten whole by a `Put`, after which it is canonical. In
//! canonical JSON a raw newline only ever separates tokens (a newline inside a string is
//! escaped), so a line starting with two spaces and a quote is a top-level key, and each
//! top-level key occurs once: the checks below rely on that.
//!
//! A patch torn by a crash leaves the record's old bytes up to the patch offset and part of
//! the patch after it. `graph.json` is then unreadable and open rebuilds it from the node
//! records; a parent's `meta.json` is repaired by [`repair_torn_meta`] (its `spawned` cut back
//! to the last whole child; open's roll-forward adds the children that name the parent).

use super::model::{GraphEntry, Node};

/// How canonical `graph.json` ends after its last entry: `nodes` closes, then the record.
pub(crate) const GRAPH_SUFFIX: &str = "\n  }\n}\n";
const NODES_KEY: &[u8] = b"\n  \"nodes\": {\n";
const SPAWNED_KEY: &[u8] = b"\n  \"spawned\": [\n";
const ROOT_KEY: &[u8] = b"\n  \"root\": ";

/// Where a top-level key starts. A canonical record holds each top-level key once and nothing
/// else at two spaces' indent, so the first occurrence is the key (a forward search: fast,
/// and the keys sought come early or are the bulk of the record anyway).
fn key_at(hay: &[u8], key: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, key)
}

/// Whether a top-level key starts after `from` (a raw newline, two spaces, a quote).
fn key_after(bytes: &[u8], from: usize) -> bool {
    memchr::memmem::find(&bytes[from..], b"\n  \"").is_some()
}

/// Where a patch adding entries to canonical `graph.json` starts (just after the last entry's
/// closing brace), or `None` when `bytes` is not canonical with `nodes` last and non-empty.
pub(crate) fn graph_patch_at(bytes: &[u8]) -> Option<u64> {
    if !bytes.ends_with(b"\n    }\n  }\n}\n") || !bytes.starts_with(b"{\n") {
        return None;
    }
    let k = key_at(bytes, NODES_KEY)?;
    let body = k + NODES_KEY.len();
    // The entries must start right after the key (four spaces, a quote), and no top-level
    // key may follow `nodes`.
    if !bytes[body..].starts_with(b"    \"") || key_after(bytes, body) {
        return None;
    }
    Some((bytes.len() - GRAPH_SUFFIX.len()) as u64)
}

/// [`graph_patch_at`] for `graph.json` handed as its ends (a trusted open: the writer that
/// kept the stamps left it canonical): its first bytes open the record, its last bytes close
/// a non-empty `nodes` and hold no top-level key but `nodes`.
pub(crate) fn graph_patch_at_ends(ends: &super::GraphEnds) -> Option<u64> {
    let tail = &ends.tail[..];
    if !ends.head.starts_with(b"{\n")
        || !tail.ends_with(b"\n    }\n  }\n}\n")
        || ends.size < (ends.head.len().max(tail.len())) as u64
    {
        return None;
    }
    if let Some(k) = memchr::memmem::rfind(tail, b"\n  \"") {
        // The last top-level key the tail holds must be `nodes`, followed by its entries.
        let body = k + NODES_KEY.len();
        if !tail[k..].starts_with(NODES_KEY) || !tail[body..].starts_with(b"    \"") {
            return None;
        }
    }
    Some(ends.size - GRAPH_SUFFIX.len() as u64)
}

/// The text of a patch adding `entries` to canonical `graph.json` (at [`graph_patch_at`]):
/// each entry as the pretty form writes it inside `nodes`, then the closing bytes.
pub(crate) fn graph_patch_text<'a>(
    entries: impl IntoIterator<Item = (&'a str, &'a GraphEntry)>,
) -> String {
    let mut out = String::new();
    for (id, e) in entries {
        out.push_str(",\n    ");
        out.push_str(&serde_json::to_string(id).expect("strings serialize"));
        out.push_str(": ");
        let v = serde_json::to_string_pretty(e).expect("entries serialize");
        out.push_str(&v.replace('\n', "\n    "));
    }
    out.push_str(GRAPH_SUFFIX);
    out
}

/// The root canonical `graph.json` names (its `root`, read without parsing the rest).
pub(crate) fn graph_root(bytes: &[u8]) -> Option<super::NodeId> {
    let k = key_at(bytes, ROOT_KEY)? + ROOT_KEY.len();
    let mut values = serde_json::Deserializer::from_slice(&bytes[k..]).into_iter::<String>();
    let root = values.next()?.ok()?;
    super::NodeId::parse(&root).ok()
}

/// The key line of entry `id` in canonical `graph.json`'s `nodes`.
fn entry_key(id: &str) -> Vec<u8> {
    let mut k = b"\n    ".to_vec();
    k.extend_from_slice(
        serde_json::to_string(id)
            .expect("strings serialize")
            .as_bytes(),
    );
    k.extend_from_slice(b": {");
    k
}

/// Whether canonical `graph.json` lists node `id` (one search of its bytes).
pub(crate) fn graph_lists(bytes: &[u8], id: &str) -> bool {
    let Some(k) = key_at(bytes, NODES_KEY) else {
        return false;
    };
    memchr::memmem::find(&bytes[k..], &entry_key(id)).is_some()
}

/// A digest of a node id (FNV-1a), for [`graph_ids`].
pub(crate) fn id_digest(id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The digests ([`id_digest`]) of the ids canonical `graph.json` lists: one pass over its
/// lines, no parse (a match is confirmed with [`graph_lists`]).
pub(crate) fn graph_ids(bytes: &[u8]) -> std::collections::HashSet<u64> {
    let mut out = std::collections::HashSet::new();
    let Some(k) = key_at(bytes, NODES_KEY) else {
        return out;
    };
    for line in bytes[k + NODES_KEY.len()..].split(|b| *b == b'\n') {
        let Some(rest) = line.strip_prefix(b"    \"") else {
            continue;
        };
        if let Some(end) = memchr::memchr(b'"', rest)
            && rest[end..].starts_with(b"\": {")
            && let Ok(id) = std::str::from_utf8(&rest[..end])
        {
            out.insert(id_digest(id));
        }
    }
    out
}

/// Where a patch adding children to a canonical node record starts (the newline before
/// `spawned`'s closing bracket) and the record's length, or `None` when `bytes` does not end
/// with a non-empty `spawned` followed by nothing but `lastEventAt`. `has_last_event`: the
/// record parsed with a `lastEventAt`, which must then be the one after `spawned` (a patch
/// rewrites it there; one elsewhere would be left behind as a duplicate key). The caller
/// parsed `bytes` as a node record.
pub(crate) fn meta_patch_at(bytes: &[u8], has_last_event: bool) -> Option<(u64, u64)> {
    if !bytes.starts_with(b"{\n") || !bytes.ends_with(b"\n}\n") {
        return None;
    }
    let k = key_at(bytes, SPAWNED_KEY)?;
    let body = k + SPAWNED_KEY.len();
    let close = body + memchr::memmem::find(&bytes[body..], b"\n  ]")?;
    // Between the key and the bracket: element lines only (four spaces and a string; the
    // record parsed, so they are the strings of `spawned`).
    let elems = &bytes[body..close];
    if !elems.starts_with(b"    \"") || key_after(elems, 0) {
        return None;
    }
    let rest = &bytes[close + 4..];
    let ok = if has_last_event {
        rest.strip_prefix(b",\n  \"lastEventAt\": ")
            .and_then(|r| r.strip_suffix(b"\n}\n"))
            .is_some_and(|v| serde_json::from_slice::<String>(v).is_ok())
    } else {
        rest == b"\n}\n"
    };
    ok.then_some((close as u64, bytes.len() as u64))
}

/// The text of a patch adding `children` to a canonical node record (at [`meta_patch_at`])
/// and giving it `last_event_at`.
pub(crate) fn meta_patch_text<'a>(
    children: impl IntoIterator<Item = &'a str>,
    last_event_at: Option<&str>,
) -> String {
    let mut out = String::new();
    for c in children {
        out.push_str(",\n    ");
        out.push_str(&serde_json::to_string(c).expect("strings serialize"));
    }
    out.push_str("\n  ]");
    if let Some(t) = last_event_at {
        out.push_str(",\n  \"lastEventAt\": ");
        out.push_str(&serde_json::to_string(t).expect("strings serialize"));
    }
    out.push_str("\n}\n");
    out
}

/// A node record torn by a crash during a patch (see the module documentation): the record
/// with `spawned` cut back to its last whole child, or `None` when `bytes` is not such a
/// record. The repaired record loses the `lastEventAt` the patch was writing.
pub(crate) fn repair_torn_meta(bytes: &[u8]) -> Option<Node> {
    let k = key_at(bytes, SPAWNED_KEY)?;
    let body = k + SPAWNED_KEY.len();
    let mut end = None;
    let mut at = body;
    // Whole element lines, each a JSON string followed by `,` and a newline, by a newline, or
    // by the end of the bytes (a patch cut right after a child).
    for seg in bytes[body..].split(|b| *b == b'\n') {
        let line = seg.strip_suffix(b",").unwrap_or(seg);
        if !(line.starts_with(b"    \"") && serde_json::from_slice::<String>(&line[4..]).is_ok()) {
            break;
        }
        end = Some(at + line.len());
        at += seg.len() + 1;
    }
    let mut fixed = bytes[..end?].to_vec();
    fixed.extend_from_slice(b"\n  ]\n}\n");
    serde_json::from_slice::<Node>(&fixed).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actors::id::NodeId;
    use crate::actors::model::{GraphIndex, NodeType};

    fn id(s: &str) -> NodeId {
        NodeId::parse(s).unwrap()
    }

    fn entry(parent: Option<&str>) -> GraphEntry {
        GraphEntry {
            node_type: if parent.is_some() {
                NodeType::Task
            } else {
                NodeType::Coordinator
            },
            spawned_by: parent.map(id),
            extra: Default::default(),
        }
    }

    fn patched(old: &[u8], at: u64, text: &str) -> Vec<u8> {
        let mut b = old[..at as usize].to_vec();
        b.extend_from_slice(text.as_bytes());
        b
    }

    #[test]
    fn a_graph_patch_equals_the_whole_record_and_foreign_shapes_are_refused() {
        let mut g = GraphIndex {
            version: 1,
            root: id("coordinator"),
            nodes: [("coordinator".to_owned(), entry(None))].into(),
            related: vec![],
            extra: [("x".to_owned(), serde_json::json!({"y": {"z": 1}}))]
                .into_iter()
                .collect(),
        };
        let text = crate::actors::pretty(&g);
        let at = graph_patch_at(text.as_bytes()).expect("canonical");
        assert_eq!(graph_root(text.as_bytes()), Some(id("coordinator")));
        let mut e = entry(Some("coordinator"));
        e.extra
            .insert("k".into(), serde_json::json!([1, {"a": "b\n"}]));
        let add = graph_patch_text([("a", &e), ("b-2", &entry(Some("a")))]);
        let out = patched(text.as_bytes(), at, &add);
        g.nodes.insert("a".into(), e);
        g.nodes.insert("b-2".into(), entry(Some("a")));
        assert_eq!(serde_json::from_slice::<GraphIndex>(&out).unwrap(), g);
        // The patched record is canonical again, and chains; ids are found in its bytes.
        let at2 = graph_patch_at(&out).expect("still canonical");
        assert_eq!(at2 as usize, out.len() - GRAPH_SUFFIX.len());
        for (k, listed) in [
            ("a", true),
            ("b-2", true),
            ("coordinator", true),
            ("b", false),
        ] {
            assert_eq!(graph_lists(&out, k), listed, "{k}");
            assert_eq!(graph_ids(&out).contains(&id_digest(k)), listed, "{k}");
        }
        assert!(
            !graph_lists(&out, "y"),
            "a key of an extra field is not a node"
        );
        // Other shapes: sorted keys (nodes first), compact, nodes empty, a key after nodes.
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let sorted = serde_json::to_string_pretty(&v).unwrap() + "\n";
        if sorted.find("\"nodes\"") < sorted.find("\"root\"") {
            assert_eq!(graph_patch_at(sorted.as_bytes()), None);
        }
        assert_eq!(
            graph_patch_at(serde_json::to_string(&g).unwrap().as_bytes()),
            None
        );
        let empty = "{\n  \"version\": 1,\n  \"root\": \"c\",\n  \"nodes\": {}\n}\n";
        assert_eq!(graph_patch_at(empty.as_bytes()), None);
        let tail_key = text.replace(
            "\n}\n",
            ",\n  \"later\": {\n    \"q\": {\n      \"r\": 1\n    }\n  }\n}\n",
        );
        assert!(tail_key.ends_with("\n    }\n  }\n}\n"));
        assert_eq!(
            graph_patch_at(tail_key.as_bytes()),
            None,
            "nodes is not last"
        );
    }

    #[derive(Debug)]
    struct NoLookup;
    impl crate::actors::GraphLookup for NoLookup {
        fn exists(&self, _: &str) -> bool {
            false
        }
        fn graph(&self) -> Option<Vec<u8>> {
            None
        }
    }

    fn ends(bytes: &[u8], n: usize) -> crate::actors::GraphEnds {
        crate::actors::GraphEnds {
            head: bytes[..n].to_vec(),
            tail: bytes[bytes.len() - n..].to_vec(),
            size: bytes.len() as u64,
            lookup: std::sync::Arc::new(NoLookup),
        }
    }

    #[test]
    fn the_ends_of_graph_json_give_the_patch_offset_the_whole_gives() {
        let mut g = GraphIndex {
            version: 1,
            root: id("coordinator"),
            nodes: [("coordinator".to_owned(), entry(None))].into(),
            related: vec![],
            extra: Default::default(),
        };
        for i in 0..40 {
            g.nodes
                .insert(format!("n-{i:03}"), entry(Some("coordinator")));
        }
        let text = crate::actors::pretty(&g);
        let b = text.as_bytes();
        let whole = graph_patch_at(b).expect("canonical");
        // A tail within the entries, or reaching back over the `nodes` key: the same offset.
        for n in [64, 200, b.len() - 64, b.len()] {
            assert_eq!(graph_patch_at_ends(&ends(b, n)), Some(whole), "{n}");
            assert_eq!(graph_root(&ends(b, n).head), Some(id("coordinator")));
        }
        // Not canonical: compact, or a key after `nodes`.
        let compact = serde_json::to_string(&g).unwrap();
        assert_eq!(graph_patch_at_ends(&ends(compact.as_bytes(), 40)), None);
        let tail_key = text.replace(
            "\n}\n",
            ",\n  \"later\": {\n    \"q\": {\n      \"r\": 1\n    }\n  }\n}\n",
        );
        assert_eq!(graph_patch_at_ends(&ends(tail_key.as_bytes(), 200)), None);
    }

    fn node(spawned: &[&str], last: Option<&str>) -> Node {
        serde_json::from_value(serde_json::json!({
            "id": "p", "type": "coordinator", "status": "running", "extraField": {"a": [1]},
            "spawned": spawned, "lastEventAt": last,
        }))
        .unwrap()
    }

    #[test]
    fn a_record_patch_equals_the_whole_record_and_a_torn_one_is_cut_back() {
        for last in [Some("2026-01-01T00:00:00.001Z"), None] {
            let n = node(&["a"], last);
            let text = crate::actors::pretty(&n);
            assert!(text.ends_with(&match last {
                Some(t) => format!("\n  ],\n  \"lastEventAt\": \"{t}\"\n}}\n"),
                None => "\n  ]\n}\n".to_owned(),
            }));
            let (at, size) = meta_patch_at(text.as_bytes(), last.is_some()).expect("canonical");
            assert_eq!(size as usize, text.len());
            let add = meta_patch_text(["b", "c"], Some("2026-01-02T00:00:00.000Z"));
            let out = patched(text.as_bytes(), at, &add);
            let want = node(&["a", "b", "c"], Some("2026-01-02T00:00:00.000Z"));
            assert_eq!(
                String::from_utf8(out.clone()).unwrap(),
                crate::actors::pretty(&want)
            );
            // Torn anywhere in the patch: cut back to a whole child, never unreadable.
            for cut in 0..add.len() {
                let torn = patched(text.as_bytes(), at, &add[..cut]);
                if serde_json::from_slice::<Node>(&torn).is_ok() {
                    continue;
                }
                let r = repair_torn_meta(&torn).unwrap_or_else(|| panic!("cut {cut}"));
                assert!(r.spawned.len() <= 3 && r.spawned[0] == id("a"), "cut {cut}");
                assert_eq!(r.status, n.status);
            }
        }
        // The first child (empty `spawned`) and a `lastEventAt` before `spawned` (another
        // writer's key order): written whole.
        assert_eq!(
            meta_patch_at(crate::actors::pretty(&node(&[], None)).as_bytes(), false),
            None
        );
        let early =
            "{\n  \"id\": \"p\",\n  \"lastEventAt\": \"t\",\n  \"spawned\": [\n    \"a\"\n  ]\n}\n";
        assert_eq!(meta_patch_at(early.as_bytes(), true), None);
        let after =
            "{\n  \"id\": \"p\",\n  \"spawned\": [\n    \"a\"\n  ],\n  \"status\": \"idle\"\n}\n";
        assert_eq!(meta_patch_at(after.as_bytes(), false), None);
    }
}
