//! Bindings of the application graph and its operations (`weft_core::ops::App`).
//!
//! `OpsApp` holds the app; its job registry is a [`JobRegistry`] of its own that the caller
//! keeps beside it and lends per call (`reg`), as `weft_core::ops::App` takes `&mut Registry`.
//! The registry's methods exist once, on `JobRegistry`: the JS runtime calls them directly and
//! then `onRegistryOutputs`, so the app reacts to what the call changed (`wasm/js/ops.js`
//! routes every registry call through one wrapper that does this). Worker endpoints, job waits
//! and observers, mailboxes and timers then work unchanged on the registry that the app's
//! Worker cells and hosted operations use. The JS package (`wasm/js/ops.js`) runs host cells
//! and selectors.

use std::sync::Arc;

use js_sys::{Array, Object};
use wasm_bindgen::prelude::*;
use weft_core::Mono;
use weft_core::jobs::{EndpointId, Origin};
use weft_core::ops::claims::{ClaimOutput, Claims, ClaimsError};
use weft_core::ops::{
    Actor, App, AppConfig, AppOutput, CalcId, CellSpec, CellView, GraphSpec, ObserveRequest,
    OnFailure, OnSupersede, OpId, OpsError, OpsValue, Retention, Selection, Snapshot, WriteId,
    tools::{ToolCallId, ToolCaller, ToolReply},
};

use crate::jobs::JobRegistry;
use crate::js::{
    Js, array, error, from_js_json, key, mono, ms, opt, opt_f64, opt_string, put, same_value,
};

#[wasm_bindgen(module = "/src/ops_glue.js")]
extern "C" {
    /// A `compute` output, built in one JS call.
    #[wasm_bindgen(js_name = mkCompute)]
    fn mk_compute(calc: &str, cell: &str, inputs: &JsValue, previous: &JsValue) -> JsValue;
    /// An `op_finished` output, built in one JS call (`snapshot` only when not undefined).
    #[wasm_bindgen(js_name = mkFinished)]
    fn mk_finished(
        op: f64,
        outcome: &JsValue,
        selector: Option<String>,
        snapshot: &JsValue,
    ) -> JsValue;
    /// `o[k] = v` on an object the bindings made: one plain JS call (no `Reflect.set` behind
    /// a try/catch).
    #[wasm_bindgen(js_name = setProp)]
    fn set_prop(o: &JsValue, k: &JsValue, v: &JsValue);
    /// An `observeOp` request's fields (see [`ObserveFields`]), each read once, into `out`;
    /// returns the mask of those present.
    #[wasm_bindgen(js_name = readObserve)]
    fn read_observe(req: &JsValue, out: &Array) -> u32;
}

/// The fields of an `observeOp` request, read in one JS call (`readObserve`): their index in
/// the scratch array, bit `1 << index` in the mask of those present.
struct ObserveFields {
    mask: u32,
    values: Array,
}

impl ObserveFields {
    const WRITES: u32 = 0;
    const WAIT_FOR: u32 = 1;
    const SELECTOR: u32 = 2;
    const SELECT: u32 = 3;
    const ON_SUPERSEDE: u32 = 4;
    const ON_FAILURE: u32 = 5;
    const TIMEOUT_MS: u32 = 6;
    const BY: u32 = 7;
    const TOOL_CALL: u32 = 8;

    /// The field, when present (neither undefined nor null).
    fn get(&self, i: u32) -> Option<JsValue> {
        (self.mask & (1 << i) != 0).then(|| self.values.get(i))
    }

    fn string(&self, i: u32) -> Option<String> {
        self.get(i).and_then(|v| v.as_string())
    }
}

/// Property names and string values the bindings use on every operation, as JS strings made
/// once (a Rust string passed to JS costs a UTF-8 decode each time).
const OPS_KEYS: &[&str] = &[
    "output",
    "compute",
    "calc",
    "cell",
    "inputs",
    "previous",
    "op_finished",
    "op",
    "outcome",
    "snapshot",
    "settled",
    "superseded",
    "failed",
    "timed_out",
    "cancelled",
    "result",
];

thread_local! {
    static OPS_KEY_VALUES: Vec<JsValue> = OPS_KEYS.iter().map(|k| JsValue::from_str(k)).collect();
}

/// The JS string of `name` (made once for the names in [`OPS_KEYS`]).
fn ops_key(name: &str) -> JsValue {
    match OPS_KEYS.iter().position(|k| *k == name) {
        Some(i) => OPS_KEY_VALUES.with(|v| v[i].clone()),
        None => key(name),
    }
}

