//! file-pulse: keeps scanning a directory, hands new files to tasks, streams them line by
//! line (or whole) into a topic, and watches the committed offsets *from the connector*
//! (KIP-131) to see which files are finished (then cleans them up) and which tasks have
//! stalled (then restarts just those).
//!
//! Source partition: `{"id": <file identity>}` (WASI's metadata hash of device and inode),
//! so a renamed or rotated file keeps its partition. Source offset: `{"path", "position",
//! "line", "size", "mtime", "done"}`, plus `"end"`, `"failed"`, `"gen"`, `"attempt"` and
//! `"head"` when they say something: what the file looked like when it was read, so that
//! a new file under a reused identity is told from a finished one ([`identity`]).
//!
//! The modules other than `component` are plain Rust and unit-tested natively.

pub mod assign;
pub mod cleanup;
pub mod identity;
pub mod offset;
pub mod reader;
pub mod settings;

#[cfg(target_family = "wasm")]
mod component;
