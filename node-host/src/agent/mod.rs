//! `weft agent`: a DGP 0.1 controller. It reads frames, asks a decision adapter, records
//! assessments, commits with idempotency keys, fulfils input nodes through a text service, and
//! stops where a human is required. It consumes only the protocol, so it drives `weft serve`
//! and any other DGP 0.1 server alike. Everything it decides (which decision next, what evidence
//! an adapter may see, the requests, the events, the commit retries, where a stop is honoured,
//! the report, the URL rule) is `weft_core::frames::controller`'s run machine;
//! [`controller::Controller`] is its HTTP/timer loop and hands every event to its caller; this
//! command prints one JSON line per event, and [`tools`] offers the same controller to an agent
//! session as tools.

pub mod adapters;
pub mod client;
pub mod controller;
pub mod tools;

use std::process::ExitCode;
use std::sync::Arc;

use serde_json::{Value, json};
use weft_core::frames::FramesError;
use weft_core::model::{ModelConfig, NO_MODEL_CONFIGURED};

use self::adapters::{
    DecisionAdapter, FixtureAdapter, FixtureText, HttpAdapter, HttpText, ModelAdapter, ModelText,
    TextService, model_problem,
};
use self::client::{CallError, Client};
use self::controller::{Controller, RunOptions, StopSignal};
use crate::model::ReqwestModel;

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
    /// Who judges: `fixture` (deterministic walkthroughs), `http` (see --adapter-url) or
    /// `model` (see --model; without a configured model it says so and uses the fixtures).
    #[arg(long, alias = "judge", default_value = "fixture")]
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
    /// Who writes service texts without --text-service-url: `fixture` (canned texts) or
    /// `model` (see --model).
    #[arg(long, default_value = "fixture")]
    pub text: String,
    /// The model of `--adapter model` / `--text model`: `PROVIDER:NAME` (`openai:gpt-4o-mini`,
    /// `anthropic:claude-3-5-haiku-latest`, `openai:llama3.2` with --model-base-url).
    #[arg(long, env = "WEFT_MODEL")]
    pub model: Option<String>,
    /// The model provider's base URL (any OpenAI-compatible server), e.g.
    /// `http://127.0.0.1:11434/v1`. (`--base-url` is the DGP server's.)
    #[arg(long, env = "WEFT_MODEL_BASE_URL")]
    pub model_base_url: Option<String>,
    /// The environment variable holding the model key (default: OPENAI_API_KEY /
    /// ANTHROPIC_API_KEY).
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// Allow plain HTTP to non-loopback hosts (tokens travel unencrypted; https needs no flag).
    #[arg(long)]
    pub allow_insecure_http: bool,
}

fn emit(v: &Value) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

/// The model `--adapter model` / `--text model` ask, or `None` (no model needed, or none
/// configured: then a `note` event with `MODEL_NOT_CONFIGURED` says so and the deterministic
/// fixtures judge and write, labelled as fixtures). An invalid configuration is an error.
fn agent_model(args: &AgentArgs) -> Result<Option<ReqwestModel>, CallError> {
    let cfg = |m: String| CallError::from(FramesError::InvalidMessage(m));
    if !matches!(args.text.as_str(), "fixture" | "model") {
        return Err(cfg(format!(
            "unknown text service `{}` (fixture or model)",
            args.text
        )));
    }
    if args.adapter != "model" && args.text != "model" {
        return Ok(None);
    }
    let choice = crate::model::model_choice(
        args.model.clone(),
        args.model_base_url.clone(),
        args.api_key_env.as_deref(),
        &|k| std::env::var(k).ok(),
    );
    match ModelConfig::resolve(&choice).map_err(model_problem)? {
        Some(c) => Ok(Some(ReqwestModel::new(c).map_err(model_problem)?)),
        None => {
            let detail = "no model configured: set OPENAI_API_KEY or ANTHROPIC_API_KEY, or pass \
                          --model PROVIDER:NAME with --model-base-url URL; the deterministic \
                          fixtures (not a model) judge and write instead";
            eprintln!("weft agent: {detail}");
            emit(&json!({"event": "note", "code": NO_MODEL_CONFIGURED, "detail": detail}));
            Ok(None)
        }
    }
}

/// Runs `weft agent`.
pub async fn main(args: AgentArgs) -> ExitCode {
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            emit(&json!({"event": "error", "problem": e.to_json()}));
            ExitCode::FAILURE
        }
    }
}

async fn run(args: AgentArgs) -> Result<(), CallError> {
    let cfg = |m: String| CallError::from(FramesError::InvalidMessage(m));
    let model = agent_model(&args)?;
    let client = Client::new(
        &args.base_url,
        Some(args.token.clone()),
        args.allow_insecure_http,
    )
    .map_err(cfg)?;
    let manifest = controller::discover(&client).await?;
    let adapter: Box<dyn DecisionAdapter> = match args.adapter.as_str() {
        "fixture" => Box::new(FixtureAdapter),
        "model" => match &model {
            Some(m) => Box::new(ModelAdapter { model: m.clone() }),
            None => Box::new(FixtureAdapter),
        },
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
        other => {
            return Err(cfg(format!(
                "unknown adapter `{other}` (fixture, http or model)"
            )));
        }
    };
    let text: Box<dyn TextService> = match (&args.text_service_url, &model) {
        (Some(url), _) => Box::new(HttpText {
            client: Client::new(url, None, args.allow_insecure_http).map_err(cfg)?,
            url: url.clone(),
        }),
        (None, Some(m)) if args.text == "model" => Box::new(ModelText { model: m.clone() }),
        (None, _) => Box::new(FixtureText),
    };
    let ctl = Arc::new(Controller::new(
        client,
        &manifest,
        adapter,
        text,
        args.max_service_calls,
    ));
    let surfaces: Vec<String> = if args.surface.is_empty() {
        ctl.surfaces()
            .await?
            .iter()
            .filter_map(|s| s["surface_id"].as_str().map(str::to_owned))
            .collect()
    } else {
        args.surface.clone()
    };
    let opts = RunOptions {
        steps: args.steps,
        speculative: args.speculative,
    };
    let gate = Arc::new(tokio::sync::Semaphore::new(args.parallel as usize));
    let mut tasks = Vec::new();
    for sid in surfaces {
        let (ctl, gate) = (ctl.clone(), gate.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await;
            ctl.run_surface(&sid, opts, StopSignal::never(), &mut |e| emit(e))
                .await
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}