/// A JSON value or record as a JS value: one string and the engine's JSON.parse, much cheaper than a
/// property-by-property conversion for records like outcomes and journals.
fn jv(v: &impl serde::Serialize) -> JsValue {
    crate::js::json(v)
}

impl OpsValue for Js {
    fn from_json(v: &serde_json::Value) -> Self {
        match v {
            serde_json::Value::Null => Js::Null,
            serde_json::Value::Bool(b) => Js::Bool(*b),
            serde_json::Value::Number(n) => Js::Num(n.as_f64().unwrap_or(f64::NAN)),
            other => Js::Val(jv(other)),
        }
    }
    fn object(fields: Vec<(String, Self)>) -> Self {
        let o: JsValue = Object::new().into();
        for (k, v) in fields {
            set_prop(&o, &ops_key(&k), &v.to_js());
        }
        Js::Val(o)
    }
    fn equal_value(&self, other: &Self) -> bool {
        match (self, other) {
            (Js::Undefined, Js::Undefined) | (Js::Null, Js::Null) => true,
            (Js::Bool(a), Js::Bool(b)) => a == b,
            // `Object.is`: NaN equals NaN, 0 and -0 differ.
            (Js::Num(a), Js::Num(b)) => {
                (a.is_nan() && b.is_nan())
                    || (a == b && a.is_sign_negative() == b.is_sign_negative())
            }
            (Js::Val(a), Js::Val(b)) => same_value(a, b),
            _ => false,
        }
    }
}

fn ops_err(e: OpsError) -> JsValue {
    error(&e)
}

fn bad(msg: impl Into<String>) -> JsValue {
    error(&OpsError::InvalidArgument(msg.into()))
}

fn calc_arg(s: &str) -> Result<CalcId, JsValue> {
    CalcId::parse(s).ok_or_else(|| {
        bad(format!(
            "calculation id `{s}` is not \"instance:generation\""
        ))
    })
}

fn actor_of(v: &JsValue) -> Actor {
    Actor {
        by: opt_string(v, "by").unwrap_or_else(|| "user".into()),
        tool_call: opt_string(v, "toolCall"),
    }
}

fn origin_of(v: &JsValue) -> Origin {
    match opt(v, "origin") {
        Some(o) => Origin {
            thread: opt_string(&o, "thread"),
            turn: opt_string(&o, "turn"),
            tool_call: opt_string(&o, "toolCall"),
            ..Origin::default()
        },
        None => Origin {
            tool_call: opt_string(v, "toolCall"),
            ..Origin::default()
        },
    }
}

/// The own enumerable `[key, value]` pairs of a JS object, values as payloads.
fn pairs(v: &JsValue) -> Result<Vec<(String, Js)>, JsValue> {
    if v.is_undefined() || v.is_null() {
        return Ok(vec![]);
    }
    if !v.is_object() || Array::is_array(v) {
        return Err(bad("expected an object {name: value}"));
    }
    Ok(Object::entries(v.unchecked_ref())
        .iter()
        .map(|e| {
            let e: Array = e.unchecked_into();
            (
                e.get(0).as_string().unwrap_or_default(),
                Js::from_js(e.get(1)),
            )
        })
        .collect())
}

fn strings(v: &JsValue, what: &str) -> Result<Vec<String>, JsValue> {
    if v.is_undefined() || v.is_null() {
        return Ok(vec![]);
    }
    if !Array::is_array(v) {
        return Err(bad(format!("{what} must be an array of names")));
    }
    Array::from(v)
        .iter()
        .map(|x| {
            x.as_string()
                .ok_or_else(|| bad(format!("{what} must be an array of names")))
        })
        .collect()
}

fn to_json(v: &JsValue) -> Result<serde_json::Value, JsValue> {
    if v.is_undefined() {
        return Ok(serde_json::Value::Null);
    }
    from_js_json(v).map_err(|e| bad(format!("not JSON-like: {e}")))
}

fn cell_js(c: &CellView<Js>) -> JsValue {
    let o = Object::new();
    let field = |k: &str, v: JsValue| put(&o, &key(k), &v);
    field("state", c.state.as_str().into());
    field(
        "value",
        c.value
            .as_ref()
            .map(|v| v.to_js())
            .unwrap_or(JsValue::UNDEFINED),
    );
    field(
        "valueCalc",
        c.value_calc
            .map(|x| x.to_string().into())
            .unwrap_or(JsValue::NULL),
    );
    field(
        "valueRevision",
        c.value_revision
            .map(|x| (x as f64).into())
            .unwrap_or(JsValue::NULL),
    );
    field("final", c.is_final.into());
    field("upToDate", c.up_to_date.into());
    field(
        "calc",
        c.current
            .map(|x| x.to_string().into())
            .unwrap_or(JsValue::NULL),
    );
    field(
        "progress",
        c.progress.map(JsValue::from_f64).unwrap_or(JsValue::NULL),
    );
    field(
        "error",
        match &c.error {
            Some((cell, calc, m, code)) => jv(
                &serde_json::json!({"cell": cell, "calc": calc.to_string(), "message": m, "code": code}),
            ),
            None => JsValue::NULL,
        },
    );
    let prov = Object::new();
    for (k, r) in &c.provenance {
        put(&prov, &key(k), &(*r as f64).into());
    }
    field("provenance", prov.into());
    o.into()
}

