//! The decision a reconfiguration makes, as a pure function: after `task-configs`, which
//! running tasks stop and which start. A task whose config is unchanged keeps running
//! (Kafka Connect's `AbstractHerder` compares task configs the same way); a changed one
//! is stopped (its offsets committed) and started again; a task beyond the new count
//! stops; a new one starts.

use crate::runtime::Pairs;

/// Which tasks (by index = task id) a reconfiguration stops and starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Running tasks whose config changed or that no longer exist.
    pub stop: Vec<usize>,
    /// Tasks whose config is new or changed.
    pub start: Vec<usize>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.stop.is_empty() && self.start.is_empty()
    }
}

/// Compares the configs of the running tasks with the ones the connector now wants.
pub fn plan(running: &[&Pairs], wanted: &[Pairs]) -> Plan {
    let differs = |i: usize| running.get(i).copied() != wanted.get(i);
    Plan {
        stop: (0..running.len()).filter(|&i| differs(i)).collect(),
        start: (0..wanted.len()).filter(|&i| differs(i)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(file: &str) -> Pairs {
        vec![("topic".into(), "t".into()), ("files".into(), file.into())]
    }

    fn plan_of(running: &[Pairs], wanted: &[Pairs]) -> Plan {
        plan(&running.iter().collect::<Vec<_>>(), wanted)
    }

    #[test]
    fn unchanged_configs_restart_nothing() {
        let tasks = [config("a"), config("b")];
        let plan = plan_of(&tasks, &tasks);
        assert!(plan.is_empty(), "{plan:?}");
    }

    #[test]
    fn a_changed_config_restarts_only_that_task() {
        let plan = plan_of(&[config("a"), config("b"), config("c")], &[config("a"), config("b2"), config("c")]);
        assert_eq!(plan, Plan { stop: vec![1], start: vec![1] });
    }

    #[test]
    fn removed_tasks_stop_and_the_rest_keep_running() {
        let plan = plan_of(&[config("a"), config("b"), config("c")], &[config("a")]);
        assert_eq!(plan, Plan { stop: vec![1, 2], start: vec![] });
        let plan = plan_of(&[config("a")], &[]);
        assert_eq!(plan, Plan { stop: vec![0], start: vec![] });
    }

    #[test]
    fn added_tasks_start_and_the_rest_keep_running() {
        let plan = plan_of(&[config("a")], &[config("a"), config("b"), config("c")]);
        assert_eq!(plan, Plan { stop: vec![], start: vec![1, 2] });
        let plan = plan_of(&[], &[config("a")]);
        assert_eq!(plan, Plan { stop: vec![], start: vec![0] });
    }

    #[test]
    fn changed_removed_and_added_at_once() {
        let plan = plan_of(&[config("a"), config("b")], &[config("x"), config("b"), config("c")]);
        assert_eq!(plan, Plan { stop: vec![0], start: vec![0, 2] });
    }
}
