//! Actor-graph benchmark: durable spawns/s and messages/s of a long-lived writer on the
//! filesystem store, at each node count of `--sizes` (the root grown in waves between them),
//! beside the raw fsync-per-write rate of the same disk measured in the same run (the physical
//! limit); sequential single spawns (the target) and waves of `--wave` children in one batch
//! apart; then the audit walk of 10,000 metathread refs. Prints figures; asserts nothing.
//!
//! `cargo run --release -p weft-bench --bin actors -- [--dir DIR] [--sizes 10,1000,10000]
//! [--spawns N] [--wave N] [--messages N] [--refs N] [--spare-nodes N]` (default: the system
//! temp dir, sizes 10, 1,000 and 10,000, 200 spawns and 200 children in waves of 10 per size,
//! 500 messages, 10,000 refs, 32 spare node directories kept by the writer; `0` for none). The run's directory is removed at its end (on ext4 without a journal, freeing
//! its inodes slows file creation in that block group for the next minutes: see `NewFiles`).

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Instant;

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

/// `--sizes 10,1000,10000`: the node counts to measure at (default: all three).
fn sizes() -> Vec<usize> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--sizes")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10, 1_000, 10_000])
}

/// The raw rate of this disk, as `weft_bench::disk::raw_fsync_rate` measures it (200-byte
/// appends, each followed by an fsync), on one probe file kept for the whole run: the probe
/// frees no inode between the spawns it is measured beside (see [`NewFiles`]).
fn raw_rate(probe: &mut std::fs::File, n: usize) -> f64 {
    use std::io::Write;
    let line = [b'x'; 200];
    let t = Instant::now();
    for _ in 0..n {
        probe.write_all(&line).expect("probe write");
        probe.sync_all().expect("probe fsync");
    }
    n as f64 / t.elapsed().as_secs_f64()
}

/// The raw new-file rate (create + 300-byte write + fsync, as `raw_create_rate`), keeping the
/// files until the run ends. On ext4 without a journal (this VM's `/`) the inode allocator
/// skips every inode freed in the last 60–300 s of the block group, reading each, so deleting
/// files between rounds would slow the very creations the spawns beside it make.
struct NewFiles {
    dir: PathBuf,
    next: usize,
}

impl NewFiles {
    fn rate(&mut self, n: usize) -> f64 {
        use std::io::Write;
        std::fs::create_dir_all(&self.dir).expect("create probe dir");
        let data = [b'x'; 300];
        let t = Instant::now();
        for _ in 0..n {
            let mut f =
                std::fs::File::create(self.dir.join(self.next.to_string())).expect("create");
            f.write_all(&data).expect("write");
            f.sync_all().expect("fsync");
            self.next += 1;
        }
        n as f64 / t.elapsed().as_secs_f64()
    }
}

