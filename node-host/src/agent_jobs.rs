//! Worker-job tools for the native agents (`weft serve --job-tool NAME=PATH.mjs`): the
//! counterpart of the JS `jobTool`. A call of such a tool on a task node's agent starts a
//! background job on the native job host ([`crate::jobs_host::JobsHost`], the DOM-style worker
//! script run with `node` through the worker shim, one worker process per tool, started on the
//! first call and again after it died). The core decides; the host only carries:
//!
//! - the call: the job is submitted with the agent's owner and the call's origin, the hand-over
//!   is recorded (`NodeAgent::on_call_job`, a `job` line), and the call returns
//!   `{"job", "state"}` as the JS `jobTool` does (its result is the hand-over, not the job's
//!   outcome);
//! - the job's journal events go to the node's job journal (`NodeAgent::record_job_event` →
//!   `nodes/{id}/jobs.jsonl`; milestones as they happen, repeating events coalesced by the core);
//! - its completion note is delivered as mail (`NodeAgent::deliver_note`, after every journal
//!   event up to the outcome), admitted at the agent's next turn;
//! - an interrupt of the node's turn cancels the node's unfinished jobs (the registry's cancel;
//!   the outcome, and with it the note, follows its evidence).
//!
//! A job whose execution dies with the host is `lost` on the next start (the core's recovery
//! of a `job` line without mail). Workers are not orphaned by a host that is killed (SIGKILL
//! reaps nothing): the shim exits when its stdin closes, which the kernel does when the host
//! dies (a worker blocking its event loop notices at its next turn). `PR_SET_PDEATHSIG` is not
//! used: it fires when the spawning *thread* ends, and workers are spawned from Tokio's
//! blocking pool, whose threads end when idle. Memory stays bounded: the registry keeps a
//! journal window per job and forgets a job once its note is delivered.
//!
//! [`AgentJobs::drive`] is the transport loop (it receives without holding the host); after
//! each batch of events it calls the host's `kick`, which pumps the agents
//! ([`crate::agents::Runtime::pump`] carries the events with [`AgentJobs::carry`]).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::Notify;
use weft_core::actors::ActorGraph;
use weft_core::agents::{AgentsError, GRAPH_TOOLS, NodeAgent};
use weft_core::codes::HostError;
use weft_core::jobs::{
    Delivery, EndpointId, EndpointSpec, EndpointState, Hello, JobId, Output, Registry,
    RegistryConfig, Submit, SubscriptionId,
};
use weft_core::time::Now;
use weft_core::tools::{HandlerFailure, InvocationId, Settlement, ToolDecl};

use crate::agents::{BoxFuture, HostTools};
use crate::jobs_host::{Inbox, JobsHost, sleep_until};

/// Journal events an observer of one job may hold before it is told what it missed.
const OBSERVER_QUEUE: usize = 256;

/// Longest tool name accepted for `--job-tool`.
const MAX_NAME: usize = 64;

/// One `--job-tool NAME=PATH.mjs`: a tool `name` whose calls run the worker script `script`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobToolSpec {
    /// The tool's name, as the model calls it.
    pub name: String,
    /// The DOM-style worker script (as `weft run` takes it), canonical.
    pub script: PathBuf,
}

/// Parses `NAME=PATH` (the value of `--job-tool`): a name of `[A-Za-z0-9_-]` (at most 64, not
/// a graph tool's) and an existing worker script file.
pub fn parse_job_tool(s: &str) -> Result<JobToolSpec, String> {
    let Some((name, path)) = s.split_once('=') else {
        return Err(format!("`{s}` is not NAME=PATH.mjs"));
    };
    let name = name.trim();
    if name.is_empty()
        || name.len() > MAX_NAME
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(format!(
            "the tool name `{name}` must be 1 to {MAX_NAME} characters of A-Z a-z 0-9 _ -"
        ));
    }
    if GRAPH_TOOLS.contains(&name) || name.starts_with("dgp_") {
        return Err(format!(
            "`{name}` is the name of a built-in tool; choose another"
        ));
    }
    let script = PathBuf::from(path);
    if !script.is_file() {
        return Err(format!("no such worker script: {path}"));
    }
    let script = std::fs::canonicalize(&script).map_err(|e| format!("{path}: {e}"))?;
    Ok(JobToolSpec {
        name: name.to_owned(),
        script,
    })
}

