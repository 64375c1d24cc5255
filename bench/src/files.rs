//! `sluice-bench files`: MB/s streaming one file of 100-byte lines with file-pulse, to the
//! local destination (in this process) and to stdout (a child `sluice run` writing to
//! /dev/null), beside native programs doing the same work on the same file in one run:
//! reading and splitting it; writing the stdout destination's JSON fields per line
//! (serde_json, buffered); storing each line's key, value, headers and timestamp in SQLite
//! with the offset upserted in the same transaction every 1,000 lines (WAL,
//! synchronous=NORMAL, as the local log).

use std::path::Path;
use std::time::{Duration, Instant};

use sluice::config::{ConnectorConfig, DEFAULT_TENANT, WorkerConfig};
use sluice::connect::Herder;
use sluice::storage::{DataDir, Namespace, Stores};

/// One row of `sluice-bench files`.
pub struct FilesRow {
    pub path: &'static str,
    pub bytes: u64,
    pub elapsed: Duration,
}

/// Streams one file of 100-byte lines through file-pulse to the local destination and to
/// `stdout` (a child `sluice run` with stdout on /dev/null), beside a plain native loop
/// that reads and splits the same file, in one run.
pub async fn files(plugin_dir: &Path, megabytes: u64) -> anyhow::Result<Vec<FilesRow>> {
    use std::io::{BufRead, Write};
    let scratch = std::env::temp_dir().join(format!("sluice-bench-files-{}", std::process::id()));
    let inbox = scratch.join("inbox");
    std::fs::create_dir_all(&inbox)?;
    let inbox = std::fs::canonicalize(&inbox)?;
    let path = inbox.join("big.log");
    let line = format!("{}\n", "x".repeat(99));
    {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path)?);
        for _ in 0..(megabytes << 20) / line.len() as u64 {
            out.write_all(line.as_bytes())?;
        }
        out.flush()?;
    }
    let bytes = std::fs::metadata(&path)?.len();
    let mut rows = Vec::new();

    // Native: read and split into lines (also warms the page cache for the others).
    let started = Instant::now();
    let mut reader = std::io::BufReader::with_capacity(64 << 10, std::fs::File::open(&path)?);
    let (mut lines, mut buf) = (0u64, Vec::with_capacity(256));
    while reader.read_until(b'\n', &mut buf)? > 0 {
        lines += 1;
        std::hint::black_box(&buf);
        buf.clear();
    }
    anyhow::ensure!(lines == bytes / line.len() as u64, "native loop read {lines} lines");
    rows.push(FilesRow { path: "native", bytes, elapsed: started.elapsed() });

    let started = Instant::now();
    native::json_lines(&path, std::fs::File::create("/dev/null")?)?;
    rows.push(FilesRow { path: "native json", bytes, elapsed: started.elapsed() });

    let database = scratch.join("native.db");
    let started = Instant::now();
    let stored = native::sqlite(&path, &database)?;
    rows.push(FilesRow { path: "native sqlite", bytes, elapsed: started.elapsed() });
    anyhow::ensure!(stored == lines, "native sqlite stored {stored} of {lines} lines");

    // The local log alone: the records file-pulse makes, appended without a plugin.
    let started = Instant::now();
    native::local_log_alone(&path, &DataDir::new(scratch.join("data-log")))?;
    rows.push(FilesRow { path: "log alone", bytes, elapsed: started.elapsed() });

    let connector = |destination: &str| {
        serde_json::json!({"name": "bench", "config": {
            "connector.class": "file-pulse", "topic": "bench", "destination": destination,
            "fs.listing.directory.path": inbox, "sandbox.fs.read": inbox, "monitor.interval.ms": "20",
        }})
        .to_string()
    };
    let done = |data: &Path| -> bool {
        let Ok(stores) = Stores::open_existing(&WorkerConfig::default(), &DataDir::new(data)) else { return false };
        let offsets = stores.offsets().all_offsets(&Namespace::new(DEFAULT_TENANT, "bench")).unwrap_or_default();
        offsets.iter().any(|(_, o)| o.contains("\"done\":true"))
    };

    // Local destination, in this process.
    let data = scratch.join("data-local");
    let herder = Herder::open(&data, plugin_dir).await?;
    // Compile before the clock starts; the compile cache makes the child's start fast too.
    let config = ConnectorConfig::from_json(&connector("local"), "bench")?;
    let started = Instant::now();
    herder.start(config).await?;
    while !done(&data) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rows.push(FilesRow { path: "local", bytes, elapsed: started.elapsed() });
    herder.shutdown().await;

    // stdout destination: a child process writing to /dev/null.
    let data = scratch.join("data-stdout");
    // The child finds the plugins compiled above in the user's compile cache (which every
    // data directory shares), so its start-up is not timed as compilation.
    let file = scratch.join("stdout.json");
    std::fs::write(&file, connector("stdout"))?;
    let started = Instant::now();
    let mut child = crate::SluiceChild::spawn(
        std::process::Command::new(std::env::current_exe()?)
            .args([crate::SLUICE_CLI, "run"])
            .arg("--data-dir")
            .arg(&data)
            .arg("--plugin-path")
            .arg(plugin_dir)
            .arg(&file),
        scratch.join("stdout.stderr"),
    )?;
    while !done(&data) {
        child.exited_early("the stdout run")?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rows.push(FilesRow { path: "stdout", bytes, elapsed: started.elapsed() });
    drop(child);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(rows)
}

