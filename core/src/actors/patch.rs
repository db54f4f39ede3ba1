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

/// A canonical node record read by its ends ([`super::RecordEnds`]): its fields, with an
/// empty `spawned`, where the children it did not read lie (bytes `from..to`: the element
/// lines of `spawned`), and where a patch adding a child starts and the record's length
/// (what [`meta_patch_at`] gives for the whole). `None` when the ends do not show that
/// shape: the first bytes hold every field before `spawned` and no `lastEventAt`, the last
/// bytes hold at least the last child, `spawned`'s close, and nothing after it but
/// `lastEventAt`; the record's `id` is `id`.
pub(crate) struct FromEnds {
    pub node: Node,
    pub from: u64,
    pub to: u64,
    pub meta_at: (u64, u64),
}

/// See [`FromEnds`].
pub(crate) fn meta_from_ends(ends: &super::RecordEnds, id: &str) -> Option<FromEnds> {
    let (head, tail) = (&ends.head[..], &ends.tail[..]);
    if !head.starts_with(b"{\n")
        || !tail.ends_with(b"\n}\n")
        || ends.size < head.len().max(tail.len()) as u64
    {
        return None;
    }
    let k = key_at(head, SPAWNED_KEY)?;
    let from = (k + SPAWNED_KEY.len()) as u64;
    // `lastEventAt` must be the one after `spawned` (a patch rewrites it there).
    if key_at(&head[..k], b"\n  \"lastEventAt\": ").is_some() {
        return None;
    }
    let close = memchr::memmem::rfind(tail, b"\n  ]")?;
    let rest = &tail[close + 4..];
    let has_last_event = match rest.strip_prefix(b",\n  \"lastEventAt\": ") {
        Some(r) => {
            let v = r.strip_suffix(b"\n}\n")?;
            serde_json::from_slice::<String>(v).ok()?;
            true
        }
        None if rest == b"\n}\n" => false,
        None => return None,
    };
    // The last child, whole in the tail.
    let before = &tail[..close];
    let nl = memchr::memrchr(b'\n', before)?;
    let last = before[nl + 1..].strip_prefix(b"    ")?;
    serde_json::from_slice::<super::NodeId>(last).ok()?;
    let to = ends.size - tail.len() as u64 + close as u64;
    if to < from + last.len() as u64 {
        return None;
    }
    // The element lines the head holds whole (before the close) are strings of `spawned`.
    let body = &head[from as usize..head.len().min(to as usize)];
    let whole = memchr::memrchr(b'\n', body).map_or(&body[..0], |i| &body[..i]);
    if !whole
        .split(|b| *b == b'\n')
        .all(|l| l.is_empty() || l.starts_with(b"    \""))
    {
        return None;
    }
    let mut text = head[..k].to_vec();
    text.extend_from_slice(b"\n  \"spawned\": []");
    text.extend_from_slice(rest);
    let node: Node = serde_json::from_slice(&text).ok()?;
    if node.id.as_str() != id || node.last_event_at.is_some() != has_last_event {
        return None;
    }
    Some(FromEnds {
        node,
        from,
        to,
        meta_at: (to, ends.size),
    })
}

