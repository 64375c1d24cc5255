//! The embedded default backend: one SQLite database (`sluice.db` in the data directory)
//! holding committed offsets, connector and task configs, statuses and the `local`
//! destination's records. WAL mode: readers (`sluice offsets`, `sluice topics`) never block
//! the writer, and a transaction that returned is in the WAL file, so a killed process
//! loses nothing it committed. Only [`super::Stores`] opens it.
//!
//! Two connections: the writer (records, offsets, configs, statuses) and a reader for
//! lookups, so a plugin's offset lookup never waits for, nor holds up, a delivery; and,
//! once records are appended, a third on a thread of its own that checkpoints the WAL
//! (copies its pages into the database file) while the writer goes on appending.
//! Write transactions begin IMMEDIATE: one that began as a read and then wrote would fail
//! at once (SQLITE_BUSY, "database is locked", without waiting) whenever another process
//! on the same data, such as `sluice topics read` opening it, had written meanwhile.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::destinations::{CommitGate, DeliveryAbandoned};

use super::model::{ActiveTopic, ConnectorStatus, Record, StoredRecord, TargetState, Text};
use super::{ConfigStore, Namespace, OffsetStore, RecordBatch, RecordLog, StatusStore, StoredConnector};

pub struct SqliteStore {
    writer: Mutex<Connection>,
    reader: Mutex<Connection>,
    path: PathBuf,
    checkpoints: Checkpoints,
}

/// Pages of the local log appended between two checkpoints on the checkpoint thread: what
/// SQLite's own automatic checkpoint waits for (1,000 pages, here of 16 KiB).
const CHECKPOINT_EVERY_BYTES: u64 = 1000 * 16384;

/// The writer's own automatic checkpoint, in pages: only when the checkpoint thread did not
/// keep up (or nothing woke it), so the WAL stays below 64 MiB. While the writer appends,
/// the thread's checkpoints cannot empty the WAL (more is written as they copy), so the
/// WAL starts over from its beginning after each of these.
const WRITER_CHECKPOINT_PAGES: u32 = 4000;

/// Copies appended pages from the WAL into the database file (a checkpoint) on a thread of
/// its own, with a connection of its own, so the thread appending records does not stop
/// to do it: the copy and its syncs were about a seventh of an append's time (perf,
/// file-pulse streaming into `local`). A PASSIVE checkpoint, as SQLite's automatic one:
/// it never waits for, nor holds up, a writer or a reader. Started with the first batch
/// of records that owes one, so a store that only reads (`sluice offsets`) starts none.
struct Checkpoints {
    shared: Arc<CheckpointState>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[derive(Default)]
struct CheckpointState {
    owed: Mutex<Owed>,
    wake: std::sync::Condvar,
}

#[derive(Default)]
struct Owed {
    /// Bytes of records appended since the thread was last woken.
    bytes: u64,
    /// A checkpoint is due.
    due: bool,
    /// The store is closing: the thread ends.
    closing: bool,
}

impl Checkpoints {
    fn new() -> Checkpoints {
        Checkpoints { shared: Arc::default(), thread: Mutex::new(None) }
    }

    /// `bytes` of records were committed: wakes the thread (starting it the first time)
    /// once [`CHECKPOINT_EVERY_BYTES`] are owed.
    fn appended(&self, bytes: u64, database: &Path) {
        {
            let mut owed = self.shared.owed.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            owed.bytes += bytes;
            if owed.bytes < CHECKPOINT_EVERY_BYTES {
                return;
            }
            owed.bytes = 0;
            owed.due = true;
        }
        let mut thread = self.thread.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if thread.is_none() {
            let (shared, database) = (self.shared.clone(), database.to_path_buf());
            let spawned = std::thread::Builder::new()
                .name("sluice-checkpoint".into())
                .spawn(move || checkpoint_when_woken(&shared, &database));
            match spawned {
                Ok(handle) => *thread = Some(handle),
                // The writer's own checkpoint still runs (WRITER_CHECKPOINT_PAGES).
                Err(e) => tracing::warn!("cannot start the checkpoint thread: {e}"),
            }
        }
        self.shared.wake.notify_one();
    }
}

impl Drop for Checkpoints {
    fn drop(&mut self) {
        self.shared.owed.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).closing = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner()).take() {
            let _ = thread.join();
        }
    }
}

fn checkpoint_when_woken(shared: &CheckpointState, database: &Path) {
    let conn = match Connection::open(database) {
        Ok(conn) => conn,
        Err(e) => return tracing::warn!("the checkpoint thread cannot open {}: {e}", database.display()),
    };
    let _ = conn.busy_timeout(BUSY_TIMEOUT);
    loop {
        {
            let mut owed = shared.owed.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            while !owed.due && !owed.closing {
                owed = shared.wake.wait(owed).unwrap_or_else(|poisoned| poisoned.into_inner());
            }
            if owed.closing {
                return;
            }
            owed.due = false;
        }
        // A failure (a full disk) leaves the pages in the WAL, where they are safe; the
        // next checkpoint, here or the writer's, copies them.
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!("checkpoint of {} failed: {e}", database.display());
        }
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS offsets (
    tenant TEXT NOT NULL, connector TEXT NOT NULL, partition TEXT NOT NULL, offset TEXT NOT NULL,
    PRIMARY KEY (tenant, connector, partition));
CREATE TABLE IF NOT EXISTS connector_configs (
    tenant TEXT NOT NULL, connector TEXT NOT NULL, config TEXT NOT NULL,
    PRIMARY KEY (tenant, connector));
CREATE TABLE IF NOT EXISTS task_configs (
    tenant TEXT NOT NULL, connector TEXT NOT NULL, task INTEGER NOT NULL, config TEXT NOT NULL,
    PRIMARY KEY (tenant, connector, task));
CREATE TABLE IF NOT EXISTS target_states (
    tenant TEXT NOT NULL, connector TEXT NOT NULL, state TEXT NOT NULL,
    PRIMARY KEY (tenant, connector));
CREATE TABLE IF NOT EXISTS statuses (
    tenant TEXT NOT NULL, connector TEXT NOT NULL, status TEXT NOT NULL,
    PRIMARY KEY (tenant, connector));
CREATE TABLE IF NOT EXISTS active_topics (
    tenant TEXT NOT NULL, connector TEXT NOT NULL, topic TEXT NOT NULL, task INTEGER NOT NULL,
    discovered_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant, connector, topic));
CREATE TABLE IF NOT EXISTS log_topics (
    id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, topic TEXT NOT NULL, next_offset INTEGER NOT NULL,
    UNIQUE (tenant, topic));
CREATE TABLE IF NOT EXISTS log_sources (
    id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, connector TEXT NOT NULL, partition TEXT NOT NULL,
    UNIQUE (tenant, connector, partition));
CREATE TABLE IF NOT EXISTS log (
    id INTEGER PRIMARY KEY, source INTEGER NOT NULL, offset TEXT NOT NULL,
    key BLOB, value BLOB, headers BLOB NOT NULL, timestamp_ms INTEGER NOT NULL);
