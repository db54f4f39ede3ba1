//! The bounded replay buffer of one session direction: the frames not yet acknowledged.
//!
//! Frames are pushed without `seq`/`ack`; [`ReplayBuffer::take_unsent`] numbers and stamps them
//! when they go on the wire. An ack trims what the peer applied; a resume
//! ([`ReplayBuffer::rewind`]) trims to the peer's ack and renumbers the rest from there, so the
//! peer sees a contiguous sequence even after frames were dropped.
//!
//! Bounds: at most `max_frames` frames and `max_bytes` bytes. Past a bound the oldest droppable
//! frame (progress or partial, not yet sent if there is one) is dropped and counted for its
//! run; the first dropped frame of a run becomes, in place, a `missed` marker that goes out
//! with the exact counts, ahead of every later frame of that run. Milestones (hello, accepted,
//! input answers, terminal frames, requests) are never dropped: their number is bounded by the
//! session's run cap and the server's cap on unacknowledged undroppable frames
//! (`REMOTE_BUFFER_FULL`), not here.

use std::collections::{HashMap, VecDeque};

use serde_json::Value;

use super::frames;

/// Whether a frame may be dropped under pressure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameClass {
    /// A progress report (droppable).
    Progress,
    /// A partial output (droppable).
    Partial,
    /// Everything else: never dropped.
    Milestone,
}

/// The size a `missed` marker is counted at.
const MARKER_BYTES: usize = 80;

#[derive(Debug)]
enum Body {
    Frame(Value),
    /// A progress or partial report of the entry's run, built into its `msg` frame when sent
    /// (most of a flood is dropped unbuilt).
    Report(Value),
    /// A `missed` marker whose counts are in `ReplayBuffer::open` until it is sent.
    Missed {
        wire: u64,
    },
}

#[derive(Debug)]
struct Entry {
    /// Assigned when sent (0 before).
    seq: u64,
    class: FrameClass,
    wire: Option<u64>,
    bytes: usize,
    body: Body,
}

/// A bounded outbox of frames awaiting acknowledgement (see the module docs).
#[derive(Debug)]
pub struct ReplayBuffer {
    entries: VecDeque<Entry>,
    /// `entries[..sent]` went on the wire.
    sent: usize,
    bytes: usize,
    max_frames: usize,
    max_bytes: usize,
    /// The last seq handed out.
    last_seq: u64,
    /// Runs with an unsent `missed` marker, with its (progress, partial) counts.
    open: HashMap<u64, (u64, u64)>,
    milestones: usize,
    dropped_progress: u64,
    dropped_partial: u64,
}

/// The encoded size of a JSON value, estimated by one walk (no serialization): exact for
/// ASCII text without escapes, integers and structure; 24 bytes per non-integer number.
pub fn encoded_len(v: &Value) -> usize {
    match v {
        Value::Null => 4,
        Value::Bool(b) => 4 + usize::from(!*b),
        Value::Number(n) => match n.as_u64() {
            Some(u) => digits(u),
            None => match n.as_i64() {
                Some(i) => 1 + digits(i.unsigned_abs()),
                None => 24,
            },
        },
        Value::String(s) => s.len() + 2,
        Value::Array(a) => 2 + a.len().saturating_sub(1) + a.iter().map(encoded_len).sum::<usize>(),
        Value::Object(o) => {
            2 + o.len().saturating_sub(1)
                + o.iter()
                    .map(|(k, v)| k.len() + 3 + encoded_len(v))
                    .sum::<usize>()
        }
    }
}

fn digits(mut u: u64) -> usize {
    let mut n = 1;
    while u >= 10 {
        u /= 10;
        n += 1;
    }
    n
}

impl ReplayBuffer {
    /// An empty buffer with these bounds (each at least 1).
    pub fn new(max_frames: usize, max_bytes: usize) -> Self {
        ReplayBuffer {
            entries: VecDeque::new(),
            sent: 0,
            bytes: 0,
            max_frames: max_frames.max(1),
            max_bytes: max_bytes.max(1),
            last_seq: 0,
            open: HashMap::new(),
            milestones: 0,
            dropped_progress: 0,
            dropped_partial: 0,
        }
    }

    /// Frames held (sent and unacknowledged, or not yet sent).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes held (encoded size of the frames, markers counted at a fixed size).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Frames not yet sent.
    pub fn unsent(&self) -> usize {
        self.entries.len() - self.sent
    }

    /// Undroppable frames held.
    pub fn milestones(&self) -> usize {
        self.milestones
    }

    /// The last seq handed out.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Progress and partial frames dropped so far (all reported in `missed` frames).
    pub fn dropped(&self) -> (u64, u64) {
        (self.dropped_progress, self.dropped_partial)
    }

    /// Adds a frame for run `wire` (if any), then enforces the bounds.
    pub fn push(&mut self, wire: Option<u64>, class: FrameClass, frame: Value) {
        let bytes = encoded_len(&frame) + 24;
        if class == FrameClass::Milestone {
            self.milestones += 1;
        }
        self.bytes += bytes;
        self.entries.push_back(Entry {
            seq: 0,
            class,
            wire,
            bytes,
            body: Body::Frame(frame),
        });
        while (self.entries.len() > self.max_frames || self.bytes > self.max_bytes)
            && self.evict_one()
        {}
    }

