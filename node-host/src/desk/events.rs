//! Resumable agent events of the desk's SSE stream (`GET /api/actors/events`).
//!
//! The durable agent events are the agent lines of the nodes' `chat.jsonl` (lines with an
//! `agent` field, see `weft_core::agents`). Each is sent as `event: agent` with data
//! `{"node", "output": "line", "seq", "entry", "line"}` and the SSE id `{node}:{seq}` (`seq`
//! is the line's 1-based number in the node's `chat.jsonl`), so an id names a line on disk and
//! stays meaningful across restarts.
//!
//! [`Journal`] keeps the order of the last [`REPLAY_MAX`] such lines as `(node, seq)` pointers
//! only (the text is read back from the graph, the mirror of the acknowledged lines): a
//! reconnecting client's `Last-Event-ID` is looked up there and the lines after it are
//! replayed; an id that is older (or unknown) is answered with one `reset` event (re-fetch the
//! state). At start the journal is rebuilt from disk (lines ordered by their `at`, then node
//! and seq). Released outputs (`model_request`, `start_call`, ...) and text deltas are live
//! only: they carry no id and are not replayed.

use std::collections::{HashMap, VecDeque};

use serde_json::{Value, json};
use weft_core::actors::ActorGraph;
use weft_core::agents::AGENT_FIELD;

use crate::agents::AgentEvent;

/// The most durable events a reconnecting client is sent; a larger gap is one `reset` event.
pub const REPLAY_MAX: usize = 512;

/// The id a stream sends before any agent line exists: "before everything".
pub const START_ID: &str = "-";

/// What the desk's event streams receive live.
#[derive(Clone, Debug)]
pub enum Live {
    /// A released output of the runtime (live only).
    Agent(AgentEvent),
    /// A streamed text delta; `at` is its offset in the step's text (UTF-16 code units, as
    /// JavaScript counts), so a page that restored the partial text can join without doubling.
    Delta {
        /// The runtime's delta event.
        event: AgentEvent,
        /// The offset of the delta's first unit in the step's text.
        at: u64,
    },
    /// A durable agent line (resumable).
    Line(LineEvent),
}

/// One durable agent line as an SSE event.
#[derive(Clone, Debug)]
pub struct LineEvent {
    /// The journal's (process-local) position, for exactly-once joins of replay and live.
    pub cursor: u64,
    /// The SSE id `{node}:{seq}`.
    pub id: String,
    /// The event's data.
    pub data: Value,
}

/// What a reconnecting client is sent before the live events.
#[derive(Debug)]
pub struct Replay {
    /// The lines after the client's id (empty when none or on reset).
    pub events: Vec<LineEvent>,
    /// The client's id is older than the journal (or unknown): send one `reset`.
    pub reset: bool,
    /// Live line events before this cursor were replayed (or are older): skip them.
    pub next: u64,
    /// The newest id (what the stream's first `change` event carries).
    pub newest: String,
}

/// The order of the last [`REPLAY_MAX`] durable agent lines. See the [module docs](self).
#[derive(Debug)]
pub struct Journal {
    /// How many lines the ring holds ([`REPLAY_MAX`]).
    cap: usize,
    /// `(node, seq)` of the lines; the front one has cursor `base`.
    ring: VecDeque<(String, u64)>,
    base: u64,
    /// Whether lines fell out of the ring (or were not taken at start).
    dropped: bool,
    /// How many chat lines of each agent node were looked at.
    scanned: HashMap<String, usize>,
}

impl Default for Journal {
    fn default() -> Self {
        Journal {
            cap: REPLAY_MAX,
            ring: VecDeque::new(),
            base: 0,
            dropped: false,
            scanned: HashMap::new(),
        }
    }
}

fn is_agent_line(l: &weft_core::actors::ChatLine) -> bool {
    l.extra.get(AGENT_FIELD).is_some_and(Value::is_object)
}

