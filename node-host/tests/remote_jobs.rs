//! Remote job hosts over WebSocket (`weft serve --remote-script …`, protocol `weft-remote/1`):
//! a native client (`JobsHost::open_remote`) drives a worker script running on a real `weft
//! serve` through a small TCP proxy the test can sever or make refuse. Windows are 1.5 s and
//! heartbeats 100 ms, so that every expiry is cheap; each group of scenarios shares one server.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use weft_core::jobs::{
    CancelEvidence, CancelStatus, EndpointEventKind, EndpointId, EndpointSpec, EndpointState,
    EventKind, JobId, LostEvidence, Outcome, RemoteSpec, RemoteTarget, Submit,
};
use weft_host::jobs_host::JobsHost;

const HUMAN: &str = "human-token-for-remote-tests";
const AGENT: &str = "agent-token-for-remote-tests";
const WINDOW_MS: u64 = 1_500;
const HEARTBEAT_MS: u64 = 100;
/// A browser page's origin that `--remote-origin` lets open sessions.
const PAGE_ORIGIN: &str = "http://127.0.0.1:9";

// ----- the server -------------------------------------------------------------------------

/// A `weft serve` offering the ticker script (a private copy, so that its worker processes can
/// be counted) and the in-process kinds.
struct Server {
    child: Child,
    addr: SocketAddr,
}

/// A scratch directory, removed on drop (a failing test too).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(tag: &str) -> Scratch {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let p = std::env::temp_dir().join(format!("weft-remote-{tag}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&p).unwrap();
    Scratch(p)
}

/// A private copy of `tests/workers/ticker.mjs` in `dir`.
fn ticker_in(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workers/ticker.mjs");
    let dst = dir.join("ticker.mjs");
    std::fs::copy(src, &dst).unwrap();
    dst
}

impl Server {
    fn start(data: &Path, listen: &str, script: &Path, window_ms: u64) -> Server {
        Server::start_with(data, listen, script, window_ms, &[])
    }

    /// [`Server::start`] offering the scripts `extra` (`(name, path)`) too.
    fn start_with(
        data: &Path,
        listen: &str,
        script: &Path,
        window_ms: u64,
        extra: &[(&str, &Path)],
    ) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weft"));
        cmd.args(["serve", "--no-agents", "--listen", listen, "--data-dir"])
            .arg(data);
        for (name, path) in extra {
            cmd.arg("--remote-script")
                .arg(format!("{name}={}", path.display()));
        }
        let mut child = cmd
            .arg("--remote-script")
            .arg(format!("ticker={}", script.display()))
            .args(["--remote-kind", "echo", "--remote-kind", "sleep"])
            .args(["--remote-window-ms", &window_ms.to_string()])
            .args(["--remote-heartbeat-ms", &HEARTBEAT_MS.to_string()])
            .args(["--remote-origin", PAGE_ORIGIN])
            .env("WEFT_HUMAN_TOKEN", HUMAN)
            .env("WEFT_AGENT_TOKEN", AGENT)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("weft serve starts");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let addr = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("http://"))
            .unwrap_or_else(|| panic!("no URL in `{line}`"))
            .trim_end_matches('/')
            .parse()
            .unwrap();
        let mut rest = String::new();
        while out.read_line(&mut rest).unwrap() > 0 && !rest.contains("discovery:") {}
        assert!(
            rest.contains("remote jobs: ws://"),
            "the banner names the remote endpoint: {rest}"
        );
        std::thread::spawn(move || {
            let mut sink = String::new();
            let _ = out.read_to_string(&mut sink);
        });
        Server { child, addr }
    }

    fn url(&self) -> String {
        format!("ws://{}/api/jobs/remote", self.addr)
    }

    /// `GET /api/jobs/remote/sessions` with the human token.
    fn sessions(&self) -> Value {
        let (status, body) = get(self.addr, "/api/jobs/remote/sessions", Some(HUMAN));
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    }

    /// SIGKILL: nothing is flushed, no session is told.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGINT, and waits for the exit; returns whether it exited successfully.
    fn stop(&mut self) -> bool {
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        self.child.wait().unwrap().success()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One HTTP/1.1 GET; returns the status and the body.
fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
    get_with(addr, path, &headers)
}