/// The native programs: the same work as file-pulse and a destination, without a sandbox.
mod native {
    use std::io::{BufRead, Write};
    use std::path::Path;

    /// What the stdout destination writes for one line (the same fields and shapes).
    #[derive(serde::Serialize)]
    struct Line<'a> {
        topic: &'a str,
        partition: Partition<'a>,
        offset: &'a Offset<'a>,
        key: &'a str,
        value: &'a str,
        headers: [Header<'a>; 2],
        timestamp: i64,
    }

    #[derive(serde::Serialize)]
    struct Partition<'a> {
        id: &'a str,
    }

    #[derive(serde::Serialize)]
    struct Offset<'a> {
        path: &'a str,
        position: u64,
        line: u64,
        size: u64,
        mtime: u64,
        done: bool,
    }

    #[derive(serde::Serialize)]
    struct Header<'a> {
        key: &'a str,
        value: &'a str,
    }

    fn now_ms() -> i64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
    }

    /// Reads `path` line by line, calling `each` with the line (without its newline) and
    /// the offset after it.
    fn lines(path: &Path, mut each: impl FnMut(&str, &Offset) -> anyhow::Result<()>) -> anyhow::Result<u64> {
        let mut reader = std::io::BufReader::with_capacity(64 << 10, std::fs::File::open(path)?);
        let (mut buf, mut position, mut line) = (String::with_capacity(256), 0u64, 0u64);
        loop {
            buf.clear();
            let read = reader.read_line(&mut buf)?;
            if read == 0 {
                return Ok(line);
            }
            position += read as u64;
            line += 1;
            let offset = Offset { path: "big.log", position, line, size: position, mtime: 0, done: false };
            each(buf.trim_end_matches('\n'), &offset)?;
        }
    }

    /// One JSON object per line, as `destination=stdout` writes it.
    pub fn json_lines(path: &Path, out: impl Write) -> anyhow::Result<u64> {
        let mut out = std::io::BufWriter::with_capacity(256 << 10, out);
        let count = lines(path, |value, offset| {
            let line_number = offset.line.to_string();
            let line = Line {
                topic: "bench",
                partition: Partition { id: "af5742b4d2db5e45" },
                offset,
                key: "big.log",
                value,
                headers: [
                    Header { key: "file.path", value: "big.log" },
                    Header { key: "file.line", value: &line_number },
                ],
                timestamp: now_ms(),
            };
            serde_json::to_writer(&mut out, &line)?;
            out.write_all(b"\n")?;
            Ok(())
        })?;
        out.flush()?;
        Ok(count)
    }

    /// The local log's appends alone: each line as the record file-pulse makes of it,
    /// appended 2,000 at a time (file-pulse's batch) with the offset.
    pub fn local_log_alone(path: &Path, data: &sluice::storage::DataDir) -> anyhow::Result<u64> {
        use sluice::storage::{Namespace, Record, RecordBatch, Stores};
        let stores = Stores::open(&sluice::config::WorkerConfig::default(), data)?;
        let ns = Namespace::new("default", "bench");
        let partition = r#"{"id":"af5742b4d2db5e45"}"#;
        let mut batch = Vec::with_capacity(2000);
        let flush = |batch: &mut Vec<Record>| -> anyhow::Result<()> {
            if let Some(last) = batch.last() {
                let offsets = [(partition.to_string(), last.offset.to_string())];
                stores.local().append_with_offsets(
                    &ns,
                    &RecordBatch::from_records(batch.iter()),
                    &offsets,
                    &Default::default(),
                )?;
            }
            batch.clear();
            Ok(())
        };
        let count = lines(path, |value, offset| {
            batch.push(Record {
                topic: "bench".into(),
                partition: partition.into(),
                offset: serde_json::to_string(offset)?.into(),
                key: Some(b"big.log".to_vec().into()),
                value: Some(value.as_bytes().to_vec().into()),
                headers: vec![
                    ("file.path".into(), b"big.log".to_vec().into()),
                    ("file.line".into(), offset.line.to_string().into_bytes().into()),
                ],
                timestamp_ms: now_ms(),
            });
            if batch.len() == 2000 {
                flush(&mut batch)?;
            }
            Ok(())
        })?;
        flush(&mut batch)?;
        Ok(count)
    }

    /// Each line's key, value, headers and timestamp stored in SQLite, the offset upserted
    /// in the same transaction every 1,000 lines.
    pub fn sqlite(path: &Path, database: &Path) -> anyhow::Result<u64> {
        let conn = rusqlite::Connection::open(database)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.execute_batch(
            "CREATE TABLE records (id INTEGER PRIMARY KEY, topic TEXT NOT NULL, key BLOB, value BLOB,
                 headers TEXT NOT NULL, timestamp_ms INTEGER NOT NULL);
             CREATE TABLE offsets (partition TEXT PRIMARY KEY, offset TEXT NOT NULL);",
        )?;
        // Unchecked: the closure holds `&conn` and opens the next transaction itself.
        let mut tx = Some(conn.unchecked_transaction()?);
        let count = lines(path, |value, offset| {
            let open = tx.as_ref().expect("a transaction is open");
            let headers = serde_json::to_string(&[("file.path", "big.log"), ("file.line", &offset.line.to_string())])?;
            open.prepare_cached(
                "INSERT INTO records (topic, key, value, headers, timestamp_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(rusqlite::params![
                "bench",
                b"big.log".as_slice(),
                value.as_bytes(),
                headers,
                now_ms()
            ])?;
            if offset.line.is_multiple_of(1000) {
                open.prepare_cached(
                    "INSERT INTO offsets (partition, offset) VALUES (?1, ?2)
                     ON CONFLICT (partition) DO UPDATE SET offset = excluded.offset",
                )?
                .execute(rusqlite::params![r#"{"id":"af5742b4d2db5e45"}"#, serde_json::to_string(offset)?])?;
                tx.take().expect("a transaction is open").commit()?;
                tx = Some(conn.unchecked_transaction()?);
            }
            Ok(())
        })?;
        if let Some(open) = tx {
            open.commit()?;
        }
        Ok(count)
    }
}

impl FilesRow {
    pub fn megabytes_per_second(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64() / 1e6
    }
}

/// The native program each Sluice path is compared with.
pub fn baseline_of(path: &str) -> Option<&'static str> {
    match path {
        "stdout" => Some("native json"),
        "local" => Some("native sqlite"),
        _ => None,
    }
}

pub fn print_files_table(rows: &[FilesRow]) {
    println!("file-pulse: one file of 100-byte lines, read.mode=lines");
    println!("{:<14} {:>8} {:>9} {:>9} {:>26}", "path", "MB", "seconds", "MB/s", "ratio to the native work");
    for row in rows {
        let ratio = baseline_of(row.path)
            .and_then(|native| rows.iter().find(|r| r.path == native))
            .map_or(String::new(), |native| {
                format!("{:.2} of {}", row.megabytes_per_second() / native.megabytes_per_second(), native.path)
            });
        println!(
            "{:<14} {:>8.0} {:>9.2} {:>9.1} {:>26}",
            row.path,
            row.bytes as f64 / 1e6,
            row.elapsed.as_secs_f64(),
            row.megabytes_per_second(),
            ratio
        );
    }
}
