//! Test support: a real `weft serve` process on a free loopback port, a minimal HTTP/1.1
//! client, and a recorder that validates every DGP record the tests see against
//! `../shared/fixtures/dgp/dgp.schema.json` (with Python's `jsonschema`, installed by
//! tests/setup.sh).

#![allow(dead_code)]

pub mod pg;
pub use pg::Databases;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};

pub const HUMAN: &str = "human-token-for-tests";
pub const AGENT: &str = "agent-token-for-tests";
pub const PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mP8/x8AAwMCAO+/l6cAAAAASUVORK5CYII=";

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn schema() -> PathBuf {
    repo().join("../shared/fixtures/dgp/dgp.schema.json")
}

pub fn weft() -> &'static str {
    env!("CARGO_BIN_EXE_weft")
}

/// A fresh temporary directory (removed on drop).
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let n: u64 = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let p = std::env::temp_dir().join(format!("weft-test-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A control call to the scripted model server (`tests/model-server/server.mjs`) at
/// `base_url`: `/_script`, `/_requests`, `/_reset`. Panics unless it answers 2xx.
pub fn control(base_url: &str, method: &str, path: &str, body: Option<Value>) -> Value {
    let body = body.map(|b| b.to_string());
    let a = http(
        base_url.trim_start_matches("http://"),
        method,
        path,
        &[("content-type", "application/json")],
        body.as_deref().map(str::as_bytes),
    );
    assert!(a.status < 300, "{method} {path}: {}", a.status);
    a.json()
}

/// A running `weft serve`.
pub struct Server {
    pub child: Child,
    pub base: String,
    pub addr: String,
}

impl Server {
    pub fn start(data: &Path, extra: &[&str]) -> Server {
        let mut cmd = Command::new(weft());
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data)
            .args(extra);
        // `WEFT_TEST_STORE=postgres`: the same checks against PostgreSQL (one database per
        // data directory, so a restart reopens it).
        if std::env::var("WEFT_TEST_STORE").as_deref() == Ok("postgres")
            && !extra.contains(&"--store")
        {
            cmd.arg("--store").arg(pg::required().database_for(data));
        }
        let mut child = cmd
            .env("WEFT_HUMAN_TOKEN", HUMAN)
            .env("WEFT_AGENT_TOKEN", AGENT)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("weft serve starts");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let base = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in `{line}`"))
            .trim_end_matches('/')
            .to_owned();
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sink = String::new();
            let _ = out.read_to_string(&mut sink);
        });
        let addr = base.trim_start_matches("http://").to_owned();
        Server { child, base, addr }
    }

    /// Crash: SIGKILL, no chance to flush anything beyond what was acknowledged.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Graceful stop: SIGINT (Ctrl-C) to this child's pid.
    pub fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn code(&self) -> String {
        self.json()["code"].as_str().unwrap_or("").to_owned()
    }
}

