//! Model providers as sans-IO codecs: the wire formats of OpenAI Chat Completions and Anthropic
//! Messages (both streaming), the rules that classify a provider's answer, and the retry rule.
//!
//! The core never opens a connection. A host asks a model like this:
//!
//! 1. [`ModelConfig::resolve`] turns what the user configured (a `provider:model` name, a base
//!    URL, the key the host read from the environment) into a [`ModelConfig`], or says that no
//!    model is configured (the host then uses [`builtin::BuiltinModel`] and says so).
//! 2. [`ChatRequest::from_session`] builds the provider-neutral request of one session step
//!    (system text, transcript, the step's tool snapshot); [`encode_request`] turns it into an
//!    [`HttpRequest`] (URL, headers, JSON body with `stream: true`).
//! 3. The host sends it. On a non-2xx status it reads the body and calls [`classify_status`];
//!    [`RetryPolicy::delay`] says whether and when to try again (rate limits, overload).
//! 4. On 2xx it feeds the body bytes, as they arrive, into a [`StreamDecoder`]
//!    ([`StreamDecoder::feed`]) and drains [`StreamDecoder::poll_event`] after every chunk:
//!    text deltas, tool-call starts and argument deltas, usage, the finish reason. At end of
//!    stream it calls [`StreamDecoder::finish`], which returns the assembled
//!    [`ModelResponse`](crate::tools::ModelResponse) (text, calls with their arguments put
//!    together across chunks, usage) or the coded error.
//! 5. The host reports the response (or the error's message) to the session. An interrupt
//!    drops the stream: no partial tool call ever reaches the session.
//!
//! [`ModelCall`] puts steps 2–5 together as one machine with its deadlines and retries, in
//! the `poll_output` / `poll_timeout` shape of the job registry: hosts drive it and only move
//! bytes and arm a timer.
//!
//! # Call order
//!
//! In full in `call.rs` (the machine [`ModelCall`]); in short:
//!
//! ```text
//! let mut call = ModelCall::new(now, config, &request, ..);
//! loop {
//!     while let Some(out) = call.poll_output() {    // drain after every input
//!         Send(http) → send it; Event(e) → pass it on; Done(r) → the step's answer, last
//!     }
//!     wait for: the answer's head → on_head(now, ..); a body chunk → on_body / on_error_body;
//!     its end → on_end(now); a failed connection → on_transport_error;
//!     call.poll_timeout() → handle_timeout(now); an interrupt → abort(reason)
//! }
//! ```
//!
//! Every error is a [`ModelError`] with a stable code (`MODEL_AUTH`, `MODEL_RATE_LIMITED`, ...).

pub mod builtin;
mod call;
mod decode;
mod request;
mod sse;
mod status;
#[cfg(feature = "conformance")]
pub mod vectors;

pub use call::{CallOutput, CallTimeouts, MAX_ERROR_BODY, ModelCall};
pub use decode::{StreamDecoder, StreamEvent};
pub use request::{ChatMessage, ChatRequest, HttpRequest, ToolSpec, UserPart, encode_request};
pub use sse::{SseEvent, SseParser};
pub use status::{RetryPolicy, classify_status, parse_retry_after};

use serde::Serialize;
use thiserror::Error;

/// Errors of model providers. Each has a stable code (see [`ModelError::code`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The provider refused the key (HTTP 401/403, or an authentication error event).
    #[error("the model provider refused the credentials: {0}")]
    Auth(String),
    /// Too many requests (HTTP 429); `retry_after_ms` is the provider's `Retry-After`, if any.
    #[error("the model provider is rate limiting requests: {message}")]
    RateLimited {
        message: String,
        retry_after_ms: Option<u64>,
    },
    /// The provider is overloaded (HTTP 529/503, or an overloaded error event).
    #[error("the model provider is overloaded: {0}")]
    Overloaded(String),
    /// The request does not fit the model's context window.
    #[error("the request is too long for the model's context: {0}")]
    ContextTooLong(String),
    /// The stream or body is not what the provider's format promises (malformed SSE, invalid
    /// JSON, a truncated stream).
    #[error("the model provider sent a malformed response: {0}")]
    BadResponse(String),
    /// No answer within the host's deadline.
    #[error("the model did not answer in time: {0}")]
    Timeout(String),
    /// The step was interrupted and its stream dropped.
    #[error("the model step was aborted: {0}")]
    Aborted(String),
    /// Any other provider error (an HTTP status or error event the rules above do not name).
    #[error("the model provider answered with an error (HTTP {status}): {message}")]
    Provider { status: u16, message: String },
    /// The connection failed before an answer (DNS, refused, TLS, reset).
    #[error("could not reach the model provider: {0}")]
    Connect(String),
    /// The configuration names no usable model (unknown provider, a provider without a key).
    #[error("invalid model configuration: {0}")]
    InvalidConfig(String),
}