";

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`.
    pub(super) fn open(path: &Path) -> anyhow::Result<Self> {
        let mut conn = Connection::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // 16 KiB pages (a new database only; an existing one keeps its own): the local
        // log's appends fill a fresh page every ~100 rows instead of every ~27, and the
        // WAL is checkpointed every 16 MiB instead of every 4 MiB. `sluice-bench files`,
        // alternating runs, `log alone` against native SQLite: 1.20-1.61 -> 1.06-1.15.
        conn.pragma_update(None, "page_size", 16384)?;
        use_wal(&conn).with_context(|| format!("cannot open {}", path.display()))?;
        let reader = Connection::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        reader.busy_timeout(BUSY_TIMEOUT)?;
        // NORMAL in WAL mode: a committed transaction survives a killed process; a power
        // loss may drop the last transactions but never splits one, so records and their
        // offsets stay consistent either way.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "wal_autocheckpoint", WRITER_CHECKPOINT_PAGES)?;
        conn.execute_batch(SCHEMA).with_context(|| format!("cannot set up {}", path.display()))?;
        migrate_record_log(&mut conn)
            .with_context(|| format!("cannot move the local log of {} to its new form", path.display()))?;
        make_disk_reserve(&disk_reserve_path(path));
        Ok(SqliteStore {
            writer: Mutex::new(conn),
            reader: Mutex::new(reader),
            path: path.to_path_buf(),
            checkpoints: Checkpoints::new(),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite consistent (transactions roll back).
        self.writer.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn reader(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.reader.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// An operator's change (a connector's config, target state, task configs, deletion,
    /// an offset deleted), written through the writer connection. When the disk is full,
    /// the data directory's reserve is freed and the change written again, once: a
    /// connector that filled the disk with records can still be paused, reconfigured or
    /// deleted (the writer's lock is held throughout, so no append of this worker takes
    /// the freed space first).
    fn change<T>(&self, write: impl Fn(&mut Connection) -> rusqlite::Result<T>) -> anyhow::Result<T> {
        let mut conn = self.conn();
        match write(&mut conn) {
            Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) && self.free_disk_reserve() => {
                write(&mut conn).map_err(|e| self.write_error(e))
            }
            result => result.map_err(|e| self.write_error(e)),
        }
    }

    /// Removes the disk reserve: whether there was one.
    fn free_disk_reserve(&self) -> bool {
        let reserve = disk_reserve_path(&self.path);
        let freed = std::fs::remove_file(&reserve).is_ok();
        if freed {
            tracing::warn!(
                "the disk holding the data directory {} is full: its reserve ({}, {} MiB) was freed to save a change to a connector; free space (the reserve is made again at the next start)",
                self.path.parent().unwrap_or(&self.path).display(),
                reserve.display(),
                DISK_RESERVE_BYTES >> 20
            );
        }
        freed
    }

    /// A write that failed, in plain words when the disk is full (the transaction rolled
    /// back: nothing of it was committed).
    fn write_error(&self, error: rusqlite::Error) -> anyhow::Error {
        if error.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) {
            let dir = self.path.parent().unwrap_or(&self.path);
            return anyhow::anyhow!(
                "the disk holding the data directory {} is full: nothing of this write was committed; free space",
                dir.display()
            );
        }
        error.into()
    }
}

/// How long a connection waits for another process's lock (a reader such as `sluice
/// topics read` beside a running worker) before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The space a data directory keeps aside for operators' changes once its disk is full
/// (a change writes a few 16 KiB pages).
const DISK_RESERVE_BYTES: u64 = 2 << 20;

/// The reserve's file, beside the database.
fn disk_reserve_path(database: &Path) -> PathBuf {
    database.with_file_name("disk-reserve")
}

/// Makes the disk reserve if it is not there whole: written (not a sparse file, which
/// would hold no blocks), under a temporary name first. Best effort: on a full or
/// read-only disk there is none, and a full disk then refuses changes as it refuses
/// records.
fn make_disk_reserve(reserve: &Path) {
    if std::fs::metadata(reserve).is_ok_and(|m| m.len() >= DISK_RESERVE_BYTES) {
        return;
    }
    let partial = reserve.with_extension(format!("partial-{}", std::process::id()));
    let written = std::fs::write(&partial, vec![0u8; DISK_RESERVE_BYTES as usize])
        .and_then(|()| std::fs::File::open(&partial)?.sync_all())
        .and_then(|()| std::fs::rename(&partial, reserve));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&partial);
        tracing::debug!("no disk reserve in {}: {e}", reserve.display());
    }
}

/// Puts the database in WAL mode. SQLite does not wait on a busy database for this pragma
/// (the busy timeout does not apply), and a new database is briefly locked by whichever
/// process creates its first page: `sluice run` on a fresh data directory failed with
/// "database is locked" when a reader opened it at the same moment. So retry here.
fn use_wal(conn: &Connection) -> rusqlite::Result<()> {
    let started = std::time::Instant::now();
    loop {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Err(e)
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && started.elapsed() < BUSY_TIMEOUT =>
            {
                std::thread::sleep(Duration::from_millis(2));
            }
            result => return result,
        }
    }
}

/// The local log's rows are keyed by topic and offset in one integer, so appending is one
/// b-tree append and a topic is read as a range of keys: the topic's id in the high bits,
/// the record's offset in the topic in the low [`OFFSET_BITS`].
const OFFSET_BITS: u32 = 40;

fn log_key(topic_id: i64, topic_offset: i64) -> i64 {
    (topic_id << OFFSET_BITS) | topic_offset
}

/// Moves a local log of the first form (`records` with a row per record naming its tenant,
/// topic, connector and partition, and an index on them; `topics`) into the current one,
/// once, in one transaction.
fn migrate_record_log(conn: &mut Connection) -> rusqlite::Result<()> {
    let old: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'records')",
        [],
        |row| row.get(0),
    )?;
    if !old {
        return Ok(());
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(&format!(
        "INSERT INTO log_topics (tenant, topic, next_offset) SELECT tenant, topic, next_offset FROM topics;
         INSERT OR IGNORE INTO log_sources (tenant, connector, partition)
             SELECT DISTINCT tenant, connector, partition FROM records;
         INSERT INTO log (id, source, offset, key, value, headers, timestamp_ms)
             SELECT (t.id << {OFFSET_BITS}) | r.topic_offset, s.id, r.offset, r.key, r.value, r.headers, r.timestamp_ms
             FROM records r
             JOIN log_topics t ON t.tenant = r.tenant AND t.topic = r.topic
             JOIN log_sources s ON s.tenant = r.tenant AND s.connector = r.connector AND s.partition = r.partition;
         DROP TABLE records;
         DROP TABLE topics;"
    ))?;
    tx.commit()
}

fn upsert_offsets(
    tx: &rusqlite::Transaction<'_>,
    ns: &Namespace,
    offsets: &[(String, String)],
) -> rusqlite::Result<()> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO offsets (tenant, connector, partition, offset) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (tenant, connector, partition) DO UPDATE SET offset = excluded.offset",
    )?;
    for (partition, offset) in offsets {
        stmt.execute(params![ns.tenant, ns.connector, partition, offset])?;
    }
    Ok(())
}

