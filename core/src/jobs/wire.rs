//! The Worker endpoint wire protocol.
//!
//! A superset of AIUI's `workerStream`: requests `{id, type:"run", payload}` and
//! `{id, type:"cancel"}`; replies `partial`, `progress`, `done` and `error`. Extensions are used
//! only after the worker announces them in a hello message:
//!
//! ```json
//! {"type":"hello","protocol":"weft-worker/1","capabilities":{"input":true,"cancelAck":true,"errorCode":true}}
//! ```
//!
//! * `input` — the host may send `{id, type:"input", inputId, value}`; the worker answers
//!   `{id, type:"input_applied", inputId}` or `{id, type:"input_rejected", inputId, message}`.
//! * `cancelAck` — the worker answers a cancel with `{id, type:"cancelled"}` once it stopped.
//! * `errorCode` — `error` replies may carry a string `code`.
//! * `batch` — both sides may put several messages in one frame,
//!   `{type:"batch", messages:[m1, m2, ...]}` (at most [`BATCH_MAX`] messages, in order). The
//!   host sends batches only to a worker that announced it and only when its transport offers
//!   it ([`crate::jobs::EndpointSpec::batch_sends`]); a batch from a worker that did not
//!   announce it is refused whole (`batch_not_announced`). Each message of a batch means what
//!   it would mean alone (the size limit applies to each, a malformed one is a protocol error
//!   of that message only, the others still apply in order); a batch inside a batch, a batch
//!   over the bound or one without a `messages` array is refused whole. See
//!   [`parse_frame`].
//!
//! Every rule about what a message means lives here and in the registry; transports only move
//! messages.

use serde::{Deserialize, Serialize};

use crate::value::Payload;

/// The protocol name a weft-aware worker announces in its hello.
pub const PROTOCOL: &str = "weft-worker/1";

/// Largest integer a JavaScript number carries exactly; wire ids stay below it.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// What an execution can do beyond `run`/`cancel`, as announced by its worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Capabilities {
    /// Accepts structured `input` messages while running.
    pub input: bool,
    /// Acknowledges a cancel with a `cancelled` reply once it stopped.
    pub cancel_ack: bool,
    /// Sends a machine-readable `code` with errors.
    pub error_code: bool,
    /// Takes and sends batch frames (`{type:"batch", messages}`); shown only when announced.
    #[serde(skip_serializing_if = "is_false")]
    pub batch: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The most messages one batch frame carries, in either direction: what one frame makes a
/// host or worker hold and handle at once stays bounded (each message also obeys the
/// endpoint's size limit, as if sent alone).
pub const BATCH_MAX: usize = 256;

/// A request from the host to a worker.
#[derive(Clone, Debug, PartialEq)]
pub enum WireRequest<V> {
    /// Start run `id` with `payload`.
    Run { id: u64, payload: V },
    /// Ask run `id` to stop.
    Cancel { id: u64 },
    /// Deliver structured input to run `id`.
    Input { id: u64, input_id: String, value: V },
}

impl<V: Payload> WireRequest<V> {
    /// The wire id of the run this request addresses.
    pub fn id(&self) -> u64 {
        match self {
            WireRequest::Run { id, .. }
            | WireRequest::Cancel { id }
            | WireRequest::Input { id, .. } => *id,
        }
    }

    /// The request as the JSON object put on the wire.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            WireRequest::Run { id, payload } => {
                serde_json::json!({"id": id, "type": "run", "payload": payload.to_json()})
            }
            WireRequest::Cancel { id } => serde_json::json!({"id": id, "type": "cancel"}),
            WireRequest::Input {
                id,
                input_id,
                value,
            } => serde_json::json!({
                "id": id, "type": "input", "inputId": input_id, "value": value.to_json()
            }),
        }
    }
}

/// A batch frame of `requests`, as the JSON object put on the wire.
pub fn batch_json<V: Payload>(requests: &[WireRequest<V>]) -> serde_json::Value {
    serde_json::json!({
        "type": "batch",
        "messages": requests.iter().map(WireRequest::to_json).collect::<Vec<_>>(),
    })
}

/// A well-formed frame from a worker: one message, or a batch of them (each still to be
/// parsed with [`parse_batched`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Frame<V> {
    One(Reply<V>),
    Batch(Vec<V>),
}

