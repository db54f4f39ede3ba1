//! The bad-input battery: invalid ids, unknown nodes, corrupt and torn files, a root that is not
//! a graph, bad harness variables, concurrent writers. Every refusal has a clear code and exit
//! status and changes nothing on disk.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use serde_json::Value;

fn init(name: &str) -> (std::path::PathBuf, String) {
    let root = scratch(name);
    let r = root.to_str().unwrap().to_owned();
    run_json(&["actors", "init", &r, "--json"]);
    (root, r)
}

/// Runs `args` expecting a refusal, and checks that the root is byte-for-byte unchanged.
fn refused(root: &Path, args: &[&str], code: &str, status: i32) -> Value {
    let before = snapshot(root);
    let v = run_err(args, code, status);
    let after = snapshot(root);
    let changed: Vec<&String> = after
        .keys()
        // The lock holder's own spare node directories (a running desk makes them in the
        // background) are not the refused command's doing.
        .filter(|k| {
            before.get(*k) != after.get(*k)
                && !k.ends_with(".weft-lock")
                && !k.starts_with(".weft/.spare,")
        })
        .collect();
    assert!(changed.is_empty(), "{args:?} changed {changed:?}");
    v
}

#[test]
fn ids_and_arguments_are_validated_before_anything_is_written() {
    let (root, r) = init("bad-ids");
    let outside = root.parent().unwrap().join("escaped");
    for id in [
        "../escaped",
        "a/b",
        ".hidden",
        "..",
        "tab\there",
        "new\nline",
        "back\\slash",
        &"x".repeat(65),
        "",
    ] {
        let v = refused(
            &root,
            &["actors", "spawn", &r, "--id", id, "--json"],
            "INVALID_NODE_ID",
            64,
        );
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("invalid node id"),
            "{v}"
        );
    }
    assert!(!outside.exists(), "nothing may be written outside the root");
    refused(
        &root,
        &["actors", "spawn", &r, "--parent", "../../etc", "--json"],
        "INVALID_NODE_ID",
        64,
    );
    refused(
        &root,
        &["actors", "spawn", &r, "--parent", "nobody", "--json"],
        "UNKNOWN_NODE",
        1,
    );
    refused(
        &root,
        &["actors", "spawn", &r, "--id", "coordinator", "--json"],
        "NODE_EXISTS",
        1,
    );
    refused(
        &root,
        &["actors", "spawn", &r, "--type", "coordinator", "--json"],
        "SPAWN_RULE",
        1,
    );
    refused(
        &root,
        &[
            "actors",
            "spawn",
            &r,
            "--git-closeout",
            "push-always",
            "--json",
        ],
        "INVALID_ARGUMENT",
        64,
    );
    refused(
        &root,
        &[
            "actors",
            "message",
            &r,
            "--node",
            "coordinator",
            "--text",
            "  ",
            "--json",
        ],
        "INVALID_ARGUMENT",
        64,
    );
    refused(
        &root,
        &[
            "actors",
            "message",
            &r,
            "--node",
            "coordinator",
            "--role",
            "progress",
            "--text",
            "50%",
            "--json",
        ],
        "CADENCE_VIOLATION",
        1,
    );
    refused(
        &root,
        &[
            "actors",
            "message",
            &r,
            "--node",
            "coordinator",
            "--role",
            "routing",
            "--text",
            "→ x",
            "--json",
        ],
        "INVALID_ARGUMENT",
        64,
    );
    refused(
        &root,
        &[
            "actors",
            "message",
            &r,
            "--node",
            "coordinator",
            "--role",
            "robot",
            "--text",
            "x",
            "--json",
        ],
        "INVALID_ARGUMENT",
        64,
    );
    refused(
        &root,
        &[
            "actors",
            "status",
            &r,
            "--node",
            "coordinator",
            "--set",
            "exploded",
            "--json",
        ],
        "INVALID_ARGUMENT",
        64,
    );
    refused(
        &root,
        &[
            "actors",
            "ref",
            &r,
            "--node",
            "coordinator",
            "--line",
            "99",
            "--json",
        ],
        "REF_INVALID",
        1,
    );
    refused(
        &root,
        &[
            "actors",
            "resolve",
            &r,
            "--node",
            "coordinator",
            "--continue",
            "--json",
        ],
        "NOT_PAUSING",
        1,
    );
    refused(
        &root,
        &["actors", "epoch", &r, "--json"],
        "EPOCHS_DISABLED",
        1,
    );
    refused(
        &root,
        &["actors", "reset", &r, "--before", "last tuesday", "--json"],
        "INVALID_ARGUMENT",
        64,
    );
    refused(
        &root,
        &[
            "actors",
            "wait",
            &r,
            "--node",
            "coordinator",
            "--on",
            "coordinator",
            "--json",
        ],
        "INVALID_ARGUMENT",
        64,
    );
    // A line over 1 MiB is refused, not truncated.
    let before = snapshot(&root);
    let mut p = weft()
        .args([
            "actors",
            "message",
            &r,
            "--node",
            "coordinator",
            "--text",
            "-",
            "--json",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        p.stdin.as_mut().unwrap(),
        "x".repeat((1 << 20) + 1).as_bytes(),
    )
    .unwrap();
    let out = p.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stdout).contains("INVALID_ARGUMENT"));
    let mut after = snapshot(&root);
    let mut before = before;
    after.remove(".weft-lock");
    before.remove(".weft-lock");
    assert_eq!(after, before);
    assert!(lineage_problems(&read_disk(&root)).is_empty());
}

