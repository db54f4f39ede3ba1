//! Remote job hosts: the `weft-remote/1` protocol, sans-IO on both ends.
//!
//! A client [`Registry`](super::Registry) opens a remote endpoint with
//! [`Registry::open_remote`](super::Registry::open_remote): an ordinary endpoint plus a link
//! (`client.rs`) that frames, sequences, buffers and times the Worker protocol over one
//! WebSocket, which the host only opens, writes and closes. The server runs an unmodified
//! registry for the work plus a [`server::SessionTable`] that turns socket frames into registry
//! calls and journal events into frames. Both sides keep a bounded [`buffer::ReplayBuffer`] of
//! unacknowledged frames so that a connection that drops and resumes within the session's
//! window loses nothing; past the window the client's runs are `lost` with the evidence
//! `remote_disconnected` and the server terminates them (after a grace, [`grace_ms`], that
//! covers the client's late detection and backoff) and keeps a tombstone.
//!
//! Bounds the server enforces itself: no frame it builds exceeds `limits.maxFrameBytes` (the
//! `welcome` frame announces it; an outcome too large settles `failed{REMOTE_FRAME_TOO_LARGE}`,
//! a report too large is missed, an input answer too large is rejected with that code);
//! undroppable frames the client does not acknowledge are capped (`REMOTE_BUFFER_FULL`, then
//! the connection closes 1013 and the client resumes); unauthenticated connections are capped
//! by `ServerConfig::max_pending`; a resume must come from the session's principal with its
//! secret, or the session is unknown to it.
//!
//! # Call order: a client host (native `JobsHost::open_remote`, JS `rt.openRemote`)
//!
//! ```text
//! ep = registry.open_remote(now, spec, remote)   // emits Output::Connect{endpoint, url}
//! Connect{url}        -> open a WebSocket; on success registry.on_socket_open(now, ep),
//!                        on failure registry.on_socket_closed(now, ep, why) (exactly one)
//! each text message   -> registry.on_socket_frame(now, ep, &json)   (not JSON: on_undecodable)
//! the socket ended    -> registry.on_socket_closed(now, ep, reason)
//! SendFrame{frame}    -> write frame.to_string() on the current socket (none: drop it;
//!                        the link replays on resume)
//! CloseSocket{code}   -> close that socket; report nothing more of it
//! timers              -> nothing new: the link's deadline is in registry.poll_timeout()
//! ```
//! A new `Connect` for the same endpoint is a new socket. Submit, cancel, input, observe, wait,
//! terminate and close owner are the ordinary registry calls.
//!
//! # Call order: the server host (`weft serve`, one lock around the table and its registry)
//!
//! ```text
//! socket accepted   -> conn = table.on_connect(now)   (may at once output Close 1013)
//! text message      -> table.on_frame(now, conn, &json, &principal_of)   (else on_undecodable)
//! socket ended      -> table.on_disconnect(now, conn, reason)
//! after every call, drain table.poll_output():
//!   Send / Close          -> that connection's socket
//!   Open{session, ..}     -> registry.open_endpoint(..), then table.on_endpoint_opened(session, ep);
//!                            it cannot open: table.on_endpoint_closed(now, session, OpenFailed, why)
//!   Submit / Cancel / Input / Terminate -> the registry calls of the same name;
//!                            a submit answers table.on_submitted or table.on_submit_failed
//! after every registry input:
//!   endpoint Ready        -> table.on_endpoint_ready(now, session, capabilities) (once)
//!   every job event       -> table.on_job_event(now, &ev); a subscription's Missed -> on_missed
//!   endpoint Closed       -> (its events first) table.on_endpoint_closed(now, session,
//!                            EndpointClosed, reason)
//! timers            -> table.poll_timeout() / handle_timeout(now) (auth deadline, grace, expiry)
//! shutdown          -> table.stop(now, reason), then drain
//! ```

pub mod buffer;
pub(crate) mod client;
pub mod frames;
pub mod server;

pub use client::{RemoteInfo, RemoteSpec};
pub use frames::{Limits, RemoteTarget};

/// The stable codes of the remote protocol: `refused` and `error` frames carry them, and a
/// remote endpoint closed by its host names them in its reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RemoteCode {
    /// The token was missing or refused, or a frame came before hello/resume.
    Unauthenticated,
    /// The hello asked for a script or kind the host does not offer.
    UnknownTarget,
    /// A resume named a session the host does not know (e.g. it restarted).
    SessionUnknown,
    /// A resume named a session that expired (its window passed); `refused.jobs` has its runs.
    SessionExpired,
    /// The host has as many sessions as it accepts.
    SessionLimit,
    /// A frame broke the protocol (malformed, unknown, out of sequence).
    Protocol,
    /// A frame exceeded the session's `maxFrameBytes`.
    FrameTooLarge,
    /// The session's replay buffer holds as many undroppable frames as it may.
    BufferFull,
    /// A newer connection resumed this session.
    Superseded,
    /// The host could not open the session's endpoint (e.g. its worker would not start): the
    /// session ended (an `ended` frame, or a resume refused with this code).
    OpenFailed,
    /// The session's endpoint on the host closed (its worker exited or died): the session
    /// ended (an `ended` frame, or a resume refused with this code).
    EndpointClosed,
}

