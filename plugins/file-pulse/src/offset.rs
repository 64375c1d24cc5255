//! The source partition and offset of one file.

use serde::{Deserialize, Serialize};

/// A file as the connector and its tasks name it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FileKey {
    /// Path relative to `fs.listing.directory.path`, with `/` separators.
    pub path: String,
    /// The file's identity (WASI metadata hash, hex).
    pub id: String,
}

impl FileKey {
    /// `{"id": ..., "path": ...}` (keys sorted, as the host stores partitions).
    pub fn partition(&self) -> String {
        serde_json::json!({ "path": self.path, "id": self.id }).to_string()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileOffset {
    /// Bytes consumed (of the decompressed stream for `.gz` files).
    pub position: u64,
    /// Records (lines) emitted so far.
    pub line: u64,
    /// File size when it was read.
    pub size: u64,
    /// Nothing more will be read from this file.
    pub done: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// Retry number: a failed file moved back into the directory is read again from the
    /// start with the next attempt.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempt: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl FileOffset {
    pub fn parse(text: &str) -> Option<FileOffset> {
        serde_json::from_str(text).ok()
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("offsets serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_round_trip_and_omit_defaults() {
        let offset = FileOffset { position: 10, line: 2, size: 10, done: true, failed: None, attempt: 0 };
        assert_eq!(offset.to_json(), r#"{"position":10,"line":2,"size":10,"done":true}"#);
        assert_eq!(FileOffset::parse(&offset.to_json()), Some(offset));
        let key = FileKey { path: "a/b.log".into(), id: "ff".into() };
        assert_eq!(key.partition(), r#"{"id":"ff","path":"a/b.log"}"#);
    }
}
