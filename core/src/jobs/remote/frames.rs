//! The `weft-remote/1` frames: one JSON object per WebSocket text message, typed by `t`.
//!
//! Content frames carry `seq` (per session and direction, from 1) and `ack` (the last
//! contiguous seq received from the peer); `ping`/`pong` carry only `ack`. Client → server:
//! `hello`, `resume`, `msg` (a Worker request in `body`), `ping`, `pong`, `close`. Server →
//! client: `welcome`, `resumed`, `refused`, `msg` (a Worker reply in `body`, parsed by
//! [`wire::parse_reply`](super::super::wire::parse_reply)), `accepted`, `settled`, `missed`,
//! `ended`, `ping`, `pong`, `error`. Frames are parsed through [`Payload`] (the browser keeps `JsValue`
//! bodies) and built as JSON.

use serde_json::{Value, json};

use super::RemoteCode;
use crate::jobs::types::{CancelEvidence, LostEvidence, Outcome};
use crate::jobs::wire::Violation;
use crate::value::Payload;

/// The protocol name in `hello`.
pub const PROTOCOL: &str = "weft-remote/1";

/// Largest integer a JavaScript number carries exactly.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// What a hello asks the server to open: one of its child-process scripts or in-process kinds.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RemoteTarget {
    /// A worker script the server offers (`--remote-script NAME=PATH`).
    Script(String),
    /// A built-in in-process kind the server offers (`--remote-kind NAME`).
    Kind(String),
}

impl RemoteTarget {
    /// `{"script": name}` or `{"kind": name}`.
    pub fn to_json(&self) -> Value {
        match self {
            RemoteTarget::Script(n) => json!({"script": n}),
            RemoteTarget::Kind(n) => json!({"kind": n}),
        }
    }

    /// `script:NAME` or `kind:NAME`.
    pub fn label(&self) -> String {
        match self {
            RemoteTarget::Script(n) => format!("script:{n}"),
            RemoteTarget::Kind(n) => format!("kind:{n}"),
        }
    }

    /// The name of the script or kind.
    pub fn name(&self) -> &str {
        match self {
            RemoteTarget::Script(n) | RemoteTarget::Kind(n) => n,
        }
    }
}

/// A session's limits, announced in `welcome`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Frames larger than this are refused (`REMOTE_FRAME_TOO_LARGE`); the session stays.
    pub max_frame_bytes: usize,
    /// Frames the replay buffer keeps at most (undroppable ones may exceed it).
    pub replay_frames: usize,
    /// Bytes the replay buffer keeps at most (undroppable ones may exceed it).
    pub replay_bytes: usize,
}

impl Default for Limits {
    /// 1 MiB frames, 4096 frames, 4 MiB.
    fn default() -> Self {
        Limits {
            max_frame_bytes: 1 << 20,
            replay_frames: 4096,
            replay_bytes: 4 << 20,
        }
    }
}

impl Limits {
    /// `{"maxFrameBytes","replayFrames","replayBytes"}`.
    pub fn to_json(&self) -> Value {
        json!({"maxFrameBytes": self.max_frame_bytes, "replayFrames": self.replay_frames,
               "replayBytes": self.replay_bytes})
    }
}

/// A frame from the client.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientFrame<V> {
    /// Opens a new session.
    Hello {
        protocol: String,
        token: String,
        open: RemoteTarget,
        window_ms: u64,
        heartbeat_ms: u64,
        label: String,
    },
    /// Reattaches to a session; `ack` is the last server seq the client applied.
    Resume {
        token: String,
        session: String,
        secret: String,
        ack: u64,
    },
    /// A carried Worker request (`run`, `cancel`, `input`); `job` is the client's job id.
    Msg {
        seq: u64,
        ack: u64,
        body: V,
        job: Option<u64>,
    },
    /// A heartbeat; the peer answers `pong`. `ack` is the last contiguous seq received.
    Ping { ack: u64 },
    /// A heartbeat answer, or an early ack.
    Pong { ack: u64 },
    /// The client ends the session deliberately: the server terminates its runs now.
    Close { reason: String },
}

