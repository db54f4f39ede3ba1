//! What an agent on a node is shown, and what its lines say after a restart.
//!
//! [`build`] turns the node's recent `chat.jsonl` lines (within the context budget) back into
//! a transcript in the session's JSON form and adds a system text: the node, its mailbox, its
//! children's mailboxes (never their transcripts), its waits with the wait graph's warnings,
//! and the git close-out addendum. Mail is shown where a turn admitted it (not where it
//! arrived), a task where its turn started, and lines that arrived while calls were running
//! after those calls' results (both providers require results to follow their calls).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::{AGENT_FIELD, AgentConfig};
use crate::actors::closeout::system_addendum;
use crate::actors::{ActorGraph, ChatLine, GitCloseout, Role};
use crate::model::ChatRequest;
use crate::model::builtin::BuiltinModel;
use crate::tools::{ModelResponse, StepId, TurnId};

/// The request of one model step of an agent on a node.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelInput {
    pub node: String,
    pub turn: TurnId,
    pub step: StepId,
    /// Instructions and the node's context (mailboxes, waits, close-out addendum).
    pub system: String,
    /// The transcript rebuilt from the lines, in the session's JSON form.
    pub messages: Vec<Value>,
    /// The step's tool declarations (`ToolDecl::to_json`).
    pub tools: Vec<Value>,
    /// The wait graph's maybe-stale warnings (also in `system`).
    pub warnings: Vec<String>,
    /// The first and last chat line the slice covers (1-based; 0 when empty).
    pub lines: (u64, u64),
}

impl ModelInput {
    /// The provider-neutral chat request (encode it with `ChatRequest::body`).
    pub fn chat_request(&self) -> ChatRequest {
        ChatRequest::from_transcript(Some(&self.system), &self.messages, &self.tools)
    }

    /// The last user text of the slice.
    pub fn last_user_text(&self) -> Option<String> {
        self.messages
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["text"].as_str().map(str::to_owned))
    }

    /// What the built-in deterministic model answers (no model configured).
    pub fn builtin_answer(&self) -> ModelResponse {
        ModelResponse::text(BuiltinModel::answer(self.last_user_text().as_deref()))
    }

    /// The JSON form: `{node, turn, step, system, messages, tools, warnings, lines}`.
    pub fn to_json(&self) -> Value {
        json!({
            "node": self.node, "turn": self.turn.0, "step": self.step.0, "system": self.system,
            "messages": self.messages, "tools": self.tools, "warnings": self.warnings,
            "lines": [self.lines.0, self.lines.1],
        })
    }
}

fn agent_of(l: &ChatLine) -> Option<&Value> {
    l.extra.get(AGENT_FIELD).filter(|v| v.is_object())
}

fn kind(a: &Value) -> &str {
    a["entry"].as_str().unwrap_or("")
}

/// A call of an unfinished turn that has no result line.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct OpenCall {
    pub call_id: String,
    pub tool: String,
    pub step: u64,
    pub invocation: Option<u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct OpenTurn {
    pub turn: u64,
    pub unanswered_calls: Vec<OpenCall>,
}

/// What the agent lines of a node say, for a restart.
#[derive(Clone, Debug, Default)]
pub(crate) struct Scan {
    pub max_turn: u64,
    pub max_step: u64,
    pub max_invocation: u64,
    pub max_mail: u64,
    /// The last line taken as a task (or, with no turn yet, the last answered line).
    pub last_task_line: u64,
    pub open_turn: Option<OpenTurn>,
    pub open_jobs: Vec<(u64, String)>,
    pub pending_mail: Vec<u64>,
}

