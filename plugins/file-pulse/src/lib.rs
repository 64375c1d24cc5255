//! file-pulse: keeps scanning a directory, hands new files to tasks, streams them line by
//! line (or whole) into a topic, and watches the committed offsets *from the connector*
//! (KIP-131) to see which files are finished (then cleans them up) and which tasks have
//! stalled (then restarts just those).
//!
//! Source partition: `{"path": <relative path>, "id": <file identity>}`, where the identity
//! is WASI's metadata hash (device and inode), so a rotated or replaced file is a new
//! partition. Source offset: `{"position", "line", "size", "done"}`, plus `"failed"` with
//! the reason when the file could not be read, and `"attempt"` after a retry.
//!
//! The modules other than `component` are plain Rust and unit-tested natively.

pub mod assign;
pub mod offset;
pub mod reader;
pub mod settings;

#[cfg(target_family = "wasm")]
mod component;
