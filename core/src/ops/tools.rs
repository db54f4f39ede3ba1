//! The published agent tools: `report`, `set`, `act`, `observe`, `wait`, `inspect`, `cancel`.
//!
//! Any model adapter can publish them: each has a JSON Schema for its arguments (built from the
//! live surface, so names and constraints are enumerated), and bad arguments produce clear
//! errors that list what is valid. A tool call is one tick: its writes are flushed before it
//! returns. `observe` and `wait` may need the host to keep driving calculations: they return
//! [`ToolReply::Wait`], and the app itself replies — [`AppOutput::ToolReplied`] — once the
//! operation finished or the call's `waitMs` elapsed (a core timer, in [`App::poll_timeout`];
//! a still-waiting operation is then hosted as a job and returned as a handle). The host only
//! forwards the reply; [`App::cancel_tool_wait`] ends a wait its caller gave up on.

use serde_json::{Map, Value, json};

use super::operation::{ObserveRequest, Selection};
use super::types::*;
use super::{App, AppOutput, OpsError, OpsValue};
use crate::Mono;
use crate::jobs::{Origin, Registry};
use crate::vecmap::VecMap;

/// The default time an `observe` or `wait` call waits before returning a handle.
pub const DEFAULT_WAIT_MS: u64 = 10_000;

/// One published tool.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolDef {
    pub name: &'static str,
    pub description: String,
    /// JSON Schema of the arguments.
    pub input_schema: Value,
}

impl ToolDef {
    /// `{"name","description","inputSchema"}`.
    pub fn to_json(&self) -> Value {
        json!({"name": self.name, "description": self.description, "inputSchema": self.input_schema})
    }
}

/// What a tool call produced.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolReply {
    /// The result, ready now.
    Ready(Value),
    /// The call waits on `op` (granted `wait_ms`): keep driving the app; it replies with
    /// [`AppOutput::ToolReplied`] for `call` — exactly once — when the operation finishes or
    /// the wait elapses (the app's timer, reported by [`App::poll_timeout`]), unless the host
    /// ends the wait with [`App::cancel_tool_wait`].
    Wait {
        call: ToolCallId,
        op: OpId,
        wait_ms: u64,
    },
}

/// A tool call that waits ([`ToolReply::Wait`]), numbered by the app from 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ToolCallId(pub u64);

/// Who makes a tool call: the actor its writes are recorded for, and the owner (and origin) of
/// the job a still-waiting operation is hosted as when the call's wait elapses first.
#[derive(Clone, Debug)]
pub struct ToolCaller {
    /// Recorded on the call's writes and operation.
    pub actor: Actor,
    /// The owner of the job a still-waiting operation is hosted as.
    pub owner: String,
    /// That job's origin.
    pub origin: Origin,
}

impl From<Actor> for ToolCaller {
    /// Hosted operations are owned by `agent`, with the actor's tool call as their origin.
    fn from(actor: Actor) -> Self {
        let origin = Origin {
            tool_call: actor.tool_call.clone(),
            ..Origin::default()
        };
        ToolCaller {
            actor,
            owner: "agent".into(),
            origin,
        }
    }
}

/// One waiting tool call.
#[derive(Debug)]
struct ToolWait {
    op: OpId,
    deadline: Mono,
    owner: String,
    origin: Origin,
    /// Set once the operation settled with a registered selector: the reply waits for the
    /// host's answer — [`App::record_result`] (the reply carries it) or
    /// [`App::record_no_result`] (it has none). If the operation settled before the deadline,
    /// the deadline stays as the backstop (the reply then goes without a result); if it
    /// settled at or after it, the timer is cleared (the end wins) and only the answer replies.
    awaiting_result: bool,
}

/// The tool calls that wait: each one's operation, deadline and the owner to host it for (a
/// sub-state of [`App`], few at a time: one per agent call in flight).
#[derive(Debug, Default)]
pub(crate) struct ToolWaits {
    last: u64,
    calls: VecMap<ToolCallId, ToolWait>,
    timers: VecMap<(Mono, ToolCallId), ()>,
}

