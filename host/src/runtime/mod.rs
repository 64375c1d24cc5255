//! The runtime layer: running plugins. The wasmtime engine and one sandbox per instance
//! ([`sandbox`]), the plugin folder and its compile cache ([`registry`]), the bindings
//! generated from `wit/` ([`bindings`]), a plugin's log and stdout/stderr ([`plugin_log`]),
//! the rate limiter both the log and tenants use ([`rate`]), a 0.3.0 batch's fast lift
//! (`packed_lift`), and a plugin's reads of regular files on its own thread (`file_reads`).
//!
//! Uses the config layer and the storage traits (the offset reader reads an
//! [`crate::storage::OffsetStore`]); knows nothing of connectors' lifecycle.

pub mod bindings;
mod file_reads;
mod packed_lift;
pub mod plugin_log;
pub mod rate;
pub mod registry;
pub mod sandbox;

pub use registry::{Plugin, Registry, Rejected};
pub use sandbox::{CallError, InstanceContext, Pairs, PluginInstance, Runtime, WorldPre};
