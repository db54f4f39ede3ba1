//! Graph disclosure (§8): bounded and full previews of the declared template. A preview is
//! descriptive only: it never creates a committable decision.

use std::collections::BTreeSet;

use super::types::{Completeness, DisclosureLevel, Graph, Preview};

/// The preview of `graph` seen from the `current` template nodes: for `horizon`, every node
/// within `horizon` edges; for `full`, the whole declared template. Edges are those whose ends
/// are both disclosed; nodes are listed in sorted order.
pub fn preview(graph: &Graph, current: &[&str], level: DisclosureLevel, horizon: u32) -> Preview {
    let mut included: BTreeSet<&str> = current.iter().copied().collect();
    match level {
        DisclosureLevel::Full => included.extend(graph.nodes.iter().map(|n| n.id.as_str())),
        _ => {
            for _ in 0..horizon {
                let next: Vec<&str> = graph
                    .edges
                    .iter()
                    .filter(|e| included.contains(e.from.as_str()))
                    .map(|e| e.to.as_str())
                    .collect();
                let before = included.len();
                included.extend(next);
                if included.len() == before {
                    break;
                }
            }
        }
    }
    let full = level == DisclosureLevel::Full;
    Preview {
        graph_id: graph.graph_id.clone(),
        graph_version: graph.graph_version.clone(),
        horizon: (!full).then_some(horizon as u64),
        completeness: if full {
            graph.completeness
        } else {
            Completeness::Partial
        },
        nodes: included.iter().map(|s| s.to_string()).collect(),
        edges: graph
            .edges
            .iter()
            .filter(|e| included.contains(e.from.as_str()) && included.contains(e.to.as_str()))
            .cloned()
            .collect(),
        omitted_reason: None,
        extensions: None,
    }
}