/// Appends records and commits the offsets they advance, in one transaction, which
/// `gate` may refuse to commit (then it rolls back).
fn append(
    conn: &mut Connection,
    ns: &Namespace,
    records: &RecordBatch,
    offsets: &[(String, String)],
    gate: &CommitGate,
) -> rusqlite::Result<Result<(), DeliveryAbandoned>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    {
        let mut topic_of =
            tx.prepare_cached("SELECT id, next_offset FROM log_topics WHERE tenant = ?1 AND topic = ?2")?;
        let mut new_topic =
            tx.prepare_cached("INSERT INTO log_topics (tenant, topic, next_offset) VALUES (?1, ?2, 0) RETURNING id")?;
        let mut set_next = tx.prepare_cached("UPDATE log_topics SET next_offset = ?2 WHERE id = ?1")?;
        let mut source_of =
            tx.prepare_cached("SELECT id FROM log_sources WHERE tenant = ?1 AND connector = ?2 AND partition = ?3")?;
        let mut new_source = tx.prepare_cached(
            "INSERT INTO log_sources (tenant, connector, partition) VALUES (?1, ?2, ?3) RETURNING id",
        )?;
        let mut insert = tx.prepare_cached(
            "INSERT INTO log (id, source, offset, key, value, headers, timestamp_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?;
        // A batch has few topics and partitions: each is looked up once.
        // Per topic: its name, id and next offset, and the source, delta chain length and
        // source offset of the row this append wrote last, with its key and headers as one
        // body (the next row is stored against them).
        type LastRow<'a> = Option<(i64, u32, &'a str)>;
        let mut topics: Vec<(&str, i64, i64, LastRow, Vec<u8>)> = Vec::new();
        let mut sources: Vec<(&str, i64)> = Vec::new();
        let (mut body, mut offset_delta, mut body_delta) = (Vec::new(), Vec::new(), Vec::new());
        let mut largest_key: Option<i64> =
            tx.prepare_cached("SELECT max(id) FROM log")?.query_row([], |row| row.get(0))?;
        for record in records.iter() {
            let topic = match topics.iter().position(|(name, ..)| *name == record.topic) {
                Some(index) => index,
                None => {
                    let found = topic_of
                        .query_row(params![ns.tenant, record.topic], |r| Ok((r.get(0)?, r.get(1)?)))
                        .optional()?;
                    let (id, next) = match found {
                        Some(found) => found,
                        None => (new_topic.query_row(params![ns.tenant, record.topic], |r| r.get(0))?, 0),
                    };
                    topics.push((record.topic, id, next, None, Vec::new()));
                    topics.len() - 1
                }
            };
            let source = match sources.iter().find(|(partition, _)| *partition == record.partition) {
                Some((_, id)) => *id,
                None => {
                    let key = params![ns.tenant, ns.connector, record.partition];
                    let id = match source_of.query_row(key, |r| r.get(0)).optional()? {
                        Some(id) => id,
                        None => new_source.query_row(key, |r| r.get(0))?,
                    };
                    sources.push((record.partition, id));
                    id
                }
            };
            let (_, topic_id, next, last_row, last_body) = &mut topics[topic];
            if *next >= 1 << OFFSET_BITS {
                return Err(rusqlite::Error::ToSqlConversionFailure(
                    format!("topic {} of the local log is full ({next} records)", record.topic).into(),
                ));
            }
            let headers_at = encode_body(record.key, record.headers().map(|(k, v)| (k.as_bytes(), v)), &mut body);
            // Bound one by one: `params!` boxes each value as a `dyn ToSql` per row.
            // The log's next key, as SQLite would choose it (the largest plus one), is left
            // to SQLite: it then finds the end of the table without searching for the key.
            let key = log_key(*topic_id, *next);
            if largest_key == Some(key - 1) {
                insert.raw_bind_parameter(1, None::<i64>)?;
            } else {
                insert.raw_bind_parameter(1, key)?;
            }
            largest_key = largest_key.max(Some(key));
            insert.raw_bind_parameter(2, source)?;
            let in_full = |insert: &mut rusqlite::CachedStatement<'_>| {
                insert.raw_bind_parameter(4, record.key)?;
                insert.raw_bind_parameter(6, &body[headers_at..])
            };
            let chain = match *last_row {
                Some((last_source, chain, before))
                    if last_source == source
                        && chain < ANCHOR_EVERY
                        && encode_delta(before.as_bytes(), record.offset.as_bytes(), &[], &mut offset_delta) =>
                {
                    insert.raw_bind_parameter(3, offset_delta.as_slice())?;
                    let in_full_len = record.key.as_ref().map_or(0, |key| key.len()) + body.len() - headers_at;
                    if encode_delta(last_body, &body, &BODY_DELTA, &mut body_delta) && body_delta.len() < in_full_len {
                        insert.raw_bind_parameter(4, None::<&[u8]>)?;
                        insert.raw_bind_parameter(6, body_delta.as_slice())?;
                    } else {
                        in_full(&mut insert)?;
                    }
                    chain + 1
                }
                _ => {
                    insert.raw_bind_parameter(3, record.offset)?;
                    in_full(&mut insert)?;
                    0
                }
            };
            *last_row = Some((source, chain, record.offset));
            std::mem::swap(last_body, &mut body);
            insert.raw_bind_parameter(5, record.value)?;
            insert.raw_bind_parameter(7, record.timestamp_ms)?;
            insert.raw_execute()?;
            *next += 1;
        }
        for (_, id, next, ..) in topics {
            set_next.execute(params![id, next])?;
        }
    }
    upsert_offsets(&tx, ns, offsets)?;
    // Refused: the transaction is dropped, so it rolls back.
    match gate.commit(|| tx.commit()) {
        Ok(committed) => committed.map(Ok),
        Err(abandoned) => Ok(Err(abandoned)),
    }
}

/// At most this many rows in a row store their source offset as a delta, so a read that
/// starts within a batch looks back at most this far for the offset in full.
const ANCHOR_EVERY: u32 = 255;

/// Marks a row's headers column as holding its key and headers as one delta against the
/// row before it (its key column is then NULL). Headers stored in full cannot start with
/// these bytes: they start with the first header key's length, and no key is 4 GiB long.
const BODY_DELTA: [u8; 4] = [0xff; 4];

/// Writes into `out` `prefix`, then the delta that [`decode_delta`] turns `before` into
/// `after` with: the lengths (LEB128) of the prefix and of the suffix the two share, then
/// the bytes of `after` between them. A batch's consecutive records of one source differ
/// in a few bytes (file-pulse's offsets in `position` and `line`, its headers in
/// `file.line`), so a row stores those rather than the whole offset, key and headers
/// again. False when the delta (without `prefix`) would not be shorter than `after`.
fn encode_delta(before: &[u8], after: &[u8], prefix: &[u8], out: &mut Vec<u8>) -> bool {
    let shared = common_prefix(before, after);
    let suffix = common_suffix(&before[shared..], &after[shared..]);
    out.clear();
    out.extend_from_slice(prefix);
    for mut length in [shared, suffix] {
        while length >= 0x80 {
            out.push((length as u8) | 0x80);
            length >>= 7;
        }
        out.push(length as u8);
    }
    out.extend_from_slice(&after[shared..after.len() - suffix]);
    out.len() - prefix.len() < after.len()
}

