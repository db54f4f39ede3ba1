//! `weft serve --store postgres://…` with two instances on one database (a throwaway cluster
//! owned by this test process, `support::pg`): conflicting commits split across the
//! instances are decided once per round, idempotency keys hold across instances (a replay on
//! the other instance returns the identical receipt bytes), a policy change on one instance
//! makes the other's frames stale, and `kill -9` of one instance mid-burst loses no answered
//! commit while the other keeps serving. Each instance has its own `--data-dir` (the actor
//! desk's chat root is per instance).

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

/// The cluster, or `None` (the test says it skipped) when `WEFT_PG_OPTIONAL=1` and there are
/// no PostgreSQL binaries.
fn cluster() -> Option<&'static pg::Cluster> {
    pg::cluster()
}

fn instance(dir: &TempDir, store: &str, pool: &str) -> Server {
    Server::start(
        &dir.0,
        &[
            "--store",
            store,
            "--store-pool",
            pool,
            "--no-agents",
            "--extra-threads",
            "4",
        ],
    )
}

fn revision(d: &Dgp, surface: &str) -> u64 {
    d.frame(surface, AGENT)["read_set"][0]["revision"]
        .as_u64()
        .unwrap()
}

fn note(d: &Dgp, frame: &Value, text: &str) -> Value {
    let a = d.assess(
        frame,
        "note",
        json!({"value": {"text": text}}),
        AGENT,
        json!({}),
    );
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    a.json()
}

/// An open `GET /threaddesk/events` stream.
struct Events(BufReader<TcpStream>);

impl Events {
    fn open(addr: &str) -> Events {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(
            s,
            "GET /threaddesk/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {AGENT}\r\nAccept: text/event-stream\r\n\r\n"
        )
        .unwrap();
        let mut r = BufReader::new(s);
        let mut status = String::new();
        r.read_line(&mut status).unwrap();
        assert!(status.contains(" 200 "), "{status}");
        loop {
            let mut l = String::new();
            r.read_line(&mut l).unwrap();
            if l == "\r\n" {
                break;
            }
        }
        Events(r)
    }

    /// Reads events until `done` holds for the `(event, data)` pairs read so far.
    fn until(&mut self, done: impl Fn(&[(String, Value)]) -> bool) -> Vec<(String, Value)> {
        let (mut seen, mut name) = (Vec::new(), String::new());
        while !done(&seen) {
            let mut l = String::new();
            assert!(
                self.0.read_line(&mut l).unwrap() > 0,
                "the stream ended: {seen:?}"
            );
            let l = l.trim_end();
            if let Some(n) = l.strip_prefix("event: ") {
                name = n.to_owned();
            } else if let Some(d) = l.strip_prefix("data: ") {
                seen.push((name.clone(), serde_json::from_str(d).unwrap()));
            }
        }
        seen
    }
}