impl ToolWaits {
    fn add(&mut self, op: OpId, deadline: Mono, caller: ToolCaller) -> ToolCallId {
        self.last += 1;
        let call = ToolCallId(self.last);
        self.calls.insert(
            call,
            ToolWait {
                op,
                deadline,
                owner: caller.owner,
                origin: caller.origin,
                awaiting_result: false,
            },
        );
        self.timers.insert((deadline, call), ());
        call
    }

    /// Removes a call and its timer (if it still has one).
    fn remove(&mut self, call: ToolCallId) -> Option<ToolWait> {
        let w = self.calls.remove(&call)?;
        self.timers.remove(&(w.deadline, call));
        Some(w)
    }

    /// The calls waiting on `op`.
    fn on_op(&self, op: OpId) -> Vec<ToolCallId> {
        self.calls
            .iter()
            .filter(|(_, w)| w.op == op)
            .map(|(c, _)| *c)
            .collect()
    }

    /// The earliest deadline (every one is a reply [`App::handle_timeout`] gives at that time:
    /// a reply due now is always reported — no reply waits on anything but a timer or an
    /// explicit host answer).
    pub(crate) fn next_deadline(&self) -> Option<Mono> {
        self.timers.first_key().map(|(t, _)| *t)
    }

    /// The next call whose deadline is due at `now`.
    fn due(&self, now: Mono) -> Option<ToolCallId> {
        self.timers
            .first_key()
            .filter(|(t, _)| *t <= now)
            .map(|(_, c)| *c)
    }

    /// How many calls wait (tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.calls.len()
    }
}

const TOOLS: [&str; 7] = [
    "report", "set", "act", "observe", "wait", "inspect", "cancel",
];

/// The published tools, in [`TOOLS`] order, as JSON text (data, not code: a `json!` literal of
/// this size compiles to tens of kilobytes of WebAssembly). `"$name"` strings are slots that
/// [`App::tool_definitions`] fills from the live surface: `$controls`, `$cells`, `$outputs`,
/// `$actions`, `$selectors` (name schemas, with an `enum` once there are names) and `$writes`
/// (the `observe` write properties: each control's schema).
pub const TOOLS_JSON: &str = r#"[
  {"name": "report",
   "description": "One snapshot of the whole application: controls (the writable surface, with values), actions (published verbs), cells (calculations, with states: unresolved, pending, streaming, refreshing, held, ready, errored) and dependency edges. format \"brief\" (default) gives maps; \"full\" adds constraints, descriptions, current calculations and value provenance. Call this first.",
   "inputSchema": {"additionalProperties": false, "properties": {"format": {"enum": ["brief", "full"], "type": "string"}}, "type": "object"}},
  {"name": "set",
   "description": "Set one control. The value is validated by the control itself: numbers are snapped to their step and clamped to [min, max], enums must be one of their options, wrong types are rejected. Returns the receipt: the value actually accepted and the revision at which it took effect. A receipt is not evidence that dependent calculations finished: use `observe` for that.",
   "inputSchema": {"additionalProperties": false, "properties": {"name": "$controls", "value": {"type": ["number", "string", "boolean"]}}, "required": ["name", "value"], "type": "object"}},
  {"name": "act",
   "description": "Invoke a published application action (see `report` for each action's parameters and effects). Its writes are validated together and applied all-or-nothing. Stopping a calculation is an action like this, never a side effect of cancelling an observation.",
   "inputSchema": {"additionalProperties": false, "properties": {"args": {"type": "object"}, "name": "$actions"}, "required": ["name"], "type": "object"}},
  {"name": "observe",
   "description": "Change controls and observe the consequences, as one operation: `writes` (validated all before any is applied, applied in one batch), `waitFor` (the cells whose processing to await), and the result: `select` (names of controls/cells read from one consistent snapshot) or `selector` (a registered result function). Outcomes: settled, superseded (a later change replaced the request — its replacement result is never returned as the answer; inspect and retry yourself), failed (a waited cell errored or is held), cancelled, timed_out. onSupersede \"end\" (default) or \"follow\" (keep observing; the outcome names the inputs the result reflects); onFailure \"end\" (default) or \"collect\". If the operation is still running after waitMs, you get its id: call `wait` or `inspect`.",
   "inputSchema": {"additionalProperties": false, "properties": {"onFailure": {"enum": ["end", "collect"], "type": "string"}, "onSupersede": {"enum": ["end", "follow"], "type": "string"}, "select": {"items": "$outputs", "type": "array"}, "selector": "$selectors", "timeoutMs": {"minimum": 0, "type": "integer"}, "waitFor": {"items": "$cells", "type": "array", "uniqueItems": true}, "waitMs": {"minimum": 0, "type": "integer"}, "writes": {"additionalProperties": false, "properties": "$writes", "type": "object"}}, "type": "object"}},
  {"name": "wait",
   "description": "Wait for an operation's outcome (up to timeoutMs, default 10000). Returns the outcome, or the operation's current status if it is still waiting. Ending this call never stops anything.",
   "inputSchema": {"additionalProperties": false, "properties": {"operation": {"description": "the operation id `observe` returned", "minimum": 1, "type": "integer"}, "timeoutMs": {"minimum": 0, "type": "integer"}}, "required": ["operation"], "type": "object"}},
  {"name": "inspect",
   "description": "The full record of an operation: its writes and receipts, wait set, policies, the calculations it linked, its event timeline and its outcome. Or, with `calc` (\"instance:generation\"), one calculation's lifecycle journal.",
   "inputSchema": {"additionalProperties": false, "properties": {"calc": {"description": "\"instance:generation\", e.g. \"1:7\"", "type": "string"}, "operation": {"description": "the operation id `observe` returned", "minimum": 1, "type": "integer"}}, "type": "object"}},
  {"name": "cancel",
   "description": "Cancel an operation's observation. Only the observation ends: the calculations continue and no control is restored. To stop computation, use the application's published action.",
   "inputSchema": {"additionalProperties": false, "properties": {"operation": {"description": "the operation id `observe` returned", "minimum": 1, "type": "integer"}}, "required": ["operation"], "type": "object"}}
]"#;

