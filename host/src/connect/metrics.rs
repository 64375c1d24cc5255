//! Counters of a running connector, kept in memory (not persisted): records delivered by
//! its tasks, and its `tick` calls (count, time, the connector instance's memory). What a
//! benchmark, the progress line and a metrics endpoint read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Debug, Default)]
pub struct ConnectorMetrics {
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
