//! Tool declarations, the session's toolbox and the per-step snapshots taken from it.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::ToolsError;
use super::schema;
use super::types::HandlerId;

/// A tool as an application declares it. The handler itself is host code; the declaration is
/// bound to it through the [`HandlerId`] the toolbox hands out.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolDecl {
    /// `[A-Za-z0-9_-]{1,64}`, the portable subset model APIs accept.
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments (see [`schema`] for the enforced subset).
    pub parameters: Value,
    /// Calls may overlap with adjacent parallel calls of the same step (default false: the
    /// call runs alone).
    pub supports_parallel: bool,
    /// The handler may start background jobs that outlive the call and the turn.
    pub may_start_job: bool,
    /// The handler may be asked to abort when its step is cancelled. Tools not declared safe
    /// are never signalled; an interrupt waits for them for the grace period and then leaves
    /// them running, with their effects reported as uncertain.
    pub safe_to_cancel: bool,
}

impl ToolDecl {
    /// A declaration with the conservative defaults: exclusive, starts no jobs, not cancelled.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        ToolDecl {
            name: name.into(),
            description: description.into(),
            parameters,
            supports_parallel: false,
            may_start_job: false,
            safe_to_cancel: false,
        }
    }

    /// Marks the tool parallel-eligible.
    pub fn parallel(mut self, yes: bool) -> Self {
        self.supports_parallel = yes;
        self
    }

    /// Declares that the handler may start background jobs.
    pub fn may_start_job(mut self, yes: bool) -> Self {
        self.may_start_job = yes;
        self
    }

    /// Declares that the handler may be asked to abort.
    pub fn safe_to_cancel(mut self, yes: bool) -> Self {
        self.safe_to_cancel = yes;
        self
    }

    /// Parses `{"name", "description"?, "parameters"?, "supportsParallel"?, "mayStartJob"?,
    /// "safeToCancel"?}`; `parameters` defaults to an object schema accepting anything.
    pub fn from_json(v: &Value) -> Result<ToolDecl, ToolsError> {
        let bad = |m: &str| ToolsError::InvalidArgument(m.to_owned());
        let o = v
            .as_object()
            .ok_or_else(|| bad("a tool declaration must be an object"))?;
        let name = o
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("a tool declaration needs a string `name`"))?;
        let flag = |k: &str| -> Result<bool, ToolsError> {
            match o.get(k) {
                None | Some(Value::Null) => Ok(false),
                Some(Value::Bool(b)) => Ok(*b),
                Some(other) => Err(bad(&format!("`{k}` must be a boolean, got {other}"))),
            }
        };
        Ok(ToolDecl {
            name: name.to_owned(),
            description: match o.get("description") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(_) => return Err(bad("`description` must be a string")),
            },
            parameters: o
                .get("parameters")
                .cloned()
                .unwrap_or_else(|| json!({"type": "object"})),
            supports_parallel: flag("supportsParallel")?,
            may_start_job: flag("mayStartJob")?,
            safe_to_cancel: flag("safeToCancel")?,
        })
    }

    /// The JSON form (the same keys [`ToolDecl::from_json`] reads). Built as a map with the
    /// schema cloned (`json!` would serialize it into a new value: an agent's model step
    /// builds this for every tool).
    pub fn to_json(&self) -> Value {
        let mut o = serde_json::Map::new();
        o.insert("name".into(), Value::String(self.name.clone()));
        o.insert(
            "description".into(),
            Value::String(self.description.clone()),
        );
        o.insert("parameters".into(), self.parameters.clone());
        o.insert(
            "supportsParallel".into(),
            Value::Bool(self.supports_parallel),
        );
        o.insert("mayStartJob".into(), Value::Bool(self.may_start_job));
        o.insert("safeToCancel".into(), Value::Bool(self.safe_to_cancel));
        Value::Object(o)
    }

    fn check(&self) -> Result<(), ToolsError> {
        let n = &self.name;
        if n.is_empty()
            || n.len() > 64
            || !n
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(ToolsError::InvalidToolName(n.clone()));
        }
        schema::check_tool_schema(&self.parameters).map_err(|message| ToolsError::InvalidSchema {
            tool: n.clone(),
            message,
        })
    }
}