/// The tombstone entry of the run with client wire id `id` in a `refused` frame's `jobs`.
pub fn tombstone_run<V: Payload>(jobs: &V, id: u64) -> Option<TombstoneRun<V>> {
    let item = jobs.field(&id.to_string()).filter(|i| i.is_object())?;
    let job = read_u64(&item, "job")?.ok()?;
    Some(TombstoneRun {
        id,
        job,
        outcome: item.field("outcome").filter(|o| o.is_object()),
    })
}

/// One run of an expired session, in a `refused` frame's tombstone.
#[derive(Clone, Debug, PartialEq)]
pub struct TombstoneRun<V> {
    /// The client's wire id of the run.
    pub id: u64,
    /// The server's job id.
    pub job: u64,
    /// The server's outcome, when it had one.
    pub outcome: Option<V>,
}

/// A frame from the server.
#[derive(Clone, Debug, PartialEq)]
pub enum ServerFrame<V> {
    /// The hello was accepted: the session's id, its resume secret, the granted window and
    /// heartbeat, and the limits.
    Welcome {
        session: String,
        secret: String,
        window_ms: u64,
        heartbeat_ms: u64,
        limits: Limits,
    },
    /// The resume succeeded; `ack` is the last client seq the server applied.
    Resumed { ack: u64 },
    /// A hello or resume was refused. `jobs` (an expired session's tombstone) maps each
    /// client wire id (as a decimal string key) to `{job, outcome}`: read it with
    /// [`tombstone_run`].
    Refused {
        code: String,
        message: String,
        jobs: Option<V>,
    },
    /// A Worker reply (its `id` is the client's wire id).
    Msg { seq: u64, ack: u64, body: V },
    /// The server accepted run `id` as its job `job`.
    Accepted {
        seq: u64,
        ack: u64,
        id: u64,
        job: u64,
    },
    /// Run `id` has this outcome on the server, which no worker reply expresses.
    Settled {
        seq: u64,
        ack: u64,
        id: u64,
        outcome: V,
    },
    /// The server's replay buffer dropped this many progress/partial frames of run `id`.
    Missed {
        seq: u64,
        ack: u64,
        id: u64,
        progress: u64,
        partial: u64,
    },
    /// A heartbeat; the peer answers `pong`. `ack` is the last contiguous seq received.
    Ping { ack: u64 },
    /// A heartbeat answer, or an early ack.
    Pong { ack: u64 },
    /// One of the client's frames was refused; the socket stays open.
    Error {
        code: String,
        detail: String,
        id: Option<u64>,
    },
    /// The host ended the session because its endpoint could not be opened or closed
    /// (`code` is `REMOTE_OPEN_FAILED` or `REMOTE_ENDPOINT_CLOSED`). It follows every terminal
    /// frame the host had for the session's runs; the socket closes (1000) after it.
    Ended {
        seq: u64,
        ack: u64,
        code: String,
        reason: String,
    },
}

impl<V> ServerFrame<V> {
    /// The frame's seq, for content frames.
    pub fn seq(&self) -> Option<u64> {
        match self {
            ServerFrame::Msg { seq, .. }
            | ServerFrame::Accepted { seq, .. }
            | ServerFrame::Settled { seq, .. }
            | ServerFrame::Missed { seq, .. }
            | ServerFrame::Ended { seq, .. } => Some(*seq),
            _ => None,
        }
    }

    /// The peer's ack the frame carries.
    pub fn ack(&self) -> Option<u64> {
        match self {
            ServerFrame::Msg { ack, .. }
            | ServerFrame::Accepted { ack, .. }
            | ServerFrame::Settled { ack, .. }
            | ServerFrame::Missed { ack, .. }
            | ServerFrame::Ended { ack, .. }
            | ServerFrame::Ping { ack }
            | ServerFrame::Pong { ack } => Some(*ack),
            _ => None,
        }
    }
}

