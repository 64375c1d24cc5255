//! Where records go. A destination delivers a batch and commits the offsets the batch
//! advances; when `deliver` returns, both are durable, so a partition's offset is never
//! committed ahead of its records.
//!
//! - `local`: the embedded log; records and offsets in one transaction (exactly-once).
//! - `stdout`: JSON lines ([`json`]); offsets commit after the lines are flushed
//!   (at-least-once).
//! - `kafka`: Kafka topics ([`kafka`]); offsets commit once every record is acknowledged
//!   (at-least-once), or with the records in one transaction on a worker with exactly-once
//!   source support.
//!
//! Uses the config and storage layers.

pub mod json;
pub mod kafka;

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::config::{ConnectorConfig, ConnectorSettings, DestinationKind, WorkerConfig};
use crate::storage::{Namespace, OffsetStore, RecordBatch, RecordLog, Stores};

pub trait Destination: Send + Sync {
    /// Writes `records` and commits `offsets`, the commit through `gate`: a task instance
    /// that gave up on the batch (its stop deadline passed) must not have it committed
    /// after its next instance has read the offsets, or the batch is sent twice.
    fn deliver(
        &self,
        ns: &Namespace,
        records: &RecordBatch,
        offsets: &[(String, String)],
        gate: &CommitGate,
    ) -> anyhow::Result<Skipped>;

    /// Commits `offsets` of a batch this destination already wrote, whose commit failed
    /// ([`RetriableDelivery::written`]): trying again commits, and writes nothing twice.
    fn commit_written(&self, _ns: &Namespace, _offsets: &[(String, String)], _gate: &CommitGate) -> anyhow::Result<()> {
        anyhow::bail!("this destination writes a batch and its offsets together")
    }

    /// A destination of its own for one task instance (a transactional producer whose
    /// start fences the task's previous instance), or `None` to share this one.
    fn for_task(&self, _ns: &Namespace, _task: u32) -> anyhow::Result<Option<Arc<dyn Destination>>> {
        Ok(None)
    }

    /// Whether a batch an earlier instance of the task gave up on may still be written, so
    /// that [`Destination::for_task`] waits for it before the task starts again.
    fn settling_given_up_batch(&self, _ns: &Namespace, _task: u32) -> bool {
        false
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

    /// Why a batch may be waiting, as far as the destination knows (a Kafka client's
    /// latest error: a broker refusing connections, a name that does not resolve), said in
    /// the task's status beside how long it has waited.
    fn waiting_reason(&self) -> Option<String> {
        None
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
    fn deliver(
        &self,
        ns: &Namespace,
        records: &RecordBatch,
        offsets: &[(String, String)],
        gate: &CommitGate,
    ) -> anyhow::Result<Skipped> {
        self.log.append_with_offsets(ns, records, offsets, gate)?;
        Ok(Skipped::default())
    }
}

pub struct Stdout {
    offsets: Arc<dyn OffsetStore>,
}

impl Destination for Stdout {
    fn checks_beside_delivery(&self) -> bool {
        true
    }

    fn deliver(
        &self,
        ns: &Namespace,
        records: &RecordBatch,
        offsets: &[(String, String)],
        gate: &CommitGate,
    ) -> anyhow::Result<Skipped> {
        {
            let mut out = std::io::stdout().lock();
            let mut out = std::io::BufWriter::with_capacity(256 << 10, &mut out);
            for record in records.iter() {
                json::write_record_json(&mut out, &record)?;
            }
            out.flush()?;
        }
        self.commit_written(ns, offsets, gate)?;
        Ok(Skipped::default())
    }

    fn commit_written(&self, ns: &Namespace, offsets: &[(String, String)], gate: &CommitGate) -> anyhow::Result<()> {
        commit_written_offsets(&*self.offsets, ns, offsets, gate)
    }
}

/// Commits the offsets of a batch already written, through `gate`: a failure (a full
/// disk) is [`RetriableDelivery::written`], so the commit alone is tried again, and the
/// records are not written twice.
pub(crate) fn commit_written_offsets(
    store: &dyn OffsetStore,
    ns: &Namespace,
    offsets: &[(String, String)],
    gate: &CommitGate,
) -> anyhow::Result<()> {
    gate.commit(|| store.commit_offsets(ns, offsets))?.map_err(|e| {
        RetriableDelivery::written(format!("the batch was written but its offsets were not committed: {e:#}"))
    })
}

/// Records a destination refused for good and left out under `errors.tolerance=all`
/// (Kafka refusing a record too large, as Connect does since KIP-779), each with why.
#[derive(Debug, Default)]
pub struct Skipped(pub Vec<String>);

/// Whether a delivery may still commit. A task instance that gives up on a batch at its
/// stop deadline shuts its gate: the write still running then (a busy or slow disk) is
/// refused its commit and rolls back, and one already committing is waited for, so the
/// task's next instance reads offsets no late commit moves under it. Without this a batch
/// given up on and then committed is polled again by the next instance: sent twice.
#[derive(Debug, Default)]
pub struct CommitGate(AtomicU8);

const GATE_OPEN: u8 = 0;
const GATE_COMMITTING: u8 = 1;
const GATE_SHUT: u8 = 2;

impl CommitGate {
    /// Runs `commit` unless the gate is shut (then [`DeliveryAbandoned`]); a shut that
    /// comes meanwhile waits for it to finish.
    pub fn commit<R>(&self, commit: impl FnOnce() -> R) -> Result<R, DeliveryAbandoned> {
        if self.0.compare_exchange(GATE_OPEN, GATE_COMMITTING, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return Err(DeliveryAbandoned);
        }
        struct Reopen<'a>(&'a AtomicU8);
        impl Drop for Reopen<'_> {
            fn drop(&mut self) {
                self.0.store(GATE_OPEN, Ordering::Release);
            }
        }
        let _reopen = Reopen(&self.0);
        Ok(commit())
    }

