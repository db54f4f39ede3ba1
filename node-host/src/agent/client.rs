//! A small JSON-over-HTTP(S) client (reqwest + rustls) for DGP servers and external adapter
//! services. Which base URLs it accepts (https anywhere, plain http to loopback unless
//! `--allow-insecure-http`), which links it follows (same origin only: credentials are never
//! sent elsewhere) and what an answer means are the core's rules
//! (`weft_core::frames::controller::http`); this only carries the bytes.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use weft_core::frames::FramesError;
use weft_core::frames::controller::http::{
    self, BaseUrl, HttpAnswer, MAX_ANSWER_BYTES, Problem, REQUEST_TIMEOUT_MS,
};
use weft_core::frames::controller::{HttpRequest, Method};

/// A failure talking to a server: a problem it answered with, or a transport failure whose
/// outcome is unknown (a commit must then be retried with the same key and body).
#[derive(Debug, Clone)]
pub enum CallError {
    /// The server answered with an error status (problem+json when it is a DGP server), or a
    /// local refusal (status 0 when the protocol gives it none).
    Problem {
        status: u16,
        code: String,
        detail: String,
    },
    /// No usable answer: connection failure, timeout, or an unreadable body.
    Transport(String),
}

impl CallError {
    /// The core's form of the failure.
    pub fn problem(&self) -> Problem {
        match self {
            CallError::Problem {
                status,
                code,
                detail,
            } => Problem::new(*status, code.clone(), detail.clone()),
            CallError::Transport(m) => Problem::transport(m.clone()),
        }
    }

    /// The event-log form.
    pub fn to_json(&self) -> Value {
        self.problem().to_json()
    }
}

impl From<Problem> for CallError {
    fn from(p: Problem) -> Self {
        match p.status {
            None if p.is_transport() => CallError::Transport(p.detail),
            status => CallError::Problem {
                status: status.unwrap_or(0),
                code: p.code,
                detail: p.detail,
            },
        }
    }
}

impl From<FramesError> for CallError {
    fn from(e: FramesError) -> Self {
        Problem::from(e).into()
    }
}

/// An HTTP(S) client bound to one origin.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: BaseUrl,
    token: Option<String>,
}

impl Client {
    /// A client for `base` (`http[s]://host[:port][/prefix]`); plain HTTP to a non-loopback
    /// host needs `insecure`.
    pub fn new(base: &str, token: Option<String>, insecure: bool) -> Result<Client, String> {
        let base = BaseUrl::parse(base, insecure)?;
        let http = reqwest::Client::builder()
            .user_agent(concat!("weft/", env!("CARGO_PKG_VERSION")))
            // A redirect could carry the token elsewhere: links are followed only as the
            // core's rule allows.
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Client { http, base, token })
    }

    /// `GET link` as JSON.
    pub async fn get(&self, link: &str) -> Result<Value, CallError> {
        let url = self.base.resolve(link)?;
        Ok(http::answer_json(
            self.exchange(Method::Get, &url, None, &[]).await,
        )?)
    }

    /// `POST link` with a JSON body and extra headers.
    pub async fn post(
        &self,
        link: &str,
        body: &impl Serialize,
        headers: &[(&str, &str)],
    ) -> Result<Value, CallError> {
        let url = self.base.resolve(link)?;
        let bytes = serde_json::to_vec(body).map_err(|e| CallError::Transport(e.to_string()))?;
        Ok(http::answer_json(
            self.exchange(Method::Post, &url, Some(bytes), headers)
                .await,
        )?)
    }

    /// Sends a request of the controller's run machine and returns what came back.
    pub async fn send(&self, req: &HttpRequest) -> HttpAnswer {
        let url = match self.base.resolve(&req.link) {
            Ok(u) => u,
            Err(p) => return HttpAnswer::Failed(p.detail),
        };
        let headers: Vec<(&str, &str)> = req
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.exchange(req.method, &url, req.body.clone(), &headers)
            .await
    }

    async fn exchange(
        &self,
        method: Method,
        url: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> HttpAnswer {
        let mut req = match method {
            Method::Get => self.http.get(url),
            Method::Post => self.http.post(url),
        }
        .header("accept", "application/json");
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let fut = async {
            let mut resp = req.send().await.map_err(|e| format!("{url}: {e}"))?;
            let status = resp.status().as_u16();
            let mut body = Vec::new();
            while let Some(chunk) = resp
                .chunk()
                .await
                .map_err(|e| format!("{url}: reading the answer: {e}"))?
            {
                if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                    return Err(format!(
                        "{url}: the answer exceeds {MAX_ANSWER_BYTES} bytes"
                    ));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(HttpAnswer::Answered { status, body })
        };
        let timeout = Duration::from_millis(REQUEST_TIMEOUT_MS);
        match tokio::time::timeout(timeout, fut).await {
            Ok(Ok(a)) => a,
            Ok(Err(m)) => HttpAnswer::Failed(m),
            Err(_) => HttpAnswer::Failed(format!("{url}: no answer within {timeout:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_is_accepted_and_plain_http_only_to_loopback_unless_insisted() {
        assert!(Client::new("https://dgp.example/api", None, false).is_ok());
        assert!(Client::new("http://127.0.0.1:8080", None, false).is_ok());
        let e = Client::new("http://dgp.example", None, false)
            .err()
            .unwrap();
        assert!(e.contains("refusing to send credentials"), "{e}");
        assert!(Client::new("http://dgp.example", None, true).is_ok());
    }
}
