//! Counters of a running connector, kept in memory (not persisted): records delivered by
//! its tasks, its `tick` calls (count, time, the connector instance's memory), and each
//! task's polls, deliveries, commits, failures and starts. What a benchmark, the progress
//! line and `GET /metrics` read.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One task's counters (Kafka Connect's source-task metrics, in Prometheus' terms).
#[derive(Debug, Default)]
pub struct TaskCounters {
    /// Records returned by `poll` (Connect's `source-record-poll-total`).
    pub polled: AtomicU64,
    pub polls: AtomicU64,
    pub poll_nanos: AtomicU64,
    /// Records written to the destination (`source-record-write-total`).
    pub delivered: AtomicU64,
    pub deliveries: AtomicU64,
    pub deliver_nanos: AtomicU64,
    /// Deliveries that committed offsets (`offset-commit-completion-total`).
    pub commits: AtomicU64,
    pub failures: AtomicU64,
    /// Instances started: the first, then each restart.
    pub starts: AtomicU64,
    /// An instance runs and its last poll returned records (or it has not polled yet):
    /// it may be part way through what it reads.
    pub busy: AtomicBool,
}

impl TaskCounters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn time(counter: &AtomicU64, took: Duration) {
        counter.fetch_add(took.as_nanos().min(u128::from(u64::MAX)) as u64, Ordering::Relaxed);
    }
}

#[derive(Debug, Default)]
pub struct ConnectorMetrics {
    tasks: Mutex<BTreeMap<u32, Arc<TaskCounters>>>,
    delivered: AtomicU64,
    ticks: AtomicU64,
    tick_nanos_total: AtomicU64,
    tick_nanos_max: AtomicU64,
    connector_memory: AtomicU64,
}

/// A copy of [`ConnectorMetrics`] at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsSnapshot {
    pub delivered: u64,
    pub ticks: u64,
    pub tick_total: Duration,
    pub tick_max: Duration,
    /// Largest linear memory of the connector instance, in bytes.
    pub connector_memory: u64,
}

impl ConnectorMetrics {
    pub fn add_delivered(&self, records: u64) {
        self.delivered.fetch_add(records, Ordering::Relaxed);
    }

    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    pub fn record_tick(&self, took: Duration, connector_memory: u64) {
        let nanos = took.as_nanos().min(u128::from(u64::MAX)) as u64;
        self.ticks.fetch_add(1, Ordering::Relaxed);
        self.tick_nanos_total.fetch_add(nanos, Ordering::Relaxed);
        self.tick_nanos_max.fetch_max(nanos, Ordering::Relaxed);
        self.connector_memory.store(connector_memory, Ordering::Relaxed);
    }

    /// The counters of task `id` (created on first use).
    pub fn task(&self, id: u32) -> Arc<TaskCounters> {
        self.tasks.lock().unwrap().entry(id).or_default().clone()
    }

    /// Whether any task may be part way through what it reads ([`TaskCounters::busy`]).
    pub fn any_task_busy(&self) -> bool {
        self.tasks.lock().unwrap().values().any(|task| task.busy.load(Ordering::Relaxed))
    }

    /// Every task's counters, by id.
    pub fn tasks(&self) -> Vec<(u32, Arc<TaskCounters>)> {
        self.tasks.lock().unwrap().iter().map(|(id, c)| (*id, c.clone())).collect()
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            delivered: self.delivered(),
            ticks: self.ticks.load(Ordering::Relaxed),
            tick_total: Duration::from_nanos(self.tick_nanos_total.load(Ordering::Relaxed)),
            tick_max: Duration::from_nanos(self.tick_nanos_max.load(Ordering::Relaxed)),
            connector_memory: self.connector_memory.load(Ordering::Relaxed),
        }
    }
}
