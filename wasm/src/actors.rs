//! Bindings of the actor graph. The JS package (`wasm/js/actors.js`) owns persistence
//! (IndexedDB in browsers, memory anywhere): it hands the core a snapshot, performs the batches
//! the core queues and acknowledges them. Every rule is `weft_core::actors`.

use std::collections::BTreeMap;

use js_sys::{Array, Object, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;
use weft_core::actors::store::{Snapshot, WriteBatch};
use weft_core::actors::{
    ActorGraph, ActorsError, HarnessConfig, HeuristicProposer, OpenReport, api,
};

use crate::js::{error, from_js_json, json};

fn ms(now: f64) -> u64 {
    if now.is_finite() && now > 0.0 {
        now as u64
    } else {
        0
    }
}

fn config(vars: &JsValue) -> Result<(HarnessConfig, Vec<String>), JsValue> {
    let mut pairs = Vec::new();
    if vars.is_object() {
        for k in Object::keys(&Object::from(vars.clone())).iter() {
            let key = k.as_string().unwrap_or_default();
            let v = Reflect::get(vars, &k)?;
            if let Some(s) = v.as_string() {
                pairs.push((key, s));
            } else if let Some(b) = v.as_bool() {
                pairs.push((key, if b { "on".into() } else { "off".into() }));
            }
        }
    }
    HarnessConfig::from_vars(pairs).map_err(|e| error(&e))
}

/// A snapshot from `{path: string | Uint8Array}`; node directories are derived from the paths.
fn snapshot(files: &JsValue) -> Result<Snapshot, JsValue> {
    let mut snap = Snapshot::default();
    if !files.is_object() {
        return Ok(snap);
    }
    let mut dirs = BTreeMap::new();
    for k in Object::keys(&Object::from(files.clone())).iter() {
        let path = k.as_string().unwrap_or_default();
        let v = Reflect::get(files, &k)?;
        let bytes = match v.as_string() {
            Some(s) => s.into_bytes(),
            None if v.is_instance_of::<Uint8Array>() => Uint8Array::from(v).to_vec(),
            None => continue,
        };
        if let Some(rest) = path.strip_prefix("nodes/")
            && let Some((id, _)) = rest.split_once('/')
        {
            dirs.insert(format!("nodes/{id}"), ());
        }
        if weft_core::actors::store::is_snapshot_path(&path) {
            snap.files.insert(path, bytes);
        }
    }
    snap.dirs = dirs.into_keys().collect();
    Ok(snap)
}

fn batch_js(b: &WriteBatch) -> JsValue {
    json(&b.to_json())
}

/// The actor graph of one `$CHAT_ROOT`, as a JS class. Times are Unix-epoch milliseconds.
#[wasm_bindgen(js_name = ActorGraph)]
pub struct ActorGraphJs {
    inner: ActorGraph,
    report: OpenReport,
    notes: Vec<String>,
}

#[wasm_bindgen(js_class = ActorGraph)]
impl ActorGraphJs {
    /// Opens a graph from stored files (`{path: text}`), recovering what an interrupted writer
    /// left (the recovery batch is queued: take and persist it first). `config` holds harness
    /// variables (`{ACTOR_WAIT_GRAPH: "enforce"}`). Throws `NOT_INITIALIZED` for an empty store.
    pub fn open(
        config_vars: JsValue,
        address: &str,
        files: JsValue,
        now: f64,
    ) -> Result<ActorGraphJs, JsValue> {
        let (c, notes) = config(&config_vars)?;
        let (inner, report) =
            ActorGraph::open(c, address, &snapshot(&files)?, ms(now)).map_err(|e| error(&e))?;
        Ok(ActorGraphJs {
            inner,
            report,
            notes,
        })
    }

    /// Creates a graph (root coordinator) in an empty store; its batch is queued.
    pub fn init(
        config_vars: JsValue,
        address: &str,
        now: f64,
        title: &str,
    ) -> Result<ActorGraphJs, JsValue> {
        let (c, notes) = config(&config_vars)?;
        let inner = ActorGraph::init(c, address, &Snapshot::default(), ms(now), title)
            .map_err(|e| error(&e))?;
        Ok(ActorGraphJs {
            inner,
            report: OpenReport::default(),
            notes,
        })
    }

    /// What open found: `{diagnostics, repairs, recoveryBatch}`.
    #[wasm_bindgen(getter)]
    pub fn report(&self) -> JsValue {
        json(&self.report)
    }

    /// Notes about the harness variables (deprecated names).
    #[wasm_bindgen(getter)]
    pub fn notes(&self) -> JsValue {
        json(&self.notes)
    }

    /// Performs an operation of `weft_core::actors::api` (`spawn`, `message`, `route`,
    /// `status`, …, and the views `graph`, `grid`, `tree`, …) with camelCase `args`.
    pub fn call(&mut self, op: &str, now: f64, args: JsValue) -> Result<JsValue, JsValue> {
        let args: serde_json::Value = if args.is_undefined() || args.is_null() {
            serde_json::json!({})
        } else {
            from_js_json(&args).map_err(|e| {
                error(&ActorsError::InvalidArgument(format!(
                    "arguments are not JSON-like: {e}"
                )))
            })?
        };
        let out = api::call(&mut self.inner, ms(now), op, &args, &HeuristicProposer)
            .map_err(|e| error(&e))?;
        Ok(json(&out))
    }

    /// The queued batches, oldest first: `[{id, label, gates, stages: [[{op, path, text, …}]]}]`.
    #[wasm_bindgen(js_name = takeBatches)]
    pub fn take_batches(&mut self) -> Array {
        self.inner.take_batches().iter().map(batch_js).collect()
    }

    /// The store performed batch `id` (and every earlier one) durably.
    pub fn ack(&mut self, id: f64) -> Result<(), JsValue> {
        self.inner.ack(ms(id)).map_err(|e| error(&e))
    }

    /// The store failed batch `id`: later writes are refused until the store is reopened.
    pub fn fail(&mut self, id: f64, detail: &str) {
        self.inner.fail(ms(id), detail);
    }

    /// Increases with every change.
    #[wasm_bindgen(getter)]
    pub fn version(&self) -> f64 {
        self.inner.version() as f64
    }

    /// The changes since the last drain: `[{seq, kind, node}]`.
    #[wasm_bindgen(js_name = drainEvents)]
    pub fn drain_events(&mut self) -> JsValue {
        json(&self.inner.drain_events())
    }
}

/// The harness variables as the core reads them: `{config, notes}`.
#[wasm_bindgen(js_name = actorConfig)]
pub fn actor_config(vars: JsValue) -> Result<JsValue, JsValue> {
    let (c, notes) = config(&vars)?;
    Ok(json(&serde_json::json!({"config": c, "notes": notes})))
}
