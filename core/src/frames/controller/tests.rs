//! The controller's run machine against the frames engine as its server, in simulated time
//! (the `Pair` shape of quinn-proto's tests): every HTTP request the machine asks for is served
//! by an [`Engine`] over the conformance suite's scripted app, judgments and texts come from
//! the fixtures, and a test may lose answers, hold them, or ask for a stop at any point.

use crate::{Mono, Wall};
use serde_json::{Value, json};

use super::http::{BaseUrl, HttpAnswer, Problem};
use super::run::*;
use crate::frames::{
    Done, Engine, EngineConfig, FramesError, Principal, Role, ScriptedApp, fixtures,
};

fn app() -> ScriptedApp {
    let suite: Value =
        serde_json::from_str(include_str!("../../../../tests/vectors/frames.json")).unwrap();
    ScriptedApp::from_json(&suite["app"]).unwrap()
}

enum Pending {
    Http(HttpRequest),
    Judge(Box<JudgeRequest>),
    Generate(Box<JudgeRequest>),
}

/// A run and its server.
struct Pair {
    server: Engine<ScriptedApp>,
    run: Run,
    budget: ServiceBudget,
    /// Simulated time (ms).
    now: u64,
    pending: Option<Pending>,
    events: Vec<Value>,
    sent: Vec<HttpRequest>,
    report: Option<RunReport>,
    /// Commit answers to lose (the server applies the commit, the answer never arrives).
    lose_commit_answers: u32,
    /// Judgments to lose as adapter failures.
    failing_judge: bool,
}

/// The value of a server call: this in-memory server keeps no store, so its writes are
/// handed off and dropped.
fn served<T>(done: Done<T>) -> T {
    let (persist, pending) = done.split();
    let (_dropped, handed) = persist.hand_off();
    pending.release(handed)
}

impl Pair {
    fn new(surface: &str, options: RunOptions, budget: u32) -> Pair {
        let server = served(Engine::open(app(), EngineConfig::default(), vec![]).unwrap());
        let mut config = RunConfig::new(surface, [7; 32]);
        config.options = options;
        Pair {
            server,
            run: Run::new(config),
            budget: ServiceBudget::new(budget),
            now: 1_000,
            pending: None,
            events: vec![],
            sent: vec![],
            report: None,
            lose_commit_answers: 0,
            failing_judge: false,
        }
    }

    /// Drains the machine's outputs.
    fn drain(&mut self) {
        while let Some(out) = self.run.poll_output() {
            assert!(self.report.is_none(), "nothing follows Done");
            match out {
                Output::Event(e) => self.events.push(e.to_json()),
                Output::Done(r) => self.report = Some(r),
                Output::Http(r) => {
                    assert!(self.pending.is_none(), "one request at a time");
                    self.sent.push(r.clone());
                    self.pending = Some(Pending::Http(r));
                }
                Output::Judge(j) => self.pending = Some(Pending::Judge(j)),
                Output::Generate(j) => self.pending = Some(Pending::Generate(j)),
            }
        }
    }

    /// Serves one request like a DGP server (the engine), as an agent.
    fn serve(&mut self, r: &HttpRequest) -> HttpAnswer {
        let agent = Principal {
            id: "agent".into(),
            role: Role::Agent,
        };
        let body = r.body.as_deref().unwrap_or_default();
        let key = r.headers.iter().find(|(k, _)| k == "idempotency-key");
        let answer: Result<Vec<u8>, FramesError> = match (r.method, r.link.as_str()) {
            (Method::Get, link) => {
                let sid = link
                    .strip_prefix("/dgp/surfaces/")
                    .and_then(|l| l.strip_suffix("/frame"))
                    .unwrap();
                self.server
                    .frame_json(Wall::from_ms(self.now), sid, None, None)
                    .map(served)
            }
            (Method::Post, "/dgp/assessments") => self
                .server
                .assess_bytes(Wall::from_ms(self.now), &agent, body)
                .map(|d| serde_json::to_vec(&*served(d)).unwrap()),
            (Method::Post, "/dgp/commits") => self
                .server
                .commit_bytes(
                    Wall::from_ms(self.now),
                    &agent,
                    key.map(|(_, v)| v.as_str()),
                    body,
                )
                .map(|d| serde_json::to_vec(&*served(d)).unwrap()),
            other => panic!("unexpected request {other:?}"),
        };
        match answer {
            Ok(body) => HttpAnswer::Answered { status: 200, body },
            Err(e) => HttpAnswer::Answered {
                status: e.http_status(),
                body: serde_json::to_vec(&json!({"code": e.code(), "detail": e.to_string()}))
                    .unwrap(),
            },
        }
    }

