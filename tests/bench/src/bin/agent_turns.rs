//! Agents on actor nodes (issue 11): turn overhead and resume time.
//!
//! (a) Turns/s of an agent on a node ([`NodeAgent`] on the coordinator, over the filesystem
//!     store with its fsync discipline) against the RAM-only session ([`Session`], nothing
//!     written), both asking the same local streaming model over the same HTTP path (the
//!     native reqwest client, `ReqwestModel::ask`). A turn is one user line and one streamed
//!     model answer; the node's turn also makes its lines durable (the user line, the turn
//!     boundaries and the answer) with the durability the core decides
//!     (`weft_core::actors::Durability`): the person's line is acknowledged with the turn's
//!     end (`LineAck::WithTurnEnd`, as `weft chat` and the RAM session answer), so it and
//!     `turn_start` are only written (inline, no fsync) before the model is asked (a read);
//!     the turn ends once the answer's lines are synced, one fsync covering both writes.
//!     `--ack-line` acknowledges the line on store (the desk's `POST`): its batch is then
//!     synced on the blocking pool beside the model (two fsyncs, the order before).
//!     Reports bytes written, batches and fsyncs per turn (the fsyncs are the store's own
//!     counter, `FsStore::stats`). Target: ≤ 2× the RAM-only turn. Each round runs the node
//!     over the fs store, the node over the memory store and the RAM session, `--turns` turns
//!     each, in an order that rotates every round (on this VM whatever runs right after disk
//!     work runs slower for a while: in a fixed order the RAM session, always last, ran 0.201
//!     ms turns, and 0.226 ms when moved first); both paths are warmed first, and the RAM
//!     session's request carries the tools and system text of the node's.
//! (b) Resume time of a root with 1,000 agent nodes, each with a few finished agent turns:
//!     opening the store and the graph, then `NodeAgent::open` for all 1,000. Target: < 1 s.
//!     (The root is generated through the core over a memory store, then written out file by
//!     file in the store's format; the files are in the page cache when timed.)
//!
//! The model server is a tiny in-process loopback server speaking the OpenAI Chat
//! Completions stream (HTTP/1.1 keep-alive, chunked: one HTTP chunk per SSE event, each
//! flushed, 8 text deltas per answer). `--chunk-ms MS` waits between events (0: the model
//! costs only the loopback round trip, the worst case for the ratio).
//!
//! Also prints where a node turn's time goes (the phases of `node_turn`: admitting the line,
//! the agent's sync, building the request, the model task, the hand-off to the blocking pool,
//! the first flush beside the model, the answer, the later flushes), over both stores, the RAM
//! turn's request building and model task, and the runtime thread's CPU time per turn of each.
//! `--sleep-us N` makes the memory store's synced flushes sleep N µs (the thread blocks as in
//! an fsync): the phases after it then slow down as the node's do after its fsync (the CPU's
//! caches are cold once the thread has slept; on this VM an idle vCPU halts). `--micro` only
//! times building one model step's request (node: `model_input` + `chat_request`; RAM:
//! `from_session`, each with its drop) after 20 turns, the best of 15 batches of `--micro-n`
//! calls (300), and exits. Prints figures; asserts nothing.
//! `cargo run --release -p weft-bench --bin agent_turns -- [--dir DIR] [--turns N]
//! [--rounds R] [--nodes N] [--chunk-ms MS] [--serial] [--late-flush] [--ack-line]
//! [--sleep-us N] [--micro]` (defaults: the system
//! temp dir, 40 turns, 5 rounds, 1,000 nodes, 0 ms; `--serial` flushes before asking, the
//! order before a model request was a read, and `--late-flush` hands the first flush off
//! only once the request is built, the desk's order, for comparison).

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use weft_bench::disk::raw_fsync_rate;
use weft_core::actors::store::{ActorStore, MemoryStore, Op, WriteBatch};
use weft_core::actors::{ActorGraph, Durability, HarnessConfig, NodeType, SpawnRequest};
use weft_core::agents::{AgentConfig, AgentOutput, LineAck, NodeAgent, admit_user_line};
use weft_core::model::{ChatRequest, ModelChoice, ModelConfig, StreamEvent, ToolSpec};
use weft_core::tools::{ModelResponse, Output, Session, SessionConfig, StepId};
use weft_host::actors::{FsStore, mono_now, now, wall_ms};
use weft_host::model::ReqwestModel;

/// Text deltas per streamed answer.
const DELTAS: usize = 8;

/// Where a node turn's time goes (nanoseconds summed over the turns; `[0]` over the
/// filesystem store, `[1]` over the memory store), for the breakdown: see [`Phase`].
static PHASES: [[std::sync::atomic::AtomicU64; Phase::COUNT]; 2] =
    [const { [const { std::sync::atomic::AtomicU64::new(0) }; Phase::COUNT] }; 2];
