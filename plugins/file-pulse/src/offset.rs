//! The source partition and offset of one file.
//!
//! The partition is the file's identity alone, `{"id": <device and inode hash>}`, so a
//! file keeps its partition when it is renamed (rotation) or moved within the listing.
//! The offset says how far it was read *and what the file looked like*: its path, size
//! and modification time when last read, and a `version` that grows each time a
//! new file turns up under an identity that was finished (an inode the filesystem
//! reused), so a new file is never mistaken for a finished one. See [`crate::identity`].

use serde::{Deserialize, Serialize};

/// A file as the connector and its tasks name it: its identity, and where it was found.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FileKey {
    /// The file's identity (WASI metadata hash of device and inode, hex).
    pub id: String,
    /// Path relative to `fs.listing.directory.path`, with `/` separators.
    pub path: String,
}

/// `{"id": ...}`: the source partition of the file with this identity.
pub fn partition(id: &str) -> String {
    serde_json::json!({ "id": id }).to_string()
}

/// Why a file is done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum End {
    /// Read to its end (`file.completion=eof`), or not done yet.
    #[default]
    Eof,
    /// Tail mode: the file was removed.
    Removed,
    /// Tail mode: the file was renamed away (rotated) and stopped growing.
    Rotated,
    /// Tail mode: the file did not grow for `tail.idle.ms`.
    Idle,
    /// It could not be read (`failed` says why).
    Failed,
    /// It was not where it was listed when its task looked (renamed, moved or replaced
    /// meanwhile); the next listing finds it wherever it is and reads on.
    Missing,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileOffset {
    /// Where the file was last read, relative to the listed directory.
    #[serde(default)]
    pub path: String,
    /// Bytes consumed (of the decompressed stream for `.gz` files), up to the end of the
    /// last complete line sent.
    pub position: u64,
    /// Records (lines) emitted so far. (Every field but `position` may be left out of an
    /// offset written by hand, as a rewind through the REST API does.)
    #[serde(default)]
    pub line: u64,
    /// File size when it was last read (everything up to it was seen, sent or held back
    /// as an unfinished last line).
    #[serde(default)]
    pub size: u64,
    /// Modification time (nanoseconds since the Unix epoch) when it was last read.
    #[serde(default)]
    pub mtime: u64,
    /// Nothing more will be read from this version of the file.
    #[serde(default)]
    pub done: bool,
    #[serde(default, skip_serializing_if = "is_eof")]
    pub end: End,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// Version of the file under this identity: a new file with a reused identity is the
    /// next version, read from the start.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub version: u32,
    /// Retry within a version: a failed or missing file seen again reads on from
    /// `position` with the next attempt.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempt: u32,
    /// A hash of the file's first `min(position, HEAD_BYTES)` bytes as they were read, so
    /// a file rewritten in place, or a new file under a reused identity, is not read on
    /// from an old position: checked when a task opens the file to read on, and (tail
    /// mode) to tell a finished log that grew from a new file in its place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// This version was started by the task reading the one before, which found the file
    /// rewritten in place (truncated, or its first bytes changed), not by the connector.
    /// A restart of that task, with a config that still names the version before, reads
    /// on from here: a later version the connector started is another task's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rewritten: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_eof(end: &End) -> bool {
    *end == End::Eof
}

/// How many leading bytes [`FileOffset::head`] covers.
pub const HEAD_BYTES: usize = 256;

