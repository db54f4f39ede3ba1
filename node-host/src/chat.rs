//! `weft chat ROOT --node ID --message TEXT`: one user message to a node's agent, the reply
//! streamed to the terminal as it arrives.
//!
//! The conversation is the node's `chat.jsonl`: the command holds the root's writer lock, opens
//! the node's agent (`weft_core::agents::NodeAgent`, resumed from its lines) in the native
//! runtime ([`Runtime`]), appends the user line and runs the agent's turn to its end with the
//! configured model ([`HostModel`]; every step's request is built from the node slice); with
//! none configured, a note goes to stderr and the built-in model answers. The turn's lines
//! (turn boundaries, the answer, graph-tool results) are written with the node. The user line
//! is acknowledged only by the turn's end (`LineAck::WithTurnEnd`): it and the turn's first
//! lines are written without an fsync, and the turn's end makes them durable with the answer
//! (one fsync round for a plain turn; the core's rule, `weft_core::agents`).
//!
//! Output: the reply's text on stdout as it streams; with `--json`, one JSON line per event
//! (`model_delta`, and the agent's released outputs: `turn_started`, `model_request`,
//! `model_usage`, ..., `turn_ended` last). Ctrl-C interrupts the turn (the stream is
//! dropped). Exit status: 0 the turn completed; 1 the turn ended otherwise (the coded error,
//! e.g. `MODEL_AUTH: ...`, or `CHAT_TURN_WAITING` when an enforced wait holds the step, on
//! stderr); 130 interrupted (`MODEL_ABORTED: ...`); 64 bad arguments
//! or model configuration; 66 no actor graph at the root; 74 I/O error; 75 another writer
//! holds the root.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use weft_core::actors::ActorsError;
use weft_core::agents::{AgentConfig, LineAck, admit_user_line};
use weft_core::codes::HostError;
use weft_core::model::StreamEvent;
use weft_core::tools::TurnEnd;

use crate::actors::{Session, config_from_env};
use crate::agents::{AgentEvent, Runtime};
use crate::model::{HostModel, ModelFlags};

/// Arguments of `weft chat`.
#[derive(clap::Args, Debug)]
pub struct ChatArgs {
    /// The `$CHAT_ROOT` directory (an actor graph made with `weft actors init`).
    pub root: PathBuf,
    /// The node whose agent is addressed.
    #[arg(long, default_value = "coordinator")]
    pub node: String,
    /// The user message.
    #[arg(long)]
    pub message: String,
    #[command(flatten)]
    pub model: ModelFlags,
    /// System text for the model.
    #[arg(long)]
    pub system: Option<String>,
    /// Print the turn's events as JSON lines instead of the reply's text.
    #[arg(long)]
    pub json: bool,
    /// How many of the node's recent chat lines the model reads.
    #[arg(long, default_value_t = 40)]
    pub recent: usize,
    /// How long to wait for another writer to release the root (ms).
    #[arg(long, default_value_t = 10_000)]
    pub lock_timeout_ms: u64,
}

fn fail(code: &str, message: &str, json: bool, exit: u8) -> ExitCode {
    eprintln!("{code}: {message}");
    if json {
        println!(
            "{}",
            json!({"output": "error", "error": {"code": code, "message": message}})
        );
    }
    ExitCode::from(exit)
}

fn actors_fail(e: &ActorsError, json: bool) -> ExitCode {
    fail(
        e.code(),
        &e.to_string(),
        json,
        crate::actors::cli::exit_code(e),
    )
}

