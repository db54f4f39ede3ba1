//! Compatibility with a `$CHAT_ROOT` written by dev-centr/harness
//! (`../shared/fixtures/harness-root`): identical lineage (ids, types, spawnedBy, spawned
//! order, routing-marker line refs), nothing rewritten by reading, and writes that keep what
//! that implementation put in its records.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::*;
use serde_json::Value;

fn fixture() -> PathBuf {
    let p = repo().join("../shared/fixtures/harness-root");
    assert!(
        p.join("graph.json").is_file(),
        "the shared fixture is missing: {} (CI keeps ../shared beside the clone)",
        p.display()
    );
    p
}

/// The lineage as the fixture's own files state it, read without weft.
struct Expected {
    nodes: BTreeMap<String, (String, Option<String>, Vec<String>)>,
    /// child → (parent, marker line in the parent's chat)
    markers: BTreeMap<String, (String, u64)>,
}

fn expected() -> Expected {
    let root = fixture();
    let mut nodes = BTreeMap::new();
    let mut markers = BTreeMap::new();
    for e in std::fs::read_dir(root.join("nodes")).unwrap() {
        let e = e.unwrap();
        let m: Value =
            serde_json::from_slice(&std::fs::read(e.path().join("meta.json")).unwrap()).unwrap();
        let id = m["id"].as_str().unwrap().to_owned();
        let spawned = m["spawned"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_owned())
            .collect();
        nodes.insert(
            id.clone(),
            (
                m["type"].as_str().unwrap().to_owned(),
                m["spawnedBy"].as_str().map(str::to_owned),
                spawned,
            ),
        );
        let chat = std::fs::read_to_string(e.path().join("chat.jsonl")).unwrap();
        for (i, l) in chat.lines().filter(|l| !l.trim().is_empty()).enumerate() {
            let l: Value = serde_json::from_str(l).unwrap();
            if let Some(c) = marker_child(&l) {
                markers.insert(c, (id.clone(), i as u64 + 1));
            }
        }
    }
    assert_eq!(nodes.len(), 8, "the fixture holds 8 nodes");
    Expected { nodes, markers }
}

#[test]
fn the_harness_root_opens_with_identical_lineage_and_reading_writes_nothing() {
    let exp = expected();
    let root = scratch("fixture");
    copy_dir(&fixture(), &root);
    let before = snapshot(&root);
    let r = root.to_str().unwrap();

    let g = run_json(&["actors", "graph", r, "--json"]);
    assert_eq!(g["root"], "coordinator");
    // The one contradiction the harness writes: `awaiting_user` with `awaitingUser: false`,
    // reported as written and diagnosed (nothing else is complained about).
    let codes: Vec<(&str, &str)> = g["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["code"].as_str().unwrap(), d["file"].as_str().unwrap()))
        .collect();
    assert_eq!(
        codes,
        [(
            "STATUS_CONTRADICTION",
            "nodes/cla-permissions-tangent/meta.json"
        )],
        "{}",
        g["diagnostics"]
    );
    let cla = g["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == "cla-permissions-tangent")
        .unwrap();
    assert_eq!(
        (&cla["status"], &cla["awaitingUser"]),
        (
            &serde_json::json!("awaiting_user"),
            &serde_json::json!(false)
        ),
        "reported as on disk"
    );
    let got: BTreeMap<String, (String, Option<String>, Vec<String>)> = g["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["id"].as_str().unwrap().to_owned(),
                (
                    n["type"].as_str().unwrap().to_owned(),
                    n["spawnedBy"].as_str().map(str::to_owned),
                    n["spawned"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|c| c.as_str().unwrap().to_owned())
                        .collect(),
                ),
            )
        })
        .collect();
    assert_eq!(got, exp.nodes, "ids, types, spawnedBy and spawned order");
    // Every node is listed in spawn order from the root.
    let order: Vec<&str> = g["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        order,
        [
            "coordinator",
            "cla-permissions-tangent",
            "disambig-boundary-2",
            "side-note-the-bot-config-lives-in-gith",
            "docs-sync",
            "ci-fix-flaky-test",
            "disambig-boundary",
            "release-notes"
        ]
    );

    // Audit walks the harness's spawn records: every parentLine is the routing marker.
    let a = run_json(&["actors", "audit", r, "--json"]);
    assert_eq!(
        (a["refs"].as_u64(), a["ok"].as_u64()),
        (Some(7), Some(7)),
        "{a}"
    );
    for e in a["entries"].as_array().unwrap() {
        let child = e["peek"]["text"]
            .as_str()
            .unwrap()
            .split('`')
            .nth(1)
            .unwrap();
        assert_eq!(
            exp.markers[child],
            (
                e["node"].as_str().unwrap().to_owned(),
                e["line"].as_u64().unwrap()
            )
        );
    }

    // Recovery finds nothing to repair, and nothing the harness wrote was rewritten.
    let rec = run_json(&["actors", "recover", r, "--json"]);
    assert_eq!(rec["report"]["repairs"], serde_json::json!([]), "{rec}");
    assert_eq!(rec["violations"], serde_json::json!([]));
    let after = snapshot(&root);
    for (p, b) in &before {
        assert_eq!(after.get(p), Some(b), "{p} changed by reading");
    }
    let new: Vec<&String> = after.keys().filter(|k| !before.contains_key(*k)).collect();
    for n in &new {
        assert!(
            ["orchestrator/index.json", ".weft-lock", ".weft-readers"].contains(&n.as_str()),
            "{n} created by reading"
        );
    }
    assert!(lineage_problems(&read_disk(&root)).is_empty());
}