fn id_of(node: &str, seq: u64) -> String {
    format!("{node}:{seq}")
}

impl Journal {
    /// Rebuilds the journal from the agent lines of `nodes` (the nodes whose agents opened).
    pub fn open<'a>(graph: &ActorGraph, nodes: impl Iterator<Item = &'a str>) -> Journal {
        let mut j = Journal::default();
        let mut all: Vec<(String, String, u64)> = Vec::new();
        for n in nodes {
            let chat = graph.chat(n).unwrap_or_default();
            for (i, e) in chat.iter().enumerate() {
                if let Some(l) = e.ok().filter(|l| is_agent_line(l)) {
                    all.push((l.at.clone(), n.to_owned(), i as u64 + 1));
                }
            }
            j.scanned.insert(n.to_owned(), chat.len());
        }
        all.sort();
        if all.len() > j.cap {
            j.dropped = true;
            all.drain(..all.len() - j.cap);
        }
        j.ring = all.into_iter().map(|(_, n, s)| (n, s)).collect();
        j
    }

    fn push(&mut self, node: &str, seq: u64) -> u64 {
        if self.ring.len() >= self.cap {
            self.ring.pop_front();
            self.base += 1;
            self.dropped = true;
        }
        self.ring.push_back((node.to_owned(), seq));
        self.base + self.ring.len() as u64 - 1
    }

    /// The agent lines `node` gained since the last look, journaled, as events.
    pub fn scan(&mut self, graph: &ActorGraph, node: &str) -> Vec<LineEvent> {
        let chat = graph.chat(node).unwrap_or_default();
        let from = self.scanned.get(node).copied().unwrap_or(0).min(chat.len());
        self.scanned.insert(node.to_owned(), chat.len());
        let mut out = Vec::new();
        for (i, e) in chat.iter().enumerate().skip(from) {
            if let Some(l) = e.ok().filter(|l| is_agent_line(l)) {
                let seq = i as u64 + 1;
                let cursor = self.push(node, seq);
                out.push(event(cursor, node, seq, l));
            }
        }
        out
    }

    /// The newest id ([`START_ID`] when there is none).
    pub fn newest(&self) -> String {
        self.ring
            .back()
            .map_or_else(|| START_ID.to_owned(), |(n, s)| id_of(n, *s))
    }

    /// What a client whose last event was `last` missed (`None`: a fresh client).
    pub fn after(&self, graph: &ActorGraph, last: Option<&str>) -> Replay {
        let mut r = Replay {
            events: Vec::new(),
            reset: false,
            next: self.base + self.ring.len() as u64,
            newest: self.newest(),
        };
        let Some(last) = last.map(str::trim) else {
            return r;
        };
        let from = if last == START_ID {
            (!self.dropped).then_some(0)
        } else {
            last.rsplit_once(':')
                .and_then(|(n, s)| Some((n, s.parse::<u64>().ok()?)))
                .and_then(|(n, s)| self.ring.iter().position(|(rn, rs)| rn == n && *rs == s))
                .map(|i| i + 1)
        };
        let Some(from) = from else {
            r.reset = true;
            return r;
        };
        for (i, (n, s)) in self.ring.iter().enumerate().skip(from) {
            let line = graph
                .chat(n)
                .and_then(|c| c.get(*s as usize - 1))
                .and_then(|e| e.ok());
            if let Some(l) = line {
                r.events.push(event(self.base + i as u64, n, *s, l));
            }
        }
        r
    }
}

fn event(cursor: u64, node: &str, seq: u64, l: &weft_core::actors::ChatLine) -> LineEvent {
    let line = serde_json::to_value(l).unwrap_or(Value::Null);
    LineEvent {
        cursor,
        id: id_of(node, seq),
        data: json!({
            "node": node,
            "output": "line",
            "seq": seq,
            "entry": line[AGENT_FIELD]["entry"],
            "line": line,
        }),
    }
}