/// A well-formed message from a worker.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply<V> {
    /// The worker's capability announcement.
    Hello {
        protocol: Option<String>,
        capabilities: Capabilities,
    },
    /// A partial output of run `id`.
    Partial { id: u64, value: V },
    /// Progress of run `id` (AIUI sends a fraction; any value is carried).
    Progress { id: u64, value: V },
    /// Run `id` finished with `value`.
    Done { id: u64, value: V },
    /// Run `id` failed.
    Error {
        id: u64,
        message: String,
        code: Option<String>,
    },
    /// Run `id` acknowledges a cancel: it stopped.
    Cancelled { id: u64 },
    /// Run `id` applied input `input_id`.
    InputApplied { id: u64, input_id: String },
    /// Run `id` refused input `input_id`.
    InputRejected {
        id: u64,
        input_id: String,
        message: String,
    },
}

impl<V> Reply<V> {
    /// The run id the reply names, if it names one.
    pub fn id(&self) -> Option<u64> {
        match self {
            Reply::Hello { .. } => None,
            Reply::Partial { id, .. }
            | Reply::Progress { id, .. }
            | Reply::Done { id, .. }
            | Reply::Error { id, .. }
            | Reply::Cancelled { id }
            | Reply::InputApplied { id, .. }
            | Reply::InputRejected { id, .. } => Some(*id),
        }
    }

    /// The wire `type` of the reply.
    pub fn kind(&self) -> &'static str {
        match self {
            Reply::Hello { .. } => "hello",
            Reply::Partial { .. } => "partial",
            Reply::Progress { .. } => "progress",
            Reply::Done { .. } => "done",
            Reply::Error { .. } => "error",
            Reply::Cancelled { .. } => "cancelled",
            Reply::InputApplied { .. } => "input_applied",
            Reply::InputRejected { .. } => "input_rejected",
        }
    }
}

/// Why a message from a worker was refused. Recorded as a protocol error on the endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "violation", rename_all = "snake_case")]
pub enum Violation {
    /// The message is not an object.
    NotAnObject { found: String },
    /// The message exceeds the endpoint's size limit.
    Oversized { limit: usize },
    /// The transport could not decode the message at all (bad JSON line, `messageerror`).
    Undecodable { detail: String },
    /// No `type` field.
    MissingType,
    /// `type` is not a string.
    WrongType { found: String },
    /// `type` names no message of the protocol.
    UnknownType { name: String },
    /// A run message without an `id`.
    MissingId { kind: String },
    /// `id` is not a non-negative integer below 2^53.
    BadId { kind: String, found: String },
    /// A required field is missing.
    MissingField { kind: String, field: String },
    /// A field has the wrong type.
    WrongFieldType {
        kind: String,
        field: String,
        expected: String,
        found: String,
    },
    /// A remote frame's `t` names no frame of `weft-remote/1` (or none allowed here).
    UnknownFrame { t: String },
    /// A remote content frame skipped sequence numbers.
    SeqGap { expected: u64, found: u64 },
    /// A remote frame other than hello/resume before the session was authenticated.
    NotAuthenticated,
    /// A batch frame from a worker whose hello did not announce `batch`.
    BatchNotAnnounced,
    /// A batch frame with more than `limit` messages.
    BatchTooLarge { limit: usize, found: usize },
    /// A batch frame inside a batch frame.
    NestedBatch,
}

impl Violation {
    /// A one-line human description.
    pub fn describe(&self) -> String {
        match self {
            Violation::NotAnObject { found } => format!("message is a {found}, not an object"),
            Violation::Oversized { limit } => format!("message exceeds the {limit}-byte limit"),
            Violation::Undecodable { detail } => format!("undecodable message: {detail}"),
            Violation::MissingType => "message has no `type`".into(),
            Violation::WrongType { found } => format!("`type` is a {found}, not a string"),
            Violation::UnknownType { name } => format!("unknown message type `{name}`"),
            Violation::MissingId { kind } => format!("`{kind}` message has no `id`"),
            Violation::BadId { kind, found } => {
                format!("`{kind}` message has an invalid id ({found})")
            }
            Violation::MissingField { kind, field } => {
                format!("`{kind}` message lacks `{field}`")
            }
            Violation::WrongFieldType {
                kind,
                field,
                expected,
                found,
            } => format!("`{kind}`.{field} is a {found}, expected {expected}"),
            Violation::UnknownFrame { t } => format!("unknown or misplaced frame `{t}`"),
            Violation::SeqGap { expected, found } => {
                format!("frame seq {found} skips ahead of the expected {expected}")
            }
            Violation::NotAuthenticated => "no hello or resume yet: authenticate first".into(),
            Violation::BatchNotAnnounced => {
                "a batch frame, but the worker's hello did not announce `batch`".into()
            }
            Violation::BatchTooLarge { limit, found } => {
                format!("a batch of {found} messages exceeds the bound of {limit}")
            }
            Violation::NestedBatch => "a batch frame inside a batch frame".into(),
        }
    }
}