impl RemoteCode {
    /// Every code, in declaration order.
    pub const ALL: [RemoteCode; 11] = [
        RemoteCode::Unauthenticated,
        RemoteCode::UnknownTarget,
        RemoteCode::SessionUnknown,
        RemoteCode::SessionExpired,
        RemoteCode::SessionLimit,
        RemoteCode::Protocol,
        RemoteCode::FrameTooLarge,
        RemoteCode::BufferFull,
        RemoteCode::Superseded,
        RemoteCode::OpenFailed,
        RemoteCode::EndpointClosed,
    ];

    /// The stable string code (`REMOTE_…`).
    pub fn as_str(&self) -> &'static str {
        match self {
            RemoteCode::Unauthenticated => "REMOTE_UNAUTHENTICATED",
            RemoteCode::UnknownTarget => "REMOTE_UNKNOWN_TARGET",
            RemoteCode::SessionUnknown => "REMOTE_SESSION_UNKNOWN",
            RemoteCode::SessionExpired => "REMOTE_SESSION_EXPIRED",
            RemoteCode::SessionLimit => "REMOTE_SESSION_LIMIT",
            RemoteCode::Protocol => "REMOTE_PROTOCOL",
            RemoteCode::FrameTooLarge => "REMOTE_FRAME_TOO_LARGE",
            RemoteCode::BufferFull => "REMOTE_BUFFER_FULL",
            RemoteCode::Superseded => "REMOTE_SUPERSEDED",
            RemoteCode::OpenFailed => "REMOTE_OPEN_FAILED",
            RemoteCode::EndpointClosed => "REMOTE_ENDPOINT_CLOSED",
        }
    }

    /// The code named `s` (see [`RemoteCode::as_str`]).
    pub fn from_name(s: &str) -> Option<RemoteCode> {
        RemoteCode::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// Whether the code says the host ended the session because its endpoint could not be
    /// opened or closed (`REMOTE_OPEN_FAILED`, `REMOTE_ENDPOINT_CLOSED`): the client's runs
    /// are then `remote_lost` (accepted ones) or never started, not disconnected.
    pub fn ends_session(&self) -> bool {
        matches!(self, RemoteCode::OpenFailed | RemoteCode::EndpointClosed)
    }
}

impl std::fmt::Display for RemoteCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The longest delay between a client's reconnection attempts (its backoff doubles from
/// 100 ms up to this).
pub const MAX_BACKOFF_MS: u64 = 2_000;

/// How long past a detached session's window the server keeps it: the client notices a dead
/// socket only after three heartbeats of silence and then waits up to [`MAX_BACKOFF_MS`]
/// before it reconnects, so the server's grace is at least that (`3 * heartbeat +
/// MAX_BACKOFF_MS`). Both sides use this one rule.
pub const fn grace_ms(heartbeat_ms: u64) -> u64 {
    3 * heartbeat_ms + MAX_BACKOFF_MS
}

/// WebSocket close codes the protocol uses.
pub mod close {
    /// The session ended deliberately (or the socket is no longer needed).
    pub const NORMAL: u16 = 1000;
    /// The server is stopping.
    pub const GOING_AWAY: u16 = 1001;
    /// A protocol error that needs a new connection (a sequence gap: resume repairs it).
    pub const PROTOCOL: u16 = 1002;
    /// Authentication failed or timed out.
    pub const POLICY: u16 = 1008;
    /// A message over the hard size cap.
    pub const TOO_BIG: u16 = 1009;
    /// The server has no room for another session.
    pub const TRY_LATER: u16 = 1013;
    /// No frame arrived for three heartbeats.
    pub const SILENT: u16 = 4000;
    /// A newer connection resumed the session.
    pub const SUPERSEDED: u16 = 4001;
    /// The session expired or is unknown.
    pub const EXPIRED: u16 = 4002;
}

/// Checks a remote endpoint URL: `wss://` anywhere, plain `ws://` only to a loopback host
/// unless `allow_insecure` (the token travels in the hello frame). No userinfo or fragment.
pub fn check_url(url: &str, allow_insecure: bool) -> Result<(), String> {
    let (secure, rest) = if let Some(r) = url.strip_prefix("wss://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("ws://") {
        (false, r)
    } else {
        return Err(format!("`{url}` is not a ws:// or wss:// URL"));
    };
    if url.contains(['@', '#']) {
        return Err("the URL must not contain userinfo or a fragment".into());
    }
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.split(':').next().unwrap_or(""),
    };
    if host.is_empty() || authority.chars().any(|c| c.is_whitespace() || c == '\\') {
        return Err(format!("bad URL `{url}`: the URL has no host"));
    }
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<core::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !secure && !loopback && !allow_insecure {
        return Err(format!(
            "refusing to send the token over plain ws:// to `{host}`; use wss://, or set \
             allow_insecure (allowInsecure in JS) to insist"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
