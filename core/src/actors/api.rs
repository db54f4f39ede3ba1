//! The graph's JSON surface: one function that takes an operation name and a JSON object of
//! camelCase arguments and returns JSON. The wasm bindings (and through them the JS package)
//! call exactly this, and the conformance vectors drive it too, so every host exposes the
//! same operations with the same argument names and the same errors.
//!
//! Mutations: `spawn {parent, type, id?, title?, topic?, reason?, trigger?, gitCloseout?,
//! waitOn?: [{node, mode}]}`, `message {node, text, role?, tokens?, from?}`, `route {node,
//! text, tokens?}`, `status {node, status, summary?, awaitingUser?}`, `resolve {node,
//! candidates: ["continue" | {node} | {type, title, topic?}], note?}`, `ref {node, line,
//! summary?}`, `narrate {text}`, `wait {node, on, mode: "warn"|"enforce"|null}`, `relate
//! {from, to, kind?}`, `archive {node, hidden?}`, `reset {before}`, `bookmark {scope?,
//! keywords?, text?, image?}`, `epoch {reason?, nodes?}`, `export {}`.
//!
//! Views: `graph`, `linear {node?}`, `grid`, `tree`, `temporal {scope?, at?, buckets?}`, `fork
//! {node}`, `metathread {limit?}`, `audit`, `index`, `lineage`, `waits {node}`, `model {node,
//! recent?}`, `mailbox {node, reader?}`.
//!
//! Times (`at`, `before`) are Unix-epoch milliseconds or RFC 3339 strings.

use serde_json::{Value, json};

use super::time::parse_timestamp;
use super::views::Scope;
use super::{
    ActorGraph, ActorsError, Candidate, GitCloseout, NewLine, NodeType, RelatedKind, Role,
    RouteOutcome, SpawnOutcome, SpawnProposer, SpawnRequest, Status, Trigger, WaitMode,
};
use crate::Wall;

fn s<'a>(a: &'a Value, k: &str) -> Result<&'a str, ActorsError> {
    a[k].as_str()
        .ok_or_else(|| ActorsError::InvalidArgument(format!("`{k}` (a string) is required")))
}

fn o(a: &Value, k: &str) -> Option<String> {
    a[k].as_str().map(str::to_owned)
}

fn time_arg(a: &Value, k: &str) -> Result<Option<Wall>, ActorsError> {
    match &a[k] {
        Value::Null => Ok(None),
        Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
            .map(|ms| Some(Wall::from_ms(ms)))
            .ok_or_else(|| ActorsError::InvalidArgument(format!("`{k}` is not a time"))),
        Value::String(t) => parse_timestamp(t)
            .map(Some)
            .ok_or_else(|| ActorsError::InvalidArgument(format!("`{k}` {t:?} is not a time"))),
        _ => Err(ActorsError::InvalidArgument(format!("`{k}` is not a time"))),
    }
}

/// A spawn outcome as JSON.
pub fn spawn_json(o: &SpawnOutcome) -> Value {
    json!({
        "parent": o.parent, "child": o.child, "id": o.child, "type": o.node_type, "markerLine": o.marker_line,
        "childLine": o.child_line, "gitCloseout": o.git_closeout, "pausedParent": o.paused_parent, "batch": o.batch,
    })
}

