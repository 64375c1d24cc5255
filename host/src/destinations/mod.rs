//! Where records go. A destination delivers a batch and commits the offsets the batch
//! advances; when `deliver` returns, both are durable, so a partition's offset is never
//! committed ahead of its records.
//!
//! - `local`: the embedded log; records and offsets in one transaction (exactly-once).
//! - `stdout`: JSON lines ([`json`]); offsets commit after the lines are flushed
//!   (at-least-once).
//! - `kafka`: Kafka topics ([`kafka`]); offsets commit once every record is acknowledged
//!   (at-least-once).
//!
//! Uses the config and storage layers.

pub mod json;
pub mod kafka;

use std::io::Write;
use std::sync::Arc;

use crate::config::{ConnectorConfig, ConnectorSettings, DestinationKind, WorkerConfig};
use crate::storage::{Namespace, OffsetStore, RecordBatch, RecordLog, Stores};

pub trait Destination: Send + Sync {
    fn deliver(&self, ns: &Namespace, records: &RecordBatch, offsets: &[(String, String)]) -> anyhow::Result<()>;

    /// A destination of its own for one task instance (a transactional producer whose
    /// start fences the task's previous instance), or `None` to share this one.
    fn for_task(&self, _ns: &Namespace, _task: u32) -> anyhow::Result<Option<Arc<dyn Destination>>> {
        Ok(None)
    }

    /// Makes everything delivered so far durable with its offsets (an open transaction
    /// commits); called before the task's `commit()` and when it stops or pauses.
    fn flush(&self, _ns: &Namespace) -> anyhow::Result<()> {
        Ok(())
    }

    /// Whether a task first checks each polled batch as part of its delivery, on a thread
    /// of its own beside the plugin's next poll, rather than on the task's thread after the
    /// poll. A task runs its plugin's poll and the delivery of the batch before it at once,
    /// so the checks belong with whichever of the two is shorter; once a task has timed
    /// both, it places them by those times (`task_runner::CheckPlacement`), and this is
    /// only where they start: with the delivery for `stdout` (writing JSON lines is
    /// quick), with the poll for the others.
    fn checks_beside_delivery(&self) -> bool {
        false
    }

    /// Tasks `tasks` no longer exist: fence any instance of them still writing elsewhere.
    fn retire_tasks(&self, _ns: &Namespace, _tasks: std::ops::Range<u32>) -> anyhow::Result<()> {
        Ok(())
    }
}

pub struct Local {
    log: Arc<dyn RecordLog>,
}

impl Destination for Local {
    fn deliver(&self, ns: &Namespace, records: &RecordBatch, offsets: &[(String, String)]) -> anyhow::Result<()> {
        self.log.append_with_offsets(ns, records, offsets)
    }
}

pub struct Stdout {
    offsets: Arc<dyn OffsetStore>,
}

impl Destination for Stdout {
    fn checks_beside_delivery(&self) -> bool {
        true
    }

    fn deliver(&self, ns: &Namespace, records: &RecordBatch, offsets: &[(String, String)]) -> anyhow::Result<()> {
        {
            let mut out = std::io::stdout().lock();
            let mut out = std::io::BufWriter::with_capacity(256 << 10, &mut out);
            for record in records.iter() {
                json::write_record_json(&mut out, &record)?;
            }
            out.flush()?;
        }
        self.offsets.commit_offsets(ns, offsets)
    }
}

/// A delivery that failed for a reason that passes (the broker is away, a leader is
/// moving): the task keeps its batch and tries again after a backoff, saying so in its
/// status, instead of failing.
#[derive(Debug)]
pub struct RetriableDelivery(pub String);

impl std::fmt::Display for RetriableDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RetriableDelivery {}

impl RetriableDelivery {
    pub fn wrap(message: String) -> anyhow::Error {
        anyhow::Error::new(RetriableDelivery(message))
    }

    pub fn is(error: &anyhow::Error) -> bool {
        error.chain().any(|e| e.is::<RetriableDelivery>())
    }
}

/// The destination of a connector, committing into the worker's stores.
pub fn for_connector(
    settings: &ConnectorSettings,
    config: &ConnectorConfig,
    worker: &WorkerConfig,
    stores: &Stores,
) -> anyhow::Result<Arc<dyn Destination>> {
    Ok(match settings.destination {
        DestinationKind::Local => Arc::new(Local { log: stores.local().clone() }),
        DestinationKind::Stdout => Arc::new(Stdout { offsets: stores.offsets().clone() }),
        DestinationKind::Kafka => {
            let kafka = worker
                .kafka
                .as_ref()
                .ok_or_else(|| anyhow::anyhow!("destination=kafka needs [kafka] in sluice.toml"))?;
            let exactly_once = match (settings.kafka.exactly_once, stores.kafka()) {
                (false, _) => None,
                (true, Some(backend)) => Some(backend.clone()),
                (true, None) => anyhow::bail!("exactly.once.support=required needs [storage] kind = \"kafka\""),
            };
            Arc::new(kafka::KafkaDestination::new(
                kafka,
                config.tenant(),
                &settings.kafka,
                &config.producer_overrides(),
                stores.offsets().clone(),
                exactly_once,
            )?)
        }
    })
}