    /// Delivers the outstanding input (or fires the due timer). False once the run is done.
    fn step(&mut self) -> bool {
        self.drain();
        if self.report.is_some() {
            return false;
        }
        let now = self.now;
        match self.pending.take() {
            Some(Pending::Http(r)) => {
                let mut answer = self.serve(&r);
                if r.link == "/dgp/commits" && self.lose_commit_answers > 0 {
                    self.lose_commit_answers -= 1;
                    answer = HttpAnswer::Failed("the connection was reset".into());
                }
                self.run
                    .handle_http(Mono::from_ms(now), r.id, answer, &mut self.budget);
            }
            Some(Pending::Judge(j)) => {
                let judged = if self.failing_judge {
                    Err(Problem::new(502, "MODEL_ERROR", "the model is down"))
                } else {
                    fixtures::judge(&j.frame, j.decision())
                        .map(|result| Judgment {
                            result,
                            resolver: fixtures::judge_resolver(),
                        })
                        .map_err(Problem::from)
                };
                self.run.handle_judgment(Mono::from_ms(now), judged);
            }
            Some(Pending::Generate(j)) => {
                let service = &j.decision().fulfillment.as_ref().unwrap().service_id;
                let text = fixtures::service_text(service);
                self.run.handle_text(
                    Mono::from_ms(now),
                    Ok((text.to_owned(), fixtures::text_resolver())),
                );
            }
            None => {
                let due = self
                    .run
                    .poll_timeout()
                    .expect("an input or a timer is pending");
                assert!(due > Mono::from_ms(self.now), "timers lie ahead");
                // Early: nothing happens.
                self.run.handle_timeout(due - 1);
                self.drain();
                assert!(self.pending.is_none());
                self.now = due.as_ms();
                self.run.handle_timeout(due);
            }
        }
        true
    }

    fn run_to_end(&mut self) -> RunReport {
        while self.step() {}
        self.report.clone().unwrap()
    }

    /// Steps until the pending request is a POST to `link`.
    fn until_post(&mut self, link: &str) {
        loop {
            self.drain();
            if matches!(&self.pending, Some(Pending::Http(r)) if r.link == link) {
                return;
            }
            assert!(self.step(), "the run ended before a POST to {link}");
        }
    }

    fn names(&self) -> Vec<&str> {
        self.events
            .iter()
            .map(|e| e["event"].as_str().unwrap())
            .collect()
    }
}