/// FNV-1a, 64 bits, as hex: small, stable across builds and platforms.
pub fn head_hash(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

impl FileOffset {
    pub fn parse(text: &str) -> Option<FileOffset> {
        serde_json::from_str(text).ok()
    }

    /// The offset as JSON, the same text serde writes. The common case (a plain offset of
    /// a file with a printable ASCII path) is written directly: it is built for every line.
    pub fn to_json(&self) -> String {
        let mut json = String::with_capacity(self.path.len() + 96);
        self.write_json(&mut json);
        json
    }

    /// Appends [`FileOffset::to_json`]'s text to `json`.
    pub fn write_json(&self, json: &mut String) {
        OffsetWriter::default().write(self, json);
    }

    /// Whether serde would write only the six fields every offset has, and the head.
    fn is_plain(&self) -> bool {
        self.end == End::Eof && self.failed.is_none() && self.version == 0 && self.attempt == 0 && !self.rewritten
    }

    /// The start of a version of a file.
    pub fn start(path: &str, version: u32, attempt: u32) -> FileOffset {
        FileOffset { path: path.to_string(), version, attempt, ..FileOffset::default() }
    }
}

/// Writes [`FileOffset::to_json`]'s text for offset after offset of the same file, as a
/// task does for every line: the text before the position (the path) and after the line
/// number (size, mtime and done) is kept from the offset before and rebuilt only when it
/// changes, so a line's offset costs two numbers and three copies (the path's scan for
/// characters JSON must escape and two of the four numbers were most of file-pulse's own
/// time per line).
#[derive(Debug, Default)]
pub struct OffsetWriter {
    /// The path of the offset before, and the text up to its position,
    /// `{"path":"<path>","position":` (`None` when the path needs escaping: serde writes
    /// such offsets).
    head: Option<(String, Option<String>)>,
    /// The size, mtime, done and head that `tail` was written for.
    tail_of: Option<(u64, u64, bool, Option<String>)>,
    /// The text after the line number,
    /// `,"size":<size>,"mtime":<mtime>,"done":<done>[,"head":"<head>"]}`.
    tail: String,
}

impl OffsetWriter {
    /// Appends `offset`'s text to `json`, and says where in `json` its line number's
    /// digits are (the `file.line` header carries the same digits), when it wrote them
    /// itself rather than through serde.
    pub fn write(&mut self, offset: &FileOffset, json: &mut String) -> Option<std::ops::Range<usize>> {
        if !offset.is_plain() {
            json.push_str(&serde_json::to_string(offset).expect("offsets serialize"));
            return None;
        }
        // memchr's compare reads four bytes at a time; `!=` calls the guest's `memcmp`,
        // wasi-libc's byte loop.
        let same_path = |(path, _): &(String, _)| memchr::arch::all::is_equal(path.as_bytes(), offset.path.as_bytes());
        if !self.head.as_ref().is_some_and(same_path) {
            let plain_path = offset.path.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\');
            let head = plain_path.then(|| format!("{{\"path\":\"{}\",\"position\":", offset.path));
            self.head = Some((offset.path.clone(), head));
        }
        let Some((_, Some(head))) = &self.head else {
            json.push_str(&serde_json::to_string(offset).expect("offsets serialize"));
            return None;
        };
        let same_tail = self.tail_of.as_ref().is_some_and(|(size, mtime, done, head)| {
            (*size, *mtime, *done) == (offset.size, offset.mtime, offset.done) && *head == offset.head
        });
        if !same_tail {
            // A head is hex digits: nothing in it needs escaping.
            let plain_head = offset.head.as_ref().is_none_or(|h| h.bytes().all(|b| b.is_ascii_alphanumeric()));
            if !plain_head {
                json.push_str(&serde_json::to_string(offset).expect("offsets serialize"));
                return None;
            }
            self.tail_of = Some((offset.size, offset.mtime, offset.done, offset.head.clone()));
            self.tail.clear();
            self.tail.push_str(",\"size\":");
            push_decimal(&mut self.tail, offset.size);
            self.tail.push_str(",\"mtime\":");
            push_decimal(&mut self.tail, offset.mtime);
            self.tail.push_str(if offset.done { ",\"done\":true" } else { ",\"done\":false" });
            if let Some(head) = &offset.head {
                self.tail.push_str(",\"head\":\"");
                self.tail.push_str(head);
                self.tail.push('"');
            }
            self.tail.push('}');
        }
        json.push_str(head);
        push_decimal(json, offset.position);
        json.push_str(",\"line\":");
        let line_starts = json.len();
        push_decimal(json, offset.line);
        let line = line_starts..json.len();
        json.push_str(&self.tail);
        Some(line)
    }
}

/// `n` in decimal, written into `digits`.
pub fn decimal(n: u64, digits: &mut [u8; 20]) -> &[u8] {
    // WebAssembly has no 64 × 64 → 128-bit multiply, so each u64 division by 10 is a real
    // division instruction (about 30 cycles, twice per digit); a u32 division by a constant
    // compiles to a multiply and a shift. So nine digits at a time are split off with one
    // u64 division, and each part is written in u32, two digits at a time.
    let mut at = digits.len();
    let mut rest = n;
    while rest > u64::from(u32::MAX) {
        let mut part = (rest % 1_000_000_000) as u32;
        rest /= 1_000_000_000;
        for _ in 0..4 {
            at -= 2;
            digits[at..at + 2].copy_from_slice(pair(part % 100));
            part /= 100;
        }
        at -= 1;
        digits[at] = b'0' + part as u8;
    }
    let mut low = rest as u32;
    while low >= 100 {
        at -= 2;
        digits[at..at + 2].copy_from_slice(pair(low % 100));
        low /= 100;
    }
    if low >= 10 {
        at -= 2;
        digits[at..at + 2].copy_from_slice(pair(low));
    } else {
        at -= 1;
        digits[at] = b'0' + low as u8;
    }
    &digits[at..]
}

/// The two digits of `n` (below 100).
fn pair(n: u32) -> &'static [u8] {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let at = n as usize * 2;
    &PAIRS[at..at + 2]
}