    /// Adds a progress (or partial) report of run `wire` carrying `value`: the `msg` frame
    /// `{"t":"msg","body":{"id":wire,"type":"progress"|"partial","value":value}}`, built only
    /// if it is sent.
    pub fn push_report(&mut self, wire: u64, partial: bool, value: Value) {
        let (class, t) = if partial {
            (FrameClass::Partial, "partial")
        } else {
            (FrameClass::Progress, "progress")
        };
        // {"t":"msg","body":{"id":W,"type":"T","value":V}}
        let bytes = 45 + digits(wire) + t.len() + encoded_len(&value) + 24;
        self.bytes += bytes;
        self.entries.push_back(Entry {
            seq: 0,
            class,
            wire: Some(wire),
            bytes,
            body: Body::Report(value),
        });
        while (self.entries.len() > self.max_frames || self.bytes > self.max_bytes)
            && self.evict_one()
        {}
    }

    /// Counts frames of run `wire` that never reached the buffer (e.g. an observer queue
    /// overflowed upstream) into its next `missed` report.
    pub fn add_missed(&mut self, wire: u64, progress: u64, partial: u64) {
        self.dropped_progress += progress;
        self.dropped_partial += partial;
        if let Some(c) = self.open.get_mut(&wire) {
            c.0 += progress;
            c.1 += partial;
            return;
        }
        self.open.insert(wire, (progress, partial));
        self.push_marker(wire);
    }

    fn push_marker(&mut self, wire: u64) {
        self.milestones += 1;
        self.bytes += MARKER_BYTES;
        self.entries.push_back(Entry {
            seq: 0,
            class: FrameClass::Milestone,
            wire: Some(wire),
            bytes: MARKER_BYTES,
            body: Body::Missed { wire },
        });
    }

    /// Drops the oldest droppable frame, unsent ones first. False when there is none.
    fn evict_one(&mut self) -> bool {
        let droppable = |e: &Entry| e.class != FrameClass::Milestone;
        let unsent = self
            .entries
            .iter()
            .skip(self.sent)
            .position(droppable)
            .map(|i| i + self.sent);
        let Some(i) = unsent.or_else(|| self.entries.iter().take(self.sent).position(droppable))
        else {
            return false;
        };
        let (class, wire) = (self.entries[i].class, self.entries[i].wire.unwrap_or(0));
        let (p, q) = if class == FrameClass::Progress {
            self.dropped_progress += 1;
            (1, 0)
        } else {
            self.dropped_partial += 1;
            (0, 1)
        };
        if let Some(c) = self.open.get_mut(&wire) {
            c.0 += p;
            c.1 += q;
            let e = self.entries.remove(i).expect("indexed");
            self.bytes -= e.bytes;
            if i < self.sent {
                self.sent -= 1;
            }
        } else if i >= self.sent {
            // The run's first dropped frame becomes its marker, in place.
            self.open.insert(wire, (p, q));
            let e = &mut self.entries[i];
            self.bytes = self.bytes - e.bytes + MARKER_BYTES;
            e.bytes = MARKER_BYTES;
            e.class = FrameClass::Milestone;
            e.body = Body::Missed { wire };
            self.milestones += 1;
        } else {
            // A sent, unacknowledged frame: its report goes out after what is queued.
            let e = self.entries.remove(i).expect("indexed");
            self.bytes -= e.bytes;
            self.sent -= 1;
            self.open.insert(wire, (p, q));
            self.push_marker(wire);
        }
        true
    }

    /// Numbers, stamps (`seq`, `ack`) and returns every unsent frame, marking it sent.
    #[must_use = "the frames are marked sent: send them"]
    pub fn take_unsent(&mut self, ack: u64) -> Vec<Value> {
        let mut out = Vec::with_capacity(self.entries.len() - self.sent);
        for i in self.sent..self.entries.len() {
            self.last_seq += 1;
            let seq = self.last_seq;
            let e = &mut self.entries[i];
            e.seq = seq;
            match std::mem::replace(&mut e.body, Body::Frame(Value::Null)) {
                Body::Missed { wire } => {
                    let (p, q) = self.open.remove(&wire).unwrap_or((0, 0));
                    e.body = Body::Frame(frames::missed(wire, p, q));
                }
                Body::Report(value) => {
                    let t = if e.class == FrameClass::Partial {
                        "partial"
                    } else {
                        "progress"
                    };
                    let id = e.wire.unwrap_or(0);
                    let body = serde_json::json!({"id": id, "type": t, "value": value});
                    e.body = Body::Frame(frames::msg(body, None));
                }
                frame @ Body::Frame(_) => e.body = frame,
            }
            let Body::Frame(f) = &e.body else {
                unreachable!("materialized above")
            };
            let mut f = f.clone();
            if let Value::Object(m) = &mut f {
                m.insert("seq".into(), seq.into());
                m.insert("ack".into(), ack.into());
            }
            out.push(f);
        }
        self.sent = self.entries.len();
        out
    }

    /// The peer applied every frame up to `ack`: drops them. An ack beyond what was sent is
    /// refused (`Err` with the last seq sent) and changes nothing.
    pub fn on_ack(&mut self, ack: u64) -> Result<(), u64> {
        if ack > self.last_seq {
            return Err(self.last_seq);
        }
        while self.sent > 0 && self.entries.front().is_some_and(|e| e.seq <= ack) {
            let e = self.entries.pop_front().expect("checked");
            self.bytes -= e.bytes;
            if e.class == FrameClass::Milestone {
                self.milestones -= 1;
            }
            self.sent -= 1;
        }
        Ok(())
    }

    /// A resume: the peer applied everything up to `ack` and nothing after. Drops what it has,
    /// marks the rest unsent and numbers it again from `ack + 1` on the next
    /// [`ReplayBuffer::take_unsent`]. Returns how many frames will be replayed.
    pub fn rewind(&mut self, ack: u64) -> Result<usize, u64> {
        self.on_ack(ack)?;
        self.sent = 0;
        self.last_seq = ack;
        Ok(self.entries.len())
    }
}