/// Which set of [`PHASES`] records: 0 none, 1 the filesystem store's turns, 2 the memory
/// store's.
static TIMING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The phases of a node turn.
#[derive(Clone, Copy)]
enum Phase {
    /// The user line, `sync`, the released request and its slice, until the model is asked.
    Before,
    /// From asking to the answer (the model task: encode, HTTP, stream, decode).
    Model,
    /// From the flush's hand-off to the blocking pool until its closure runs.
    HandOff,
    /// The first flush's `FsStore::apply` calls (in the blocking pool, beside the model).
    Flush1,
    /// From asking to both the model's answer and the first flush being back.
    Joined,
    /// `on_model_response` and the polls after it, until the second flush.
    Answer,
    /// The later flushes (inline), with their acks and polls.
    Flush2,
    /// Of "before": the person's line admitted (`admit_user_line`).
    Admit,
    /// Of "before": `NodeAgent::sync` and the poll of its outputs.
    Sync,
    /// Of "before": the request built (`model_input`, `chat_request`, the input dropped).
    Input,
}

impl Phase {
    const COUNT: usize = 10;
    const NAMES: [&str; Phase::COUNT] = [
        "before the ask",
        "model task",
        "hand-off to the blocking pool",
        "flush 1 (beside the model)",
        "ask to join",
        "answer",
        "later flushes",
        "(before: admit",
        "sync + poll",
        "request built)",
    ];
}

fn time(p: Phase, since: Instant) {
    add(p, since.elapsed().as_nanos() as u64);
}

fn add(p: Phase, ns: u64) {
    if let Some(set) = TIMING.load(Ordering::Relaxed).checked_sub(1) {
        PHASES[set][p as usize].fetch_add(ns, Ordering::Relaxed);
    }
}

/// `--serial`: the order before a model request was a read — flush, then ask — for a
/// comparison on the same disk in the same minute. The default is the hosts' order.
static SERIAL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `--ack-line`: the person's line is acknowledged as soon as it is stored (the desk's `POST`),
/// so its batch is synced before the answer; the default acknowledges it with the turn's end.
static ACK_LINE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `--late-flush`: the first flush is handed to the blocking pool after the request is built
/// (the desk's order), not before, for a comparison.
static LATE_FLUSH: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `--sleep-us N`: the memory store's synced flushes also sleep N µs (the thread blocks, as in
/// an fsync), to tell the cost of the thread going idle from the store's own work.
static SLEEP_US: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ----- the model server ---------------------------------------------------------------------

/// The SSE events of one answer (OpenAI Chat Completions stream format).
fn answer_events() -> Vec<String> {
    let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "model": "bench",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let words = [
        "Noted:",
        " the",
        " docs",
        " sync",
        " runs",
        " after",
        " the",
        " release.",
    ];
    let mut ev = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        json!(null),
    )];
    for w in words.iter().take(DELTAS) {
        ev.push(chunk(json!({"content": w}), json!(null)));
    }
    ev.push(chunk(json!({}), json!("stop")));
    ev.push(format!(
        "data: {}\n\n",
        json!({"id": "chatcmpl-bench", "choices": [],
               "usage": {"prompt_tokens": 50, "completion_tokens": DELTAS}})
    ));
    ev.push("data: [DONE]\n\n".into());
    ev
}

/// Serves every request on a keep-alive connection with [`answer_events`], one flushed HTTP
/// chunk per event, `gap` apart.
async fn serve(gap: Duration) -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    let events = answer_events();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let _ = s.set_nodelay(true);
            let events = events.clone();
            tokio::spawn(async move {
                let mut buf: Vec<u8> = Vec::new();
                let mut tmp = [0u8; 16384];
                loop {
                    // One request: the head, then its content-length body.
                    let end = loop {
                        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..p]).to_ascii_lowercase();
                            let len = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .and_then(|v| v.trim().parse::<usize>().ok())
                                .unwrap_or(0);
                            if buf.len() >= p + 4 + len {
                                break p + 4 + len;
                            }
                        }
                        match s.read(&mut tmp).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&tmp[..n]),
                        }
                    };
                    buf.drain(..end);
                    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                                transfer-encoding: chunked\r\n\r\n";
                    if s.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    for e in &events {
                        if !gap.is_zero() {
                            tokio::time::sleep(gap).await;
                        }
                        let c = format!("{:x}\r\n{e}\r\n", e.len());
                        if s.write_all(c.as_bytes()).await.is_err() || s.flush().await.is_err() {
                            return;
                        }
                    }
                    if s.write_all(b"0\r\n\r\n").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}/v1")
}

/// Asks the model; returns the answer and the text deltas seen.
async fn ask(model: &ReqwestModel, chat: &ChatRequest) -> (ModelResponse, usize) {
    let mut deltas = 0usize;
    let mut on = |e: StreamEvent| {
        if matches!(e, StreamEvent::TextDelta { .. }) {
            deltas += 1;
        }
    };
    let r = model.ask(chat, &mut on).await.expect("the model answers");
    (r, deltas)
}

// ----- the store ----------------------------------------------------------------------------

