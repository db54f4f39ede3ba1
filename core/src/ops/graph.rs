//! Graph instances: hot replacement and disposal.

use std::collections::HashMap;

use super::types::*;
use super::{OpsError, OpsValue};
use crate::Mono;
use crate::jobs::Registry;

use super::app::*;

impl<V: OpsValue> App<V> {
    // ----- graph instances ----------------------------------------------------------------------

    /// Hot replacement: a new graph instance with new cell definitions. Calculations of the old
    /// instance end as `owner_disposed` (Worker jobs are cancelled); controls keep their values;
    /// waiting operations continue on the new instance when their cells still exist. Reruns
    /// staged by actions and not yet flushed are dropped: the new instance computes every cell.
    pub fn replace_graph(
        &mut self,
        now: Mono,
        reg: &mut Registry<V>,
        instance: u64,
        cells: Vec<CellSpec>,
    ) -> Result<(), OpsError> {
        if self.used_instances.contains(&instance) {
            return Err(OpsError::InvalidArgument(format!(
                "graph instance id {instance} was already used; calculation ids must stay unique"
            )));
        }
        let mut names: HashMap<String, Node> = self
            .names
            .iter()
            .filter(|(_, n)| matches!(n, Node::Control(_)))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        let (new_cells, order) = self.build_cells(reg, &self.controls, &mut names, &cells)?;
        for a in &self.actions {
            validate_action(a, &self.controls, &names)?;
        }
        self.begin(reg);
        self.bump();
        let old = self.instance;
        self.dispose_calcs(
            now,
            reg,
            &format!("graph instance {old} replaced by {instance}"),
        );
        // Staged reruns name cells of the old instance; the new one computes every cell anyway.
        self.staged_reruns.clear();
        self.used_instances.push(instance);
        self.instance = instance;
        self.next_generation = 1;
        self.names = names;
        self.install_cells(new_cells, order);
        self.ops_on_replace(now, reg, old, instance);
        self.schedule_all(now, reg, Trigger::Initial);
        self.settle(now, reg);
        Ok(())
    }

    /// Disposes the graph: every calculation ends as `owner_disposed`, the cells go away (the
    /// controls stay), operations waiting for cells fail.
    pub fn dispose_graph(&mut self, now: Mono, reg: &mut Registry<V>) {
        self.begin(reg);
        self.bump();
        let inst = self.instance;
        self.dispose_calcs(now, reg, &format!("graph instance {inst} disposed"));
        self.staged_reruns.clear();
        self.names.retain(|_, n| matches!(n, Node::Control(_)));
        self.install_cells(vec![], vec![]);
        self.ops_on_replace(now, reg, inst, inst);
        self.settle(now, reg);
    }

    pub(crate) fn dispose_calcs(&mut self, now: Mono, reg: &mut Registry<V>, reason: &str) {
        for x in 0..self.cells.len() {
            if let Some(c) = self.cells[x].current.take() {
                self.end_calc(
                    now,
                    reg,
                    c,
                    CalcEnd::Disposed,
                    CalcEventKind::OwnerDisposed {
                        reason: reason.into(),
                    },
                );
            }
        }
        self.pump_registry(now, reg);
    }

    /// Runs after every input: ops are evaluated against the new state.
    pub(crate) fn settle(&mut self, now: Mono, reg: &mut Registry<V>) {
        self.pump_registry(now, reg);
        self.evaluate_ops(now, reg);
        self.pump_registry(now, reg);
    }
}