/// Replaces the `"$slot"` strings in `v` with their values.
fn fill(v: &mut Value, slots: &[(&str, Value)]) {
    match v {
        Value::String(s) if s.starts_with('$') => {
            if let Some((_, x)) = slots.iter().find(|(k, _)| k == s) {
                *v = x.clone();
            }
        }
        Value::Object(m) => m.values_mut().for_each(|x| fill(x, slots)),
        Value::Array(a) => a.iter_mut().for_each(|x| fill(x, slots)),
        _ => {}
    }
}

fn bad(msg: impl Into<String>) -> OpsError {
    OpsError::InvalidArgument(msg.into())
}

/// The argument object, checked for unknown keys.
fn args_of<'a>(
    tool: &str,
    args: &'a Value,
    allowed: &[&str],
) -> Result<&'a Map<String, Value>, OpsError> {
    static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
    let obj = match args {
        Value::Null => &*EMPTY,
        Value::Object(o) => o,
        other => {
            return Err(bad(format!(
                "`{tool}` takes an object of arguments, got {}",
                crate::value::json_type_name(other)
            )));
        }
    };
    for k in obj.keys() {
        if !allowed.contains(&k.as_str()) {
            return Err(bad(format!(
                "`{tool}` has no argument `{k}`; arguments: {}",
                allowed.join(", ")
            )));
        }
    }
    Ok(obj)
}

fn str_arg<'a>(
    tool: &str,
    o: &'a Map<String, Value>,
    key: &str,
) -> Result<Option<&'a str>, OpsError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(bad(format!(
            "`{tool}`: `{key}` must be a string, got {}",
            crate::value::json_type_name(other)
        ))),
    }
}

fn req_str<'a>(tool: &str, o: &'a Map<String, Value>, key: &str) -> Result<&'a str, OpsError> {
    str_arg(tool, o, key)?.ok_or_else(|| bad(format!("`{tool}` needs `{key}`")))
}

fn ms_arg(tool: &str, o: &Map<String, Value>, key: &str) -> Result<Option<u64>, OpsError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            bad(format!(
                "`{tool}`: `{key}` must be a non-negative integer (milliseconds)"
            ))
        }),
    }
}

