//! `weft chat ROOT --node ID --message TEXT`: one user message to a node's agent, the reply
//! streamed to the terminal as it arrives.
//!
//! The conversation is the node's `chat.jsonl`, read and written through the actor graph's
//! API (`model` view for the recent lines; `message` for the user line and the reply). The
//! turn runs in an [`AgentHost`] with the configured model ([`HostModel`]); with none
//! configured, a note goes to stderr and the built-in model answers.
//!
//! Output: the reply's text on stdout as it streams; with `--json`, one JSON line per event
//! (`model_delta`, `model_usage`, `turn_ended`). Ctrl-C interrupts the turn (the stream is
//! dropped). Exit status: 0 the turn completed; 1 the turn ended otherwise (the coded error,
//! e.g. `MODEL_AUTH: ...`, on stderr); 130 interrupted (`MODEL_ABORTED: ...`); 64 bad arguments
//! or model configuration; 66 no actor graph at the root; 74 I/O error; 75 another writer
//! holds the root.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Value, json};
use weft_core::actors::{ActorsError, HeuristicProposer, api};
use weft_core::model::{ChatMessage, StreamEvent, UserPart};
use weft_core::tools::{Message, Output, SessionConfig, TurnEnd};

use crate::actors::{Session, config_from_env, wall_ms};
use crate::agent_host::AgentHost;
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

/// Appends one line to the node's chat and waits until it is durable.
fn append(
    args: &ChatArgs,
    role: &str,
    text: &str,
    tokens: Option<u64>,
) -> Result<Value, ActorsError> {
    let (config, _) = config_from_env()?;
    let mut s = Session::writer(
        &args.root,
        config,
        Duration::from_millis(args.lock_timeout_ms),
    )?;
    let mut a = json!({"node": args.node, "role": role, "text": text});
    if let Some(t) = tokens {
        a["tokens"] = t.into();
    }
    let r = api::call(&mut s.graph, wall_ms(), "message", &a, &HeuristicProposer)?;
    s.flush()?;
    Ok(r)
}

/// The node's recent user and assistant lines as conversation, and its system addendum.
fn history(args: &ChatArgs) -> Result<(Vec<ChatMessage>, Option<String>), ActorsError> {
    let (config, _) = config_from_env()?;
    let mut s = Session::reader(&args.root, config)?;
    let v = api::call(
        &mut s.graph,
        wall_ms(),
        "model",
        &json!({"node": args.node, "recent": args.recent}),
        &HeuristicProposer,
    )?;
    let mut out = Vec::new();
    for l in v["recent"].as_array().into_iter().flatten() {
        let text = l["text"].as_str().unwrap_or("").to_owned();
        match l["role"].as_str() {
            Some("user") => out.push(ChatMessage::User(vec![UserPart::Text(text)])),
            Some("assistant") => out.push(ChatMessage::Assistant {
                text: Some(text),
                calls: vec![],
            }),
            _ => {}
        }
    }
    let addendum = v["closeout"]["systemAddendum"]
        .as_str()
        .filter(|s| !s.trim().is_empty())
        .map(str::to_owned);
    Ok((out, addendum))
}

fn print_delta(d: &crate::model::ModelDelta, json: bool, out: &mut impl Write) {
    if json {
        let _ = writeln!(out, "{}", d.to_json());
    } else if let StreamEvent::TextDelta { text } = &d.event {
        let _ = write!(out, "{text}");
    }
    let _ = out.flush();
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

/// Runs `weft chat`.
pub async fn main(args: ChatArgs) -> ExitCode {
    let mut model = match HostModel::from_choice(&args.model.choice()) {
        Ok(m) => m,
        Err(e) => return fail(e.code(), &e.to_string(), args.json, 64),
    };
    if let Some(note) = model.note() {
        eprintln!("{note}");
    }
    let (prelude, addendum) = match history(&args) {
        Ok(h) => h,
        Err(e) => return actors_fail(&e, args.json),
    };
    let system = match (args.system.clone(), addendum) {
        (Some(s), Some(a)) => Some(format!("{s}\n\n{a}")),
        (s, a) => s.or(a),
    };
    if let Err(e) = append(&args, "user", &args.message, None) {
        return actors_fail(&e, args.json);
    }
    let mut deltas = model.deltas();
    let model = model.with_system(system).with_prelude(prelude);
    let mut host = AgentHost::new(SessionConfig::new(args.node.clone()), model);
    let ctrl_c = ctrl_c_listener();
    host.submit_task(Value::String(args.message.clone()));

    let mut stdout = std::io::stdout().lock();
    let mut streamed_text = false;
    let mut interrupted = false;
    {
        let run = host.run_until_idle();
        tokio::pin!(run);
        tokio::pin!(ctrl_c);
        loop {
            tokio::select! {
                _ = &mut run => break,
                Some(d) = deltas.recv() => {
                    streamed_text |= matches!(d.event, StreamEvent::TextDelta { .. });
                    print_delta(&d, args.json, &mut stdout);
                }
                _ = &mut ctrl_c => {
                    interrupted = true;
                    break;
                }
            }
        }
    }
    if interrupted {
        // The session decides what an interrupt means; the dropped model future closes the
        // connection.
        host.interrupt("interrupted by the user (Ctrl-C)");
        host.run_until_idle().await;
    }
    // Every delta of the step was sent before its answer: drain what is left.
    while let Ok(d) = deltas.try_recv() {
        streamed_text |= matches!(d.event, StreamEvent::TextDelta { .. });
        print_delta(&d, args.json, &mut stdout);
    }

    let mut end = None;
    let mut output_tokens = None;
    for o in &host.log {
        match o {
            Output::ModelUsage {
                output_tokens: t, ..
            } => {
                output_tokens = Some(output_tokens.unwrap_or(0) + t);
                if args.json {
                    let _ = writeln!(stdout, "{}", o.to_json());
                }
            }
            Output::TurnEnded { end: e, .. } => end = Some((e.clone(), o.to_json())),
            _ => {}
        }
    }
    let reply = host.session.history().iter().rev().find_map(|m| match m {
        Message::Assistant { text, .. } => text.clone(),
        _ => None,
    });
    let Some((end, end_json)) = end else {
        return fail("CHAT_NO_TURN", "the turn did not end", args.json, 1);
    };
    let code = match &end {
        TurnEnd::Completed => {
            let text = reply.unwrap_or_default();
            if !args.json {
                if !streamed_text {
                    let _ = write!(stdout, "{text}");
                }
                let _ = writeln!(stdout);
            }
            if let Err(e) = append(&args, "assistant", &text, output_tokens) {
                return actors_fail(&e, args.json);
            }
            ExitCode::SUCCESS
        }
        TurnEnd::ModelFailed { message } => {
            if !args.json && streamed_text {
                let _ = writeln!(stdout);
            }
            eprintln!("{message}");
            ExitCode::from(1)
        }
        TurnEnd::Interrupted { reason } => {
            if !args.json && streamed_text {
                let _ = writeln!(stdout);
            }
            eprintln!("MODEL_ABORTED: {reason}");
            ExitCode::from(130)
        }
        other => {
            if !args.json && streamed_text {
                let _ = writeln!(stdout);
            }
            eprintln!(
                "CHAT_TURN_{}: the turn ended {}",
                other.as_str().to_uppercase(),
                other.as_str()
            );
            ExitCode::from(1)
        }
    };
    if args.json {
        let _ = writeln!(stdout, "{end_json}");
    }
    let _ = stdout.flush();
    code
}
