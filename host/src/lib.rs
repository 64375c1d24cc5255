//! Sluice: a host for sandboxed source connectors compiled to WebAssembly components.
//!
//! Layers, each a folder with a header saying what it owns and what it may use; a layer
//! uses only the layers above it in this list:
//!
//! | layer | owns |
//! |---|---|
//! | [`config`] | connector configs, the host's keys (each defined once), the worker config (`sluice.toml`) |
//! | [`storage`] | the store traits, the one place that builds them ([`storage::Stores::open`]), the SQLite and Kafka backends, the data directory |
//! | [`runtime`] | the engine and sandboxes, the plugin folder and compile cache, the WIT bindings, plugin logs |
//! | [`destinations`] | where records go: `local` (exactly-once), `stdout` or `kafka` (at-least-once, or KIP-618 transactions) |
//! | [`connect`] | Kafka Connect's runtime: herder, admission, reconfiguration, task runner, record checks, statuses |
//! | [`api`] | Kafka Connect's REST API over the herder: routes, tokens and tenants, metrics, the OpenAPI document |
//! | [`cli`] | the `sluice` command line |
//!
//! Where is reconfiguration decided? [`connect::reconfigure`]. Where is an offset
//! committed? [`destinations`], through [`storage::RecordLog`] or [`storage::OffsetStore`].
//! Where is a limit enforced? [`runtime::sandbox`] (memory, deadlines, fuel) and
//! [`connect::records`] (record and batch sizes). How the parts fit: `docs/architecture.md`.

pub mod api;
pub mod cli;
pub mod config;
pub mod connect;
pub mod destinations;
pub mod runtime;
pub mod storage;

/// Where `cargo build` put the repository's example plugins (the default `plugin.path`).
pub const BUILT_PLUGINS: &str = env!("SLUICE_BUILT_PLUGINS");
/// Why a shipped plugin in another language was not built (its toolchain is missing, with
/// the install command), `" | "`-separated; empty when every plugin was built.
pub const PLUGIN_BUILD_PROBLEMS: &str = env!("SLUICE_PLUGIN_BUILD_PROBLEMS");
