//! `weft serve` over real HTTP: the shared smoke check, every failure the seed and the
//! specification list, restart persistence, racing commits. Every frame, assessment, receipt,
//! problem, manifest and graph the server emits here is validated against the schema.

mod support;

use std::process::Command;

use serde_json::{Value, json};
use support::*;

#[test]
fn the_shared_smoke_check_passes_against_weft_serve() {
    let dir = TempDir::new("smoke");
    let server = Server::start(&dir.0, &[]);
    let out = Command::new("python3")
        .arg(repo().join("../shared/checks/dgp_smoke.py"))
        .arg(&server.base)
        .arg(AGENT)
        .arg(schema())
        .output()
        .expect("python3 runs the smoke check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "smoke check failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.trim_end().ends_with("16 passed, 0 failed"),
        "{stdout}"
    );
}

#[test]
fn failures_are_problems_with_the_specified_codes_and_statuses() {
    let dir = TempDir::new("errors");
    let server = Server::start(&dir.0, &[]);
    let d = Dgp::new(&server);
    let m = d.call("GET", "/.well-known/dgp", None, None, None);
    assert_eq!(m.status, 200);
    assert_eq!(m.header("cache-control"), Some("no-store"));
    assert_eq!(m.json()["features"].as_array().unwrap().len(), 6);

    // Authentication.
    let a = d.call("GET", "/dgp/surfaces", None, None, None);
    assert_eq!((a.status, a.code().as_str()), (401, "UNAUTHENTICATED"));
    let a = d.call("GET", "/dgp/surfaces", Some("not-a-token"), None, None);
    assert_eq!((a.status, a.code().as_str()), (401, "UNAUTHENTICATED"));
    let a = d.get("/dgp/nowhere", AGENT);
    assert_eq!((a.status, a.code().as_str()), (404, "NOT_FOUND"));
    // A known route with another method is an unknown route, as in the reference server.
    let a = d.get("/dgp/commits", AGENT);
    assert_eq!((a.status, a.code().as_str()), (404, "NOT_FOUND"));
    let a = d.get("/dgp/surfaces/thread-99/frame", AGENT);
    assert_eq!((a.status, a.code().as_str()), (404, "NOT_FOUND"));
    let a = d.get("/dgp/surfaces/thread-42/frame?disclosure=magic", AGENT);
    assert_eq!((a.status, a.code().as_str()), (422, "INVALID_DISCLOSURE"));
    let a = d.get(
        "/dgp/surfaces/thread-42/frame?disclosure=horizon&horizon=99",
        AGENT,
    );
    assert_eq!((a.status, a.code().as_str()), (422, "INVALID_HORIZON"));

    // Host and Origin boundary.
    let a = http(
        &server.addr,
        "GET",
        "/dgp/surfaces",
        &[
            ("Host", "evil.example:80"),
            ("Authorization", &format!("Bearer {AGENT}")),
        ],
        None,
    );
    assert_eq!((a.status, a.code().as_str()), (403, "UNTRUSTED_HOST"));
    let a = http(
        &server.addr,
        "GET",
        "/dgp/surfaces",
        &[
            ("Origin", "https://evil.example"),
            ("Authorization", &format!("Bearer {AGENT}")),
        ],
        None,
    );
    assert_eq!((a.status, a.code().as_str()), (403, "UNTRUSTED_ORIGIN"));

    // Message handling.
    let f = d.frame("thread-42", AGENT);
    let auth = format!("Bearer {AGENT}");
    let post = |path: &str, ctype: &str, body: &[u8], key: Option<&str>| {
        let mut h = vec![("Authorization", auth.as_str()), ("Content-Type", ctype)];
        if let Some(k) = key {
            h.push(("Idempotency-Key", k));
        }
        let a = http(&server.addr, "POST", path, &h, Some(body));
        d.record("Problem", a.json());
        a
    };
    let a = post("/dgp/assessments", "text/plain", b"{}", None);
    assert_eq!(
        (a.status, a.code().as_str()),
        (415, "UNSUPPORTED_MEDIA_TYPE")
    );
    let a = post(
        "/dgp/assessments",
        "application/json",
        &vec![b' '; 600 * 1024],
        None,
    );
    assert_eq!((a.status, a.code().as_str()), (413, "PAYLOAD_TOO_LARGE"));
    let a = post(
        "/dgp/assessments",
        "application/json",
        br#"{"dgp":"0.1","dgp":"0.1"}"#,
        None,
    );
    assert_eq!((a.status, a.code().as_str()), (400, "INVALID_JSON"));
    let a = post(
        "/dgp/assessments",
        "application/json",
        br#"{"dgp":"0.1","x":NaN}"#,
        None,
    );
    assert_eq!((a.status, a.code().as_str()), (400, "INVALID_JSON"));
    let a = d.assess(
        &f,
        "recovery",
        json!({"choice": "delete_production", "input": {}}),
        AGENT,
        json!({}),
    );
    assert_eq!((a.status, a.code().as_str()), (422, "INVALID_CHOICE"));
    let a = d.assess(
        &f,
        "recovery",
        json!({"choice": "retry", "input": {}}),
        AGENT,
        json!({"force": true}),
    );
    assert_eq!((a.status, a.code().as_str()), (422, "INVALID_MESSAGE"));
    let a = d.assess(
        &f,
        "recovery",
        json!({"choice": "retry", "input": {}}),
        AGENT,
        json!({"required_features": ["telepathy@9"]}),
    );
    assert_eq!((a.status, a.code().as_str()), (406, "CAPABILITY_REQUIRED"));
    for text in [json!(""), json!("x".repeat(4001))] {
        let a = d.assess(
            &f,
            "note",
            json!({"value": {"text": text}}),
            AGENT,
            json!({}),
        );
        assert_eq!((a.status, a.code().as_str()), (422, "INVALID_INPUT"));
    }
    let a = d.assess(
        &f,
        "note",
        json!({"value": {"text": "ok", "role": "human"}}),
        AGENT,
        json!({}),
    );
    assert_eq!((a.status, a.code().as_str()), (422, "INVALID_INPUT"));

    // Commits.
    let rec = d
        .assess(
            &f,
            "recovery",
            json!({"choice": "retry", "input": {}}),
            AGENT,
            json!({}),
        )
        .json();
    let body = serde_json::to_vec(&json!({"dgp": "0.1", "frame_id": rec["frame_id"], "decision_id": rec["decision_id"], "assessment_id": rec["assessment_id"]})).unwrap();
    let a = post("/dgp/commits", "application/json", &body, None);
    assert_eq!(
        (a.status, a.code().as_str()),
        (400, "IDEMPOTENCY_KEY_REQUIRED")
    );
    let a = d.commit_of(&rec, HUMAN, "k-steal");
    assert_eq!(
        (a.status, a.code().as_str()),
        (403, "FORBIDDEN"),
        "another principal's assessment"
    );
    let spec = d
        .assess(
            &f,
            "recovery",
            json!({"choice": "retry", "input": {}}),
            AGENT,
            json!({"mode": "speculative"}),
        )
        .json();
    let a = d.commit_of(&spec, AGENT, "k-spec");
    assert_eq!((a.status, a.code().as_str()), (409, "SPECULATIVE_ONLY"));
    let abst = d.call("POST", "/dgp/assessments", Some(AGENT), Some(&json!({"dgp": "0.1", "assessment_id": format!("a-{}", unique()),
        "frame_id": f["frame_id"], "decision_id": rec["decision_id"], "mode": "live", "resolver": {"kind": "rule"},
        "result": {"status": "abstain", "reason": "not enough evidence"}})), None).json();
    let a = d.commit_of(&abst, AGENT, "k-abstain");
    assert_eq!((a.status, a.code().as_str()), (409, "ABSTAINED"));
    let a = d.commit_of(&rec, AGENT, "k-1");
    assert_eq!(a.status, 200);
    let receipt = a.json();
    assert_eq!(
        receipt["outcome"],
        "Simulated one CI retry; the fixture result is success. No tests were actually run."
    );
    let a = d.commit_of(&rec, AGENT, "k-1");
    assert_eq!(
        a.json(),
        receipt,
        "replay returns the same receipt once the frame is stale"
    );
    assert_eq!(
        d.get(
            &format!("/dgp/receipts/{}", receipt["receipt_id"].as_str().unwrap()),
            AGENT
        )
        .json(),
        receipt
    );
    assert_eq!(
        d.get(
            &format!(
                "/dgp/assessments/{}",
                rec["assessment_id"].as_str().unwrap()
            ),
            AGENT
        )
        .json(),
        rec
    );
    let stored = d
        .get(
            &format!("/dgp/frames/{}", f["frame_id"].as_str().unwrap()),
            AGENT,
        )
        .json();
    assert_eq!(stored, f, "frames are immutable");
    let f2 = d.frame("thread-42", AGENT);
    let other = d
        .assess(
            &f2,
            "update",
            json!({"choice": "finish", "input": {}}),
            AGENT,
            json!({}),
        )
        .json();
    let a = d.commit_of(&other, AGENT, "k-1");
    assert_eq!(
        (a.status, a.code().as_str()),
        (409, "IDEMPOTENCY_KEY_REUSED")
    );
    let dup = d.call("POST", "/dgp/assessments", Some(AGENT), Some(&json!({"dgp": "0.1", "assessment_id": other["assessment_id"],
        "frame_id": f2["frame_id"], "decision_id": other["decision_id"], "mode": "live", "resolver": {"kind": "rule"},
        "result": {"status": "answered", "answer": {"choice": "draft_update", "input": {}}}})), None);
    assert_eq!(
        (dup.status, dup.code().as_str()),
        (409, "ASSESSMENT_ID_REUSED")
    );

    // Policy: only a human may change it, and it makes earlier frames stale.
    let f3 = d.frame("thread-73", AGENT);
    let pending = d
        .assess(
            &f3,
            "recovery",
            json!({"choice": "pause", "input": {}}),
            AGENT,
            json!({}),
        )
        .json();
    let a = d.call(
        "POST",
        "/threaddesk/policy",
        Some(AGENT),
        Some(&json!({})),
        None,
    );
    assert_eq!((a.status, a.code().as_str()), (403, "FORBIDDEN"));
    let a = d.call(
        "POST",
        "/threaddesk/policy",
        Some(HUMAN),
        Some(&json!({})),
        None,
    );
    assert_eq!(a.json()["policy_ref"], "thread-policy@2");
    let a = d.commit_of(&pending, AGENT, "k-policy");
    assert_eq!((a.status, a.code().as_str()), (409, "STALE_FRAME"));
    assert_eq!(d.frame("thread-73", AGENT)["policy_ref"], "thread-policy@2");

    // Static graph and services.
    assert_eq!(
        d.get("/dgp/graphs", AGENT).json()["graphs"][0]["href"],
        "/dgp/graphs/thread-recovery"
    );
    assert_eq!(
        d.get("/dgp/graphs/thread-recovery", AGENT).json()["completeness"],
        "complete_template"
    );
    assert_eq!(
        d.get("/dgp/services", AGENT).json()["services"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let full = d
        .get("/dgp/surfaces/thread-73/frame?disclosure=full", AGENT)
        .json();
    assert_eq!(
        full["disclosure"]["preview"]["completeness"],
        "complete_template"
    );
    let horizon = d
        .get(
            "/dgp/surfaces/thread-73/frame?disclosure=horizon&horizon=2",
            AGENT,
        )
        .json();
    assert_eq!(horizon["disclosure"]["preview"]["horizon"], 2);
    let a = d.assess(
        &full,
        "review",
        json!({"choice": "publish", "input": {}}),
        HUMAN,
        json!({}),
    );
    assert_eq!(
        (a.status, a.code().as_str()),
        (422, "DECISION_NOT_OFFERED"),
        "previews never offer decisions"
    );
    d.validate();
}

#[test]
fn publication_is_human_only_whatever_the_payload_claims() {
    let dir = TempDir::new("publish");
    let server = Server::start(&dir.0, &[]);
    let d = Dgp::new(&server);
    assert_eq!(
        d.act(
            "thread-42",
            "recovery",
            json!({"choice": "retry", "input": {}}),
            AGENT
        )
        .status,
        200
    );
    assert_eq!(
        d.act(
            "thread-42",
            "update",
            json!({"choice": "draft_update", "input": {}}),
            AGENT
        )
        .status,
        200
    );
    assert_eq!(
        d.act(
            "thread-42",
            "draft_result",
            json!({"value": {"text": "Draft: the simulated retry passed."}}),
            AGENT
        )
        .status,
        200
    );
    let f = d.frame("thread-42", AGENT);
    let a = d
        .assess(
            &f,
            "review",
            json!({"choice": "publish", "input": {}}),
            AGENT,
            json!({"resolver": {"kind": "human", "provider": "totally-a-human"}}),
        )
        .json();
    let r = d.commit_of(&a, AGENT, "k-evil");
    assert_eq!(
        (r.status, r.code().as_str()),
        (403, "HUMAN_APPROVAL_REQUIRED")
    );
    assert_eq!(d.get("/dgp/bulletin", HUMAN).json()["entries"], json!([]));
    let r = d.act(
        "thread-42",
        "review",
        json!({"choice": "publish", "input": {}}),
        HUMAN,
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["submitted_by"], "human-local");
    let b = d.get("/dgp/bulletin", AGENT).json();
    assert_eq!(
        b["entries"][0]["text"],
        "Draft: the simulated retry passed."
    );
    d.validate();
}

#[test]
fn images_are_stored_verified_and_bounded() {
    let dir = TempDir::new("images");
    let server = Server::start(&dir.0, &[]);
    let d = Dgp::new(&server);
    let r = d.act(
        "thread-73",
        "attach_image",
        json!({"value": {"mime_type": "image/jpeg", "data_base64": PNG}}),
        HUMAN,
    );
    assert_eq!(
        (r.status, r.code().as_str()),
        (422, "INVALID_IMAGE"),
        "mislabelled"
    );
    let big = {
        let mut b = weft_core::frames::image::base64_decode(PNG).unwrap();
        b.resize(256 * 1024 + 1, 0);
        weft_core::frames::image::base64_encode(&b)
    };
    let r = d.act(
        "thread-73",
        "attach_image",
        json!({"value": {"mime_type": "image/png", "data_base64": big}}),
        HUMAN,
    );
    assert_eq!(
        (r.status, r.code().as_str()),
        (422, "INVALID_IMAGE"),
        "oversized"
    );
    assert_eq!(
        d.frame("thread-73", AGENT)["read_set"][0]["revision"],
        1,
        "refused images change nothing"
    );
    assert_eq!(
        d.act(
            "thread-73",
            "attach_image",
            json!({"value": {"mime_type": "image/png", "data_base64": PNG}}),
            HUMAN
        )
        .status,
        200
    );
    let f = d.frame("thread-73", AGENT);
    let img = f["observations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "image")
        .unwrap()
        .clone();
    assert_eq!(
        f["required_features"],
        json!(["core@0.1", "image-evidence@0.1"])
    );
    let blob = http(
        &server.addr,
        "GET",
        img["blob"]["href"].as_str().unwrap(),
        &[("Authorization", &format!("Bearer {AGENT}"))],
        None,
    );
    assert_eq!(blob.status, 200);
    assert_eq!(blob.header("content-type"), Some("image/png"));
    assert_eq!(
        blob.body.len() as u64,
        img["blob"]["byte_length"].as_u64().unwrap()
    );
    assert_eq!(
        weft_core::frames::validate::sha256_hex(&blob.body),
        img["blob"]["sha256"].as_str().unwrap()
    );
    let anon = http(
        &server.addr,
        "GET",
        img["blob"]["href"].as_str().unwrap(),
        &[],
        None,
    );
    assert_eq!(anon.status, 401);
    d.validate();
}

#[test]
fn an_expired_frame_cannot_be_committed() {
    let dir = TempDir::new("expiry");
    let server = Server::start(&dir.0, &["--frame-ttl-secs", "1"]);
    let d = Dgp::new(&server);
    let f = d.frame("thread-42", AGENT);
    let a = d
        .assess(
            &f,
            "recovery",
            json!({"choice": "retry", "input": {}}),
            AGENT,
            json!({}),
        )
        .json();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let r = d.commit_of(&a, AGENT, "k-late");
    assert_eq!((r.status, r.code().as_str()), (409, "FRAME_EXPIRED"));
    d.validate();
}

#[test]
fn state_receipts_and_dedup_records_survive_a_crash_and_a_restart() {
    let dir = TempDir::new("restart");
    let server = Server::start(&dir.0, &[]);
    let d = Dgp::new(&server);
    let f = d.frame("thread-42", AGENT);
    let a = d
        .assess(
            &f,
            "recovery",
            json!({"choice": "retry", "input": {}}),
            AGENT,
            json!({}),
        )
        .json();
    let receipt = d.commit_of(&a, AGENT, "k-persist").json();
    let note = d
        .act(
            "thread-73",
            "note",
            json!({"value": {"text": "persisted note ✓"}}),
            HUMAN,
        )
        .json();
    server.kill(); // SIGKILL: only acknowledged (fsynced) writes exist.

    let server = Server::start(&dir.0, &[]);
    let d = Dgp::new(&server);
    assert_eq!(
        d.commit_of(&a, AGENT, "k-persist").json(),
        receipt,
        "replay after a crash"
    );
    assert_eq!(
        d.get(
            &format!("/dgp/frames/{}", f["frame_id"].as_str().unwrap()),
            AGENT
        )
        .json(),
        f
    );
    let f42 = d.frame("thread-42", AGENT);
    assert_eq!(f42["read_set"][0]["revision"], 2);
    assert_eq!(f42["decisions"][0]["node_id"], "update");
    assert_eq!(
        d.get(
            &format!("/dgp/receipts/{}", note["receipt_id"].as_str().unwrap()),
            AGENT
        )
        .json(),
        note
    );
    let other = d
        .assess(
            &f42,
            "update",
            json!({"choice": "finish", "input": {}}),
            AGENT,
            json!({}),
        )
        .json();
    assert_eq!(
        d.commit_of(&other, AGENT, "k-persist").code(),
        "IDEMPOTENCY_KEY_REUSED"
    );
    server.stop(); // SIGINT: graceful.

    let server = Server::start(&dir.0, &[]);
    let d = Dgp::new(&server);
    assert_eq!(
        d.commit_of(&a, AGENT, "k-persist").json(),
        receipt,
        "replay after a graceful restart"
    );
    let f73 = d.frame("thread-73", AGENT);
    let notes: Vec<&Value> = f73["observations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["evidence_id"] == "note-0")
        .collect();
    assert_eq!(notes[0]["content"], "persisted note ✓");
    assert_ne!(f73["frame_id"], f["frame_id"]);
    d.validate();
}

#[test]
fn concurrent_conflicting_commits_exactly_one_succeeds() {
    const N: usize = 16;
    let dir = TempDir::new("race");
    let server = Server::start(&dir.0, &[]);
    let d = Dgp::new(&server);
    let f = d.frame("thread-42", AGENT);
    let choices = ["retry", "investigate", "request_reasoning", "pause"];
    let mut assessed = Vec::new();
    for i in 0..N {
        let answer = if i % 5 == 4 {
            json!({"value": {"text": format!("racing note {i}")}})
        } else {
            json!({"choice": choices[i % 4], "input": {}})
        };
        let node = if i % 5 == 4 { "note" } else { "recovery" };
        assessed.push(d.assess(&f, node, answer, AGENT, json!({})).json());
    }
    let g = d.frame("thread-73", AGENT);
    let unrelated = d
        .assess(
            &g,
            "recovery",
            json!({"choice": "pause", "input": {}}),
            AGENT,
            json!({}),
        )
        .json();
    let results: Vec<(u16, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = assessed
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let d = &d;
                s.spawn(move || {
                    let r = d.commit_of(a, AGENT, &format!("k-race-{i}"));
                    (
                        r.status,
                        r.json()["code"].as_str().unwrap_or("succeeded").to_owned(),
                    )
                })
            })
            .collect();
        let u = s.spawn(|| d.commit_of(&unrelated, AGENT, "k-unrelated").status);
        let r = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(
            u.join().unwrap(),
            200,
            "an unrelated surface is not invalidated"
        );
        r
    });
    let ok = results.iter().filter(|r| r.0 == 200).count();
    assert_eq!(ok, 1, "exactly one commit wins: {results:?}");
    assert!(
        results
            .iter()
            .filter(|r| r.0 != 200)
            .all(|r| *r == (409, "STALE_FRAME".to_owned())),
        "{results:?}"
    );
    assert_eq!(d.frame("thread-42", AGENT)["read_set"][0]["revision"], 2);
    d.validate();
}