fn op_arg(tool: &str, o: &Map<String, Value>) -> Result<OpId, OpsError> {
    o.get("operation")
        .and_then(Value::as_u64)
        .map(OpId)
        .ok_or_else(|| {
            bad(format!(
                "`{tool}` needs `operation`: the id an `observe` call returned"
            ))
        })
}

fn names_arg(tool: &str, o: &Map<String, Value>, key: &str) -> Result<Vec<String>, OpsError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| bad(format!("`{tool}`: `{key}` must be an array of names")))
            })
            .collect(),
        Some(_) => Err(bad(format!("`{tool}`: `{key}` must be an array of names"))),
    }
}

impl<V: OpsValue> App<V> {
    /// The published tools, with JSON Schemas built from the live surface: the [`TOOLS_JSON`]
    /// template with the surface's names and control schemas filled in.
    pub fn tool_definitions(&self) -> Vec<ToolDef> {
        let names = |it: &mut dyn Iterator<Item = String>| -> Value {
            let names: Vec<Value> = it.map(Value::String).collect();
            let mut s = Map::new();
            s.insert("type".into(), "string".into());
            if !names.is_empty() {
                s.insert("enum".into(), Value::Array(names));
            }
            Value::Object(s)
        };
        let control_names = || self.controls.iter().map(|c| c.name.clone());
        let cell_names = || self.cells.iter().map(|c| c.name.clone());
        let mut writes = Map::new();
        for c in &self.controls {
            let mut s = c.spec.kind.json_schema();
            if !c.spec.description.is_empty() {
                s["title"] = c.spec.description.as_str().into();
            }
            writes.insert(c.name.clone(), s);
        }
        let slots = [
            ("$controls", names(&mut control_names())),
            ("$cells", names(&mut cell_names())),
            ("$outputs", names(&mut control_names().chain(cell_names()))),
            (
                "$actions",
                names(&mut self.actions.iter().map(|a| a.qualified())),
            ),
            (
                "$selectors",
                names(&mut self.selectors.iter().map(|s| s.name.clone())),
            ),
            ("$writes", Value::Object(writes)),
        ];
        let Ok(Value::Array(tools)) = serde_json::from_slice::<Value>(TOOLS_JSON.as_bytes()) else {
            unreachable!("TOOLS_JSON is a JSON array (every test that lists the tools reads it)")
        };
        tools
            .into_iter()
            .zip(TOOLS)
            .map(|(mut t, name)| {
                fill(&mut t["inputSchema"], &slots);
                ToolDef {
                    name,
                    description: t["description"].as_str().unwrap_or_default().to_owned(),
                    input_schema: t["inputSchema"].take(),
                }
            })
            .collect()
    }

