//! Where records go. A destination delivers a batch and commits the offsets the batch
//! advances; when `deliver` returns, both are durable, so a partition's offset is never
//! committed ahead of its records.
//!
//! - `local`: the embedded log; records and offsets in one transaction (exactly-once).
//! - `stdout`: JSON lines; offsets commit after the lines are flushed (at-least-once).

use std::io::Write;
use std::sync::Arc;

use crate::config::DestinationKind;
use crate::records::{Record, write_record_json};
use crate::store::{Namespace, OffsetStore, RecordLog};

pub trait Destination: Send + Sync {
    fn deliver(&self, ns: &Namespace, records: &[Record], offsets: &[(String, String)]) -> anyhow::Result<()>;
}

pub struct Local {
    pub log: Arc<dyn RecordLog>,
}

impl Destination for Local {
    fn deliver(&self, ns: &Namespace, records: &[Record], offsets: &[(String, String)]) -> anyhow::Result<()> {
        self.log.append_with_offsets(ns, records, offsets)
    }
}

pub struct Stdout {
    pub offsets: Arc<dyn OffsetStore>,
}

impl Destination for Stdout {
    fn deliver(&self, ns: &Namespace, records: &[Record], offsets: &[(String, String)]) -> anyhow::Result<()> {
        {
            let mut out = std::io::stdout().lock();
            let mut out = std::io::BufWriter::with_capacity(256 << 10, &mut out);
            for record in records {
                write_record_json(&mut out, record)?;
            }
            out.flush()?;
        }
        self.offsets.commit_offsets(ns, offsets)
    }
}

pub fn for_kind(kind: DestinationKind, log: Arc<dyn RecordLog>, offsets: Arc<dyn OffsetStore>) -> Arc<dyn Destination> {
    match kind {
        DestinationKind::Local => Arc::new(Local { log }),
        DestinationKind::Stdout => Arc::new(Stdout { offsets }),
    }
}