fn snapshot_js(s: &Snapshot<Js>) -> JsValue {
    let controls = Object::new();
    let versions = Object::new();
    for (n, v, r) in &s.controls {
        put(&controls, &key(n), &Js::from_json(&v.to_json()).to_js());
        put(&versions, &key(n), &(*r as f64).into());
    }
    let cells = Object::new();
    for c in &s.cells {
        put(&cells, &key(&c.name), &cell_js(c));
    }
    let o = Object::new();
    put(&o, &key("revision"), &(s.revision as f64).into());
    put(&o, &key("instance"), &(s.instance as f64).into());
    put(&o, &key("controls"), &controls);
    put(&o, &key("versions"), &versions);
    put(&o, &key("cells"), &cells);
    o.into()
}

/// An application graph with its operations, as a JS class (its job registry is lent per call). Times are
/// milliseconds on the caller's monotonic clock.
#[wasm_bindgen]
pub struct OpsApp {
    app: App<Js>,
    /// The latest time seen (the core's clock never goes backwards).
    last_now: Mono,
    /// The array `observeOp` reads a request's fields into (reused: no array per call).
    scratch: Array,
}

#[wasm_bindgen]
impl OpsApp {
    /// A new app. `options`: `{instance, firstOp, retention}` (the registry lent to it is made
    /// apart: `new JobRegistry(firstJobId)`).
    #[wasm_bindgen(constructor)]
    pub fn new(options: JsValue) -> OpsApp {
        let instance = opt_f64(&options, "instance").map(ms).unwrap_or(1).max(1);
        let first_op = opt_f64(&options, "firstOp").map(ms).unwrap_or(1).max(1);
        // `retention: {operations, calculations, writes}` (counts; absent: the defaults).
        let mut retention = Retention::default();
        if let Some(r) = opt(&options, "retention") {
            let limit = |k: &str, d: usize| {
                opt_f64(&r, k).filter(|n| *n >= 0.0).map_or(d, |n| {
                    if n.is_finite() {
                        n as usize
                    } else {
                        usize::MAX
                    }
                })
            };
            retention.operations = limit("operations", retention.operations);
            retention.calculations = limit("calculations", retention.calculations);
            retention.writes = limit("writes", retention.writes);
        }
        OpsApp {
            app: App::new(AppConfig {
                instance,
                first_op,
                retention,
            }),
            last_now: Mono::ZERO,
            scratch: Array::new(),
        }
    }

    // ----- the surface ------------------------------------------------------------------------

    /// Publishes the surface: `{controls, actions, cells, selectors}` (cells' `compute` is
    /// `{kind: "host"}` or `{kind: "worker", endpoint}`).
    pub fn load(&mut self, now: f64, reg: &mut JobRegistry, spec: JsValue) -> Result<(), JsValue> {
        let t = self.t(now);
        let spec = from_js_json(&spec)
            .and_then(|v| GraphSpec::from_value("", &v))
            .map_err(|e| error(&OpsError::InvalidGraph(e)))?;
        self.app.load(t, &mut reg.inner, spec).map_err(ops_err)
    }

    /// Hot replacement with new cell specs under a fresh instance id.
    #[wasm_bindgen(js_name = replaceGraph)]
    pub fn replace_graph(
        &mut self,
        now: f64,
        reg: &mut JobRegistry,
        instance: f64,
        cells: JsValue,
    ) -> Result<(), JsValue> {
        let t = self.t(now);
        let cells = from_js_json(&cells)
            .and_then(|v| weft_core::fields::list("cells", &v, CellSpec::from_value))
            .map_err(|e| error(&OpsError::InvalidGraph(e)))?;
        self.app
            .replace_graph(t, &mut reg.inner, ms(instance), cells)
            .map_err(ops_err)
    }

    /// Disposes the graph (controls stay).
    #[wasm_bindgen(js_name = disposeGraph)]
    pub fn dispose_graph(&mut self, now: f64, reg: &mut JobRegistry) {
        let t = self.t(now);
        self.app.dispose_graph(t, &mut reg.inner);
    }

    // ----- writes -----------------------------------------------------------------------------