/// A refused frame: the code to answer with, the violation, and what could still be read.
#[derive(Clone, Debug, PartialEq)]
pub struct FrameRefused {
    /// `REMOTE_FRAME_TOO_LARGE` for an oversized frame, else `REMOTE_PROTOCOL`.
    pub code: RemoteCode,
    pub violation: Box<Violation>,
    /// The frame's `t`, when readable.
    pub t: Option<String>,
    /// The frame's `seq`, when readable (a refused content frame still uses its number).
    pub seq: Option<u64>,
    /// The wire id of a `run` request in the body, when readable (it gets a `settled` failure).
    pub run: Option<u64>,
}

fn read_u64<V: Payload>(m: &V, field: &str) -> Option<Result<u64, String>> {
    let v = m.field(field)?;
    if v.type_name() == "undefined" {
        return None;
    }
    Some(match v.as_f64() {
        Some(n) if n.fract() == 0.0 && (0.0..=MAX_SAFE_INTEGER).contains(&n) => Ok(n as u64),
        Some(n) => Err(format!("number {}", crate::value::number_text(n))),
        None => Err(v.type_name().into()),
    })
}

struct Reader<'a, V> {
    m: &'a V,
    t: &'a str,
}

impl<V: Payload> Reader<'_, V> {
    fn missing(&self, field: &str) -> Violation {
        Violation::MissingField {
            kind: self.t.into(),
            field: field.into(),
        }
    }
    fn wrong(&self, field: &str, expected: &str, found: &str) -> Violation {
        Violation::WrongFieldType {
            kind: self.t.into(),
            field: field.into(),
            expected: expected.into(),
            found: found.into(),
        }
    }
    fn num(&self, field: &str) -> Result<u64, Violation> {
        match read_u64(self.m, field) {
            None => Err(self.missing(field)),
            Some(Ok(n)) => Ok(n),
            Some(Err(found)) => Err(self.wrong(field, "non-negative integer", &found)),
        }
    }
    fn opt_num(&self, field: &str) -> Result<Option<u64>, Violation> {
        match self.m.field(field) {
            Some(v) if v.type_name() == "null" => Ok(None),
            _ => match read_u64(self.m, field) {
                None => Ok(None),
                Some(Ok(n)) => Ok(Some(n)),
                Some(Err(found)) => Err(self.wrong(field, "non-negative integer", &found)),
            },
        }
    }
    fn text(&self, field: &str) -> Result<String, Violation> {
        match self.m.field(field) {
            None => Err(self.missing(field)),
            Some(v) if v.type_name() == "undefined" => Err(self.missing(field)),
            Some(v) => v
                .as_text()
                .ok_or_else(|| self.wrong(field, "string", v.type_name())),
        }
    }
    fn opt_text(&self, field: &str) -> Result<Option<String>, Violation> {
        match self.m.field(field) {
            None => Ok(None),
            Some(v) if matches!(v.type_name(), "undefined" | "null") => Ok(None),
            Some(v) => v
                .as_text()
                .map(Some)
                .ok_or_else(|| self.wrong(field, "string", v.type_name())),
        }
    }
    fn object(&self, field: &str) -> Result<V, Violation> {
        match self.m.field(field) {
            None => Err(self.missing(field)),
            Some(v) if v.type_name() == "undefined" => Err(self.missing(field)),
            Some(v) if v.is_object() => Ok(v),
            Some(v) => Err(self.wrong(field, "object", v.type_name())),
        }
    }
}

