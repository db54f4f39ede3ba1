//! `weft serve` under hostile load and at shutdown (issue 12, failures 3–6 and 10): idle and
//! slowloris connections are closed and never lock out a new client; SIGTERM and SIGINT drain
//! and exit 0 while a desk event stream is open, keeping every served frame and releasing the
//! chat root; the desk inside `weft serve` needs the human token; every refusal is
//! problem+json (two `Host` headers, a path that is not UTF-8, oversized or duplicate-key desk
//! bodies, chunked DGP bodies).

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

/// Writes `raw` on a fresh connection and reads the whole answer (the server closes it).
fn raw(addr: &str, raw: &[u8]) -> Answer {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(raw).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no answer: {:?}", String::from_utf8_lossy(&out)));
    let head = String::from_utf8_lossy(&out[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: out[split + 4..].to_vec(),
    }
}

fn problem(a: &Answer) -> (u16, String) {
    assert_eq!(
        a.header("content-type"),
        Some("application/problem+json"),
        "{} {}",
        a.status,
        String::from_utf8_lossy(&a.body)
    );
    (a.status, a.code())
}

/// Whether the server closed `s` (EOF or reset) without ever answering on it.
fn closed_unanswered(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut buf = [0u8; 256];
    match s.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => matches!(
            e.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
        ),
    }
}

#[test]
fn idle_and_slowloris_connections_are_closed_and_a_new_client_is_served() {
    let dir = TempDir::new("hygiene");
    let server = Server::start(
        &dir.0,
        &[
            "--max-connections",
            "32",
            "--header-read-timeout-ms",
            "300",
            "--idle-timeout-ms",
            "600",
        ],
    );
    // A request whose body stalls after 10 of its 100 bytes: closed once nothing moves.
    let mut stalled = TcpStream::connect(&server.addr).unwrap();
    write!(
        stalled,
        "POST /dgp/assessments HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {AGENT}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"dgp\":\"0.",
        server.addr
    )
    .unwrap();
    // 300 idle sockets: connected, never a byte.
    let mut idle: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(&server.addr).unwrap())
        .collect();
    // 20 slowloris clients: a request head trickled one byte at a time, never finished.
    let trickle: Vec<_> = (0..20)
        .map(|_| {
            let addr = server.addr.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(&addr).unwrap();
                let head = format!("GET /.well-known/dgp HTTP/1.1\r\nHost: {addr}\r\nX-Slow: ");
                if s.write_all(head.as_bytes()).is_err() {
                    return true;
                }
                // At most 2,000 bytes (20 s at this pace); the server must cut it off first.
                for _ in 0..2000 {
                    std::thread::sleep(Duration::from_millis(10));
                    if s.write_all(b"a").is_err() {
                        break;
                    }
                }
                closed_unanswered(&mut s)
            })
        })
        .collect();
    // A keep-alive client that made one request and then went quiet.
    let mut kept = TcpStream::connect(&server.addr).unwrap();
    write!(
        kept,
        "GET /.well-known/dgp HTTP/1.1\r\nHost: {}\r\n\r\n",
        server.addr
    )
    .unwrap();

    // A new client is served although 320 connections were opened before it (10x the cap).
    let a = http(&server.addr, "GET", "/.well-known/dgp", &[], None);
    assert_eq!(a.status, 200);

    let closed = idle
        .iter_mut()
        .map(closed_unanswered)
        .filter(|c| *c)
        .count();
    assert_eq!(closed, 300, "every idle connection is closed by the server");
    let cut = trickle
        .into_iter()
        .map(|t| t.join().unwrap())
        .filter(|c| *c)
        .count();
    assert_eq!(cut, 20, "every slowloris connection is closed unanswered");
    // The kept-alive connection got its answer, then was closed for idling.
    kept.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut got = Vec::new();
    let _ = kept.read_to_end(&mut got);
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    assert!(
        closed_unanswered(&mut stalled),
        "a stalled request body is cut off"
    );
    // And the server still serves.
    assert_eq!(
        http(&server.addr, "GET", "/.well-known/dgp", &[], None).status,
        200
    );
}

