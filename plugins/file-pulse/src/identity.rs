//! What a listed file is, given its committed offset: the rules that keep every line
//! exactly once when names and inodes are reused, files rotate, shrink, fail or change
//! after they were finished. Pure, so every case is unit-tested natively.
//!
//! A file's partition is its identity (device and inode). Filesystems reuse the inode of
//! a deleted file, so an identity alone does not say "same file": the offset records the
//! size and modification time the file had when it was last read, and
//!
//! - no offset: a new file, read from the start;
//! - an unfinished offset: read on from it, unless the file is now shorter than what was
//!   read (truncated or rewritten, as `copytruncate` does): then it is a new version,
//!   read from the start (the task that opens it also checks its first bytes against the
//!   offset's `head`, and starts the next version when they differ);
//! - a finished offset and the same size and modification time: finished, nothing to
//!   read (only its cleanup, if that did not happen yet);
//! - a finished offset and a changed file:
//!   - `file.completion=eof`: a new version (a new file under a reused inode, or the file
//!     rewritten or appended after it was finished), read again from the start;
//!   - `file.completion=tail`: if it was finished because it was removed, a new file;
//!     else, when it is at least as long as what was read and its first bytes are the
//!     ones read, the same log grew: read on from the offset; otherwise a new version;
//!     and one finished idle with its last line held back (no newline yet) that is now
//!     listed under another name (rotated) is read on, so that line is sent;
//! - a failed offset: left alone while unchanged (under `move` a failed file is moved
//!   away, so finding it in the directory means it was moved back: retried); a changed
//!   one (fixed in place) is retried. A retry reads on from where its records stopped,
//!   so nothing is sent twice;
//! - a missing offset (the task did not find it where it was listed): read on from the
//!   offset, wherever it is now.

use crate::offset::{End, FileOffset};
use crate::settings::{Cleanup, Completion};

/// What the listing sees of a file now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub size: u64,
    /// Nanoseconds since the Unix epoch.
    pub mtime: u64,
}