pub(crate) fn scan(graph: &ActorGraph, node: &str) -> Scan {
    let mut s = Scan::default();
    let mut admitted = BTreeSet::new();
    let mut mail = Vec::new();
    let mut jobs: BTreeMap<u64, String> = BTreeMap::new();
    let mut any_turn = false;
    let mut last_assistant = 0;
    for (i, e) in graph.chat(node).unwrap_or_default().iter().enumerate() {
        let Some(l) = e.ok() else { continue };
        let n = i as u64 + 1;
        if l.role == Role::Assistant {
            last_assistant = n;
        }
        let Some(a) = agent_of(l) else { continue };
        match kind(a) {
            "turn_start" => {
                any_turn = true;
                let t = a["turn"].as_u64().unwrap_or(0);
                s.max_turn = s.max_turn.max(t);
                if let Some(tl) = a["taskLine"].as_u64() {
                    s.last_task_line = s.last_task_line.max(tl);
                }
                for m in a["admitted"].as_array().into_iter().flatten() {
                    admitted.extend(m.as_u64());
                }
                s.open_turn = Some(OpenTurn {
                    turn: t,
                    unanswered_calls: Vec::new(),
                });
            }
            "assistant" => {
                s.max_step = s.max_step.max(a["step"].as_u64().unwrap_or(0));
                if let Some(t) = s.open_turn.as_mut() {
                    t.unanswered_calls = a["calls"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|c| OpenCall {
                            call_id: c["id"].as_str().unwrap_or("").to_owned(),
                            tool: c["name"].as_str().unwrap_or("").to_owned(),
                            step: a["step"].as_u64().unwrap_or(0),
                            invocation: None,
                        })
                        .collect();
                }
            }
            "tool_result" => {
                s.max_invocation = s.max_invocation.max(a["invocation"].as_u64().unwrap_or(0));
                if let Some(t) = s.open_turn.as_mut() {
                    let id = a["callId"].as_str().unwrap_or("");
                    t.unanswered_calls.retain(|c| c.call_id != id);
                }
            }
            "turn_end" => s.open_turn = None,
            "mail" => {
                let seq = a["seq"].as_u64().unwrap_or(0);
                s.max_mail = s.max_mail.max(seq);
                mail.push(seq);
                if let Some(j) = a["note"]["job"].as_u64() {
                    jobs.remove(&j);
                }
            }
            "job" => {
                if let Some(j) = a["job"].as_u64() {
                    jobs.insert(j, a["callId"].as_str().unwrap_or("").to_owned());
                }
            }
            _ => {}
        }
    }
    if !any_turn {
        s.last_task_line = last_assistant;
    }
    s.pending_mail = mail.into_iter().filter(|m| !admitted.contains(m)).collect();
    s.open_jobs = jobs.into_iter().collect();
    s
}

/// User lines after line `after` that no agent wrote: the node's pending tasks.
pub(crate) fn user_lines_after(graph: &ActorGraph, node: &str, after: u64) -> Vec<(u64, String)> {
    let chat = graph.chat(node).unwrap_or_default();
    chat.iter()
        .enumerate()
        .skip(after as usize)
        .filter_map(|(i, e)| {
            let l = e.ok()?;
            (l.role == Role::User && agent_of(l).is_none()).then(|| (i as u64 + 1, l.text.clone()))
        })
        .collect()
}

/// The nodes `node`'s next model step waits on: enforced subscriptions to non-terminal
/// mailboxes, and the disambiguation child that pauses it.
pub fn blocked_on(graph: &ActorGraph, node: &str) -> Vec<String> {
    let mut on: Vec<String> = graph
        .wait_checks(node)
        .map(|w| {
            w.into_iter()
                .filter(|c| c.outcome == "blocked")
                .map(|c| c.node)
                .collect()
        })
        .unwrap_or_default();
    if let Some(p) = graph.node(node).and_then(|n| n.routing_paused_by.as_ref()) {
        on.push(p.to_string());
    }
    on
}

/// What decides the last line taken (see [`build`]), noted from lines read from the end.
#[derive(Default)]
struct Taken {
    any_turn: bool,
    /// The latest task line of the turns noted.
    task_line: u64,
    /// The first assistant line noted (the last one, read from the end).
    last_assistant: u64,
}

impl Taken {
    /// Notes line `n`; returns its agent entry when it is a `turn_start`.
    fn note<'a>(&mut self, l: &'a ChatLine, n: u64) -> Option<&'a Value> {
        if l.role == Role::Assistant && self.last_assistant == 0 {
            self.last_assistant = n;
        }
        let a = agent_of(l).filter(|a| kind(a) == "turn_start")?;
        self.any_turn = true;
        if let Some(tl) = a["taskLine"].as_u64() {
            self.task_line = self.task_line.max(tl);
        }
        Some(a)
    }
}

/// What a message of the slice is, for the order results need (see [`build`]).
#[derive(Clone, Copy)]
enum Is {
    /// A call's result: it closes the call; lines deferred behind the open calls follow once
    /// none is open.
    ToolResult,
    /// A model answer: its calls are open until their results.
    Assistant,
    /// Anything else: deferred while calls are open.
    Other,
}

