//! Actor CLI benchmark: `weft actors spawn` through the CLI (one process per command, as users
//! and scripts call it) on roots of 10, 1,000 and 10,000 existing nodes, with the files one
//! spawn opens and the bytes it reads (counted by the store, in-process through the same lazy
//! writer the CLI uses, beside the full open it replaces), next to the disk's raw append+fsync
//! rate measured in the same run. Prints figures; asserts nothing.
//!
//! `cargo build --release -p weft-host --bin weft && cargo run --release -p weft-bench --bin
//! actors_cli -- [--weft target/release/weft] [--dir DIR] [--spawns N] [--sizes 10,1000,10000]
//! [--harness PATH] [--keep]` (default: 40 CLI spawns per size, in the system temp dir).
//!
//! The roots are generated on disk (a template task spawned through the CLI, copied under new
//! ids with the parent's `spawned[]`, routing markers, `graph.json` entries and metathread
//! records a spawn writes), not spawned one by one; all of them before the first timed spawn,
//! and flushed to disk (`sync`) before it; the timed spawns then go round the sizes (one per
//! size per round), so that every size sees the disk in the same state. The raw fsync rate is
//! one figure for the whole run.
//!
//! `--harness PATH` (optional; the benchmark runs without it) also drives dev-centr/harness's
//! CLI (`PATH spawn ROOT --parent=coordinator --type=task --title=ID`, one process per spawn,
//! no fsync) on a harness-format root of the same shape, generated the same way from a
//! template the harness spawned itself, interleaved spawn by spawn with weft's on the same
//! disk (each spawn followed by an untimed `sync`, so that neither pays for what the other
//! left unwritten), and prints its rate beside weft's and the ratio. The harness binary is
//! yours to provide: this repository carries neither its code nor a recipe that builds it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use weft_bench::disk::raw_fsync_rate;
use weft_core::actors::{HarnessConfig, NodeType, SpawnRequest};
use weft_host::actors::Session;

const TEMPLATE: &str = "gen-00000";

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn weft(bin: &Path) -> Command {
    let mut c = Command::new(bin);
    for k in [
        "ACTOR_AGENTIC_UI",
        "ACTOR_GRAPH_EPOCHS",
        "ACTOR_WAIT_GRAPH",
        "ACTOR_NODE_STORE",
        "GIT_CLOSEOUT",
        "PROJECT_INBOX",
        "PROJECT_INBOX_CHAPTERS",
    ] {
        c.env_remove(k);
    }
    c
}