/// What to do with a listed file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Read it from the start as version `version`.
    Start { version: u32, reason: Option<&'static str> },
    /// Read on from the committed offset (version and attempt unchanged).
    Continue,
    /// Read on from the committed position as the next attempt (retry, or new bytes).
    ReadOn { attempt: u32, reason: &'static str },
    /// Finished and unchanged.
    Finished,
    /// Failed and unchanged: leave it.
    Failed,
}

/// `listed` is the path the file is listed under now. Where the rules need the file's
/// first bytes (tail mode, a finished log that changed): whether they still hash to the
/// offset's `head`.
pub fn decide(
    offset: Option<&FileOffset>,
    seen: Seen,
    listed: &str,
    completion: Completion,
    cleanup: Cleanup,
    head_unchanged: impl Fn(&FileOffset) -> bool,
) -> Decision {
    let Some(offset) = offset else { return Decision::Start { version: 0, reason: None } };
    let compressed = listed.ends_with(".gz");
    let next_version = |reason| Decision::Start { version: offset.version + 1, reason: Some(reason) };
    let read_on = |reason| Decision::ReadOn { attempt: offset.attempt + 1, reason };
    // A .gz position counts decompressed bytes: only its compressed size can be compared.
    let shrank = if compressed { seen.size < offset.size } else { seen.size < offset.position };
    let unchanged = seen.size == offset.size && seen.mtime == offset.mtime;
    // Marked done by hand (`PATCH .../offsets` without the size and modification time the
    // plugin always records): done up to its position, read on from there if it is longer.
    if offset.done && offset.end == End::Eof && offset.size == 0 && offset.mtime == 0 {
        return if seen.size <= offset.position || compressed {
            Decision::Finished
        } else {
            read_on("it is longer than the position an offset set by hand marked done")
        };
    }
    if !offset.done {
        return if shrank {
            next_version("it is shorter than what was read (truncated or rewritten)")
        } else {
            Decision::Continue
        };
    }
    match offset.end {
        End::Missing => read_on("found again after it was missing, or could not be opened"),
        End::Failed if shrank => next_version("it was rewritten after it failed"),
        End::Failed if !unchanged => read_on("it changed after it failed"),
        End::Failed if cleanup == Cleanup::Move => read_on("it was moved back after it failed"),
        End::Failed => Decision::Failed,
        // Finished idle with its last line held back (no newline yet), then renamed away
        // (rotated): read on, so that line is sent once its rotation is over.
        End::Idle if unchanged && offset.position < offset.size && offset.path != listed && !compressed => {
            read_on("rotated with its last line unfinished")
        }
        // Cleaned up once finished, yet its identity is listed again with the same size and
        // modification time: a new file on the reused inode (extracted from an archive, say,
        // with its time kept), unless its first bytes are the ones read (decompressed, for a
        // `.gz`; a file read whole in bytes mode has its head too). Only checked where
        // cleanup removes finished files, so a folder that keeps them pays no read.
        _ if unchanged && cleanup != Cleanup::None && offset.head.is_some() && !head_unchanged(offset) => {
            next_version("a new file took the identity (inode, size and time) of a finished one")
        }
        _ if unchanged => Decision::Finished,
        _ if completion == Completion::Eof => next_version("it changed after it was finished"),
        End::Removed => next_version("a new file took the identity of a removed one"),
        _ if !shrank && !compressed && head_unchanged(offset) => read_on("the finished log grew"),
        _ => next_version("it changed after it was finished"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(end: End, position: u64, size: u64, mtime: u64) -> FileOffset {
        FileOffset { path: "a.log".into(), position, size, mtime, done: true, end, ..FileOffset::default() }
    }

    fn eof(offset: Option<&FileOffset>, seen: Seen, cleanup: Cleanup) -> Decision {
        decide(offset, seen, "a.log", Completion::Eof, cleanup, |_| panic!("eof mode never reads the head"))
    }

    fn seen(size: u64, mtime: u64) -> Seen {
        Seen { size, mtime }
    }

    #[test]
    fn a_new_file_starts_and_an_unfinished_one_reads_on() {
        assert_eq!(eof(None, seen(10, 1), Cleanup::None), Decision::Start { version: 0, reason: None });
        let reading = FileOffset { position: 5, size: 10, mtime: 1, ..FileOffset::default() };
        assert_eq!(eof(Some(&reading), seen(20, 2), Cleanup::None), Decision::Continue);
        // Truncated below what was read (copytruncate): a new version from the start.
        assert!(matches!(eof(Some(&reading), seen(3, 2), Cleanup::None), Decision::Start { version: 1, .. }));
    }

    #[test]
    fn a_finished_file_is_finished_until_it_changes() {
        let finished = done(End::Eof, 10, 10, 1);
        assert_eq!(eof(Some(&finished), seen(10, 1), Cleanup::Delete), Decision::Finished);
        // Same inode, new file (a reused inode): even with the same size, a new mtime.
        assert!(matches!(eof(Some(&finished), seen(10, 2), Cleanup::Delete), Decision::Start { version: 1, .. }));
        // Appended after it was finished, in eof mode: read again as a new version.
        assert!(matches!(eof(Some(&finished), seen(15, 2), Cleanup::None), Decision::Start { version: 1, .. }));
        let second = FileOffset { version: 1, ..finished };
        assert!(matches!(eof(Some(&second), seen(4, 3), Cleanup::None), Decision::Start { version: 2, .. }));
    }

    #[test]
    fn under_cleanup_a_new_file_on_a_reused_inode_with_the_same_size_and_time_is_read() {
        let finished = FileOffset { head: Some("h1".into()), ..done(End::Eof, 10, 10, 1) };
        let decide_with = |cleanup, head_same: bool| {
            decide(Some(&finished), seen(10, 1), "a.log", Completion::Eof, cleanup, |_| head_same)
        };
        assert!(matches!(decide_with(Cleanup::Delete, false), Decision::Start { version: 1, .. }));
        assert!(matches!(decide_with(Cleanup::Move, false), Decision::Start { version: 1, .. }));
        assert_eq!(decide_with(Cleanup::Delete, true), Decision::Finished, "the same file, not cleaned up yet");
        // A `.gz` too (its head is of the decompressed stream).
        let gz = |head_same: bool| {
            decide(Some(&finished), seen(10, 1), "a.log.gz", Completion::Eof, Cleanup::Delete, |_| head_same)
        };
        assert!(matches!(gz(false), Decision::Start { version: 1, .. }));
        assert_eq!(gz(true), Decision::Finished);
        // Without cleanup, finished files stay: their heads are not read on every listing.
        assert_eq!(
            decide(Some(&finished), seen(10, 1), "a.log", Completion::Eof, Cleanup::None, |_| panic!("read")),
            Decision::Finished
        );
    }

    #[test]
    fn an_offset_marked_done_by_hand_is_taken_at_its_word() {
        let by_hand = done(End::Eof, 31, 0, 0);
        assert_eq!(eof(Some(&by_hand), seen(31, 5), Cleanup::None), Decision::Finished);
        assert_eq!(eof(Some(&by_hand), seen(20, 5), Cleanup::None), Decision::Finished, "past its end: done");
        assert!(matches!(eof(Some(&by_hand), seen(40, 5), Cleanup::None), Decision::ReadOn { attempt: 1, .. }));
    }

    #[test]
    fn failed_files_are_retried_from_where_they_stopped() {
        let failed = FileOffset { failed: Some("bad".into()), ..done(End::Failed, 100, 500, 1) };
        assert_eq!(eof(Some(&failed), seen(500, 1), Cleanup::None), Decision::Failed);
        assert_eq!(eof(Some(&failed), seen(500, 1), Cleanup::Delete), Decision::Failed);
        assert!(matches!(eof(Some(&failed), seen(500, 1), Cleanup::Move), Decision::ReadOn { attempt: 1, .. }));
        assert!(matches!(eof(Some(&failed), seen(900, 2), Cleanup::None), Decision::ReadOn { attempt: 1, .. }));
        assert!(matches!(eof(Some(&failed), seen(50, 2), Cleanup::None), Decision::Start { version: 1, .. }));
        let missing = done(End::Missing, 0, 0, 0);
        assert!(matches!(eof(Some(&missing), seen(9, 9), Cleanup::None), Decision::ReadOn { attempt: 1, .. }));
    }

    #[test]
    fn tail_mode_tells_a_grown_log_from_a_new_file() {
        let tail = |offset: &FileOffset, seen: Seen, head_same: bool| {
            decide(Some(offset), seen, "a.log", Completion::Tail, Cleanup::None, |_| head_same)
        };
        let idle = done(End::Idle, 10, 10, 1);
        assert_eq!(tail(&idle, seen(10, 1), true), Decision::Finished);
        assert!(matches!(tail(&idle, seen(20, 2), true), Decision::ReadOn { attempt: 1, .. }));
        assert!(matches!(tail(&idle, seen(20, 2), false), Decision::Start { version: 1, .. }));
        assert!(matches!(tail(&idle, seen(5, 2), true), Decision::Start { version: 1, .. }));
        let rotated = done(End::Rotated, 10, 10, 1);
        assert!(matches!(tail(&rotated, seen(30, 2), true), Decision::ReadOn { .. }));
        // Removed, then the inode came back: always a new file.
        let removed = done(End::Removed, 10, 10, 1);
        assert!(matches!(tail(&removed, seen(30, 2), true), Decision::Start { version: 1, .. }));
        // Finished idle holding back a last line without newline (8 of 10 bytes sent):
        // under its name it is finished; renamed away, it is read on to send that line.
        let holding = done(End::Idle, 8, 10, 1);
        assert_eq!(tail(&holding, seen(10, 1), true), Decision::Finished);
        let renamed = decide(Some(&holding), seen(10, 1), "a.log.1", Completion::Tail, Cleanup::None, |_| true);
        assert!(matches!(renamed, Decision::ReadOn { attempt: 1, .. }), "{renamed:?}");
    }

    #[test]
    fn compressed_files_compare_their_compressed_size() {
        let reading = FileOffset { position: 5000, size: 100, mtime: 1, ..FileOffset::default() };
        assert_eq!(
            decide(Some(&reading), seen(100, 1), "a.log.gz", Completion::Eof, Cleanup::None, |_| true),
            Decision::Continue
        );
        assert!(matches!(
            decide(Some(&reading), seen(50, 2), "a.log.gz", Completion::Eof, Cleanup::None, |_| true),
            Decision::Start { version: 1, .. }
        ));
    }
}