/// What the turns wrote.
#[derive(Default, Clone)]
struct Written {
    batches: u64,
    stages: u64,
    bytes: u64,
    /// Batches by label (its first word, e.g. `append`), for the breakdown.
    labels: std::collections::BTreeMap<String, u64>,
    /// Time spent in `ActorStore::apply`.
    apply_ns: u64,
}

fn op_bytes(op: &Op) -> u64 {
    match op {
        Op::CreateNode { files, .. } => files.iter().map(|(_, t)| t.len() as u64).sum(),
        Op::Put { text, .. } | Op::Append { text, .. } => text.len() as u64,
        _ => 0,
    }
}

fn count(w: &mut Written, b: &WriteBatch) {
    w.batches += 1;
    let label = b.label.split_whitespace().next().unwrap_or("?").to_owned();
    *w.labels.entry(label).or_default() += 1;
    w.stages += b.stages.len() as u64;
    w.bytes += b.stages.iter().flatten().map(op_bytes).sum::<u64>();
}

/// Performs and acknowledges every queued batch, counting what they write.
fn flush<S: ActorStore>(g: &mut ActorGraph, store: &mut S, w: &mut Written) {
    for b in g.take_batches() {
        count(w, &b);
        let t = Instant::now();
        let done = store.perform(&b).unwrap_or_else(|e| panic!("store: {e}"));
        w.apply_ns += t.elapsed().as_nanos() as u64;
        g.ack(done).expect("ack");
    }
}

// ----- one turn -----------------------------------------------------------------------------

/// How a node turn's model step is answered.
enum Answer<'a> {
    Model(&'a ReqwestModel),
    Builtin,
}

/// What an agent released: its model step, and whether its turn ended.
fn poll(agent: &mut NodeAgent, g: &ActorGraph) -> (Option<StepId>, bool) {
    let (mut step, mut ended) = (None, false);
    while let Some(o) = agent.poll_output(g) {
        match o {
            AgentOutput::Session(Output::ModelRequest { step: s, .. }) => step = Some(s),
            AgentOutput::Session(Output::TurnEnded { .. }) => ended = true,
            _ => {}
        }
    }
    (step, ended)
}

/// Performs `batches` on the shared store; returns their ids (to acknowledge) and the time
/// spent in `ActorStore::apply`.
fn applier<S: ActorStore + Send + 'static>(
    store: &Arc<Mutex<S>>,
    batches: Vec<WriteBatch>,
) -> impl FnOnce() -> (Vec<weft_core::actors::Applied>, u64) + Send + 'static {
    let store = store.clone();
    let handed = Instant::now();
    move || {
        time(Phase::HandOff, handed);
        let mut s = store.lock().expect("store");
        let t = Instant::now();
        let done = batches
            .iter()
            .map(|b| s.perform(b).unwrap_or_else(|e| panic!("store: {e}")))
            .collect();
        let ns = t.elapsed().as_nanos() as u64;
        (done, ns)
    }
}