#[test]
fn writes_to_a_harness_root_keep_its_fields_and_extend_its_lineage() {
    let root = scratch("fixture-write");
    copy_dir(&fixture(), &root);
    let r = root.to_str().unwrap();
    let s = run_json(&[
        "actors",
        "spawn",
        r,
        "--parent",
        "coordinator",
        "--type",
        "task",
        "--title",
        "changelog",
        "--json",
    ]);
    assert_eq!(s["id"], "changelog");
    assert_eq!(s["markerLine"], 10, "the coordinator's chat had 9 lines");
    let d = read_disk(&root);
    assert!(
        lineage_problems(&d).is_empty(),
        "{:?}",
        lineage_problems(&d)
    );
    let c = &d.metas["coordinator"];
    assert_eq!(
        c["mixrModel"], "z-ai/glm-5.3",
        "unknown fields survive the rewrite"
    );
    assert_eq!(
        c["mixrReason"],
        "Long-context coordinator / summarization (GLM)"
    );
    assert_eq!(c["address"], "/var/lib/chat-root/nodes/coordinator");
    assert_eq!(c["createdAt"], "20261129T182011.7616737Z");
    let spawned: Vec<&str> = c["spawned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        spawned,
        [
            "cla-permissions-tangent",
            "docs-sync",
            "ci-fix-flaky-test",
            "disambig-boundary",
            "release-notes",
            "changelog"
        ]
    );
    let rec = d.metathread.last().unwrap();
    assert_eq!(
        (
            rec["kind"].as_str(),
            rec["child"].as_str(),
            rec["parentLine"].as_u64()
        ),
        (Some("spawn"), Some("changelog"), Some(10))
    );
    // The harness's extra metathread kinds (route) and its timestamps stay readable.
    assert_eq!(
        d.metathread.iter().filter(|m| m["kind"] == "route").count(),
        4
    );

    // Its wait subscriptions work: docs-sync waits (warn) on an awaiting discussion and
    // (enforce) on a blocked task.
    let st = run_json(&["actors", "status", r, "--node", "docs-sync", "--json"]);
    let outcomes: Vec<&str> = st["waits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["warn", "blocked"]);
    // The scrubber replays the two waves: at 18:20:15 the second wave did not exist yet.
    let t = run_json(&[
        "actors",
        "graph",
        r,
        "--json",
        "--view",
        "temporal",
        "--at",
        "2026-11-29T18:20:15Z",
    ]);
    let visible: Vec<&str> = t["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["visible"] == true)
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        visible,
        [
            "coordinator",
            "cla-permissions-tangent",
            "disambig-boundary-2",
            "docs-sync",
            "ci-fix-flaky-test",
            "disambig-boundary"
        ]
    );
    // The harness's archived task (hidden) stays out of the grid.
    let grid = run_json(&["actors", "graph", r, "--json", "--view", "grid"]);
    let tiles: Vec<&str> = grid["tiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(tiles, ["docs-sync", "ci-fix-flaky-test", "changelog"]);
}
