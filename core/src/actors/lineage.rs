//! Lineage invariants: what must hold after any sequence of operations, and after recovery.

use std::collections::BTreeSet;

use serde_json::Value;

use super::model::{ChatLine, NodeType};
use super::{ActorGraph, Entry, NodeId};

impl ActorGraph {
    /// Every violation of the lineage invariants (empty when the graph is consistent):
    ///
    /// * the root exists and has no parent; every other node has a parent that exists and
    ///   lists it exactly once in `spawned[]`; every listed child exists and names that
    ///   parent; every node is reachable from the root;
    /// * `graph.json` agrees with the node records on ids, types and parents;
    /// * every spawn edge has exactly one routing marker in the parent's chat and exactly one
    ///   metathread spawn record whose `parentLine` is that marker;
    /// * every metathread ref points at an existing, readable line;
    /// * a paused node is paused by a pending disambiguation child of its own.
    ///
    /// Unreadable (broken) nodes are reported by open; links to them are not counted here.
    pub fn lineage_violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        let root = self.nodes.get(&self.root);
        match root {
            None if !self.broken.contains_key(self.root.as_str()) => {
                v.push(format!("root `{}` does not exist", self.root))
            }
            Some(r) if r.meta.spawned_by.is_some() => {
                v.push(format!("root `{}` has a parent", self.root))
            }
            _ => {}
        }
        let spawn_records: Vec<(&str, &str, u64)> = self
            .meta
            .iter()
            .filter_map(Entry::ok)
            .filter(|m| m.get("kind").and_then(Value::as_str) == Some("spawn"))
            .map(|m| {
                (
                    m.get("parent").and_then(Value::as_str).unwrap_or(""),
                    m.get("child").and_then(Value::as_str).unwrap_or(""),
                    m.get("parentLine").and_then(Value::as_u64).unwrap_or(0),
                )
            })
            .collect();
        for (id, st) in &self.nodes {
            let m = &st.meta;
            if *id != self.root {
                match &m.spawned_by {
                    None => v.push(format!("`{id}` has no parent")),
                    Some(p) if self.broken.contains_key(p.as_str()) => {}
                    Some(p) => match self.nodes.get(p) {
                        None => v.push(format!("`{id}`'s parent `{p}` does not exist")),
                        Some(ps) => {
                            let n = ps.meta.spawned.iter().filter(|c| *c == id).count();
                            if n != 1 {
                                v.push(format!("`{p}`.spawned lists `{id}` {n} times"));
                            }
                            let markers: Vec<usize> = ps
                                .chat
                                .iter()
                                .enumerate()
                                .filter(|(_, e)| {
                                    e.ok().and_then(ChatLine::spawned_child).as_ref() == Some(id)
                                })
                                .map(|(i, _)| i + 1)
                                .collect();
                            if markers.len() != 1 {
                                v.push(format!(
                                    "`{p}` has {} routing markers for `{id}`",
                                    markers.len()
                                ));
                            }
                            let recs: Vec<&(&str, &str, u64)> = spawn_records
                                .iter()
                                .filter(|r| r.1 == id.as_str())
                                .collect();
                            if recs.len() != 1 {
                                v.push(format!(
                                    "the metathread has {} spawn records for `{id}`",
                                    recs.len()
                                ));
                            } else if recs[0].0 != p.as_str()
                                || Some(recs[0].2 as usize) != markers.first().copied()
                            {
                                v.push(format!(
                                    "the spawn record of `{id}` says parent `{}` line {}, the marker is at {:?}",
                                    recs[0].0,
                                    recs[0].2,
                                    markers.first()
                                ));
                            }
                        }
                    },
                }
            }
            for c in &m.spawned {
                match self.nodes.get(c) {
                    None if self.broken.contains_key(c.as_str()) => {}
                    None => v.push(format!("`{id}`.spawned lists `{c}`, which does not exist")),
                    Some(cs) if cs.meta.spawned_by.as_ref() != Some(id) => v.push(format!(
                        "`{id}`.spawned lists `{c}`, whose parent is {:?}",
                        cs.meta.spawned_by
                    )),
                    _ => {}
                }
            }
            if let Some(by) = &m.routing_paused_by {
                let ok = self.nodes.get(by).is_some_and(|d| {
                    d.meta.node_type == NodeType::Disambiguation
                        && d.meta.spawned_by.as_ref() == Some(id)
                        && d.meta.resolved_into.is_none()
                });
                if !ok {
                    v.push(format!(
                        "`{id}` is paused by `{by}`, which is not its pending disambiguation"
                    ));
                }
            }
        }
        if root.is_some() {
            let reach = self.subtree(&self.root);
            for id in self.nodes.keys() {
                if !reach.contains(id) {
                    v.push(format!("`{id}` is not reachable from the root"));
                }
            }
        }
        let g = self.graph_index();
        let known: BTreeSet<&str> = self
            .nodes
            .keys()
            .map(NodeId::as_str)
            .chain(self.broken.keys().map(String::as_str))
            .collect();
        for (id, e) in &self.index {
            if !known.contains(id.as_str()) {
                v.push(format!("graph.json lists `{id}`, which has no record"));
            } else if let Some(d) = g.nodes.get(id)
                && (d.node_type != e.node_type || d.spawned_by != e.spawned_by)
            {
                v.push(format!("graph.json disagrees with `{id}`'s record"));
            }
        }
        for id in self.nodes.keys() {
            if !self.index.contains_key(id.as_str()) {
                v.push(format!("graph.json does not list `{id}`"));
            }
        }
        for (i, m) in self.meta.iter().filter_map(Entry::ok).enumerate() {
            if m.get("kind").and_then(Value::as_str) != Some("ref") {
                continue;
            }
            let node = m.get("node").and_then(Value::as_str).unwrap_or("");
            let line = m.get("line").and_then(Value::as_u64).unwrap_or(0);
            let ok = NodeId::parse(node)
                .ok()
                .and_then(|n| self.nodes.get(&n))
                .and_then(|st| st.chat.get((line as usize).wrapping_sub(1)))
                .is_some_and(|e| e.ok().is_some());
            if !ok {
                v.push(format!(
                    "metathread ref #{i} points at `{node}` line {line}, which does not exist"
                ));
            }
        }
        v
    }
}