/// Reads `t`, enforcing the object shape and the size limit first.
fn envelope<V: Payload>(msg: &V, max_bytes: usize) -> Result<String, FrameRefused> {
    let refuse = |violation, t: Option<String>| FrameRefused {
        code: RemoteCode::Protocol,
        violation: Box::new(violation),
        t,
        seq: None,
        run: None,
    };
    if !msg.is_object() {
        return Err(refuse(
            Violation::NotAnObject {
                found: msg.type_name().into(),
            },
            None,
        ));
    }
    let t = match msg.field("t") {
        None => return Err(refuse(Violation::MissingType, None)),
        Some(t) => match t.as_text() {
            Some(s) => s,
            None => {
                return Err(refuse(
                    Violation::WrongType {
                        found: t.type_name().into(),
                    },
                    None,
                ));
            }
        },
    };
    if !msg.fits_within(max_bytes) {
        let mut r = refuse(Violation::Oversized { limit: max_bytes }, Some(t));
        r.code = RemoteCode::FrameTooLarge;
        return Err(r);
    }
    Ok(t)
}

/// The best-effort `seq` and run id of a refused frame.
fn salvage<V: Payload>(msg: &V, mut r: FrameRefused) -> FrameRefused {
    if r.t.is_none() {
        r.t = msg.field("t").and_then(|t| t.as_text());
    }
    if r.t.as_deref() == Some("msg") {
        r.seq = read_u64(msg, "seq").and_then(Result::ok);
        if let Some(body) = msg.field("body")
            && body.field("type").and_then(|t| t.as_text()).as_deref() == Some("run")
        {
            r.run = read_u64(&body, "id").and_then(Result::ok);
        }
    }
    r
}

/// Parses one frame from a client (the server's side), size limit first.
pub fn parse_client<V: Payload>(msg: &V, max_bytes: usize) -> Result<ClientFrame<V>, FrameRefused> {
    let t = envelope(msg, max_bytes).map_err(|r| salvage(msg, r))?;
    let r = Reader { m: msg, t: &t };
    let parsed = (|| -> Result<ClientFrame<V>, Violation> {
        Ok(match t.as_str() {
            "hello" => {
                let open = r.object("open")?;
                let o = Reader {
                    m: &open,
                    t: "open",
                };
                let target = match (o.opt_text("script")?, o.opt_text("kind")?) {
                    (Some(s), None) => RemoteTarget::Script(s),
                    (None, Some(k)) => RemoteTarget::Kind(k),
                    _ => return Err(r.wrong("open", "{script} or {kind}", "object")),
                };
                ClientFrame::Hello {
                    protocol: r.text("protocol")?,
                    token: r.text("token")?,
                    open: target,
                    window_ms: r.opt_num("windowMs")?.unwrap_or(0),
                    heartbeat_ms: r.opt_num("heartbeatMs")?.unwrap_or(0),
                    label: r.opt_text("label")?.unwrap_or_default(),
                }
            }
            "resume" => ClientFrame::Resume {
                token: r.text("token")?,
                session: r.text("session")?,
                secret: r.text("secret")?,
                ack: r.num("ack")?,
            },
            "msg" => ClientFrame::Msg {
                seq: r.num("seq")?,
                ack: r.num("ack")?,
                body: r.object("body")?,
                job: r.opt_num("job")?,
            },
            "ping" => ClientFrame::Ping { ack: r.num("ack")? },
            "pong" => ClientFrame::Pong { ack: r.num("ack")? },
            "close" => ClientFrame::Close {
                reason: r.opt_text("reason")?.unwrap_or_default(),
            },
            _ => return Err(Violation::UnknownFrame { t: t.clone() }),
        })
    })();
    parsed.map_err(|violation| {
        salvage(
            msg,
            FrameRefused {
                code: RemoteCode::Protocol,
                violation: Box::new(violation),
                t: Some(t.clone()),
                seq: None,
                run: None,
            },
        )
    })
}