    /// Accepts one write (staged until `flush`); returns its receipt.
    pub fn set(
        &mut self,
        now: f64,
        name: &str,
        value: JsValue,
        actor: JsValue,
    ) -> Result<JsValue, JsValue> {
        let t = self.t(now);
        let w = self
            .app
            .set(t, name, &Js::from_js(value), actor_of(&actor))
            .map_err(ops_err)?;
        Ok(jv(&self.app.receipt_record(w)))
    }

    /// Accepts several writes all-or-nothing; returns their receipts.
    #[wasm_bindgen(js_name = setMany)]
    pub fn set_many(
        &mut self,
        now: f64,
        writes: JsValue,
        actor: JsValue,
    ) -> Result<Array, JsValue> {
        let t = self.t(now);
        let ws = self
            .app
            .set_many(t, &pairs(&writes)?, actor_of(&actor))
            .map_err(ops_err)?;
        Ok(array(ws.iter().map(|w| jv(&self.app.receipt_record(*w)))))
    }

    /// Invokes an action; returns `{invocation, writes}`.
    pub fn act(
        &mut self,
        now: f64,
        name: &str,
        args: JsValue,
        actor: JsValue,
    ) -> Result<JsValue, JsValue> {
        let t = self.t(now);
        let (inv, ws) = self
            .app
            .act(t, name, &pairs(&args)?, actor_of(&actor))
            .map_err(ops_err)?;
        let receipts: Vec<_> = ws.iter().map(|w| self.app.receipt_json(*w)).collect();
        Ok(jv(
            &serde_json::json!({"invocation": inv.0, "writes": receipts}),
        ))
    }

    /// Ends the tick; returns the new revision, or undefined when nothing changed.
    pub fn flush(&mut self, now: f64, reg: &mut JobRegistry) -> Option<f64> {
        let t = self.t(now);
        self.app.flush(t, &mut reg.inner).map(|r| r as f64)
    }

    /// A write's receipt.
    pub fn receipt(&self, write: f64) -> JsValue {
        match self.app.receipt_record(WriteId(write as u64)) {
            Some(r) => jv(&r),
            None => JsValue::UNDEFINED,
        }
    }

    // ----- operations -------------------------------------------------------------------------

    /// Starts an operation: `{writes, waitFor, select | selector, onSupersede, onFailure,
    /// timeoutMs, by, toolCall}`. Returns its id.
    #[wasm_bindgen(js_name = observeOp)]
    pub fn observe_op(
        &mut self,
        now: f64,
        reg: &mut JobRegistry,
        req: JsValue,
    ) -> Result<f64, JsValue> {
        let t = self.t(now);
        let f = ObserveFields {
            mask: read_observe(&req, &self.scratch),
            values: self.scratch.clone(),
        };
        let absent = || JsValue::UNDEFINED;
        let mut r = ObserveRequest::new(
            pairs(&f.get(ObserveFields::WRITES).unwrap_or_else(absent))?,
            strings(
                &f.get(ObserveFields::WAIT_FOR).unwrap_or_else(absent),
                "waitFor",
            )?,
        );
        r.select = match (
            f.string(ObserveFields::SELECTOR),
            f.get(ObserveFields::SELECT),
        ) {
            (Some(_), Some(_)) => return Err(bad("give `select` or `selector`, not both")),
            (Some(s), None) => Selection::Selector(s),
            (None, Some(s)) => Selection::Outputs(strings(&s, "select")?),
            (None, None) => Selection::None,
        };
        r.on_supersede = match f.string(ObserveFields::ON_SUPERSEDE).as_deref() {
            None | Some("end") => OnSupersede::End,
            Some("follow") => OnSupersede::Follow,
            Some(x) => return Err(bad(format!("onSupersede `{x}`; use \"end\" or \"follow\""))),
        };
        r.on_failure = match f.string(ObserveFields::ON_FAILURE).as_deref() {
            None | Some("end") => OnFailure::End,
            Some("collect") => OnFailure::Collect,
            Some(x) => return Err(bad(format!("onFailure `{x}`; use \"end\" or \"collect\""))),
        };
        r.timeout_ms = f
            .get(ObserveFields::TIMEOUT_MS)
            .and_then(|v| v.as_f64())
            .map(ms);
        r.actor = Actor {
            by: f
                .string(ObserveFields::BY)
                .unwrap_or_else(|| "agent".into()),
            tool_call: f.string(ObserveFields::TOOL_CALL),
        };
        self.app
            .observe(t, &mut reg.inner, r)
            .map(|o| o.0 as f64)
            .map_err(ops_err)
    }

