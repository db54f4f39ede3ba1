//! Real models for the native host: a `reqwest` (rustls) client that drives the core's sans-IO
//! [`ModelCall`] — it only moves bytes and arms the one timer the machine asks for. Request
//! building, status classification, retries, stream decoding and deadlines are the core's.
//!
//! - [`drive`] runs one call to its `Done` (sending each `Send`, reporting heads, bodies, ends
//!   and transport errors, honouring `poll_timeout` with a Tokio timer, forwarding events).
//!   Dropping its future drops the connection, which is how an interrupt aborts a stream.
//! - [`ReqwestModel`] is an [`AsyncModel`] for [`AgentHost`](crate::agent_host::AgentHost):
//!   each session step becomes one [`ModelCall`]; deltas go to the receiver of
//!   [`ReqwestModel::deltas`].
//! - [`HostModel`] is what a host runs: a real model, or the built-in one when no model is
//!   configured ([`HostModel::from_choice`], [`ModelFlags`] for command lines).

use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use weft_core::Mono;
use weft_core::model::builtin::{BuiltinModel, HOW_TO_CONFIGURE};
use weft_core::model::{
    CallOutput, CallTimeouts, ChatMessage, ChatRequest, HttpRequest, MAX_ERROR_BODY, ModelCall,
    ModelChoice, ModelConfig, ModelError, Provider, RetryPolicy, StreamEvent,
};
use weft_core::tools::{ModelAdapter, ModelRequest, ModelResponse, StepId, TurnId};

use crate::agent_host::{AsyncModel, BoxFuture};

/// A stream event of one session step, as [`ReqwestModel`] forwards it.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelDelta {
    pub turn: TurnId,
    pub step: StepId,
    pub event: StreamEvent,
}

impl ModelDelta {
    /// The JSON line form: `{"output": "model_delta", "turn", "step", "delta": {"type", ...}}`.
    pub fn to_json(&self) -> Value {
        json!({
            "output": "model_delta",
            "turn": self.turn.0,
            "step": self.step.0,
            "delta": serde_json::to_value(&self.event).expect("stream events serialize"),
        })
    }
}

