//! The desk over real HTTP: `weft actors desk` serving the API and UI, writes answered after
//! the store acknowledged them, live change events over SSE, problem+json errors.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

struct Desk {
    child: Child,
    addr: String,
}

impl Drop for Desk {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn desk(root: &str) -> Desk {
    desk_with(root, Stdio::inherit())
}

/// [`desk`] with its standard error going to `stderr`.
fn desk_with(root: &str, stderr: Stdio) -> Desk {
    let mut child = weft()
        .args(["actors", "desk", root, "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .expect("the desk prints its URL")
        .to_owned();
    Desk { child, addr }
}

/// One HTTP/1.1 request; returns (status, content type, body).
fn http(addr: &str, method: &str, path: &str, body: Option<&str>) -> (u16, String, String) {
    raw(
        addr,
        method,
        path,
        body,
        &format!("host: {addr}\r\ncontent-type: application/json\r\n"),
    )
}

/// One HTTP/1.1 request with the given header lines.
fn raw(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &str,
) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let ctype = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_owned)
        })
        .unwrap_or_default();
    (status, ctype, rest.to_owned())
}

fn get(addr: &str, path: &str) -> Value {
    let (st, _, b) = http(addr, "GET", path, None);
    assert_eq!(st, 200, "GET {path}: {b}");
    serde_json::from_str(&b).unwrap()
}

fn post(addr: &str, path: &str, body: Value) -> (u16, Value) {
    let (st, ct, b) = http(addr, "POST", path, Some(&body.to_string()));
    if st >= 400 {
        assert_eq!(ct, "application/problem+json", "{b}");
    }
    (st, serde_json::from_str(&b).unwrap_or(Value::Null))
}