    /// Cancels an operation's observation only; returns its outcome name.
    #[wasm_bindgen(js_name = cancelOp)]
    pub fn cancel_op(
        &mut self,
        now: f64,
        reg: &mut JobRegistry,
        op: f64,
        reason: &str,
    ) -> Result<String, JsValue> {
        let t = self.t(now);
        self.app
            .cancel_op(t, &mut reg.inner, OpId(op as u64), reason)
            .map(|k| k.as_str().to_owned())
            .map_err(ops_err)
    }

    /// Stores what a selector returned for a settled operation.
    #[wasm_bindgen(js_name = recordResult)]
    pub fn record_result(&mut self, op: f64, value: JsValue) -> Result<(), JsValue> {
        self.app
            .record_result(OpId(op as u64), Js::from_js(value))
            .map_err(ops_err)
    }

    /// Tells the app a settled operation's selector gave no result (it threw, or there is no
    /// selector of that name): tool calls waiting on it reply now, without one.
    #[wasm_bindgen(js_name = recordNoResult)]
    pub fn record_no_result(&mut self, op: f64) -> Result<(), JsValue> {
        self.app.record_no_result(OpId(op as u64)).map_err(ops_err)
    }

    /// The whole operation record (as `inspect` returns it).
    pub fn operation(&self, op: f64) -> Result<JsValue, JsValue> {
        Ok(jv(&self
            .app
            .operation_json(OpId(op as u64))
            .map_err(ops_err)?))
    }

    /// Whether the operation has its outcome, or had it and was pruned (`false` for unknown
    /// ids).
    #[wasm_bindgen(js_name = isFinished)]
    pub fn is_finished(&self, op: f64) -> bool {
        let id = OpId(op as u64);
        self.app.was_pruned(id) || self.app.operation(id).is_some_and(|o| o.is_finished())
    }

    /// Every retained operation, briefly: `{operation, state, by}`.
    pub fn operations(&self) -> JsValue {
        let list: Vec<_> = self
            .app
            .operations()
            .map(|o| {
                serde_json::json!({"operation": o.id.0, "by": o.actor.by,
                    "state": o.outcome.as_ref().map(|x| x.kind.as_str()).unwrap_or("waiting")})
            })
            .collect();
        jv(&serde_json::Value::Array(list))
    }

    /// The outcome record (`null` while waiting); `result` is the live JS value. The record is
    /// written straight to JSON text (no `serde_json::Value` tree, no JSON copy of the result).
    pub fn outcome(&self, op: f64) -> JsValue {
        let Some(rec) = self.app.outcome_record(OpId(op as u64)) else {
            return JsValue::NULL;
        };
        let result = rec.result().map(|r| r.to_js());
        let o = jv(&rec.live_result());
        if let Some(r) = result {
            set_prop(&o, &ops_key("result"), &r);
        }
        o
    }

    // ----- host calculations ------------------------------------------------------------------

    /// Progress in [0, 1] of a host calculation; returns `applied` or `late`.
    #[wasm_bindgen(js_name = calcProgress)]
    pub fn calc_progress(
        &mut self,
        now: f64,
        reg: &mut JobRegistry,
        calc: &str,
        fraction: f64,
    ) -> Result<String, JsValue> {
        let t = self.t(now);
        self.app
            .calc_progress(t, &mut reg.inner, calc_arg(calc)?, fraction)
            .map(|s| s.as_str().to_owned())
            .map_err(ops_err)
    }

    /// A partial value of a streaming host calculation.
    #[wasm_bindgen(js_name = calcPartial)]
    pub fn calc_partial(
        &mut self,
        now: f64,
        reg: &mut JobRegistry,
        calc: &str,
        value: JsValue,
    ) -> Result<String, JsValue> {
        let t = self.t(now);
        self.app
            .calc_partial(t, &mut reg.inner, calc_arg(calc)?, Js::from_js(value))
            .map(|s| s.as_str().to_owned())
            .map_err(ops_err)
    }

    /// The result of a host calculation.
    #[wasm_bindgen(js_name = calcDone)]
    pub fn calc_done(
        &mut self,
        now: f64,
        reg: &mut JobRegistry,
        calc: &str,
        value: JsValue,
    ) -> Result<String, JsValue> {
        let t = self.t(now);
        self.app
            .calc_done(t, &mut reg.inner, calc_arg(calc)?, Js::from_js(value))
            .map(|s| s.as_str().to_owned())
            .map_err(ops_err)
    }

    /// A streaming host calculation finished: its last partial is its result (not committed
    /// again).
    #[wasm_bindgen(js_name = calcFinish)]
    pub fn calc_finish(
        &mut self,
        now: f64,
        reg: &mut JobRegistry,
        calc: &str,
    ) -> Result<String, JsValue> {
        let t = self.t(now);
        self.app
            .calc_finish(t, &mut reg.inner, calc_arg(calc)?)
            .map(|s| s.as_str().to_owned())
            .map_err(ops_err)
    }