/// One HTTP/1.1 GET with these headers; returns the status and the body.
fn get_with(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra}\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, body)
}

/// How many live processes run `script` (the server's workers for it).
fn workers(script: &Path) -> usize {
    worker_pids(script).len()
}

/// The live processes that run `script`.
fn worker_pids(script: &Path) -> Vec<u32> {
    let needle = script.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            // A zombie is dead (its parent has not reaped it yet: the test checks reaping
            // through the group kill, not through the parent).
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next());
            state != Some("Z")
                && std::fs::read(e.path().join("cmdline"))
                    // The worker has the script as an argument of its own (the server's
                    // `--remote-script` value is `ticker=PATH`).
                    .map(|c| c.split(|b| *b == 0).any(|arg| arg == needle.as_bytes()))
                    .unwrap_or(false)
        })
        .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
        .collect()
}

/// Waits (up to 10 s) until no process runs `script`.
async fn no_workers_left(script: &Path) {
    for _ in 0..200 {
        if workers(script) == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "worker processes of {} outlived their session",
        script.display()
    );
}

// ----- a proxy the test can cut -----------------------------------------------------------

/// A loopback TCP proxy in front of the server that the test can sever (every live connection
/// dropped at once) or make refuse (new connections closed as soon as they are accepted).
struct Proxy {
    addr: SocketAddr,
    refuse: Arc<AtomicBool>,
    live: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let refuse = Arc::new(AtomicBool::new(false));
        let live: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let accepted = Arc::new(AtomicUsize::new(0));
        let (r, l, a) = (refuse.clone(), live.clone(), accepted.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                if r.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let pipe = tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    // The server checks its Host header (DNS rebinding): a reverse proxy
                    // names the server it forwards to, so does this one.
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
                        match inbound.read(&mut byte).await {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    let head = String::from_utf8_lossy(&head)
                        .replace(&format!("Host: {addr}"), &format!("Host: {target}"));
                    if outbound.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                });
                let mut live = l.lock().unwrap();
                live.retain(|t| !t.is_finished());
                live.push(pipe);
            }
        });
        Proxy {
            addr,
            refuse,
            live,
            accepted,
            task,
        }
    }

    /// Drops every connection in flight (both of its sockets close).
    fn sever(&self) {
        for t in self.live.lock().unwrap().drain(..) {
            t.abort();
        }
    }

    /// From now on new connections are closed at once (`false`: carried again).
    fn refuse(&self, on: bool) {
        self.refuse.store(on, Ordering::SeqCst);
    }

    fn url(&self) -> String {
        format!("ws://{}/api/jobs/remote", self.addr)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.sever();
    }
}

// ----- the client -------------------------------------------------------------------------

fn spec(url: &str, token: &str, target: RemoteTarget) -> RemoteSpec {
    let mut s = RemoteSpec::new(url, token, target);
    s.window_ms = WINDOW_MS;
    s.heartbeat_ms = HEARTBEAT_MS;
    s
}

fn open(host: &mut JobsHost, url: &str, token: &str, target: RemoteTarget) -> EndpointId {
    host.open_remote(
        EndpointSpec::new("app", "remote ticker"),
        spec(url, token, target),
    )
    .expect("a loopback ws:// URL is accepted")
}

fn ticker() -> RemoteTarget {
    RemoteTarget::Script("ticker".into())
}

fn submit(host: &mut JobsHost, ep: EndpointId, payload: Value) -> JobId {
    let now = host.now();
    let j = host
        .registry
        .submit(now, Submit::new("app", ep, payload))
        .unwrap()
        .job;
    host.pump();
    j
}

fn cancel(host: &mut JobsHost, job: JobId) -> CancelStatus {
    let now = host.now();
    let s = host.registry.cancel(now, job, "the test cancels").unwrap();
    host.pump();
    s
}