/// Resolves at the next Ctrl-C; the handler is registered when this is called, so a signal
/// that comes before the first poll is not lost.
fn ctrl_c_listener() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let s = signal(SignalKind::interrupt());
        async move {
            match s {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending().await,
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// What the runtime's sink saw, shared with the command.
#[derive(Default)]
struct Seen {
    streamed_text: bool,
}

/// Prints one event of `node`'s agent: text deltas as text (or `model_delta` lines with
/// `--json`), released outputs as JSON lines with `--json`.
fn print_event(e: &AgentEvent, json: bool, node: &str, seen: &Mutex<Seen>) {
    let mut out = std::io::stdout().lock();
    match e {
        AgentEvent::Delta {
            node: n,
            turn,
            step,
            text,
        } if n == node => {
            seen.lock().unwrap_or_else(|p| p.into_inner()).streamed_text = true;
            if json {
                let d = crate::model::ModelDelta {
                    turn: weft_core::tools::TurnId(*turn),
                    step: weft_core::tools::StepId(*step),
                    event: StreamEvent::TextDelta { text: text.clone() },
                };
                let _ = writeln!(out, "{}", d.to_json());
            } else {
                let _ = write!(out, "{text}");
            }
        }
        AgentEvent::Output { .. } if json => {
            let _ = writeln!(out, "{}", e.to_json());
        }
        _ => {}
    }
    let _ = out.flush();
}

/// Runs `weft chat`.
pub async fn main(args: ChatArgs) -> ExitCode {
    let model = match HostModel::from_choice(&args.model.choice()) {
        Ok(m) => m,
        Err(e) => return fail(e.code(), &e.to_string(), args.json, 64),
    };
    if let Some(note) = model.note() {
        eprintln!("{note}");
    }
    let remote = match model {
        HostModel::Remote(m) => Some(m),
        HostModel::Builtin { .. } => None,
    };
    let (config, _) = match config_from_env() {
        Ok(c) => c,
        Err(e) => return actors_fail(&e, args.json),
    };
    let root = args.root.clone();
    let wait = Duration::from_millis(args.lock_timeout_ms);
    let session =
        match tokio::task::spawn_blocking(move || Session::writer(&root, config, wait)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return actors_fail(&e, args.json),
            Err(e) => return fail("STORE_IO", &e.to_string(), args.json, 74),
        };
    let Session {
        mut graph,
        mut store,
        ..
    } = session;

    // The sink prints what the agent releases as it arrives.
    let seen = Arc::new(Mutex::new(Seen::default()));
    let sink: crate::agents::Sink = {
        let (seen, json, node) = (seen.clone(), args.json, args.node.clone());
        Box::new(move |e: AgentEvent| print_event(&e, json, &node, &seen))
    };
    let agent_config = AgentConfig {
        recent_lines: args.recent.max(1),
        ..AgentConfig::default()
    };
    let mut rt =
        Runtime::new(agent_config, remote.is_none(), sink).with_system(args.system.clone());
    let now = crate::actors::now();
    let node = args.node.clone();
    let opened = rt
        .open(now, &mut graph, &node)
        .map_err(agents_error)
        .and_then(|_| {
            // Acknowledged only with the turn's end (the exit status): the core writes the line
            // without an fsync of its own, and the turn's end syncs it with the answer.
            admit_user_line(
                now.wall,
                &mut graph,
                &node,
                &args.message,
                LineAck::WithTurnEnd,
            )
            .map_err(agents_error)
        });
    if let Err(e) = opened {
        return actors_fail(&e, args.json);
    }
    let ctrl_c = ctrl_c_listener();
    tokio::pin!(ctrl_c);
    let mut interrupted = false;
    let mut flush =
        |g: &mut weft_core::actors::ActorGraph| crate::actors::flush(g, &mut store).map(|_| ());
    loop {
        let jobs = match rt.pump(crate::actors::now(), &mut graph, &mut flush) {
            Ok(j) => j,
            Err(e) => return actors_fail(&agents_error(e), args.json),
        };
        if jobs.is_empty() {
            break;
        }
        for job in jobs {
            let Some(model) = remote.as_ref() else { break };
            let (node, step) = (job.node.clone(), job.step);
            let n = node.clone();
            let result = {
                let (turn, json, seen) = (job.turn.0, args.json, seen.clone());
                let run = crate::agents::run_model(model, job, move |text| {
                    let e = AgentEvent::Delta {
                        node: n.clone(),
                        turn,
                        step: step.0,
                        text: text.to_owned(),
                    };
                    print_event(&e, json, &n, &seen);
                });
                tokio::pin!(run);
                tokio::select! {
                    r = &mut run => r,
                    _ = &mut ctrl_c => None,
                }
            };
            let done = match result {
                Some(r) => rt.finish(crate::actors::now(), &mut graph, &node, step, r),
                None => {
                    // The dropped future closed the connection; the session decides what an
                    // interrupt means.
                    interrupted = true;
                    match rt.interrupt(
                        crate::actors::now(),
                        &mut graph,
                        &node,
                        "interrupted by the user (Ctrl-C)",
                    ) {
                        Some(r) => r.map(|_| ()),
                        None => Ok(()),
                    }
                }
            };
            if let Err(e) = done {
                return actors_fail(&agents_error(e), args.json);
            }
        }
        if interrupted {
            if let Err(e) = rt.pump(crate::actors::now(), &mut graph, &mut flush) {
                return actors_fail(&agents_error(e), args.json);
            }
            break;
        }
    }
    // Deltas already went through the sink (on this thread, in order); only the end is left.
    let streamed_text = seen.lock().unwrap_or_else(|p| p.into_inner()).streamed_text;
    let mut stdout = std::io::stdout().lock();
    let Some(end) = rt.last_end(&args.node).cloned() else {
        // An enforced wait holds the step: the turn stays open on disk (`weft serve` resumes it
        // when the target is terminal).
        if let Some(st) = rt.state(&args.node).filter(|st| st["phase"] == "waiting") {
            let message = format!("the turn waits on {}", st["waiting"]);
            return fail(HostError::ChatTurnWaiting.code(), &message, args.json, 1);
        }
        return fail(
            HostError::ChatNoTurn.code(),
            "the turn did not end",
            args.json,
            1,
        );
    };
    if !args.json && streamed_text {
        let _ = writeln!(stdout);
    }
    let code = match &end {
        TurnEnd::Completed => ExitCode::SUCCESS,
        TurnEnd::ModelFailed { message } => {
            eprintln!("{message}");
            ExitCode::from(1)
        }
        TurnEnd::Interrupted { reason } => {
            eprintln!("MODEL_ABORTED: {reason}");
            ExitCode::from(130)
        }
        end @ TurnEnd::StepLimit { .. } => {
            eprintln!(
                "{}: the turn ended {}",
                HostError::ChatTurnStepLimit.code(),
                end.as_str()
            );
            ExitCode::from(1)
        }
    };
    let _ = stdout.flush();
    code
}

/// An agents error as the graph error `weft chat` exits with (its code is kept).
fn agents_error(e: weft_core::agents::AgentsError) -> ActorsError {
    match e {
        weft_core::agents::AgentsError::Actors(a) => a,
        other => ActorsError::InvalidArgument(format!("{}: {other}", other.code())),
    }
}