/// The declaration of a job tool: any JSON object as arguments (the job's payload).
pub fn job_tool_decl(spec: &JobToolSpec) -> ToolDecl {
    ToolDecl::new(
        spec.name.clone(),
        format!(
            "Starts a background job (worker script {}) with the arguments as its payload. \
             The call returns the job id at once; the job's outcome arrives later as a \
             completion note in your mail.",
            spec.script
                .file_name()
                .map_or_else(String::new, |f| f.to_string_lossy().into_owned())
        ),
        json!({"type": "object"}),
    )
    .may_start_job(true)
}

/// `tools` with the job tools of `specs` added (declarations and the job host); `tools`
/// unchanged when there are none.
pub fn with_job_tools(mut tools: HostTools, specs: &[JobToolSpec], node: &str) -> HostTools {
    if specs.is_empty() {
        return tools;
    }
    tools.decls.extend(specs.iter().map(job_tool_decl));
    tools.jobs = Some(Arc::new(AgentJobs::new(specs, node)));
    tools
}

/// One job a call started, until its note is delivered.
struct Tracked {
    node: String,
    sub: SubscriptionId,
}

struct State {
    host: JobsHost,
    /// Tool → (script, its endpoint while open).
    tools: BTreeMap<String, (PathBuf, Option<EndpointId>)>,
    jobs: HashMap<JobId, Tracked>,
}

/// The job host of a runtime's job tools. See the [module docs](self).
pub struct AgentJobs {
    state: Mutex<State>,
    inbox: Mutex<Option<Inbox>>,
    wake: Notify,
    node: String,
}

impl std::fmt::Debug for AgentJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("AgentJobs")
            .field("tools", &s.tools.keys().collect::<Vec<_>>())
            .field("open_jobs", &s.jobs.len())
            .finish()
    }
}