#[test]
fn the_desk_serves_the_ui_and_the_api_and_pushes_changes() {
    let root = scratch("desk");
    let r = root.join("chat");
    let d = desk(r.to_str().unwrap());
    let (st, ct, html) = http(&d.addr, "GET", "/actors/", None);
    assert_eq!((st, ct.as_str()), (200, "text/html; charset=utf-8"));
    assert!(html.contains("weft desk") && html.contains("/actors/desk.js"));
    assert_eq!(http(&d.addr, "GET", "/actors/desk.js", None).0, 200);

    // An empty root was initialised by the desk.
    let g = get(&d.addr, "/api/actors/graph");
    assert_eq!(g["root"], "coordinator");
    let v0 = g["version"].as_u64().unwrap();

    // Live updates: the event stream announces each change.
    let mut ev = TcpStream::connect(&d.addr).unwrap();
    ev.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        ev,
        "GET /api/actors/events HTTP/1.1\r\nhost: {}\r\naccept: text/event-stream\r\n\r\n",
        d.addr
    )
    .unwrap();
    let mut evr = BufReader::new(ev);
    let mut next_version = || -> u64 {
        let mut line = String::new();
        loop {
            line.clear();
            evr.read_line(&mut line).unwrap();
            if let Some(data) = line.trim().strip_prefix("data: ") {
                return serde_json::from_str::<Value>(data).unwrap()["version"]
                    .as_u64()
                    .unwrap();
            }
        }
    };
    assert_eq!(
        next_version(),
        v0,
        "the stream starts with the current version"
    );

    let (st, s) = post(
        &d.addr,
        "/api/actors/spawn",
        json!({"parent": "coordinator", "type": "task", "title": "docs sync"}),
    );
    assert_eq!(st, 201, "{s}");
    assert_eq!(s["id"], "docs-sync");
    assert!(next_version() > v0, "a spawn is pushed to live views");
    // Answered after the store acknowledged it: the files already hold the lineage.
    let mut disk = read_disk(&r);
    assert_eq!(disk.metas["docs-sync"]["spawnedBy"], "coordinator");
    // The running desk keeps a spare temporary per record it rewrote (removed when it stops).
    assert!(
        disk.leftovers
            .iter()
            .any(|l| l.ends_with(".weft-tmp-spare"))
    );
    disk.leftovers.retain(|l| !l.ends_with(".weft-tmp-spare"));
    assert!(
        lineage_problems(&disk).is_empty(),
        "{:?}",
        lineage_problems(&disk)
    );

    let (st, _) = post(
        &d.addr,
        "/api/actors/nodes/docs-sync/status",
        json!({"status": "running", "summary": "PR open"}),
    );
    assert_eq!(st, 200);
    let grid = get(&d.addr, "/api/actors/views/grid");
    assert_eq!(grid["tiles"][0]["status"], "running");
    let fork = get(&d.addr, "/api/actors/nodes/docs-sync");
    assert_eq!(fork["transcript"][0]["role"], "system");
    let (st, out) = post(
        &d.addr,
        "/api/actors/nodes/coordinator/route",
        json!({"text": "Continue the merge or we could also refactor the timeline"}),
    );
    assert_eq!((st, out["type"].as_str()), (200, Some("disambiguation")));
    for view in [
        "linear",
        "tree",
        "metathread",
        "temporal?scope=global&buckets=10",
    ] {
        get(&d.addr, &format!("/api/actors/views/{view}"));
    }
    assert_eq!(get(&d.addr, "/api/actors/audit")["problems"], 0);

    // Errors: problem+json with the stable code and a fitting status; nothing changes.
    let cases: Vec<(&str, Value, u16, &str)> = vec![
        (
            "/api/actors/nodes/coordinator/messages",
            json!({"text": "hi"}),
            409,
            "ROUTING_PAUSED",
        ),
        (
            "/api/actors/nodes/docs-sync/messages",
            json!({"text": "x", "role": "progress", "from": "coordinator"}),
            200,
            "",
        ),
        (
            "/api/actors/nodes/disambig-boundary/messages",
            json!({"text": "50%", "role": "progress"}),
            422,
            "CADENCE_VIOLATION",
        ),
        (
            "/api/actors/nodes/ghost/messages",
            json!({"text": "x"}),
            404,
            "UNKNOWN_NODE",
        ),
        (
            "/api/actors/nodes/..%2F..%2Fetc/messages",
            json!({"text": "x"}),
            400,
            "INVALID_NODE_ID",
        ),
        (
            "/api/actors/spawn",
            json!({"parent": "docs-sync", "id": "a/b"}),
            400,
            "INVALID_NODE_ID",
        ),
        (
            "/api/actors/spawn",
            json!({"type": "task"}),
            400,
            "INVALID_ARGUMENT",
        ),
        (
            "/api/actors/nodes/docs-sync/messages",
            json!({"text": "x".repeat((1 << 20) + 1)}),
            400,
            "INVALID_ARGUMENT",
        ),
        (
            "/api/actors/nodes/docs-sync/wait",
            json!({"on": "docs-sync"}),
            400,
            "INVALID_ARGUMENT",
        ),
    ];
    for (path, body, want, code) in cases {
        let (st, p) = post(&d.addr, path, body);
        assert_eq!(st, want, "{path}: {p}");
        if !code.is_empty() {
            assert_eq!(p["code"], code, "{path}: {p}");
            assert_eq!(p["status"], want);
        }
    }
    let (st, ct, b) = http(&d.addr, "POST", "/api/actors/spawn", Some("{not json"));
    assert_eq!((st, ct.as_str()), (400, "application/problem+json"));
    assert!(b.contains("INVALID_ARGUMENT"));
    let (st, _, b) = http(&d.addr, "GET", "/api/actors/views/nope", None);
    assert_eq!(st, 400, "{b}");
    // Wait graph over HTTP: an enforced wait blocks the model call.
    post(
        &d.addr,
        "/api/actors/nodes/disambig-boundary/resolve",
        json!({"candidates": ["continue"]}),
    );
    post(
        &d.addr,
        "/api/actors/spawn",
        json!({"parent": "coordinator", "type": "task", "id": "release"}),
    );
    post(
        &d.addr,
        "/api/actors/nodes/release/wait",
        json!({"on": "docs-sync", "mode": "enforce"}),
    );
    let (st, _, b) = http(&d.addr, "GET", "/api/actors/nodes/release/model", None);
    assert_eq!(st, 409, "{b}");
    assert!(b.contains("WAIT_BLOCKED"));
    let mut disk = read_disk(&r);
    disk.leftovers.retain(|l| !l.ends_with(".weft-tmp-spare"));
    assert!(
        lineage_problems(&disk).is_empty(),
        "{:?}",
        lineage_problems(&disk)
    );

    // The standalone desk only answers its own origin on a loopback Host, and writes must be
    // JSON (so a cross-site form or no-cors fetch cannot reach them).
    let spawn = r#"{"parent": "coordinator", "id": "csrf"}"#;
    let a = d.addr.clone();
    let (st, _, b) = raw(
        &a,
        "POST",
        "/api/actors/spawn",
        Some(spawn),
        "host: evil.example\r\ncontent-type: application/json\r\n",
    );
    assert_eq!(st, 403, "{b}");
    assert!(b.contains("UNTRUSTED_HOST"));
    let (st, _, b) = raw(
        &a,
        "POST",
        "/api/actors/spawn",
        Some(spawn),
        &format!("host: {a}\r\norigin: http://evil.example\r\ncontent-type: application/json\r\n"),
    );
    assert_eq!(st, 403, "{b}");
    assert!(b.contains("UNTRUSTED_ORIGIN"));
    let (st, _, b) = raw(
        &a,
        "POST",
        "/api/actors/spawn",
        Some(spawn),
        &format!("host: {a}\r\ncontent-type: text/plain\r\n"),
    );
    assert_eq!(st, 400, "{b}");
    let (st, _, _) = raw(
        &a,
        "POST",
        "/api/actors/spawn",
        Some(spawn),
        &format!("host: {a}\r\norigin: http://{a}\r\ncontent-type: application/json\r\n"),
    );
    assert_eq!(st, 201, "the desk's own origin may write");
    assert!(read_disk(&r).metas.contains_key("csrf"));
}

