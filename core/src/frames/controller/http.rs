//! The controller's HTTP rules, the same for every host: which base URLs a controller may send
//! credentials to, which server links it follows, what an answer means (a value, a problem the
//! server answered with, or a transport failure whose outcome is unknown), and the codes of the
//! failures a controller reports itself.

use core::net::IpAddr;

use serde_json::{Value, json};

use crate::frames::FramesError;

/// No usable answer (connection failure, timeout, unreadable body): the outcome is unknown.
pub const TRANSPORT_ERROR: &str = "TRANSPORT_ERROR";
/// A server link that leaves the configured origin (never followed, credentials never sent).
pub const UNTRUSTED_LINK: &str = "UNTRUSTED_LINK";
/// The controller's text-service budget is spent (see [`super::run::ServiceBudget`]).
pub const CLIENT_BUDGET_EXHAUSTED: &str = "CLIENT_BUDGET_EXHAUSTED";
/// A decision adapter or text service failed without naming a code.
pub const ADAPTER_ERROR: &str = "ADAPTER_ERROR";
/// An input node needs text and the host has no text service to ask.
pub const SERVICE_UNAVAILABLE: &str = "SERVICE_UNAVAILABLE";
/// How long a host waits for one answer before reporting a transport failure.
pub const REQUEST_TIMEOUT_MS: u64 = 30_000;
/// The largest answer a host reads.
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// A failure as a run reports it: a problem a server answered with (`status`, `code`,
/// `detail`), a local refusal (a [`FramesError`] with its HTTP status, or status 0 for the
/// controller's own checks), or a transport failure (`code` [`TRANSPORT_ERROR`], no status).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The HTTP status (0 for a local refusal the protocol gives no status); none for a
    /// transport failure.
    pub status: Option<u16>,
    /// The stable code (`STALE_FRAME`, `TRANSPORT_ERROR`, ...).
    pub code: String,
    /// What happened, for a human.
    pub detail: String,
}

impl Problem {
    /// A transport failure: no usable answer, the outcome is unknown.
    pub fn transport(detail: impl Into<String>) -> Problem {
        Problem {
            status: None,
            code: TRANSPORT_ERROR.into(),
            detail: detail.into(),
        }
    }

    /// An input node's text was asked of a host that has no text service (a local refusal).
    pub fn no_text_service() -> Problem {
        Problem {
            status: Some(0),
            code: SERVICE_UNAVAILABLE.into(),
            detail: "no text service is configured for input nodes".into(),
        }
    }

    /// A problem with a status and code.
    pub fn new(status: u16, code: impl Into<String>, detail: impl Into<String>) -> Problem {
        Problem {
            status: Some(status),
            code: code.into(),
            detail: detail.into(),
        }
    }

    /// Whether the outcome of the request is unknown (it may or may not have been applied).
    pub fn is_transport(&self) -> bool {
        self.code == TRANSPORT_ERROR
    }

    /// The event-log form: `{"status", "code", "detail"}` (no `status` for a transport failure).
    pub fn to_json(&self) -> Value {
        match self.status {
            Some(s) => json!({"status": s, "code": self.code, "detail": self.detail}),
            None => json!({"code": self.code, "detail": self.detail}),
        }
    }

    /// Reads the event-log form back (a missing `code` is [`ADAPTER_ERROR`]).
    pub fn from_json(v: &Value) -> Problem {
        Problem {
            status: v["status"].as_u64().map(|s| s.min(u16::MAX as u64) as u16),
            code: v["code"].as_str().unwrap_or(ADAPTER_ERROR).to_owned(),
            detail: v["detail"].as_str().unwrap_or("").to_owned(),
        }
    }
}

impl From<&FramesError> for Problem {
    fn from(e: &FramesError) -> Problem {
        Problem::new(e.http_status(), e.code(), e.to_string())
    }
}

impl From<FramesError> for Problem {
    fn from(e: FramesError) -> Problem {
        Problem::from(&e)
    }
}

/// What came back for a request: an answer (any status), or none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpAnswer {
    /// The server answered.
    Answered {
        /// The HTTP status.
        status: u16,
        /// The body (at most [`MAX_ANSWER_BYTES`]).
        body: Vec<u8>,
    },
    /// No usable answer (connection failure, timeout, a body cut short): what happened.
    Failed(String),
}