/// How many leading bytes `a` and `b` share. Eight at a time: a byte loop over each
/// record's offset and body was the local log's largest cost of its own.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let len = a.len().min(b.len());
    let word = |bytes: &[u8], at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight bytes"));
    let mut at = 0;
    while at + 8 <= len {
        let differ = word(a, at) ^ word(b, at);
        if differ != 0 {
            // Little-endian: the first differing byte is the lowest set one.
            return at + (differ.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    at + a[at..len].iter().zip(&b[at..len]).take_while(|(x, y)| x == y).count()
}

/// How many trailing bytes `a` and `b` share, eight at a time.
fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    let len = a.len().min(b.len());
    let (a, b) = (&a[a.len() - len..], &b[b.len() - len..]);
    let word = |bytes: &[u8], end: usize| u64::from_le_bytes(bytes[end - 8..end].try_into().expect("eight bytes"));
    let mut shared = 0;
    while shared + 8 <= len {
        let differ = word(a, len - shared) ^ word(b, len - shared);
        if differ != 0 {
            // Little-endian: the last differing byte is the highest set one.
            return shared + (differ.leading_zeros() / 8) as usize;
        }
        shared += 8;
    }
    let rest = len - shared;
    shared + a[..rest].iter().rev().zip(b[..rest].iter().rev()).take_while(|(x, y)| x == y).count()
}

/// What a row stored as `delta` against `before` (the same part of the row before it) is.
fn decode_delta(before: &[u8], mut delta: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut length = || -> anyhow::Result<usize> {
        let (mut value, mut shift) = (0usize, 0);
        loop {
            let (&byte, rest) = delta.split_first().context("a delta cut short")?;
            delta = rest;
            anyhow::ensure!(shift < usize::BITS, "a delta with an overlong length");
            value |= usize::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(value);
            }
            shift += 7;
        }
    };
    let (prefix, suffix) = (length()?, length()?);
    anyhow::ensure!(prefix + suffix <= before.len(), "a delta longer than what it is against");
    let mut after = Vec::with_capacity(prefix + delta.len() + suffix);
    after.extend_from_slice(&before[..prefix]);
    after.extend_from_slice(delta);
    after.extend_from_slice(&before[before.len() - suffix..]);
    Ok(after)
}

fn decode_offset_delta(before: &str, delta: &[u8]) -> anyhow::Result<String> {
    String::from_utf8(decode_delta(before.as_bytes(), delta)?).context("an offset delta that does not make UTF-8")
}

/// A record's headers as stored: for each, the key's and the value's length (4 bytes,
/// little-endian) each followed by its bytes. Rows written before this form hold the
/// headers as JSON text, which [`decode_headers`] still reads.
fn encode_headers<'a>(headers: impl IntoIterator<Item = (&'a [u8], &'a [u8])>, out: &mut Vec<u8>) {
    for (key, value) in headers {
        put_part(out, key);
        put_part(out, value);
    }
}

/// One length-prefixed part of a body: its length (4 bytes, little-endian), its bytes.
fn put_part(out: &mut Vec<u8>, part: &[u8]) {
    out.extend_from_slice(&(part.len() as u32).to_le_bytes());
    out.extend_from_slice(part);
}

/// The part [`put_part`] wrote at the start of `rest`, which moves past it.
fn take_part<'a>(rest: &mut &'a [u8], what: &str) -> anyhow::Result<&'a [u8]> {
    let (length, after) = rest.split_first_chunk::<4>().with_context(|| format!("{what} cut short"))?;
    let length = u32::from_le_bytes(*length) as usize;
    anyhow::ensure!(after.len() >= length, "{what} cut short");
    let (part, after) = after.split_at(length);
    *rest = after;
    Ok(part)
}

/// A record's key and headers as one byte string (its body), which the next row's delta
/// is against: a tag (0: no key, 1: a key, then its length as 4 bytes, little-endian, and
/// its bytes), then the headers as [`encode_headers`] stores them. Returns where the
/// headers start.
fn encode_body<'a>(
    key: Option<&[u8]>,
    headers: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    out: &mut Vec<u8>,
) -> usize {
    out.clear();
    match key {
        None => out.push(0),
        Some(key) => {
            out.push(1);
            put_part(out, key);
        }
    }
    let headers_at = out.len();
    encode_headers(headers, out);
    headers_at
}

/// A record's key and headers.
type Body = (Option<Bytes>, Vec<(Text, Bytes)>);

/// The key and headers of a body made by [`encode_body`].
fn decode_body(body: &[u8]) -> anyhow::Result<Body> {
    let (key, headers) = match body.split_first() {
        Some((0, rest)) => (None, rest),
        Some((1, mut rest)) => (Some(Bytes::copy_from_slice(take_part(&mut rest, "a key")?)), rest),
        _ => anyhow::bail!("a record body without its key tag"),
    };
    Ok((key, decode_headers(ValueRef::Blob(headers))?))
}

fn decode_headers(stored: ValueRef<'_>) -> anyhow::Result<Vec<(Text, Bytes)>> {
    let mut rest = match stored {
        ValueRef::Text(json) => {
            let headers: Vec<(String, Vec<u8>)> = serde_json::from_slice(json)?;
            return Ok(headers.into_iter().map(|(k, v)| (Text::from(k), Bytes::from(v))).collect());
        }
        ValueRef::Blob(blob) => blob,
        other => anyhow::bail!("headers stored as {:?}", other.data_type()),
    };
    let mut headers = Vec::new();
    while !rest.is_empty() {
        let key =
            String::from_utf8(take_part(&mut rest, "headers")?.to_vec()).context("a header key that is not UTF-8")?;
        headers.push((Text::from(key), Bytes::copy_from_slice(take_part(&mut rest, "headers")?)));
    }
    Ok(headers)
}

/// The committed offsets of `partitions`, in one read transaction: one snapshot, and the
/// WAL's read lock taken once rather than once per partition.
fn read_offsets(conn: &Connection, ns: &Namespace, partitions: &[String]) -> anyhow::Result<Vec<Option<String>>> {
    let tx = conn.unchecked_transaction()?;
    let found = {
        let mut stmt =
            tx.prepare_cached("SELECT offset FROM offsets WHERE tenant = ?1 AND connector = ?2 AND partition = ?3")?;
        partitions
            .iter()
            .map(|p| Ok(stmt.query_row(params![ns.tenant, ns.connector, p], |row| row.get(0)).optional()?))
            .collect::<anyhow::Result<Vec<Option<String>>>>()?
    };
    tx.commit()?;
    Ok(found)
}

impl OffsetStore for SqliteStore {
    fn offsets(&self, ns: &Namespace, partitions: &[String]) -> anyhow::Result<Vec<Option<String>>> {
        read_offsets(&self.reader(), ns, partitions)
    }

    /// The reader when no one holds it: a few rows of a table the page cache holds.
    fn offsets_at_once(&self, ns: &Namespace, partitions: &[String]) -> Option<anyhow::Result<Vec<Option<String>>>> {
        let conn = match self.reader.try_lock() {
            Ok(conn) => conn,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        Some(read_offsets(&conn, ns, partitions))
    }

    fn commit_offsets(&self, ns: &Namespace, offsets: &[(String, String)]) -> anyhow::Result<()> {
        let mut conn = self.conn();
        let commit = |conn: &mut Connection| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            upsert_offsets(&tx, ns, offsets)?;
            tx.commit()
        };
        commit(&mut conn).map_err(|e| self.write_error(e))
    }