/// Performs `op` with `args` at `now` (see the module docs). Views never queue batches;
/// mutations queue exactly what they changed.
pub fn call(
    g: &mut ActorGraph,
    now: Wall,
    op: &str,
    args: &Value,
    proposer: &dyn SpawnProposer,
) -> Result<Value, ActorsError> {
    if !args.is_object() && !args.is_null() {
        return Err(ActorsError::InvalidArgument(
            "arguments must be an object".into(),
        ));
    }
    Ok(match op {
        "spawn" => {
            let mut r = SpawnRequest::new(
                s(args, "parent")?,
                NodeType::parse(args["type"].as_str().unwrap_or("task")),
            );
            r.id = o(args, "id");
            r.title = o(args, "title").unwrap_or_default();
            r.topic = o(args, "topic").unwrap_or_default();
            r.reason = o(args, "reason").unwrap_or_default();
            r.trigger = match args["trigger"].as_str().unwrap_or("user") {
                "user" => Trigger::User,
                "model" => Trigger::Model,
                "policy" => Trigger::Policy,
                t => {
                    return Err(ActorsError::InvalidArgument(format!(
                        "trigger `{t}` (user, model or policy)"
                    )));
                }
            };
            r.git_closeout = match o(args, "gitCloseout").map(|c| GitCloseout::parse(&c)) {
                Some(GitCloseout::Other(c)) => {
                    return Err(ActorsError::InvalidArgument(format!(
                        "gitCloseout `{c}` (expected {})",
                        GitCloseout::KNOWN.join(", ")
                    )));
                }
                c => c,
            };
            for w in args["waitOn"].as_array().into_iter().flatten() {
                let mode = WaitMode::parse(w["mode"].as_str().unwrap_or("warn"));
                if let WaitMode::Other(m) = &mode {
                    return Err(ActorsError::InvalidArgument(format!(
                        "wait mode `{m}` (warn or enforce)"
                    )));
                }
                r.wait_on.push((s(w, "node")?.to_owned(), mode));
            }
            spawn_json(&g.spawn(now, r)?)
        }
        "message" => {
            let l = NewLine {
                role: Role::parse(args["role"].as_str().unwrap_or("user")),
                text: s(args, "text")?.to_owned(),
                tokens: args["tokens"].as_u64(),
                from: o(args, "from"),
            };
            json!({"node": s(args, "node")?, "line": g.append(now, s(args, "node")?, l)?})
        }
        "route" => match g.route(
            now,
            s(args, "node")?,
            s(args, "text")?,
            args["tokens"].as_u64(),
            proposer,
        )? {
            RouteOutcome::Continued { node, line } => {
                json!({"outcome": "continued", "node": node, "line": line})
            }
            RouteOutcome::Spawned { trigger, spawn } => {
                let mut v = spawn_json(&spawn);
                v["outcome"] = json!("spawned");
                v["trigger"] = json!(trigger.as_str());
                v
            }
        },
        "status" => {
            let mb = g.set_status(
                now,
                s(args, "node")?,
                Status::parse(s(args, "status")?),
                o(args, "summary"),
                args["awaitingUser"].as_bool(),
            )?;
            serde_json::to_value(mb).expect("serializes")
        }
        "resolve" => {
            let mut cands = Vec::new();
            for c in args["candidates"].as_array().into_iter().flatten() {
                cands.push(match c {
                    Value::String(x) if x == "continue" => Candidate::Continue,
                    Value::Object(m) if m.contains_key("node") => {
                        Candidate::Existing(s(c, "node")?.to_owned())
                    }
                    Value::Object(_) => Candidate::New {
                        node_type: NodeType::parse(c["type"].as_str().unwrap_or("task")),
                        title: o(c, "title").unwrap_or_default(),
                        topic: o(c, "topic").unwrap_or_default(),
                    },
                    _ => return Err(ActorsError::InvalidArgument(format!("candidate {c}"))),
                });
            }
            let r = g.resolve(
                now,
                s(args, "node")?,
                cands,
                args["note"].as_str().unwrap_or(""),
            )?;
            json!({"parent": r.parent, "into": r.into, "created": r.created, "batch": r.batch})
        }
        "ref" => {
            let line = args["line"].as_u64().ok_or_else(|| {
                ActorsError::InvalidArgument("`line` (a number) is required".into())
            })?;
            json!({"metaLine": g.add_ref(now, s(args, "node")?, line, args["summary"].as_str().unwrap_or(""))?})
        }
        "narrate" => json!({"metaLine": g.narrate(now, s(args, "text")?)?}),
        "wait" => {
            let target = args["on"]
                .as_str()
                .or(args["target"].as_str())
                .ok_or_else(|| {
                    ActorsError::InvalidArgument("`on` (a string) is required".into())
                })?;
            let mode = match &args["mode"] {
                Value::Null => None,
                Value::String(m) if m == "none" => None,
                Value::String(m) => Some(WaitMode::parse(m)),
                m => return Err(ActorsError::InvalidArgument(format!("mode {m}"))),
            };
            g.set_wait(now, s(args, "node")?, target, mode)?;
            serde_json::to_value(g.wait_checks(s(args, "node")?)?).expect("serializes")
        }
        "relate" => {
            let kind = RelatedKind::parse(args["kind"].as_str().unwrap_or("references"));
            g.relate(now, s(args, "from")?, s(args, "to")?, kind)?;
            Value::Null
        }
        "archive" => {
            g.archive(
                now,
                s(args, "node")?,
                args["hidden"].as_bool().unwrap_or(true),
            )?;
            Value::Null
        }
        "reset" => {
            let before = time_arg(args, "before")?
                .ok_or_else(|| ActorsError::InvalidArgument("`before` is required".into()))?;
            json!({"archived": g.reset(now, before, None)?})
        }
        "bookmark" => {
            let scope = Scope::parse(args["scope"].as_str().unwrap_or("global"))?;
            let kw = args["keywords"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect();
            json!({"line": g.bookmark(now, &scope, kw, args["text"].as_str().unwrap_or(""), args["image"].as_str())?})
        }
        "epoch" => {
            let nodes = args["nodes"].as_array().map(|a| {
                a.iter()
                    .filter_map(|n| n.as_str().map(str::to_owned))
                    .collect()
            });
            json!({"epoch": g.reframe_epoch(now, args["reason"].as_str().unwrap_or(""), nodes)?})
        }
        "export" => json!({"lines": g.export(now)?}),
        "graph" => g.graph_view(),
        "linear" => g.linear_view(args["node"].as_str())?,
        "grid" => g.grid_view(now),
        "tree" => g.tree_view(),
        "temporal" => {
            let scope = Scope::parse(args["scope"].as_str().unwrap_or("global"))?;
            g.temporal_view(
                now,
                &scope,
                time_arg(args, "at")?,
                args["buckets"].as_u64().unwrap_or(48) as usize,
            )?
        }
        "fork" => g.fork_view(s(args, "node")?)?,
        "metathread" => g.metathread_view(args["limit"].as_u64().map(|l| l as usize)),
        "audit" => serde_json::to_value(g.audit()).expect("serializes"),
        "index" => g.index_aggregate(now),
        "lineage" => json!(g.lineage_violations()),
        "waits" => serde_json::to_value(g.wait_checks(s(args, "node")?)?).expect("serializes"),
        "model" => g.begin_model_call(
            s(args, "node")?,
            args["recent"].as_u64().unwrap_or(8) as usize,
        )?,
        "mailbox" => g.read_mailbox(args["reader"].as_str(), s(args, "node")?)?,
        other => {
            return Err(ActorsError::InvalidArgument(format!(
                "unknown operation `{other}`"
            )));
        }
    })
}
