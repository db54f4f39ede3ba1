//! `weft run <script> --payload <json>`: runs a worker script as a child process speaking the
//! weft worker protocol (JSON lines on stdio) and follows its one job.
//!
//! A progress bar shows the job; Ctrl-C asks the job to cancel (the worker keeps running until
//! it acknowledges or goes quiet), a second Ctrl-C terminates the worker. At the end the command
//! prints what stopped and what evidence arrived. `--json` streams the job's journal as JSON
//! lines instead, each event as it is recorded. Exit status: 0 succeeded, 1 failed, 2 lost,
//! 130 cancelled, 64 bad arguments, 69 the worker could not be started.
//!
//! Memory stays bounded however much a worker reports: the registry keeps a journal window
//! ([`JOURNAL_WINDOW`]: the job's milestones and its latest other events), events reach the
//! terminal through a bounded observer queue drained after every step (were it ever to overflow,
//! `--json` prints a `{"type":"missed","from","to"}` line instead of the events it lost), and the
//! child transport cuts lines and applies backpressure (see `jobs_host`).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;
use tokio::sync::mpsc;
use weft_core::Mono;
use weft_core::jobs::{
    CancelStatus, Delivery, EndpointSpec, EventKind, Hello, JobEvent, JobId, Outcome, OwnerId,
    Submit,
};

use crate::jobs_host::{Inbound, JobsHost};

/// Arguments of `weft run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The worker script (DOM-style: `self.onmessage` / `self.postMessage`), started with node.
    pub script: PathBuf,
    /// The run payload, as JSON.
    #[arg(long, default_value = "null")]
    pub payload: String,
    /// Print the job's journal as JSON lines (stdout) instead of a progress bar.
    #[arg(long)]
    pub json: bool,
    /// How long a cancelled worker without cancel acknowledgement must stay quiet (ms).
    #[arg(long, default_value_t = 500)]
    pub quiet_ms: u64,
    /// How long to wait for the worker's hello before assuming the base AIUI protocol (ms).
    #[arg(long, default_value_t = 1000)]
    pub hello_timeout_ms: u64,
    /// The node executable.
    #[arg(long, env = "WEFT_NODE", default_value = "node")]
    pub node: String,
}

/// Non-milestone journal events the registry keeps per job (progress, partials, protocol
/// errors, late evidence): at least this many, at most twice as many.
pub const JOURNAL_WINDOW: usize = 256;

/// How many events may wait in the observer queue between two steps (a step records a few).
const OBSERVER_QUEUE: usize = 1024;

enum Tick {
    Interrupt,
    Event(Option<Inbound>),
}