    /// Calls a published tool with JSON arguments on behalf of `caller` (an [`Actor`] will
    /// do: see [`ToolCaller`]). A call that waits is answered by [`AppOutput::ToolReplied`].
    pub fn call_tool(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        name: &str,
        args: &Value,
        caller: impl Into<ToolCaller>,
    ) -> Result<ToolReply, OpsError> {
        let caller = caller.into();
        let actor = caller.actor.clone();
        match name {
            "report" => {
                let o = args_of(name, args, &["format"])?;
                let full = match str_arg(name, o, "format")? {
                    None | Some("brief") => false,
                    Some("full") => true,
                    Some(other) => {
                        return Err(bad(format!(
                            "`report`: format `{other}`; use \"brief\" or \"full\""
                        )));
                    }
                };
                Ok(ToolReply::Ready(self.report(full)))
            }
            "set" => {
                let o = args_of(name, args, &["name", "value"])?;
                let control = req_str(name, o, "name")?;
                let value = o.get("value").ok_or_else(|| bad("`set` needs `value`"))?;
                let w = self.set(now, control, value, actor)?;
                self.flush(now, reg);
                Ok(ToolReply::Ready(self.receipt_json(w)))
            }
            "act" => {
                let o = args_of(name, args, &["name", "args"])?;
                let action = req_str(name, o, "name")?;
                let given: Vec<(String, Value)> = match o.get("args") {
                    None | Some(Value::Null) => vec![],
                    Some(Value::Object(m)) => {
                        m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
                    }
                    Some(_) => return Err(bad("`act`: `args` must be an object")),
                };
                let (inv, writes) = self.act(now, action, &given, actor)?;
                self.flush(now, reg);
                Ok(ToolReply::Ready(json!({
                    "action": action, "invocation": inv.0,
                    "writes": writes.iter().map(|w| self.receipt_json(*w)).collect::<Vec<_>>(),
                    "revision": self.revision(),
                })))
            }
            "observe" => {
                let o = args_of(
                    name,
                    args,
                    &[
                        "writes",
                        "waitFor",
                        "select",
                        "selector",
                        "onSupersede",
                        "onFailure",
                        "timeoutMs",
                        "waitMs",
                    ],
                )?;
                let writes: Vec<(String, Value)> = match o.get("writes") {
                    None | Some(Value::Null) => vec![],
                    Some(Value::Object(m)) => {
                        m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
                    }
                    Some(_) => {
                        return Err(bad(
                            "`observe`: `writes` must be an object {control: value}",
                        ));
                    }
                };
                let wait_for = names_arg(name, o, "waitFor")?;
                let select = match (o.get("select"), str_arg(name, o, "selector")?) {
                    (Some(s), Some(_)) if !s.is_null() => {
                        return Err(bad("`observe`: give `select` or `selector`, not both"));
                    }
                    (_, Some(s)) => Selection::Selector(s.to_owned()),
                    (Some(s), None) if !s.is_null() => {
                        Selection::Outputs(names_arg(name, o, "select")?)
                    }
                    _ => Selection::None,
                };
                let on_supersede = match str_arg(name, o, "onSupersede")? {
                    None | Some("end") => OnSupersede::End,
                    Some("follow") => OnSupersede::Follow,
                    Some(x) => {
                        return Err(bad(format!(
                            "`observe`: onSupersede `{x}`; use \"end\" or \"follow\""
                        )));
                    }
                };
                let on_failure = match str_arg(name, o, "onFailure")? {
                    None | Some("end") => OnFailure::End,
                    Some("collect") => OnFailure::Collect,
                    Some(x) => {
                        return Err(bad(format!(
                            "`observe`: onFailure `{x}`; use \"end\" or \"collect\""
                        )));
                    }
                };
                let timeout_ms = ms_arg(name, o, "timeoutMs")?;
                let wait_ms = ms_arg(name, o, "waitMs")?.unwrap_or(DEFAULT_WAIT_MS);
                let req = ObserveRequest {
                    writes,
                    wait_for,
                    select,
                    on_supersede,
                    on_failure,
                    timeout_ms,
                    actor,
                };
                let op = self.observe(now, reg, req)?;
                self.flush(now, reg);
                Ok(self.reply_or_wait(now, op, wait_ms, caller))
            }
            "wait" => {
                let o = args_of(name, args, &["operation", "timeoutMs"])?;
                let op = op_arg(name, o)?;
                if self.operation(op).is_none() {
                    return Err(self.op_missing(op));
                }
                let wait_ms = ms_arg(name, o, "timeoutMs")?.unwrap_or(DEFAULT_WAIT_MS);
                Ok(self.reply_or_wait(now, op, wait_ms, caller))
            }
            "inspect" => {
                let o = args_of(name, args, &["operation", "calc"])?;
                if let Some(c) = str_arg(name, o, "calc")? {
                    let id = CalcId::parse(c).ok_or_else(|| {
                        bad(format!(
                            "`inspect`: calc `{c}` is not \"instance:generation\""
                        ))
                    })?;
                    return Ok(ToolReply::Ready(self.calc_json(id)?));
                }
                Ok(ToolReply::Ready(self.operation_json(op_arg(name, o)?)?))
            }
            "cancel" => {
                let o = args_of(name, args, &["operation"])?;
                let op = op_arg(name, o)?;
                self.cancel_op(now, reg, op, "cancelled by the caller")?;
                Ok(ToolReply::Ready(self.outcome_json(op)))
            }
            other => Err(OpsError::UnknownTool {
                name: other.into(),
                known: TOOLS.iter().map(|t| t.to_string()).collect(),
            }),
        }
    }