/// Grows the graph to `nodes` nodes: discussion children of `coordinator` in waves
/// (`spawn_batch`, one batch per wave), each durable before the next.
fn populate(g: &mut ActorGraph, store: &mut FsStore, nodes: usize, next_id: &mut usize) {
    let now = weft_host::actors::wall_ms;
    while g.node_ids().len() < nodes {
        let n = (nodes - g.node_ids().len()).min(500);
        let reqs = (0..n)
            .map(|_| {
                let mut r = SpawnRequest::new("coordinator", NodeType::Discussion);
                r.id = Some(format!("p{next_id}"));
                *next_id += 1;
                r
            })
            .collect();
        g.spawn_batch(now(), reqs).expect("populate");
        flush(g, store).expect("populate batch");
    }
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
    // Spare node directories the long-lived writer keeps (`FsStore::keep_spare_nodes`; 0: none).
    let spare_nodes = arg("--spare-nodes", weft_host::actors::LONG_LIVED_SPARE_NODES);
    let wave = arg("--wave", 10).max(1);
    let messages = arg("--messages", 500);
    let refs = arg("--refs", 10_000);
    let dir = base.join(format!("weft-actors-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("bench dir");
    println!("actor graph benchmark in {}", dir.display());

    // Spawns, messages and the disk's raw rate are measured in interleaved rounds, so that all
    // three see the same disk (a shared machine's I/O load changes from second to second).
    let root = dir.join("root");
    let mut store = FsStore::open_writer(&root, std::time::Duration::ZERO).expect("lock");
    // A long-lived writer: spare node directories made ahead of its spawns.
    store.keep_spare_nodes(spare_nodes).expect("spare nodes");
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
    let mut probe = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(".weft-fsync-probe"))
        .expect("fsync probe");
    let mut new_files = NewFiles {
        dir: dir.join(".weft-create-probe"),
        next: 0,
    };
    let mut next_id = 0usize;
    let mut k = 0usize;
    for size in sizes() {
        let t = Instant::now();
        populate(&mut g, &mut store, size, &mut next_id);
        let grown = t.elapsed().as_secs_f64();
        // Growing the root takes every spare (waves of 500): a writer that has been running
        // at this size has its pool refilled, so the spawns are measured once it is.
        let refilled = refill(&store);
        println!(
            "at {} existing nodes (grown in {grown:.1} s, waves of ≤ 500 through spawn_batch; spare pool refilled in {refilled:.2} s)",
            g.node_ids().len(),
        );
        measure(
            &mut g,
            &mut store,
            &mut probe,
            &mut new_files,
            &mut k,
            spawns,
            wave,
            messages,
        );
    }
    assert!(g.lineage_violations().is_empty());
    drop(store);
    audit(&dir, refs);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Waits (at most 30 s) until the writer's spare pool is full again; returns the seconds waited.
fn refill(store: &FsStore) -> f64 {
    let t = Instant::now();
    while let Some(st) = store.spare_nodes_status() {
        let ready = st.made.saturating_sub(st.used + st.vanished + st.discarded);
        if ready >= st.keep as u64 || t.elapsed().as_secs() >= 30 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    t.elapsed().as_secs_f64()
}

/// Spawns so far that found a spare node directory.
fn spares_used(store: &FsStore) -> u64 {
    store.spare_nodes_status().map_or(0, |s| s.used)
}

/// One size: sequential single spawns (each flushed, as the desk and agents spawn one child),
/// waves of `wave` children (`spawn_batch`, one batch each) and messages, in interleaved
/// rounds with the raw rates.
#[allow(clippy::too_many_arguments)]
fn measure(
    g: &mut ActorGraph,
    store: &mut FsStore,
    probe: &mut std::fs::File,
    new_files: &mut NewFiles,
    k: &mut usize,
    spawns: usize,
    wave: usize,
    messages: usize,
) {
    let now = weft_host::actors::wall_ms;
    let rounds = 10;
    let (mut raw_n, mut raw_t) = (0usize, 0.0f64);
    let (mut new_n, mut new_t) = (0usize, 0.0f64);
    let (mut sp_n, mut sp_t, mut sp_core, mut sp_fsyncs, mut sp_rounds) =
        (0usize, 0.0f64, 0.0f64, 0u64, 0u64);
    let (mut wv_n, mut wv_t, mut wv_fsyncs, mut wv_rounds) = (0usize, 0.0f64, 0u64, 0u64);
    let (mut msg_n, mut msg_t, mut msg_fsyncs) = (0usize, 0.0f64, 0u64);
    // Where a spawn's time goes: time in the store's `apply`, and waiting for each round.
    let mut sp_apply = 0u64;
    let mut sp_round = [0u64; 6];
    let mut round_ratios = Vec::new();
    let mut sp_spares = 0u64;
    let request = |k: usize| {
        let mut r = SpawnRequest::new(
            "coordinator",
            if k.is_multiple_of(4) {
                NodeType::Discussion
            } else {
                NodeType::Task
            },
        );
        r.id = Some(format!("n{k}"));
        r
    };
    for _ in 0..rounds {
        let n = 40;
        let rate = raw_rate(probe, n);
        raw_n += n;
        raw_t += n as f64 / rate;
        let created = new_files.rate(20);
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
        let u0 = spares_used(store);
        let t = Instant::now();
        let per = spawns / rounds;
        for _ in 0..per {
            let c = Instant::now();
            g.spawn(now(), request(*k)).expect("spawn");
            *k += 1;
            sp_core += c.elapsed().as_secs_f64();
            flush(g, store).expect("durable spawn");
        }
        let dt = t.elapsed().as_secs_f64();
        sp_spares += spares_used(store) - u0;
        sp_t += dt;
        sp_n += per;
        sp_fsyncs += store.stats.fsyncs.load(Ordering::Relaxed) - f0;
        sp_rounds += store.stats.rounds.load(Ordering::Relaxed) - r0;
        sp_apply += store.stats.apply_ns.load(Ordering::Relaxed) - a0;
        for (i, r) in store.stats.round_ns.iter().enumerate() {
            sp_round[i] += r.load(Ordering::Relaxed) - rn0[i];
        }
        round_ratios.push((per as f64 / dt) / (rate / WRITES_PER_SPAWN));
        // Waves: the same number of children, `wave` per batch.
        let f0 = store.stats.fsyncs.load(Ordering::Relaxed);
        let r0 = store.stats.rounds.load(Ordering::Relaxed);
        let t = Instant::now();
        let mut left = per;
        while left > 0 {
            let n = left.min(wave);
            let reqs = (0..n).map(|i| request(*k + i)).collect();
            *k += n;
            g.spawn_batch(now(), reqs).expect("wave");
            flush(g, store).expect("durable wave");
            left -= n;
            wv_n += n;
        }
        wv_t += t.elapsed().as_secs_f64();
        wv_fsyncs += store.stats.fsyncs.load(Ordering::Relaxed) - f0;
        wv_rounds += store.stats.rounds.load(Ordering::Relaxed) - r0;
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
            flush(g, store).expect("durable message");
        }
        msg_t += t.elapsed().as_secs_f64();
        msg_n += messages / rounds;
        msg_fsyncs += store.stats.fsyncs.load(Ordering::Relaxed) - f0;
    }
    let raw = raw_n as f64 / raw_t;
    let spawn_rate = sp_n as f64 / sp_t;
    let wave_rate = wv_n as f64 / wv_t;
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
        "durable spawns                  {spawn_rate:>9.1} spawns/s  ({:.2} ms each: {:.3} ms in the core, {:.1} fsyncs in {:.1} concurrent rounds; {sp_spares} of {sp_n} built in a spare)",
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

    println!(
        "durable waves                   {wave_rate:>9.1} spawns/s  ({wave} children per batch: {:.2} fsyncs in {:.2} rounds per child; {:.0}% of raw / {WRITES_PER_SPAWN}, judged: sequential spawns above)",
        wv_fsyncs as f64 / wv_n as f64,
        wv_rounds as f64 / wv_n as f64,
        100.0 * wave_rate / (raw / WRITES_PER_SPAWN)
    );
}

/// The audit walk of `refs` metathread refs, in memory and from disk (under `dir`).
fn audit(dir: &std::path::Path, refs: usize) {
    let now = weft_host::actors::wall_ms;
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
        let done = mem.perform(&b).unwrap();
        g.ack(done).unwrap();
    }
    let nodes = 100;
    let lines = refs.div_ceil(nodes);
    for n in 0..nodes {
        let mut r = SpawnRequest::new("coordinator", NodeType::Task);
        r.id = Some(format!("t{n}"));
        g.spawn(now(), r).unwrap();
        for b in g.take_batches() {
            let done = mem.perform(&b).unwrap();
            g.ack(done).unwrap();
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
        let done = mem.perform(&b).unwrap();
        g.ack(done).unwrap();
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
}
