//! The records of `$CHAT_ROOT`, mirroring the files 1:1. Every struct keeps the fields this
//! version does not know in `extra`, so a rewrite never loses what another writer put there;
//! enumerations keep unknown values verbatim (`Other`).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::id::NodeId;

macro_rules! open_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $var:ident = $s:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vm])* $var,)*
            /// A value this version does not know, kept verbatim.
            Other(String),
        }
        impl $name {
            /// The value as written on disk.
            pub fn as_str(&self) -> &str {
                match self { $(Self::$var => $s,)* Self::Other(s) => s }
            }
            /// Reads a value; unknown values become `Other`.
            pub fn parse(s: &str) -> Self {
                match s { $($s => Self::$var,)* other => Self::Other(other.to_owned()) }
            }
            /// The values this version knows.
            pub const KNOWN: &'static [&'static str] = &[$($s),*];
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.as_str()) }
        }
        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                Ok(Self::parse(&String::deserialize(d)?))
            }
        }
    };
}

open_enum!(
    /// What a node is for; decides UI chrome and spawn rules. Extensible: other types share the
    /// same record and are routed like discussions.
    NodeType {
        /// The root orchestrator: grid owner, continuous top-level voice.
        Coordinator = "coordinator",
        /// An exploratory context; human Q&A cadence.
        Discussion = "discussion",
        /// A bounded job that publishes status to the grid; worker cadence.
        Task = "task",
        /// A short-lived resolver of an unclear parent/child boundary.
        Disambiguation = "disambiguation",
    }
);

impl NodeType {
    /// Whether the node belongs to the discussion surface (human cadence), where worker
    /// progress, tool noise and completion dumps must never land.
    pub fn is_discussion_surface(&self) -> bool {
        matches!(
            self,
            NodeType::Coordinator | NodeType::Discussion | NodeType::Disambiguation
        )
    }
}

open_enum!(
    /// A node's mailbox state.
    Status {
        Idle = "idle",
        Running = "running",
        Blocked = "blocked",
        AwaitingUser = "awaiting_user",
        Done = "done",
        Failed = "failed",
        Cancelled = "cancelled",
    }
);

impl Status {
    /// Terminal statuses end a node's work: waits on it are satisfied, it never fades.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Status::Done | Status::Failed | Status::Cancelled)
    }
}

#[allow(clippy::derivable_impls)] // the enum comes from a macro shared with types without a default
impl Default for Status {
    fn default() -> Self {
        Status::Idle
    }
}

open_enum!(
    /// Who wrote a chat line. `tool`, `progress` and `completion` are worker cadence.
    Role {
        User = "user",
        Assistant = "assistant",
        System = "system",
        /// A one-line routing marker written by spawn/resolve.
        Routing = "routing",
        Tool = "tool",
        Progress = "progress",
        Completion = "completion",
    }
);

impl Role {
    /// Worker cadence: never allowed on the discussion surface.
    pub fn is_worker_cadence(&self) -> bool {
        matches!(self, Role::Tool | Role::Progress | Role::Completion)
    }
}

open_enum!(
    /// A node's git close-out policy.
    GitCloseout {
        /// Commit locally; the coordinator pushes once after the wave.
        CoordinatorBatch = "coordinator-batch",
        /// Commit locally; the parent or coordinator pushes.
        CommitOnly = "commit-only",
        /// Commit and push on this node's own close-out.
        PerNode = "per-node",
        /// No automatic close-out.
        Off = "off",
    }
);

open_enum!(
    /// How a wait subscription treats a non-terminal mailbox.
    WaitMode {
        /// Maybe-stale: warn, keep working.
        Warn = "warn",
        /// Definite: block model calls until the target is terminal.
        Enforce = "enforce",
    }
);

open_enum!(
    /// A non-spawn edge.
    RelatedKind {
        WaitsOn = "waits-on",
        References = "references",
        SoftDependency = "soft-dependency",
        /// A resolved disambiguation points at the nodes it resolved into.
        ResolvedInto = "resolved-into",
    }
);

/// A declared subscription to another node's mailbox (`waitOn: [{node, mode}]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WaitOn {
    pub node: NodeId,
    #[serde(default = "warn")]
    pub mode: WaitMode,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn warn() -> WaitMode {
    WaitMode::Warn
}

