//! Bearer tokens of the two principals: a human and an agent. Tokens come from
//! `WEFT_HUMAN_TOKEN` / `WEFT_AGENT_TOKEN`, or are generated at start-up and printed.

use axum::http::{HeaderMap, header};
use weft_core::frames::{FramesError, Principal};

/// The token map. The principal of a request comes from here, never from its body.
pub struct Auth {
    human: String,
    agent: String,
}

/// Constant-time comparison (the length is not secret).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn generate() -> String {
    weft_core::frames::validate::hex(&super::random_bytes::<24>())
}

impl Auth {
    /// Tokens from the environment, generating any that is unset. Returns which were
    /// generated `(human, agent)`.
    pub fn from_env() -> Result<(Auth, (bool, bool)), String> {
        let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let (human, agent) = (get("WEFT_HUMAN_TOKEN"), get("WEFT_AGENT_TOKEN"));
        let generated = (human.is_none(), agent.is_none());
        let auth = Auth::new(
            human.unwrap_or_else(generate),
            agent.unwrap_or_else(generate),
        )?;
        Ok((auth, generated))
    }

    /// A token map; the two tokens must differ and be at least 8 characters.
    pub fn new(human: String, agent: String) -> Result<Auth, String> {
        if human == agent {
            return Err("WEFT_HUMAN_TOKEN and WEFT_AGENT_TOKEN must differ".into());
        }
        if human.len() < 8 || agent.len() < 8 {
            return Err("tokens must have at least 8 characters".into());
        }
        Ok(Auth { human, agent })
    }

    /// The human principal's token.
    pub fn human_token(&self) -> &str {
        &self.human
    }

    /// The agent principal's token.
    pub fn agent_token(&self) -> &str {
        &self.agent
    }

    /// The principal of a request's `Authorization: Bearer` token.
    pub fn principal(&self, headers: &HeaderMap) -> Result<Principal, FramesError> {
        let supplied = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| FramesError::Unauthenticated("a bearer token is required".into()))?;
        self.principal_of_token(supplied)
            .ok_or_else(|| FramesError::Unauthenticated("invalid bearer token".into()))
    }

    /// The principal a token stands for (`None` for an unknown token). Used for the bearer
    /// header and for tokens carried elsewhere (the remote job endpoint's hello and resume
    /// frames: browsers cannot set WebSocket headers).
    pub fn principal_of_token(&self, token: &str) -> Option<Principal> {
        let (h, a) = (
            same(token.as_bytes(), self.human.as_bytes()),
            same(token.as_bytes(), self.agent.as_bytes()),
        );
        if h {
            Some(Principal::human("human-local"))
        } else if a {
            Some(Principal::agent("agent-local"))
        } else {
            None
        }
    }
}