/// Appends `n` in decimal.
fn push_decimal(out: &mut String, n: u64) {
    let mut buffer = [0u8; 20];
    let digits = decimal(n, &mut buffer);
    // SAFETY: `decimal` writes only ASCII digits, so `out` stays UTF-8. This runs for
    // three numbers of every record: pushed as `char`s, one at a time, each with its
    // capacity check and UTF-8 encoding, they were an eighth of the offset's text, and a
    // check of the digits as UTF-8 would cost about as much.
    unsafe { out.as_mut_vec() }.extend_from_slice(digits);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_what_display_writes() {
        let mut digits = [0u8; 20];
        for n in [
            0,
            9,
            10,
            4_294_967_295,
            4_294_967_296,
            5_000_000_000,
            1_000_000_000_000_000_000,
            1_733_000_000_123_456_789,
            u64::MAX,
        ] {
            assert_eq!(decimal(n, &mut digits), n.to_string().as_bytes(), "{n}");
        }
        // Every length, and numbers around each power of ten.
        let mut power = 1u64;
        loop {
            for n in [power - 1, power, power + 1, power.wrapping_mul(3).wrapping_add(7)] {
                assert_eq!(decimal(n, &mut digits), n.to_string().as_bytes(), "{n}");
            }
            match power.checked_mul(10) {
                Some(next) => power = next,
                None => break,
            }
        }
        for n in (0..200_000).chain((0..200_000).map(|i| u64::MAX / 200_000 * i + i)) {
            assert_eq!(decimal(n, &mut digits), n.to_string().as_bytes(), "{n}");
        }
    }

    #[test]
    fn an_offset_written_by_hand_needs_only_its_position() {
        let rewound = FileOffset::parse(r#"{"path":"a.txt","position":15,"line":5,"done":false}"#).unwrap();
        assert_eq!((rewound.position, rewound.line, rewound.size, rewound.done), (15, 5, 0, false));
        assert_eq!(FileOffset::parse(r#"{"position":15}"#).unwrap().position, 15);
        assert!(FileOffset::parse(r#"{"path":"a.txt"}"#).is_none(), "a position says where to read on");
    }

    #[test]
    fn the_direct_json_is_what_serde_writes() {
        let offsets = [
            FileOffset::default(),
            FileOffset {
                path: "a b/c.log".into(),
                position: u64::MAX,
                line: 10,
                size: 7,
                mtime: 1,
                done: true,
                ..FileOffset::default()
            },
            FileOffset { path: "quote\"d\\".into(), position: 1, ..FileOffset::default() },
            FileOffset { path: "ünï\n".into(), line: 3, ..FileOffset::default() },
            FileOffset { path: "a".into(), version: 2, attempt: 1, head: Some("ff".into()), ..FileOffset::default() },
            FileOffset {
                path: "a".into(),
                end: End::Rotated,
                failed: Some("x".into()),
                done: true,
                ..FileOffset::default()
            },
        ];
        for offset in offsets {
            assert_eq!(offset.to_json(), serde_json::to_string(&offset).unwrap(), "{offset:?}");
        }
    }

    /// One writer over a sequence of offsets whose path, size, mtime, done and other
    /// fields change one at a time writes each as serde would.
    #[test]
    fn a_reused_writer_writes_each_offset_as_serde_does() {
        let base = FileOffset { path: "a.log".into(), size: 100, mtime: 7, ..FileOffset::default() };
        let sequence = [
            FileOffset { position: 10, line: 1, ..base.clone() },
            FileOffset { position: 20, line: 2, ..base.clone() },
            FileOffset { position: 30, line: 3, size: 130, ..base.clone() },
            FileOffset { position: 40, line: 4, size: 130, mtime: 9, ..base.clone() },
            FileOffset { position: 40, line: 4, size: 130, mtime: 9, done: true, ..base.clone() },
            FileOffset { path: "b.log".into(), position: 5, line: 1, size: 130, mtime: 9, ..base.clone() },
            FileOffset { path: "quote\"d".into(), position: 6, line: 2, ..base.clone() },
            FileOffset { path: "quote\"d".into(), position: 7, line: 3, ..base.clone() },
            FileOffset { position: 50, line: 5, version: 1, ..base.clone() },
            FileOffset { position: 60, line: 6, ..base.clone() },
            FileOffset { position: 70, line: 7, end: End::Idle, done: true, ..base.clone() },
            FileOffset { path: String::new(), ..FileOffset::default() },
            FileOffset { path: String::new(), position: 1, ..FileOffset::default() },
            FileOffset { path: "ünï".into(), position: 1, ..base.clone() },
            FileOffset { position: 80, line: 8, ..base.clone() },
            FileOffset { position: 90, line: 9, head: Some("00ff".into()), ..base.clone() },
            FileOffset { position: 95, line: 10, head: Some("00ff".into()), ..base.clone() },
            FileOffset { position: 99, line: 11, head: Some("0aff".into()), ..base.clone() },
            FileOffset { position: 99, line: 11, head: Some("a\"b".into()), ..base.clone() },
            FileOffset { position: 100, line: 12, ..base.clone() },
        ];
        let mut writer = OffsetWriter::default();
        let mut line_digits_said = 0;
        for offset in sequence {
            let mut json = String::from("before ");
            let line_digits = writer.write(&offset, &mut json);
            assert_eq!(json, format!("before {}", serde_json::to_string(&offset).unwrap()), "{offset:?}");
            if let Some(digits) = line_digits {
                assert_eq!(json[digits].parse::<u64>().ok(), Some(offset.line), "{offset:?}");
                line_digits_said += 1;
            }
        }
        assert_eq!(line_digits_said, 14, "every plain offset with a plain path and head says where its line is");
    }

    #[test]
    fn offsets_round_trip_and_omit_defaults() {
        let offset = FileOffset {
            path: "a.log".into(),
            position: 10,
            line: 2,
            size: 10,
            mtime: 7,
            done: true,
            ..FileOffset::default()
        };
        assert_eq!(offset.to_json(), r#"{"path":"a.log","position":10,"line":2,"size":10,"mtime":7,"done":true}"#);
        assert_eq!(FileOffset::parse(&offset.to_json()), Some(offset));
        let failed = FileOffset { end: End::Failed, failed: Some("x".into()), version: 2, ..FileOffset::default() };
        let text = failed.to_json();
        assert!(text.contains(r#""end":"failed""#) && text.contains(r#""version":2"#), "{text}");
        assert_eq!(FileOffset::parse(&text), Some(failed));
        assert_eq!(partition("ff"), r#"{"id":"ff"}"#);
    }

    #[test]
    fn head_hash_is_stable() {
        assert_eq!(head_hash(b""), "cbf29ce484222325");
        assert_eq!(head_hash(b"a"), "af63dc4c8601ec8c");
        assert_ne!(head_hash(b"ab"), head_hash(b"ba"));
    }
}
