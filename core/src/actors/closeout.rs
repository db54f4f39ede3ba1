//! Git close-out policy: parallel task leaves must not each inherit a standing end-of-run push.
//! The policy is chosen at spawn, recorded on the node (`gitCloseout`), and a system addendum
//! is written as the node's first chat line so copied always-on push rules cannot silently win.

use super::config::CloseoutDefault;
use super::model::{GitCloseout, NodeType};

/// Two or more concurrent non-terminal tasks make a high-volatility wave.
pub const HIGH_VOLATILITY_TASKS: usize = 2;

/// Whether `non_terminal_tasks` concurrent tasks form a high-volatility wave.
pub fn is_high_volatility(non_terminal_tasks: usize) -> bool {
    non_terminal_tasks >= HIGH_VOLATILITY_TASKS
}

/// The close-out a new node gets when none is given explicitly. `non_terminal_tasks` counts
/// the non-terminal task nodes including the new one.
///
/// * `coordinator-batch` (the graph-grid default): the coordinator owns the wave-end push
///   (`per-node`), task leaves commit only (`coordinator-batch`), discussion-like nodes
///   `commit-only`.
/// * `per-node` (serialized / single agent): every node pushes on its own close-out — except in
///   a high-volatility wave, where task leaves fall back to `coordinator-batch` and
///   discussion-like nodes to `commit-only`.
/// * `off`: no automatic close-out.
pub fn default_closeout(
    policy: CloseoutDefault,
    node_type: &NodeType,
    non_terminal_tasks: usize,
) -> GitCloseout {
    let wave = is_high_volatility(non_terminal_tasks);
    match (policy, node_type) {
        (CloseoutDefault::Off, _) => GitCloseout::Off,
        (_, NodeType::Coordinator) => GitCloseout::PerNode,
        (CloseoutDefault::CoordinatorBatch, NodeType::Task) => GitCloseout::CoordinatorBatch,
        (CloseoutDefault::CoordinatorBatch, _) => GitCloseout::CommitOnly,
        (CloseoutDefault::PerNode, NodeType::Task) if wave => GitCloseout::CoordinatorBatch,
        (CloseoutDefault::PerNode, _) if wave => GitCloseout::CommitOnly,
        (CloseoutDefault::PerNode, _) => GitCloseout::PerNode,
    }
}

/// Whether the node may push automatically at the end of its run.
pub fn allows_automatic_push(c: &GitCloseout) -> bool {
    *c == GitCloseout::PerNode
}

/// The system addendum written into a node's chat at spawn (and when a wave changes its
/// policy). It states the policy in words a model follows over inherited push instructions.
pub fn system_addendum(c: &GitCloseout) -> String {
    match c {
        GitCloseout::CoordinatorBatch => {
            "GIT_CLOSEOUT=coordinator-batch — commit your work locally and do not push. \
             The coordinator pushes once after the parallel wave finishes; push only if this node \
             cannot be validated without the remote right now. This overrides any inherited \
             instruction to push at the end of a run."
                .to_owned()
        }
        GitCloseout::CommitOnly => {
            "GIT_CLOSEOUT=commit-only — commit locally if you change files and do not push; \
             the parent or coordinator pushes after the wave. This overrides any inherited \
             instruction to push at the end of a run."
                .to_owned()
        }
        GitCloseout::PerNode => {
            "GIT_CLOSEOUT=per-node — at this node's close-out, commit and push its own work."
                .to_owned()
        }
        GitCloseout::Off => {
            "GIT_CLOSEOUT=off — no automatic git close-out for this node.".to_owned()
        }
        GitCloseout::Other(v) => format!(
            "GIT_CLOSEOUT={v} — an unrecognised policy: commit locally and do not push automatically."
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_of_a_wave_never_default_to_pushing() {
        use CloseoutDefault as D;
        assert_eq!(
            default_closeout(D::CoordinatorBatch, &NodeType::Task, 1),
            GitCloseout::CoordinatorBatch
        );
        assert_eq!(
            default_closeout(D::CoordinatorBatch, &NodeType::Discussion, 0),
            GitCloseout::CommitOnly
        );
        assert_eq!(
            default_closeout(D::CoordinatorBatch, &NodeType::Coordinator, 5),
            GitCloseout::PerNode
        );
        assert_eq!(
            default_closeout(D::PerNode, &NodeType::Task, 1),
            GitCloseout::PerNode
        );
        assert_eq!(
            default_closeout(D::PerNode, &NodeType::Task, 2),
            GitCloseout::CoordinatorBatch
        );
        assert_eq!(
            default_closeout(D::PerNode, &NodeType::Discussion, 3),
            GitCloseout::CommitOnly
        );
        assert_eq!(
            default_closeout(D::Off, &NodeType::Task, 3),
            GitCloseout::Off
        );
        assert!(allows_automatic_push(&GitCloseout::PerNode));
        assert!(!allows_automatic_push(&GitCloseout::CoordinatorBatch));
        assert!(system_addendum(&GitCloseout::CoordinatorBatch).contains("do not push"));
    }
}
