//! Real-process crash tests of the native agents in `weft serve` (issue 11, "restart with
//! honest outcomes"): SIGKILL the server at every restart point of a task node's turn — before
//! the model answered, with a tool call started, with a Worker job running, with a job's note
//! queued as mail — restart it on the same root and check every outcome rule on the files
//! (`chat.jsonl`, `jobs.jsonl`): the turn is interrupted ("host restarted") and asked again only
//! when the next turn is admitted; a started call is `uncertain` (`host_restarted`); a running
//! job is `lost`; completed calls and delivered notes are neither repeated nor dropped (a queued
//! note is admitted exactly once, at the next turn); nothing is re-run (model requests are
//! counted at the scripted server, job starts in a file the worker writes); no worker process
//! outlives the killed server. Also: the `--job-tool` flag (a job's journal and note, an
//! interrupt cancels the job) and its refusals.

mod model_support;
mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use model_support::ModelServer;
use serde_json::{Value, json};
use support::{HUMAN, Server, TempDir, control, http};

/// The test worker: announces cancel acknowledgements, appends `start <pid>` to `starts.log`
/// beside itself for every run, posts `steps` progress events `ms` apart, then `done` — or
/// stays running when `hang` (it exits only when its stdin closes, as the shim does).
const WORKER: &str = r#"
import { appendFileSync } from 'node:fs';
const log = new URL('./starts.log', import.meta.url);
const cancelled = new Set();
self.postMessage({ type: 'hello', protocol: 'weft-worker/1', capabilities: { cancelAck: true, errorCode: true, input: false } });
self.onmessage = (e) => {
  const m = e.data;
  if (m.type === 'cancel') {
    cancelled.add(m.id);
    self.postMessage({ id: m.id, type: 'cancelled' });
    return;
  }
  if (m.type !== 'run') return;
  appendFileSync(log, `start ${process.pid}\n`);
  const { steps = 2, ms = 5, hang = false } = m.payload ?? {};
  let i = 0;
  const tick = () => {
    if (cancelled.has(m.id)) return;
    i += 1;
    self.postMessage({ id: m.id, type: 'progress', value: i / steps });
    if (i < steps) setTimeout(tick, ms);
    else if (!hang) self.postMessage({ id: m.id, type: 'done', value: { steps } });
  };
  setTimeout(tick, ms);
};
"#;

struct Case {
    _dir: TempDir,
    data: PathBuf,
    root: PathBuf,
    worker: PathBuf,
    m: ModelServer,
}

impl Case {
    fn new(tag: &str) -> Case {
        let dir = TempDir::new(tag);
        let worker = dir.0.join("worker.mjs");
        std::fs::write(&worker, WORKER).unwrap();
        Case {
            data: dir.0.join("data"),
            root: dir.0.join("data/chat"),
            worker,
            m: ModelServer::start(),
            _dir: dir,
        }
    }

    /// `weft serve` with the scripted model and the job tool `work`.
    fn serve(&self) -> Server {
        let tool = format!("work={}", self.worker.display());
        let base = self.m.base("openai");
        Server::start(
            &self.data,
            &[
                "--model",
                "openai:test-agent",
                "--base-url",
                &base,
                "--job-tool",
                &tool,
            ],
        )
    }

    fn script(&self, replies: Value) {
        control(
            &self.m.url,
            "POST",
            "/_script",
            Some(json!({ "replies": replies })),
        );
    }

