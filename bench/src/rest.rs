//! `sluice-bench rest`: a real `sluice serve` (this binary as a child) with many connectors
//! created through the API, and how long `GET /connectors?expand=status` (and with
//! `expand=info` too) takes to answer with all of them.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;

pub struct RestRow {
    pub request: &'static str,
    pub connectors: usize,
    pub median: Duration,
    pub p95: Duration,
    pub max: Duration,
    pub body_bytes: usize,
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `sluice serve` on a scratch data dir with only the counter plugin, creates
/// `connectors` counters (one task, a few records a second each), waits until all run,
/// then times `requests` listings of each kind.
pub fn rest(plugin_dir: &Path, connectors: usize, requests: usize) -> anyhow::Result<Vec<RestRow>> {
    let scratch = std::env::temp_dir().join(format!("sluice-bench-rest-{}", std::process::id()));
    let plugins = scratch.join("plugins");
    std::fs::create_dir_all(&plugins)?;
    let counter = plugin_dir.join("counter.wasm");
    std::fs::copy(&counter, plugins.join("counter.wasm")).with_context(|| format!("{}", counter.display()))?;
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args([crate::SLUICE_CLI, "serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(scratch.join("data"))
        .arg("--plugin-path")
        .arg(&plugins)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = child.stderr.take().expect("piped");
    let serve = Serve(child);
    let (announce, announced) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("REST API on ") {
                let _ = announce.send(url.to_string());
            }
        }
    });
    let base = announced.recv_timeout(Duration::from_secs(300)).context("sluice serve did not start")?;
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(60)).build();

    for n in 0..connectors {
        let config = serde_json::json!({"name": format!("c{n:04}"), "config": {
            "connector.class": "counter", "topic": format!("c{n:04}"), "tasks.max": "1",
            "records.per.second": "5",
        }});
        match agent.post(&format!("{base}/connectors")).send_json(config) {
            Ok(_) => {}
            Err(ureq::Error::Status(status, reply)) => {
                anyhow::bail!("creating connector {n}: {status} {}", reply.into_string().unwrap_or_default())
            }
            Err(e) => return Err(e).context("create"),
        }
    }
    let started = Instant::now();
    loop {
        let listing: serde_json::Value = agent.get(&format!("{base}/connectors?expand=status")).call()?.into_json()?;
        let running = listing
            .as_object()
            .map(|all| {
                all.values()
                    .filter(|c| {
                        c["status"]["connector"]["state"] == "RUNNING"
                            && c["status"]["tasks"]
                                .as_array()
                                .is_some_and(|t| t.len() == 1 && t[0]["state"] == "RUNNING")
                    })
                    .count()
            })
            .unwrap_or(0);
        if running == connectors {
            break;
        }
        anyhow::ensure!(started.elapsed() < Duration::from_secs(600), "only {running} of {connectors} running");
        std::thread::sleep(Duration::from_millis(200));
    }

    let mut rows = Vec::new();
    for (request, query) in [
        ("?expand=status", "?expand=status"),
        ("?expand=status&expand=info", "?expand=status&expand=info"),
        ("(names only)", ""),
    ] {
        let mut times = Vec::with_capacity(requests);
        let mut body_bytes = 0;
        for _ in 0..requests {
            let sent = Instant::now();
            let body = agent.get(&format!("{base}/connectors{query}")).call()?.into_string()?;
            times.push(sent.elapsed());
            body_bytes = body.len();
        }
        times.sort();
        rows.push(RestRow {
            request,
            connectors,
            median: times[times.len() / 2],
            p95: times[(times.len() * 95 / 100).min(times.len() - 1)],
            max: *times.last().expect("at least one request"),
            body_bytes,
        });
    }
    drop(serve);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(rows)
}

pub fn print_rest_table(rows: &[RestRow], requests: usize) {
    println!("GET /connectors on a running sluice serve, {requests} requests each, all connectors RUNNING");
    println!("{:<30} {:>10} {:>10} {:>10} {:>10} {:>10}", "request", "connectors", "median", "p95", "max", "body");
    for row in rows {
        println!(
            "{:<30} {:>10} {:>8.1}ms {:>8.1}ms {:>8.1}ms {:>7.0} KiB",
            row.request,
            row.connectors,
            row.median.as_secs_f64() * 1e3,
            row.p95.as_secs_f64() * 1e3,
            row.max.as_secs_f64() * 1e3,
            row.body_bytes as f64 / 1024.0,
        );
    }
}
