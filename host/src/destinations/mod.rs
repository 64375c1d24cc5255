//! Where records go. A destination delivers a batch and commits the offsets the batch
//! advances; when `deliver` returns, both are durable, so a partition's offset is never
//! committed ahead of its records.
//!
//! - `local`: the embedded log; records and offsets in one transaction (exactly-once).
//! - `stdout`: JSON lines ([`json`]); offsets commit after the lines are flushed
//!   (at-least-once).
//!
//! Uses the config and storage layers.

pub mod json;

use std::io::Write;
use std::sync::Arc;

use crate::config::DestinationKind;
use crate::storage::{Namespace, OffsetStore, Record, RecordLog, Stores};

pub trait Destination: Send + Sync {
    fn deliver(&self, ns: &Namespace, records: &[Record], offsets: &[(String, String)]) -> anyhow::Result<()>;
}

pub struct Local {
    log: Arc<dyn RecordLog>,
}

impl Destination for Local {
    fn deliver(&self, ns: &Namespace, records: &[Record], offsets: &[(String, String)]) -> anyhow::Result<()> {
        self.log.append_with_offsets(ns, records, offsets)
    }
}

pub struct Stdout {
    offsets: Arc<dyn OffsetStore>,
}

impl Destination for Stdout {
    fn deliver(&self, ns: &Namespace, records: &[Record], offsets: &[(String, String)]) -> anyhow::Result<()> {
        {
            let mut out = std::io::stdout().lock();
            let mut out = std::io::BufWriter::with_capacity(256 << 10, &mut out);
            for record in records {
                json::write_record_json(&mut out, record)?;
            }
            out.flush()?;
        }
        self.offsets.commit_offsets(ns, offsets)
    }
}

/// The destination of a connector, committing into the worker's stores.
pub fn for_kind(kind: DestinationKind, stores: &Stores) -> Arc<dyn Destination> {
    match kind {
        DestinationKind::Local => Arc::new(Local { log: stores.local().clone() }),
        DestinationKind::Stdout => Arc::new(Stdout { offsets: stores.offsets().clone() }),
    }
}