#[test]
fn weft_serve_mounts_the_desk_beside_threaddesk() {
    let dir = scratch("serve-desk");
    let chat = dir.join("chat");
    let mut child = weft()
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.join("data"))
        .arg("--chat-root")
        .arg(&chat)
        .env("WEFT_HUMAN_TOKEN", "desk-human-token")
        .env("WEFT_AGENT_TOKEN", "desk-agent-token")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut addr = None;
    let mut desk_line = false;
    for _ in 0..12 {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if addr.is_none() {
            addr = line
                .split("http://")
                .nth(1)
                .and_then(|r| r.split('/').next())
                .map(str::to_owned);
        }
        desk_line |= line.contains("actor desk:");
        if line.contains("discovery:") {
            break;
        }
    }
    let addr = addr.expect("weft serve prints its URL");
    assert!(desk_line, "weft serve announces the desk");
    let d = Desk { child, addr };
    assert_eq!(http(&d.addr, "GET", "/actors/", None).0, 200);
    // Inside `weft serve` the desk API needs the human token (tests/serve_bounds.rs has the
    // whole rule); with it, the desk works as standalone.
    assert_eq!(http(&d.addr, "GET", "/api/actors/graph", None).0, 401);
    let human = format!(
        "host: {}\r\ncontent-type: application/json\r\nauthorization: Bearer desk-human-token\r\n",
        d.addr
    );
    let (st, _, g) = raw(&d.addr, "GET", "/api/actors/graph", None, &human);
    assert_eq!(st, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&g).unwrap()["root"],
        "coordinator"
    );
    assert_eq!(http(&d.addr, "GET", "/api/actors/store", None).0, 401);
    let (st, _, store) = raw(&d.addr, "GET", "/api/actors/store", None, &human);
    let store: Value = serde_json::from_str(&store).unwrap();
    assert_eq!(
        (st, &store["spareNodes"]["keep"]),
        (200, &json!(32)),
        "{store}"
    );
    let (st, _, s) = raw(
        &d.addr,
        "POST",
        "/api/actors/spawn",
        Some(&json!({"parent": "coordinator", "title": "served"}).to_string()),
        &human,
    );
    let s: Value = serde_json::from_str(&s).unwrap();
    assert_eq!((st, s["id"].as_str()), (201, Some("served")));
    assert!(read_disk(&chat).metas.contains_key("served"));
    // ThreadDesk is still there, and serve's own boundary guards the desk routes too.
    assert_eq!(http(&d.addr, "GET", "/.well-known/dgp", None).0, 200);
    let (st, _, _) = raw(
        &d.addr,
        "GET",
        "/api/actors/graph",
        None,
        "host: evil.example\r\n",
    );
    assert_eq!(st, 403);
}

