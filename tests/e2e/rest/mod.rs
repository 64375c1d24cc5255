//! `sluice serve` driven over HTTP, as Kafka Connect's REST clients drive Connect: every
//! endpoint (`api.rs`), the tenancy matrix (`tenancy.rs`), the live plugin folder
//! (`plugin_folder.rs`), SIGKILL with paused and stopped connectors (`crash.rs`), API
//! fuzzing from the OpenAPI document (`fuzz.rs`) and concurrent creates (`concurrency.rs`).

mod api;
mod concurrency;
mod crash;
mod fuzz;
mod plugin_folder;
mod tenancy;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use serde_json::Value;

use crate::{DEADLINE, sluice, wait_until};

/// A plugin folder at `dir/plugins` with copies of these built plugins only, so a server
/// start compiles nothing else.
pub fn plugin_folder(dir: &Path, names: &[&str]) -> PathBuf {
    let folder = dir.join("plugins");
    std::fs::create_dir_all(&folder).unwrap();
    for name in names {
        std::fs::copy(built_plugin(name), folder.join(format!("{name}.wasm"))).unwrap();
    }
    folder
}

/// A shipped plugin's or a test fixture's `.wasm`.
pub fn built_plugin(name: &str) -> PathBuf {
    let shipped = Path::new(sluice::BUILT_PLUGINS).join(format!("{name}.wasm"));
    if shipped.exists() {
        shipped
    } else {
        Path::new(sluice::BUILT_PLUGINS).with_file_name("test-plugins").join(format!("{name}.wasm"))
    }
}

/// An answer: status, content type, body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Asserts Connect's error body: JSON `{"error_code": status, "message": ...}`.
    pub fn assert_error(&self, status: u16) -> String {
        assert_eq!(self.status, status, "{self:?}");
        assert!(self.content_type.starts_with("application/json"), "error not JSON: {self:?}");
        let body = self.json();
        assert_eq!(body["error_code"], status, "{self:?}");
        body["message"].as_str().unwrap_or_else(|| panic!("no message: {self:?}")).to_string()
    }
}

/// A `sluice serve` child process on a free port, killed when dropped.
pub struct Server {
    child: Option<Child>,
    pub base: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    pub fn start(data: &Path, plugins: &Path, config: Option<&Path>) -> Server {
        let mut command = sluice();
        command.arg("serve").arg("--data-dir").arg(data).arg("--plugin-path").arg(plugins);
        command.arg("--listen").arg("127.0.0.1:0");
        if let Some(config) = config {
            command.arg("--config").arg(config);
        }
        let mut child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (address, announced) = mpsc::channel();
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("REST API on ") {
                    let _ = address.send(url.to_string());
                }
                let mut log = lines.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let Ok(base) = announced.recv_timeout(DEADLINE) else {
            let _ = child.kill();
            panic!("sluice serve did not start: {}", log.lock().unwrap());
        };
        Server { child: Some(child), base, log }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// What the server wrote to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn call(&self, method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> Reply {
        let headers: Vec<(&str, String)> =
            token.map(|t| vec![("Authorization", format!("Bearer {t}"))]).unwrap_or_default();
        self.call_with(method, path, &headers, body)
    }

    pub fn call_with(&self, method: &str, path: &str, headers: &[(&str, String)], body: Option<&str>) -> Reply {
        let agent = ureq::AgentBuilder::new().timeout(DEADLINE).redirects(0).build();
        let mut request = agent.request(method, &format!("{}{path}", self.base));
        for (name, value) in headers {
            request = request.set(name, value);
        }
        if body.is_some() {
            request = request.set("Content-Type", "application/json");
        }
        let result = match body {
            Some(body) => request.send_string(body),
            None => request.call(),
        };
        let response = match result {
            Ok(response) => response,
            Err(ureq::Error::Status(_, response)) => response,
            Err(e) => panic!("{method} {path}: {e}\nserver log:\n{}", self.log()),
        };
        let status = response.status();
        let content_type = response.header("content-type").unwrap_or_default().to_string();
        let headers = response
            .headers_names()
            .into_iter()
            .filter_map(|name| response.header(&name).map(|v| (name.clone(), v.to_string())))
            .collect();
        let body = response.into_string().unwrap_or_default();
        Reply { status, content_type, headers, body }
    }

    pub fn get(&self, path: &str) -> Reply {
        self.call("GET", path, None, None)
    }

    /// Sends these exact bytes as one HTTP/1.1 request (what `curl` would send, with no
    /// header added) and returns the status and body.
    pub fn raw(&self, request: &str) -> (u16, String) {
        let address = self.base.trim_start_matches("http://");
        let mut stream = TcpStream::connect(address).unwrap();
        stream.set_read_timeout(Some(DEADLINE)).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let body = answer.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default();
        (status, body)
    }

    /// Waits until `GET path` (as `token`) answers 200 with a body `check` accepts.
    pub fn wait_for(&self, what: &str, path: &str, token: Option<&str>, check: impl Fn(&Value) -> bool) -> Value {
        wait_until(what, || {
            let reply = self.call("GET", path, token, None);
            (reply.status == 200).then(|| reply.json()).filter(|body| check(body))
        })
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// SIGTERM, then waits for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let term = std::process::Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
        assert!(term.success());
        let started = std::time::Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(started.elapsed() < DEADLINE, "sluice serve did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A connector's state and its tasks' states from a status body.
pub fn states(status: &Value) -> (String, Vec<String>) {
    let tasks =
        status["tasks"].as_array().map(|t| t.iter().map(|t| t["state"].as_str().unwrap_or("").to_string()).collect());
    (status["connector"]["state"].as_str().unwrap_or("").to_string(), tasks.unwrap_or_default())
}

/// Whether the connector and `tasks` tasks are all in `state`.
pub fn all_in(status: &Value, state: &str, tasks: usize) -> bool {
    let (connector, task_states) = states(status);
    connector == state && task_states.len() == tasks && task_states.iter().all(|s| s == state)
}

/// The counter's records in a local topic of `tenant`: (task, seq) of every record, in
/// topic order (values are `<task>-<seq>` padded with dots).
pub fn counter_records(data: &Path, tenant: &str, topic: &str) -> Vec<(u32, u64)> {
    let stores = crate::stores(data).unwrap();
    let mut records = Vec::new();
    let mut next = 0;
    loop {
        let page = stores.local().read(tenant, topic, next, 10_000).unwrap();
        let Some(last) = page.last() else { break };
        next = last.offset + 1;
        for stored in page {
            let value = String::from_utf8(stored.record.value.unwrap().to_vec()).unwrap();
            let (task, seq) = value.trim_end_matches('.').split_once('-').unwrap();
            records.push((task.parse().unwrap(), seq.parse().unwrap()));
        }
    }
    records
}

/// Asserts each task's records are exactly `0..count`, in order.
pub fn assert_counter_exactly_once(records: &[(u32, u64)], tasks: u32, count: u64, what: &str) {
    for task in 0..tasks {
        let seqs: Vec<u64> = records.iter().filter(|(t, _)| *t == task).map(|(_, seq)| *seq).collect();
        assert_eq!(seqs.len() as u64, count, "{what}: task {task} has {} records, expected {count}", seqs.len());
        assert!(
            seqs.iter().copied().eq(0..count),
            "{what}: task {task}'s records are not 0..{count} once each in order"
        );
    }
}
