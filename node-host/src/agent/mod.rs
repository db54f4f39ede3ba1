//! `weft agent`: a DGP 0.1 controller. It reads frames, asks a decision adapter, records
//! assessments, commits with idempotency keys, fulfils input nodes through a text service, and
//! stops where a human is required. It consumes only the protocol, so it drives `weft serve`
//! and any other DGP 0.1 server alike. The rules (which decision next, what evidence an adapter
//! may see, when to stop) are `weft_core::frames::controller`'s; this module does the I/O and
//! prints one JSON line per event.

pub mod adapters;
pub mod client;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};
use weft_core::frames::FramesError;
use weft_core::frames::controller::{self, AfterJudgment, Step};
use weft_core::frames::types::*;

use self::adapters::{
    DecisionAdapter, FixtureAdapter, FixtureText, HttpAdapter, HttpText, TextService,
};
use self::client::{CallError, Client};

/// Arguments of `weft agent`.
#[derive(clap::Args, Debug)]
pub struct AgentArgs {
    /// The DGP server, e.g. `http://127.0.0.1:8080`.
    #[arg(long)]
    pub base_url: String,
    /// Bearer token (default: `WEFT_AGENT_TOKEN`).
    #[arg(long, env = "WEFT_AGENT_TOKEN", hide_env_values = true)]
    pub token: String,
    /// Surfaces to drive (repeatable; default: every listed surface).
    #[arg(long)]
    pub surface: Vec<String>,
    /// How many surfaces are assessed concurrently (1..=8).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    pub parallel: u32,
    /// Record judgments as speculative assessments and stop (never commits).
    #[arg(long)]
    pub speculative: bool,
    /// Steps per surface before giving up.
    #[arg(long, default_value_t = 8)]
    pub steps: u32,
    /// Service requests this process may make in total.
    #[arg(long, default_value_t = 3)]
    pub max_service_calls: u32,
    /// `fixture` (deterministic walkthroughs) or `http` (see --adapter-url).
    #[arg(long, default_value = "fixture")]
    pub adapter: String,
    /// URL of an external decision service (with `--adapter http`).
    #[arg(long)]
    pub adapter_url: Option<String>,
    /// Evidence kinds the external decision service consumes.
    #[arg(long, default_value = "text,json", value_delimiter = ',')]
    pub adapter_modalities: Vec<String>,
    /// URL of an external text service (default: canned fixture texts).
    #[arg(long)]
    pub text_service_url: Option<String>,
    /// Allow plain HTTP to non-loopback hosts (tokens travel unencrypted).
    #[arg(long)]
    pub allow_insecure_http: bool,
}

struct Controller {
    client: Client,
    adapter: Box<dyn DecisionAdapter>,
    text: Box<dyn TextService>,
    speculative: bool,
    steps: u32,
    service_calls: AtomicU32,
    max_service_calls: u32,
}

fn emit(v: Value) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn random_id(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        weft_core::frames::validate::hex(&crate::serve::random_bytes::<16>())
    )
}

/// Why a surface's loop ended.
enum End {
    Continue,
    Stop(Value),
}

impl Controller {
    async fn run_surface(&self, sid: &str) -> Value {
        for _ in 0..self.steps {
            match self.step(sid).await {
                Ok(End::Continue) => {}
                Ok(End::Stop(v)) => return v,
                Err(e) => {
                    let v = json!({"surface": sid, "event": "stopped", "problem": e.to_json()});
                    emit(v.clone());
                    return v;
                }
            }
        }
        let v = json!({"surface": sid, "event": "step_budget_reached"});
        emit(v.clone());
        v
    }