impl ModelError {
    /// The stable string code, as JS `.code`, HTTP problem `code` and CLI output.
    pub fn code(&self) -> &'static str {
        match self {
            ModelError::Auth(_) => "MODEL_AUTH",
            ModelError::RateLimited { .. } => "MODEL_RATE_LIMITED",
            ModelError::Overloaded(_) => "MODEL_OVERLOADED",
            ModelError::ContextTooLong(_) => "MODEL_CONTEXT_TOO_LONG",
            ModelError::BadResponse(_) => "MODEL_BAD_RESPONSE",
            ModelError::Timeout(_) => "MODEL_TIMEOUT",
            ModelError::Aborted(_) => "MODEL_ABORTED",
            ModelError::Provider { .. } => "MODEL_PROVIDER_ERROR",
            ModelError::Connect(_) => "MODEL_CONNECT",
            ModelError::InvalidConfig(_) => "MODEL_INVALID_CONFIG",
        }
    }

    /// The text a session records for a failed step: `CODE: message`, so the code survives
    /// into the transcript and the turn's end.
    pub fn step_message(&self) -> String {
        format!("{}: {self}", self.code())
    }

    /// The JSON form `{"code", "message", "retryAfterMs"?, "status"?}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({"code": self.code(), "message": self.to_string()});
        match self {
            ModelError::RateLimited {
                retry_after_ms: Some(ms),
                ..
            } => v["retryAfterMs"] = (*ms).into(),
            ModelError::Provider { status, .. } => v["status"] = (*status).into(),
            _ => {}
        }
        v
    }
}

impl crate::ErrorCode for ModelError {
    fn code(&self) -> &'static str {
        ModelError::code(self)
    }
}

/// The code a host shows when no model is configured (it then answers with the built-in model).
pub const NO_MODEL_CONFIGURED: &str = "MODEL_NOT_CONFIGURED";

/// The wire format a model speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// OpenAI Chat Completions (`POST {base}/chat/completions`) and every compatible server
    /// (Ollama, llama.cpp server, vLLM, LM Studio, OpenRouter).
    OpenAi,
    /// Anthropic Messages (`POST {base}/v1/messages`).
    Anthropic,
}

impl Provider {
    /// Parses `openai` / `anthropic` (also `openai-compatible`, `claude`).
    pub fn parse(name: &str) -> Result<Provider, ModelError> {
        match name.to_ascii_lowercase().as_str() {
            "openai" | "openai-compatible" | "oai" => Ok(Provider::OpenAi),
            "anthropic" | "claude" => Ok(Provider::Anthropic),
            other => Err(ModelError::InvalidConfig(format!(
                "unknown model provider `{other}` (use openai or anthropic)"
            ))),
        }
    }

    /// The provider's name (`openai`, `anthropic`).
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
        }
    }

    /// The environment variable hosts read the key from by default.
    pub fn key_env(self) -> &'static str {
        match self {
            Provider::OpenAi => "OPENAI_API_KEY",
            Provider::Anthropic => "ANTHROPIC_API_KEY",
        }
    }

    /// The provider's public endpoint, used when no base URL is given.
    pub fn default_base_url(self) -> &'static str {
        match self {
            Provider::OpenAi => "https://api.openai.com/v1",
            Provider::Anthropic => "https://api.anthropic.com",
        }
    }

    /// The model used when only a key is configured.
    pub fn default_model(self) -> &'static str {
        match self {
            Provider::OpenAi => "gpt-4o-mini",
            Provider::Anthropic => "claude-3-5-haiku-latest",
        }
    }
}

/// Everything needed to talk to one model.
#[derive(Clone, PartialEq, Eq)]
pub struct ModelConfig {
    pub provider: Provider,
    /// The provider's model name (`gpt-4o-mini`, `claude-3-5-haiku-latest`, `llama3.2`).
    pub model: String,
    /// Without a trailing slash. OpenAI-style base URLs include the API version (`.../v1`).
    pub base_url: String,
    /// Sent as `Authorization: Bearer` (OpenAI) or `x-api-key` (Anthropic); local servers need none.
    pub api_key: Option<String>,
    /// The most output tokens a step may produce (Anthropic requires it; sent to OpenAI too).
    pub max_tokens: u32,
    /// Whether the model may select several tool calls in one step.
    pub parallel_tool_calls: bool,
    /// The request comes from a browser page: Anthropic then needs its opt-in header for
    /// direct browser access (CORS). Set by the JS host in browsers.
    pub direct_browser_access: bool,
}