/// Drives the host until `cond` holds (panics after 20 s).
async fn until(host: &mut JobsHost, what: &str, mut cond: impl FnMut(&JobsHost) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !cond(host) {
        tokio::select! {
            _ = host.step() => {}
            _ = tokio::time::sleep_until(deadline) => panic!("timed out waiting for {what}"),
        }
    }
}

/// Drives the host for `ms` milliseconds.
async fn drive_for(host: &mut JobsHost, ms: u64) {
    let end = tokio::time::Instant::now() + Duration::from_millis(ms);
    loop {
        tokio::select! {
            _ = host.step() => {}
            _ = tokio::time::sleep_until(end) => return,
        }
    }
}

async fn outcome(host: &mut JobsHost, job: JobId) -> Outcome<Value> {
    until(host, "the outcome", |h| {
        h.registry.job(job).unwrap().is_finished()
    })
    .await;
    host.registry.job(job).unwrap().outcome().unwrap().clone()
}

/// The ticks of the job's progress events, in journal order.
fn ticks(host: &JobsHost, job: JobId) -> Vec<u64> {
    host.registry
        .job(job)
        .unwrap()
        .journal()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Progress { value } => value["tick"].as_u64(),
            _ => None,
        })
        .collect()
}

async fn progressed(host: &mut JobsHost, job: JobId, n: usize) {
    until(host, "progress", |h| ticks(h, job).len() >= n).await;
}

fn endpoint_events(host: &JobsHost, ep: EndpointId) -> Vec<EndpointEventKind> {
    host.registry
        .endpoint(ep)
        .unwrap()
        .events()
        .iter()
        .map(|e| e.kind.clone())
        .collect()
}

/// The server's identity of a client job (from its `remote_accepted` milestone).
fn remote_identity(host: &JobsHost, job: JobId) -> (String, JobId) {
    host.registry
        .job(job)
        .unwrap()
        .journal()
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::RemoteAccepted {
                session,
                remote_job,
            } => Some((session.clone(), *remote_job)),
            _ => None,
        })
        .expect("a remote_accepted milestone")
}

fn lost_evidence(o: &Outcome<Value>) -> Option<LostEvidence> {
    match o {
        Outcome::Lost { evidence, .. } => Some(*evidence),
        _ => None,
    }
}

// ----- the scenarios ----------------------------------------------------------------------