    async fn step(&self, sid: &str) -> Result<End, CallError> {
        let link = format!(
            "/dgp/surfaces/{}/frame",
            weft_core::frames::engine::path_segment(sid)
        );
        let frame: Frame = serde_json::from_value(self.client.get(&link).await?)
            .map_err(|e| CallError::Transport(format!("the frame does not match DGP 0.1: {e}")))?;
        emit(
            json!({"surface": sid, "event": "frame", "frame_id": frame.frame_id,
                    "read_set": frame.read_set, "decisions": frame.decisions.iter().map(|d| &d.node_id).collect::<Vec<_>>()}),
        );
        let step = controller::next_step(&frame, controller::CLIENT_FEATURES)?;
        let (decision, result, resolver) = match step {
            Step::Quiescent => {
                let v = json!({"surface": sid, "event": "quiescent"});
                emit(v.clone());
                return Ok(End::Stop(v));
            }
            Step::InputRequired(d) => {
                let v = json!({"surface": sid, "event": "input_required", "decision_id": d.decision_id});
                emit(v.clone());
                return Ok(End::Stop(v));
            }
            Step::Fulfil(d) => {
                if self.speculative {
                    let v = json!({"surface": sid, "event": "stopped",
                                   "reason": "speculative mode assesses choices only; it does not buy generation"});
                    emit(v.clone());
                    return Ok(End::Stop(v));
                }
                let mods = self.text.modalities();
                let mods: Vec<&str> = mods.iter().map(String::as_str).collect();
                let pack = controller::evidence_for(&frame, d, &mods)?;
                if self.service_calls.fetch_add(1, Ordering::SeqCst) >= self.max_service_calls {
                    return Err(CallError::Problem {
                        status: 409,
                        code: "CLIENT_BUDGET_EXHAUSTED".into(),
                        detail: "this process reached its service-call limit".into(),
                    });
                }
                let (text, resolver) = self.text.generate(&frame, d, &pack).await?;
                emit(json!({"surface": sid, "event": "service_text",
                            "service_id": d.fulfillment.as_ref().map(|f| &f.service_id), "chars": text.chars().count()}));
                (d, controller::fulfilment_result(d, text)?, resolver)
            }
            Step::Assess(d) => {
                let mods = self.adapter.modalities();
                let mods: Vec<&str> = mods.iter().map(String::as_str).collect();
                let pack = controller::evidence_for(&frame, d, &mods)?;
                let (result, resolver) = self.adapter.decide(&frame, d, &pack).await?;
                weft_core::frames::validate::check_result(d, &result)?;
                (d, result, resolver)
            }
        };
        let mode = if self.speculative {
            Mode::Speculative
        } else {
            Mode::Live
        };
        let req = controller::assessment_request(
            &frame,
            decision,
            random_id("a"),
            mode,
            resolver,
            result,
        );
        self.client.post("/dgp/assessments", &req, &[]).await?;
        emit(json!({"surface": sid, "event": "assessed", "assessment": req}));
        match controller::after_judgment(decision, &req.result, mode) {
            AfterJudgment::Commit => {}
            AfterJudgment::Speculative => {
                let v = json!({"surface": sid, "event": "speculative_recorded", "assessment_id": req.assessment_id});
                emit(v.clone());
                return Ok(End::Stop(v));
            }
            AfterJudgment::Abstained => {
                let v = json!({"surface": sid, "event": "abstained", "assessment_id": req.assessment_id});
                emit(v.clone());
                return Ok(End::Stop(v));
            }
            AfterJudgment::HumanRequired => {
                let v = json!({"surface": sid, "event": "human_review_required",
                               "frame_id": frame.frame_id, "assessment_id": req.assessment_id});
                emit(v.clone());
                return Ok(End::Stop(v));
            }
        }
        let commit = controller::commit_request(&req);
        let key = random_id("k");
        // The intent is logged before the request: after an unknown outcome the same key and
        // body are retried, never a new key.
        emit(
            json!({"surface": sid, "event": "commit_intent", "idempotency_key": key, "request": commit}),
        );
        let mut attempt = 0;
        let receipt = loop {
            attempt += 1;
            match self
                .client
                .post("/dgp/commits", &commit, &[("idempotency-key", &key)])
                .await
            {
                Err(CallError::Transport(m)) if attempt < 4 => {
                    emit(
                        json!({"surface": sid, "event": "commit_retry", "idempotency_key": key, "detail": m}),
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(200 * attempt)).await;
                }
                other => break other?,
            }
        };
        emit(json!({"surface": sid, "event": "committed", "receipt": receipt}));
        Ok(End::Continue)
    }
}

/// Runs `weft agent`.
pub async fn main(args: AgentArgs) -> ExitCode {
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            emit(json!({"event": "error", "problem": e.to_json()}));
            ExitCode::FAILURE
        }
    }
}

async fn run(args: AgentArgs) -> Result<(), CallError> {
    let cfg = |m: String| CallError::from(FramesError::InvalidMessage(m));
    let client = Client::new(
        &args.base_url,
        Some(args.token.clone()),
        args.allow_insecure_http,
    )
    .map_err(cfg)?;
    let manifest = client.get("/.well-known/dgp").await?;
    if manifest["dgp"] != "0.1" {
        return Err(cfg("the server does not speak DGP 0.1".into()));
    }
    let adapter: Box<dyn DecisionAdapter> = match args.adapter.as_str() {
        "fixture" => Box::new(FixtureAdapter),
        "http" => {
            let url = args
                .adapter_url
                .clone()
                .ok_or_else(|| cfg("--adapter http needs --adapter-url".into()))?;
            let c = Client::new(&url, None, args.allow_insecure_http).map_err(cfg)?;
            Box::new(HttpAdapter {
                client: c,
                url: url.clone(),
                modalities: args.adapter_modalities.clone(),
            })
        }
        other => return Err(cfg(format!("unknown adapter `{other}` (fixture or http)"))),
    };
    let text: Box<dyn TextService> = match &args.text_service_url {
        None => Box::new(FixtureText),
        Some(url) => Box::new(HttpText {
            client: Client::new(url, None, args.allow_insecure_http).map_err(cfg)?,
            url: url.clone(),
        }),
    };
    let surfaces: Vec<String> = if args.surface.is_empty() {
        let link = manifest["links"]["surfaces"]
            .as_str()
            .unwrap_or("/dgp/surfaces")
            .to_owned();
        let list = client.get(&link).await?;
        list["surfaces"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["surface_id"].as_str().map(str::to_owned))
            .collect()
    } else {
        args.surface.clone()
    };
    let ctl = Arc::new(Controller {
        client,
        adapter,
        text,
        speculative: args.speculative,
        steps: args.steps,
        service_calls: AtomicU32::new(0),
        max_service_calls: args.max_service_calls,
    });
    let gate = Arc::new(tokio::sync::Semaphore::new(args.parallel as usize));
    let mut tasks = Vec::new();
    for sid in surfaces {
        let (ctl, gate) = (ctl.clone(), gate.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await;
            ctl.run_surface(&sid).await
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}
