//! What a provider's non-success answer means, and when to ask again.

use serde_json::Value;

use super::ModelError;

/// Parses a `Retry-After` value given in seconds (integer or decimal). An HTTP date cannot be
/// read without a clock; it yields `None` and the backoff rule applies.
pub fn parse_retry_after(value: &str) -> Option<u64> {
    let v = value.trim();
    let secs: f64 = v.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| (secs * 1000.0).ceil() as u64)
}

/// The provider's error message in a JSON error body (`{"error": {"message"}}` in both
/// formats), else the body's text, shortened.
fn body_message(body: &[u8]) -> (String, String) {
    let text = String::from_utf8_lossy(body);
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => {
            let e = if v["error"].is_object() {
                &v["error"]
            } else {
                &v
            };
            let message = e["message"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| shorten(&text));
            let kind = e["code"]
                .as_str()
                .or(e["type"].as_str())
                .unwrap_or("")
                .to_owned();
            (message, kind)
        }
        Err(_) => (shorten(&text), String::new()),
    }
}

fn shorten(s: &str) -> String {
    let s = s.trim();
    if s.is_empty() {
        return "(no body)".into();
    }
    match s.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

fn too_long(message: &str, kind: &str) -> bool {
    let m = message.to_ascii_lowercase();
    kind == "context_length_exceeded"
        || kind == "request_too_large"
        || m.contains("context length")
        || m.contains("context window")
        || m.contains("prompt is too long")
        || m.contains("maximum context")
        || m.contains("too many tokens")
}

/// Classifies a non-2xx answer: its status, its `Retry-After` header and its body.
pub fn classify_status(status: u16, retry_after: Option<&str>, body: &[u8]) -> ModelError {
    let (message, kind) = body_message(body);
    match status {
        401 | 403 => ModelError::Auth(format!("HTTP {status}: {message}")),
        429 => ModelError::RateLimited {
            message,
            retry_after_ms: retry_after.and_then(parse_retry_after),
        },
        503 | 529 => ModelError::Overloaded(format!("HTTP {status}: {message}")),
        408 | 504 => ModelError::Timeout(format!("HTTP {status}: {message}")),
        400 | 413 if too_long(&message, &kind) => ModelError::ContextTooLong(message),
        _ => ModelError::Provider {
            status,
            message: format!("HTTP {status}: {message}"),
        },
    }
}

/// Classifies an error reported inside a stream (OpenAI `data: {"error": ...}`, Anthropic
/// `event: error`), by its `type`/`code` and message.
pub(crate) fn classify_stream_error(error: &Value) -> ModelError {
    let message = error["message"]
        .as_str()
        .unwrap_or("an error event without a message")
        .to_owned();
    let kind = error["type"]
        .as_str()
        .or(error["code"].as_str())
        .unwrap_or("");
    match kind {
        "overloaded_error" | "server_overloaded" => ModelError::Overloaded(message),
        "rate_limit_error" | "rate_limit_exceeded" | "insufficient_quota" => {
            ModelError::RateLimited {
                message,
                retry_after_ms: None,
            }
        }
        "authentication_error" | "permission_error" | "invalid_api_key" => {
            ModelError::Auth(message)
        }
        k if too_long(&message, k) => ModelError::ContextTooLong(message),
        _ => ModelError::Provider {
            status: 200,
            message: format!("error event in the stream ({kind}): {message}"),
        },
    }
}

/// When a host asks again after an error answered before any of the stream was read.
///
/// Only rate limits and overload are retried. A `Retry-After` is honoured exactly when it is
/// within `max_delay_ms`; a longer one is not retried (the error carries it). Without one,
/// the delay doubles from `base_delay_ms` per attempt, bounded by `max_delay_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    pub base_delay_ms: u64,
    pub max_delay_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            base_delay_ms: 1_000,
            max_delay_ms: 20_000,
        }
    }
}

impl RetryPolicy {
    /// The delay before attempt `attempts + 1`, after `attempts` attempts ended with `error`;
    /// `None` when the error stands.
    pub fn delay(&self, attempts: u32, error: &ModelError) -> Option<u64> {
        if attempts >= self.max_attempts {
            return None;
        }
        let backoff = self
            .base_delay_ms
            .saturating_mul(1 << attempts.saturating_sub(1).min(20))
            .min(self.max_delay_ms);
        match error {
            ModelError::RateLimited {
                retry_after_ms: Some(ms),
                ..
            } => (*ms <= self.max_delay_ms).then_some(*ms),
            ModelError::RateLimited { .. } | ModelError::Overloaded(_) => Some(backoff),
            _ => None,
        }
    }

    /// Parses `{"maxAttempts"?, "baseDelayMs"?, "maxDelayMs"?}` over the defaults.
    pub fn from_json(v: &Value) -> RetryPolicy {
        let d = RetryPolicy::default();
        RetryPolicy {
            max_attempts: v["maxAttempts"]
                .as_u64()
                .map(|n| n.clamp(1, 10) as u32)
                .unwrap_or(d.max_attempts),
            base_delay_ms: v["baseDelayMs"].as_u64().unwrap_or(d.base_delay_ms),
            max_delay_ms: v["maxDelayMs"].as_u64().unwrap_or(d.max_delay_ms),
        }
    }
}