impl AgentJobs {
    /// A job host for `specs`, running worker scripts with the Node binary `node`. Job ids
    /// start at the wall clock's milliseconds, so they differ from a previous run's on the same
    /// root.
    pub fn new(specs: &[JobToolSpec], node: &str) -> AgentJobs {
        let mut host = JobsHost::new();
        host.keep_notices = true;
        host.registry = Registry::new(RegistryConfig {
            first_job_id: crate::serve::now_ms().max(1),
        });
        host.registry
            .set_journal_window(Some(crate::run::JOURNAL_WINDOW));
        let inbox = host.take_inbox();
        AgentJobs {
            state: Mutex::new(State {
                host,
                tools: specs
                    .iter()
                    .map(|s| (s.name.clone(), (s.script.clone(), None)))
                    .collect(),
                jobs: HashMap::new(),
            }),
            inbox: Mutex::new(Some(inbox)),
            wake: Notify::new(),
            node: node.to_owned(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `tool` is one of these job tools.
    pub fn handles(&self, tool: &str) -> bool {
        self.lock().tools.contains_key(tool)
    }

    /// The number of jobs started whose note was not delivered yet.
    pub fn open_jobs(&self) -> usize {
        self.lock().jobs.len()
    }

    /// The OS process ids of the tools' worker processes.
    pub fn worker_pids(&self) -> Vec<u32> {
        let s = self.lock();
        s.tools
            .values()
            .filter_map(|(_, ep)| ep.and_then(|e| s.host.pid(e)))
            .collect()
    }

    /// `agent` (of `node`) started a call of job tool `tool`: submits the job, records the
    /// hand-over and settles the call with `{"job", "state"}` (a refusal settles it thrown,
    /// with the error's code).
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &self,
        now: Now,
        graph: &mut ActorGraph,
        node: &str,
        agent: &mut NodeAgent,
        invocation: InvocationId,
        tool: &str,
        arguments: Value,
    ) -> Result<(), AgentsError> {
        let submitted = {
            let mut s = self.lock();
            self.submit(&mut s, node, agent, invocation, tool, arguments)
        };
        let settlement = match submitted {
            Ok((job, state)) => match agent.on_call_job(now, graph, invocation, job) {
                Ok(()) => Settlement::Returned(json!({"job": job.0, "state": state})),
                Err(e) => {
                    // The core refused the hand-over: the job does not run for this call.
                    let mut s = self.lock();
                    s.jobs.remove(&job);
                    let now = s.host.now();
                    let _ = s
                        .host
                        .registry
                        .cancel(now, job, "the call could not take the job");
                    s.host.pump();
                    Settlement::Threw {
                        message: e.to_string(),
                        code: Some(e.code().to_owned()),
                    }
                }
            },
            Err((message, code)) => Settlement::Threw {
                message,
                code: Some(code),
            },
        };
        self.wake.notify_one();
        agent.on_call_settled(now, graph, invocation, settlement)
    }

    fn submit(
        &self,
        s: &mut State,
        node: &str,
        agent: &NodeAgent,
        invocation: InvocationId,
        tool: &str,
        payload: Value,
    ) -> Result<(JobId, &'static str), (String, String)> {
        let Some(origin) = agent.origin(invocation) else {
            let e = HostError::CallNotRunning;
            return Err((e.to_string(), e.code().into()));
        };
        let State { host, tools, jobs } = s;
        let (script, ep) = tools.get_mut(tool).ok_or_else(|| {
            let f = HandlerFailure::UnknownTool(tool.to_owned());
            (f.to_string(), f.code().to_owned())
        })?;
        let open = ep.is_some_and(|e| {
            host.registry
                .endpoint(e)
                .is_some_and(|x| !matches!(x.state, EndpointState::Closed { .. }))
        });
        if !open {
            let mut spec = EndpointSpec::new("weft-serve", script.display().to_string());
            spec.hello = Hello::Await { timeout_ms: 1000 };
            let id = host.open_child(&self.node, script, spec).map_err(|e| {
                (
                    format!("could not start `{}` for `{tool}`: {e}", self.node),
                    HostError::WorkerStartFailed.code().into(),
                )
            })?;
            *ep = Some(id);
        }
        let endpoint = ep.expect("opened");
        let mut req = Submit::new("", endpoint, payload);
        req.owner = agent.owner().clone();
        req.origin = origin;
        let now = host.now();
        let sub = host
            .registry
            .submit(now, req)
            .map_err(|e| (e.to_string(), e.code().to_owned()))?;
        let job = sub.job;
        let obs = host
            .registry
            .observe(job, Some(1), OBSERVER_QUEUE)
            .expect("the job was just submitted");
        host.pump();
        let state = host
            .registry
            .job(job)
            .map_or("queued", |j| j.state.as_str());
        jobs.insert(
            job,
            Tracked {
                node: node.to_owned(),
                sub: obs,
            },
        );
        Ok((job, state))
    }

    /// Cancels the unfinished jobs `node`'s calls started (its turn was interrupted); returns
    /// how many cancels were requested.
    pub fn cancel_node(&self, node: &str, reason: &str) -> usize {
        let mut s = self.lock();
        let ids: Vec<JobId> = s
            .jobs
            .iter()
            .filter(|(_, t)| t.node == node)
            .map(|(j, _)| *j)
            .collect();
        let now = s.host.now();
        let mut n = 0;
        for j in ids {
            if s.host.registry.cancel(now, j, reason).is_ok() {
                n += 1;
            }
        }
        s.host.pump();
        drop(s);
        self.wake.notify_one();
        n
    }

    /// Carries what the jobs did to their agents: journal events to the node's job journal,
    /// completion notes as mail (after the job's last journal events). Returns whether a note
    /// was delivered (the caller pumps again then).
    pub fn carry(
        &self,
        now: Now,
        graph: &mut ActorGraph,
        agents: &mut BTreeMap<String, NodeAgent>,
    ) -> Result<bool, AgentsError> {
        let mut s = self.lock();
        let State { host, jobs, .. } = &mut *s;
        for t in jobs.values() {
            record(now, host, t, graph, agents)?;
        }
        let mut delivered = false;
        for notice in host.take_notices() {
            let Output::NoteQueued { owner, .. } = notice else {
                continue;
            };
            for note in host.registry.read_mailbox(&owner) {
                let Some(t) = jobs.remove(&note.job) else {
                    continue;
                };
                record(now, host, &t, graph, agents)?;
                host.registry.unsubscribe(t.sub);
                // Its journal and note are the node's now: the registry keeps no record of it.
                host.registry.forget(note.job);
                if let Some(a) = agents.get_mut(&t.node) {
                    a.deliver_note(now, graph, &note)?;
                    delivered = true;
                }
            }
        }
        Ok(delivered)
    }

    /// The transport loop: receives the workers' lines and exits without holding the host,
    /// applies them (and the registry's timers), then calls `kick` so that the agents carry
    /// them ([`carry`](Self::carry)). Runs until the host's queues close (in `weft serve`, for
    /// the life of the process: its `kick` holds the desk); a second call returns at once.
    pub async fn drive(self: Arc<Self>, kick: Arc<dyn Fn() -> BoxFuture<()> + Send + Sync>) {
        let Some(mut inbox) = self.inbox.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        loop {
            let (deadline, now) = {
                let s = self.lock();
                (s.host.registry.poll_timeout(), s.host.now())
            };
            let ev = tokio::select! {
                ev = inbox.recv() => match ev {
                    Some(ev) => Some(ev),
                    None => return,
                },
                _ = sleep_until(deadline, now) => None,
                _ = self.wake.notified() => continue,
            };
            {
                let mut s = self.lock();
                s.host.apply(ev.as_ref());
                // Apply what else already arrived before the agents carry it (one kick).
                while let Some(more) = inbox.try_recv() {
                    s.host.apply(Some(&more));
                }
            }
            kick().await;
        }
    }
}

/// Records the journal events waiting for `t`'s observer in its node's job journal.
fn record(
    now: Now,
    host: &mut JobsHost,
    t: &Tracked,
    graph: &mut ActorGraph,
    agents: &mut BTreeMap<String, NodeAgent>,
) -> Result<(), AgentsError> {
    let Ok(deliveries) = host.registry.take_deliveries(t.sub) else {
        return Ok(());
    };
    let Some(a) = agents.get_mut(&t.node) else {
        return Ok(());
    };
    for d in deliveries {
        if let Delivery::Event(ev) = d {
            a.record_job_event(now, graph, &ev.to_json())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_tool_spec_needs_a_name_and_an_existing_script() {
        let dir = std::env::temp_dir().join(format!("weft-jobtool-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("w.mjs");
        std::fs::write(&script, "self.onmessage = () => {};\n").unwrap();
        let ok = parse_job_tool(&format!("render={}", script.display())).unwrap();
        assert_eq!(ok.name, "render");
        assert!(ok.script.is_absolute());
        for bad in [
            "render".to_owned(),
            format!("={}", script.display()),
            format!("bad name={}", script.display()),
            format!("spawn={}", script.display()),
            format!("dgp_x={}", script.display()),
            "render=/no/such/worker.mjs".to_owned(),
        ] {
            assert!(parse_job_tool(&bad).is_err(), "{bad}");
        }
        let d = job_tool_decl(&ok);
        assert!(d.may_start_job);
        assert_eq!(d.name, "render");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