fn run(bin: &Path, args: &[&str]) {
    let out = weft(bin).args(args).output().expect("weft runs");
    assert!(
        out.status.success(),
        "weft {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Copies the template task `TEMPLATE` of `root` (spawned through a CLI, weft's or the
/// harness's) under `n - 1` new ids, with the coordinator's `spawned[]`, routing markers,
/// `graph.json` entries and metathread records a spawn writes.
fn replicate(root: &Path, n: usize) {
    let read = |rel: &str| std::fs::read_to_string(root.join(rel)).expect("template file");
    let t_meta = read(&format!("nodes/{TEMPLATE}/meta.json"));
    let t_chat = read(&format!("nodes/{TEMPLATE}/chat.jsonl"));
    let mut c_chat = read("nodes/coordinator/chat.jsonl");
    let t_marker = c_chat.lines().last().expect("marker").to_owned();
    let mut meta_log = read("orchestrator/meta.jsonl");
    let t_record = meta_log.lines().last().expect("record").to_owned();
    let mut graph: Value = serde_json::from_str(&read("graph.json")).expect("graph");
    let mut coord: Value =
        serde_json::from_str(&read("nodes/coordinator/meta.json")).expect("coordinator");
    let mut lines = c_chat.lines().count() as u64;
    for i in 1..n {
        let id = format!("gen-{i:05}");
        let dir = root.join("nodes").join(&id);
        std::fs::create_dir(&dir).expect("node dir");
        std::fs::write(dir.join("meta.json"), t_meta.replace(TEMPLATE, &id)).expect("meta");
        std::fs::write(dir.join("chat.jsonl"), &t_chat).expect("chat");
        lines += 1;
        c_chat.push_str(&t_marker.replace(TEMPLATE, &id));
        c_chat.push('\n');
        let mut rec: Value = serde_json::from_str(&t_record.replace(TEMPLATE, &id)).expect("rec");
        rec["parentLine"] = json!(lines);
        meta_log.push_str(&serde_json::to_string(&rec).expect("json"));
        meta_log.push('\n');
        graph["nodes"][&id] = graph["nodes"][TEMPLATE].clone();
        coord["spawned"]
            .as_array_mut()
            .expect("spawned")
            .push(json!(id));
    }
    let write = |rel: &str, text: String| std::fs::write(root.join(rel), text).expect("write");
    write("nodes/coordinator/chat.jsonl", c_chat);
    write("orchestrator/meta.jsonl", meta_log);
    write(
        "graph.json",
        serde_json::to_string_pretty(&graph).expect("json") + "\n",
    );
    write(
        "nodes/coordinator/meta.json",
        serde_json::to_string_pretty(&coord).expect("json") + "\n",
    );
}

/// A root with the coordinator and `n` task children, written directly.
fn generate(bin: &Path, root: &Path, n: usize) {
    let r = root.to_str().expect("utf-8 path");
    run(bin, &["actors", "init", r, "--json"]);
    run(bin, &["actors", "spawn", r, "--id", TEMPLATE, "--json"]);
    replicate(root, n);
}

/// Runs the harness CLI (`h`) with `args`; panics with its stderr if it fails.
fn run_harness(h: &Path, args: &[&str]) {
    let out = Command::new(h).args(args).output().expect("harness runs");
    assert!(
        out.status.success(),
        "harness {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A harness-format root (dev-centr/harness's layout: `graph.json`, `nodes/<id>/meta.json` and
/// `chat.jsonl`, `orchestrator/meta.jsonl`) with the coordinator and `n` task children: a
/// template task spawned through the harness CLI, copied under new ids with what a harness
/// spawn writes (the parent's `spawned[]`, its routing marker, the `graph.json` entry, the
/// metathread record). `root` must be absolute (the harness joins node paths onto it).
fn generate_harness(h: &Path, root: &Path, n: usize) {
    let r = root.to_str().expect("utf-8 path");
    run_harness(h, &["init", r, "--title=Bench"]);
    run_harness(
        h,
        &[
            "spawn",
            r,
            "--parent=coordinator",
            "--type=task",
            &format!("--title={TEMPLATE}"),
        ],
    );
    replicate(root, n);
}

/// Files opened, bytes read and bytes written by one spawn: through the CLI's lazy writer
/// (after one lazy spawn that finds the generated logs and reads them whole once, and leaves
/// the stamps the next one trusts), and through the full open (the long-lived writer's
/// spawn: its bytes written are what the desk writes per spawn).
fn opens(root: &Path, tag: &str) -> ((u64, u64, u64), (u64, u64, u64)) {
    let wait = Duration::from_secs(5);
    let spawn = |mut s: Session, id: String| {
        let mut r = SpawnRequest::new("coordinator", NodeType::Task);
        r.id = Some(id);
        s.graph
            .spawn(weft_host::actors::wall_ms(), r)
            .expect("spawn");
        s.flush().expect("flush");
        let written = s
            .store
            .stats
            .bytes_written
            .load(std::sync::atomic::Ordering::Relaxed);
        (s.store.opens(), s.store.bytes_read(), written)
    };
    let lazy_writer = || {
        let s = Session::writer_lazy(root, HarnessConfig::default(), wait, &["coordinator"], true)
            .expect("lazy writer");
        assert!(
            s.report.lazy_fallback.is_none(),
            "{:?}",
            s.report.lazy_fallback
        );
        s
    };
    spawn(lazy_writer(), format!("probe-warm-{tag}"));
    let lazy = spawn(lazy_writer(), format!("probe-lazy-{tag}"));
    let s = Session::writer(root, HarnessConfig::default(), wait).expect("writer");
    let full = spawn(s, format!("probe-full-{tag}"));
    (lazy, full)
}

/// Writes every file system's pending changes out (`sync`; the callers do not time it): false
/// when `sync` could not be run.
fn sync_disk() -> bool {
    Command::new("sync").status().is_ok_and(|s| s.success())
}

fn main() {
    let bin = PathBuf::from(arg("--weft").unwrap_or_else(|| "target/release/weft".into()));
    assert!(bin.is_file(), "{} is not built", bin.display());
    let harness = arg("--harness").map(PathBuf::from);
    if let Some(h) = &harness {
        assert!(h.is_file(), "--harness {} is not a file", h.display());
    }
    let base = arg("--dir")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let spawns: usize = arg("--spawns").and_then(|v| v.parse().ok()).unwrap_or(40);
    let sizes: Vec<usize> = arg("--sizes")
        .unwrap_or_else(|| "10,1000,10000".into())
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    // `--keep`: leave the generated roots on disk (for profiling a spawn on them).
    let keep = std::env::args().any(|a| a == "--keep");
    let dir = base.join(format!("weft-actors-cli-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("bench dir");
    // The harness joins node paths onto the root: give it an absolute one.
    let dir = std::fs::canonicalize(&dir).expect("bench dir");
    println!(
        "actor CLI benchmark in {} ({} spawns per size, {}{})",
        dir.display(),
        spawns,
        bin.display(),
        harness
            .as_ref()
            .map(|h| format!(", harness {}, interleaved", h.display()))
            .unwrap_or_default()
    );
    print!(
        "{:>8}  {:>12}  {:>10}  {:>10}  {:>11}  {:>10}  {:>11}  {:>12}  {:>12}  {:>14}",
        "nodes",
        "CLI spawns/s",
        "ms/spawn",
        "opens lazy",
        "bytes lazy",
        "opens full",
        "bytes full",
        "written lazy",
        "written full",
        "raw fsyncs/s"
    );
    if harness.is_some() {
        print!(
            "  {:>16}  {:>16}  {:>13}",
            "harness spawns/s", "harness ms/spawn", "weft÷harness"
        );
    }
    println!();
    // Every root is generated first, then the spawns go round the sizes (one per size per
    // round, the order rotating), so that every size sees the same disk: on this kind of VM
    // creating inodes is slow for minutes after many were freed or made, and measuring the
    // sizes one after another (each just after growing its root) charged that to the last.
    struct Row {
        n: usize,
        root: PathBuf,
        h_root: PathBuf,
        lazy: (u64, u64, u64),
        full: (u64, u64, u64),
        t: f64,
        ht: f64,
    }
    let mut rows: Vec<Row> = sizes
        .iter()
        .map(|&n| {
            let root = dir.join(format!("root-{n}"));
            generate(&bin, &root, n);
            let (lazy, full) = opens(&root, &n.to_string());
            let h_root = dir.join(format!("harness-root-{n}"));
            if let Some(h) = &harness {
                generate_harness(h, &h_root, n);
            }
            Row {
                n,
                root,
                h_root,
                lazy,
                full,
                t: 0.0,
                ht: 0.0,
            }
        })
        .collect();
    // The roots were written without fsync (tens of thousands of files at 10,000 nodes): they
    // are flushed now, so that no timed spawn's fsync pays for their writeback.
    let flushed = Instant::now();
    let synced = sync_disk();
    println!(
        "  (generated roots {} in {:.2} s before the first timed spawn)",
        if synced {
            "flushed to disk (`sync`)"
        } else {
            "NOT flushed: `sync` failed"
        },
        flushed.elapsed().as_secs_f64()
    );
    // Interleaved with the raw probe (and the harness), so all see the same disk.
    let (mut raw_n, mut raw_t) = (0usize, 0.0f64);
    for i in 0..spawns {
        if i % 10 == 0 {
            let k = 40;
            let rate = raw_fsync_rate(&dir, k, 200).expect("raw fsync probe");
            raw_n += k;
            raw_t += k as f64 / rate;
        }
        let id = format!("cli-{i:05}");
        let count = rows.len();
        for j in 0..count {
            let row = &mut rows[(i + j) % count];
            let r = row.root.to_str().expect("utf-8 path");
            let weft_spawn = || {
                let start = Instant::now();
                run(&bin, &["actors", "spawn", r, "--id", &id, "--json"]);
                start.elapsed().as_secs_f64()
            };
            let Some(h) = &harness else {
                row.t += weft_spawn();
                continue;
            };
            let hr = row.h_root.to_str().expect("utf-8 path");
            let title = format!("--title={id}");
            let harness_spawn = || {
                let start = Instant::now();
                let a = ["spawn", hr, "--parent=coordinator", "--type=task", &title];
                run_harness(h, &a);
                start.elapsed().as_secs_f64()
            };
            // Alternate who goes first, so neither always follows the other. After each spawn
            // (untimed) what it left unsynced is flushed: the harness never fsyncs, and its
            // writes (at 10,000 nodes its rewritten graph) would otherwise be committed by
            // weft's next fsync (an ext4 journal commit carries every pending metadata change
            // of the filesystem, and in ordered mode the data they need) and timed as weft's.
            if i % 2 == 0 {
                row.t += weft_spawn();
                sync_disk();
                row.ht += harness_spawn();
                sync_disk();
            } else {
                row.ht += harness_spawn();
                sync_disk();
                row.t += weft_spawn();
                sync_disk();
            }
        }
    }
    for row in &rows {
        print!(
            "{:>8}  {:>12.1}  {:>10.2}  {:>10}  {:>11}  {:>10}  {:>11}  {:>12}  {:>12}  {:>14.0}",
            row.n,
            spawns as f64 / row.t,
            1000.0 * row.t / spawns as f64,
            row.lazy.0,
            row.lazy.1,
            row.full.0,
            row.full.1,
            row.lazy.2,
            row.full.2,
            raw_n as f64 / raw_t
        );
        if harness.is_some() {
            print!(
                "  {:>16.1}  {:>16.2}  {:>13.2}",
                spawns as f64 / row.ht,
                1000.0 * row.ht / spawns as f64,
                row.ht / row.t
            );
        }
        println!();
    }
    if let (Some(first), Some(last)) = (rows.first(), rows.last())
        && rows.len() > 1
    {
        println!(
            "CLI rate at {} nodes ÷ at {} nodes: {:.2} (target: within 20%)",
            last.n,
            first.n,
            first.t / last.t
        );
    }
    if !keep {
        for row in &rows {
            let _ = std::fs::remove_dir_all(&row.root);
            let _ = std::fs::remove_dir_all(&row.h_root);
        }
    }
    if !keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