/// The children named by the element lines of a canonical `spawned` (bytes
/// [`FromEnds::from`]`..`[`FromEnds::to`] of the record), or `None` when they are not such lines.
pub(crate) fn elided_children(bytes: &[u8]) -> Option<Vec<super::NodeId>> {
    if !bytes.starts_with(b"    \"") || key_after(bytes, 0) {
        return None;
    }
    let mut list = b"[\n".to_vec();
    list.extend_from_slice(bytes);
    list.extend_from_slice(b"\n]");
    serde_json::from_slice(&list).ok()
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

    #[derive(Debug)]
    struct Bytes(Vec<u8>);
    impl crate::actors::GraphLookup for Bytes {
        fn exists(&self, _: &str) -> bool {
            false
        }
        fn graph(&self) -> Option<Vec<u8>> {
            None
        }
        fn record(&self, _: &str, from: u64, to: u64) -> Option<Vec<u8>> {
            self.0.get(from as usize..to as usize).map(<[u8]>::to_vec)
        }
    }

    fn record_ends(b: &[u8], head: usize, tail: usize) -> crate::actors::RecordEnds {
        crate::actors::RecordEnds {
            head: b[..head.min(b.len())].to_vec(),
            tail: b[b.len() - tail.min(b.len())..].to_vec(),
            size: b.len() as u64,
            lookup: std::sync::Arc::new(Bytes(b.to_vec())),
        }
    }

    /// Where `spawned`'s elements start.
    fn f_at(b: &[u8]) -> usize {
        key_at(b, SPAWNED_KEY).unwrap() + SPAWNED_KEY.len()
    }

    #[test]
    fn a_record_read_by_its_ends_has_the_fields_the_whole_has_and_finds_its_children() {
        let kids: Vec<String> = (0..300).map(|i| format!("child-{i:04}")).collect();
        let kid_refs: Vec<&str> = kids.iter().map(String::as_str).collect();
        for last in [Some("2026-01-01T00:00:00.001Z"), None] {
            let n = node(&kid_refs, last);
            let text = crate::actors::pretty(&n);
            let b = text.as_bytes();
            let whole = meta_patch_at(b, last.is_some()).expect("canonical");
            for (h, t) in [(4096, 1024), (f_at(b) + 20, 120), (b.len(), b.len())] {
                let f = meta_from_ends(&record_ends(b, h, t), "p").expect("canonical ends");
                let mut want = n.clone();
                want.spawned.clear();
                assert_eq!(f.node, want, "{h}/{t}");
                assert_eq!(f.meta_at, whole);
                assert_eq!(
                    elided_children(&b[f.from as usize..f.to as usize]).unwrap(),
                    n.spawned
                );
                // A patch at the offset grows the record the ends describe.
                let add = meta_patch_text(["z"], last);
                let out = patched(b, f.meta_at.0, &add);
                let g = meta_from_ends(&record_ends(&out, h, t), "p").expect("still canonical");
                assert_eq!((g.from, g.to), (f.from, f.to + 9), "`,\\n    \"z\"`");
                assert_eq!(
                    elided_children(&out[g.from as usize..g.to as usize])
                        .unwrap()
                        .len(),
                    301
                );
            }
            // Ends that cannot show the shape: the wrong node, a tail short of the last child,
            // a head short of `spawned`.
            assert!(meta_from_ends(&record_ends(b, 4096, 1024), "q").is_none());
            assert!(meta_from_ends(&record_ends(b, 4096, 10), "p").is_none());
            assert!(meta_from_ends(&record_ends(b, 20, 1024), "p").is_none());
        }
        // Other shapes: `lastEventAt` before `spawned`, a key after it, a compact record.
        let many = kid_refs[..40]
            .iter()
            .map(|k| format!("    \"{k}\""))
            .collect::<Vec<_>>()
            .join(",\n");
        let early = format!(
            "{{\n  \"id\": \"p\",\n  \"lastEventAt\": \"t\",\n  \"spawned\": [\n{many}\n  ]\n}}\n"
        );
        assert!(meta_from_ends(&record_ends(early.as_bytes(), 100, 100), "p").is_none());
        let after = format!(
            "{{\n  \"id\": \"p\",\n  \"spawned\": [\n{many}\n  ],\n  \"status\": \"idle\"\n}}\n"
        );
        assert!(meta_from_ends(&record_ends(after.as_bytes(), 100, 100), "p").is_none());
        let compact = serde_json::to_string(&node(&kid_refs, None)).unwrap() + "\n";
        assert!(meta_from_ends(&record_ends(compact.as_bytes(), 100, 100), "p").is_none());
        // Bytes between the ends that are not element lines.
        assert_eq!(elided_children(b"    \"a\",\n  \"k\": 1"), None);
        assert_eq!(elided_children(b"    \"a\",\n    \"b\"").unwrap().len(), 2);
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