/// One HTTP/1.1 request (connection closed after it).
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Answer {
    try_http(addr, method, path, headers, body).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// [`http`], with a failed connection (a killed server) as an error instead of a panic.
pub fn try_http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> std::io::Result<Answer> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or_default();
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no full HTTP answer"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut rest = raw[split + 4..].to_vec();
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| {
            l.split_once(':')
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect();
    if headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"))
    {
        rest = dechunk(&rest);
    }
    Ok(Answer {
        status,
        headers,
        body: rest,
    })
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(p) = b.windows(2).position(|w| w == b"\r\n") {
        let n = usize::from_str_radix(String::from_utf8_lossy(&b[..p]).trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.extend_from_slice(&b[p + 2..p + 2 + n]);
        b = &b[p + 2 + n + 2..];
    }
    out
}

/// A DGP client for tests: every answer's JSON is recorded with the schema definition it must
/// satisfy, and `validate` checks them all.
pub struct Dgp {
    pub addr: String,
    pub records: Mutex<Vec<(String, Value)>>,
}

fn def_for(method: &str, path: &str, status: u16) -> Option<&'static str> {
    if status >= 400 {
        return Some("Problem");
    }
    let p = path.split('?').next().unwrap_or(path);
    Some(match (method, p) {
        ("GET", "/.well-known/dgp") => "Manifest",
        ("GET", p) if p.starts_with("/dgp/surfaces/") && p.ends_with("/frame") => "Frame",
        ("GET", p) if p.starts_with("/dgp/frames/") => "Frame",
        ("GET", p) if p.starts_with("/dgp/assessments/") => "Assessment",
        ("POST", "/dgp/assessments") => "Assessment",
        ("POST", "/dgp/commits") => "Receipt",
        ("GET", p) if p.starts_with("/dgp/receipts/") => "Receipt",
        ("GET", p) if p.starts_with("/dgp/graphs/") => "Graph",
        _ => return None,
    })
}

impl Dgp {
    pub fn new(server: &Server) -> Dgp {
        Dgp {
            addr: server.addr.clone(),
            records: Mutex::new(vec![]),
        }
    }

    pub fn record(&self, def: &str, v: Value) {
        self.records.lock().unwrap().push((def.to_owned(), v));
    }

    pub fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
        key: Option<&str>,
    ) -> Answer {
        let auth = token.map(|t| format!("Bearer {t}"));
        let mut headers: Vec<(&str, &str)> = vec![("Accept", "application/json")];
        if let Some(a) = &auth {
            headers.push(("Authorization", a));
        }
        if body.is_some() {
            headers.push(("Content-Type", "application/json"));
        }
        if let Some(k) = key {
            headers.push(("Idempotency-Key", k));
        }
        let bytes = body.map(|b| serde_json::to_vec(b).unwrap());
        let a = http(&self.addr, method, path, &headers, bytes.as_deref());
        if a.status >= 400 {
            assert_eq!(
                a.header("content-type"),
                Some("application/problem+json"),
                "{path}: problems are problem+json"
            );
        }
        if let Some(def) = def_for(method, path, a.status)
            && a.header("content-type").is_some_and(|c| c.contains("json"))
        {
            self.record(def, a.json());
        }
        if path.starts_with("/dgp/graphs") || path.starts_with("/dgp/services") {
            let v = a.json();
            for s in v["services"].as_array().into_iter().flatten() {
                self.record("Service", s.clone());
            }
        }
        a
    }

    pub fn get(&self, path: &str, token: &str) -> Answer {
        self.call("GET", path, Some(token), None, None)
    }

    pub fn frame(&self, surface: &str, token: &str) -> Value {
        let a = self.get(&format!("/dgp/surfaces/{surface}/frame"), token);
        assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
        a.json()
    }

    /// Records an assessment answering `node` of `frame`; returns the HTTP answer.
    pub fn assess(
        &self,
        frame: &Value,
        node: &str,
        answer: Value,
        token: &str,
        extra: Value,
    ) -> Answer {
        let fid = frame["frame_id"].as_str().unwrap();
        let mut body = json!({
            "dgp": "0.1", "assessment_id": format!("a-{}", unique()), "frame_id": fid,
            "decision_id": format!("{fid}:{node}"), "mode": "live",
            "resolver": {"kind": if token == HUMAN { "human" } else { "rule" }},
            "result": {"status": "answered", "answer": answer}
        });
        for (k, v) in extra.as_object().into_iter().flatten() {
            body[k] = v.clone();
        }
        self.call("POST", "/dgp/assessments", Some(token), Some(&body), None)
    }

    pub fn commit_of(&self, assessment: &Value, token: &str, key: &str) -> Answer {
        let body = json!({"dgp": "0.1", "frame_id": assessment["frame_id"], "decision_id": assessment["decision_id"],
                          "assessment_id": assessment["assessment_id"]});
        self.call("POST", "/dgp/commits", Some(token), Some(&body), Some(key))
    }

    /// Frame, assessment and commit in one go; returns the commit's answer.
    pub fn act(&self, surface: &str, node: &str, answer: Value, token: &str) -> Answer {
        let f = self.frame(surface, token);
        let a = self.assess(&f, node, answer, token, json!({}));
        assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
        self.commit_of(&a.json(), token, &format!("k-{}", unique()))
    }

    /// Validates every recorded record against the schema; panics with the failures.
    pub fn validate(&self) {
        validate_records(&self.records.lock().unwrap());
    }
}

pub fn validate_records(records: &[(String, Value)]) {
    assert!(!records.is_empty(), "nothing to validate");
    let dir = TempDir::new("records");
    let file = dir.0.join("records.jsonl");
    let mut text = String::new();
    for (def, v) in records {
        text.push_str(&json!({"def": def, "value": v}).to_string());
        text.push('\n');
    }
    std::fs::write(&file, text).unwrap();
    let out = Command::new("python3")
        .arg(repo().join("tests/dgp/validate_records.py"))
        .arg(schema())
        .arg(&file)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "records failed schema validation:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("{} passed, 0 failed", records.len())),
        "{stdout}"
    );
}

pub fn unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{t:x}{}", N.fetch_add(1, Ordering::SeqCst))
}

/// Runs `weft agent` to completion and returns its JSON-line events.
pub fn agent(server: &Server, args: &[&str]) -> Vec<Value> {
    let out = Command::new(weft())
        .args(["agent", "--base-url", &server.base])
        .args(args)
        .env("WEFT_AGENT_TOKEN", AGENT)
        .output()
        .expect("weft agent runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "weft agent failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The events of one surface.
pub fn events<'a>(all: &'a [Value], surface: &str) -> Vec<&'a Value> {
    all.iter().filter(|e| e["surface"] == surface).collect()
}

/// The kinds of a list of events.
pub fn kinds(evs: &[&Value]) -> Vec<String> {
    evs.iter()
        .map(|e| e["event"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// A one-route JSON HTTP service on a free loopback port (an external decision service for
/// `weft agent --adapter http`). Serves until the process ends.
pub fn json_service(handler: impl Fn(Value) -> Value + Send + Sync + 'static) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handler = std::sync::Arc::new(handler);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { continue };
            let handler = handler.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut len = 0usize;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if line == "\r\n" {
                        break;
                    }
                    if let Some((k, v)) = line.split_once(':')
                        && k.eq_ignore_ascii_case("content-length")
                    {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0u8; len];
                r.read_exact(&mut body).unwrap();
                let answer =
                    handler(serde_json::from_slice(&body).unwrap_or(Value::Null)).to_string();
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                    answer.len()
                );
            });
        }
    });
    addr
}