/// Progress and cancel with acknowledgement, sever + resume (nothing lost, a cancel made while
/// disconnected delivered on resumption), sever + refuse past the window (lost, and the
/// server's tombstone), malformed and oversized frames beside a run, bad tokens, and a
/// graceful stop — one server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_sessions_progress_cancel_resume_expire_and_refuse_garbage() {
    let scratch = scratch("main");
    let dir = &scratch.0;
    let script = ticker_in(dir);
    // `gone` is removed once the server runs (its open fails); `quits` exits at once.
    let gone = dir.join("gone.mjs");
    std::fs::copy(&script, &gone).unwrap();
    let quits = dir.join("quits.mjs");
    std::fs::write(&quits, "process.exit(3);\n").unwrap();
    let mut server = Server::start_with(
        &dir.join("data"),
        "127.0.0.1:0",
        &script,
        WINDOW_MS,
        &[("gone", &gone), ("quits", &quits)],
    );
    std::fs::remove_file(&gone).unwrap();
    let proxy = Proxy::start(server.addr).await;
    let mut host = JobsHost::new();
    let ep = open(&mut host, &proxy.url(), AGENT, ticker());

    // 1. Progress, in order, and the second identity.
    let a = submit(&mut host, ep, json!({"ticks": 5, "everyMs": 10}));
    let o = outcome(&mut host, a).await;
    assert!(
        matches!(&o, Outcome::Succeeded { value } if value["ticks"] == 5),
        "{o:?}"
    );
    assert_eq!(ticks(&host, a), vec![1, 2, 3, 4, 5]);
    let (session, remote_a) = remote_identity(&host, a);
    assert!(!session.is_empty());
    let job = host.registry.job(a).unwrap();
    assert_eq!(
        job.remote.as_ref().map(|r| (r.session.clone(), r.job)),
        Some((session.clone(), remote_a)),
        "the client's job names the server's job"
    );
    assert_eq!(job.to_json()["remote"]["job"], json!(remote_a.0));

    // 2. Cancel, acknowledged by the worker across the socket.
    let b = submit(&mut host, ep, json!({"ticks": 100000, "everyMs": 20}));
    progressed(&mut host, b, 2).await;
    assert!(matches!(
        cancel(&mut host, b),
        CancelStatus::Requested { ack_expected: true }
    ));
    assert_eq!(
        outcome(&mut host, b).await,
        Outcome::Cancelled {
            evidence: CancelEvidence::Acknowledged
        }
    );

    // 2b. The built-in in-process kind `sleep`: progress, then its value; a cancel stops it.
    let kind = open(
        &mut host,
        &proxy.url(),
        AGENT,
        RemoteTarget::Kind("sleep".into()),
    );
    let k = submit(&mut host, kind, json!({"ms": 200, "progressEvery": 50}));
    let o = outcome(&mut host, k).await;
    assert_eq!(
        o,
        Outcome::Succeeded {
            value: json!({"slept": 200})
        }
    );
    let fractions: Vec<f64> = host
        .registry
        .job(k)
        .unwrap()
        .journal()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Progress { value } => value.as_f64(),
            _ => None,
        })
        .collect();
    assert_eq!(fractions, vec![0.25, 0.5, 0.75]);
    let k = submit(&mut host, kind, json!({"ms": 600000}));
    until(&mut host, "the sleep's second identity", |h| {
        h.registry.job(k).unwrap().remote.is_some()
    })
    .await;
    cancel(&mut host, k);
    assert_eq!(
        outcome(&mut host, k).await,
        Outcome::Cancelled {
            evidence: CancelEvidence::Acknowledged
        }
    );

    // 3. Sever + resume within the window: every tick arrives once, in order.
    let c = submit(&mut host, ep, json!({"ticks": 40, "everyMs": 15}));
    progressed(&mut host, c, 3).await;
    proxy.refuse(true);
    proxy.sever();
    // Disconnected for a while (the worker keeps ticking on the server), then reachable.
    drive_for(&mut host, 400).await;
    assert!(
        !host.registry.job(c).unwrap().is_finished(),
        "the run is neither lost nor finished while the connection is down"
    );
    proxy.refuse(false);
    let o = outcome(&mut host, c).await;
    assert!(matches!(o, Outcome::Succeeded { .. }), "{o:?}");
    assert_eq!(ticks(&host, c), (1..=40).collect::<Vec<u64>>());
    let evs = endpoint_events(&host, ep);
    assert!(
        evs.iter()
            .any(|e| matches!(e, EndpointEventKind::Disconnected { .. })),
        "{evs:?}"
    );
    assert!(
        evs.iter()
            .any(|e| matches!(e, EndpointEventKind::Resumed { .. })),
        "{evs:?}"
    );

    // 4. A cancel made while disconnected is recorded as requested and delivered on resume.
    let d = submit(&mut host, ep, json!({"ticks": 100000, "everyMs": 20}));
    progressed(&mut host, d, 2).await;
    proxy.refuse(true);
    proxy.sever();
    until(&mut host, "the disconnect", |h| {
        h.registry
            .remote_info(ep)
            .is_some_and(|i| i.state != "live")
    })
    .await;
    assert_eq!(
        cancel(&mut host, d),
        CancelStatus::RequestedWhileDisconnected
    );
    drive_for(&mut host, 300).await;
    assert!(!host.registry.job(d).unwrap().is_finished());
    proxy.refuse(false);
    assert_eq!(
        outcome(&mut host, d).await,
        Outcome::Cancelled {
            evidence: CancelEvidence::Acknowledged
        }
    );

    // 5. Malformed and oversized frames on other sockets never touch this session's run.
    let e = submit(&mut host, ep, json!({"ticks": 30, "everyMs": 20}));
    progressed(&mut host, e, 1).await;
    let raw = tokio::spawn(garbage(server.url()));
    let o = outcome(&mut host, e).await;
    assert!(matches!(o, Outcome::Succeeded { .. }), "{o:?}");
    assert_eq!(ticks(&host, e), (1..=30).collect::<Vec<u64>>());
    raw.await.unwrap();

    // 6. A bad token: refused before any run (in the hello), and 401 at the upgrade.
    let bad = open(&mut host, &proxy.url(), "not-a-token-at-all", ticker());
    let f = submit(&mut host, bad, json!({"ticks": 1}));
    let o = outcome(&mut host, f).await;
    assert!(
        matches!(&o, Outcome::Failed { started: false, .. }),
        "{o:?}"
    );
    let evs = endpoint_events(&host, bad);
    assert!(
        evs.iter().any(|e| matches!(e,
            EndpointEventKind::ResumeRefused { code, .. } if code == "REMOTE_UNAUTHENTICATED")),
        "{evs:?}"
    );
    assert!(matches!(
        &host.registry.endpoint(bad).unwrap().state,
        EndpointState::Closed { reason } if reason.contains("REMOTE_UNAUTHENTICATED")
    ));
    let nope = open(
        &mut host,
        &proxy.url(),
        AGENT,
        RemoteTarget::Script("nope".into()),
    );
    until(&mut host, "the refusal of an unknown target", |h| {
        matches!(
            h.registry.endpoint(nope).unwrap().state,
            EndpointState::Closed { .. }
        )
    })
    .await;
    assert!(
        matches!(&host.registry.endpoint(nope).unwrap().state,
            EndpointState::Closed { reason } if reason.contains("REMOTE_UNKNOWN_TARGET")),
        "{:?}",
        host.registry.endpoint(nope).unwrap().state
    );
    let mut req = server.url().into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", "Bearer wrong-token".parse().unwrap());
    match tokio_tungstenite::connect_async(req).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => {
            assert_eq!(r.status(), 401);
            assert_eq!(
                r.headers().get("content-type").unwrap(),
                "application/problem+json"
            );
            let body: Value = serde_json::from_slice(r.body().as_deref().unwrap()).unwrap();
            assert_eq!(body["code"], "UNAUTHENTICATED");
        }
        other => panic!("a wrong bearer token is refused at the upgrade: {other:?}"),
    }
    // `--remote-origin`: that page may open a socket; another origin may not, and the listed
    // origin reaches no other route.
    let with_origin = |origin: &str| {
        let mut req = server.url().into_client_request().unwrap();
        req.headers_mut().insert("origin", origin.parse().unwrap());
        req
    };
    let (mut ws, _) = tokio_tungstenite::connect_async(with_origin(PAGE_ORIGIN))
        .await
        .expect("the listed origin opens a socket");
    ws.close(None).await.unwrap();
    match tokio_tungstenite::connect_async(with_origin("http://elsewhere.example")).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 403),
        other => panic!("a foreign origin is refused: {other:?}"),
    }
    let (status, body) = get_with(
        server.addr,
        "/api/jobs/remote/sessions",
        &[
            ("Authorization", &format!("Bearer {HUMAN}")),
            ("Origin", PAGE_ORIGIN),
        ],
    );
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("UNTRUSTED_ORIGIN"), "{body}");
    assert_eq!(get(server.addr, "/api/jobs/remote/sessions", None).0, 401);
    assert_eq!(
        get(server.addr, "/api/jobs/remote/sessions", Some(AGENT)).0,
        403
    );

    // 7. Sever + refuse past the window: lost with `remote_disconnected`; the server
    //    terminates the run and keeps a tombstone saying why.
    let g = submit(&mut host, ep, json!({"ticks": 100000, "everyMs": 20}));
    progressed(&mut host, g, 2).await;
    let (session, remote_g) = remote_identity(&host, g);
    assert_eq!(workers(&script), 1, "one worker process for the session");
    proxy.refuse(true);
    proxy.sever();
    let o = outcome(&mut host, g).await;
    assert_eq!(
        lost_evidence(&o),
        Some(LostEvidence::RemoteDisconnected),
        "{o:?}"
    );
    let journal: Vec<&str> = host
        .registry
        .job(g)
        .unwrap()
        .journal()
        .iter()
        .map(|e| e.kind.name())
        .collect();
    assert!(journal.contains(&"terminated"), "{journal:?}");
    let tomb = {
        let mut found = None;
        for _ in 0..100 {
            let v = server.sessions();
            found = v["tombstones"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["session"] == session.as_str())
                .cloned();
            if found.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        found.expect("the expired session's tombstone")
    };
    assert!(
        tomb["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("not resumed within {WINDOW_MS} ms")),
        "{tomb}"
    );
    let run = tomb["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job"] == remote_g.0)
        .unwrap_or_else(|| panic!("the run is in the tombstone: {tomb}"));
    assert_eq!(run["outcome"]["outcome"], "lost", "{tomb}");
    no_workers_left(&script).await;

    // 7b. A session whose worker cannot be started, or exits before its hello: the run
    //     fails `ENDPOINT_CLOSED` naming the host's reason; the endpoint closes, no reconnect.
    proxy.refuse(false);
    for (name, code, why) in [
        ("gone", "REMOTE_OPEN_FAILED", "No such file"),
        ("quits", "REMOTE_ENDPOINT_CLOSED", "exited with status 3"),
    ] {
        let dead = open(
            &mut host,
            &proxy.url(),
            AGENT,
            RemoteTarget::Script(name.into()),
        );
        let r = submit(&mut host, dead, json!({"ticks": 1}));
        match outcome(&mut host, r).await {
            Outcome::Failed {
                message,
                code: Some(c),
                started: false,
            } => {
                assert_eq!(c, "ENDPOINT_CLOSED", "{name}: {message}");
                assert!(message.contains(code), "{name}: {message}");
                assert!(message.contains(why), "{name}: {message}");
            }
            o => panic!("{name}: the run fails without starting: {o:?}"),
        }
        assert!(
            matches!(&host.registry.endpoint(dead).unwrap().state,
                EndpointState::Closed { reason } if reason.contains(code)),
            "{name}: {:?}",
            host.registry.endpoint(dead).unwrap().state
        );
        assert_eq!(host.registry.remote_info(dead).unwrap().state, "closed");
        let accepted = proxy.accepted.load(Ordering::SeqCst);
        drive_for(&mut host, 300).await;
        assert_eq!(
            proxy.accepted.load(Ordering::SeqCst),
            accepted,
            "{name}: no reconnect"
        );
    }

    // 7c. A worker killed mid-run: the run is `lost` (`remote_lost`, not a disconnect), its
    //     session ends with a tombstone; another session still works.
    let ep3 = open(&mut host, &proxy.url(), AGENT, ticker());
    let k = submit(&mut host, ep3, json!({"ticks": 100000, "everyMs": 20}));
    progressed(&mut host, k, 2).await;
    let (session, _) = remote_identity(&host, k);
    let pids = worker_pids(&script);
    assert_eq!(pids.len(), 1, "one worker process for the session");
    let _ = Command::new("kill")
        .args(["-KILL", &pids[0].to_string()])
        .status();
    let o = outcome(&mut host, k).await;
    assert_eq!(lost_evidence(&o), Some(LostEvidence::RemoteLost), "{o:?}");
    until(&mut host, "the endpoint's close", |h| {
        matches!(
            h.registry.endpoint(ep3).unwrap().state,
            EndpointState::Closed { .. }
        )
    })
    .await;
    let v = server.sessions();
    let tomb = v["tombstones"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["session"] == session.as_str())
        .unwrap_or_else(|| panic!("the ended session's tombstone: {v}"));
    assert_eq!(tomb["code"], "REMOTE_ENDPOINT_CLOSED", "{tomb}");
    let ep4 = open(&mut host, &proxy.url(), AGENT, ticker());
    let ok = submit(&mut host, ep4, json!({"ticks": 3, "everyMs": 10}));
    let o = outcome(&mut host, ok).await;
    assert!(matches!(o, Outcome::Succeeded { .. }), "{o:?}");
    assert_eq!(ticks(&host, ok), vec![1, 2, 3]);
    // 7d. A worker that floods progress then finishes: the run still ends, and every tick
    //     arrived or was reported missed. (Whether the server's observer overflows here
    //     depends on scheduling: this guards the flood path, it does not force the overflow.)
    let f = submit(&mut host, ep4, json!({"ticks": 5000, "flood": true}));
    let o = outcome(&mut host, f).await;
    assert_eq!(
        o,
        Outcome::Succeeded {
            value: json!({"ticks": 5000})
        }
    );
    let got = ticks(&host, f).len() as u64;
    let missed: u64 = host
        .registry
        .job(f)
        .unwrap()
        .journal()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::RemoteMissed { progress, .. } => Some(*progress),
            _ => None,
        })
        .sum();
    let dropped = host.registry.job(f).unwrap().dropped_events();
    assert!(
        got + missed + dropped >= 5000,
        "ticks {got} + missed {missed} + dropped {dropped} cover the 5000"
    );
    let now = host.now();
    host.registry
        .terminate_endpoint(now, ep4, "the test is done with it")
        .unwrap();
    host.pump();
    no_workers_left(&script).await;

    // 8. A graceful stop ends a live session: its run terminated, its worker gone.
    let ep2 = open(&mut host, &proxy.url(), AGENT, ticker());
    let h = submit(&mut host, ep2, json!({"ticks": 100000, "everyMs": 20}));
    progressed(&mut host, h, 1).await;
    assert_eq!(workers(&script), 1);
    assert!(server.stop(), "weft serve exits 0 on SIGINT");
    no_workers_left(&script).await;
    let o = outcome(&mut host, h).await;
    assert_eq!(
        lost_evidence(&o),
        Some(LostEvidence::RemoteDisconnected),
        "{o:?}"
    );
    assert!(proxy.accepted.load(Ordering::SeqCst) >= 5);
    drop(host);
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>;

