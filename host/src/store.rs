//! The storage seams: offsets, configs, statuses and the local record log. The embedded
//! SQLite versions live in [`crate::embedded`]; nothing outside that module assumes SQLite,
//! so Kafka-topic-backed versions can replace them for scale-out.

use crate::records::Record;
use crate::status::ConnectorStatus;

/// Everything a connector owns is scoped by tenant and connector name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace {
    pub tenant: String,
    pub connector: String,
}

impl Namespace {
    pub fn new(tenant: impl Into<String>, connector: impl Into<String>) -> Self {
        Namespace { tenant: tenant.into(), connector: connector.into() }
    }
}

pub const DEFAULT_TENANT: &str = "default";

/// Committed source offsets. Partitions and offsets are canonical JSON text.
pub trait OffsetStore: Send + Sync {
    /// The committed offset of each partition, in the order asked.
    fn offsets(&self, ns: &Namespace, partitions: &[String]) -> anyhow::Result<Vec<Option<String>>>;
    /// Commits offsets atomically (all or none).
    fn commit_offsets(&self, ns: &Namespace, offsets: &[(String, String)]) -> anyhow::Result<()>;
    /// Every committed (partition, offset) of a connector, ordered by partition.
    fn all_offsets(&self, ns: &Namespace) -> anyhow::Result<Vec<(String, String)>>;
    /// Forgets one partition's offset; true if there was one.
    fn delete_offset(&self, ns: &Namespace, partition: &str) -> anyhow::Result<bool>;
}

/// Connector and task configs, so that a restart knows what ran.
pub trait ConfigStore: Send + Sync {
    fn put_connector_config(&self, ns: &Namespace, config: &[(String, String)]) -> anyhow::Result<()>;
    fn put_task_configs(&self, ns: &Namespace, tasks: &[Vec<(String, String)>]) -> anyhow::Result<()>;
    fn task_configs(&self, ns: &Namespace) -> anyhow::Result<Vec<Vec<(String, String)>>>;
}

/// The last known status of every connector.
pub trait StatusStore: Send + Sync {
    fn put_status(&self, ns: &Namespace, status: &ConnectorStatus) -> anyhow::Result<()>;
    fn statuses(&self, tenant: &str) -> anyhow::Result<Vec<ConnectorStatus>>;
}

/// A record as stored in the local destination.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRecord {
    /// Position in the topic, from 0.
    pub offset: u64,
    pub connector: String,
    pub record: Record,
}

/// The local destination's log: records are appended together with the offsets they
/// advance, in one transaction, which is what makes it exactly-once.
pub trait RecordLog: Send + Sync {
    fn append_with_offsets(
        &self,
        ns: &Namespace,
        records: &[Record],
        offsets: &[(String, String)],
    ) -> anyhow::Result<()>;
    /// (topic, record count) of a tenant.
    fn topics(&self, tenant: &str) -> anyhow::Result<Vec<(String, u64)>>;
    /// Records of a topic from `from` (topic offset), at most `limit`.
    fn read(&self, tenant: &str, topic: &str, from: u64, limit: usize) -> anyhow::Result<Vec<StoredRecord>>;
}
