//! Scratch directories and an on-disk lineage checker that reads `$CHAT_ROOT` with plain
//! serde_json (independent of the core's own checker). Names no binary: the actor-host tests
//! (through `common`) and the crash tests of `tests/failpoints` (with `#[path]`) share it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

/// A fresh scratch directory under the system temp dir (removed by the caller if it wants).
pub fn scratch(name: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let p = std::env::temp_dir().join(format!(
        "weft-{name}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&p).unwrap();
    p
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), &t).unwrap();
        }
    }
}

/// Every file under `root` with its bytes (relative paths).
pub fn snapshot(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                let rel = e
                    .path()
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.insert(rel, std::fs::read(e.path()).unwrap());
            }
        }
    }
    out
}

fn jsonl(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("line {l:?}: {e}")))
        .collect()
}

/// A `$CHAT_ROOT` read from disk.
pub struct Disk {
    pub metas: BTreeMap<String, Value>,
    pub chats: BTreeMap<String, Vec<Value>>,
    pub graph: Value,
    pub metathread: Vec<Value>,
    pub leftovers: Vec<String>,
}

pub fn read_disk(root: &Path) -> Disk {
    let mut metas = BTreeMap::new();
    let mut chats = BTreeMap::new();
    let mut leftovers = Vec::new();
    for e in std::fs::read_dir(root.join("nodes")).unwrap() {
        let e = e.unwrap();
        let id = e.file_name().to_string_lossy().into_owned();
        if id.starts_with('.') {
            leftovers.push(format!("nodes/{id}"));
            continue;
        }
        let meta = std::fs::read(e.path().join("meta.json"))
            .unwrap_or_else(|_| panic!("nodes/{id} has no meta.json"));
        metas.insert(
            id.clone(),
            serde_json::from_slice(&meta).unwrap_or_else(|er| panic!("nodes/{id}/meta.json: {er}")),
        );
        chats.insert(
            id,
            std::fs::read(e.path().join("chat.jsonl"))
                .map(|b| jsonl(&b))
                .unwrap_or_default(),
        );
    }
    for (p, _) in snapshot(root) {
        if p.contains(".weft-tmp") || p.starts_with(".weft/") {
            leftovers.push(p);
        }
    }
    if let Ok(rd) = std::fs::read_dir(root.join(".weft")) {
        for e in rd.flatten() {
            leftovers.push(format!(".weft/{}", e.file_name().to_string_lossy()));
        }
    }
    // A running (or killed) long-lived writer's spare node directories are not leftovers of
    // a spawn: they are made ahead of spawns and removed by the next writer's open.
    leftovers.retain(|l| !l.starts_with(".weft/.spare,"));
    Disk {
        metas,
        chats,
        graph: serde_json::from_slice(&std::fs::read(root.join("graph.json")).unwrap()).unwrap(),
        metathread: jsonl(&std::fs::read(root.join("orchestrator/meta.jsonl")).unwrap()),
        leftovers,
    }
}

/// The child a routing line announces: its `spawn` field or the id in "spawned <type> `<id>`".
pub fn marker_child(l: &Value) -> Option<String> {
    if l["role"] != "routing" {
        return None;
    }
    if let Some(s) = l["spawn"].as_str() {
        return Some(s.to_owned());
    }
    let t = l["text"].as_str()?;
    let rest = t.split_once("spawned ")?.1;
    Some(rest.split_once('`')?.1.split_once('`')?.0.to_owned())
}

/// Lineage invariants checked on the files: parent/child agreement both ways, the graph index,
/// exactly one routing marker and one metathread spawn record (pointing at it) per edge, no
/// store temporaries left.
pub fn lineage_problems(d: &Disk) -> Vec<String> {
    let mut v = Vec::new();
    for l in &d.leftovers {
        v.push(format!("leftover temporary {l}"));
    }
    let root = d.graph["root"].as_str().unwrap_or("");
    for (id, m) in &d.metas {
        if m["id"] != id.as_str() {
            v.push(format!("{id}: meta id {}", m["id"]));
        }
        let g = &d.graph["nodes"][id];
        if g.is_null() {
            v.push(format!("graph.json lacks {id}"));
        } else if g["type"] != m["type"] || g["spawnedBy"] != m["spawnedBy"] {
            v.push(format!("graph.json disagrees on {id}"));
        }
        for c in m["spawned"].as_array().unwrap() {
            let c = c.as_str().unwrap();
            match d.metas.get(c) {
                None => v.push(format!("{id}.spawned lists missing {c}")),
                Some(cm) if cm["spawnedBy"] != id.as_str() => v.push(format!(
                    "{id}.spawned lists {c} whose parent is {}",
                    cm["spawnedBy"]
                )),
                _ => {}
            }
        }
        if id == root {
            continue;
        }
        let Some(p) = m["spawnedBy"].as_str() else {
            v.push(format!("{id} has no parent"));
            continue;
        };
        let Some(pm) = d.metas.get(p) else {
            v.push(format!("{id}'s parent {p} is missing"));
            continue;
        };
        let n = pm["spawned"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| *c == id.as_str())
            .count();
        if n != 1 {
            v.push(format!("{p}.spawned lists {id} {n} times"));
        }
        let markers: Vec<usize> = d.chats[p]
            .iter()
            .enumerate()
            .filter(|(_, l)| marker_child(l).as_deref() == Some(id.as_str()))
            .map(|(i, _)| i + 1)
            .collect();
        if markers.len() != 1 {
            v.push(format!("{p} has {} markers for {id}", markers.len()));
        }
        let recs: Vec<&Value> = d
            .metathread
            .iter()
            .filter(|r| r["kind"] == "spawn" && r["child"] == id.as_str())
            .collect();
        if recs.len() != 1 {
            v.push(format!("{} spawn records for {id}", recs.len()));
        } else if recs[0]["parent"] != p
            || recs[0]["parentLine"].as_u64().map(|x| x as usize) != markers.first().copied()
        {
            v.push(format!(
                "spawn record of {id} = {} but marker at {markers:?}",
                recs[0]
            ));
        }
    }
    for k in d.graph["nodes"].as_object().unwrap().keys() {
        if !d.metas.contains_key(k) {
            v.push(format!("graph.json lists {k} without a record"));
        }
    }
    v
}

/// What other readers of `$CHAT_ROOT` would trip over in `nodes/`: an entry that is not a
/// whole node (a directory named by its id, whose `meta.json` parses and names that id, with
/// its `chat.jsonl`). Pending work of the store lives in `.weft/`, never here.
pub fn partial_nodes(root: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    let Ok(rd) = std::fs::read_dir(root.join("nodes")) else {
        return bad;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let ok = !name.starts_with('.')
            && e.file_type().is_ok_and(|t| t.is_dir())
            && std::fs::read(e.path().join("meta.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .is_some_and(|m| m["id"] == name.as_str())
            && e.path().join("chat.jsonl").is_file();
        if !ok {
            bad.push(format!("nodes/{name}"));
        }
    }
    bad
}
