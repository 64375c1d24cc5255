//! `sluice demo`: creates a sample inbox (plain, gzipped, empty and CRLF files) and a
//! file-pulse connector config for it, for the README's quick start.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Creates `<dir>/inbox` with sample files (if it is not there yet), `<dir>/done`, and
/// `<dir>/file-pulse.json`; returns the connector file.
pub fn prepare(dir: &Path) -> anyhow::Result<PathBuf> {
    let inbox = dir.join("inbox");
    let done = dir.join("done");
    std::fs::create_dir_all(&done)?;
    if !inbox.exists() {
        std::fs::create_dir_all(&inbox)?;
        for file in 0..3 {
            let lines: String = (0..20_000)
                .map(|n| format!("{{\"file\":{file},\"line\":{n},\"msg\":\"hello from sample {file}\"}}\n"))
                .collect();
            std::fs::write(inbox.join(format!("sample-{file}.log")), lines)?;
        }
        let mut gz = flate2::write::GzEncoder::new(
            std::fs::File::create(inbox.join("archive.log.gz"))?,
            flate2::Compression::default(),
        );
        for n in 0..10_000 {
            writeln!(gz, "archived line {n}")?;
        }
        gz.finish()?;
        std::fs::write(inbox.join("windows.log"), "crlf line 1\r\ncrlf line 2\r\nno newline at the end")?;
        std::fs::write(inbox.join("empty.log"), "")?;
    }
    let inbox = std::fs::canonicalize(&inbox)?;
    let done = std::fs::canonicalize(&done)?;
    let config = serde_json::json!({
        "name": "file-pulse-demo",
        "config": {
            "connector.class": "file-pulse",
            "tasks.max": "3",
            "topic": "lines",
            "fs.listing.directory.path": inbox,
            "fs.listing.interval.ms": "500",
            "monitor.interval.ms": "250",
            "fs.cleanup.policy": "move",
            "fs.cleanup.policy.move.success.path": done,
            "sandbox.fs.write": format!("{},{}", inbox.display(), done.display()),
        }
    });
    let file = dir.join("file-pulse.json");
    std::fs::write(&file, serde_json::to_string_pretty(&config)? + "\n")?;
    Ok(file)
}
