//! A small JSON-over-HTTP client (hyper) for DGP servers and external adapter services.
//! Plain HTTP only: loopback by default, other hosts with `--allow-insecure-http`. Links from
//! a server must stay on its origin, and credentials are never sent elsewhere.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use serde_json::Value;
use weft_core::frames::FramesError;

/// The largest response accepted.
const MAX_RESPONSE: usize = 4 * 1024 * 1024;

/// A failure talking to a server: a problem it answered with, or a transport failure whose
/// outcome is unknown (a commit must then be retried with the same key and body).
#[derive(Debug, Clone)]
pub enum CallError {
    /// The server answered with an error status (problem+json when it is a DGP server).
    Problem {
        status: u16,
        code: String,
        detail: String,
    },
    /// No usable answer: connection failure, timeout, or an unreadable body.
    Transport(String),
}

impl CallError {
    /// The event-log form.
    pub fn to_json(&self) -> Value {
        match self {
            CallError::Problem {
                status,
                code,
                detail,
                ..
            } => {
                serde_json::json!({"status": status, "code": code, "detail": detail})
            }
            CallError::Transport(m) => serde_json::json!({"code": "TRANSPORT_ERROR", "detail": m}),
        }
    }
}

impl From<FramesError> for CallError {
    fn from(e: FramesError) -> Self {
        CallError::Problem {
            status: e.http_status(),
            code: e.code().to_owned(),
            detail: e.to_string(),
        }
    }
}

/// An HTTP client bound to one origin.
#[derive(Clone)]
pub struct Client {
    http: HyperClient<HttpConnector, Full<Bytes>>,
    base: String,
    authority: String,
    token: Option<String>,
    timeout: Duration,
}

impl Client {
    /// A client for `base` (`http://host:port[/prefix]`). Non-loopback hosts need `insecure`.
    pub fn new(base: &str, token: Option<String>, insecure: bool) -> Result<Client, String> {
        let uri: Uri = base.parse().map_err(|e| format!("bad URL `{base}`: {e}"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err("https is not supported by this build; use a loopback http URL or a TLS-terminating proxy".into());
            }
            _ => return Err(format!("`{base}` is not an http URL")),
        }
        let host = uri.host().ok_or("the URL has no host")?;
        let loopback = host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
            || host == "[::1]";
        if !loopback && !insecure {
            return Err(format!(
                "refusing to send credentials over plain HTTP to `{host}`; pass --allow-insecure-http to insist"
            ));
        }
        if uri.query().is_some() || base.contains('@') || base.contains('#') {
            return Err("the base URL must not contain userinfo, a query or a fragment".into());
        }
        let authority = uri
            .authority()
            .map(|a| a.to_string())
            .ok_or("the URL has no authority")?;
        let mut http = HyperClient::builder(TokioExecutor::new());
        http.pool_idle_timeout(Duration::from_secs(30));
        Ok(Client {
            http: http.build_http(),
            base: base.trim_end_matches('/').to_owned(),
            authority,
            token,
            timeout: Duration::from_secs(30),
        })
    }

    /// Resolves a server-provided link (an absolute path, or an absolute URL on the same
    /// origin); anything else is refused.
    fn url(&self, link: &str) -> Result<String, CallError> {
        if link.starts_with('/') && !link.starts_with("//") {
            return Ok(format!("{}{link}", self.base));
        }
        let uri: Uri = link
            .parse()
            .map_err(|_| CallError::Transport(format!("bad link `{link}`")))?;
        if uri.scheme_str() == Some("http")
            && uri.authority().map(|a| a.as_str()) == Some(self.authority.as_str())
        {
            return Ok(link.to_owned());
        }
        Err(CallError::Problem {
            status: 0,
            code: "UNTRUSTED_LINK".into(),
            detail: format!("link `{link}` leaves the configured origin"),
        })
    }

    /// `GET link` as JSON.
    pub async fn get(&self, link: &str) -> Result<Value, CallError> {
        self.send(Method::GET, link, None, &[]).await
    }

    /// `POST link` with a JSON body and extra headers.
    pub async fn post(
        &self,
        link: &str,
        body: &impl Serialize,
        headers: &[(&str, &str)],
    ) -> Result<Value, CallError> {
        let bytes = serde_json::to_vec(body).map_err(|e| CallError::Transport(e.to_string()))?;
        self.send(Method::POST, link, Some(bytes), headers).await
    }

    async fn send(
        &self,
        method: Method,
        link: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Result<Value, CallError> {
        let (status, bytes) = self.raw(method, link, body, headers).await?;
        if !status.is_success() {
            return Err(problem(status, &bytes));
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| CallError::Transport(format!("unreadable JSON answer: {e}")))
    }

    async fn raw(
        &self,
        method: Method,
        link: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Result<(StatusCode, Bytes), CallError> {
        let url = self.url(link)?;
        let mut req = Request::builder()
            .method(method)
            .uri(&url)
            .header("accept", "application/json");
        if let Some(t) = &self.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| CallError::Transport(e.to_string()))?;
        let fut = async {
            let resp = self
                .http
                .request(req)
                .await
                .map_err(|e| CallError::Transport(format!("{url}: {e}")))?;
            let status = resp.status();
            let body = Limited::new(resp.into_body(), MAX_RESPONSE)
                .collect()
                .await
                .map_err(|e| CallError::Transport(format!("{url}: reading the answer: {e}")))?
                .to_bytes();
            Ok((status, body))
        };
        tokio::time::timeout(self.timeout, fut).await.map_err(|_| {
            CallError::Transport(format!("{url}: no answer within {:?}", self.timeout))
        })?
    }
}

fn problem(status: StatusCode, body: &[u8]) -> CallError {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    CallError::Problem {
        status: status.as_u16(),
        code: v["code"]
            .as_str()
            .map_or_else(|| format!("HTTP_{}", status.as_u16()), str::to_owned),
        detail: v["detail"].as_str().unwrap_or("").to_owned(),
    }
}