/// Runs the command.
pub async fn main(args: RunArgs) -> ExitCode {
    let payload: Value = match serde_json::from_str(&args.payload) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("weft run: --payload is not valid JSON: {e}");
            return ExitCode::from(64);
        }
    };
    if !args.script.is_file() {
        eprintln!("weft run: no such worker script: {}", args.script.display());
        return ExitCode::from(64);
    }
    let owner = "cli";
    let mut host = JobsHost::new();
    host.registry.set_journal_window(Some(JOURNAL_WINDOW));
    let mut spec = EndpointSpec::new(owner, args.script.display().to_string());
    spec.quiet_ms = args.quiet_ms;
    spec.hello = Hello::Await {
        timeout_ms: args.hello_timeout_ms,
    };
    let ep = match host.open_child(&args.node, &args.script, spec) {
        Ok(ep) => ep,
        Err(e) => {
            eprintln!("weft run: could not start `{}`: {e}", args.node);
            return ExitCode::from(69);
        }
    };
    let now = host.now();
    let job = match host.registry.submit(now, Submit::new(owner, ep, payload)) {
        Ok(s) => s.job,
        Err(e) => {
            eprintln!("weft run: {e} [{}]", e.code());
            return ExitCode::from(69);
        }
    };
    let sub = host
        .registry
        .observe(job, Some(1), OBSERVER_QUEUE)
        .expect("the job was just submitted");
    host.pump();

    let (sig_tx, mut sig_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            if sig_tx.send(()).is_err() {
                break;
            }
        }
    });

    let bar = (!args.json).then(|| {
        let pb = ProgressBar::with_draw_target(Some(1000), ProgressDrawTarget::stderr());
        pb.set_style(
            ProgressStyle::with_template(
                "{spinner} {elapsed_precise} [{bar:40}] {percent:>3}% {msg}",
            )
            .expect("template")
            .progress_chars("=> "),
        );
        pb.enable_steady_tick(Duration::from_millis(120));
        pb.set_message(format!("{job} queued on {}", args.script.display()));
        pb
    });
    let say = |msg: &str| match &bar {
        Some(pb) => pb.println(msg),
        None => eprintln!("{msg}"),
    };

    let mut interrupts = 0;
    let mut last_fraction: Option<f64> = None;
    loop {
        let tick = tokio::select! {
            _ = sig_rx.recv() => Tick::Interrupt,
            ev = host.step() => Tick::Event(ev),
        };
        match tick {
            Tick::Interrupt => {
                interrupts += 1;
                let now = host.now();
                if interrupts == 1 {
                    match host.registry.cancel(now, job, "interrupted (Ctrl-C)") {
                        Ok(CancelStatus::Requested { ack_expected }) => say(&format!(
                            "^C cancel requested; {} (Ctrl-C again terminates the worker)",
                            if ack_expected {
                                "waiting for the worker to acknowledge"
                            } else {
                                "the worker cannot acknowledge: waiting for it to go quiet"
                            }
                        )),
                        Ok(other) => say(&format!("^C cancel: {}", other.as_str())),
                        Err(e) => say(&format!("^C cancel failed: {e}")),
                    }
                } else {
                    say("^C terminating the worker: the job's effects become unknown");
                    let _ = host.registry.terminate_endpoint(
                        now,
                        ep,
                        "terminated after a second Ctrl-C",
                    );
                }
                host.pump();
            }
            Tick::Event(Some(Inbound::Stderr(_, line))) => say(&format!("worker: {line}")),
            Tick::Event(_) => {}
        }
        let deliveries = host
            .registry
            .take_deliveries(sub)
            .expect("the subscription stays");
        let mut out = args.json.then(|| std::io::stdout().lock());
        for d in &deliveries {
            match (d, &mut out) {
                (Delivery::Event(ev), Some(out)) => {
                    let _ = writeln!(out, "{}", ev.to_json());
                }
                (Delivery::Missed { .. }, Some(out)) => {
                    let _ = writeln!(out, "{}", d.to_json());
                }
                (Delivery::Event(ev), None) => {
                    if let Some(pb) = &bar {
                        show(pb, ev, &mut last_fraction);
                    }
                }
                (Delivery::Missed { .. }, None) => {}
            }
        }
        if let Some(out) = &mut out {
            let _ = out.flush();
        }
        drop(out);
        let finished = host
            .registry
            .job(job)
            .expect("the job stays until its owner closes")
            .is_finished();
        if finished {
            break;
        }
    }
    if let Some(pb) = &bar {
        pb.finish_and_clear();
    }
    let j = host.registry.job(job).expect("retained");
    let outcome = j.outcome().expect("finished").clone();
    if !args.json {
        report(j.journal(), &outcome, last_fraction);
        if let Outcome::Succeeded { value } = &outcome {
            let text = value.to_string();
            if std::io::stdout().is_terminal() && text.len() > 400 {
                let cut: String = text.chars().take(300).collect();
                println!(
                    "{cut}… ({} bytes; redirect stdout for the whole result)",
                    text.len()
                );
            } else {
                println!("{text}");
            }
        }
    }
    let _ = host.registry.read_mailbox(&OwnerId::new(owner));
    match outcome {
        Outcome::Succeeded { .. } => ExitCode::SUCCESS,
        Outcome::Failed { .. } => ExitCode::from(1),
        Outcome::Lost { .. } => ExitCode::from(2),
        Outcome::Cancelled { .. } => ExitCode::from(130),
    }
}