/// Parses one frame from a server (the client's side), size limit first.
pub fn parse_server<V: Payload>(msg: &V, max_bytes: usize) -> Result<ServerFrame<V>, FrameRefused> {
    // A frame refused as too large still uses its number (a replay would refuse it again),
    // or the next one would look like a gap.
    let t = envelope(msg, max_bytes).map_err(|mut r| {
        if r.code == RemoteCode::FrameTooLarge {
            r.seq = read_u64(msg, "seq").and_then(Result::ok);
        }
        r
    })?;
    let r = Reader { m: msg, t: &t };
    let parsed = (|| -> Result<ServerFrame<V>, Violation> {
        Ok(match t.as_str() {
            "welcome" => {
                let l = r.object("limits")?;
                let l = Reader { m: &l, t: "limits" };
                ServerFrame::Welcome {
                    session: r.text("session")?,
                    secret: r.text("secret")?,
                    window_ms: r.num("windowMs")?,
                    heartbeat_ms: r.num("heartbeatMs")?,
                    limits: Limits {
                        max_frame_bytes: l.num("maxFrameBytes")? as usize,
                        replay_frames: l.num("replayFrames")? as usize,
                        replay_bytes: l.num("replayBytes")? as usize,
                    },
                }
            }
            "resumed" => ServerFrame::Resumed { ack: r.num("ack")? },
            "refused" => ServerFrame::Refused {
                code: r.text("code")?,
                message: r.opt_text("message")?.unwrap_or_default(),
                jobs: msg.field("jobs").filter(|j| j.is_object()),
            },
            "msg" => ServerFrame::Msg {
                seq: r.num("seq")?,
                ack: r.num("ack")?,
                body: r.object("body")?,
            },
            "accepted" => ServerFrame::Accepted {
                seq: r.num("seq")?,
                ack: r.num("ack")?,
                id: r.num("id")?,
                job: r.num("job")?,
            },
            "settled" => ServerFrame::Settled {
                seq: r.num("seq")?,
                ack: r.num("ack")?,
                id: r.num("id")?,
                outcome: r.object("outcome")?,
            },
            "missed" => ServerFrame::Missed {
                seq: r.num("seq")?,
                ack: r.num("ack")?,
                id: r.num("id")?,
                progress: r.opt_num("progress")?.unwrap_or(0),
                partial: r.opt_num("partial")?.unwrap_or(0),
            },
            "ended" => ServerFrame::Ended {
                seq: r.num("seq")?,
                ack: r.num("ack")?,
                code: r.text("code")?,
                reason: r.opt_text("reason")?.unwrap_or_default(),
            },
            "ping" => ServerFrame::Ping { ack: r.num("ack")? },
            "pong" => ServerFrame::Pong { ack: r.num("ack")? },
            "error" => ServerFrame::Error {
                code: r.text("code")?,
                detail: r.opt_text("detail")?.unwrap_or_default(),
                id: r.opt_num("id")?,
            },
            _ => return Err(Violation::UnknownFrame { t: t.clone() }),
        })
    })();
    parsed.map_err(|violation| FrameRefused {
        code: RemoteCode::Protocol,
        violation: Box::new(violation),
        t: Some(t.clone()),
        seq: read_u64(msg, "seq").and_then(Result::ok),
        run: None,
    })
}

/// Reads an outcome in its [`Outcome::to_json`] form (a `settled` frame, a tombstone).
pub fn outcome_from<V: Payload>(v: &V) -> Option<Outcome<V>> {
    let text = |f: &str| v.field(f).and_then(|x| x.as_text());
    Some(match text("outcome")?.as_str() {
        "succeeded" => Outcome::Succeeded {
            value: v
                .field("value")
                .filter(|x| x.type_name() != "undefined")
                .unwrap_or_else(V::null),
        },
        "failed" => Outcome::Failed {
            message: text("message").unwrap_or_default(),
            code: text("code"),
            started: v.field("started").and_then(|x| x.as_bool()).unwrap_or(true),
        },
        "cancelled" => Outcome::Cancelled {
            evidence: match text("evidence")?.as_str() {
                "never_started" => CancelEvidence::NeverStarted,
                "acknowledged" => CancelEvidence::Acknowledged,
                "quiet_no_ack" => CancelEvidence::Quiet {
                    quiet_ms: v
                        .field("quietMs")
                        .and_then(|x| x.as_f64())
                        .map_or(0, |n| n.max(0.0) as u64),
                },
                _ => return None,
            },
        },
        "lost" => Outcome::Lost {
            reason: text("reason").unwrap_or_default(),
            evidence: text("evidence")
                .and_then(|e| LostEvidence::from_name(&e))
                .unwrap_or(LostEvidence::RemoteLost),
        },
        _ => return None,
    })
}

