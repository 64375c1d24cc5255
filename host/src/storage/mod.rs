//! The storage layer: offsets, connector and task configs, statuses and the local record
//! log, each behind a small trait, and [`Stores::open`], the one place that picks a backend
//! from the worker config (as Kafka's `ConnectStandalone` picks its backing stores).
//! Outside [`sqlite`] nothing names SQLite, so Kafka-topic-backed stores can take its place.
//!
//! Also owns the data directory's layout ([`DataDir`]) and the canonical JSON form of
//! partitions and offsets ([`json`]). Uses only the config layer.

mod batch;
pub mod json;
pub mod kafka;
mod model;
mod sqlite;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;

use crate::config::{StorageKind, WorkerConfig};

pub use batch::{Part, RecordBatch, RecordBatchBuilder, RecordRef, TextPart};
pub use model::{
    ActiveTopic, ConnectorState, ConnectorStatus, Record, State, StoredRecord, TargetState, TaskStatus, Text,
};

/// Milliseconds since the epoch: the clock of records' timestamps and of what the stores
/// date (active topics, log levels set through the API).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

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

/// Committed source offsets. Partitions and offsets are canonical JSON text.
pub trait OffsetStore: Send + Sync {
    /// The committed offset of each partition, in the order asked.
    fn offsets(&self, ns: &Namespace, partitions: &[String]) -> anyhow::Result<Vec<Option<String>>>;
    /// [`OffsetStore::offsets`] when the store can answer without waiting on anyone (from
    /// memory, or a read nobody else holds up), else `None`: the caller then asks on a
    /// blocking thread. Lets a connector's frequent small lookup skip the thread handoff.
    fn offsets_at_once(&self, _ns: &Namespace, _partitions: &[String]) -> Option<anyhow::Result<Vec<Option<String>>>> {
        None
    }
    /// Commits offsets atomically (all or none).
    fn commit_offsets(&self, ns: &Namespace, offsets: &[(String, String)]) -> anyhow::Result<()>;
    /// Every committed (partition, offset) of a connector, ordered by partition.
    fn all_offsets(&self, ns: &Namespace) -> anyhow::Result<Vec<(String, String)>>;
    /// Forgets one partition's offset; true if there was one.
    fn delete_offset(&self, ns: &Namespace, partition: &str) -> anyhow::Result<bool>;
}

/// Connector and task configs, so that a restart knows what ran.
/// A connector as the config store keeps it: who, its config, what it should be doing.
pub type StoredConnector = (Namespace, Vec<(String, String)>, TargetState);

pub trait ConfigStore: Send + Sync {
    fn put_connector_config(&self, ns: &Namespace, config: &[(String, String)]) -> anyhow::Result<()>;
    /// The connectors of a tenant that ever ran here, by name.
    fn connectors(&self, tenant: &str) -> anyhow::Result<Vec<String>>;
    /// A connector's stored config, if there is one.
    fn connector_config(&self, ns: &Namespace) -> anyhow::Result<Option<Vec<(String, String)>>>;
    /// Every stored connector of every tenant, with its target state (`Started` when
    /// none was stored): what a restarted worker brings back.
    fn stored_connectors(&self) -> anyhow::Result<Vec<StoredConnector>>;
    fn put_target_state(&self, ns: &Namespace, state: TargetState) -> anyhow::Result<()>;
    /// Forgets a connector: its config, task configs, target state and status (its
    /// committed offsets stay, as in Kafka Connect: a connector created again resumes).
    fn delete_connector(&self, ns: &Namespace) -> anyhow::Result<()>;
    /// The tenants that have connectors here.
    fn tenants(&self) -> anyhow::Result<Vec<String>>;
    fn put_task_configs(&self, ns: &Namespace, tasks: &[Vec<(String, String)>]) -> anyhow::Result<()>;
    fn task_configs(&self, ns: &Namespace) -> anyhow::Result<Vec<Vec<(String, String)>>>;
}

/// The last known status of every connector, and (KIP-558) the topics each has written to.
pub trait StatusStore: Send + Sync {
    fn put_status(&self, ns: &Namespace, status: &ConnectorStatus) -> anyhow::Result<()>;
    fn statuses(&self, tenant: &str) -> anyhow::Result<Vec<ConnectorStatus>>;
    /// Remembers that a task of the connector wrote to `topic.name` (kept until reset).
    fn put_active_topic(&self, ns: &Namespace, topic: &ActiveTopic) -> anyhow::Result<()>;
    /// The topics the connector has written to since they were last reset, by name.
    fn active_topics(&self, ns: &Namespace) -> anyhow::Result<Vec<ActiveTopic>>;
    /// Forgets the connector's active topics.
    fn reset_active_topics(&self, ns: &Namespace) -> anyhow::Result<()>;
}

