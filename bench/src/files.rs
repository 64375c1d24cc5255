//! `sluice-bench files`: MB/s streaming one file of 100-byte lines with file-pulse, to the
//! local destination (in this process) and to stdout (a child `sluice run` writing to
//! /dev/null), beside a native loop reading and splitting the same file, in one run.

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
    // Reuse the compiled plugins, so the child's start-up is not timed as compilation.
    let (compiled, local_compiled) =
        (DataDir::new(&data).compile_cache(), DataDir::new(scratch.join("data-local")).compile_cache());
    std::fs::create_dir_all(&compiled)?;
    for entry in std::fs::read_dir(local_compiled)? {
        let entry = entry?;
        std::fs::copy(entry.path(), compiled.join(entry.file_name()))?;
    }
    let file = scratch.join("stdout.json");
    std::fs::write(&file, connector("stdout"))?;
    let started = Instant::now();
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args([crate::SLUICE_CLI, "run"])
        .arg("--data-dir")
        .arg(&data)
        .arg("--plugin-path")
        .arg(plugin_dir)
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    while !done(&data) {
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("the stdout run exited early: {status}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rows.push(FilesRow { path: "stdout", bytes, elapsed: started.elapsed() });
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(rows)
}

pub fn print_files_table(rows: &[FilesRow]) {
    println!("file-pulse: one file of 100-byte lines, read.mode=lines");
    println!("{:<8} {:>10} {:>9} {:>9} {:>14}", "path", "MB", "seconds", "MB/s", "ratio/native");
    let native = rows.first().map(|r| r.bytes as f64 / r.elapsed.as_secs_f64());
    for row in rows {
        let rate = row.bytes as f64 / row.elapsed.as_secs_f64();
        println!(
            "{:<8} {:>10.0} {:>9.2} {:>9.1} {:>14.3}",
            row.path,
            row.bytes as f64 / 1e6,
            row.elapsed.as_secs_f64(),
            rate / 1e6,
            native.map_or(0.0, |n| rate / n)
        );
    }
}