    fn reply_or_wait(
        &mut self,
        now: Mono,
        op: OpId,
        wait_ms: u64,
        caller: ToolCaller,
    ) -> ToolReply {
        if self.operation(op).is_some_and(|o| o.is_finished()) {
            return ToolReply::Ready(self.outcome_json(op));
        }
        let call = self.tool_waits.add(op, now.plus(wait_ms), caller);
        ToolReply::Wait { call, op, wait_ms }
    }

    /// Ends a waiting tool call without a reply (its caller gave up: an aborted signal); its
    /// timer is cleared and the operation continues. False when the call is not waiting (it
    /// already replied, or was never issued).
    pub fn cancel_tool_wait(&mut self, call: ToolCallId) -> bool {
        self.tool_waits.remove(call).is_some()
    }

    /// Replies to the calls waiting on `op`, which just finished at `now`. With a registered
    /// selector to run, the replies wait for the host's answer (see
    /// [`ToolWait::awaiting_result`]).
    pub(crate) fn tool_op_finished(&mut self, now: Mono, op: OpId, selector: bool) {
        for call in self.tool_waits.on_op(op) {
            if !selector {
                self.reply_finished(call);
                continue;
            }
            let Some(w) = self.tool_waits.calls.get_mut(&call) else {
                continue;
            };
            w.awaiting_result = true;
            if w.deadline <= now {
                // It ended at (or after) the wait's deadline: the end wins, with its result.
                let deadline = w.deadline;
                self.tool_waits.timers.remove(&(deadline, call));
            }
        }
    }

    /// The host answered for `op`'s selector (a result, or none): the calls waiting for it
    /// reply now.
    pub(crate) fn tool_result_recorded(&mut self, op: OpId) {
        for call in self.tool_waits.on_op(op) {
            self.reply_finished(call);
        }
    }

    fn reply_finished(&mut self, call: ToolCallId) {
        if let Some(w) = self.tool_waits.remove(call) {
            let reply = Ok(self.outcome_json(w.op));
            self.outputs.push_back(AppOutput::ToolReplied {
                call,
                op: w.op,
                reply,
            });
        }
    }

    /// Fires the tool calls whose wait elapsed at `now`: each replies with its operation's
    /// outcome (without a selector result the host has not recorded by then: the backstop of
    /// [`ToolWait::awaiting_result`]) or, while it still waits, a handle (see
    /// [`App::tool_op_reply`]). Runs inside [`App::handle_timeout`], so it does not start a new
    /// input.
    /// Returns whether any fired.
    pub(crate) fn fire_tool_timers(&mut self, now: Mono, reg: &mut Registry<V>) -> bool {
        let mut fired = false;
        while let Some(call) = self.tool_waits.due(now) {
            fired = true;
            let Some(w) = self.tool_waits.remove(call) else {
                break;
            };
            let reply = self.tool_op_reply(now, reg, w.op, &w.owner, w.origin);
            self.outputs.push_back(AppOutput::ToolReplied {
                call,
                op: w.op,
                reply,
            });
        }
        fired
    }

    /// What an `observe`/`wait` call replies when its wait ends: the outcome, or — for an
    /// operation still waiting — a handle (the operation is hosted as a job of `owner`). The
    /// app calls it at a waiting call's deadline, inside [`App::handle_timeout`] (no new input
    /// begins); hosts receive the reply as [`AppOutput::ToolReplied`].
    pub(crate) fn tool_op_reply(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        op: OpId,
        owner: &str,
        origin: Origin,
    ) -> Result<Value, OpsError> {
        let o = self.operation(op).ok_or_else(|| self.op_missing(op))?;
        if o.is_finished() {
            return Ok(self.outcome_json(op));
        }
        let job = self.host_op_as_job(now, reg, op, owner, origin)?;
        let o = &self.ops[&op];
        let cells = crate::value::map_of(o.wait.iter().map(|&x| {
            let v = self.view(x);
            (
                v.name.clone(),
                json!({"state": v.state.as_str(), "progress": v.progress}),
            )
        }));
        Ok(json!({
            "operation": op.0,
            "status": "waiting",
            "job": job.0,
            "cells": cells,
            "message": format!("{op} is still waiting; call `wait` with operation {} (or `inspect`) later", op.0),
        }))
    }
}