/// An answer's JSON value. A non-2xx status is the problem the body names (`HTTP_<status>`
/// without a code); a 2xx body that is not JSON, like no answer at all, is a transport failure.
pub fn answer_json(answer: HttpAnswer) -> Result<Value, Problem> {
    let (status, body) = match answer {
        HttpAnswer::Answered { status, body } => (status, body),
        HttpAnswer::Failed(m) => return Err(Problem::transport(m)),
    };
    let value = serde_json::from_slice::<Value>(&body);
    if !(200..300).contains(&status) {
        let v = value.unwrap_or(Value::Null);
        return Err(Problem::new(
            status,
            v["code"]
                .as_str()
                .map_or_else(|| format!("HTTP_{status}"), str::to_owned),
            v["detail"].as_str().unwrap_or(""),
        ));
    }
    value.map_err(|e| Problem::transport(format!("unreadable JSON answer: {e}")))
}

/// The link of the surface list a discovery document names; a server that does not speak
/// DGP 0.1 is refused.
pub fn surfaces_link(manifest: &Value) -> Result<String, Problem> {
    if manifest["dgp"] != "0.1" {
        return Err(FramesError::InvalidMessage("the server does not speak DGP 0.1".into()).into());
    }
    Ok(manifest["links"]["surfaces"]
        .as_str()
        .unwrap_or("/dgp/surfaces")
        .to_owned())
}

/// The surfaces of a surface-list answer: `[{"surface_id", "title", "state", "revision", ...}]`.
pub fn surface_list(list: &Value) -> Vec<Value> {
    list["surfaces"].as_array().cloned().unwrap_or_default()
}

/// A DGP server's base URL, checked: `https://` anywhere, plain `http://` only to a loopback
/// host unless the caller insists (`allow_insecure_http`: the bearer token then travels
/// unencrypted). No userinfo, query or fragment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BaseUrl {
    base: String,
    origin: String,
}

impl BaseUrl {
    /// Checks `base` (`http[s]://host[:port][/prefix]`); the error says why it is refused.
    pub fn parse(base: &str, allow_insecure_http: bool) -> Result<BaseUrl, String> {
        let (secure, rest) = if let Some(r) = base.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = base.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(format!("`{base}` is not an http(s) URL"));
        };
        if base.contains(['@', '?', '#']) {
            return Err("the base URL must not contain userinfo, a query or a fragment".into());
        }
        let authority = rest.split('/').next().unwrap_or("");
        let host = match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(""),
            None => authority.split(':').next().unwrap_or(""),
        };
        if host.is_empty() || authority.chars().any(|c| c.is_whitespace() || c == '\\') {
            return Err(format!("bad URL `{base}`: the URL has no host"));
        }
        let loopback = host.eq_ignore_ascii_case("localhost")
            || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
        if !secure && !loopback && !allow_insecure_http {
            return Err(format!(
                "refusing to send credentials over plain HTTP to `{host}`; use https, or pass \
                 --allow-insecure-http (allowInsecureHttp in JS) to insist"
            ));
        }
        let scheme = if secure { "https" } else { "http" };
        Ok(BaseUrl {
            base: base.trim_end_matches('/').to_owned(),
            origin: format!("{scheme}://{}", authority.to_ascii_lowercase()),
        })
    }

    /// The base URL without a trailing `/`.
    pub fn as_str(&self) -> &str {
        &self.base
    }

    /// `scheme://authority`.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Resolves a server-provided link: an absolute path (below the base URL), or an absolute
    /// URL on the same origin. Anything else is [`UNTRUSTED_LINK`] (status 0): credentials are
    /// never sent elsewhere.
    pub fn resolve(&self, link: &str) -> Result<String, Problem> {
        if link.starts_with('/') && !link.starts_with("//") {
            return Ok(format!("{}{link}", self.base));
        }
        let same_origin = link.len() >= self.origin.len()
            && link.is_char_boundary(self.origin.len())
            && link[..self.origin.len()].eq_ignore_ascii_case(&self.origin)
            && matches!(link.as_bytes().get(self.origin.len()), None | Some(b'/'));
        if same_origin && !link.contains(['@', '\\']) {
            return Ok(link.to_owned());
        }
        Err(Problem::new(
            0,
            UNTRUSTED_LINK,
            format!("link `{link}` leaves the configured origin"),
        ))
    }
}