/// `weft serve` started under a descriptor limit of `nofile` (through the shell's `ulimit`).
fn start_limited(data: &Path, nofile: u32, extra: &[&str]) -> Server {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n {nofile} && exec \"$0\" \"$@\""))
        .arg(weft())
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data)
        .args(extra)
        .env("WEFT_HUMAN_TOKEN", HUMAN)
        .env("WEFT_AGENT_TOKEN", AGENT)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let base = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in `{line}`"))
        .trim_end_matches('/')
        .to_owned();
    std::thread::spawn(move || {
        let mut sink = String::new();
        let _ = out.read_to_string(&mut sink);
    });
    let addr = base.trim_start_matches("http://").to_owned();
    Server { child, base, addr }
}

#[test]
fn under_a_descriptor_limit_of_128_idle_sockets_do_not_starve_new_clients_or_the_store() {
    let dir = TempDir::new("nofile");
    // The default connection cap (512) is lowered to what 128 descriptors leave room for.
    let server = start_limited(&dir.0, 128, &["--header-read-timeout-ms", "300"]);
    let mut idle: Vec<TcpStream> = (0..200)
        .map(|_| TcpStream::connect(&server.addr).unwrap())
        .collect();
    let d = Dgp::new(&server);
    // A new client is served, and so is a request that needs the store.
    assert_eq!(d.get("/.well-known/dgp", AGENT).status, 200);
    let f = d.frame("thread-42", AGENT);
    let id = f["frame_id"].as_str().unwrap();
    assert_eq!(d.get(&format!("/dgp/frames/{id}"), AGENT).status, 200);
    let closed = idle
        .iter_mut()
        .map(closed_unanswered)
        .filter(|c| *c)
        .count();
    assert_eq!(closed, 200);
    d.validate();
}