#[test]
fn a_run_reads_judges_fulfils_records_and_commits_until_the_server_refuses() {
    // The fixture judge asks for reasoning each time (`s1` is not thread-42): recovery →
    // request_reasoning, the analysis from the text service, again, until the server's own
    // service budget (3 per surface) refuses the next request_reasoning commit.
    let mut p = Pair::new("s1", RunOptions::default(), 10);
    let report = p.run_to_end();
    let json = report.to_json();
    assert_eq!(json["ended"], "stopped", "{json}");
    assert_eq!(json["stop"]["problem"]["code"], "BUDGET_EXHAUSTED");
    let n = |name: &str| p.names().iter().filter(|e| **e == name).count();
    assert_eq!((n("frame"), n("assessed"), n("service_text")), (7, 7, 3));
    assert_eq!((n("commit_intent"), n("committed")), (7, 6));
    assert_eq!(report.steps, 7);
    assert_eq!(p.budget.used(), 3);
    // Refused by the server: it did nothing, so nothing is in doubt.
    assert_eq!(json["commit_in_doubt"], Value::Null);
    assert_eq!(json["events"].as_array().unwrap().len(), p.events.len());
    assert_eq!(json["stop"], *p.events.last().unwrap());
    // Every write carries what the event log says; the ids come from the seed.
    let intent = p
        .events
        .iter()
        .find(|e| e["event"] == "commit_intent")
        .unwrap();
    assert_eq!(intent["idempotency_key"].as_str().unwrap().len(), 2 + 32);
    assert!(
        p.sent
            .iter()
            .filter(|r| r.write)
            .all(|r| r.method == Method::Post)
    );
    let first = &p
        .sent
        .iter()
        .find(|r| r.link == "/dgp/commits")
        .unwrap()
        .body;
    assert_eq!(
        serde_json::from_slice::<Value>(first.as_ref().unwrap()).unwrap(),
        intent["request"]
    );
}

#[test]
fn the_step_budget_ends_a_run() {
    let mut p = Pair::new(
        "s1",
        RunOptions {
            steps: 1,
            speculative: false,
        },
        3,
    );
    let report = p.run_to_end();
    assert_eq!(report.stop().name(), "step_budget_reached");
    assert_eq!((report.steps, report.receipts().len()), (1, 1));
    assert_eq!(p.sent.iter().filter(|r| r.method == Method::Get).count(), 1);
}

#[test]
fn an_exhausted_service_budget_stops_the_run_before_the_text_service_is_asked() {
    let mut p = Pair::new("s1", RunOptions::default(), 0);
    let report = p.run_to_end();
    let stop = report.stop().to_json();
    assert_eq!(stop["problem"]["code"], "CLIENT_BUDGET_EXHAUSTED", "{stop}");
    assert_eq!(stop["problem"]["status"], 409);
    assert!(!p.names().contains(&"service_text"));
    assert_eq!(
        report.receipts().len(),
        1,
        "request_reasoning was committed"
    );
    assert_eq!(report.commit_in_doubt(), None);
    // The budget is the controller's: a second run finds it spent as well.
    assert_eq!(p.budget.used(), 1);
}

#[test]
fn a_lost_commit_answer_is_retried_with_the_same_key_and_body_after_200_ms_times_attempt() {
    let mut p = Pair::new(
        "s1",
        RunOptions {
            steps: 1,
            speculative: false,
        },
        3,
    );
    p.lose_commit_answers = 2;
    p.until_post("/dgp/commits");
    let t0 = p.now;
    let report = p.run_to_end();
    assert_eq!(report.stop().name(), "step_budget_reached");
    let commits: Vec<&HttpRequest> = p.sent.iter().filter(|r| r.link == "/dgp/commits").collect();
    assert_eq!(commits.len(), 3);
    assert!(
        commits
            .windows(2)
            .all(|w| w[0].body == w[1].body && w[0].headers == w[1].headers)
    );
    assert_eq!(
        p.names().iter().filter(|e| **e == "commit_retry").count(),
        2
    );
    // Simulated time: 200 ms after the first attempt, 400 ms after the second.
    assert_eq!(p.now - t0, 200 + 400);
    // The replay answers with the receipt of the first, applied once.
    assert_eq!(report.receipts().len(), 1);
    assert_eq!(report.commit_in_doubt(), None);
}