/// The next frame that is not a heartbeat (`{"t": "closed", "code"}` once the socket closed).
async fn next_frame(ws: &mut Ws) -> Value {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("an answer")
        {
            Some(Ok(Message::Text(t))) => {
                let v: Value = serde_json::from_str(t.as_str()).unwrap();
                if v["t"] != "ping" && v["t"] != "pong" {
                    return v;
                }
            }
            Some(Ok(Message::Close(c))) => {
                return json!({"t": "closed", "code": c.map(|c| u16::from(c.code))});
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return json!({"t": "closed", "error": e.to_string()}),
            None => return json!({"t": "closed"}),
        }
    }
}

/// The first frame `pred` accepts (panics on a close `pred` does not accept).
async fn frame_where(ws: &mut Ws, pred: impl Fn(&Value) -> bool) -> Value {
    loop {
        let v = next_frame(ws).await;
        if pred(&v) {
            return v;
        }
        assert_ne!(v["t"], "closed", "the socket closed early: {v}");
    }
}

/// A raw socket: garbage before and after authenticating, a frame over the session's frame
/// limit (an error and a refused run; the session goes on) and one over the hard cap (closed
/// 1009). The session's other runs complete.
async fn garbage(url: String) {
    let (mut ws, _) = tokio_tungstenite::connect_async(url.as_str())
        .await
        .unwrap();
    let error = |v: &Value| v["t"] == "error";
    ws.send(Message::text("this is not JSON")).await.unwrap();
    let v = frame_where(&mut ws, error).await;
    assert_eq!(v["code"], "REMOTE_PROTOCOL", "{v}");
    let early = json!({"t": "msg", "seq": 1, "ack": 0, "body": {"type": "cancel", "id": 1}});
    ws.send(Message::text(early.to_string())).await.unwrap();
    let v = frame_where(&mut ws, error).await;
    assert_eq!(v["code"], "REMOTE_UNAUTHENTICATED", "{v}");
    let hello = json!({"t": "hello", "protocol": "weft-remote/1", "token": AGENT,
                       "open": {"kind": "echo"}, "windowMs": 1000, "heartbeatMs": 1000,
                       "label": "raw"});
    ws.send(Message::text(hello.to_string())).await.unwrap();
    let v = next_frame(&mut ws).await;
    assert_eq!(v["t"], "welcome", "{v}");
    ws.send(Message::binary(vec![1u8, 2, 3])).await.unwrap();
    let v = frame_where(&mut ws, error).await;
    assert_eq!(v["code"], "REMOTE_PROTOCOL", "{v}");
    let run = |seq: u64, payload: Value| {
        json!({"t": "msg", "seq": seq, "ack": 0,
               "body": {"type": "run", "id": seq, "payload": payload}})
        .to_string()
    };
    let done = |id: u64| move |v: &Value| v["body"]["type"] == "done" && v["body"]["id"] == id;
    ws.send(Message::text(run(1, json!({"a": 1}))))
        .await
        .unwrap();
    let v = frame_where(&mut ws, done(1)).await;
    assert_eq!(v["body"]["value"], json!({"echo": {"a": 1}}), "{v}");
    ws.send(Message::text(run(2, json!("x".repeat(1_500_000)))))
        .await
        .unwrap();
    let v = frame_where(&mut ws, error).await;
    assert_eq!(v["code"], "REMOTE_FRAME_TOO_LARGE", "{v}");
    let v = frame_where(&mut ws, |v| v["t"] == "settled").await;
    assert_eq!(v["id"], 2, "{v}");
    assert_eq!(v["outcome"]["code"], "REMOTE_FRAME_TOO_LARGE", "{v}");
    ws.send(Message::text(run(3, json!({"b": 2}))))
        .await
        .unwrap();
    let v = frame_where(&mut ws, done(3)).await;
    assert_eq!(v["body"]["value"], json!({"echo": {"b": 2}}), "{v}");
    let _ = ws.send(Message::text("y".repeat(3 << 20))).await;
    let v = frame_where(&mut ws, |v| v["t"] == "closed").await;
    assert_eq!(v["code"], 1009, "{v}");
}