#[cfg(test)]
mod tests {
    use weft_core::actors::{ActorStore, ActorsError, HarnessConfig, MemoryStore, NewLine};
    use weft_core::agents::AgentConfig;

    use super::*;
    use crate::agents::Runtime;

    /// A graph whose coordinator's agent (the built-in model) answered `turns` lines.
    fn answered(turns: usize) -> ActorGraph {
        let (config, _) = HarnessConfig::from_vars(Vec::<(String, String)>::new()).unwrap();
        let mut store = MemoryStore::default();
        let snap = store.load().unwrap();
        let mut g = ActorGraph::init(
            config,
            "memory:",
            &snap,
            weft_core::Wall::from_ms(1_000),
            "test",
        )
        .unwrap();
        let mut flush = |g: &mut ActorGraph| {
            for b in g.take_batches() {
                let done = store.perform(&b).map_err(ActorsError::StoreIo)?;
                g.ack(done)?;
            }
            Ok(())
        };
        flush(&mut g).unwrap();
        let mut rt = Runtime::new(AgentConfig::default(), true, Box::new(|_| {}));
        rt.want("coordinator");
        for t in 0..turns {
            g.append(
                weft_core::Wall::from_ms(2_000 + t as u64),
                "coordinator",
                NewLine::user(format!("q{t}")),
            )
            .unwrap();
            let at = 2_000 + t as u64;
            let now = weft_core::time::Now::new(
                weft_core::Mono::from_ms(at),
                weft_core::Wall::from_ms(at),
            );
            rt.pump(now, &mut g, &mut flush).unwrap();
        }
        g
    }

    #[test]
    fn a_known_id_replays_what_followed_once_and_an_old_or_bad_id_resets() {
        let mut j = Journal::default();
        assert_eq!(j.newest(), START_ID);
        let g = answered(1);
        let evs = j.scan(&g, "coordinator");
        let chat = g.chat("coordinator").unwrap();
        let agent_lines = chat
            .iter()
            .filter(|e| e.ok().is_some_and(is_agent_line))
            .count();
        assert!(agent_lines >= 3, "turn_start, assistant, turn_end");
        assert_eq!(
            evs.len(),
            agent_lines,
            "only agent lines are durable events"
        );
        assert!(chat.len() > agent_lines, "the user line is not one");
        assert_eq!(j.scan(&g, "coordinator").len(), 0, "each line once");
        assert_eq!(evs.last().unwrap().data["entry"], "turn_end");
        let first = evs[0].id.clone();
        let r = j.after(&g, Some(&first));
        assert!(!r.reset);
        let ids: Vec<&str> = r.events.iter().map(|e| e.id.as_str()).collect();
        let want: Vec<&str> = evs[1..].iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, want);
        assert_eq!(r.next, evs.last().unwrap().cursor + 1);
        assert_eq!(Journal::default().after(&g, None).next, 0);
        // Before everything: all of it; a fresh client: nothing.
        assert_eq!(j.after(&g, Some(START_ID)).events.len(), evs.len());
        assert!(j.after(&g, None).events.is_empty());
        assert!(j.after(&g, Some("nobody:3")).reset);
        assert!(j.after(&g, Some("garbage")).reset);
        // Rebuilt from the lines: the same newest id and order.
        let again = Journal::open(&g, ["coordinator"].into_iter());
        assert_eq!(again.newest(), j.newest());
        assert_eq!(again.ring, j.ring);
        // The ring holds `cap` lines; an id that fell out is a reset.
        let mut small = Journal {
            cap: 2,
            ..Journal::default()
        };
        assert_eq!(small.scan(&g, "coordinator").len(), evs.len());
        assert!(small.after(&g, Some(&first)).reset);
        assert!(small.after(&g, Some(START_ID)).reset);
        let r = small.after(&g, Some(&evs[evs.len() - 2].id));
        assert_eq!(r.events.len(), 1);
        assert!(!r.reset);
    }
}