fn show(pb: &ProgressBar, ev: &JobEvent<Value>, last_fraction: &mut Option<f64>) {
    match &ev.kind {
        EventKind::Started { capabilities, .. } => pb.set_message(format!(
            "{} running (cancel ack: {}, input: {})",
            ev.job,
            yes_no(capabilities.cancel_ack),
            yes_no(capabilities.input)
        )),
        EventKind::Progress { value } => {
            if let Some(f) = fraction(value) {
                *last_fraction = Some(f);
                pb.set_position((f * 1000.0).round() as u64);
            }
        }
        EventKind::Partial { value } => {
            if let Some(t) = value.get("t").and_then(Value::as_f64) {
                pb.set_message(format!("{} running, partial at t = {t:.5}", ev.job));
            }
        }
        EventKind::ProtocolError { violation } => {
            pb.println(format!("protocol error: {}", violation.describe()));
        }
        _ => {}
    }
}

/// A progress value as a fraction: a number in [0, 1], or `{fraction}` / `{done, total}`.
fn fraction(v: &Value) -> Option<f64> {
    let f = v
        .as_f64()
        .or_else(|| v.get("fraction").and_then(Value::as_f64))
        .or_else(|| {
            let done = v.get("done")?.as_f64()?;
            let total = v.get("total")?.as_f64()?;
            (total > 0.0).then(|| done / total)
        })?;
    f.is_finite().then(|| f.clamp(0.0, 1.0))
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn secs(at: Mono) -> String {
    format!("{:.3}s", at.as_ms() as f64 / 1000.0)
}

/// Prints what stopped and what evidence arrived.
fn report(journal: &[JobEvent<Value>], outcome: &Outcome<Value>, last_fraction: Option<f64>) {
    let job: JobId = journal[0].job;
    eprintln!("{job} {}", outcome.summary());
    let mut cancel_at = None;
    for ev in journal {
        match &ev.kind {
            EventKind::CancelRequested { reason } => {
                cancel_at = Some(ev.at);
                eprintln!("  {} cancel requested ({reason})", secs(ev.at));
            }
            EventKind::CancelAcknowledged => eprintln!(
                "  {} evidence: the worker acknowledged it stopped{}",
                secs(ev.at),
                after(cancel_at, ev.at)
            ),
            EventKind::NoAcknowledgement { quiet_ms } => eprintln!(
                "  {} evidence: no acknowledgement available; the run was quiet for {quiet_ms} ms{}",
                secs(ev.at),
                after(cancel_at, ev.at)
            ),
            EventKind::Terminated { reason } => {
                eprintln!("  {} the worker went away: {reason}", secs(ev.at))
            }
            EventKind::ProtocolError { violation } => {
                eprintln!("  {} protocol error: {}", secs(ev.at), violation.describe())
            }
            EventKind::Finished { .. } => {
                eprintln!("  {} outcome recorded: {}", secs(ev.at), outcome.kind())
            }
            _ => {}
        }
    }
    if cancel_at.is_some()
        && let Some(f) = last_fraction
    {
        eprintln!("  progress when it stopped: {:.0}%", f * 100.0);
    }
    if let Outcome::Failed { message, code, .. } = outcome {
        eprintln!(
            "  error{}: {message}",
            code.as_deref()
                .map(|c| format!(" [{c}]"))
                .unwrap_or_default()
        );
    }
}

fn after(from: Option<Mono>, at: Mono) -> String {
    from.map(|f| format!(" ({} ms after the request)", at.since(f)))
        .unwrap_or_default()
}