/// The lines of an SSE stream, read on a thread: `(events seen, ended)`.
fn sse(addr: &str, token: &str) -> std::sync::mpsc::Receiver<Option<String>> {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /api/actors/events HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(s);
        loop {
            let mut line = String::new();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(None);
                    return;
                }
                Ok(_) => {
                    if tx.send(Some(line)).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}

fn start_with_desk(data: &Path, chat: &Path) -> Server {
    Server::start(data, &["--chat-root", chat.to_str().unwrap()])
}

#[test]
fn sigterm_and_sigint_drain_with_an_open_event_stream_and_keep_every_served_frame() {
    let dir = TempDir::new("drain");
    let (data, chat) = (dir.0.join("data"), dir.0.join("chat"));
    let mut served: Vec<String> = Vec::new();
    for signal in ["TERM", "INT"] {
        let server = start_with_desk(&data, &chat);
        let d = Dgp::new(&server);
        // Every frame served before this one is still there after the previous stop.
        for id in &served {
            let a = d.get(&format!("/dgp/frames/{id}"), AGENT);
            assert_eq!(a.status, 200, "frame {id} served before SIG{signal}'s run");
        }
        let events = sse(&server.addr, HUMAN);
        let first = events
            .recv_timeout(Duration::from_secs(30))
            .unwrap()
            .unwrap();
        assert!(first.starts_with("HTTP/1.1 200"), "{first}");
        while let Some(l) = events.recv_timeout(Duration::from_secs(30)).unwrap() {
            if l.starts_with("data:") {
                break;
            }
        }
        for i in 0..40 {
            let surface = ["thread-42", "thread-73"][i % 2];
            let f = d.frame(surface, AGENT);
            served.push(f["frame_id"].as_str().unwrap().to_owned());
        }
        let pid = server.child.id().to_string();
        assert!(
            Command::new("kill")
                .args([&format!("-{signal}"), &pid])
                .status()
                .unwrap()
                .success()
        );
        let mut server = server;
        let begun = Instant::now();
        let status = loop {
            if let Some(st) = server.child.try_wait().unwrap() {
                break st;
            }
            assert!(
                begun.elapsed() < Duration::from_secs(30),
                "weft serve still runs after SIG{signal}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(0), "SIG{signal} is a clean stop");
        // The event stream was ended by the server.
        let mut ended = false;
        while let Ok(l) = events.recv_timeout(Duration::from_secs(30)) {
            if l.is_none() {
                ended = true;
                break;
            }
        }
        assert!(ended, "the event stream ends on SIG{signal}");
    }
    // The chat root's lock and the database were released: a new server opens both and still
    // has every frame.
    let server = start_with_desk(&data, &chat);
    let d = Dgp::new(&server);
    assert_eq!(served.len(), 80);
    for id in &served {
        assert_eq!(d.get(&format!("/dgp/frames/{id}"), AGENT).status, 200);
    }
    let g = http(
        &server.addr,
        "GET",
        "/api/actors/graph",
        &[("Authorization", &format!("Bearer {HUMAN}"))],
        None,
    );
    assert_eq!(g.status, 200);
    d.validate();
}

#[test]
fn the_desk_inside_weft_serve_needs_the_human_token() {
    let dir = TempDir::new("desk-auth");
    let chat = dir.0.join("chat");
    let human = format!("Bearer {HUMAN}");
    let agent = format!("Bearer {AGENT}");
    let spawn = |addr: &str, auth: Option<&str>, id: &str| {
        let body = json!({"parent": "coordinator", "id": id, "title": id}).to_string();
        let mut h = vec![("Content-Type", "application/json")];
        if let Some(a) = auth {
            h.push(("Authorization", a));
        }
        http(addr, "POST", "/api/actors/spawn", &h, Some(body.as_bytes()))
    };
    {
        let server = Server::start(&dir.0.join("a"), &["--chat-root", chat.to_str().unwrap()]);
        let addr = server.addr.as_str();
        // The page itself is public: it asks for the token.
        let page = http(addr, "GET", "/actors/", &[], None);
        assert_eq!(page.status, 200);
        assert!(String::from_utf8_lossy(&page.body).contains("id=\"token\""));
        let get = |auth: Option<&str>| {
            let h: Vec<(&str, &str)> = auth.map(|a| ("Authorization", a)).into_iter().collect();
            http(addr, "GET", "/api/actors/graph", &h, None)
        };
        assert_eq!(problem(&get(None)), (401, "UNAUTHENTICATED".into()));
        assert_eq!(
            problem(&get(Some("Bearer wrong-token-xyz"))),
            (401, "UNAUTHENTICATED".into())
        );
        assert_eq!(problem(&get(Some(&agent))), (403, "FORBIDDEN".into()));
        assert_eq!(get(Some(&human)).status, 200);
        let ev = http(addr, "GET", "/api/actors/events", &[], None);
        assert_eq!(problem(&ev), (401, "UNAUTHENTICATED".into()));
        assert_eq!(
            problem(&spawn(addr, None, "anon")),
            (401, "UNAUTHENTICATED".into())
        );
        assert_eq!(
            problem(&spawn(addr, Some(&agent), "robot")),
            (403, "FORBIDDEN".into())
        );
        assert_eq!(spawn(addr, Some(&human), "person").status, 201);
        server.stop();
    }
    // Reads opened explicitly: writes still need the human token.
    let server = Server::start(
        &dir.0.join("b"),
        &[
            "--chat-root",
            chat.to_str().unwrap(),
            "--desk-reads-without-token",
        ],
    );
    let addr = server.addr.as_str();
    let g = http(addr, "GET", "/api/actors/graph", &[], None);
    assert_eq!(g.status, 200);
    let nodes = g.json()["nodes"].as_array().unwrap().clone();
    let ids: Vec<&str> = nodes.iter().filter_map(|n| n["id"].as_str()).collect();
    assert!(ids.contains(&"person"), "{ids:?}");
    assert!(!ids.contains(&"anon") && !ids.contains(&"robot"), "{ids:?}");
    assert_eq!(
        problem(&spawn(addr, None, "anon")),
        (401, "UNAUTHENTICATED".into())
    );
    assert_eq!(spawn(addr, Some(&human), "person-2").status, 201);
}

#[test]
fn every_refusal_is_problem_json() {
    let dir = TempDir::new("refusals");
    let chat = dir.0.join("chat");
    let server = Server::start(
        &dir.0.join("data"),
        &["--chat-root", chat.to_str().unwrap()],
    );
    let addr = server.addr.as_str();
    let auth = format!("Authorization: Bearer {HUMAN}\r\n");

    // Exactly one Host header.
    let a = raw(
        addr,
        format!("GET /.well-known/dgp HTTP/1.1\r\nHost: {addr}\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    );
    assert_eq!(problem(&a), (400, "INVALID_REQUEST".into()));
    let a = raw(
        addr,
        b"GET /.well-known/dgp HTTP/1.1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(problem(&a), (400, "INVALID_REQUEST".into()));

    // A path that is not UTF-8 once decoded, on DGP and desk routes.
    for path in ["/dgp/frames/%FF%FE", "/api/actors/nodes/%C3%28"] {
        let a = raw(
            addr,
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n")
                .as_bytes(),
        );
        assert_eq!(problem(&a), (400, "INVALID_REQUEST".into()), "{path}");
    }

    // Desk bodies: over 2 MiB, duplicate keys.
    let big = format!("{{\"text\": \"{}\"}}", "x".repeat(2 * 1024 * 1024 + 10));
    let a = http(
        addr,
        "POST",
        "/api/actors/nodes/coordinator/messages",
        &[
            ("Content-Type", "application/json"),
            ("Authorization", &format!("Bearer {HUMAN}")),
        ],
        Some(big.as_bytes()),
    );
    assert_eq!(problem(&a), (413, "PAYLOAD_TOO_LARGE".into()));
    let a = http(
        addr,
        "POST",
        "/api/actors/spawn",
        &[
            ("Content-Type", "application/json"),
            ("Authorization", &format!("Bearer {HUMAN}")),
        ],
        Some(br#"{"parent":"coordinator","title":"a","title":"b"}"#),
    );
    assert_eq!(problem(&a), (400, "INVALID_ARGUMENT".into()));
    assert!(String::from_utf8_lossy(&a.body).contains("duplicate key"));
    let g: Value = http(
        addr,
        "GET",
        "/api/actors/graph",
        &[("Authorization", &format!("Bearer {HUMAN}"))],
        None,
    )
    .json();
    assert_eq!(
        g["nodes"].as_array().unwrap().len(),
        1,
        "nothing was spawned"
    );
    // Node ids refuse bidi overrides, NUL and C1 controls with the core's code.
    for id in ["abc\u{202e}txt", "nul\u{0}", "c1\u{9b}x", "iso\u{2067}late"] {
        let body = json!({"parent": "coordinator", "id": id, "title": "spoof"}).to_string();
        let a = http(
            addr,
            "POST",
            "/api/actors/spawn",
            &[
                ("Content-Type", "application/json"),
                ("Authorization", &format!("Bearer {HUMAN}")),
            ],
            Some(body.as_bytes()),
        );
        assert_eq!(problem(&a), (400, "INVALID_NODE_ID".into()), "{id:?}");
    }

    // DGP bodies as the reference server answers them: chunked → 400 INVALID_TRANSFER,
    // empty → 413; unknown routes and methods → 404 (401 first without a token).
    let a = raw(
        addr,
        format!("POST /dgp/assessments HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {AGENT}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\n{{}}\r\n0\r\n\r\n")
            .as_bytes(),
    );
    assert_eq!(problem(&a), (400, "INVALID_TRANSFER".into()));
    let a = http(
        addr,
        "POST",
        "/dgp/assessments",
        &[
            ("Content-Type", "application/json"),
            ("Authorization", &format!("Bearer {AGENT}")),
        ],
        Some(b""),
    );
    assert_eq!(problem(&a), (413, "PAYLOAD_TOO_LARGE".into()));
    let a = http(addr, "GET", "/dgp/nowhere", &[], None);
    assert_eq!(problem(&a), (401, "UNAUTHENTICATED".into()));
    let a = http(
        addr,
        "DELETE",
        "/dgp/commits",
        &[("Authorization", &format!("Bearer {AGENT}"))],
        None,
    );
    assert_eq!(problem(&a), (404, "NOT_FOUND".into()));
}
