//! Harness variables. Hosts read the environment; the core receives a [`HarnessConfig`] built
//! by [`HarnessConfig::from_vars`] from `(name, value)` pairs, with the seed's defaults and the
//! deprecated `PROJECT_INBOX*` aliases mapped.

use serde::Serialize;

use super::ActorsError;

/// `ACTOR_AGENTIC_UI`: how chat is organised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgenticUi {
    /// Persist the node graph; grid updates for tasks; detail chat in node forks (default).
    GraphGrid,
    /// Legacy: every line in one scroll; nothing spawns.
    Serialized,
    /// Single-node mode; nothing spawns.
    Off,
}

/// `ACTOR_WAIT_GRAPH`: how wait subscriptions act.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WaitGraphMode {
    /// Maybe-stale warnings on sibling mailbox reads; each subscription's own mode applies, so
    /// an `enforce` subscription still blocks (default).
    Warn,
    /// Every subscription blocks model calls until its target is terminal.
    Enforce,
    /// No warnings, no blocking.
    Off,
}

/// `ACTOR_NODE_STORE`: where node state lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeStoreMode {
    /// Per-node `chat.jsonl` is authoritative; the metathread holds refs (default).
    JsonlPerNode,
    /// Nothing is persisted (hosts use the memory store).
    Off,
}

/// `GIT_CLOSEOUT`: the close-out default for new nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CloseoutDefault {
    /// Task leaves commit locally, the coordinator batch-pushes after the wave.
    CoordinatorBatch,
    /// Each node commits and pushes on its own close-out (serialized / single agent), except
    /// task leaves of a high-volatility wave, which fall back to coordinator-batch.
    PerNode,
    /// No close-out policy on nodes.
    Off,
}

/// The harness variables as one value, plus the temporal fade parameters.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HarnessConfig {
    pub agentic_ui: AgenticUi,
    pub graph_epochs: bool,
    pub wait_graph: WaitGraphMode,
    pub node_store: NodeStoreMode,
    pub git_closeout: CloseoutDefault,
    /// Idle time after which a node starts to fade.
    pub fade_after_ms: u64,
    /// Idle time at which a node reaches `fade_floor`.
    pub fade_full_ms: u64,
    /// The dimmest a faded node gets (never 0: fade is not delete).
    pub fade_floor: f64,
}

impl Default for HarnessConfig {
    fn default() -> Self {
        HarnessConfig {
            agentic_ui: AgenticUi::GraphGrid,
            graph_epochs: false,
            wait_graph: WaitGraphMode::Warn,
            node_store: NodeStoreMode::JsonlPerNode,
            git_closeout: CloseoutDefault::CoordinatorBatch,
            fade_after_ms: 60 * 60 * 1000,
            fade_full_ms: 48 * 60 * 60 * 1000,
            fade_floor: 0.25,
        }
    }
}

/// The variable names a host should pass to [`HarnessConfig::from_vars`].
pub const VARIABLES: &[&str] = &[
    "ACTOR_AGENTIC_UI",
    "ACTOR_GRAPH_EPOCHS",
    "ACTOR_WAIT_GRAPH",
    "ACTOR_NODE_STORE",
    "GIT_CLOSEOUT",
    "PROJECT_INBOX",
    "PROJECT_INBOX_CHAPTERS",
    "PROJECT_INBOX_WAIT_GRAPH",
    "PROJECT_INBOX_NODE_STORE",
];

/// Deprecated names and the variables they stand for.
const ALIASES: &[(&str, &str)] = &[
    ("PROJECT_INBOX", "ACTOR_AGENTIC_UI"),
    ("PROJECT_INBOX_CHAPTERS", "ACTOR_GRAPH_EPOCHS"),
    ("PROJECT_INBOX_WAIT_GRAPH", "ACTOR_WAIT_GRAPH"),
    ("PROJECT_INBOX_NODE_STORE", "ACTOR_NODE_STORE"),
];