impl std::fmt::Debug for ModelConfig {
    // The key never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelConfig")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("max_tokens", &self.max_tokens)
            .field("parallel_tool_calls", &self.parallel_tool_calls)
            .field("direct_browser_access", &self.direct_browser_access)
            .finish()
    }
}

/// What the user configured, as a host collected it (flags, options, the environment).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelChoice {
    /// `PROVIDER:NAME` (`openai:gpt-4o-mini`), `PROVIDER` alone, or empty.
    pub model: Option<String>,
    /// A base URL (any OpenAI-compatible server when no provider is named).
    pub base_url: Option<String>,
    /// The OpenAI key the host found (`OPENAI_API_KEY` or the variable the user named).
    pub openai_key: Option<String>,
    /// The Anthropic key the host found.
    pub anthropic_key: Option<String>,
    pub max_tokens: Option<u32>,
}

impl ModelChoice {
    /// Parses the JSON form hosts pass across a boundary: `{"model"?, "baseUrl"?,
    /// "openaiKey"?, "anthropicKey"?, "maxTokens"?}` (strings; absent members are unset).
    pub fn from_json(v: &serde_json::Value) -> ModelChoice {
        let s = |k: &str| v[k].as_str().map(str::to_owned);
        ModelChoice {
            model: s("model"),
            base_url: s("baseUrl"),
            openai_key: s("openaiKey"),
            anthropic_key: s("anthropicKey"),
            max_tokens: v["maxTokens"]
                .as_u64()
                .map(|n| n.min(u32::MAX as u64) as u32),
        }
    }
}

/// The default output budget of a step.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

impl ModelConfig {
    /// Decides which model a choice names. `Ok(None)` means no model is configured (no
    /// provider, no base URL, no key): the host says so and uses the built-in model.
    ///
    /// Rules: a named provider uses its key, and needs one unless a base URL points at a
    /// server of the user's own; a base URL without a provider is OpenAI-compatible; with
    /// neither, the first key found picks the provider (OpenAI, then Anthropic) and its
    /// default model.
    pub fn resolve(choice: &ModelChoice) -> Result<Option<ModelConfig>, ModelError> {
        fn nonempty(s: &Option<String>) -> Option<&str> {
            s.as_deref().filter(|s| !s.trim().is_empty())
        }
        let base = nonempty(&choice.base_url).map(|b| b.trim().trim_end_matches('/').to_owned());
        if let Some(b) = &base
            && !(b.starts_with("http://") || b.starts_with("https://"))
        {
            return Err(ModelError::InvalidConfig(format!(
                "the base URL `{b}` must start with http:// or https://"
            )));
        }
        let (provider, name) = match nonempty(&choice.model) {
            Some(m) => {
                let (p, n) = match m.split_once(':') {
                    Some((p, n)) => (p, Some(n.trim())),
                    None => (m, None),
                };
                let provider = Provider::parse(p.trim())?;
                (
                    Some(provider),
                    n.filter(|n| !n.is_empty()).map(str::to_owned),
                )
            }
            None => (None, None),
        };
        let key_of = |p: Provider| match p {
            Provider::OpenAi => nonempty(&choice.openai_key).map(str::to_owned),
            Provider::Anthropic => nonempty(&choice.anthropic_key).map(str::to_owned),
        };
        let provider = match provider {
            Some(p) => p,
            None if base.is_some() => Provider::OpenAi,
            None if key_of(Provider::OpenAi).is_some() => Provider::OpenAi,
            None if key_of(Provider::Anthropic).is_some() => Provider::Anthropic,
            None => return Ok(None),
        };
        let api_key = key_of(provider);
        if api_key.is_none() && base.is_none() {
            return Err(ModelError::InvalidConfig(format!(
                "{} needs a key: set {} (or name another variable), or give a base URL of a \
                 server that needs none",
                provider.as_str(),
                provider.key_env()
            )));
        }
        let model = match name {
            Some(n) => n,
            None if base.is_some() && provider == Provider::OpenAi && api_key.is_none() => {
                return Err(ModelError::InvalidConfig(
                    "name the model the server should run: --model openai:NAME".into(),
                ));
            }
            None => provider.default_model().to_owned(),
        };
        Ok(Some(ModelConfig {
            provider,
            model,
            base_url: base.unwrap_or_else(|| provider.default_base_url().to_owned()),
            api_key,
            max_tokens: choice.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            parallel_tool_calls: true,
            direct_browser_access: false,
        }))
    }

    /// `provider:model`, for display.
    pub fn label(&self) -> String {
        format!("{}:{}", self.provider.as_str(), self.model)
    }
}

/// Token counts a provider reported for one step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

#[cfg(test)]
mod tests;