#[test]
fn roots_that_are_not_graphs_and_bad_variables_are_refused_clearly() {
    let empty = scratch("bad-root");
    run_err(
        &["actors", "graph", empty.to_str().unwrap(), "--json"],
        "NOT_INITIALIZED",
        66,
    );
    run_err(
        &["actors", "spawn", empty.to_str().unwrap(), "--json"],
        "NOT_INITIALIZED",
        66,
    );
    let missing = empty.join("nope");
    run_err(
        &["actors", "graph", missing.to_str().unwrap(), "--json"],
        "NOT_INITIALIZED",
        66,
    );
    let (_root, r) = init("bad-init");
    run_err(&["actors", "init", &r, "--json"], "ALREADY_INITIALIZED", 1);
    let file = empty.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = run(&["actors", "init", file.to_str().unwrap(), "--json"]);
    assert_eq!(
        out.status.code(),
        Some(74),
        "a root that is a file: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = weft()
        .args(["actors", "graph", &r, "--json"])
        .env("ACTOR_WAIT_GRAPH", "sometimes")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], "CONFIG_INVALID");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ACTOR_WAIT_GRAPH")
    );
    // A deprecated alias is honoured with a note.
    let out = weft()
        .args(["actors", "epoch", &r, "--json"])
        .env("PROJECT_INBOX_CHAPTERS", "on")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("PROJECT_INBOX_CHAPTERS is deprecated"));
}

/// Crash injection is test machinery: the shipped binary never arms a failpoint, so it ignores
/// the crash variables and records the spawn (only `weft-failpoints`, the crate
/// `tests/failpoints`, reads them).
#[test]
fn the_shipped_binary_ignores_the_crash_variables() {
    let (root, r) = init("failpoints-off");
    let out = weft()
        .args([
            "actors",
            "spawn",
            &r,
            "--type",
            "discussion",
            "--id",
            "d",
            "--json",
        ])
        .env("WEFT_ACTORS_CRASH_AT", "1")
        .env("WEFT_ACTORS_CRASH_TEAR", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the shipped binary ignores the crash variables: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        root.join("nodes").join("d").is_dir(),
        "the spawn is recorded"
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn corrupt_and_torn_files_are_reported_with_file_and_line_and_isolated() {
    let (root, r) = init("bad-files");
    run_json(&["actors", "spawn", &r, "--id", "good", "--json"]);
    run_json(&["actors", "spawn", &r, "--id", "bad", "--json"]);
    run_json(&[
        "actors", "message", &r, "--node", "good", "--text", "one", "--json",
    ]);
    run_json(&[
        "actors", "message", &r, "--node", "good", "--text", "two", "--json",
    ]);
    std::fs::write(
        root.join("nodes/bad/meta.json"),
        "{\"id\": \"bad\", \"type\"",
    )
    .unwrap();
    let chat = std::fs::read_to_string(root.join("nodes/good/chat.jsonl"))
        .unwrap()
        .replacen("\"one\"", "\"one", 1);
    std::fs::write(root.join("nodes/good/chat.jsonl"), chat).unwrap();
    let mut meta = std::fs::OpenOptions::new()
        .append(true)
        .open(root.join("orchestrator/meta.jsonl"))
        .unwrap();
    std::io::Write::write_all(&mut meta, b"{\"kind\":\"ref\",\"no").unwrap();
    // Reading reports everything and still shows the graph.
    let out = run(&["actors", "graph", &r, "--json"]);
    assert!(out.status.success());
    let g: Value = serde_json::from_slice(&out.stdout).unwrap();
    let diags: Vec<(String, String, Option<u64>)> = g["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["code"].as_str().unwrap().into(),
                d["file"].as_str().unwrap().into(),
                d["line"].as_u64(),
            )
        })
        .collect();
    assert_eq!(
        diags,
        [
            ("CORRUPT_JSON".into(), "nodes/bad/meta.json".into(), Some(1)),
            (
                "CORRUPT_LINE".into(),
                "nodes/good/chat.jsonl".into(),
                Some(2)
            ),
            (
                "TORN_LINE".into(),
                "orchestrator/meta.jsonl".into(),
                Some(4)
            ),
        ]
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("nodes/good/chat.jsonl:2") && stderr.contains("orchestrator/meta.jsonl:4"),
        "{stderr}"
    );
    assert_eq!(g["broken"][0]["id"], "bad");
    assert_eq!(
        g["nodes"].as_array().unwrap().len(),
        2,
        "coordinator and good still work"
    );
    // Writes around the damage work; writes to the damaged node are refused.
    run_err(
        &[
            "actors", "message", &r, "--node", "bad", "--text", "x", "--json",
        ],
        "NODE_CORRUPT",
        1,
    );
    assert_eq!(
        run_json(&[
            "actors", "message", &r, "--node", "good", "--text", "three", "--json"
        ])["line"],
        4
    );
    // The torn metathread line was cut by the writer's recovery and kept aside, not dropped.
    let kept: Vec<String> = snapshot(&root)
        .into_keys()
        .filter(|k| k.starts_with("orchestrator/torn/"))
        .collect();
    assert_eq!(kept.len(), 1);
    let k: Value = serde_json::from_slice(&std::fs::read(root.join(&kept[0])).unwrap()).unwrap();
    assert_eq!(k["text"], "{\"kind\":\"ref\",\"no");
    assert_eq!(
        std::fs::read_to_string(root.join("nodes/bad/meta.json")).unwrap(),
        "{\"id\": \"bad\", \"type\"",
        "never overwritten"
    );
    // A corrupt graph index is moved aside and rebuilt.
    std::fs::write(root.join("graph.json"), "[1, 2").unwrap();
    let rec = run_json(&["actors", "recover", &r, "--json"]);
    assert!(
        rec["report"]["repairs"]
            .to_string()
            .contains("moved the unreadable graph.json"),
        "{rec}"
    );
    let g: Value =
        serde_json::from_slice(&std::fs::read(root.join("graph.json")).unwrap()).unwrap();
    assert_eq!(g["nodes"]["good"]["spawnedBy"], "coordinator");
    assert_eq!(
        g["nodes"]["bad"],
        Value::Null,
        "an unreadable node the index no longer knew stays out of it"
    );
}