impl HarnessConfig {
    /// Builds the config from variables (`("ACTOR_WAIT_GRAPH", "enforce")`, ...). Unrelated
    /// names are ignored, empty values count as unset, values are case-insensitive. Deprecated
    /// `PROJECT_INBOX*` names are honoured (the `grid-forks` value maps to `graph-grid`) with a
    /// note; the current name wins when both are set. Returns the notes alongside the config;
    /// an unknown value is a `CONFIG_INVALID` error naming the variable.
    pub fn from_vars<I, K, V>(vars: I) -> Result<(HarnessConfig, Vec<String>), ActorsError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut set: std::collections::BTreeMap<&'static str, (String, String)> =
            Default::default();
        let mut aliased: Vec<(&'static str, &'static str, String)> = Vec::new();
        let mut notes = Vec::new();
        for (k, v) in vars {
            let (k, v) = (k.as_ref(), v.as_ref().trim());
            if v.is_empty() {
                continue;
            }
            if let Some((old, new)) = ALIASES.iter().find(|(old, _)| *old == k) {
                aliased.push((old, new, v.to_owned()));
            } else if let Some(name) = VARIABLES.iter().find(|n| **n == k) {
                set.insert(name, (name.to_string(), v.to_owned()));
            }
        }
        for (old, new, v) in aliased {
            if set.contains_key(new) {
                notes.push(format!(
                    "{old} is deprecated and ignored: {new} is also set"
                ));
            } else {
                notes.push(format!("{old} is deprecated; read as {new}"));
                set.insert(new, (old.to_owned(), v));
            }
        }
        let bad = |(var, value): &(String, String), expected: &str| ActorsError::Config {
            var: var.clone(),
            value: value.clone(),
            expected: expected.to_owned(),
        };
        let mut c = HarnessConfig::default();
        if let Some(kv) = set.get("ACTOR_AGENTIC_UI") {
            c.agentic_ui = match kv.1.to_ascii_lowercase().as_str() {
                "graph-grid" | "grid-forks" => AgenticUi::GraphGrid,
                "serialized" => AgenticUi::Serialized,
                "off" => AgenticUi::Off,
                _ => return Err(bad(kv, "graph-grid | serialized | off")),
            };
        }
        // Defaults that depend on the UI mode: graph-grid → coordinator-batch; otherwise
        // single-agent close-out.
        if c.agentic_ui != AgenticUi::GraphGrid {
            c.git_closeout = CloseoutDefault::PerNode;
        }
        if let Some(kv) = set.get("ACTOR_GRAPH_EPOCHS") {
            c.graph_epochs = match kv.1.to_ascii_lowercase().as_str() {
                "on" | "true" | "1" => true,
                "off" | "false" | "0" => false,
                _ => return Err(bad(kv, "on | off")),
            };
        }
        if let Some(kv) = set.get("ACTOR_WAIT_GRAPH") {
            c.wait_graph = match kv.1.to_ascii_lowercase().as_str() {
                "warn" => WaitGraphMode::Warn,
                "enforce" => WaitGraphMode::Enforce,
                "off" => WaitGraphMode::Off,
                _ => return Err(bad(kv, "warn | enforce | off")),
            };
        }
        if let Some(kv) = set.get("ACTOR_NODE_STORE") {
            c.node_store = match kv.1.to_ascii_lowercase().as_str() {
                "jsonl-per-node" => NodeStoreMode::JsonlPerNode,
                "off" => NodeStoreMode::Off,
                _ => return Err(bad(kv, "jsonl-per-node | off")),
            };
        }
        if let Some(kv) = set.get("GIT_CLOSEOUT") {
            c.git_closeout = match kv.1.to_ascii_lowercase().as_str() {
                "coordinator-batch" => CloseoutDefault::CoordinatorBatch,
                "per-node" => CloseoutDefault::PerNode,
                "off" => CloseoutDefault::Off,
                _ => return Err(bad(kv, "coordinator-batch | per-node | off")),
            };
        }
        Ok((c, notes))
    }

    /// The config as the variables it corresponds to (what `weft actors status` prints).
    pub fn as_vars(&self) -> Vec<(&'static str, &'static str)> {
        vec![
            (
                "ACTOR_AGENTIC_UI",
                match self.agentic_ui {
                    AgenticUi::GraphGrid => "graph-grid",
                    AgenticUi::Serialized => "serialized",
                    AgenticUi::Off => "off",
                },
            ),
            (
                "ACTOR_GRAPH_EPOCHS",
                if self.graph_epochs { "on" } else { "off" },
            ),
            (
                "ACTOR_WAIT_GRAPH",
                match self.wait_graph {
                    WaitGraphMode::Warn => "warn",
                    WaitGraphMode::Enforce => "enforce",
                    WaitGraphMode::Off => "off",
                },
            ),
            (
                "ACTOR_NODE_STORE",
                match self.node_store {
                    NodeStoreMode::JsonlPerNode => "jsonl-per-node",
                    NodeStoreMode::Off => "off",
                },
            ),
            (
                "GIT_CLOSEOUT",
                match self.git_closeout {
                    CloseoutDefault::CoordinatorBatch => "coordinator-batch",
                    CloseoutDefault::PerNode => "per-node",
                    CloseoutDefault::Off => "off",
                },
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_seed() {
        let (c, notes) = HarnessConfig::from_vars(Vec::<(String, String)>::new()).unwrap();
        assert_eq!(c.agentic_ui, AgenticUi::GraphGrid);
        assert_eq!(c.node_store, NodeStoreMode::JsonlPerNode);
        assert_eq!(c.wait_graph, WaitGraphMode::Warn);
        assert_eq!(c.git_closeout, CloseoutDefault::CoordinatorBatch);
        assert!(notes.is_empty());
        let (c, _) = HarnessConfig::from_vars([("ACTOR_AGENTIC_UI", "serialized")]).unwrap();
        assert_eq!(c.git_closeout, CloseoutDefault::PerNode);
    }

    #[test]
    fn deprecated_aliases_map_and_lose_to_current_names() {
        let (c, notes) = HarnessConfig::from_vars([
            ("PROJECT_INBOX", "grid-forks"),
            ("PROJECT_INBOX_CHAPTERS", "on"),
        ])
        .unwrap();
        assert_eq!(c.agentic_ui, AgenticUi::GraphGrid);
        assert!(c.graph_epochs);
        assert_eq!(notes.len(), 2);
        let (c, notes) = HarnessConfig::from_vars([
            ("PROJECT_INBOX_CHAPTERS", "on"),
            ("ACTOR_GRAPH_EPOCHS", "off"),
        ])
        .unwrap();
        assert!(!c.graph_epochs);
        assert!(notes[0].contains("ignored"));
    }

    #[test]
    fn a_bad_value_names_the_variable() {
        let e = HarnessConfig::from_vars([("ACTOR_WAIT_GRAPH", "sometimes")]).unwrap_err();
        assert_eq!(e.code(), "CONFIG_INVALID");
        assert!(e.to_string().contains("ACTOR_WAIT_GRAPH"));
        let e = HarnessConfig::from_vars([("PROJECT_INBOX", "wall")]).unwrap_err();
        assert!(e.to_string().contains("PROJECT_INBOX"), "{e}");
    }
}