/// The local destination's log. It *is* an offset store: records are appended together
/// with the offsets they advance, in one transaction, which is what makes it exactly-once,
/// and the offsets plugins read are the same ones.
pub trait RecordLog: OffsetStore {
    /// The transaction commits through `gate`, or rolls back with
    /// [`crate::destinations::DeliveryAbandoned`] when it is shut.
    fn append_with_offsets(
        &self,
        ns: &Namespace,
        records: &RecordBatch,
        offsets: &[(String, String)],
        gate: &crate::destinations::CommitGate,
    ) -> anyhow::Result<()>;
    /// (topic, record count) of a tenant.
    fn topics(&self, tenant: &str) -> anyhow::Result<Vec<(String, u64)>>;
    /// Records of a topic from `from` (topic offset), at most `limit`, and no more once
    /// they add up to `max_bytes` (at least one): a page to stream a topic of any size.
    fn read_page(
        &self,
        tenant: &str,
        topic: &str,
        from: u64,
        limit: usize,
        max_bytes: u64,
    ) -> anyhow::Result<Vec<StoredRecord>>;

    /// Records of a topic from `from`, at most `limit`, whatever their size.
    fn read(&self, tenant: &str, topic: &str, from: u64, limit: usize) -> anyhow::Result<Vec<StoredRecord>> {
        self.read_page(tenant, topic, from, limit, u64::MAX)
    }
}

/// The stores of one worker, from one backend.
#[derive(Clone)]
pub struct Stores {
    offsets: Arc<dyn OffsetStore>,
    configs: Arc<dyn ConfigStore>,
    statuses: Arc<dyn StatusStore>,
    local: Arc<dyn RecordLog>,
    /// The Kafka backend, when offsets are in Kafka (exactly-once writes offsets in the
    /// same transaction as records, through it).
    kafka: Option<Arc<kafka::KafkaBackend>>,
}

impl Stores {
    /// Opens (creating if needed) the backend the worker config names, in `data_dir`.
    /// Kafka storage connects, makes or checks its topics and reads them to their end
    /// before returning (a blocking call of up to a minute when the cluster is away).
    pub fn open(worker: &WorkerConfig, data_dir: &DataDir) -> anyhow::Result<Stores> {
        data_dir.create()?;
        let database =
            Arc::new(sqlite::SqliteStore::open(&data_dir.database()).with_context(|| {
                format!("cannot use the data directory {} (--data-dir)", data_dir.root().display())
            })?);
        match worker.storage.kind {
            StorageKind::Sqlite => Ok(Stores::from_backend(database)),
            StorageKind::Kafka => {
                let kafka = worker.kafka.as_ref().context("[storage] kind = \"kafka\" needs a [kafka] section")?;
                let backend = kafka::KafkaBackend::open(kafka)
                    .with_context(|| format!("[storage] kind = \"kafka\" on {}", kafka.bootstrap_servers()))?;
                // The local log keeps its records and offsets in the data directory; the
                // herder refuses destination=local on Kafka storage, so no offset of a
                // connector is in two places.
                Ok(Stores {
                    offsets: backend.clone(),
                    configs: backend.clone(),
                    statuses: backend.clone(),
                    local: database,
                    kafka: Some(backend),
                })
            }
        }
    }

    /// Opens the stores for the read-only commands (`sluice offsets`, `topics`): an error
    /// when the data directory holds no data yet.
    pub fn open_existing(worker: &WorkerConfig, data_dir: &DataDir) -> anyhow::Result<Stores> {
        match worker.storage.kind {
            StorageKind::Sqlite => anyhow::ensure!(
                data_dir.database().exists(),
                "no Sluice data in {} (no sluice.db; run `sluice run` first or pass --data-dir)",
                data_dir.root().display()
            ),
            StorageKind::Kafka => {}
        }
        Stores::open(worker, data_dir)
    }

    /// One backend behind every store: the local log and the offset store are the same
    /// object, so what a plugin reads is what the local destination committed.
    fn from_backend<B: RecordLog + ConfigStore + StatusStore + 'static>(backend: Arc<B>) -> Stores {
        Stores {
            offsets: backend.clone(),
            configs: backend.clone(),
            statuses: backend.clone(),
            local: backend,
            kafka: None,
        }
    }

    pub fn kafka(&self) -> Option<&Arc<kafka::KafkaBackend>> {
        self.kafka.as_ref()
    }

    pub fn offsets(&self) -> &Arc<dyn OffsetStore> {
        &self.offsets
    }

    pub fn configs(&self) -> &Arc<dyn ConfigStore> {
        &self.configs
    }

    pub fn statuses(&self) -> &Arc<dyn StatusStore> {
        &self.statuses
    }

    /// The local destination's record log (which commits into [`Stores::offsets`]).
    pub fn local(&self) -> &Arc<dyn RecordLog> {
        &self.local
    }
}