#[test]
fn a_commit_without_any_answer_after_four_attempts_is_in_doubt() {
    let mut p = Pair::new("s1", RunOptions::default(), 3);
    p.lose_commit_answers = 4;
    p.until_post("/dgp/commits");
    let t0 = p.now;
    let report = p.run_to_end();
    let json = report.to_json();
    assert_eq!(json["ended"], "stopped");
    assert_eq!(json["stop"]["problem"]["code"], "TRANSPORT_ERROR");
    assert_eq!(json["stop"]["problem"].get("status"), None);
    assert_eq!(
        p.sent.iter().filter(|r| r.link == "/dgp/commits").count(),
        4
    );
    assert_eq!(p.now - t0, 200 + 400 + 600);
    let intent = report.commit_in_doubt().expect("in doubt").to_json();
    assert_eq!(intent["event"], "commit_intent");
    assert_eq!(json["commit_in_doubt"], intent);
    assert_eq!(json["commits"], json!([]));
}

#[test]
fn a_commit_the_server_refused_is_not_in_doubt() {
    let mut p = Pair::new("s1", RunOptions::default(), 3);
    p.until_post("/dgp/commits");
    // The policy changes under the run: the frame it judged is stale.
    let _ = p.server.bump_policy();
    let report = p.run_to_end();
    let stop = report.stop().to_json();
    assert_eq!(stop["problem"]["code"], "STALE_FRAME", "{stop}");
    assert_eq!(stop["problem"]["status"], 409);
    assert_eq!(report.commit_in_doubt(), None);
}

#[test]
fn a_stop_while_a_commit_is_in_flight_is_honoured_after_its_answer() {
    let mut p = Pair::new("s1", RunOptions::default(), 3);
    p.lose_commit_answers = 1;
    p.until_post("/dgp/commits");
    assert!(p.run.write_in_flight());
    p.run.handle_stop(Mono::from_ms(p.now));
    p.drain();
    assert!(
        p.report.is_none() && !p.run.is_done(),
        "the commit is carried on"
    );
    // The answer is lost: the retry timer still runs, the retry still goes out.
    let report = p.run_to_end();
    let json = report.to_json();
    assert_eq!(json["ended"], "interrupted");
    assert_eq!(json["stop"]["at"], "between_steps");
    assert_eq!(
        p.names()[p.names().len() - 4..],
        ["commit_intent", "commit_retry", "committed", "interrupted"]
    );
    assert_eq!(report.receipts().len(), 1);
    assert_eq!(report.steps, 1, "no new frame was read after the stop");
}

#[test]
fn a_stop_while_recording_stops_before_the_commit() {
    let mut p = Pair::new("s1", RunOptions::default(), 3);
    p.until_post("/dgp/assessments");
    p.run.handle_stop(Mono::from_ms(p.now));
    p.drain();
    assert!(p.report.is_none(), "the recording is carried on");
    let report = p.run_to_end();
    let stop = report.stop().to_json();
    assert_eq!(stop["at"], "before_commit");
    assert!(stop["assessment_id"].is_string());
    assert!(!p.names().contains(&"commit_intent"));
}

#[test]
fn a_stop_while_reading_or_judging_ends_the_run_at_once_and_late_answers_are_ignored() {
    let mut p = Pair::new("s1", RunOptions::default(), 3);
    p.drain();
    let Some(Pending::Http(read)) = p.pending.take() else {
        panic!("the run reads a frame first")
    };
    p.run.handle_stop(Mono::from_ms(p.now));
    p.drain();
    let report = p.report.clone().expect("done at once");
    assert_eq!(report.stop().to_json()["at"], "reading_frame");
    let answer = p.serve(&read);
    p.run
        .handle_http(Mono::from_ms(p.now), read.id, answer, &mut p.budget);
    assert!(
        p.run.poll_output().is_none(),
        "a late answer changes nothing"
    );

    let mut p = Pair::new("s1", RunOptions::default(), 3);
    p.step();
    p.drain();
    assert!(matches!(p.pending, Some(Pending::Judge(_))));
    p.run.handle_stop(Mono::from_ms(p.now));
    p.drain();
    assert_eq!(p.report.as_ref().unwrap().stop().to_json()["at"], "judging");
    assert!(!p.names().contains(&"assessed"));
    // A stop before the first step.
    let mut p = Pair::new("s1", RunOptions::default(), 3);
    p.run.handle_stop(Mono::from_ms(0));
    let report = p.run_to_end();
    assert_eq!(
        (report.stop().to_json()["at"].clone(), report.steps),
        (json!("between_steps"), 0)
    );
}