/// A refused message, with the run id when one could be read (so the run's journal can show it).
#[derive(Clone, Debug, PartialEq)]
pub struct Refused {
    pub id: Option<u64>,
    pub violation: Violation,
}

/// Where a message is parsed: whether a batch frame may appear there.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// A frame of the endpoint (`announced`: whether its worker announced `batch`).
    Top { announced: bool },
    /// An element of a batch.
    InBatch,
    /// Where batches do not exist (a remote frame's payload).
    Alone,
}

/// Parses one message from a worker, enforcing the size limit first. A `batch` frame is an
/// unknown type here (see [`parse_frame`]).
pub fn parse_reply<V: Payload>(msg: &V, max_bytes: usize) -> Result<Reply<V>, Refused> {
    match parse(msg, max_bytes, Place::Alone)? {
        Frame::One(r) => Ok(r),
        Frame::Batch(_) => unreachable!("no batch is parsed alone"),
    }
}

/// Parses one frame from an endpoint's worker: a message, or a batch frame (`announced`:
/// whether the worker's hello announced `batch`; otherwise a batch is refused whole).
pub fn parse_frame<V: Payload>(
    msg: &V,
    max_bytes: usize,
    announced: bool,
) -> Result<Frame<V>, Refused> {
    parse(msg, max_bytes, Place::Top { announced })
}

/// Parses one message of a batch frame: what it would be alone; a batch is refused
/// (`nested_batch`).
pub fn parse_batched<V: Payload>(msg: &V, max_bytes: usize) -> Result<Reply<V>, Refused> {
    match parse(msg, max_bytes, Place::InBatch)? {
        Frame::One(r) => Ok(r),
        Frame::Batch(_) => unreachable!("a batch in a batch is refused"),
    }
}

fn parse<V: Payload>(msg: &V, max_bytes: usize, place: Place) -> Result<Frame<V>, Refused> {
    let refuse = |id, violation| Refused { id, violation };
    if !msg.is_object() {
        return Err(refuse(
            None,
            Violation::NotAnObject {
                found: msg.type_name().into(),
            },
        ));
    }
    let kind = match msg.field("type") {
        None => return Err(refuse(read_id(msg).ok().flatten(), Violation::MissingType)),
        Some(t) => match t.as_text() {
            Some(s) => s,
            None => {
                return Err(refuse(
                    read_id(msg).ok().flatten(),
                    Violation::WrongType {
                        found: t.type_name().into(),
                    },
                ));
            }
        },
    };
    if kind == "hello" {
        if !msg.fits_within(max_bytes) {
            return Err(refuse(None, Violation::Oversized { limit: max_bytes }));
        }
        return parse_hello(msg).map(Frame::One);
    }
    if kind == "batch" {
        match place {
            Place::Alone => {}
            Place::InBatch => return Err(refuse(None, Violation::NestedBatch)),
            Place::Top { announced: false } => {
                return Err(refuse(None, Violation::BatchNotAnnounced));
            }
            Place::Top { announced: true } => return parse_batch(msg).map(Frame::Batch),
        }
    }
    let id = match read_id(msg) {
        Ok(Some(id)) => id,
        Ok(None) => return Err(refuse(None, Violation::MissingId { kind })),
        Err(found) => return Err(refuse(None, Violation::BadId { kind, found })),
    };
    let known = matches!(
        kind.as_str(),
        "partial"
            | "progress"
            | "done"
            | "error"
            | "cancelled"
            | "input_applied"
            | "input_rejected"
    );
    if !known {
        return Err(refuse(Some(id), Violation::UnknownType { name: kind }));
    }
    if !msg.fits_within(max_bytes) {
        return Err(refuse(Some(id), Violation::Oversized { limit: max_bytes }));
    }
    let text = |field: &str| -> Result<String, Refused> {
        match msg.field(field) {
            None => Err(refuse(
                Some(id),
                Violation::MissingField {
                    kind: kind.clone(),
                    field: field.into(),
                },
            )),
            Some(v) => v.as_text().ok_or_else(|| {
                refuse(
                    Some(id),
                    Violation::WrongFieldType {
                        kind: kind.clone(),
                        field: field.into(),
                        expected: "string".into(),
                        found: v.type_name().into(),
                    },
                )
            }),
        }
    };
    let value = |required: bool| -> Result<V, Refused> {
        match msg.field("value") {
            Some(v) if v.type_name() != "undefined" => Ok(v),
            _ if required => Err(refuse(
                Some(id),
                Violation::MissingField {
                    kind: kind.clone(),
                    field: "value".into(),
                },
            )),
            _ => Ok(V::null()),
        }
    };
    Ok(Frame::One(match kind.as_str() {
        "partial" => Reply::Partial {
            id,
            value: value(true)?,
        },
        "progress" => Reply::Progress {
            id,
            value: value(true)?,
        },
        "done" => Reply::Done {
            id,
            value: value(false)?,
        },
        "error" => {
            let message = text("message")?;
            let code = match msg.field("code") {
                None => None,
                Some(c) if c.type_name() == "undefined" || c.type_name() == "null" => None,
                Some(_) => Some(text("code")?),
            };
            Reply::Error { id, message, code }
        }
        "cancelled" => Reply::Cancelled { id },
        "input_applied" => Reply::InputApplied {
            id,
            input_id: text("inputId")?,
        },
        _ => Reply::InputRejected {
            id,
            input_id: text("inputId")?,
            message: text("message")?,
        },
    }))
}

