//! The status board: every connector's and task's current status in this process (Kafka
//! Connect's states and status JSON, [`crate::storage::ConnectorStatus`]); it logs each
//! change and persists it through the [`StatusStore`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::storage::{ConnectorState, ConnectorStatus, Namespace, State, StatusStore, TaskStatus};

/// Every connector's status in this process.
pub struct StatusBoard {
    worker_id: String,
    statuses: Mutex<BTreeMap<Namespace, ConnectorStatus>>,
    store: Arc<dyn StatusStore>,
}

impl StatusBoard {
    pub fn new(worker_id: String, store: Arc<dyn StatusStore>) -> Self {
        StatusBoard { worker_id, statuses: Mutex::new(BTreeMap::new()), store }
    }

    /// This worker's id, as statuses show it (`host:pid`).
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    pub fn get(&self, ns: &Namespace) -> Option<ConnectorStatus> {
        self.statuses.lock().unwrap().get(ns).cloned()
    }

    /// Every connector's status, with its namespace.
    pub fn all(&self) -> Vec<(Namespace, ConnectorStatus)> {
        self.statuses.lock().unwrap().iter().map(|(ns, s)| (ns.clone(), s.clone())).collect()
    }

    fn update(&self, ns: &Namespace, change: impl FnOnce(&mut ConnectorStatus)) {
        let snapshot = {
            let mut statuses = self.statuses.lock().unwrap();
            let status = statuses.entry(ns.clone()).or_insert_with(|| ConnectorStatus {
                name: ns.connector.clone(),
                connector: ConnectorState {
                    state: State::Unassigned,
                    worker_id: self.worker_id.clone(),
                    trace: None,
                    version: None,
                },
                tasks: Vec::new(),
                kind: "source".into(),
            });
            change(status);
            status.clone()
        };
        if let Err(e) = self.store.put_status(ns, &snapshot) {
            tracing::warn!(tenant = %ns.tenant, connector = %ns.connector, "cannot persist status: {e:#}");
        }
    }

    pub fn set_connector(&self, ns: &Namespace, state: State, trace: Option<String>) {
        let (tenant, connector) = (&ns.tenant, &ns.connector);
        // A trace on a RUNNING connector or task is a passing condition (a delivery that
        // waits on the destination): a warning; only FAILED is an error.
        match &trace {
            Some(trace) if state == State::Failed => {
                tracing::error!(%tenant, %connector, "connector is {state}: {trace}")
            }
            Some(trace) => tracing::warn!(%tenant, %connector, "connector is {state}: {trace}"),
            None => tracing::info!(%tenant, %connector, "connector is {state}"),
        }
        self.update(ns, |s| {
            s.connector.state = state;
            s.connector.trace = trace;
        });
    }

    pub fn set_task(&self, ns: &Namespace, task: u32, state: State, trace: Option<String>, instance: u64) {
        let (tenant, connector) = (&ns.tenant, &ns.connector);
        match &trace {
            Some(trace) if state == State::Failed => {
                tracing::error!(%tenant, %connector, task, instance, "task is {state}: {trace}")
            }
            Some(trace) => tracing::warn!(%tenant, %connector, task, instance, "task is {state}: {trace}"),
            None => tracing::info!(%tenant, %connector, task, instance, "task is {state}"),
        }
        let worker_id = self.worker_id.clone();
        self.update(ns, |s| {
            let refused = s.tasks.iter().find(|t| t.id == task).map_or(0, |t| t.records_refused);
            let status = TaskStatus {
                id: task,
                state,
                worker_id,
                trace,
                instance,
                fuel_used: None,
                records_refused: refused,
                version: s.connector.version.clone(),
                memory_bytes: 0,
            };
            match s.tasks.iter_mut().find(|t| t.id == task) {
                Some(existing) => *existing = status,
                None => {
                    s.tasks.push(status);
                    s.tasks.sort_by_key(|t| t.id);
                }
            }
        });
    }

    /// Records the fuel and memory a task's instance has used (no log line: they change
    /// all the time).
    /// Records a task's fuel and memory (the task runner reports them only when they
    /// changed, so idle tasks write nothing).
    pub fn set_task_usage(&self, ns: &Namespace, task: u32, fuel_used: Option<u64>, memory_bytes: u64) {
        self.update(ns, |s| {
            if let Some(t) = s.tasks.iter_mut().find(|t| t.id == task) {
                t.fuel_used = fuel_used;
                t.memory_bytes = memory_bytes;
            }
        });
    }

    /// The plugin version a connector (and the tasks it starts from now on) runs.
    pub fn set_version(&self, ns: &Namespace, version: &str) {
        self.update(ns, |s| s.connector.version = Some(version.to_string()));
    }

    /// Forgets a deleted connector.
    pub fn remove(&self, ns: &Namespace) {
        self.statuses.lock().unwrap().remove(ns);
    }

    /// Counts records refused under `errors.tolerance=all` (no log line: they are logged
    /// with `errors.log.enable`).
    pub fn add_refused(&self, ns: &Namespace, task: u32, refused: u64) {
        self.update(ns, |s| {
            if let Some(t) = s.tasks.iter_mut().find(|t| t.id == task) {
                t.records_refused += refused;
            }
        });
    }

    /// Drops tasks that no longer exist after a reconfiguration.
    pub fn retain_tasks(&self, ns: &Namespace, count: u32) {
        self.update(ns, |s| s.tasks.retain(|t| t.id < count));
    }
}