/// A message `{"role", "text"}` (built as a map: `json!` would serialize the text again).
fn message(role: &str, text: String) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("role".into(), Value::String(role.into()));
    m.insert("text".into(), Value::String(text));
    m
}

fn user(text: String) -> Value {
    Value::Object(message("user", text))
}

/// An answer `{"role": "assistant", "text", "calls"}`.
fn assistant(text: &str, calls: Value) -> Value {
    let mut m = message("assistant", text.to_owned());
    m.insert("calls".into(), calls);
    Value::Object(m)
}

/// Builds the model input of `node`'s step from its lines (see the module docs).
pub(crate) fn build(
    graph: &ActorGraph,
    node: &str,
    turn: TurnId,
    step: StepId,
    config: &AgentConfig,
    tools: Vec<Value>,
) -> ModelInput {
    let chat = graph.chat(node).unwrap_or_default();
    // The window: the most recent lines within the budget. On the way back, what its turns
    // name: the task lines they took (shown where the turn started, not where they are) and
    // the mail they admitted.
    let mut start = chat.len();
    let mut used = 0u64;
    let mut task_lines = BTreeSet::new();
    let mut admitted: BTreeSet<u64> = BTreeSet::new();
    let mut taken = Taken::default();
    while start > 0 && chat.len() - start < config.recent_lines {
        let line = chat[start - 1].ok();
        let t = line.map_or(1, |l| l.tokens.max(l.text.len().div_ceil(4) as u64).max(1));
        if used + t > config.context_tokens && start < chat.len() {
            break;
        }
        used += t;
        start -= 1;
        if let Some(a) = line.and_then(|l| taken.note(l, start as u64 + 1)) {
            task_lines.extend(a["taskLine"].as_u64());
            for m in a["admitted"].as_array().into_iter().flatten() {
                admitted.extend(m.as_u64());
            }
        }
    }
    // The last line taken: the latest task line of any turn (with no turn yet, the last
    // assistant line). A turn's task line comes before its `turn_start`, so the lines before
    // the window are read back only until none can name a later one (for a node that has
    // had turns, a line or two).
    for (i, e) in chat[..start].iter().enumerate().rev() {
        let n = i as u64 + 1;
        if taken.any_turn && n <= taken.task_line {
            break;
        }
        if let Some(l) = e.ok() {
            taken.note(l, n);
        }
    }
    let taken = if taken.any_turn {
        taken.task_line
    } else {
        taken.last_assistant
    };
    // The mail the window's turns admitted, by seq (the last line with it), wherever it is.
    let mut mail: BTreeMap<u64, &Value> = BTreeMap::new();
    for e in chat.iter().rev() {
        if mail.len() == admitted.len() {
            break;
        }
        if let Some(a) = e.ok().and_then(agent_of).filter(|a| kind(a) == "mail") {
            let seq = a["seq"].as_u64().unwrap_or(0);
            if admitted.contains(&seq) {
                mail.entry(seq).or_insert(a);
            }
        }
    }
    let mut out: Vec<Value> = Vec::new();
    let mut open: Vec<String> = Vec::new();
    let mut deferred: Vec<Value> = Vec::new();
    // Each message with what it is (known where it is built, not looked up in it again).
    let push = |m: Value,
                is: Is,
                out: &mut Vec<Value>,
                open: &mut Vec<String>,
                deferred: &mut Vec<Value>| match is {
        Is::ToolResult => {
            let id = m["callId"].as_str().unwrap_or("");
            open.retain(|c| c != id);
            out.push(m);
            if open.is_empty() {
                out.append(deferred);
            }
        }
        Is::Assistant => {
            out.append(deferred);
            *open = m["calls"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["id"].as_str().map(str::to_owned))
                .collect();
            out.push(m);
        }
        Is::Other if !open.is_empty() => deferred.push(m),
        Is::Other => out.push(m),
    };
    for (i, e) in chat.iter().enumerate().skip(start) {
        let Some(l) = e.ok() else { continue };
        let n = i as u64 + 1;
        let (msg, is) = match agent_of(l) {
            Some(a) => match kind(a) {
                "turn_start" => {
                    let admitted = a["admitted"].as_array().into_iter().flatten();
                    for s in admitted.filter_map(|s| s.as_u64().and_then(|s| mail.get(&s))) {
                        let mut m = (*s).clone();
                        m["role"] = json!("mail");
                        push(m, Is::Other, &mut out, &mut open, &mut deferred);
                    }
                    if let Some(tl) = a["taskLine"].as_u64()
                        && let Some(t) = chat.get(tl as usize - 1).and_then(|e| e.ok())
                    {
                        let m = user(t.text.clone());
                        push(m, Is::Other, &mut out, &mut open, &mut deferred);
                    }
                    continue;
                }
                "assistant" => (assistant(&l.text, a["calls"].clone()), Is::Assistant),
                "tool_result" => {
                    let mut m = a.clone();
                    m["role"] = json!("tool_result");
                    if l.role == Role::Routing && m.get("value").is_none() {
                        m["value"] = json!(l.text);
                    }
                    (m, Is::ToolResult)
                }
                "turn_end" => {
                    let mut m = a.clone();
                    m["role"] = json!("turn_end");
                    (m, Is::Other)
                }
                _ => continue,
            },
            None => match &l.role {
                Role::User if task_lines.contains(&n) || n > taken => continue,
                Role::User => match &l.from {
                    Some(f) => (user(format!("[from {f}] {}", l.text)), Is::Other),
                    None => (user(l.text.clone()), Is::Other),
                },
                Role::Assistant => (assistant(&l.text, json!([])), Is::Assistant),
                Role::Routing => (user(format!("[routing] {}", l.text)), Is::Other),
                Role::System => continue,
                r => (user(format!("[{r}] {}", l.text)), Is::Other),
            },
        };
        push(msg, is, &mut out, &mut open, &mut deferred);
    }
    out.append(&mut deferred);
    let (system, warnings) = system_text(graph, node);
    ModelInput {
        node: node.to_owned(),
        turn,
        step,
        system,
        messages: out,
        tools,
        warnings,
        lines: if start < chat.len() {
            (start as u64 + 1, chat.len() as u64)
        } else {
            (0, 0)
        },
    }
}