#[test]
fn an_adapter_failure_and_speculative_mode_end_the_run_without_a_commit() {
    let mut p = Pair::new("s1", RunOptions::default(), 3);
    p.failing_judge = true;
    let stop = p.run_to_end().stop().to_json();
    assert_eq!(
        (
            stop["problem"]["code"].clone(),
            stop["problem"]["status"].clone()
        ),
        (json!("MODEL_ERROR"), json!(502))
    );

    let mut p = Pair::new(
        "s1",
        RunOptions {
            steps: 8,
            speculative: true,
        },
        3,
    );
    let report = p.run_to_end();
    assert_eq!(report.stop().name(), "speculative_recorded");
    assert!(!p.names().contains(&"commit_intent"));
    assert_eq!(
        p.sent.iter().filter(|r| r.link == "/dgp/commits").count(),
        0
    );
}

#[test]
fn base_urls_https_anywhere_plain_http_to_loopback_unless_insisted() {
    assert!(BaseUrl::parse("https://dgp.example/prefix/", false).is_ok());
    for ok in [
        "http://127.0.0.1:8080",
        "http://localhost",
        "http://[::1]:9/x",
    ] {
        assert!(BaseUrl::parse(ok, false).is_ok(), "{ok}");
    }
    let e = BaseUrl::parse("http://dgp.example", false).unwrap_err();
    assert!(e.contains("refusing to send credentials"), "{e}");
    assert!(BaseUrl::parse("http://dgp.example", true).is_ok());
    for bad in [
        "ftp://x",
        "http://u@127.0.0.1",
        "http://127.0.0.1/?q",
        "https://",
        "dgp.example",
    ] {
        assert!(BaseUrl::parse(bad, true).is_err(), "{bad}");
    }
    let b = BaseUrl::parse("https://dgp.example:8443/api/", false).unwrap();
    assert_eq!(
        b.resolve("/dgp/surfaces").unwrap(),
        "https://dgp.example:8443/api/dgp/surfaces"
    );
    assert_eq!(
        b.resolve("https://dgp.example:8443/x").unwrap(),
        "https://dgp.example:8443/x"
    );
    for untrusted in [
        "//evil.example/x",
        "https://dgp.example:8443.evil/x",
        "http://dgp.example:8443/x",
        "https://evil.example/x",
    ] {
        let p = b.resolve(untrusted).unwrap_err();
        assert_eq!(
            (p.code.as_str(), p.status),
            ("UNTRUSTED_LINK", Some(0)),
            "{untrusted}"
        );
    }
}

#[test]
fn answers_are_values_problems_or_transport_failures() {
    use super::http::answer_json;
    let ok = answer_json(HttpAnswer::Answered {
        status: 200,
        body: b"{\"a\":1}".to_vec(),
    });
    assert_eq!(ok.unwrap(), json!({"a": 1}));
    let p = answer_json(HttpAnswer::Answered {
        status: 409,
        body: br#"{"code":"STALE_FRAME","detail":"d"}"#.to_vec(),
    })
    .unwrap_err();
    assert_eq!(
        p.to_json(),
        json!({"status": 409, "code": "STALE_FRAME", "detail": "d"})
    );
    let p = answer_json(HttpAnswer::Answered {
        status: 502,
        body: b"<html>".to_vec(),
    })
    .unwrap_err();
    assert_eq!(p.code, "HTTP_502");
    let p = answer_json(HttpAnswer::Answered {
        status: 200,
        body: b"<html>".to_vec(),
    })
    .unwrap_err();
    assert!(p.is_transport());
    assert!(
        answer_json(HttpAnswer::Failed("reset".into()))
            .unwrap_err()
            .is_transport()
    );
}