/// `kill -9` of the server and a restart on the same port: the resume is refused
/// (`REMOTE_SESSION_UNKNOWN`) and the client's run is lost at once — the window is a minute,
/// far beyond the test's patience, so only the refusal can end it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_refuses_the_resume_and_the_run_is_lost_at_once() {
    let scratch = scratch("restart");
    let dir = &scratch.0;
    let script = ticker_in(dir);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut server = Server::start(&dir.join("data"), &listen, &script, 60_000);
    let mut host = JobsHost::new();
    let mut s = spec(&server.url(), AGENT, ticker());
    s.window_ms = 60_000;
    let ep = host
        .open_remote(EndpointSpec::new("app", "remote ticker"), s)
        .unwrap();
    let job = submit(&mut host, ep, json!({"ticks": 100000, "everyMs": 20}));
    progressed(&mut host, job, 2).await;
    server.kill();
    // The killed server's worker exits when its stdin closes (nothing outlives the host).
    no_workers_left(&script).await;
    drive_for(&mut host, 200).await;
    assert!(!host.registry.job(job).unwrap().is_finished());
    let _restarted = Server::start(&dir.join("data"), &listen, &script, 60_000);
    let o = outcome(&mut host, job).await;
    assert_eq!(
        lost_evidence(&o),
        Some(LostEvidence::RemoteDisconnected),
        "{o:?}"
    );
    let evs = endpoint_events(&host, ep);
    assert!(
        evs.iter().any(|e| matches!(e,
            EndpointEventKind::ResumeRefused { code, .. } if code == "REMOTE_SESSION_UNKNOWN")),
        "{evs:?}"
    );
    drop(host);
}