fn system_text(graph: &ActorGraph, node: &str) -> (String, Vec<String>) {
    let Some(n) = graph.node(node) else {
        return (String::new(), Vec::new());
    };
    let mut s = format!(
        "You are the agent of the {} node `{}` in an actor graph of bounded conversation contexts.",
        n.node_type, n.id
    );
    if !n.title.is_empty() {
        s.push_str(&format!(" Title: {}.", n.title));
    }
    if !n.topic.is_empty() {
        s.push_str(&format!(" Topic: {}.", n.topic));
    }
    if n.node_type.is_discussion_surface() {
        s.push_str(
            "\nThis node is a discussion surface: keep to the conversation with the person. \
             Delegate work by spawning task nodes (`spawn`); when the conversation drifts to a \
             new subject, spawn a discussion child; when you cannot tell whether new lines \
             continue this topic, spawn a disambiguation child. You read children's mailboxes \
             (below), never their transcripts.",
        );
    } else {
        s.push_str(
            "\nThis node is a task: do its work with your tools, and publish status and a short \
             summary with `set_status` (done when finished, failed when it cannot be done).",
        );
    }
    if let Some(mb) = graph.mailbox(node) {
        s.push_str(&format!("\nYour mailbox: {}: {}", mb.status, mb.summary));
    }
    if !n.spawned.is_empty() {
        s.push_str("\nChildren (mailboxes):");
        for c in &n.spawned {
            match (graph.node(c.as_str()), graph.mailbox(c.as_str())) {
                (Some(cn), Some(mb)) => s.push_str(&format!(
                    "\n- `{c}` ({}) {}: {}",
                    cn.node_type, mb.status, mb.summary
                )),
                (Some(cn), None) => {
                    s.push_str(&format!("\n- `{c}` ({}) {}", cn.node_type, cn.status))
                }
                _ => s.push_str(&format!("\n- `{c}` (not loaded)")),
            }
        }
    }
    let mut warnings = Vec::new();
    if let Ok(waits) = graph.wait_checks(node)
        && !waits.is_empty()
    {
        s.push_str("\nWaits:");
        for w in waits {
            s.push_str(&format!(
                "\n- `{}` ({}): {}",
                w.node, w.effective, w.message
            ));
            if w.outcome == "warn" {
                warnings.push(w.message.clone());
            }
        }
    }
    if !warnings.is_empty() {
        s.push_str("\nWarning: some mailboxes you depend on may be stale or partial.");
    }
    let c = n.git_closeout.clone().unwrap_or(GitCloseout::Off);
    if c != GitCloseout::Off {
        s.push('\n');
        s.push_str(&system_addendum(&c));
    }
    (s, warnings)
}
