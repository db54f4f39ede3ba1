//! Actor-graph benchmark: durable spawns/s and messages/s on the filesystem store, beside the
//! raw fsync-per-write rate of the same disk measured in the same run (the physical limit),
//! and the audit walk of 10,000 metathread refs. Prints figures; asserts nothing.
//!
//! `cargo run --release -p weft-bench --bin actors -- [--dir DIR] [--spawns N] [--messages N]
//! [--refs N]` (default: the system temp dir, 200 spawns, 500 messages, 10,000 refs).

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Instant;

use weft_bench::disk::{raw_create_rate, raw_fsync_rate};
use weft_core::actors::store::{ActorStore, MemoryStore, Snapshot};
use weft_core::actors::{ActorGraph, HarnessConfig, NewLine, NodeType, SpawnRequest};
use weft_host::actors::{FsStore, flush};

/// Durable writes one spawn needs: the child's directory (meta + chat, one atomic unit), the
/// parent's record, the graph index, the parent's routing marker, the metathread record.
const WRITES_PER_SPAWN: f64 = 5.0;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let base = args
        .iter()
        .position(|a| a == "--dir")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let spawns = arg("--spawns", 200);
    let messages = arg("--messages", 500);
    let refs = arg("--refs", 10_000);
    let dir = base.join(format!("weft-actors-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("bench dir");
    println!("actor graph benchmark in {}", dir.display());

    // Spawns, messages and the disk's raw rate are measured in interleaved rounds, so that all
    // three see the same disk (a shared machine's I/O load changes from second to second).
    let root = dir.join("root");
    let mut store = FsStore::open_writer(&root, std::time::Duration::ZERO).expect("lock");
    let snap = store.load().expect("load");
    let now = weft_host::actors::wall_ms;
    let mut g = ActorGraph::init(
        HarnessConfig::default(),
        &store.address(),
        &snap,
        now(),
        "bench",
    )
    .expect("init");
    flush(&mut g, &mut store).expect("init batch");
    let rounds = 10;
    let (mut raw_n, mut raw_t) = (0usize, 0.0f64);
    let (mut new_n, mut new_t) = (0usize, 0.0f64);
    let (mut sp_n, mut sp_t, mut sp_core, mut sp_fsyncs, mut sp_rounds) =
        (0usize, 0.0f64, 0.0f64, 0u64, 0u64);
    let (mut msg_n, mut msg_t, mut msg_fsyncs) = (0usize, 0.0f64, 0u64);
    // Where a spawn's time goes: time in the store's `apply`, and waiting for each round.
    let mut sp_apply = 0u64;
    let mut sp_round = [0u64; 6];
    let mut round_ratios = Vec::new();
    for round in 0..rounds {
        // The raw rate: 200-byte appends, each followed by an fsync.
        let n = 40;
        let rate = raw_fsync_rate(&dir, n, 200).expect("raw fsync probe");
        raw_n += n;
        raw_t += n as f64 / rate;
        let created = raw_create_rate(&dir, 20, 300).expect("create probe");
        new_n += 20;
        new_t += 20.0 / created;
        // Durable spawns, through the core and the filesystem store, as the CLI and desk do.
        let f0 = store.stats.fsyncs.load(Ordering::Relaxed);
        let r0 = store.stats.rounds.load(Ordering::Relaxed);
        let a0 = store.stats.apply_ns.load(Ordering::Relaxed);
        let rn0: Vec<u64> = store
            .stats
            .round_ns
            .iter()
            .map(|r| r.load(Ordering::Relaxed))
            .collect();
        let t = Instant::now();
        let per = spawns / rounds;
        for i in 0..per {
            let k = round * per + i;
            let mut r = SpawnRequest::new(
                "coordinator",
                if k.is_multiple_of(4) {
                    NodeType::Discussion
                } else {
                    NodeType::Task
                },
            );
            r.id = Some(format!("n{k}"));
            let c = Instant::now();
            g.spawn(now(), r).expect("spawn");
            sp_core += c.elapsed().as_secs_f64();
            flush(&mut g, &mut store).expect("durable spawn");
        }
        let dt = t.elapsed().as_secs_f64();
        sp_t += dt;
        sp_n += per;
        sp_fsyncs += store.stats.fsyncs.load(Ordering::Relaxed) - f0;
        sp_rounds += store.stats.rounds.load(Ordering::Relaxed) - r0;
        sp_apply += store.stats.apply_ns.load(Ordering::Relaxed) - a0;
        for (i, r) in store.stats.round_ns.iter().enumerate() {
            sp_round[i] += r.load(Ordering::Relaxed) - rn0[i];
        }
        round_ratios.push((per as f64 / dt) / (rate / WRITES_PER_SPAWN));
        // Durable messages: one fsynced append each.
        let f0 = store.stats.fsyncs.load(Ordering::Relaxed);
        let t = Instant::now();
        for i in 0..messages / rounds {
            g.append(
                now(),
                "n1",
                NewLine::user(format!("message {i}: progress on the docs sync")),
            )
            .expect("append");
            flush(&mut g, &mut store).expect("durable message");
        }
        msg_t += t.elapsed().as_secs_f64();
        msg_n += messages / rounds;
        msg_fsyncs += store.stats.fsyncs.load(Ordering::Relaxed) - f0;
    }
    assert!(g.lineage_violations().is_empty());
    drop(store);
    let raw = raw_n as f64 / raw_t;
    let spawn_rate = sp_n as f64 / sp_t;
    let msg_rate = msg_n as f64 / msg_t;
    let target = 0.5 * raw / WRITES_PER_SPAWN;
    round_ratios.sort_by(f64::total_cmp);
    let created = new_n as f64 / new_t;
    println!(
        "raw fsync-per-write rate        {raw:>9.0} writes/s  (200-byte append + fsync, {raw_n} writes in {rounds} rounds)"
    );
    println!(
        "raw new-file rate               {created:>9.0} files/s   (create + 300-byte write + fsync: a new inode costs a metadata commit)"
    );
    println!(
        "durable spawns                  {spawn_rate:>9.1} spawns/s  ({:.2} ms each: {:.3} ms in the core, {:.1} fsyncs in {:.1} concurrent rounds)",
        sp_t * 1000.0 / sp_n as f64,
        sp_core * 1000.0 / sp_n as f64,
        sp_fsyncs as f64 / sp_n as f64,
        sp_rounds as f64 / sp_n as f64
    );
    println!(
        "  vs raw / {WRITES_PER_SPAWN} writes per spawn = {:.1} spawns/s: {:.0}% (target ≥ 50%, i.e. ≥ {target:.1} spawns/s: {}); per round {:.0}%..{:.0}% (median {:.0}%)\n  a spawn takes as long as {:.1} new-file fsyncs (it creates 3 inodes — node directory, meta, chat — moves 1 entry, the directory into nodes/, and grows the 2 records in place)",
        raw / WRITES_PER_SPAWN,
        100.0 * spawn_rate / (raw / WRITES_PER_SPAWN),
        if spawn_rate >= target {
            "met"
        } else {
            "NOT met"
        },
        100.0 * round_ratios[0],
        100.0 * round_ratios[round_ratios.len() - 1],
        100.0 * round_ratios[round_ratios.len() / 2],
        created / spawn_rate
    );
    let per_ms = |ns: u64| ns as f64 / 1e6 / sp_n as f64;
    let waited: u64 = sp_round.iter().sum();
    println!(
        "  per spawn: {:.3} ms in the store = rounds {} + {:.3} ms creating, writing and renaming",
        per_ms(sp_apply),
        sp_round
            .iter()
            .filter(|r| **r > 0)
            .map(|r| format!("{:.3}", per_ms(*r)))
            .collect::<Vec<_>>()
            .join(" + "),
        per_ms(sp_apply.saturating_sub(waited))
    );
    println!(
        "durable messages                {msg_rate:>9.1} messages/s ({:.2} ms each, {:.1} fsyncs each) = {:.0}% of raw",
        msg_t * 1000.0 / msg_n as f64,
        msg_fsyncs as f64 / msg_n as f64,
        100.0 * msg_rate / raw
    );

    // 4. Audit: walk `refs` metathread refs and peek at each referenced line.
    let mut mem = MemoryStore::default();
    let mut g = ActorGraph::init(
        HarnessConfig::default(),
        "bench:",
        &Snapshot::default(),
        now(),
        "audit",
    )
    .unwrap();
    for b in g.take_batches() {
        mem.apply(&b).unwrap();
        g.ack(b.id).unwrap();
    }
    let nodes = 100;
    let lines = refs.div_ceil(nodes);
    for n in 0..nodes {
        let mut r = SpawnRequest::new("coordinator", NodeType::Task);
        r.id = Some(format!("t{n}"));
        g.spawn(now(), r).unwrap();
        for b in g.take_batches() {
            mem.apply(&b).unwrap();
            g.ack(b.id).unwrap();
        }
        for l in 0..lines {
            g.append(
                now(),
                &format!("t{n}"),
                NewLine::user(format!("line {l} of t{n}")),
            )
            .unwrap();
        }
    }
    for i in 0..refs {
        g.add_ref(
            now(),
            &format!("t{}", i % nodes),
            2 + (i / nodes) as u64,
            "ref",
        )
        .unwrap();
    }
    for b in g.take_batches() {
        mem.apply(&b).unwrap();
        g.ack(b.id).unwrap();
    }
    let t = Instant::now();
    let report = g.audit();
    let walk = t.elapsed().as_secs_f64() * 1000.0;
    println!(
        "audit walk (in memory)          {walk:>9.2} ms for {} refs ({} ok; target < 100 ms: {})",
        report.refs,
        report.ok,
        if walk < 100.0 { "met" } else { "NOT met" }
    );
    // Cold: from the files on disk (read, parse, open, walk) — what `weft actors audit` does.
    let cold_root = dir.join("audit-root");
    for (p, b) in &mem.files {
        let f = cold_root.join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, b).unwrap();
    }
    let t = Instant::now();
    let mut reader = FsStore::open_reader(&cold_root).unwrap();
    let snap = reader.load().unwrap();
    let (g2, _) = ActorGraph::open(HarnessConfig::default(), "bench:", &snap, now()).unwrap();
    let loaded = t.elapsed().as_secs_f64() * 1000.0;
    let report2 = g2.audit();
    let total = t.elapsed().as_secs_f64() * 1000.0;
    println!(
        "audit from disk (load + walk)   {total:>9.2} ms ({loaded:.1} ms to read and open {} nodes, {} chat lines, {} metathread lines; {} refs ok)",
        nodes + 1,
        nodes * (lines + 1),
        report2.refs + nodes,
        report2.ok
    );
    let _ = std::fs::remove_dir_all(&dir);
}
