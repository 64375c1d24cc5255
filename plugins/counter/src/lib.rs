//! The example connector: every task emits its own numbered sequence of records.
//!
//! Partition `{"counter": <task>}`, offset `{"seq": <n>}`, value `<task>-<n>` padded to
//! `record.size` bytes. A task resumes after its committed `seq`, so a run that is killed
//! and restarted continues the sequence with nothing lost or repeated.
//!
//! [`generator`] is plain Rust with no WebAssembly in it: the host's benchmark compiles
//! the same code natively to compare against the component.

pub mod generator;

/// The component glue, written with the `sluice-connector` SDK.
#[cfg(target_family = "wasm")]
mod component;