    fn all_offsets(&self, ns: &Namespace) -> anyhow::Result<Vec<(String, String)>> {
        let conn = self.reader();
        let mut stmt = conn.prepare_cached(
            "SELECT partition, offset FROM offsets WHERE tenant = ?1 AND connector = ?2 ORDER BY partition",
        )?;
        let rows = stmt.query_map(params![ns.tenant, ns.connector], |row| Ok((row.get(0)?, row.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn delete_offset(&self, ns: &Namespace, partition: &str) -> anyhow::Result<bool> {
        let n = self.change(|conn| {
            conn.execute(
                "DELETE FROM offsets WHERE tenant = ?1 AND connector = ?2 AND partition = ?3",
                params![ns.tenant, ns.connector, partition],
            )
        })?;
        Ok(n > 0)
    }
}

impl ConfigStore for SqliteStore {
    fn put_connector_config(&self, ns: &Namespace, config: &[(String, String)]) -> anyhow::Result<()> {
        let text = serde_json::to_string(&config.iter().cloned().collect::<std::collections::BTreeMap<_, _>>())?;
        self.change(|conn| {
            conn.execute(
                "INSERT INTO connector_configs (tenant, connector, config) VALUES (?1, ?2, ?3)
                 ON CONFLICT (tenant, connector) DO UPDATE SET config = excluded.config",
                params![ns.tenant, ns.connector, text],
            )
        })?;
        Ok(())
    }

    fn connectors(&self, tenant: &str) -> anyhow::Result<Vec<String>> {
        let conn = self.reader();
        let mut stmt =
            conn.prepare_cached("SELECT connector FROM connector_configs WHERE tenant = ?1 ORDER BY connector")?;
        let rows = stmt.query_map(params![tenant], |row| row.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn connector_config(&self, ns: &Namespace) -> anyhow::Result<Option<Vec<(String, String)>>> {
        let conn = self.reader();
        let text: Option<String> = conn
            .query_row(
                "SELECT config FROM connector_configs WHERE tenant = ?1 AND connector = ?2",
                params![ns.tenant, ns.connector],
                |row| row.get(0),
            )
            .optional()?;
        text.map(|text| {
            let map: std::collections::BTreeMap<String, String> = serde_json::from_str(&text)?;
            Ok(map.into_iter().collect())
        })
        .transpose()
    }

    fn stored_connectors(&self) -> anyhow::Result<Vec<StoredConnector>> {
        let conn = self.reader();
        let mut stmt = conn.prepare_cached(
            "SELECT c.tenant, c.connector, c.config, t.state FROM connector_configs c
             LEFT JOIN target_states t ON t.tenant = c.tenant AND t.connector = c.connector
             ORDER BY c.tenant, c.connector",
        )?;
        let rows = stmt.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, Option<String>>(3)?,
            ))
        })?;
        rows.map(|row| {
            let (tenant, connector, config, state) = row?;
            let config: std::collections::BTreeMap<String, String> = serde_json::from_str(&config)?;
            let state = match state {
                Some(state) => serde_json::from_value(serde_json::Value::String(state))?,
                None => TargetState::Started,
            };
            Ok((Namespace::new(tenant, connector), config.into_iter().collect(), state))
        })
        .collect()
    }

    fn put_target_state(&self, ns: &Namespace, state: TargetState) -> anyhow::Result<()> {
        let text = serde_json::to_value(state)?.as_str().unwrap_or_default().to_string();
        self.change(|conn| {
            conn.execute(
                "INSERT INTO target_states (tenant, connector, state) VALUES (?1, ?2, ?3)
                 ON CONFLICT (tenant, connector) DO UPDATE SET state = excluded.state",
                params![ns.tenant, ns.connector, text],
            )
        })?;
        Ok(())
    }

    fn delete_connector(&self, ns: &Namespace) -> anyhow::Result<()> {
        self.change(|conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            for table in ["connector_configs", "task_configs", "target_states", "statuses", "active_topics"] {
                tx.execute(
                    &format!("DELETE FROM {table} WHERE tenant = ?1 AND connector = ?2"),
                    params![ns.tenant, ns.connector],
                )?;
            }
            tx.commit()
        })
    }

    fn tenants(&self) -> anyhow::Result<Vec<String>> {
        let conn = self.reader();
        let mut stmt = conn.prepare_cached("SELECT DISTINCT tenant FROM connector_configs ORDER BY tenant")?;
        let rows = stmt.query_map([], |row| row.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn put_task_configs(&self, ns: &Namespace, tasks: &[Vec<(String, String)>]) -> anyhow::Result<()> {
        let texts = tasks.iter().map(serde_json::to_string).collect::<Result<Vec<_>, _>>()?;
        self.change(|conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute(
                "DELETE FROM task_configs WHERE tenant = ?1 AND connector = ?2",
                params![ns.tenant, ns.connector],
            )?;
            for (i, text) in texts.iter().enumerate() {
                tx.execute(
                    "INSERT INTO task_configs (tenant, connector, task, config) VALUES (?1, ?2, ?3, ?4)",
                    params![ns.tenant, ns.connector, i as i64, text],
                )?;
            }
            tx.commit()
        })
    }

    fn task_configs(&self, ns: &Namespace) -> anyhow::Result<Vec<Vec<(String, String)>>> {
        let conn = self.reader();
        let mut stmt =
            conn.prepare_cached("SELECT config FROM task_configs WHERE tenant = ?1 AND connector = ?2 ORDER BY task")?;
        let rows = stmt.query_map(params![ns.tenant, ns.connector], |row| row.get::<_, String>(0))?;
        rows.map(|text| Ok(serde_json::from_str(&text?)?)).collect()
    }
}

impl StatusStore for SqliteStore {
    fn put_status(&self, ns: &Namespace, status: &ConnectorStatus) -> anyhow::Result<()> {
        self.conn().execute(
            "INSERT INTO statuses (tenant, connector, status) VALUES (?1, ?2, ?3)
             ON CONFLICT (tenant, connector) DO UPDATE SET status = excluded.status",
            params![ns.tenant, ns.connector, serde_json::to_string(status)?],
        )?;
        Ok(())
    }

    fn statuses(&self, tenant: &str) -> anyhow::Result<Vec<ConnectorStatus>> {
        let conn = self.reader();
        let mut stmt = conn.prepare_cached("SELECT status FROM statuses WHERE tenant = ?1 ORDER BY connector")?;
        let rows = stmt.query_map(params![tenant], |row| row.get::<_, String>(0))?;
        rows.map(|text| Ok(serde_json::from_str(&text?)?)).collect()
    }

    fn put_active_topic(&self, ns: &Namespace, topic: &ActiveTopic) -> anyhow::Result<()> {
        // The first writer's task and time stay, as Connect keeps the first TopicStatus.
        self.conn().execute(
            "INSERT INTO active_topics (tenant, connector, topic, task, discovered_ms) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (tenant, connector, topic) DO NOTHING",
            params![ns.tenant, ns.connector, topic.name, topic.task, topic.discovered_ms],
        )?;
        Ok(())
    }

    fn active_topics(&self, ns: &Namespace) -> anyhow::Result<Vec<ActiveTopic>> {
        let conn = self.reader();
        let mut stmt = conn.prepare_cached(
            "SELECT topic, task, discovered_ms FROM active_topics WHERE tenant = ?1 AND connector = ?2 ORDER BY topic",
        )?;
        let rows = stmt.query_map(params![ns.tenant, ns.connector], |row| {
            Ok(ActiveTopic { name: row.get(0)?, task: row.get(1)?, discovered_ms: row.get(2)? })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn reset_active_topics(&self, ns: &Namespace) -> anyhow::Result<()> {
        self.conn().execute(
            "DELETE FROM active_topics WHERE tenant = ?1 AND connector = ?2",
            params![ns.tenant, ns.connector],
        )?;
        Ok(())
    }
}

/// A row of the local log as its successor's deltas are against: its source offset and
/// its body (key and headers, see [`encode_body`]) in full.
struct FullRow {
    offset: String,
    body: Vec<u8>,
}

/// Decodes a row's stored offset, key and headers columns: in full, or (its offset a
/// BLOB) as deltas against the row before it, which `before` gives only when needed.
fn decode_row(
    offset: ValueRef<'_>,
    key: ValueRef<'_>,
    headers: ValueRef<'_>,
    before: impl FnOnce() -> anyhow::Result<FullRow>,
) -> anyhow::Result<FullRow> {
    let body_in_full = || -> anyhow::Result<Vec<u8>> {
        let key = match key {
            ValueRef::Null => None,
            ValueRef::Blob(key) | ValueRef::Text(key) => Some(key),
            other => anyhow::bail!("a key stored as {:?}", other.data_type()),
        };
        let mut body = Vec::new();
        let headers = decode_headers(headers)?;
        encode_body(key, headers.iter().map(|(k, v)| (k.as_bytes(), &v[..])), &mut body);
        Ok(body)
    };
    let ValueRef::Blob(offset_delta) = offset else {
        return Ok(FullRow { offset: offset.as_str()?.to_string(), body: body_in_full()? });
    };
    let before = before()?;
    let offset = decode_offset_delta(&before.offset, offset_delta)?;
    let body = match headers {
        ValueRef::Blob(stored) if stored.starts_with(&BODY_DELTA) => {
            decode_delta(&before.body, &stored[BODY_DELTA.len()..]).context("a key and headers delta")?
        }
        _ => body_in_full()?,
    };
    Ok(FullRow { offset, body })
}

/// Row `id` in full, for a read that starts at the row after it: back to the nearest row
/// stored in full (at most [`ANCHOR_EVERY`] rows, none before `first`, the topic's first
/// key), then forward through the deltas.
fn row_before(conn: &Connection, id: i64, first: i64) -> anyhow::Result<FullRow> {
    use rusqlite::types::Value;
    let mut stmt = conn
        .prepare_cached("SELECT offset, key, headers FROM log WHERE id <= ?1 AND id >= ?2 ORDER BY id DESC LIMIT ?3")?;
    let mut rows = stmt.query(params![id, first, i64::from(ANCHOR_EVERY) + 1])?;
    let mut chain: Vec<[Value; 3]> = Vec::new();
    while let Some(row) = rows.next()? {
        let in_full = !matches!(row.get_ref(0)?, ValueRef::Blob(_));
        chain.push([row.get(0)?, row.get(1)?, row.get(2)?]);
        if in_full {
            let mut full: Option<FullRow> = None;
            for [offset, key, headers] in chain.iter().rev() {
                let before = full.take();
                full = Some(decode_row(offset.into(), key.into(), headers.into(), || {
                    before.context("a delta with no row before it")
                })?);
            }
            return full.context("no row");
        }
    }
    anyhow::bail!("the local log has no row in full within {ANCHOR_EVERY} records before record key {id}")
}

impl RecordLog for SqliteStore {
    fn append_with_offsets(
        &self,
        ns: &Namespace,
        records: &RecordBatch,
        offsets: &[(String, String)],
        gate: &CommitGate,
    ) -> anyhow::Result<()> {
        let mut conn = self.conn();
        append(&mut conn, ns, records, offsets, gate).map_err(|e| self.write_error(e))?.map_err(anyhow::Error::new)?;
        drop(conn);
        let bytes: u64 = records.iter().map(|r| r.value.map_or(0, <[u8]>::len) as u64 + 64).sum();
        self.checkpoints.appended(bytes, &self.path);
        Ok(())
    }

    fn topics(&self, tenant: &str) -> anyhow::Result<Vec<(String, u64)>> {
        let conn = self.reader();
        let mut stmt =
            conn.prepare_cached("SELECT topic, next_offset FROM log_topics WHERE tenant = ?1 ORDER BY topic")?;
        let rows = stmt.query_map(params![tenant], |row| Ok((row.get(0)?, row.get::<_, i64>(1)? as u64)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn read_page(
        &self,
        tenant: &str,
        topic: &str,
        from: u64,
        limit: usize,
        max_bytes: u64,
    ) -> anyhow::Result<Vec<StoredRecord>> {
        let conn = self.reader();
        let topic_id: Option<i64> = conn
            .prepare_cached("SELECT id FROM log_topics WHERE tenant = ?1 AND topic = ?2")?
            .query_row(params![tenant, topic], |row| row.get(0))
            .optional()?;
        let Some(topic_id) = topic_id else { return Ok(Vec::new()) };
        let from = from.min((1 << OFFSET_BITS) - 1) as i64;
        let mut stmt = conn.prepare_cached(
            "SELECT l.id, s.connector, s.partition, l.offset, l.key, l.value, l.headers, l.timestamp_ms
             FROM log l JOIN log_sources s ON s.id = l.source
             WHERE l.id >= ?1 AND l.id < ?2 ORDER BY l.id LIMIT ?3",
        )?;
        let range = (log_key(topic_id, from), log_key(topic_id + 1, 0));
        let mut rows = stmt.query(params![range.0, range.1, limit as i64])?;
        let mut bytes = 0u64;
        let mut page: Vec<StoredRecord> = Vec::new();
        let mut before: Option<(i64, FullRow)> = None;
        while let Some(row) = rows.next()? {
            let id: i64 = row.get(0)?;
            let offset = (id & ((1 << OFFSET_BITS) - 1)) as u64;
            let known = before.take().filter(|(before_id, _)| *before_id + 1 == id).map(|(_, row)| row);
            let context = || format!("record {offset} of topic {topic} of the local log");
            let full = decode_row(row.get_ref(3)?, row.get_ref(4)?, row.get_ref(6)?, || match known {
                Some(known) => Ok(known),
                None => row_before(&conn, id - 1, log_key(topic_id, 0)),
            })
            .with_context(context)?;
            let (key, headers) = decode_body(&full.body).with_context(context)?;
            let (partition, value): (String, Option<Vec<u8>>) = (row.get(2)?, row.get(5)?);
            bytes += (key.as_ref().map_or(0, Bytes::len)
                + value.as_ref().map_or(0, Vec::len)
                + headers.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
                + partition.len()
                + full.offset.len()) as u64;
            page.push(StoredRecord {
                offset,
                connector: row.get(1)?,
                record: Record {
                    topic: topic.into(),
                    partition: partition.into(),
                    offset: full.offset.as_str().into(),
                    key,
                    value: value.map(Bytes::from),
                    headers,
                    timestamp_ms: row.get(7)?,
                },
            });
            before = Some((id, full));
            // A page holds at least one record, and stops once it passes `max_bytes`.
            if bytes >= max_bytes {
                break;
            }
        }
        Ok(page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(records: &[Record]) -> RecordBatch {
        RecordBatch::from_records(records)
    }

    fn record(topic: &str, partition: &str, offset: &str) -> Record {
        Record {
            topic: topic.into(),
            partition: partition.into(),
            offset: offset.into(),
            key: None,
            value: Some(b"v".to_vec().into()),
            headers: vec![("h".into(), b"1".to_vec().into())],
            timestamp_ms: 7,
        }
    }

    /// The checkpoint thread copies appended pages into the database file while the writer
    /// goes on (the writer's own checkpoint would only start at a 64 MiB WAL), and a closed
    /// store stops it and leaves every record readable.
    #[test]
    fn appended_pages_are_checkpointed_on_a_thread_of_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sluice.db");
        let db = SqliteStore::open(&path).unwrap();
        let ns = Namespace::new("default", "a");
        let size = |path: &Path| std::fs::metadata(path).map_or(0, |m| m.len());
        for n in 0..24 {
            let mut big = record("t", r#"{"p":1}"#, &format!(r#"{{"n":{n}}}"#));
            big.value = Some(vec![b'x'; 1 << 20].into());
            db.append_with_offsets(
                &ns,
                &batch(&[big]),
                &[(r#"{"p":1}"#.into(), format!(r#"{{"n":{n}}}"#))],
                &CommitGate::default(),
            )
            .unwrap();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while size(&path) < 16 << 20 {
            assert!(
                std::time::Instant::now() < deadline,
                "the database file is {} bytes: nothing was checkpointed into it",
                size(&path)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(db);
        let db = SqliteStore::open(&path).unwrap();
        let read = db.read("default", "t", 0, 100).unwrap();
        assert_eq!(read.len(), 24);
        assert!(read.iter().all(|r| r.record.value.as_ref().is_some_and(|v| v.len() == 1 << 20)));
        assert_eq!(db.offsets(&ns, &[r#"{"p":1}"#.into()]).unwrap(), [Some(r#"{"n":23}"#.into())]);
    }

    #[test]
    fn offsets_are_read_at_once_only_while_no_one_holds_the_reader() {
        let dir = tempfile::tempdir().unwrap();
        let db = SqliteStore::open(&dir.path().join("sluice.db")).unwrap();
        let ns = Namespace::new("default", "a");
        db.commit_offsets(&ns, &[(r#"{"p":1}"#.into(), r#"{"n":5}"#.into())]).unwrap();
        let asked = [r#"{"p":1}"#.to_string(), r#"{"p":2}"#.to_string()];
        let expected = vec![Some(r#"{"n":5}"#.to_string()), None];
        assert_eq!(db.offsets(&ns, &asked).unwrap(), expected);
        assert_eq!(db.offsets_at_once(&ns, &asked).map(Result::unwrap), Some(expected));
        let _held = db.reader();
        assert!(db.offsets_at_once(&ns, &asked).is_none(), "answered while the reader was held");
    }

    #[test]
    fn a_log_of_the_first_form_is_moved_and_read_as_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sluice.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                r#"CREATE TABLE records (
                    id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, topic TEXT NOT NULL, topic_offset INTEGER NOT NULL,
                    connector TEXT NOT NULL, partition TEXT NOT NULL, offset TEXT NOT NULL,
                    key BLOB, value BLOB, headers TEXT NOT NULL, timestamp_ms INTEGER NOT NULL);
                CREATE UNIQUE INDEX records_by_topic ON records (tenant, topic, topic_offset);
                CREATE TABLE topics (tenant TEXT NOT NULL, topic TEXT NOT NULL, next_offset INTEGER NOT NULL,
                    PRIMARY KEY (tenant, topic));
                INSERT INTO records VALUES (1, 'default', 't', 0, 'a', '{"p":1}', '{"n":1}', NULL, X'76', '[["h",[49]]]', 7);
                INSERT INTO records VALUES (2, 'default', 't', 1, 'b', '{"p":2}', '{"n":1}', X'6b', NULL, '[]', 8);
                INSERT INTO records VALUES (3, 'other', 't', 0, 'a', '{"p":1}', '{"n":9}', NULL, NULL, '[]', 9);
                INSERT INTO topics VALUES ('default', 't', 2), ('other', 't', 1);"#,
            )
            .unwrap();
        }
        let db = SqliteStore::open(&path).unwrap();
        let read = db.read("default", "t", 0, 10).unwrap();
        assert_eq!(read.iter().map(|r| (r.offset, r.connector.as_str())).collect::<Vec<_>>(), [(0, "a"), (1, "b")]);
        assert_eq!(read[0].record, record("t", r#"{"p":1}"#, r#"{"n":1}"#));
        assert_eq!(read[1].record.key.as_deref(), Some(b"k".as_slice()));
        assert_eq!(db.read("other", "t", 0, 10).unwrap()[0].record.offset, r#"{"n":9}"#);
        // New records follow the moved ones.
        db.append_with_offsets(
            &Namespace::new("default", "a"),
            &batch(&[record("t", r#"{"p":1}"#, r#"{"n":2}"#)]),
            &[],
            &CommitGate::default(),
        )
        .unwrap();
        assert_eq!(db.topics("default").unwrap(), [("t".to_string(), 3)]);
        assert_eq!(db.read("default", "t", 2, 10).unwrap()[0].record.offset, r#"{"n":2}"#);
        drop(db);
        // Opening again finds nothing left to move.
        let db = SqliteStore::open(&path).unwrap();
        assert_eq!(db.read("default", "t", 0, 10).unwrap().len(), 3);
    }

    #[test]
    fn common_prefix_and_suffix_are_a_byte_loop_at_every_length_and_position() {
        let by_bytes = |a: &[u8], b: &[u8]| {
            let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
            let suffix = a.iter().rev().zip(b.iter().rev()).take_while(|(x, y)| x == y).count();
            (prefix, suffix)
        };
        for len in 0..40usize {
            let a: Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(37)).collect();
            for other_len in [len.saturating_sub(3), len, len + 5] {
                let mut b: Vec<u8> = (0..other_len as u8).map(|i| i.wrapping_mul(37)).collect();
                assert_eq!((common_prefix(&a, &b), common_suffix(&a, &b)), by_bytes(&a, &b), "{a:?} {b:?}");
                for at in 0..other_len {
                    b[at] ^= 0x40;
                    assert_eq!((common_prefix(&a, &b), common_suffix(&a, &b)), by_bytes(&a, &b), "{a:?} {b:?}");
                    b[at] ^= 0x40;
                }
            }
        }
    }

    #[test]
    fn offset_deltas_turn_the_offset_before_into_the_next() {
        let mut delta = Vec::new();
        for (before, offset) in [
            (r#"{"path":"a.log","position":99900,"line":999}"#, r#"{"path":"a.log","position":100000,"line":1000}"#),
            (r#"{"n":1}"#, r#"{"n":1}"#),
            ("abcabc", "abc"),
            ("ab", "abab"),
            ("é1é", "é2é"),
        ] {
            if encode_delta(before.as_bytes(), offset.as_bytes(), &[], &mut delta) {
                assert!(delta.len() < offset.len(), "{before} -> {offset}");
                assert_eq!(decode_offset_delta(before, &delta).unwrap(), offset, "{before} -> {offset}");
            }
        }
        let long = format!("{{\"path\":\"{}\",\"line\":1}}", "p".repeat(300));
        assert!(encode_delta(long.as_bytes(), long.replace(":1}", ":2}").as_bytes(), &[], &mut delta));
        assert_eq!(delta.len(), 2 + 1 + 1, "a 300-byte prefix takes two LEB128 bytes, the suffix one");
        assert_eq!(decode_offset_delta(&long, &delta).unwrap(), long.replace(":1}", ":2}"));
        assert!(!encode_delta(b"1", b"2", &[], &mut delta), "no shorter as a delta");
        assert!(encode_delta(b"abcd", b"abcd", &BODY_DELTA, &mut delta), "the prefix does not count");
        assert_eq!(delta, [0xff, 0xff, 0xff, 0xff, 4, 0]);
        assert_eq!(decode_delta(b"abcd", &delta[4..]).unwrap(), b"abcd");
        assert!(decode_offset_delta("ab", &[3, 0]).is_err(), "a prefix longer than the offset before");
        assert!(decode_offset_delta("ab", &[0x80]).is_err(), "cut short");
    }

    #[test]
    fn offsets_stored_as_deltas_read_back_from_any_record() {
        let dir = tempfile::tempdir().unwrap();
        let db = SqliteStore::open(&dir.path().join("sluice.db")).unwrap();
        let offset = |n: usize| format!(r#"{{"path":"a.log","position":{},"line":{n},"done":false}}"#, n * 100);
        // One append of 600 records of two sources and two topics, interleaved, longer than
        // a delta chain may be; then a second append continuing the same source.
        // Keys and headers as file-pulse's (the path, and the line number that changes),
        // some without a key, some with an empty key, some without headers.
        let file_record = |topic: &str, partition: &str, n: usize| {
            let mut record = record(topic, partition, &offset(n));
            record.key = match n % 13 {
                0 => None,
                6 => Some(Bytes::new()),
                _ => Some(Bytes::from_static(b"/in/a.log")),
            };
            record.headers = match n % 17 {
                0 => Vec::new(),
                _ => vec![
                    ("file.path".into(), Bytes::from_static(b"/in/a.log")),
                    ("file.line".into(), n.to_string().into_bytes().into()),
                ],
            };
            record
        };
        let mut records = Vec::new();
        for n in 0..600 {
            let partition = if n % 7 == 3 { r#"{"p":2}"# } else { r#"{"p":1}"# };
            let topic = if n % 11 == 5 { "u" } else { "t" };
            records.push(file_record(topic, partition, n));
        }
        let ns = Namespace::new("default", "a");
        db.append_with_offsets(&ns, &batch(&records), &[], &CommitGate::default()).unwrap();
        db.append_with_offsets(&ns, &batch(&[file_record("t", r#"{"p":1}"#, 600)]), &[], &CommitGate::default())
            .unwrap();
        records.push(file_record("t", r#"{"p":1}"#, 600));
        let count = |condition: &str| -> i64 {
            let sql = format!("SELECT count(*) FROM log WHERE {condition}");
            db.reader().query_row(&sql, [], |row| row.get(0)).unwrap()
        };
        let deltas = count("typeof(offset) = 'blob'");
        assert!(deltas > 400, "most rows store their offset as a delta ({deltas} of 601)");
        let bodies = count("key IS NULL AND substr(headers, 1, 4) = x'ffffffff'");
        assert!(bodies > 250, "many rows store their key and headers as a delta ({bodies} of 601)");
        for topic in ["t", "u"] {
            let expected: Vec<&Record> = records.iter().filter(|r| &*r.topic == topic).collect();
            let all = db.read("default", topic, 0, 10_000).unwrap();
            assert_eq!(all.iter().map(|r| &r.record).collect::<Vec<_>>(), expected, "topic {topic}");
            // Each topic's records are numbered from 0 without a gap, whether its row's key
            // was bound or left to SQLite (the next after the largest).
            let numbered: Vec<u64> = all.iter().map(|r| r.offset).collect();
            assert_eq!(numbered, (0..expected.len() as u64).collect::<Vec<_>>(), "topic {topic}");
            // A read may start at any record, within a delta chain too.
            for from in [1, 2, 254, 255, 256, 300, expected.len() - 1] {
                let Some(first) = db.read("default", topic, from as u64, 2).unwrap().into_iter().next() else {
                    continue;
                };
                assert_eq!(&first.record, expected[from], "topic {topic} from {from}");
            }
        }
    }

    /// A batch its task gave up on (the gate shut) rolls back: no record and no offset of
    /// it stays, and the connection goes on writing.
    #[test]
    fn a_shut_gate_rolls_the_batch_and_its_offsets_back() {
        let dir = tempfile::tempdir().unwrap();
        let db = SqliteStore::open(&dir.path().join("sluice.db")).unwrap();
        let ns = Namespace::new("default", "a");
        let first = [record("t", r#"{"p":1}"#, r#"{"n":1}"#)];
        db.append_with_offsets(
            &ns,
            &batch(&first),
            &[(r#"{"p":1}"#.into(), r#"{"n":1}"#.into())],
            &CommitGate::default(),
        )
        .unwrap();
        let shut = CommitGate::default();
        assert!(shut.shut_unless_committing());
        let given_up = [record("t", r#"{"p":1}"#, r#"{"n":2}"#)];
        let error = db
            .append_with_offsets(&ns, &batch(&given_up), &[(r#"{"p":1}"#.into(), r#"{"n":2}"#.into())], &shut)
            .unwrap_err();
        assert!(error.is::<DeliveryAbandoned>(), "{error:#}");
        assert_eq!(db.read("default", "t", 0, 10).unwrap().len(), 1, "the given-up batch was stored");
        assert_eq!(db.offsets(&ns, &[r#"{"p":1}"#.into()]).unwrap(), [Some(r#"{"n":1}"#.to_string())]);
        assert_eq!(db.topics("default").unwrap(), [("t".to_string(), 1)]);
        db.append_with_offsets(
            &ns,
            &batch(&given_up),
            &[(r#"{"p":1}"#.into(), r#"{"n":2}"#.into())],
            &CommitGate::default(),
        )
        .unwrap();
        let read = db.read("default", "t", 0, 10).unwrap();
        assert_eq!(
            read.iter().map(|r| (r.offset, r.record.offset.to_string())).collect::<Vec<_>>(),
            [(0, r#"{"n":1}"#.to_string()), (1, r#"{"n":2}"#.to_string())]
        );
    }

    #[test]
    fn records_and_offsets_commit_together_and_are_namespaced() {
        let dir = tempfile::tempdir().unwrap();
        let db = SqliteStore::open(&dir.path().join("sluice.db")).unwrap();
        let a = Namespace::new("default", "a");
        let other_tenant = Namespace::new("other", "a");
        let records = [record("t", r#"{"p":1}"#, r#"{"n":1}"#), record("t", r#"{"p":1}"#, r#"{"n":2}"#)];
        db.append_with_offsets(
            &a,
            &batch(&records),
            &[(r#"{"p":1}"#.into(), r#"{"n":2}"#.into())],
            &CommitGate::default(),
        )
        .unwrap();
        db.append_with_offsets(&a, &batch(&records[..1]), &[], &CommitGate::default()).unwrap();
        let read = db.read("default", "t", 0, 10).unwrap();
        assert_eq!(read.iter().map(|r| r.offset).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(read[1].record, records[1]);
        assert_eq!(db.offsets(&a, &[r#"{"p":1}"#.into(), "{}".into()]).unwrap(), [Some(r#"{"n":2}"#.into()), None]);
        assert_eq!(db.offsets(&other_tenant, &[r#"{"p":1}"#.into()]).unwrap(), [None]);
        assert!(db.read("other", "t", 0, 10).unwrap().is_empty());
        assert_eq!(db.topics("default").unwrap(), [("t".to_string(), 3)]);
        assert!(db.delete_offset(&a, r#"{"p":1}"#).unwrap());
        assert!(db.all_offsets(&a).unwrap().is_empty());
    }

    /// Separate connections lock as separate processes do: a worker creating its database
    /// while `sluice topics read` or a status poller opens it must not fail either.
    #[test]
    fn a_new_database_opened_by_several_processes_at_once_opens_in_each() {
        // Staggered by a few hundred microseconds, so some open while another creates the
        // database's first page: without the retry, about one round in a hundred failed.
        for round in 0..200 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("sluice.db");
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(6));
            let opens: Vec<_> = (0..6u64)
                .map(|i| {
                    let (path, barrier) = (path.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        std::thread::sleep(Duration::from_micros((round * 37 + i * 211) % 900));
                        SqliteStore::open(&path).map(|_| ()).map_err(|e| format!("{e:#}"))
                    })
                })
                .collect();
            for open in opens {
                open.join().unwrap().unwrap_or_else(|e| panic!("round {round}: {e}"));
            }
        }
    }
}
