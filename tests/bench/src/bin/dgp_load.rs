//! `dgp-load`: a loopback load generator for `weft serve` (the DGP 0.1 binding). It prints
//! figures and asserts nothing.
//!
//! Phase 1 reads frames (`GET /dgp/surfaces/{id}/frame`, each one a new immutable frame that is
//! persisted before it is returned). Phase 2 commits: every commit is a real state change with
//! read-set checking — the client reads a frame, records a note assessment and commits it with
//! an idempotency key; the server checks the thread and policy revisions, applies the note,
//! bumps the revision and makes the receipt durable before answering. Each client owns one
//! thread, so commits do not conflict. Phase 3 races clients on one thread and reports how many
//! commits won (exactly one per revision) and how many were refused as stale.
//!
//! Phase 4 (`--notes`) measures commit cycles per second on ONE thread at 0, 1k and 10k notes
//! (filled by the same cycles): with bounded frame evidence and notes stored once, the rate
//! should not fall with history. Phase 5 (`--frames N`, e.g. 1000000) reads N frames, reports
//! the server's RSS (bounded: frames leave memory past a cache bound and are read back on
//! demand), the data directory's size, then restarts the server on that store and reports the
//! time until it serves (start-up loads no frames).
//!
//! `--store postgres` measures phases 1-3 against `weft serve --store` on PostgreSQL, first
//! with one instance, then with two instances on one database (each with its own data
//! directory; client `i` talks to instance `i % 2`, and the race's conflicting commits alternate
//! instances, as in node-host/tests/dgp_postgres.rs). The benchmark starts a throwaway cluster
//! (`weft-pgcluster`, the tests' helper, with PostgreSQL's durability defaults) with a fresh database per configuration.
//! `--store both` measures SQLite first, then both PostgreSQL configurations, in one run.
//! Either prints a side-by-side table at the end.
//!
//! Usage: `dgp-load [--weft target/release/weft] [--base-url URL --token T] [--seconds 5]
//! [--clients 64] [--notes] [--frames N] [--skip-basic] [--store sqlite|postgres|both]
//! [--store-pool 8]`. Without `--base-url` it starts `weft serve` on a free port with a
//! temporary data directory and `--extra-threads` for the clients (phases 4 and 5 need that).
//! `--notes` runs against every configuration; `--frames` against the SQLite one only.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

type Http = Client<HttpConnector, Full<Bytes>>;

struct Target {
    http: Http,
    base: String,
    token: String,
}