// ----- builders (JSON) -------------------------------------------------------------------------

/// `hello`.
pub fn hello(
    token: &str,
    open: &RemoteTarget,
    window_ms: u64,
    heartbeat_ms: u64,
    label: &str,
) -> Value {
    json!({"t": "hello", "protocol": PROTOCOL, "token": token, "open": open.to_json(),
           "windowMs": window_ms, "heartbeatMs": heartbeat_ms, "label": label})
}

/// `resume`.
pub fn resume(token: &str, session: &str, secret: &str, ack: u64) -> Value {
    json!({"t": "resume", "token": token, "session": session, "secret": secret, "ack": ack})
}

/// `welcome`.
pub fn welcome(
    session: &str,
    secret: &str,
    window_ms: u64,
    heartbeat_ms: u64,
    limits: &Limits,
) -> Value {
    json!({"t": "welcome", "session": session, "secret": secret, "windowMs": window_ms,
           "heartbeatMs": heartbeat_ms, "limits": limits.to_json()})
}

/// `resumed`.
pub fn resumed(ack: u64) -> Value {
    json!({"t": "resumed", "ack": ack})
}

/// `refused`, with the runs of an expired session when there is a tombstone: `jobs` maps
/// each client wire id (decimal string) to `{"job": server job id, "outcome": ...}`.
pub fn refused(
    code: RemoteCode,
    message: &str,
    jobs: Option<serde_json::Map<String, Value>>,
) -> Value {
    let mut o = json!({"t": "refused", "code": code.as_str(), "message": message});
    if let Some(j) = jobs {
        o["jobs"] = Value::Object(j);
    }
    o
}

/// `msg` without `seq`/`ack` (the replay buffer stamps them); `job` only on a client `run`.
pub fn msg(body: Value, job: Option<u64>) -> Value {
    let mut o = json!({"t": "msg", "body": body});
    if let Some(j) = job {
        o["job"] = json!(j);
    }
    o
}

/// `accepted` without `seq`/`ack`.
pub fn accepted(id: u64, job: u64) -> Value {
    json!({"t": "accepted", "id": id, "job": job})
}

/// `settled` without `seq`/`ack`.
pub fn settled(id: u64, outcome: Value) -> Value {
    json!({"t": "settled", "id": id, "outcome": outcome})
}

/// `missed` without `seq`/`ack`.
pub fn missed(id: u64, progress: u64, partial: u64) -> Value {
    json!({"t": "missed", "id": id, "progress": progress, "partial": partial})
}

/// Characters of a reason an `ended` frame carries at most.
pub const ENDED_REASON_CHARS: usize = 1_000;

/// `ended` without `seq`/`ack`; `reason` is cut to [`ENDED_REASON_CHARS`] characters.
pub fn ended(code: RemoteCode, reason: &str) -> Value {
    let reason: String = reason.chars().take(ENDED_REASON_CHARS).collect();
    json!({"t": "ended", "code": code.as_str(), "reason": reason})
}

/// `ping`.
pub fn ping(ack: u64) -> Value {
    json!({"t": "ping", "ack": ack})
}

/// `pong`.
pub fn pong(ack: u64) -> Value {
    json!({"t": "pong", "ack": ack})
}

/// `close`.
pub fn close(reason: &str) -> Value {
    json!({"t": "close", "reason": reason})
}

/// `error`: `detail` says what was wrong; `violation` is the structured reason.
pub fn error(code: RemoteCode, violation: &Violation, id: Option<u64>) -> Value {
    let mut o = json!({"t": "error", "code": code.as_str(), "detail": violation.describe(),
                       "violation": violation});
    if let Some(id) = id {
        o["id"] = json!(id);
    }
    o
}