/// An HTTPS-capable client for model providers (rustls with the webpki roots).
pub fn http_client() -> Result<reqwest::Client, ModelError> {
    reqwest::Client::builder()
        .user_agent(concat!("weft/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| ModelError::InvalidConfig(format!("cannot build the HTTP client: {e}")))
}

/// The connection of the attempt in flight.
enum Conn {
    /// No request in flight (waiting for a retry, or before the first `Send`).
    Idle,
    /// Sent; waiting for the head.
    Head(BoxFuture<Result<reqwest::Response, reqwest::Error>>),
    /// A 2xx answer being streamed.
    Stream(reqwest::Response),
    /// A non-2xx answer whose (bounded) body is being read.
    ErrorBody(reqwest::Response, Vec<u8>),
}

/// What happened on the connection.
enum Happened {
    Head(reqwest::Response),
    HeadFailed(String),
    Chunk(bytes::Bytes),
    End,
    BodyFailed(String),
}

async fn next(conn: &mut Conn) -> Happened {
    match conn {
        Conn::Idle => std::future::pending().await,
        Conn::Head(f) => match f.await {
            Ok(r) => Happened::Head(r),
            Err(e) => Happened::HeadFailed(error_text(&e)),
        },
        Conn::Stream(r) | Conn::ErrorBody(r, _) => match r.chunk().await {
            Ok(Some(b)) => Happened::Chunk(b),
            Ok(None) => Happened::End,
            Err(e) => Happened::BodyFailed(error_text(&e)),
        },
    }
}

/// An error with its causes (reqwest's own text is often just "error sending request").
fn error_text(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

fn send(client: &reqwest::Client, request: HttpRequest) -> Conn {
    let mut b = client.post(&request.url);
    for (k, v) in &request.headers {
        b = b.header(k, v);
    }
    let fut = b.body(request.body).send();
    Conn::Head(Box::pin(fut))
}

/// Runs `call` to its `Done` over `client`: sends each request, reports what the connection
/// does, honours the machine's deadline and passes every stream event to `on_event`.
///
/// `start` is the instant the call's `now` counts from (the instant `call` was created at
/// time 0). Returning (or dropping this future) drops the connection.
pub async fn drive(
    client: &reqwest::Client,
    call: &mut ModelCall,
    start: Instant,
    on_event: &mut (dyn FnMut(StreamEvent) + Send),
) -> Result<ModelResponse, ModelError> {
    let now = || Mono::from_ms(start.elapsed().as_millis() as u64);
    let mut conn = Conn::Idle;
    loop {
        while let Some(o) = call.poll_output() {
            match o {
                CallOutput::Send { request, .. } => conn = send(client, request),
                CallOutput::Event(e) => on_event(e),
                CallOutput::Done(r) => return r,
            }
        }
        let deadline = call.poll_timeout();
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(start + Duration::from_millis(d.as_ms())).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            h = next(&mut conn) => match h {
                Happened::Head(r) => {
                    let status = r.status().as_u16();
                    let retry_after = r
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    call.on_head(now(), status, retry_after.as_deref());
                    conn = if call.wants_error_body() {
                        Conn::ErrorBody(r, Vec::new())
                    } else {
                        Conn::Stream(r)
                    };
                }
                Happened::HeadFailed(m) => {
                    conn = Conn::Idle;
                    call.on_transport_error(now(), &m);
                }
                Happened::Chunk(b) => match &mut conn {
                    Conn::ErrorBody(_, buf) => {
                        let room = MAX_ERROR_BODY - buf.len();
                        buf.extend_from_slice(&b[..b.len().min(room)]);
                        if buf.len() >= MAX_ERROR_BODY {
                            let body = std::mem::take(buf);
                            conn = Conn::Idle;
                            call.on_error_body(now(), &body);
                        }
                    }
                    _ => call.on_body(now(), &b),
                },
                Happened::End => match std::mem::replace(&mut conn, Conn::Idle) {
                    Conn::ErrorBody(_, body) => call.on_error_body(now(), &body),
                    _ => call.on_end(now()),
                },
                Happened::BodyFailed(m) => match std::mem::replace(&mut conn, Conn::Idle) {
                    // An error body cut short is still the provider's error.
                    Conn::ErrorBody(_, body) => call.on_error_body(now(), &body),
                    _ => call.on_transport_error(now(), &m),
                },
            },
            _ = sleep => {
                call.handle_timeout(now());
            }
        }
    }
}

/// A real model behind the model seam of [`AgentHost`](crate::agent_host::AgentHost).
#[derive(Clone, Debug)]
pub struct ReqwestModel {
    client: reqwest::Client,
    config: ModelConfig,
    system: Option<String>,
    prelude: Vec<ChatMessage>,
    /// The retry rule's parameters (the rule itself is the core's).
    pub policy: RetryPolicy,
    /// The step's deadlines.
    pub timeouts: CallTimeouts,
    deltas: Option<mpsc::UnboundedSender<ModelDelta>>,
}

impl ReqwestModel {
    /// A client of `config`'s model.
    pub fn new(config: ModelConfig) -> Result<Self, ModelError> {
        Ok(ReqwestModel {
            client: http_client()?,
            config,
            system: None,
            prelude: Vec::new(),
            policy: RetryPolicy::default(),
            timeouts: CallTimeouts::default(),
            deltas: None,
        })
    }

    /// The configuration it talks to.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Sets the system text of every step.
    pub fn with_system(mut self, system: Option<String>) -> Self {
        self.system = system.filter(|s| !s.is_empty());
        self
    }

    /// Earlier conversation (kept outside the session, e.g. a node's chat) put before the
    /// session's transcript in every step.
    pub fn with_prelude(mut self, prelude: Vec<ChatMessage>) -> Self {
        self.prelude = prelude;
        self
    }

    /// A receiver of every step's stream events, in order, as they arrive (replaces an
    /// earlier receiver).
    pub fn deltas(&mut self) -> mpsc::UnboundedReceiver<ModelDelta> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.deltas = Some(tx);
        rx
    }

    /// The request of a session step: the prelude, then the session's transcript.
    pub fn chat_request(&self, request: &ModelRequest<'_, Value>) -> ChatRequest {
        let mut chat = ChatRequest::from_session(self.system.as_deref(), request);
        if !self.prelude.is_empty() {
            chat.messages.splice(0..0, self.prelude.iter().cloned());
        }
        chat
    }

    /// Asks the model `chat` once (with the core's retries), passing stream events to
    /// `on_event`.
    pub async fn ask(
        &self,
        chat: &ChatRequest,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<ModelResponse, ModelError> {
        let start = Instant::now();
        let mut call = ModelCall::new(Mono::ZERO, &self.config, chat, self.policy, self.timeouts);
        drive(&self.client, &mut call, start, on_event).await
    }
}

impl AsyncModel for ReqwestModel {
    fn respond(
        &mut self,
        request: &ModelRequest<'_, Value>,
    ) -> BoxFuture<Result<ModelResponse, String>> {
        let chat = self.chat_request(request);
        let (turn, step) = (request.turn, request.step);
        let this = self.clone();
        Box::pin(async move {
            let tx = this.deltas.clone();
            let mut sink = move |event: StreamEvent| {
                if let Some(tx) = &tx {
                    let _ = tx.send(ModelDelta { turn, step, event });
                }
            };
            this.ask(&chat, &mut sink)
                .await
                .map_err(|e| e.step_message())
        })
    }
}

/// Command-line flags that choose a model (shared by `weft chat` and other commands).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ModelFlags {
    /// The model, `PROVIDER:NAME` (`openai:gpt-4o-mini`, `anthropic:claude-3-5-haiku-latest`,
    /// `openai:llama3.2` with a base URL) or `PROVIDER` for its default model.
    #[arg(long, env = "WEFT_MODEL")]
    pub model: Option<String>,
    /// The provider's base URL; any OpenAI-compatible server (Ollama, llama.cpp, vLLM, LM
    /// Studio, OpenRouter), e.g. `http://127.0.0.1:11434/v1`.
    #[arg(long, env = "WEFT_MODEL_BASE_URL")]
    pub base_url: Option<String>,
    /// The environment variable holding the key (default: OPENAI_API_KEY / ANTHROPIC_API_KEY).
    #[arg(long)]
    pub api_key_env: Option<String>,
}

impl ModelFlags {
    /// The choice these flags and the process environment make.
    pub fn choice(&self) -> ModelChoice {
        model_choice(
            self.model.clone(),
            self.base_url.clone(),
            self.api_key_env.as_deref(),
            &|k| std::env::var(k).ok(),
        )
    }
}

/// Collects a [`ModelChoice`]: the keys from `OPENAI_API_KEY` and `ANTHROPIC_API_KEY`, or, with
/// `api_key_env`, from that variable for the provider `model` names (OpenAI-compatible when it
/// names none). `env` reads a variable.
pub fn model_choice(
    model: Option<String>,
    base_url: Option<String>,
    api_key_env: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> ModelChoice {
    let mut c = ModelChoice {
        openai_key: env(Provider::OpenAi.key_env()),
        anthropic_key: env(Provider::Anthropic.key_env()),
        model,
        base_url,
        max_tokens: None,
    };
    if let Some(name) = api_key_env {
        let key = env(name);
        let named = c
            .model
            .as_deref()
            .and_then(|m| Provider::parse(m.split(':').next().unwrap_or("").trim()).ok());
        match named.unwrap_or(Provider::OpenAi) {
            Provider::OpenAi => c.openai_key = key,
            Provider::Anthropic => c.anthropic_key = key,
        }
    }
    c
}

/// The model a host runs: a real one, or the built-in stand-in when none is configured.
#[derive(Debug)]
pub enum HostModel {
    /// A configured provider.
    Remote(ReqwestModel),
    /// No model is configured: the deterministic built-in model answers (and says so).
    Builtin {
        deltas: Option<mpsc::UnboundedSender<ModelDelta>>,
    },
}

impl HostModel {
    /// The model `choice` names, or the built-in model when [`ModelConfig::resolve`] says
    /// none is configured. An invalid choice is an error (nothing falls back silently).
    pub fn from_choice(choice: &ModelChoice) -> Result<HostModel, ModelError> {
        Ok(match ModelConfig::resolve(choice)? {
            Some(config) => HostModel::Remote(ReqwestModel::new(config)?),
            None => HostModel::Builtin { deltas: None },
        })
    }

    /// The note a host prints when no model is configured (`None` for a real model).
    pub fn note(&self) -> Option<String> {
        match self {
            HostModel::Remote(_) => None,
            HostModel::Builtin { .. } => Some(format!(
                "no model configured: {HOW_TO_CONFIGURE}; answering with the built-in model"
            )),
        }
    }

    /// `provider:model`, or `builtin`.
    pub fn label(&self) -> String {
        match self {
            HostModel::Remote(m) => m.config().label(),
            HostModel::Builtin { .. } => "builtin".into(),
        }
    }

    /// A receiver of every step's stream events (the built-in model sends its answer as one
    /// text delta).
    pub fn deltas(&mut self) -> mpsc::UnboundedReceiver<ModelDelta> {
        match self {
            HostModel::Remote(m) => m.deltas(),
            HostModel::Builtin { deltas } => {
                let (tx, rx) = mpsc::unbounded_channel();
                *deltas = Some(tx);
                rx
            }
        }
    }

    /// Sets the system text (the built-in model ignores it).
    pub fn with_system(self, system: Option<String>) -> Self {
        match self {
            HostModel::Remote(m) => HostModel::Remote(m.with_system(system)),
            b => b,
        }
    }

    /// Sets the earlier conversation (the built-in model ignores it).
    pub fn with_prelude(self, prelude: Vec<ChatMessage>) -> Self {
        match self {
            HostModel::Remote(m) => HostModel::Remote(m.with_prelude(prelude)),
            b => b,
        }
    }
}

impl AsyncModel for HostModel {
    fn respond(
        &mut self,
        request: &ModelRequest<'_, Value>,
    ) -> BoxFuture<Result<ModelResponse, String>> {
        match self {
            HostModel::Remote(m) => AsyncModel::respond(m, request),
            HostModel::Builtin { deltas } => {
                let answer = ModelAdapter::respond(&mut BuiltinModel, request);
                if let (Some(tx), Ok(r)) = (deltas.as_ref(), &answer)
                    && let Some(text) = &r.text
                {
                    let _ = tx.send(ModelDelta {
                        turn: request.turn,
                        step: request.step,
                        event: StreamEvent::TextDelta { text: text.clone() },
                    });
                }
                Box::pin(async move { answer })
            }
        }
    }
}