    fn requests(&self) -> Vec<Value> {
        control(&self.m.url, "GET", "/_requests", None)
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    fn lines(&self) -> Vec<Value> {
        read_jsonl(&self.root.join("nodes/work/chat.jsonl"))
    }

    fn journal(&self) -> Vec<Value> {
        read_jsonl(&self.root.join("nodes/work/jobs.jsonl"))
    }

    /// The pids of the worker's runs (one line per job start).
    fn starts(&self) -> Vec<i32> {
        std::fs::read_to_string(self.worker.with_file_name("starts.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("start ")?.trim().parse().ok())
            .collect()
    }

    /// The task node `work` (under the coordinator), with nobody answering yet.
    fn task_node(&self, s: &Server) {
        let (st, r) = post(
            s,
            "/api/actors/spawn",
            json!({"parent": "coordinator", "type": "task", "id": "work", "title": "Work"}),
        );
        assert!(st == 200 || st == 201, "{st} {r}");
    }

    fn say(&self, s: &Server, text: &str) {
        let (st, r) = post(
            s,
            "/api/actors/nodes/work/messages",
            json!({ "text": text }),
        );
        assert_eq!(st, 200, "{r}");
    }

    /// The `turn_end` records of `work` on disk, in order.
    fn turn_ends(&self) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter(|l| l["agent"]["entry"] == "turn_end")
            .map(|l| l["agent"].clone())
            .collect()
    }
}

fn read_jsonl(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn post(s: &Server, path: &str, body: Value) -> (u16, Value) {
    let b = body.to_string();
    let a = http(
        &s.addr,
        "POST",
        path,
        &[
            ("authorization", &format!("Bearer {HUMAN}")),
            ("content-type", "application/json"),
        ],
        Some(b.as_bytes()),
    );
    (a.status, a.json())
}

/// Polls `f` until it returns `Some` (at most ~20 s).
fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let begun = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            begun.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn agent_entries<'a>(ls: &'a [Value], entry: &str) -> Vec<&'a Value> {
    ls.iter()
        .filter(|l| l["agent"]["entry"] == entry)
        .map(|l| &l["agent"])
        .collect()
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet: it runs no more).
fn dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

/// The last user message of model request `i`.
fn last_user(reqs: &[Value], i: usize) -> String {
    let msgs = reqs[i]["body"]["messages"].as_array().unwrap();
    let u = msgs.iter().rev().find(|m| m["role"] == "user").unwrap();
    u["content"].as_str().unwrap_or_default().to_owned()
}

/// The whole text of model request `i` (system text and messages).
fn request_text(reqs: &[Value], i: usize) -> String {
    reqs[i]["body"]["messages"].to_string()
}

/// After the restart: the next turn says the previous one was interrupted (with its question,
/// when its first step never answered: `first`), and completes; nothing else was asked.
fn next_turn_completes(c: &Case, s: &Server, asked: usize, first: Option<&str>) -> Vec<Value> {
    c.say(s, "and now?");
    until("the next turn's end", || {
        (c.turn_ends().last()?["end"] == "completed").then_some(())
    });
    let reqs = c.requests();
    assert_eq!(reqs.len(), asked + 1, "one request for the next turn only");
    let text = last_user(&reqs, asked);
    if let Some(first) = first {
        assert!(text.starts_with(first), "{text}");
    }
    assert!(text.contains("host restarted"), "{text}");
    assert!(text.ends_with("and now?"), "{text}");
    reqs
}

#[cfg(unix)]
#[test]
fn killed_before_the_model_answered_the_turn_is_interrupted_and_asked_again_only_with_the_next_turn()
 {
    let c = Case::new("crash-before-answer");
    // The server takes the request and sends no byte of an answer.
    c.script(json!([{"raw": [], "hang": true}]));
    let s = c.serve();
    c.task_node(&s);
    c.say(&s, "first question");
    until("the model request", || {
        (c.requests().len() == 1).then_some(())
    });
    until("the turn's start on disk", || {
        (c.lines().last()?["agent"]["entry"] == "turn_start").then_some(())
    });
    s.kill();
    let before = c.lines();
    assert!(agent_entries(&before, "assistant").is_empty());

    c.script(json!([{"text": "Answered now."}]));
    let s = c.serve();
    let after = c.lines();
    assert_eq!(after.len(), before.len() + 1, "one recovery line");
    let end = &after.last().unwrap()["agent"];
    assert_eq!(end["end"], "interrupted");
    assert!(
        end["reason"].as_str().unwrap().contains("host restarted"),
        "{end}"
    );
    assert_eq!(c.requests().len(), 1, "not asked again by the restart");
    next_turn_completes(&c, &s, 1, Some("first question"));
    let ls = c.lines();
    let answers: Vec<&Value> = agent_entries(&ls, "assistant");
    assert_eq!(answers.len(), 1);
    assert!(c.starts().is_empty(), "no job was started");
}

#[cfg(unix)]
#[test]
fn killed_with_a_call_started_the_call_is_uncertain_and_never_run_again() {
    let c = Case::new("crash-call-started");
    // The task node drives ThreadDesk; the judge (the agents' model) never answers.
    c.script(json!([
        {"calls": [{"id": "t-1", "name": "dgp_run_surface", "arguments": {
            "surface_id": "thread-73", "max_steps": 1}}]},
        {"raw": [], "hang": true}
    ]));
    let s = c.serve();
    c.task_node(&s);
    c.say(&s, "drive thread-73");
    until("the judge's request", || {
        (c.requests().len() == 2).then_some(())
    });
    let before = c.lines();
    assert_eq!(agent_entries(&before, "assistant").len(), 1);
    assert!(agent_entries(&before, "tool_result").is_empty());
    s.kill();

    c.script(json!([{"text": "Checked the thread again."}]));
    let s = c.serve();
    let after = c.lines();
    let results = agent_entries(&after, "tool_result");
    assert_eq!(results.len(), 1, "{after:?}");
    let r = results[0];
    assert_eq!(
        (&r["tool"], &r["callId"], &r["status"], &r["evidence"]),
        (
            &json!("dgp_run_surface"),
            &json!("t-1"),
            &json!("uncertain"),
            &json!("host_restarted")
        ),
        "{r}"
    );
    let end = &after.last().unwrap()["agent"];
    assert_eq!(
        (&end["entry"], &end["end"]),
        (&json!("turn_end"), &json!("interrupted"))
    );
    assert!(end["reason"].as_str().unwrap().contains("host restarted"));
    assert_eq!(c.requests().len(), 2, "neither step nor call re-run");
    next_turn_completes(&c, &s, 2, None);
    let ls = c.lines();
    assert_eq!(agent_entries(&ls, "tool_result").len(), 1, "not repeated");
}

#[cfg(unix)]
#[test]
fn killed_with_a_job_running_the_job_is_lost_its_worker_dies_and_nothing_reruns() {
    let c = Case::new("crash-job-running");
    c.script(json!([
        {"calls": [{"id": "j-1", "name": "work", "arguments": {"steps": 2, "hang": true}}]},
        {"text": "The job runs in the background."}
    ]));
    let s = c.serve();
    c.task_node(&s);
    c.say(&s, "start the job");
    until("the turn's end", || {
        (c.turn_ends().last()?["end"] == "completed").then_some(())
    });
    let pid = until("the job's start", || c.starts().first().copied());
    until("the job's start in its journal", || {
        c.journal()
            .iter()
            .any(|e| e["type"] == "started")
            .then_some(())
    });
    let before = c.lines();
    let job = agent_entries(&before, "job")[0]["job"].as_u64().unwrap();
    let results = agent_entries(&before, "tool_result");
    assert_eq!(results.len(), 1);
    // The call settled with the hand-over (the core's rule for a call that started a job).
    assert_eq!(results[0]["status"], "succeeded", "{:?}", results[0]);
    assert_eq!(results[0]["value"]["job"], job);
    assert!(agent_entries(&before, "mail").is_empty());
    s.kill();
    // A SIGKILLed server reaps nothing: the worker stops by itself (its stdin closed).
    until("the orphaned worker to exit", || dead(pid).then_some(()));

    c.script(json!([{"text": "Noted: the job was lost."}]));
    let s = c.serve();
    let after = c.lines();
    let mail = agent_entries(&after, "mail");
    assert_eq!(mail.len(), 1, "{after:?}");
    let note = &mail[0]["note"];
    assert_eq!(
        (&note["job"], &note["outcome"], &note["evidence"]),
        (&json!(job), &json!("lost"), &json!("host_restarted")),
        "{note}"
    );
    // The turn had ended: no recovery of it; nothing re-run by the restart.
    assert_eq!(c.turn_ends().len(), 1);
    assert_eq!(c.requests().len(), 2);
    assert_eq!(c.starts().len(), 1, "the job was not started again");
    // The next turn admits the lost note, once.
    c.say(&s, "what happened?");
    until("the next turn's end", || {
        (c.turn_ends().len() == 2).then_some(())
    });
    let reqs = c.requests();
    assert_eq!(reqs.len(), 3);
    assert!(request_text(&reqs, 2).contains("lost"), "{}", reqs[2]);
    let ls = c.lines();
    let admitted: Vec<&Value> = agent_entries(&ls, "turn_start")
        .iter()
        .flat_map(|t| t["admitted"].as_array().cloned().unwrap_or_default())
        .filter(|s| *s == mail[0]["seq"])
        .map(|_| &mail[0]["seq"])
        .collect();
    assert_eq!(admitted.len(), 1, "admitted exactly once");
    assert_eq!(agent_entries(&ls, "tool_result").len(), 1);
    assert_eq!(c.starts().len(), 1);
}

#[cfg(unix)]
#[test]
fn killed_with_a_note_queued_the_note_is_admitted_once_at_the_next_turn() {
    let c = Case::new("crash-note-queued");
    c.script(json!([
        {"calls": [{"id": "j-1", "name": "work", "arguments": {"steps": 3, "ms": 5}}]},
        {"raw": [], "hang": true}
    ]));
    let s = c.serve();
    c.task_node(&s);
    c.say(&s, "run the job");
    // The job finished and its note is mail on disk while the turn's next step stalls.
    let seq = until("the job's note", || {
        agent_entries(&c.lines(), "mail")
            .first()
            .map(|m| m["seq"].clone())
    });
    until("the stalled step", || {
        (c.requests().len() == 2).then_some(())
    });
    let before = c.lines();
    let note = agent_entries(&before, "mail")[0]["note"].clone();
    assert_eq!(note["outcome"], "succeeded", "{note}");
    // Its journal: the milestones and the last progress before the outcome.
    let journal = c.journal();
    let kinds: Vec<&str> = journal.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(kinds.first(), Some(&"submitted"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"outcome"), "{kinds:?}");
    assert!(kinds.contains(&"progress"), "{kinds:?}");
    s.kill();

    c.script(json!([{"text": "The job succeeded."}, {"text": "Still fine."}]));
    let s = c.serve();
    let after = c.lines();
    assert_eq!(
        agent_entries(&after, "mail").len(),
        1,
        "a delivered note is not dropped nor repeated"
    );
    assert_eq!(c.turn_ends().last().unwrap()["end"], "interrupted");
    assert_eq!(c.requests().len(), 2);
    assert_eq!(c.journal(), journal, "the job's journal stays as it was");
    let reqs = next_turn_completes(&c, &s, 2, None);
    // The note is in that turn's input, once.
    let said = format!("job {} succeeded", note["job"]);
    assert_eq!(
        last_user(&reqs, 2).matches(&said).count(),
        1,
        "{}",
        last_user(&reqs, 2)
    );
    // A further turn does not admit it again.
    c.say(&s, "anything else?");
    until("the third turn's end", || {
        (c.turn_ends().len() == 3).then_some(())
    });
    let ls = c.lines();
    let admits: Vec<Vec<Value>> = agent_entries(&ls, "turn_start")
        .iter()
        .map(|t| t["admitted"].as_array().cloned().unwrap_or_default())
        .collect();
    assert_eq!(
        admits.iter().filter(|a| a.contains(&seq)).count(),
        1,
        "{admits:?}"
    );
    assert_eq!(
        admits.iter().position(|a| a.contains(&seq)),
        Some(1),
        "admitted at the turn after the restart: {admits:?}"
    );
    assert_eq!(agent_entries(&ls, "tool_result").len(), 1);
    assert_eq!(c.starts().len(), 1, "the job ran once");
    assert_eq!(c.requests().len(), 4);
}

#[cfg(unix)]
#[test]
fn an_interrupt_cancels_the_running_job_and_its_note_says_so() {
    let c = Case::new("job-cancel");
    c.script(json!([
        {"calls": [{"id": "j-1", "name": "work", "arguments": {"steps": 1, "hang": true}}]},
        {"raw": [], "hang": true}
    ]));
    let s = c.serve();
    c.task_node(&s);
    c.say(&s, "start and wait");
    until("the stalled step", || {
        (c.requests().len() == 2).then_some(())
    });
    until("the job's start", || c.starts().first().copied());
    let (st, r) = post(
        &s,
        "/api/actors/nodes/work/interrupt",
        json!({"reason": "stop"}),
    );
    assert_eq!(st, 200, "{r}");
    let note = until("the job's note", || {
        agent_entries(&c.lines(), "mail")
            .first()
            .map(|m| m["note"].clone())
    });
    assert_eq!(note["outcome"], "cancelled", "{note}");
    let kinds: Vec<String> = c
        .journal()
        .iter()
        .filter_map(|e| e["type"].as_str().map(str::to_owned))
        .collect();
    assert!(kinds.contains(&"cancel_requested".to_owned()), "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("outcome"));
    assert_eq!(c.turn_ends().last().unwrap()["end"], "interrupted");
    s.stop();
}

#[test]
fn a_bad_job_tool_is_refused_before_the_server_starts() {
    let dir = TempDir::new("job-tool-flag");
    for (spec, says) in [
        ("work".to_owned(), "NAME=PATH"),
        (
            "work=/no/such/worker.mjs".to_owned(),
            "no such worker script",
        ),
        (format!("spawn={}", dir.0.display()), "built-in tool"),
    ] {
        let out = std::process::Command::new(support::weft())
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.0.join("data"))
            .args(["--job-tool", &spec])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{spec}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{spec}: {err}");
    }
}