/// The messages of an announced batch frame: a `messages` array of at most [`BATCH_MAX`].
fn parse_batch<V: Payload>(msg: &V) -> Result<Vec<V>, Refused> {
    let refuse = |violation| Refused {
        id: None,
        violation,
    };
    let list = match msg.field("messages") {
        Some(l) if l.type_name() != "undefined" => l,
        _ => {
            return Err(refuse(Violation::MissingField {
                kind: "batch".into(),
                field: "messages".into(),
            }));
        }
    };
    match list.elements(BATCH_MAX) {
        Some(Ok(items)) => Ok(items),
        Some(Err(found)) => Err(refuse(Violation::BatchTooLarge {
            limit: BATCH_MAX,
            found,
        })),
        None => Err(refuse(Violation::WrongFieldType {
            kind: "batch".into(),
            field: "messages".into(),
            expected: "array".into(),
            found: list.type_name().into(),
        })),
    }
}

/// Reads `id`: `Ok(None)` when absent, `Err(type)` when present but not a valid run id.
fn read_id<V: Payload>(msg: &V) -> Result<Option<u64>, String> {
    let Some(v) = msg.field("id") else {
        return Ok(None);
    };
    if v.type_name() == "undefined" {
        return Ok(None);
    }
    match v.as_f64() {
        Some(n) if n.fract() == 0.0 && (0.0..=MAX_SAFE_INTEGER).contains(&n) => Ok(Some(n as u64)),
        Some(n) => Err(format!("number {}", crate::value::number_text(n))),
        None => Err(v.type_name().into()),
    }
}

