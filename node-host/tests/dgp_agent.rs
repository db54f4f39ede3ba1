//! The seed's walkthroughs A–D end to end: `weft agent` (a separate process speaking only the
//! protocol) against `weft serve`. Everything the agent records and the server answers is
//! validated against the schema.

mod support;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};
use support::*;

fn state_of(d: &Dgp, surface: &str) -> String {
    let s = d.get("/dgp/surfaces", AGENT).json();
    s["surfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["surface_id"] == surface)
        .unwrap()["state"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Records the assessments and receipts an agent run reports, for schema validation.
fn record_agent(d: &Dgp, evs: &[Value]) {
    for e in evs {
        match e["event"].as_str() {
            Some("assessed") => d.record("AssessmentRequest", e["assessment"].clone()),
            Some("committed") => d.record("Receipt", e["receipt"].clone()),
            Some("commit_intent") => d.record("CommitRequest", e["request"].clone()),
            _ => {}
        }
    }
}

#[test]
fn walkthroughs_a_and_b_run_in_parallel_and_stop_for_the_human() {
    let dir = TempDir::new("agent-ab");
    let server = Server::start(&dir.0, &[]);
    let d = Dgp::new(&server);
    let evs = agent(&server, &["--parallel", "2"]);
    record_agent(&d, &evs);

    // A: retry, draft through the text service, then a stop at the human-only publication.
    let a = events(&evs, "thread-42");
    let commits: Vec<&Value> = a
        .iter()
        .filter(|e| e["event"] == "committed")
        .copied()
        .collect();
    assert_eq!(commits.len(), 3, "{:?}", kinds(&a));
    assert!(
        commits[0]["receipt"]["outcome"]
            .as_str()
            .unwrap()
            .contains("No tests were actually run")
    );
    assert_eq!(kinds(&a).last().unwrap(), "human_review_required");
    assert!(
        a.iter()
            .any(|e| e["event"] == "service_text" && e["service_id"] == "llm.generate_text")
    );
    assert_eq!(state_of(&d, "thread-42"), "review");
    assert_eq!(d.get("/dgp/bulletin", AGENT).json()["entries"], json!([]));

    // B: reasoning requested, derived analysis stored, judged again, then quiescent.
    let b = events(&evs, "thread-73");
    assert_eq!(kinds(&b).last().unwrap(), "quiescent", "{:?}", kinds(&b));
    assert_eq!(state_of(&d, "thread-73"), "investigating");
    let f = d.frame("thread-73", AGENT);
    let analysis = f["observations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["evidence_id"] == "analysis-0")
        .unwrap();
    assert_eq!(analysis["trust"], "derived");
    assert_eq!(analysis["source"]["kind"], "model");

    // The human refreshes, reads the draft and publishes it to the local bulletin.
    let f = d.frame("thread-42", HUMAN);
    let draft = f["observations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["evidence_id"] == "draft")
        .unwrap()["content"]
        .clone();
    assert!(draft.as_str().unwrap().starts_with("FIXTURE DRAFT"));
    let r = d.act(
        "thread-42",
        "review",
        json!({"choice": "publish", "input": {}}),
        HUMAN,
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        d.get("/dgp/bulletin", HUMAN).json()["entries"][0]["text"],
        draft
    );
    assert_eq!(state_of(&d, "thread-42"), "published");
    d.validate();
}

#[test]
fn walkthrough_c_a_note_from_another_tab_makes_the_agents_action_stale() {
    let dir = TempDir::new("agent-c");
    let server = Server::start(&dir.0, &[]);
    let d = std::sync::Arc::new(Dgp::new(&server));
    let noted = std::sync::Arc::new(AtomicBool::new(false));
    let seen = std::sync::Arc::new(Mutex::new(Vec::<Value>::new()));
    let (d2, noted2, seen2) = (d.clone(), noted.clone(), seen.clone());
    // An external decision service. While it judges thread-42 the first time, a human adds a
    // note in "another tab" (the same protocol operation the UI uses).
    let svc = json_service(move |req| {
        seen2.lock().unwrap().push(req.clone());
        let surface = req["surface_id"].as_str().unwrap_or_default().to_owned();
        if surface == "thread-42" && !noted2.swap(true, Ordering::SeqCst) {
            let r = d2.act("thread-42", "note", json!({"value": {"text": "Before another retry, check whether the DB migration finished."}}), HUMAN);
            assert_eq!(r.status, 200);
        }
        let choice = if surface == "thread-42" {
            "retry"
        } else {
            "pause"
        };
        json!({"result": {"status": "answered", "answer": {"choice": choice, "input": {}},
                          "uncertainty": {"semantics": "test service certainty", "provider_confidence": 0.9}},
               "resolver": {"kind": "decision_model", "provider": "test-service", "model": "judge-1"}})
    });
    let url = format!("http://{svc}/decide");
    let evs = agent(
        &server,
        &[
            "--adapter",
            "http",
            "--adapter-url",
            &url,
            "--surface",
            "thread-42",
            "--surface",
            "thread-73",
        ],
    );
    record_agent(&d, &evs);
    let a = events(&evs, "thread-42");
    let last = a.last().unwrap();
    assert_eq!(last["event"], "stopped", "{:?}", kinds(&a));
    assert_eq!(last["problem"]["code"], "STALE_FRAME");
    assert_eq!(
        state_of(&d, "thread-42"),
        "blocked",
        "the stale retry did nothing"
    );
    let b = events(&evs, "thread-73");
    assert!(
        b.iter().any(|e| e["event"] == "committed"),
        "the other thread is unaffected: {:?}",
        kinds(&b)
    );
    assert_eq!(state_of(&d, "thread-73"), "paused");
    let requests = seen.lock().unwrap();
    assert!(requests.iter().all(|r| {
        r["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["kind"] != "image")
    }));
    assert_eq!(requests[0]["decision"]["node_id"], "recovery");
    let f = d.frame("thread-42", AGENT);
    assert!(
        f["observations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["evidence_id"] == "note-0" && e["trust"] == "untrusted")
    );
    d.validate();
}

#[test]
fn walkthrough_d_a_text_only_adapter_stops_on_a_required_image() {
    let dir = TempDir::new("agent-d");
    let server = Server::start(&dir.0, &[]);
    let d = Dgp::new(&server);
    let r = d.act(
        "thread-73",
        "attach_image",
        json!({"value": {"mime_type": "image/png", "data_base64": PNG}}),
        HUMAN,
    );
    assert_eq!(r.status, 200);
    let evs = agent(&server, &["--surface", "thread-73"]);
    record_agent(&d, &evs);
    let last = evs.last().unwrap();
    assert_eq!(
        (last["event"].as_str(), last["problem"]["code"].as_str()),
        (Some("stopped"), Some("UNSUPPORTED_MODALITY"))
    );
    assert!(
        !evs.iter().any(|e| e["event"] == "assessed"),
        "nothing was judged without the image"
    );
    let f = d.frame("thread-73", AGENT);
    assert_eq!(f["read_set"][0]["revision"], 2, "the record is unchanged");
    assert!(
        f["observations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "image" && e["required"] == true)
    );

    // An image-capable adapter receives the image evidence itself and may judge.
    let svc = json_service(|req| {
        let has_image = req["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "image" && e["blob"]["byte_length"] == 68);
        let choice = if has_image { "pause" } else { "retry" };
        json!({"result": {"status": "answered", "answer": {"choice": choice, "input": {}}}, "resolver": {"kind": "decision_model", "model": "sees-pixels"}})
    });
    let evs = agent(
        &server,
        &[
            "--surface",
            "thread-73",
            "--adapter",
            "http",
            "--adapter-url",
            &format!("http://{svc}/"),
            "--adapter-modalities",
            "text,json,image",
        ],
    );
    record_agent(&d, &evs);
    assert!(evs.iter().any(|e| e["event"] == "committed"), "{evs:?}");
    assert_eq!(state_of(&d, "thread-73"), "paused");
    d.validate();
}

#[test]
fn speculative_mode_records_and_never_commits() {
    let dir = TempDir::new("agent-spec");
    let server = Server::start(&dir.0, &[]);
    let d = Dgp::new(&server);
    let evs = agent(&server, &["--speculative", "--surface", "thread-42"]);
    record_agent(&d, &evs);
    assert_eq!(evs.last().unwrap()["event"], "speculative_recorded");
    let assessed = evs.iter().find(|e| e["event"] == "assessed").unwrap();
    assert_eq!(assessed["assessment"]["mode"], "speculative");
    assert_eq!(state_of(&d, "thread-42"), "blocked");
    let r = d.commit_of(&assessed["assessment"], AGENT, "k-direct");
    assert_eq!((r.status, r.code().as_str()), (409, "SPECULATIVE_ONLY"));
    d.validate();
}