#[test]
fn two_instances_decide_each_conflict_once_and_share_idempotency_and_policy() {
    let Some(cl) = cluster() else { return };
    let store = cl.database("two_instances");
    let (da, db) = (TempDir::new("pg-a"), TempDir::new("pg-b"));
    // B with a pool of one connection: commits, frame writes, reads and the seeding never
    // wait on each other for connections.
    let (a, b) = (instance(&da, &store, "8"), instance(&db, &store, "1"));
    let clients = [Dgp::new(&a), Dgp::new(&b)];
    // Live streams on both instances: each sees every commit, whichever instance decided it.
    let mut streams = [Events::open(&a.addr), Events::open(&b.addr)];
    const ROUNDS: u64 = 5;
    const N: usize = 16;
    // (the instance that answered, the assessment, the key, the receipt's bytes)
    let mut winners: Vec<(usize, Value, String, Vec<u8>)> = Vec::new();
    for round in 0..ROUNDS {
        // Both instances read the same current revision (another instance's commit included).
        assert_eq!(revision(&clients[0], "thread-42"), round + 1);
        assert_eq!(revision(&clients[1], "thread-42"), round + 1);
        let f = clients[0].frame("thread-42", AGENT);
        let assessed: Vec<Value> = (0..N)
            .map(|i| note(&clients[i % 2], &f, &format!("round {round} note {i}")))
            .collect();
        let g = clients[1].frame("thread-73", AGENT);
        let unrelated = note(&clients[1], &g, &format!("unrelated {round}"));
        let results: Vec<(usize, u16, String, Vec<u8>)> = std::thread::scope(|s| {
            let handles: Vec<_> = assessed
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    let d = &clients[i % 2];
                    s.spawn(move || {
                        let r = d.commit_of(x, AGENT, &format!("k-{round}-{i}"));
                        let code = if r.status == 200 {
                            String::new()
                        } else {
                            r.code()
                        };
                        (i, r.status, code, r.body)
                    })
                })
                .collect();
            let u = s.spawn(|| clients[0].commit_of(&unrelated, AGENT, &format!("k-u-{round}")));
            let r = handles.into_iter().map(|h| h.join().unwrap()).collect();
            let u = u.join().unwrap();
            assert_eq!(
                u.status,
                200,
                "an unrelated surface is not invalidated: {}",
                String::from_utf8_lossy(&u.body)
            );
            r
        });
        let ok: Vec<&(usize, u16, String, Vec<u8>)> =
            results.iter().filter(|r| r.1 == 200).collect();
        assert_eq!(
            ok.len(),
            1,
            "round {round}: exactly one commit wins across both instances: {:?}",
            results.iter().map(|r| (r.0, r.1, &r.2)).collect::<Vec<_>>()
        );
        for r in results.iter().filter(|r| r.1 != 200) {
            assert_eq!((r.1, r.2.as_str()), (409, "STALE_FRAME"), "round {round}");
        }
        let (i, _, _, body) = ok[0];
        winners.push((
            i % 2,
            assessed[*i].clone(),
            format!("k-{round}-{i}"),
            body.clone(),
        ));
    }
    for d in &clients {
        assert_eq!(revision(d, "thread-42"), ROUNDS + 1);
        assert_eq!(revision(d, "thread-73"), ROUNDS + 1);
    }
    // Replays on the other instance: the identical receipt, byte for byte.
    let fresh = clients[0].frame("thread-42", AGENT);
    for (by, assessment, key, body) in &winners {
        let other = &clients[1 - by];
        let replay = other.commit_of(assessment, AGENT, key);
        assert_eq!(replay.status, 200);
        assert_eq!(
            &replay.body, body,
            "a replay on the other instance returns the identical receipt"
        );
        let receipt: Value = serde_json::from_slice(body).unwrap();
        let id = receipt["receipt_id"].as_str().unwrap();
        assert_eq!(
            other.get(&format!("/dgp/receipts/{id}"), AGENT).json(),
            receipt
        );
        // The same key with another body, on the instance that did not decide it.
        let x = note(other, &fresh, "another body");
        let reused = other.commit_of(&x, AGENT, key);
        assert_eq!(
            (reused.status, reused.code().as_str()),
            (409, "IDEMPOTENCY_KEY_REUSED")
        );
    }
    // The notes of both instances' winners are in one log, in order, on both.
    for d in &clients {
        let f = d.frame("thread-42", AGENT);
        let notes: Vec<&str> = f["observations"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| {
                e["evidence_id"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("note-"))
            })
            .filter_map(|e| e["content"].as_str())
            .collect();
        for round in 0..ROUNDS {
            assert!(
                notes
                    .iter()
                    .any(|n| n.starts_with(&format!("round {round} note"))),
                "round {round}'s winning note on both instances: {notes:?}"
            );
        }
    }
    for (n, st) in streams.iter_mut().enumerate() {
        let ids: Vec<String> = winners
            .iter()
            .map(|w| {
                serde_json::from_slice::<Value>(&w.3).unwrap()["receipt_id"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        let seen = st.until(|seen| {
            ids.iter().all(|id| {
                seen.iter()
                    .any(|(e, d)| e == "surface" && d["receipt_id"] == id.as_str())
            })
        });
        let mut on_42: Vec<u64> = seen
            .iter()
            .filter(|(e, d)| e == "surface" && d["surface"] == "thread-42")
            .map(|(_, d)| d["revision"].as_u64().unwrap())
            .collect();
        // Local commits and other instances' notices are two sources: order within each only.
        on_42.sort();
        assert_eq!(
            on_42,
            (2..=ROUNDS + 1).collect::<Vec<_>>(),
            "instance {n}: each of thread-42's commits, once"
        );
    }
    // One key sent to both instances at once, four times each: decided once (the advisory
    // lock on the key), every answer the same bytes, the surface one revision further.
    let f = clients[0].frame("thread-73", AGENT);
    let once = note(&clients[0], &f, "sent eight times");
    let answers: Vec<(u16, Vec<u8>)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|i| {
                let (d, once) = (&clients[i % 2], &once);
                s.spawn(move || {
                    let r = d.commit_of(once, AGENT, "k-everywhere");
                    (r.status, r.body)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(answers.iter().all(|a| a.0 == 200), "{answers:?}");
    assert!(answers.iter().all(|a| a.1 == answers[0].1));
    for d in &clients {
        assert_eq!(revision(d, "thread-73"), ROUNDS + 2);
    }
    // The decisions are in the database: one receipt per round and surface, plus the one
    // above (no SQLite file).
    let receipts = cl
        .psql(
            "two_instances",
            "SELECT count(*) FROM weft_records WHERE ns = 'dgp' AND kind = 'receipt'",
        )
        .unwrap();
    assert_eq!(receipts.trim(), (2 * ROUNDS + 1).to_string());
    for dir in [&da, &db] {
        assert!(!dir.0.join("weft.sqlite3").exists());
    }
    // A policy change on A makes B's frames stale, and B's next frame reads it.
    let fb = clients[1].frame("thread-73", AGENT);
    let pending = note(&clients[1], &fb, "before the policy change");
    let p = clients[0].call(
        "POST",
        "/threaddesk/policy",
        Some(HUMAN),
        Some(&json!({})),
        None,
    );
    assert_eq!(p.json()["policy_ref"], "thread-policy@2");
    streams[1].until(|seen| {
        seen.iter()
            .any(|(e, d)| e == "policy" && d["revision"] == 2)
    });
    let r = clients[1].commit_of(&pending, AGENT, "k-after-policy");
    assert_eq!((r.status, r.code().as_str()), (409, "STALE_FRAME"));
    assert_eq!(
        clients[1].frame("thread-73", AGENT)["policy_ref"],
        "thread-policy@2"
    );
    // The changing instance takes its own change in after COMMIT, and the other instance's
    // change decides on the locked row (2 -> 3, never a second 2).
    assert_eq!(
        clients[0].frame("thread-73", AGENT)["policy_ref"],
        "thread-policy@2"
    );
    let p = clients[1].call(
        "POST",
        "/threaddesk/policy",
        Some(HUMAN),
        Some(&json!({})),
        None,
    );
    assert_eq!(p.json()["policy_ref"], "thread-policy@3");
    assert_eq!(
        clients[1].frame("thread-73", AGENT)["policy_ref"],
        "thread-policy@3"
    );
    for d in &clients {
        d.validate();
    }
}

/// Frame, note assessment and commit on `addr` without panicking on a dead server: `None`
/// once the server is gone.
fn try_act(addr: &str, surface: &str, text: &str) -> Option<Answer> {
    let auth = format!("Bearer {AGENT}");
    let json_h = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    let f = try_http(
        addr,
        "GET",
        &format!("/dgp/surfaces/{surface}/frame"),
        &[("Authorization", &auth)],
        None,
    )
    .ok()?;
    assert_eq!(f.status, 200, "{}", String::from_utf8_lossy(&f.body));
    let f = f.json();
    let fid = f["frame_id"].as_str().unwrap();
    let aid = format!("a-{}", unique());
    let body = json!({"dgp": "0.1", "assessment_id": aid, "frame_id": fid,
        "decision_id": format!("{fid}:note"), "mode": "live", "resolver": {"kind": "rule"},
        "result": {"status": "answered", "answer": {"value": {"text": text}}}});
    let a = try_http(
        addr,
        "POST",
        "/dgp/assessments",
        &json_h,
        Some(&serde_json::to_vec(&body).unwrap()),
    )
    .ok()?;
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    let commit = json!({"dgp": "0.1", "frame_id": fid, "decision_id": format!("{fid}:note"),
        "assessment_id": aid});
    let key = format!("k-{}", unique());
    let mut h = json_h.to_vec();
    h.push(("Idempotency-Key", &key));
    try_http(
        addr,
        "POST",
        "/dgp/commits",
        &h,
        Some(&serde_json::to_vec(&commit).unwrap()),
    )
    .ok()
}

#[test]
fn kill_nine_of_one_instance_loses_no_answered_commit_and_the_other_keeps_serving() {
    let Some(cl) = cluster() else { return };
    let store = cl.database("kill_nine");
    let (da, db) = (TempDir::new("pg-ka"), TempDir::new("pg-kb"));
    let (a, b) = (instance(&da, &store, "8"), instance(&db, &store, "8"));
    let (addr_a, addr_b) = (a.addr.clone(), b.addr.clone());
    // Four writers on A (one surface each), one on B (another surface), all at once.
    let acked: Mutex<Vec<(String, String, Value)>> = Mutex::new(Vec::new());
    let (a_ok, b_after) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let (killed, stop) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|s| {
        for w in 0..4 {
            let (acked, a_ok, addr) = (&acked, &a_ok, &addr_a);
            s.spawn(move || {
                let surface = format!("thread-{}", 1000 + w);
                for n in 0..400 {
                    let text = format!("A writer {w} note {n}");
                    let Some(r) = try_act(addr, &surface, &text) else {
                        return; // A is gone
                    };
                    if r.status == 200 {
                        acked
                            .lock()
                            .unwrap()
                            .push((surface.clone(), text, r.json()));
                        a_ok.fetch_add(1, Ordering::SeqCst);
                    } else {
                        assert_eq!(
                            r.code(),
                            "STALE_FRAME",
                            "{}",
                            String::from_utf8_lossy(&r.body)
                        );
                    }
                }
            });
        }
        {
            let (b_after, killed, stop, addr) = (&b_after, &killed, &stop, &addr_b);
            s.spawn(move || {
                for n in 0..2000 {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let was_killed = killed.load(Ordering::SeqCst);
                    let r = try_act(addr, "thread-42", &format!("B note {n}"))
                        .expect("B keeps serving");
                    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
                    if was_killed {
                        b_after.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
        // Mid-burst: once A has answered a few commits, SIGKILL it (commits in flight then).
        let t0 = Instant::now();
        while a_ok.load(Ordering::SeqCst) < 8 {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "A answered too few commits"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        a.kill();
        killed.store(true, Ordering::SeqCst);
        let t1 = Instant::now();
        while b_after.load(Ordering::SeqCst) < 3 {
            assert!(
                t1.elapsed() < Duration::from_secs(30),
                "B stopped serving after A died"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::SeqCst);
    });
    let acked = acked.into_inner().unwrap();
    assert!(acked.len() >= 8);
    let d = Dgp::new(&b);
    // Every commit A answered is on B: its receipt, its note, the surface revision.
    for w in 0..4 {
        let surface = format!("thread-{}", 1000 + w);
        let mine: Vec<&(String, String, Value)> = acked.iter().filter(|x| x.0 == surface).collect();
        let f = d.frame(&surface, AGENT);
        assert!(
            f["read_set"][0]["revision"].as_u64().unwrap() > mine.len() as u64,
            "{surface}: {} answered commits",
            mine.len()
        );
        let contents: Vec<&str> = f["observations"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["content"].as_str())
            .collect();
        for (_, text, receipt) in &mine {
            assert!(contents.contains(&text.as_str()), "{text} is on B");
            let id = receipt["receipt_id"].as_str().unwrap();
            assert_eq!(
                &d.get(&format!("/dgp/receipts/{id}"), AGENT).json(),
                receipt
            );
        }
        // B takes over A's surfaces.
        let r = try_act(&b.addr, &surface, "after the crash").unwrap();
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }
    d.validate();
}
