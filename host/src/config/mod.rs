//! The config layer: what users write. Connector configs (Kafka Connect's JSON shape), the
//! host's own connector keys (each defined once), and the worker config (`sluice.toml`).
//!
//! Uses nothing else of the host: every other layer may use it.

mod connector;
pub mod kafka;
pub mod keys;
pub mod transforms;
mod worker;

pub use connector::{ConfigError, ConnectorConfig, value_text};
pub use kafka::{InternalTopic, KafkaConfig, check_topic_name};
pub use keys::{
    CONNECTOR_CLASS, CallTimeouts, ConfigKeyInfo, ConnectorSettings, DestinationKind, ErrorHandling, HOST_KEYS,
    KafkaSettings, RestartPolicy, SandboxSettings, TASKS_MAX, TransactionBoundary,
};
pub use transforms::Transforms;
pub use worker::{
    DEFAULT_TENANT, MOST_INSTANCES, OperatorConfig, Quotas, StorageConfig, StorageKind, Tenant, TopicTracking,
    WorkerConfig, WorkerSandbox, hash_token,
};