/// One turn of the agent on `node`: a user line, the model's answer, every line durable.
/// Returns the deltas streamed and the request's tool specs and system text.
///
/// The host's order: after a change the agent syncs (`Runtime::sync_open`: the person's line
/// and the `turn_start` share one batch); when it releases a read (its model request, a read:
/// `agents::is_read`), the batches are taken first: written-only batches (the core's
/// `Durability::Written`) are performed inline (no fsync, no hand-off); a synced one
/// (`--ack-line`) goes to the blocking pool, so that it becomes durable while the request is
/// built from the node (`model_input`, `chat_request`: taking the batches changes nothing it
/// reads) and asked on a task; the answer is handed back once both are done, and the lines it
/// writes are flushed inline (synced: the turn ends once they are durable). The desk's `locked` builds the request before it flushes (under the graph's
/// lock), so its first flush starts that much later.
async fn node_turn<S: ActorStore + Send + 'static>(
    g: &mut ActorGraph,
    store: &Arc<Mutex<S>>,
    agent: &mut NodeAgent,
    node: &str,
    text: &str,
    answer: &Answer<'_>,
    w: &mut Written,
) -> (usize, Vec<ToolSpec>, Option<String>) {
    let mut t0 = Instant::now();
    // The person's line, with the durability the host's acknowledgement calls for (the core's
    // rule): by default it is acknowledged with the turn's end (as `weft chat` and the RAM
    // session answer), with `--ack-line` as soon as it is stored (the desk's `POST`).
    let ack = if ACK_LINE.load(Ordering::Relaxed) {
        LineAck::OnStore
    } else {
        LineAck::WithTurnEnd
    };
    admit_user_line(wall_ms(), g, node, text, ack).expect("a user line");
    time(Phase::Admit, t0);
    let mut deltas = 0;
    let mut spec = (Vec::new(), None);
    for _ in 0..64 {
        let ts = Instant::now();
        agent.sync(now(), g).expect("sync");
        if SERIAL.load(Ordering::Relaxed) {
            flush(g, &mut *store.lock().expect("store"), w);
        }
        let (mut step, mut ended) = poll(agent, g);
        time(Phase::Sync, ts);
        // A released request with a model: the flush goes to the blocking pool first, so the
        // lines become durable while the request is built and asked (taking the batches
        // changes nothing the request reads).
        let early = step.is_some() && matches!(answer, Answer::Model(_));
        let mut flushing = None;
        let mut written = None;
        let mut hand_off = |g: &mut ActorGraph, w: &mut Written| {
            let batches = g.take_batches();
            for b in &batches {
                count(w, b);
            }
            if batches.is_empty() {
            } else if batches.iter().all(|b| b.sync == Durability::Written) {
                // Written only (no fsync): a few microseconds, inline — no hand-off.
                let (acks, ns) = applier(store, batches)();
                add(Phase::Flush1, ns);
                written = Some((acks, ns));
            } else {
                flushing = Some(tokio::task::spawn_blocking(applier(store, batches)));
            }
        };
        let late = LATE_FLUSH.load(Ordering::Relaxed);
        if early && !late {
            hand_off(g, w);
        }
        let mut asked = None;
        let mut inline = None;
        if let Some(st) = step.take() {
            let ti = Instant::now();
            let input = agent.model_input(g).expect("the released step's input");
            let chat = input.chat_request();
            let builtin = matches!(answer, Answer::Builtin).then(|| input.builtin_answer());
            // Dropped here, as the RAM session's transcript values are in `from_session`.
            drop(input);
            spec = (chat.tools.clone(), chat.system.clone());
            time(Phase::Input, ti);
            match answer {
                Answer::Model(m) => {
                    if late {
                        hand_off(g, w);
                    }
                    time(Phase::Before, t0);
                    t0 = Instant::now();
                    if flushing.is_none() {
                        // Nothing runs beside the model (its lines are written): asked on the
                        // turn's own task, as `weft chat` and the RAM session ask it.
                        let t = Instant::now();
                        let r = ask(m, &chat).await;
                        time(Phase::Model, t);
                        inline = Some((st, r));
                    } else {
                        let m = (*m).clone();
                        asked = Some((
                            st,
                            tokio::spawn(async move {
                                let t = Instant::now();
                                let r = ask(&m, &chat).await;
                                time(Phase::Model, t);
                                r
                            }),
                        ));
                    }
                }
                Answer::Builtin => {
                    // The runtime's built-in model answers inside the pump, before the flush.
                    let r = builtin.expect("built above");
                    agent
                        .on_model_response(now(), g, st, r)
                        .expect("the answer");
                }
            }
        }
        let (acks, answered) = match (asked, flushing) {
            (None, None) if inline.is_some() => {
                time(Phase::Joined, t0);
                t0 = Instant::now();
                (written.take().unwrap_or_default(), inline.take())
            }
            (Some((st, asking)), None) => {
                let r = asking.await.expect("the model task");
                if written.is_some() {
                    time(Phase::Joined, t0);
                    t0 = Instant::now();
                }
                (written.take().unwrap_or_default(), Some((st, r)))
            }
            (Some((st, asking)), Some(flushing)) => {
                let (acks, r) = tokio::join!(flushing, asking);
                let acks = acks.expect("flush");
                add(Phase::Flush1, acks.1);
                time(Phase::Joined, t0);
                t0 = Instant::now();
                (acks, Some((st, r.expect("the model task"))))
            }
            (None, _) => {
                // The flush inline: what the answer wrote (or the built-in model's turn).
                let batches = g.take_batches();
                for b in &batches {
                    count(w, b);
                }
                let synced = batches.iter().any(|b| b.sync == Durability::Synced);
                let acks = applier(store, batches)();
                let us = SLEEP_US.load(Ordering::Relaxed);
                if synced && us > 0 && TIMING.load(Ordering::Relaxed) == 2 {
                    std::thread::sleep(Duration::from_micros(us));
                }
                time(Phase::Flush2, t0);
                t0 = Instant::now();
                (acks, None)
            }
        };
        let (acks, ns) = acks;
        w.apply_ns += ns;
        for done in acks {
            g.ack(done).expect("ack");
        }
        let (later, e) = poll(agent, g);
        assert!(
            later.is_none(),
            "a model request is released before the flush"
        );
        ended |= e;
        if let Some((st, (r, d))) = answered {
            deltas += d;
            agent
                .on_model_response(now(), g, st, r)
                .expect("the answer");
            time(Phase::Answer, t0);
            t0 = Instant::now();
        } else if ended && !g.has_batches() {
            time(Phase::Flush2, t0);
            return (deltas, spec.0, spec.1);
        }
    }
    panic!("the turn of `{node}` did not end");
}

/// The RAM-only turns' request building and model task (nanoseconds summed).
static RAM_NS: [std::sync::atomic::AtomicU64; 2] =
    [const { std::sync::atomic::AtomicU64::new(0) }; 2];