    /// Refuses every commit from now on, and returns once none is under way (a commit is
    /// one transaction's end: short).
    pub async fn shut(&self) {
        while !self.shut_unless_committing() {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }

    /// Whether the task gave its batch up (a delivery still waiting can stop waiting).
    pub fn is_shut(&self) -> bool {
        self.0.load(Ordering::Acquire) == GATE_SHUT
    }

    /// Shuts the gate unless a commit is under way (then false: it goes through).
    pub fn shut_unless_committing(&self) -> bool {
        match self.0.compare_exchange(GATE_OPEN, GATE_SHUT, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(state) => state == GATE_SHUT,
        }
    }
}

/// A delivery's commit refused: its task instance had given up on the batch.
#[derive(Debug, thiserror::Error)]
#[error("the batch was given up on at the task's stop deadline: not committed, it is sent again after a restart")]
pub struct DeliveryAbandoned;

/// A delivery that failed for a reason that passes (the broker is away, a leader is
/// moving, the disk holding the offsets is full): the task keeps its batch and tries again
/// after a backoff, saying so in its status, instead of failing.
#[derive(Debug)]
pub struct RetriableDelivery {
    message: String,
    /// The records were written (Kafka acknowledged them) and only their offsets' commit
    /// failed: the next try commits ([`Destination::commit_written`]) and sends nothing
    /// again (a resend put a batch in Kafka once per try while a disk was full).
    written: bool,
}

impl std::fmt::Display for RetriableDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RetriableDelivery {}

impl RetriableDelivery {
    pub fn wrap(message: String) -> anyhow::Error {
        anyhow::Error::new(RetriableDelivery { message, written: false })
    }

    /// The batch was written; only its offsets' commit is to be tried again.
    pub fn written(message: String) -> anyhow::Error {
        anyhow::Error::new(RetriableDelivery { message, written: true })
    }

    pub fn is(error: &anyhow::Error) -> bool {
        error.chain().any(|e| e.is::<RetriableDelivery>())
    }

    /// Whether `error` says the batch was written and only its commit is to be retried.
    pub fn is_written(error: &anyhow::Error) -> bool {
        error.chain().any(|e| e.downcast_ref::<RetriableDelivery>().is_some_and(|r| r.written))
    }
}

/// Whether a `destination=kafka` connector writes in transactions: as in Connect, every one
/// on a worker with exactly-once source support (and Kafka storage); `required` only
/// refuses a worker without it (admission).
pub fn in_transactions(settings: &ConnectorSettings, worker: &WorkerConfig) -> bool {
    let worker_enables = worker.kafka.as_ref().is_some_and(|kafka| kafka.exactly_once_source)
        && worker.storage.kind == crate::config::StorageKind::Kafka;
    settings.kafka.exactly_once || worker_enables
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
            let exactly_once = match (in_transactions(settings, worker), stores.kafka()) {
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
                settings.errors.tolerate_all,
            )?)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_gate_commits_and_a_shut_one_refuses() {
        let gate = CommitGate::default();
        assert_eq!(gate.commit(|| 7).unwrap(), 7);
        assert!(gate.shut_unless_committing());
        let mut ran = false;
        assert!(gate.commit(|| ran = true).is_err());
        assert!(!ran, "a shut gate runs no commit");
        assert!(gate.shut_unless_committing(), "shutting again is fine");
    }

    /// A commit under way when the task gives up goes through, and shutting waits for it:
    /// the task's next instance must find it committed, not committing.
    #[tokio::test]
    async fn shutting_waits_for_a_commit_under_way() {
        let gate = Arc::new(CommitGate::default());
        let (entered, entered_rx) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel::<()>();
        let committing = std::thread::spawn({
            let gate = gate.clone();
            move || {
                gate.commit(|| {
                    entered.send(()).unwrap();
                    release_rx.recv().unwrap();
                })
            }
        });
        entered_rx.recv().unwrap();
        assert!(!gate.shut_unless_committing(), "a commit under way is not cut off");
        let shut = tokio::spawn({
            let gate = gate.clone();
            async move { gate.shut().await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!shut.is_finished(), "shut returned while a commit was under way");
        release.send(()).unwrap();
        assert!(committing.join().unwrap().is_ok(), "the commit under way went through");
        shut.await.unwrap();
        assert!(gate.commit(|| ()).is_err(), "nothing commits after the shut");
    }
}