    /// A host calculation failed.
    #[wasm_bindgen(js_name = calcFailed)]
    pub fn calc_failed(
        &mut self,
        now: f64,
        reg: &mut JobRegistry,
        calc: &str,
        message: &str,
        code: Option<String>,
    ) -> Result<String, JsValue> {
        let t = self.t(now);
        self.app
            .calc_failed(t, &mut reg.inner, calc_arg(calc)?, message, code.as_deref())
            .map(|s| s.as_str().to_owned())
            .map_err(ops_err)
    }

    // ----- reads ------------------------------------------------------------------------------

    /// The whole application at the current revision.
    pub fn snapshot(&self) -> JsValue {
        snapshot_js(&self.app.snapshot())
    }

    /// One cell as a UI sees it.
    pub fn cell(&self, name: &str) -> Result<JsValue, JsValue> {
        Ok(cell_js(&self.app.cell_view(name).map_err(ops_err)?))
    }

    /// The report (`full`: metadata, provenance, current calculations).
    pub fn report(&self, full: bool) -> JsValue {
        jv(&self.app.report(full))
    }

    /// A calculation's record and journal.
    pub fn calc(&self, calc: &str) -> Result<JsValue, JsValue> {
        Ok(jv(&self.app.calc_json(calc_arg(calc)?).map_err(ops_err)?))
    }

    /// The retained calculations of a cell, oldest first.
    #[wasm_bindgen(js_name = calcsOf)]
    pub fn calcs_of(&self, cell: &str) -> Array {
        array(self.app.calcs_of(cell).iter().map(|c| c.to_string().into()))
    }

    /// The current revision.
    pub fn revision(&self) -> f64 {
        self.app.revision() as f64
    }

    /// `[calculations, writes, operations]` retained.
    pub fn retained(&self) -> Array {
        let (c, w, o) = self.app.retained();
        array([(c as f64).into(), (w as f64).into(), (o as f64).into()])
    }

    // ----- tools ------------------------------------------------------------------------------

    /// The published tools with their JSON Schemas.
    #[wasm_bindgen(js_name = toolDefinitions)]
    pub fn tool_definitions(&self) -> JsValue {
        let defs: Vec<_> = self
            .app
            .tool_definitions()
            .iter()
            .map(|t| t.to_json())
            .collect();
        jv(&serde_json::Value::Array(defs))
    }

    /// Calls a tool for `caller` (`{by, toolCall, owner}`): `{ready: result}`, or `{wait: op,
    /// waitMs, call}` — keep driving; the app replies with a `tool_replied` output for `call`
    /// when the operation ends or the wait elapses (its own timer, in `pollTimeout`).
    #[wasm_bindgen(js_name = callTool)]
    pub fn call_tool(
        &mut self,
        now: f64,
        reg: &mut JobRegistry,
        name: &str,
        args: JsValue,
        caller: JsValue,
    ) -> Result<JsValue, JsValue> {
        let t = self.t(now);
        let args = to_json(&args)?;
        let owner = opt_string(&caller, "owner");
        let mut caller = ToolCaller::from(Actor {
            by: opt_string(&caller, "by").unwrap_or_else(|| "agent".into()),
            tool_call: opt_string(&caller, "toolCall"),
        });
        if let Some(owner) = owner {
            caller.owner = owner;
        }
        match self
            .app
            .call_tool(t, &mut reg.inner, name, &args, caller)
            .map_err(ops_err)?
        {
            ToolReply::Ready(v) => Ok(jv(&serde_json::json!({"ready": v}))),
            ToolReply::Wait { call, op, wait_ms } => Ok(jv(
                &serde_json::json!({"wait": op.0, "waitMs": wait_ms, "call": call.0}),
            )),
        }
    }

    /// Ends a waiting tool call without a reply (its caller aborted); false when it is not
    /// waiting.
    #[wasm_bindgen(js_name = cancelToolWait)]
    pub fn cancel_tool_wait(&mut self, call: f64) -> bool {
        self.app.cancel_tool_wait(ToolCallId(call as u64))
    }

    /// Submits an independent task running a Worker cell on explicit inputs; returns the job.
    #[wasm_bindgen(js_name = submitTask)]
    pub fn submit_task(
        &mut self,
        now: f64,
        reg: &mut JobRegistry,
        cell: &str,
        overrides: JsValue,
        owner: &str,
        options: JsValue,
    ) -> Result<f64, JsValue> {
        let t = self.t(now);
        self.app
            .submit_task(
                t,
                &mut reg.inner,
                cell,
                &pairs(&overrides)?,
                owner,
                origin_of(&options),
            )
            .map(|j| j.0 as f64)
            .map_err(ops_err)
    }