#[test]
fn the_desk_refuses_a_non_loopback_address() {
    let dir = scratch("desk-public");
    let out = weft()
        .args([
            "actors",
            "desk",
            dir.join("chat").to_str().unwrap(),
            "--listen",
            "0.0.0.0:0",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stdout).contains("no authentication"));
    assert!(!dir.join("chat").exists(), "nothing was created");
}

/// What the store's spare node directories do, as the desk serves it (`GET
/// /api/actors/store`): all kept ready, one used by a spawn; then `.weft/` replaced by a file:
/// the spawn is refused, the spares it can no longer reach are dropped, and the thread that
/// makes them (which was waiting, all made) says it is failing, with its error. However often
/// it retries, the server logs the failure once.
#[test]
fn the_desk_serves_what_its_spare_node_directories_do() {
    let root = scratch("desk-spares");
    let r = root.join("chat");
    let mut d = desk_with(r.to_str().unwrap(), Stdio::piped());
    let stderr = d.child.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = BufReader::new(stderr).read_to_string(&mut s);
        s
    });
    let spares = |d: &Desk| {
        let v = get(&d.addr, "/api/actors/store");
        assert_eq!(v["kind"], "fs", "{v}");
        v["spareNodes"].clone()
    };
    // The thread runs on its own: its counters are waited for (a minute at most).
    let wait = |d: &Desk, what: &str, done: &dyn Fn(&Value) -> bool| {
        let until = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let st = spares(d);
            if done(&st) {
                return st;
            }
            assert!(std::time::Instant::now() < until, "{what}: {st}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let st = wait(&d, "all ready", &|st| st["ready"] == 32);
    assert_eq!(st["keep"], 32, "{st}");
    assert_eq!(
        (&st["used"], &st["errors"], &st["failing"], &st["lastError"]),
        (&json!(0), &json!(0), &json!(false), &Value::Null),
        "{st}"
    );
    let (code, v) = post(
        &d.addr,
        "/api/actors/spawn",
        json!({"parent": "coordinator", "type": "task", "title": "first"}),
    );
    assert_eq!(code, 201, "{v}");
    let st = spares(&d);
    assert_eq!((&st["keep"], &st["used"]), (&json!(32), &json!(1)), "{st}");
    // All made again (the thread waits): `.weft/` becomes a file.
    wait(&d, "all ready again", &|st| st["ready"] == 32);
    let weft = r.join(".weft");
    std::fs::remove_dir_all(&weft).unwrap();
    std::fs::write(&weft, "not a directory").unwrap();
    let (code, v) = post(
        &d.addr,
        "/api/actors/spawn",
        json!({"parent": "coordinator", "type": "task", "title": "second"}),
    );
    assert_eq!((code, &v["code"]), (500, &json!("STORE_IO")), "{v}");
    let st = wait(&d, "failing, retried", &|st| {
        st["failing"] == true && st["errors"].as_u64() >= Some(3)
    });
    let last = st["lastError"].as_str().unwrap_or_default();
    assert!(last.contains(".weft/ cannot be opened"), "{st}");
    assert_eq!(st["used"], 1, "{st}");
    // The 31 it had handed over are dropped; the one it held may have gone in after them.
    assert!(st["vanished"].as_u64() >= Some(31), "{st}");
    assert!(st["ready"].as_u64() <= Some(1), "{st}");
    drop(d);
    let log = log.join().unwrap();
    assert_eq!(
        log.matches("cannot make a spare node directory").count(),
        1,
        "one line for the run of failures: {log}"
    );
}