#[test]
fn concurrent_writers_are_serialised_by_the_lock() {
    let (root, r) = init("bad-concurrent");
    // Four processes spawn ten children each at the same time: all forty land, in order per
    // parent, with consistent lineage.
    let handles: Vec<_> = (0..4)
        .map(|w| {
            let r = r.clone();
            std::thread::spawn(move || {
                for i in 0..10 {
                    run_json(&[
                        "actors",
                        "spawn",
                        &r,
                        "--type",
                        "task",
                        "--id",
                        &format!("w{w}-{i}"),
                        "--json",
                    ]);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let d = read_disk(&root);
    assert_eq!(d.metas.len(), 41);
    assert!(
        lineage_problems(&d).is_empty(),
        "{:?}",
        lineage_problems(&d)
    );
    let spawned: Vec<&str> = d.metas["coordinator"]["spawned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for w in 0..4 {
        let mine: Vec<&&str> = spawned
            .iter()
            .filter(|s| s.starts_with(&format!("w{w}-")))
            .collect();
        let want: Vec<String> = (0..10).map(|i| format!("w{w}-{i}")).collect();
        assert_eq!(mine.iter().map(|s| s.to_string()).collect::<Vec<_>>(), want);
    }
    // A long-lived writer (the desk) holds the root: a CLI writer waits, then gives up clearly
    // and changes nothing; readers still read.
    let mut desk = weft()
        .args(["actors", "desk", &r, "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(desk.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.contains("http://127.0.0.1:"), "{line}");
    let v = refused(
        &root,
        &["actors", "spawn", &r, "--lock-timeout-ms", "200", "--json"],
        "STORE_LOCKED",
        75,
    );
    assert!(
        v["error"]["message"].as_str().unwrap().contains("pid"),
        "the message names the holder: {v}"
    );
    assert_eq!(
        run_json(&["actors", "graph", &r, "--json"])["nodes"]
            .as_array()
            .unwrap()
            .len(),
        41
    );
    let a = run_json(&["actors", "audit", &r, "--json"]);
    assert_eq!(a["index"]["written"], false);
    desk.kill().unwrap();
    desk.wait().unwrap();
    // The kernel released the killed desk's lock.
    std::thread::sleep(Duration::from_millis(50));
    run_json(&[
        "actors",
        "spawn",
        &r,
        "--lock-timeout-ms",
        "2000",
        "--id",
        "after-desk",
        "--json",
    ]);
}