    /// Hosts a waiting operation as a job of the registry (`owner`; `options`: `{origin,
    /// toolCall}`); returns the job (the same one when it is hosted already). Cancelling the
    /// job cancels the observation only.
    #[wasm_bindgen(js_name = hostAsJob)]
    pub fn host_as_job(
        &mut self,
        now: f64,
        reg: &mut JobRegistry,
        op: f64,
        owner: &str,
        options: JsValue,
    ) -> Result<f64, JsValue> {
        let t = self.t(now);
        self.app
            .host_as_job(
                t,
                &mut reg.inner,
                OpId(op as u64),
                owner,
                origin_of(&options),
            )
            .map(|j| j.0 as f64)
            .map_err(ops_err)
    }

    // ----- the registry's outputs -------------------------------------------------------------

    /// A message from a Worker: its job and (for Worker cells) its calculation see it.
    #[wasm_bindgen(js_name = onMessage)]
    pub fn on_message(
        &mut self,
        now: f64,
        reg: &mut JobRegistry,
        endpoint: f64,
        msg: JsValue,
    ) -> Result<(), JsValue> {
        let t = self.t(now);
        self.app
            .on_worker_message(
                t,
                &mut reg.inner,
                EndpointId(endpoint as u64),
                &Js::from_js(msg),
            )
            .map_err(ops_err)
    }

    /// A Worker endpoint's transport closed: its jobs and Worker cells see it.
    #[wasm_bindgen(js_name = onEndpointClosed)]
    pub fn on_endpoint_closed(
        &mut self,
        now: f64,
        reg: &mut JobRegistry,
        endpoint: f64,
        reason: &str,
    ) -> Result<(), JsValue> {
        let t = self.t(now);
        self.app
            .on_endpoint_closed(t, &mut reg.inner, EndpointId(endpoint as u64), reason)
            .map_err(ops_err)
    }

    /// After a direct call of the registry (`JobRegistry.submit`, `cancel`, ...): the app
    /// reacts to the registry's outputs (`App::on_registry_outputs`), at `now` (absent: the
    /// latest time the app saw). The one path every registry call of the JS runtime takes.
    #[wasm_bindgen(js_name = onRegistryOutputs)]
    pub fn on_registry_outputs(&mut self, now: Option<f64>, reg: &mut JobRegistry) {
        let t = match now {
            Some(now) => self.t(now),
            None => self.last_now,
        };
        self.app.on_registry_outputs(t, &mut reg.inner);
    }

    /// The next deadline: operation timeouts, tool-call waits and registry timers.
    #[wasm_bindgen(js_name = pollTimeout)]
    pub fn poll_timeout(&self, reg: &JobRegistry) -> Option<f64> {
        self.app.poll_timeout(&reg.inner).map(|t| t.as_ms() as f64)
    }

    /// Fires the timers due at `now`.
    #[wasm_bindgen(js_name = handleTimeout)]
    pub fn handle_timeout(&mut self, now: f64, reg: &mut JobRegistry) {
        let t = self.t(now);
        self.app.handle_timeout(t, &mut reg.inner);
    }

    /// All pending outputs: the registry's (`send`, `wait_settled`, ...) and the app's
    /// (`compute`, `abort`, `op_finished`, `tool_replied`).
    #[wasm_bindgen(js_name = drainOutputs)]
    pub fn drain_outputs(&mut self, reg: &mut JobRegistry) -> Array {
        let t = self.last_now;
        self.app.on_registry_outputs(t, &mut reg.inner);
        let outs: Vec<AppOutput<Js>> = self.app.drain_outputs().collect();
        let arr = Array::new();
        for o in outs {
            arr.push(&self.output_js(reg, o));
        }
        arr
    }

    fn output_js(&mut self, reg: &mut JobRegistry, o: AppOutput<Js>) -> JsValue {
        match o {
            AppOutput::Jobs(j) => reg.output_js(j),
            AppOutput::Compute {
                calc,
                cell,
                inputs,
                previous,
            } => {
                let prev = previous
                    .map(|p: Arc<Js>| p.to_js())
                    .unwrap_or(JsValue::UNDEFINED);
                mk_compute(&calc.to_string(), &cell, &inputs.to_js(), &prev)
            }
            AppOutput::Abort {
                calc,
                cell,
                reason,
                code,
                detail,
            } => jv(
                &serde_json::json!({"output": "abort", "calc": calc.to_string(), "cell": cell, "reason": reason, "code": code, "detail": detail}),
            ),
            AppOutput::OpFinished {
                op,
                outcome,
                snapshot,
                selector,
            } => mk_finished(
                op.0 as f64,
                &ops_key(outcome.as_str()),
                selector,
                &snapshot.map_or(JsValue::UNDEFINED, |s| snapshot_js(&s)),
            ),
            AppOutput::ToolReplied { call, op, reply } => {
                let o =
                    jv(&serde_json::json!({"output": "tool_replied", "call": call.0, "op": op.0}));
                match reply {
                    Ok(v) => put(&o, &key("reply"), &jv(&v)),
                    Err(e) => put(&o, &key("error"), &ops_err(e)),
                }
                o
            }
        }
    }
}