/// One turn of the RAM-only session: the same request shape, nothing written.
async fn ram_turn(
    s: &mut Session<serde_json::Value>,
    model: &ReqwestModel,
    text: &str,
    tools: &[ToolSpec],
    system: Option<&str>,
) -> usize {
    s.submit_task(mono_now(), json!(text));
    let mut deltas = 0;
    loop {
        let (mut step, mut ended) = (None, false);
        while let Some(o) = s.poll_output() {
            match o {
                Output::ModelRequest { step: st, .. } => step = Some(st),
                Output::TurnEnded { .. } => ended = true,
                _ => {}
            }
        }
        if let Some(step) = step {
            let tb = Instant::now();
            let mut chat = {
                let req = s.model_request().expect("a model step");
                ChatRequest::from_session(system, &req)
            };
            chat.tools = tools.to_vec();
            RAM_NS[0].fetch_add(tb.elapsed().as_nanos() as u64, Ordering::Relaxed);
            let tm = Instant::now();
            let (r, d) = ask(model, &chat).await;
            RAM_NS[1].fetch_add(tm.elapsed().as_nanos() as u64, Ordering::Relaxed);
            deltas += d;
            s.on_model_response(mono_now(), step, r)
                .expect("the answer");
        } else if ended {
            return deltas;
        } else {
            panic!("the RAM session stalled");
        }
    }
}

/// The calling thread's CPU time (user + system), in milliseconds.
fn cpu_ms() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec to write to.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 * 1000.0 + t.tv_nsec as f64 / 1e6
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn line(i: u64) -> String {
    format!("message {i}: please keep the docs sync on track for the release")
}

// ----- (a) turns ----------------------------------------------------------------------------