impl Target {
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        key: Option<&str>,
    ) -> (u16, Value) {
        let (status, bytes) = self.raw(method, path, body, key).await;
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn raw(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        key: Option<&str>,
    ) -> (u16, Bytes) {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("authorization", format!("Bearer {}", self.token));
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        if let Some(k) = key {
            req = req.header("idempotency-key", k);
        }
        let bytes = body
            .map(|b| serde_json::to_vec(b).unwrap())
            .unwrap_or_default();
        let resp = self
            .http
            .request(req.body(Full::new(Bytes::from(bytes))).unwrap())
            .await
            .expect("request");
        let status = resp.status().as_u16();
        (
            status,
            resp.into_body().collect().await.expect("body").to_bytes(),
        )
    }
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

/// Prints one phase's line; returns `(rate, p50 ms, p99 ms)`.
fn report(name: &str, count: u64, secs: f64, mut lat: Vec<u32>, extra: &str) -> (f64, f64, f64) {
    lat.sort_unstable();
    let (rate, p50, p99) = (
        count as f64 / secs,
        percentile(&lat, 0.50),
        percentile(&lat, 0.99),
    );
    println!(
        "{name:<14} {rate:>9.0}/s   ({count} in {secs:.1}s)   p50 {p50:.2} ms   p99 {p99:.2} ms{extra}"
    );
    (rate, p50, p99)
}

/// The figures of phases 1-3 for one configuration (the table of `--store postgres|both`).
#[derive(Default)]
struct Figures {
    reads: f64,
    read_p99: f64,
    commits: f64,
    commit_p50: f64,
    commit_p99: f64,
    cycle_p99: f64,
    /// Commits of the commit phase answered 409 (each client owns its threads: expected 0).
    conflicts: u64,
    /// Commits of the commit phase refused otherwise.
    refused: u64,
    race_won: u64,
    race_stale: u64,
    race_other: u64,
}

/// The instance client `i` talks to: clients alternate instances.
fn pick(ts: &[Arc<Target>], i: usize) -> Arc<Target> {
    ts[i % ts.len()].clone()
}

async fn frames(ts: &[Arc<Target>], clients: usize, dur: Duration, f: &mut Figures) {
    let stop = Instant::now() + dur;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..clients {
        let t = pick(ts, i);
        tasks.push(tokio::spawn(async move {
            let path = format!("/dgp/surfaces/thread-{}/frame", 1000 + i);
            let mut lat = Vec::new();
            while Instant::now() < stop {
                let s = Instant::now();
                let (status, body) = t.raw(Method::GET, &path, None, None).await;
                assert!(status == 200 && body.len() > 1000, "{status}");
                lat.push(s.elapsed().as_micros() as u32);
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let (rate, _, p99) = report(
        "frame reads",
        all.len() as u64,
        started.elapsed().as_secs_f64(),
        all,
        "",
    );
    (f.reads, f.read_p99) = (rate, p99);
}

fn assessment(frame: &Value, id: String, text: String) -> Value {
    let fid = frame["frame_id"].as_str().unwrap();
    json!({"dgp": "0.1", "assessment_id": id, "frame_id": fid, "decision_id": format!("{fid}:note"),
           "mode": "live", "resolver": {"kind": "rule"},
           "result": {"status": "answered", "answer": {"value": {"text": text}}}})
}

fn commit_of(a: &Value) -> Value {
    json!({"dgp": "0.1", "frame_id": a["frame_id"], "decision_id": a["decision_id"], "assessment_id": a["assessment_id"]})
}

/// Threads each client commits to, in turn.
const PER_CLIENT: usize = 40;

/// The `frame_id` of a frame's JSON (the second field weft writes), without parsing it all.
fn frame_id(bytes: &[u8]) -> String {
    let text = std::str::from_utf8(bytes).expect("UTF-8");
    let at = text.find("\"frame_id\":\"").expect("a frame") + 12;
    text[at..at + text[at..].find('"').unwrap()].to_owned()
}

static SEQ: AtomicU64 = AtomicU64::new(0);

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

async fn commits(ts: &[Arc<Target>], clients: usize, dur: Duration, f: &mut Figures) {
    let stop = Instant::now() + dur;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..clients {
        let t = pick(ts, i);
        tasks.push(tokio::spawn(async move {
            let (mut cycle, mut commit_only) = (Vec::new(), Vec::new());
            let (mut conflicts, mut failed) = (0u64, 0u64);
            let mut round = 0;
            while Instant::now() < stop {
                // Each client cycles over its own threads, so frames stay small and no two
                // clients ever contend for one thread.
                let thread = 1000 + clients + i * PER_CLIENT + round % PER_CLIENT;
                round += 1;
                let s = Instant::now();
                let (_, bytes) = t
                    .raw(
                        Method::GET,
                        &format!("/dgp/surfaces/thread-{thread}/frame"),
                        None,
                        None,
                    )
                    .await;
                let frame = json!({"frame_id": frame_id(&bytes)});
                let a = assessment(
                    &frame,
                    unique("a"),
                    format!("load note {}", SEQ.load(Ordering::Relaxed)),
                );
                let (st, _) = t
                    .call(Method::POST, "/dgp/assessments", Some(&a), None)
                    .await;
                assert_eq!(st, 200);
                let c = Instant::now();
                let (st, receipt) = t
                    .call(
                        Method::POST,
                        "/dgp/commits",
                        Some(&commit_of(&a)),
                        Some(&unique("k")),
                    )
                    .await;
                if st == 200 && receipt["status"] == "succeeded" {
                    commit_only.push(c.elapsed().as_micros() as u32);
                    cycle.push(s.elapsed().as_micros() as u32);
                } else if st == 409 {
                    conflicts += 1;
                } else {
                    failed += 1;
                }
            }
            (cycle, commit_only, conflicts, failed)
        }));
    }
    let (mut cycle, mut only) = (Vec::new(), Vec::new());
    for task in tasks {
        let (c, o, n409, n) = task.await.unwrap();
        cycle.extend(c);
        only.extend(o);
        f.conflicts += n409;
        f.refused += n;
    }
    let secs = started.elapsed().as_secs_f64();
    let n = cycle.len() as u64;
    (f.commits, f.commit_p50, f.commit_p99) = report(
        "commits",
        n,
        secs,
        only,
        &format!(
            "   (POST /dgp/commits alone; {} refused with 409, {} otherwise)",
            f.conflicts, f.refused
        ),
    );
    f.cycle_p99 = report(
        "  full cycle",
        n,
        secs,
        cycle,
        "   (frame + assessment + commit)",
    )
    .2;
}

async fn race(ts: &[Arc<Target>], clients: usize, rounds: usize, f: &mut Figures) {
    let (mut won, mut stale, mut other) = (0, 0, 0);
    for _ in 0..rounds {
        let (_, frame) = ts[0]
            .call(Method::GET, "/dgp/surfaces/thread-42/frame", None, None)
            .await;
        let mut assessed = Vec::new();
        for i in 0..clients {
            let a = assessment(&frame, unique("r"), "racing note".into());
            pick(ts, i)
                .call(Method::POST, "/dgp/assessments", Some(&a), None)
                .await;
            assessed.push(a);
        }
        let tasks: Vec<_> = assessed
            .into_iter()
            .enumerate()
            .map(|(i, a)| {
                let t = pick(ts, i);
                tokio::spawn(async move {
                    t.call(
                        Method::POST,
                        "/dgp/commits",
                        Some(&commit_of(&a)),
                        Some(&unique("rk")),
                    )
                    .await
                })
            })
            .collect();
        for task in tasks {
            match task.await.unwrap() {
                (200, _) => won += 1,
                (409, p) if p["code"] == "STALE_FRAME" => stale += 1,
                _ => other += 1,
            }
        }
    }
    println!(
        "race           {rounds} rounds x {clients} conflicting commits: {won} succeeded, {stale} STALE_FRAME, {other} other"
    );
    (f.race_won, f.race_stale, f.race_other) = (won, stale, other);
}

/// One client on one thread: `count` frame + note assessment + commit cycles (or, with
/// `count == 0`, as many as fit in `dur`); returns `(cycles, seconds)`.
async fn one_thread_cycles(t: &Target, thread: &str, count: u64, dur: Duration) -> (u64, f64) {
    let started = Instant::now();
    let mut n = 0;
    while (count > 0 && n < count) || (count == 0 && started.elapsed() < dur) {
        let (_, bytes) = t
            .raw(
                Method::GET,
                &format!("/dgp/surfaces/{thread}/frame"),
                None,
                None,
            )
            .await;
        let frame = json!({"frame_id": frame_id(&bytes)});
        // ~214-byte notes, as in the report that found the quadratic growth.
        let a = assessment(&frame, unique("n"), format!("{n:08} {}", "x".repeat(205)));
        let (st, _) = t
            .call(Method::POST, "/dgp/assessments", Some(&a), None)
            .await;
        assert_eq!(st, 200);
        let (st, _) = t
            .call(
                Method::POST,
                "/dgp/commits",
                Some(&commit_of(&a)),
                Some(&unique("nk")),
            )
            .await;
        assert_eq!(st, 200);
        n += 1;
    }
    (n, started.elapsed().as_secs_f64())
}

async fn notes(t: &Target, dur: Duration, pid: Option<u32>) {
    let thread = "thread-73";
    // Warm-up on another thread, so the first level does not pay for a cold store.
    one_thread_cycles(t, "thread-42", 0, dur).await;
    let mut have = 0;
    for level in [0u64, 1_000, 10_000] {
        if level > have {
            one_thread_cycles(t, thread, level - have, dur).await;
        }
        have = have.max(level);
        let (n, secs) = one_thread_cycles(t, thread, 0, dur).await;
        have += n;
        let (_, bytes) = t
            .raw(
                Method::GET,
                &format!("/dgp/surfaces/{thread}/frame"),
                None,
                None,
            )
            .await;
        println!(
            "notes {level:>6}   {:>9.0} cycles/s on one thread ({n} in {secs:.1}s; frame {} bytes; server RSS {} MiB)",
            n as f64 / secs,
            bytes.len(),
            pid.map_or(0, rss_kib) / 1024
        );
    }
}

/// Reads `n` frames over `clients` connections; returns the rate.
async fn many_frames(t: Arc<Target>, clients: usize, n: u64) -> f64 {
    let left = Arc::new(AtomicU64::new(n));
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let (t, left) = (t.clone(), left.clone());
            tokio::spawn(async move {
                let path = format!("/dgp/surfaces/thread-{}/frame", 1000 + i);
                while left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |x| x.checked_sub(1))
                    .is_ok()
                {
                    let (status, _) = t.raw(Method::GET, &path, None, None).await;
                    assert_eq!(status, 200);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    n as f64 / started.elapsed().as_secs_f64()
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// A `weft serve` started by the benchmark, and how long it took to print its URL.
struct Spawned {
    child: std::process::Child,
    url: String,
    data: String,
    started_in: Duration,
}

/// Starts `weft serve` on `dir`; with `store`, on that PostgreSQL database with a pool of
/// `pool` connections.
fn spawn(
    weft: &str,
    dir: &std::path::Path,
    threads: usize,
    store: Option<(&str, usize)>,
) -> Spawned {
    let started = Instant::now();
    let mut cmd = Command::new(weft);
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--extra-threads",
        &threads.to_string(),
        "--data-dir",
    ])
    .arg(dir);
    if let Some((conninfo, pool)) = store {
        cmd.args(["--store", conninfo, "--store-pool", &pool.to_string()]);
    }
    // The server must not outlive the benchmark however it ends (a signal, `| head`): the
    // kernel sends it SIGTERM (a graceful stop) when this thread, the main one, exits.
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut c = cmd
        .env("WEFT_AGENT_TOKEN", "bench-agent-token")
        .env("WEFT_HUMAN_TOKEN", "bench-human-token")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start {weft} (build it with `cargo build --release -p weft-host`): {e}")
        });
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(c.stdout.take().unwrap()).lines();
    let first = lines
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("{weft} serve exited before printing its URL"));
    let started_in = started.elapsed();
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .trim_end_matches('/')
        .to_owned();
    // The banner ends with the discovery line; the storage is on the `data:` line.
    let mut data = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap_or_default();
        let line = line.trim();
        if let Some(d) = line.strip_prefix("data:") {
            data = d.trim().to_owned();
        }
        if line.starts_with("discovery:") {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    Spawned {
        child: c,
        url,
        data,
        started_in,
    }
}

fn stop(c: &mut std::process::Child) {
    let _ = Command::new("kill")
        .args(["-INT", &c.id().to_string()])
        .status();
    let _ = c.wait();
}

/// A measured configuration: the embedded SQLite store, or `n` instances on one PostgreSQL
/// database.
#[derive(Clone, Copy, PartialEq)]
enum Backend {
    Sqlite,
    Postgres(usize),
}

impl Backend {
    fn name(self) -> String {
        match self {
            Backend::Sqlite => "SQLite, 1 instance".into(),
            Backend::Postgres(1) => "PostgreSQL, 1 instance".into(),
            Backend::Postgres(n) => format!("PostgreSQL, {n} instances"),
        }
    }
}

/// The knobs every configuration is measured with.
struct Run {
    seconds: u64,
    clients: usize,
    notes: bool,
    basic: bool,
}

fn client(clients: usize) -> Http {
    let mut http = Client::builder(TokioExecutor::new());
    http.pool_max_idle_per_host(clients * 2);
    http.build_http()
}

/// Phases 1-4 against `bases` (one per instance); `durability` names the storage.
fn measure(
    rt: &tokio::runtime::Runtime,
    run: &Run,
    bases: &[String],
    token: &str,
    durability: &[String],
    pid: Option<u32>,
) -> Figures {
    let (clients, seconds) = (run.clients, run.seconds);
    let mut f = Figures::default();
    rt.block_on(async {
        let http = client(clients);
        let ts: Vec<Arc<Target>> = bases
            .iter()
            .map(|b| {
                Arc::new(Target {
                    http: http.clone(),
                    base: b.clone(),
                    token: token.to_owned(),
                })
            })
            .collect();
        let instances = if bases.len() > 1 {
            format!("  ({} instances; client i talks to instance i % {})", bases.len(), bases.len())
        } else {
            String::new()
        };
        println!(
            "dgp-load: {}  clients {clients}  {seconds}s per phase  (load generator: 1 Tokio worker; server: weft serve){instances}",
            bases.join(", ")
        );
        for d in durability {
            println!("storage:       {d}");
        }
        if run.basic {
            frames(&ts, clients, Duration::from_secs(seconds), &mut f).await;
            commits(&ts, clients, Duration::from_secs(seconds), &mut f).await;
            race(&ts, 16, 20, &mut f).await;
        }
        if run.notes {
            notes(&ts[0], Duration::from_secs(seconds), pid).await;
        }
    });
    f
}

/// Phase 5 on the SQLite server `s` (data directory `dir`): `n` frame reads, then a restart.
fn many_frames_and_restart(
    rt: &tokio::runtime::Runtime,
    s: &mut Spawned,
    dir: &std::path::Path,
    weft: &str,
    threads: usize,
    clients: usize,
    n: u64,
) {
    let pid = s.child.id();
    let before = rss_kib(pid);
    let rate = rt.block_on(async {
        let t = Arc::new(Target {
            http: client(clients),
            base: s.url.clone(),
            token: "bench-agent-token".into(),
        });
        many_frames(t, clients, n).await
    });
    println!(
        "{n} frame reads  {rate:>9.0}/s   server RSS {} MiB before, {} MiB after; data directory {} MiB",
        before / 1024,
        rss_kib(pid) / 1024,
        dir_bytes(dir) / (1024 * 1024)
    );
    stop(&mut s.child);
    *s = spawn(weft, dir, threads, None);
    println!(
        "start-up       {:.0} ms on the store of {n} frames (until it prints its URL; it loads no frames)",
        s.started_in.as_secs_f64() * 1000.0
    );
}

fn table(rows: &[(String, Figures)]) {
    println!();
    println!(
        "{:<26} {:>9} {:>9} {:>10} {:>11} {:>11} {:>10} {:>11} {:>22}",
        "configuration",
        "reads/s",
        "read p99",
        "commits/s",
        "commit p50",
        "commit p99",
        "cycle p99",
        "commit 409s",
        "race won/409/other"
    );
    for (name, f) in rows {
        let ms = |v: f64| format!("{v:.1} ms");
        println!(
            "{name:<26} {:>9.0} {:>9} {:>10.0} {:>11} {:>11} {:>10} {:>11} {:>22}",
            f.reads,
            ms(f.read_p99),
            f.commits,
            ms(f.commit_p50),
            ms(f.commit_p99),
            ms(f.cycle_p99),
            if f.refused > 0 {
                format!("{} (+{} other)", f.conflicts, f.refused)
            } else {
                f.conflicts.to_string()
            },
            format!("{}/{}/{}", f.race_won, f.race_stale, f.race_other)
        );
    }
}

fn main() {
    let seconds: u64 = arg("--seconds").and_then(|s| s.parse().ok()).unwrap_or(5);
    let clients: usize = arg("--clients").and_then(|s| s.parse().ok()).unwrap_or(64);
    let frames_n: u64 = arg("--frames").and_then(|s| s.parse().ok()).unwrap_or(0);
    let pool: usize = arg("--store-pool")
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let flag = |name: &str| std::env::args().any(|a| a == name);
    let weft = arg("--weft").unwrap_or_else(|| "target/release/weft".into());
    let store = arg("--store").unwrap_or_else(|| "sqlite".into());
    let backends = match store.as_str() {
        "sqlite" => vec![Backend::Sqlite],
        "postgres" => vec![Backend::Postgres(1), Backend::Postgres(2)],
        "both" => vec![Backend::Sqlite, Backend::Postgres(1), Backend::Postgres(2)],
        other => {
            eprintln!("dgp-load: --store {other}: expected sqlite, postgres or both");
            std::process::exit(2);
        }
    };
    let run = Run {
        seconds,
        clients,
        notes: flag("--notes"),
        basic: !flag("--skip-basic"),
    };
    let threads = clients * (PER_CLIENT + 1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    if let Some(b) = arg("--base-url") {
        assert!(
            store == "sqlite",
            "--base-url measures that server as it is configured: no --store"
        );
        let token = arg("--token").expect("--token with --base-url");
        let durability = ["as configured by that server".to_owned()];
        measure(&rt, &run, &[b], &token, &durability, None);
        return;
    }
    // One cluster for every PostgreSQL configuration, a fresh database for each.
    let cluster = backends
        .iter()
        .any(|b| *b != Backend::Sqlite)
        .then(|| {
            let t0 = Instant::now();
            let c = weft_pgcluster::start(weft_pgcluster::Options { durable: true }).unwrap_or_else(|e| panic!("dgp-load: {e}"));
            println!(
                "PostgreSQL {} started in {:.1}s (throwaway cluster on the Unix socket in {}; fsync on, synchronous_commit on)",
                c.major,
                t0.elapsed().as_secs_f64(),
                c.dir.display()
            );
            c
        });
    let mut rows = Vec::new();
    for (k, &backend) in backends.iter().enumerate() {
        if backends.len() > 1 {
            println!("\n== {}", backend.name());
        }
        let (n, conninfo) = match backend {
            Backend::Sqlite => (1, None),
            Backend::Postgres(n) => {
                let c = cluster.as_ref().expect("a cluster");
                let db = format!("dgp_load_{}_{k}", std::process::id());
                (
                    n,
                    Some(
                        c.create_database(&db)
                            .unwrap_or_else(|e| panic!("dgp-load: {e}")),
                    ),
                )
            }
        };
        let mut servers: Vec<(Spawned, std::path::PathBuf)> = (0..n)
            .map(|j| {
                let dir = std::env::temp_dir()
                    .join(format!("weft-dgp-load-{}-{k}-{j}", std::process::id()));
                // Instances start one after the other: the first seeds a new database.
                let s = spawn(&weft, &dir, threads, conninfo.as_deref().map(|s| (s, pool)));
                (s, dir)
            })
            .collect();
        let bases: Vec<String> = servers.iter().map(|(s, _)| s.url.clone()).collect();
        let durability: Vec<String> = servers.iter().map(|(s, _)| s.data.clone()).collect();
        let pid = servers[0].0.child.id();
        let f = measure(
            &rt,
            &run,
            &bases,
            "bench-agent-token",
            &durability,
            Some(pid),
        );
        if frames_n > 0 && backend == Backend::Sqlite {
            let (s, dir) = &mut servers[0];
            many_frames_and_restart(&rt, s, dir, &weft, threads, clients, frames_n);
        }
        for (mut s, dir) in servers {
            stop(&mut s.child);
            let _ = std::fs::remove_dir_all(dir);
        }
        rows.push((backend.name(), f));
    }
    if let Some(c) = cluster.as_ref() {
        c.stop();
    }
    if store != "sqlite" && run.basic {
        table(&rows);
    }
}