fn parse_hello<V: Payload>(msg: &V) -> Result<Reply<V>, Refused> {
    let protocol = msg.field("protocol").and_then(|p| p.as_text());
    let mut capabilities = Capabilities::default();
    if let Some(caps) = msg.field("capabilities") {
        if !caps.is_object() {
            return Err(Refused {
                id: None,
                violation: Violation::WrongFieldType {
                    kind: "hello".into(),
                    field: "capabilities".into(),
                    expected: "object".into(),
                    found: caps.type_name().into(),
                },
            });
        }
        let flag = |name: &str| caps.field(name).and_then(|v| v.as_bool()).unwrap_or(false);
        capabilities = Capabilities {
            input: flag("input"),
            cancel_ack: flag("cancelAck"),
            error_code: flag("errorCode"),
            batch: flag("batch"),
        };
    }
    Ok(Reply::Hello {
        protocol,
        capabilities,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn parse(v: Value) -> Result<Reply<Value>, Refused> {
        parse_reply(&v, 1 << 20)
    }

    #[test]
    fn aiui_replies_parse() {
        assert_eq!(
            parse(json!({"id": 3, "type": "progress", "value": 0.5})),
            Ok(Reply::Progress {
                id: 3,
                value: json!(0.5)
            })
        );
        assert_eq!(
            parse(json!({"id": 3, "type": "done"})),
            Ok(Reply::Done {
                id: 3,
                value: Value::Null
            })
        );
        assert_eq!(
            parse(json!({"id": 3, "type": "error", "message": "boom"})),
            Ok(Reply::Error {
                id: 3,
                message: "boom".into(),
                code: None
            })
        );
    }

    #[test]
    fn malformed_replies_are_refused_with_reasons() {
        let v = |m: Value| parse(m).unwrap_err().violation;
        assert_eq!(
            v(json!([1])),
            Violation::NotAnObject {
                found: "array".into()
            }
        );
        assert_eq!(v(json!({"id": 1})), Violation::MissingType);
        assert_eq!(
            v(json!({"type": "done"})),
            Violation::MissingId {
                kind: "done".into()
            }
        );
        assert!(matches!(
            v(json!({"id": "x", "type": "done"})),
            Violation::BadId { .. }
        ));
        assert!(matches!(
            v(json!({"id": -1, "type": "done"})),
            Violation::BadId { .. }
        ));
        assert!(matches!(
            v(json!({"id": 1.5, "type": "done"})),
            Violation::BadId { .. }
        ));
        assert_eq!(
            v(json!({"id": 1, "type": "explode"})),
            Violation::UnknownType {
                name: "explode".into()
            }
        );
        assert!(matches!(
            v(json!({"id": 1, "type": "error", "message": 5})),
            Violation::WrongFieldType { .. }
        ));
        assert!(matches!(
            v(json!({"id": 1, "type": "partial"})),
            Violation::MissingField { .. }
        ));
        let big = json!({"id": 1, "type": "done", "value": "x".repeat(2000)});
        assert_eq!(
            parse_reply(&big, 1000).unwrap_err().violation,
            Violation::Oversized { limit: 1000 }
        );
    }

    #[test]
    fn batch_frames_parse_only_where_announced() {
        let frame = json!({"type": "batch", "messages": [{"id": 1, "type": "done"}, 7]});
        let refused = |r: Result<Frame<Value>, Refused>| r.unwrap_err().violation;
        assert_eq!(
            parse_frame(&frame, 1 << 20, true),
            Ok(Frame::Batch(vec![
                json!({"id": 1, "type": "done"}),
                json!(7)
            ]))
        );
        assert_eq!(
            refused(parse_frame(&frame, 1 << 20, false)),
            Violation::BatchNotAnnounced
        );
        // Alone (a remote frame's payload) it is no message of the protocol.
        assert!(matches!(
            parse_reply(&frame, 1 << 20).unwrap_err().violation,
            Violation::MissingId { .. }
        ));
        assert_eq!(
            parse_batched(&frame, 1 << 20).unwrap_err().violation,
            Violation::NestedBatch
        );
        let over = json!({"type": "batch", "messages": vec![json!(1); BATCH_MAX + 1]});
        assert_eq!(
            refused(parse_frame(&over, 1 << 20, true)),
            Violation::BatchTooLarge {
                limit: BATCH_MAX,
                found: BATCH_MAX + 1
            }
        );
        assert!(matches!(
            refused(parse_frame(&json!({"type": "batch"}), 1 << 20, true)),
            Violation::MissingField { .. }
        ));
        assert!(matches!(
            refused(parse_frame(
                &json!({"type": "batch", "messages": {}}),
                1 << 20,
                true
            )),
            Violation::WrongFieldType { .. }
        ));
        // The size limit is each message's, not the frame's.
        let many = json!({"type": "batch", "messages": vec![json!({"id": 1, "type": "progress", "value": "x".repeat(50)}); 100]});
        assert!(matches!(parse_frame(&many, 200, true), Ok(Frame::Batch(v)) if v.len() == 100));
    }

    #[test]
    fn hello_announces_capabilities() {
        let r = parse(json!({"type": "hello", "protocol": PROTOCOL,
            "capabilities": {"input": true, "cancelAck": true}}));
        assert_eq!(
            r,
            Ok(Reply::Hello {
                protocol: Some(PROTOCOL.into()),
                capabilities: Capabilities {
                    input: true,
                    cancel_ack: true,
                    error_code: false,
                    batch: false
                }
            })
        );
    }
}