/// The data directory's layout: the embedded database, the compiled-plugin cache and the
/// lock that keeps one worker per directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    pub fn new(root: impl Into<PathBuf>) -> DataDir {
        DataDir { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The embedded SQLite database.
    pub fn database(&self) -> PathBuf {
        self.root.join("sluice.db")
    }

    /// This data directory's own folder for compiled plugins (keyed by content and
    /// engine). A worker uses it only when it exists; see [`DataDir::plugin_cache`].
    pub fn compile_cache(&self) -> PathBuf {
        self.root.join("compiled")
    }

    /// Where a worker on this data directory caches compiled plugins: `$SLUICE_COMPILE_CACHE`
    /// when set; else this directory's own `compiled/` when it exists (made by an earlier
    /// release, or on purpose); else the user's cache directory
    /// (`$XDG_CACHE_HOME/sluice/compiled`, or `~/.cache/sluice/compiled`), which every data
    /// directory of the user shares, so a new one starts without compiling anything again.
    /// Entries are keyed by content and engine and written by rename, so workers on
    /// different data directories share it safely.
    pub fn plugin_cache(&self) -> PathBuf {
        let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        if let Some(dir) = env("SLUICE_COMPILE_CACHE") {
            return dir;
        }
        let own = self.compile_cache();
        if own.exists() {
            return own;
        }
        let user = env("XDG_CACHE_HOME").or_else(|| env("HOME").map(|home| home.join(".cache")));
        match user {
            Some(cache) if cache.is_absolute() => cache.join("sluice").join("compiled"),
            _ => own,
        }
    }

    /// This data directory's cluster id (what `GET /` reports as `kafka_cluster_id` for the
    /// local destination): made once, like a Kafka cluster's, and kept in `cluster-id`.
    pub fn cluster_id(&self) -> anyhow::Result<String> {
        let path = self.root.join("cluster-id");
        if let Ok(id) = std::fs::read_to_string(&path)
            && !id.trim().is_empty()
        {
            return Ok(id.trim().to_string());
        }
        self.create()?;
        let id = new_cluster_id();
        std::fs::write(&path, &id)
            .with_context(|| format!("cannot write in the data directory {} (--data-dir)", self.root.display()))?;
        Ok(id)
    }

    /// Creates the directory if needed; errors say it is the data directory.
    pub fn create(&self) -> anyhow::Result<()> {
        if self.root.exists() && !self.root.is_dir() {
            anyhow::bail!("the data directory {} is a file, not a directory (--data-dir)", self.root.display());
        }
        std::fs::create_dir_all(&self.root)
            .with_context(|| format!("cannot create the data directory {} (--data-dir)", self.root.display()))
    }

    /// An exclusive lock on the directory: one worker per directory, and no offset edits
    /// under a running connector. Held until the returned value is dropped.
    pub fn lock(&self) -> anyhow::Result<DataDirLock> {
        self.create()?;
        let path = self.root.join("sluice.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot write in the data directory {} (--data-dir)", self.root.display()))?;
        match file.try_lock() {
            Ok(()) => Ok(DataDirLock(file)),
            Err(std::fs::TryLockError::WouldBlock) => {
                anyhow::bail!("another sluice process is using {}; stop it first", self.root.display())
            }
            Err(std::fs::TryLockError::Error(e)) => Err(e.into()),
        }
    }
}

/// See [`DataDir::lock`].
pub struct DataDirLock(#[allow(dead_code)] std::fs::File);

/// 16 unpredictable bytes in URL-safe base64 without padding, the form of a Kafka cluster id.
fn new_cluster_id() -> String {
    use sha2::{Digest, Sha256};
    let seed = format!("{:?} {} {:?}", std::time::SystemTime::now(), std::process::id(), std::thread::current().id());
    let digest = Sha256::digest(seed.as_bytes());
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bits: Vec<bool> = digest[..16].iter().flat_map(|byte| (0..8).rev().map(move |i| byte >> i & 1 == 1)).collect();
    bits.chunks(6)
        .map(|chunk| {
            ALPHABET[chunk.iter().fold(0usize, |n, bit| n << 1 | usize::from(*bit)) << (6 - chunk.len())] as char
        })
        .collect()
}