/// A declaration bound to its handler.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolEntry {
    pub decl: Arc<ToolDecl>,
    pub handler: HandlerId,
}

/// The tools advertised to one model step: schema, handler binding and eligibility, fixed for
/// the calls the model selects in that step.
#[derive(Debug, PartialEq)]
pub struct Snapshot {
    /// The toolbox version the snapshot was taken at.
    pub version: u64,
    tools: Vec<ToolEntry>,
    index: HashMap<String, usize>,
}

impl Snapshot {
    /// The tools, in registration order.
    pub fn tools(&self) -> &[ToolEntry] {
        &self.tools
    }

    /// The entry advertised under `name`.
    pub fn get(&self, name: &str) -> Option<&ToolEntry> {
        self.index.get(name).map(|&i| &self.tools[i])
    }

    /// Whether the snapshot binds `handler`.
    pub fn binds(&self, handler: HandlerId) -> bool {
        self.tools.iter().any(|t| t.handler == handler)
    }

    /// The JSON form: `{"version", "tools": [declaration + "handler"]}`.
    pub fn to_json(&self) -> Value {
        let tools: Vec<Value> = self
            .tools
            .iter()
            .map(|t| {
                let mut o = t.decl.to_json();
                o["handler"] = json!(t.handler.0);
                o
            })
            .collect();
        json!({"version": self.version, "tools": tools})
    }
}

/// The tools a session currently declares. Every change bumps the version; snapshots taken
/// earlier are unaffected.
#[derive(Debug)]
pub struct Toolbox {
    tools: Vec<ToolEntry>,
    version: u64,
    next_handler: u64,
    cached: Option<Arc<Snapshot>>,
}

impl Default for Toolbox {
    fn default() -> Self {
        Toolbox {
            tools: Vec::new(),
            version: 0,
            next_handler: 1,
            cached: None,
        }
    }
}

impl Toolbox {
    /// Declares (or replaces, keeping its position) a tool; returns the new handler binding and
    /// the binding it replaced. Invalid declarations change nothing.
    pub fn register(
        &mut self,
        decl: ToolDecl,
    ) -> Result<(HandlerId, Option<HandlerId>), ToolsError> {
        decl.check()?;
        let handler = HandlerId(self.next_handler);
        self.next_handler += 1;
        let entry = ToolEntry {
            decl: Arc::new(decl),
            handler,
        };
        let replaced = match self
            .tools
            .iter_mut()
            .find(|t| t.decl.name == entry.decl.name)
        {
            Some(slot) => Some(std::mem::replace(slot, entry).handler),
            None => {
                self.tools.push(entry);
                None
            }
        };
        self.version += 1;
        self.cached = None;
        Ok((handler, replaced))
    }

    /// Removes a tool; returns its handler binding.
    pub fn unregister(&mut self, name: &str) -> Result<HandlerId, ToolsError> {
        let i = self
            .tools
            .iter()
            .position(|t| t.decl.name == name)
            .ok_or_else(|| ToolsError::UnknownTool(name.to_owned()))?;
        let handler = self.tools.remove(i).handler;
        self.version += 1;
        self.cached = None;
        Ok(handler)
    }

    /// Whether a current declaration binds `handler`.
    pub fn binds(&self, handler: HandlerId) -> bool {
        self.tools.iter().any(|t| t.handler == handler)
    }

    /// The current version.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// A snapshot of the current declarations (shared until the next change).
    pub fn snapshot(&mut self) -> Arc<Snapshot> {
        if let Some(s) = &self.cached {
            return s.clone();
        }
        let s = Arc::new(Snapshot {
            version: self.version,
            index: self
                .tools
                .iter()
                .enumerate()
                .map(|(i, t)| (t.decl.name.clone(), i))
                .collect(),
            tools: self.tools.clone(),
        });
        self.cached = Some(s.clone());
        s
    }
}