async fn turns(dir: &Path, turns: u64, rounds: u64, model: &ReqwestModel) {
    let (mut node_ms, mut ram_ms, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut mem_ms = Vec::new();
    // The runtime thread's CPU time per turn (node over the fs store, over memory, RAM).
    let mut cpu = [0.0f64; 3];
    let (mut raw_rates, mut fsyncs, mut fs_rounds, mut opens) = (Vec::new(), 0u64, 0u64, 0u64);
    let (mut round_ns, mut apply_ns) = (0u64, 0u64);
    let mut w = Written::default();
    let mut chat_bytes = 0u64;
    let (mut node_deltas, mut ram_deltas) = (0usize, 0usize);
    // Warm the connection pool and both paths once.
    let warm = {
        let mut s = Session::new(SessionConfig::new("warm"));
        ram_turn(&mut s, model, "warm up", &[], None).await
    };
    assert_eq!(warm, DELTAS, "the server streams {DELTAS} deltas");
    // And the node's path once (over memory): its request's tools and system text are the
    // RAM session's too.
    let (tools, system) = {
        let mut scratch = Written::default();
        let (mut g, mem, mut agent) = memory_agent(&mut scratch);
        let (d, tools, system) = node_turn(
            &mut g,
            &mem,
            &mut agent,
            "coordinator",
            "warm up",
            &Answer::Model(model),
            &mut scratch,
        )
        .await;
        assert_eq!(d, DELTAS, "the server streams {DELTAS} deltas");
        (tools, system)
    };
    // The RAM and phase figures count the timed turns only.
    RAM_NS.iter().for_each(|n| n.store(0, Ordering::Relaxed));
    PHASES
        .iter()
        .flatten()
        .for_each(|n| n.store(0, Ordering::Relaxed));
    for round in 0..rounds {
        raw_rates.push(raw_fsync_rate(dir, 40, 200).expect("raw fsync probe"));
        let (mut node_t, mut ram_t) = (0.0, 0.0);
        // The three run in turn, the order rotating every round (fs, memory, RAM; memory, RAM,
        // fs; RAM, fs, memory): on this VM what runs right after disk work (the fs store's
        // fsyncs, the raw probe) runs slower for a while, so a fixed order favours the last.
        for slot in 0..3u64 {
            match (round + slot) % 3 {
                0 => {
                    // A fresh root and a fresh session each round: both transcripts grow alike.
                    let root = dir.join(format!("turns-{round}"));
                    let mut store = FsStore::open_writer(&root, Duration::ZERO).expect("lock");
                    let snap = store.load().expect("load");
                    let mut g = ActorGraph::init(
                        HarnessConfig::default(),
                        &store.address(),
                        &snap,
                        wall_ms(),
                        "bench",
                    )
                    .expect("init");
                    let mut scratch = Written::default();
                    flush(&mut g, &mut store, &mut scratch);
                    let (mut agent, _) =
                        NodeAgent::open(now(), &mut g, "coordinator", AgentConfig::default())
                            .expect("open");
                    flush(&mut g, &mut store, &mut scratch);
                    let chat0 = std::fs::metadata(root.join("nodes/coordinator/chat.jsonl"))
                        .map_or(0, |m| m.len());
                    // Shared with the blocking pool that flushes while the model is asked (as the desk's).
                    let store = Arc::new(Mutex::new(store));
                    let stat = |s: &Arc<Mutex<FsStore>>| {
                        let s = s.lock().expect("store");
                        (
                            s.stats.fsyncs.load(Ordering::Relaxed),
                            s.stats.rounds.load(Ordering::Relaxed),
                            s.stats
                                .round_ns
                                .iter()
                                .map(|n| n.load(Ordering::Relaxed))
                                .sum::<u64>(),
                            s.opens(),
                        )
                    };
                    let (f0, r0, n0, o0) = stat(&store);
                    let a0 = w.apply_ns;
                    TIMING.store(1, Ordering::Relaxed);
                    let c = cpu_ms();
                    let t = Instant::now();
                    for i in 0..turns {
                        let (d, ..) = node_turn(
                            &mut g,
                            &store,
                            &mut agent,
                            "coordinator",
                            &line(i),
                            &Answer::Model(model),
                            &mut w,
                        )
                        .await;
                        node_deltas += d;
                    }
                    node_t = t.elapsed().as_secs_f64() * 1000.0 / turns as f64;
                    cpu[0] += cpu_ms() - c;
                    TIMING.store(0, Ordering::Relaxed);
                    let (f1, r1, n1, o1) = stat(&store);
                    fsyncs += f1 - f0;
                    opens += o1 - o0;
                    fs_rounds += r1 - r0;
                    round_ns += n1 - n0;
                    apply_ns += w.apply_ns - a0;
                    chat_bytes += std::fs::metadata(root.join("nodes/coordinator/chat.jsonl"))
                        .map_or(0, |m| m.len())
                        - chat0;
                    drop(store);
                    let _ = std::fs::remove_dir_all(&root);
                }
                1 => {
                    // The same agent on a node over the memory store: the core's cost without the disk.
                    let mut scratch = Written::default();
                    let (mut g, mem, mut agent) = memory_agent(&mut scratch);
                    TIMING.store(2, Ordering::Relaxed);
                    let c = cpu_ms();
                    let t = Instant::now();
                    for i in 0..turns {
                        let answer = Answer::Model(model);
                        node_turn(
                            &mut g,
                            &mem,
                            &mut agent,
                            "coordinator",
                            &line(i),
                            &answer,
                            &mut scratch,
                        )
                        .await;
                    }
                    mem_ms.push(t.elapsed().as_secs_f64() * 1000.0 / turns as f64);
                    cpu[1] += cpu_ms() - c;
                    TIMING.store(0, Ordering::Relaxed);
                }
                _ => {
                    // The RAM-only session: the same model, the same tools and system text in the request.
                    let mut s = Session::new(SessionConfig::new("ram"));
                    let c = cpu_ms();
                    let t = Instant::now();
                    for i in 0..turns {
                        ram_deltas +=
                            ram_turn(&mut s, model, &line(i), &tools, system.as_deref()).await;
                    }
                    ram_t = t.elapsed().as_secs_f64() * 1000.0 / turns as f64;
                    cpu[2] += cpu_ms() - c;
                }
            }
        }
        node_ms.push(node_t);
        ram_ms.push(ram_t);
        ratios.push(node_t / ram_t);
    }
    let n = (turns * rounds) as f64;
    let raw = median(&mut raw_rates);
    let node = median(&mut node_ms);
    let ram = median(&mut ram_ms);
    let ratio = median(&mut ratios);
    println!(
        "(a) turns: {turns} turns x {rounds} rounds, one user line + one streamed answer \
         ({:.0} deltas/answer node, {:.0} RAM)",
        node_deltas as f64 / n,
        ram_deltas as f64 / n
    );
    println!(
        "  agent on a node (fs store)   {:>8.1} turns/s  ({node:.3} ms/turn, median of rounds)",
        1000.0 / node
    );
    let mem = median(&mut mem_ms);
    println!(
        "  agent on a node (memory)     {:>8.1} turns/s  ({mem:.3} ms/turn: the core's lines and \
         slices without the disk, {:.2}x RAM)",
        1000.0 / mem,
        mem / ram
    );
    println!(
        "  RAM-only session             {:>8.1} turns/s  ({ram:.3} ms/turn)",
        1000.0 / ram
    );
    println!(
        "  ratio node/RAM               {ratio:>8.2}x      (median of rounds {}; target <= 2x: {})",
        ratios
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(" "),
        if ratio <= 2.0 { "met" } else { "NOT met" }
    );
    println!(
        "  per node turn: {:.2} fsyncs (FsStore::stats) in {:.2} rounds, {:.2} batches, {:.2} stages, \
         {:.0} bytes written ({:.0} of them chat.jsonl lines)",
        fsyncs as f64 / n,
        fs_rounds as f64 / n,
        w.batches as f64 / n,
        w.stages as f64 / n,
        w.bytes as f64 / n,
        chat_bytes as f64 / n
    );
    println!(
        "  per node turn in FsStore::apply: {:.3} ms, of which {:.3} ms in its fsync rounds \
         (the rest: writes, opens, stats); {:.2} files or directories opened (FsStore::opens: \
         the log's append handle is kept between batches)",
        apply_ns as f64 / n / 1e6,
        round_ns as f64 / n / 1e6,
        opens as f64 / n
    );
    println!(
        "  node turn batches by label: {}",
        w.labels
            .iter()
            .map(|(k, v)| format!("{k} {:.2}", *v as f64 / n))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (set, store) in ["fs", "memory"].iter().enumerate() {
        println!(
            "  per node turn ({store} store, mean): {}",
            PHASES[set]
                .iter()
                .zip(Phase::NAMES)
                .map(|(ns, name)| format!(
                    "{name} {:.3} ms",
                    ns.load(Ordering::Relaxed) as f64 / n / 1e6
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    println!(
        "  per RAM-only turn (mean): request built {:.3} ms, model task {:.3} ms",
        RAM_NS[0].load(Ordering::Relaxed) as f64 / n / 1e6,
        RAM_NS[1].load(Ordering::Relaxed) as f64 / n / 1e6
    );
    println!(
        "  the runtime thread's CPU time per turn (mean): node (fs store) {:.3} ms, node (memory) \
         {:.3} ms, RAM-only {:.3} ms",
        cpu[0] / n,
        cpu[1] / n,
        cpu[2] / n
    );
    println!(
        "  raw fsync-per-write rate of the disk {raw:.0} writes/s ({:.3} ms each): the node turn's \
         fsync rounds alone cost ~{:.3} ms",
        1000.0 / raw,
        fs_rounds as f64 / n * 1000.0 / raw
    );
}

/// The best of 15 batches of `n` calls of `f`, in microseconds per call.
fn best(n: u64, mut f: impl FnMut()) -> f64 {
    (0..15)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_secs_f64() * 1e6 / n as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// A graph initialized over a fresh memory store (flushed).
fn memory_graph(w: &mut Written) -> (ActorGraph, MemoryStore) {
    let mut mem = MemoryStore::default();
    let snap = mem.load().expect("memory");
    let mut g = ActorGraph::init(
        HarnessConfig::default(),
        "bench:",
        &snap,
        wall_ms(),
        "bench",
    )
    .expect("init");
    flush(&mut g, &mut mem, w);
    (g, mem)
}

/// [`memory_graph`] with an agent opened on its coordinator (flushed).
fn memory_agent(w: &mut Written) -> (ActorGraph, Arc<Mutex<MemoryStore>>, NodeAgent) {
    let (mut g, mut mem) = memory_graph(w);
    let (agent, _) =
        NodeAgent::open(now(), &mut g, "coordinator", AgentConfig::default()).expect("open");
    flush(&mut g, &mut mem, w);
    (g, Arc::new(Mutex::new(mem)), agent)
}

/// `--micro`: after 20 turns on the memory store, the best time to build one model step's
/// request from the node's lines (`model_input`, `chat_request`) against the RAM session's
/// (`from_session`) after the same 20 turns, each with its drop (`--micro-n` calls a batch).
async fn micro(model: &ReqwestModel) {
    let mut w = Written::default();
    let (mut g, mem, mut agent) = memory_agent(&mut w);
    for i in 0..20 {
        node_turn(
            &mut g,
            &mem,
            &mut agent,
            "coordinator",
            &line(i),
            &Answer::Model(model),
            &mut w,
        )
        .await;
    }
    admit_user_line(wall_ms(), &mut g, "coordinator", "x", LineAck::WithTurnEnd).expect("line");
    agent.sync(now(), &mut g).expect("sync");
    let _ = poll(&mut agent, &g);
    let n = arg("--micro-n", 300);
    let input = agent.model_input(&g).expect("a released step");
    println!(
        "model_input + drop {:.3} us; chat_request + drop {:.3} us ({} messages)",
        best(n, || drop(std::hint::black_box(
            agent.model_input(&g).expect("a released step")
        ))),
        best(n, || drop(std::hint::black_box(input.chat_request()))),
        input.messages.len()
    );
    let chat = input.chat_request();
    let mut s = Session::new(SessionConfig::new("ram"));
    for i in 0..20 {
        ram_turn(&mut s, model, &line(i), &chat.tools, chat.system.as_deref()).await;
    }
    s.submit_task(mono_now(), json!("x"));
    while s.poll_output().is_some() {}
    println!(
        "RAM from_session + drop {:.3} us",
        best(n, || {
            let req = s.model_request().expect("a model step");
            drop(std::hint::black_box(ChatRequest::from_session(
                chat.system.as_deref(),
                &req,
            )))
        })
    );
}

// ----- (b) resume ---------------------------------------------------------------------------

async fn resume(dir: &Path, nodes: u64, rounds: u64) {
    const TURNS: u64 = 3;
    // Generate: spawn the nodes in batches, then a few builtin-answered turns on each.
    let t = Instant::now();
    let mut w = Written::default();
    let (mut g, mut mem) = memory_graph(&mut w);
    let ids: Vec<String> = (0..nodes).map(|i| format!("agent-{i}")).collect();
    for chunk in ids.chunks(weft_core::actors::MAX_SPAWN_BATCH) {
        let reqs = chunk
            .iter()
            .map(|id| {
                let mut r = SpawnRequest::new("coordinator", NodeType::Task);
                r.id = Some(id.clone());
                r
            })
            .collect();
        g.spawn_batch(wall_ms(), reqs).expect("spawn batch");
        flush(&mut g, &mut mem, &mut w);
    }
    let shared = Arc::new(Mutex::new(mem));
    for id in &ids {
        let (mut a, _) = NodeAgent::open(now(), &mut g, id, AgentConfig::default()).unwrap();
        for i in 0..TURNS {
            node_turn(
                &mut g,
                &shared,
                &mut a,
                id,
                &line(i),
                &Answer::Builtin,
                &mut w,
            )
            .await;
        }
    }
    let mem = Arc::try_unwrap(shared)
        .unwrap_or_else(|_| panic!("the turns are done"))
        .into_inner()
        .expect("store");
    let root = dir.join("resume-root");
    let mut bytes = 0usize;
    for (p, b) in &mem.files {
        let f = root.join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, b).unwrap();
        bytes += b.len();
    }
    let lines: usize = ids.iter().map(|id| g.chat(id).map_or(0, <[_]>::len)).sum();
    println!(
        "(b) resume: {nodes} agent nodes x {TURNS} finished turns ({lines} chat lines, {} files, \
         {:.1} MB; generated in {:.1} s)",
        mem.files.len(),
        bytes as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    drop(g);
    let (mut open_ms, mut agents_ms, mut total_ms) = (Vec::new(), Vec::new(), Vec::new());
    let mut written = 0;
    for _ in 0..rounds {
        let t = Instant::now();
        let mut store = FsStore::open_writer(&root, Duration::ZERO).expect("lock");
        let snap = store.load().expect("load");
        let (mut g, _) =
            ActorGraph::open(HarnessConfig::default(), &store.address(), &snap, wall_ms())
                .expect("open");
        let mut w = Written::default();
        flush(&mut g, &mut store, &mut w);
        let opened = t.elapsed().as_secs_f64() * 1000.0;
        let mut agents = Vec::with_capacity(ids.len());
        for id in &ids {
            let (mut a, report) =
                NodeAgent::open(now(), &mut g, id, AgentConfig::default()).expect("agent");
            assert!(report.interrupted_turn.is_none(), "every turn finished");
            a.sync(now(), &mut g).expect("sync");
            agents.push(a);
        }
        flush(&mut g, &mut store, &mut w);
        let total = t.elapsed().as_secs_f64() * 1000.0;
        written += w.batches;
        open_ms.push(opened);
        agents_ms.push(total - opened);
        total_ms.push(total);
        drop(agents);
        drop(store);
    }
    let total = median(&mut total_ms);
    println!(
        "  resume (open store + graph, NodeAgent::open + sync x {nodes}) {total:>8.1} ms \
         (median of {rounds}: {:.1} ms store + graph, {:.1} ms agents; {written} batches written; \
         target < 1000 ms: {})",
        median(&mut open_ms),
        median(&mut agents_ms),
        if total < 1000.0 { "met" } else { "NOT met" }
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let base = args
        .iter()
        .position(|a| a == "--dir")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let turns_n = arg("--turns", 40);
    let rounds = arg("--rounds", 5);
    let nodes = arg("--nodes", 1000);
    let gap = Duration::from_millis(arg("--chunk-ms", 0));
    SERIAL.store(args.iter().any(|a| a == "--serial"), Ordering::Relaxed);
    LATE_FLUSH.store(args.iter().any(|a| a == "--late-flush"), Ordering::Relaxed);
    ACK_LINE.store(args.iter().any(|a| a == "--ack-line"), Ordering::Relaxed);
    SLEEP_US.store(arg("--sleep-us", 0), Ordering::Relaxed);
    let dir = base.join(format!("weft-agent-turns-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("bench dir");
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "agent turns benchmark in {} (load average {})",
        dir.display(),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let url = serve(gap).await;
    let choice = ModelChoice {
        model: Some("openai:bench".into()),
        base_url: Some(url),
        openai_key: Some("k".into()),
        ..ModelChoice::default()
    };
    let config = ModelConfig::resolve(&choice)
        .expect("a model config")
        .expect("configured");
    let model = ReqwestModel::new(config).expect("client");
    println!(
        "model: in-process OpenAI stream server, {DELTAS} text deltas per answer, {} ms between events",
        gap.as_millis()
    );
    println!(
        "order: {}",
        if SERIAL.load(Ordering::Relaxed) {
            "--serial: the turn's first lines are flushed, then the model is asked"
        } else if LATE_FLUSH.load(Ordering::Relaxed) {
            "--late-flush: the request is built, then the first lines are flushed while it is asked"
        } else {
            "the first lines are written (synced beside the model with --ack-line), then the request is built and asked"
        }
    );
    if args.iter().any(|a| a == "--micro") {
        micro(&model).await;
    } else {
        turns(&dir, turns_n, rounds, &model).await;
        resume(&dir, nodes, rounds).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}