/// A non-spawn edge on a node (`related: [{kind, node}]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Related {
    pub kind: RelatedKind,
    pub node: NodeId,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `nodes/{id}/meta.json`: the full node struct. Authoritative together with `chat.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub id: NodeId,
    #[serde(rename = "type")]
    pub node_type: NodeType,
    /// Where the node lives (`$CHAT_ROOT/nodes/{id}`), as the writing host named it.
    #[serde(default)]
    pub address: String,
    #[serde(rename = "spawnedBy", default, skip_serializing_if = "Option::is_none")]
    pub spawned_by: Option<NodeId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub related: Vec<Related>,
    #[serde(default)]
    pub status: Status,
    #[serde(default)]
    pub summary: String,
    #[serde(rename = "viewEpoch", default, skip_serializing_if = "Option::is_none")]
    pub view_epoch: Option<u64>,
    #[serde(rename = "awaitingUser", default)]
    pub awaiting_user: bool,
    #[serde(rename = "waitOn", default, skip_serializing_if = "Vec::is_empty")]
    pub wait_on: Vec<WaitOn>,
    #[serde(
        rename = "gitCloseout",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub git_closeout: Option<GitCloseout>,
    /// Set when the close-out was chosen explicitly (a wave never overrides it).
    #[serde(
        rename = "gitCloseoutExplicit",
        default,
        skip_serializing_if = "is_false"
    )]
    pub git_closeout_explicit: bool,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub topic: String,
    /// Archived: hidden from global views, never deleted.
    #[serde(default)]
    pub hidden: bool,
    #[serde(
        rename = "archivedAt",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub archived_at: Option<String>,
    /// While set, messages to this node are refused until that disambiguation resolves.
    #[serde(
        rename = "routingPausedBy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub routing_paused_by: Option<NodeId>,
    /// On a disambiguation node: it pauses its parent until resolved.
    #[serde(rename = "pausesParent", default, skip_serializing_if = "is_false")]
    pub pauses_parent: bool,
    /// On a resolved disambiguation node: the candidates it linked its parent to.
    #[serde(
        rename = "resolvedInto",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub resolved_into: Option<Vec<NodeId>>,
    #[serde(rename = "createdAt", default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    #[serde(
        rename = "lastTouchedAt",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_touched_at: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    /// Every child this node forked, in spawn order. Written last but one (a spawn grows the
    /// record in place: see `Op::Patch`).
    #[serde(default)]
    pub spawned: Vec<NodeId>,
    /// Written last, after `spawned` (a spawn rewrites it with the closing bytes).
    #[serde(
        rename = "lastEventAt",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_event_at: Option<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One entry of `graph.json`'s `nodes` map.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraphEntry {
    #[serde(rename = "type")]
    pub node_type: NodeType,
    #[serde(rename = "spawnedBy", default, skip_serializing_if = "Option::is_none")]
    pub spawned_by: Option<NodeId>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A related (non-spawn) edge in `graph.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Edge {
    pub from: NodeId,
    pub to: NodeId,
    pub kind: RelatedKind,
}

/// `graph.json`: the index of node ids, types, spawn edges and related edges.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraphIndex {
    #[serde(default = "one")]
    pub version: u64,
    pub root: NodeId,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub related: Vec<Edge>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    /// Written last (a spawn adds its entry in place: see `Op::Patch`).
    #[serde(default)]
    pub nodes: std::collections::BTreeMap<String, GraphEntry>,
}

fn one() -> u64 {
    1
}

/// One line of `nodes/{id}/chat.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatLine {
    #[serde(default)]
    pub at: String,
    pub role: Role,
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub tokens: u64,
    /// On routing markers: the node this line routed to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawn: Option<NodeId>,
    /// On lines delivered from another node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<NodeId>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ChatLine {
    /// The child a routing marker announces: the `spawn` field, or (for lines written by
    /// dev-centr/harness) the id in backticks of "→ spawned {type} `{id}`".
    pub fn spawned_child(&self) -> Option<NodeId> {
        if self.role != Role::Routing {
            return None;
        }
        if let Some(c) = &self.spawn {
            return Some(c.clone());
        }
        let rest = self.text.split_once("spawned ")?.1;
        let inner = rest.split_once('`')?.1.split_once('`')?.0;
        NodeId::parse(inner).ok()
    }
}

/// A mailbox version (`summaries/latest.json` and `summaries/v{n}.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mailbox {
    pub node: NodeId,
    pub version: u64,
    pub status: Status,
    pub summary: String,
    #[serde(default)]
    pub at: String,
    /// The last chat line this summary covers.
    #[serde(rename = "throughLine", default)]
    pub through_line: u64,
    /// The version this one compacts (`None` for the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<u64>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