impl OpsApp {
    /// The core's time for a host time: never earlier than a time already seen.
    fn t(&mut self, now: f64) -> Mono {
        self.last_now = mono(now).max(self.last_now);
        self.last_now
    }
}

/// Standing desires (`weft_core::ops::claims::Claims`) over JSON desires, as a JS class. The
/// JS package (`wasm/js/ops.js`, `createClaims`) performs the acquisitions and releases the
/// core asks for and reports back; desires are compared as JSON values.
#[wasm_bindgen]
pub struct OpsClaims {
    claims: Claims<serde_json::Value>,
    last_now: Mono,
}

fn claims_err(e: ClaimsError) -> JsValue {
    error(&e)
}

impl OpsClaims {
    /// The core's time for a host time: never earlier than a time already seen.
    fn t(&mut self, now: f64) -> Mono {
        self.last_now = mono(now).max(self.last_now);
        self.last_now
    }
}

impl Default for OpsClaims {
    fn default() -> Self {
        Self::new()
    }
}

#[wasm_bindgen]
impl OpsClaims {
    /// No claims yet; a claim is created by its first desire.
    #[wasm_bindgen(constructor)]
    pub fn new() -> OpsClaims {
        OpsClaims {
            claims: Claims::new(),
            last_now: Mono::ZERO,
        }
    }

    /// Sets what should exist now (`null`/`undefined`: nothing); an equal desire changes nothing.
    pub fn desire(&mut self, now: f64, claim: &str, desire: JsValue) -> Result<(), JsValue> {
        let t = self.t(now);
        let d = if desire.is_null() || desire.is_undefined() {
            None
        } else {
            Some(to_json(&desire)?)
        };
        self.claims.desire(t, claim, d);
        Ok(())
    }

    /// The acquisition `attempt` succeeded; `true` when it was adopted (still the newest
    /// desire), `false` when it is to be released at once.
    pub fn acquired(&mut self, now: f64, claim: &str, attempt: f64) -> Result<bool, JsValue> {
        let t = self.t(now);
        self.claims
            .acquired(t, claim, attempt as u64)
            .map_err(claims_err)
    }

    /// The acquisition `attempt` failed with `error`.
    #[wasm_bindgen(js_name = acquireFailed)]
    pub fn acquire_failed(
        &mut self,
        now: f64,
        claim: &str,
        attempt: f64,
        error: &str,
    ) -> Result<(), JsValue> {
        let t = self.t(now);
        self.claims
            .acquire_failed(t, claim, attempt as u64, error)
            .map_err(claims_err)
    }

    /// The resource of `attempt` was released (`error`: the release failed; dropped anyway).
    pub fn released(
        &mut self,
        now: f64,
        claim: &str,
        attempt: f64,
        error: Option<String>,
    ) -> Result<(), JsValue> {
        let t = self.t(now);
        self.claims
            .released(t, claim, attempt as u64, error.as_deref())
            .map_err(claims_err)
    }

    /// Re-attempts a claim parked in `error` with its unchanged desire.
    pub fn retry(&mut self, now: f64, claim: &str) -> Result<(), JsValue> {
        let t = self.t(now);
        self.claims.retry(t, claim).map_err(claims_err)
    }

    /// `idle`, `pending`, `active` or `error`.
    pub fn phase(&self, claim: &str) -> String {
        self.claims.phase(claim).as_str().into()
    }

    /// `{phase, desired, held, error, journal: [{at, what, attempt}]}`.
    pub fn state(&self, claim: &str) -> JsValue {
        jv(&self.claims.to_json(claim))
    }

    /// The work for the host: `{output: "acquire" | "release", claim, attempt, desire}`.
    #[wasm_bindgen(js_name = drainOutputs)]
    pub fn drain_outputs(&mut self) -> Array {
        self.claims
            .drain_outputs()
            .map(|o: ClaimOutput<serde_json::Value>| jv(&o.to_json(|d| d.clone())))
            .collect()
    }
}
