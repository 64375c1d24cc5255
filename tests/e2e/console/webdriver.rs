//! A real headless Chromium driven over W3C WebDriver by `chromedriver` (Debian's
//! `chromium` and `chromium-driver`). The protocol is JSON over HTTP, so this is a thin
//! blocking client on the tests' own HTTP client (ureq) rather than an async WebDriver crate
//! and its runtime: start a session, navigate, find, click, type, read, run a script, take a
//! screenshot.
//!
//! When the browser is missing, a test run as root installs both packages with apt-get once
//! (as the Kafka tests install their broker); otherwise the test fails naming the packages.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use base64::Engine;
use serde_json::{Value, json};

use crate::{DEADLINE, wait_until};

/// The key W3C WebDriver names an element reference by.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|dir| dir.join(name)).find(|path| path.is_file()))
}

/// Chromium and its driver: `$SLUICE_CHROMIUM` and `$SLUICE_CHROMEDRIVER`, or on `PATH`.
fn browser_binaries() -> (PathBuf, PathBuf) {
    static FOUND: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let find = || {
                let chromium = std::env::var_os("SLUICE_CHROMIUM").map(PathBuf::from).or_else(|| on_path("chromium"));
                let driver =
                    std::env::var_os("SLUICE_CHROMEDRIVER").map(PathBuf::from).or_else(|| on_path("chromedriver"));
                chromium.zip(driver)
            };
            if let Some(found) = find() {
                return found;
            }
            let is_root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
            if is_root && on_path("apt-get").is_some() {
                let install = "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
                               --no-install-recommends chromium chromium-driver fonts-dejavu-core";
                let status = Command::new("sh").arg("-c").arg(install).status().expect("run apt-get");
                assert!(status.success(), "apt-get could not install chromium and chromium-driver");
            }
            find().expect(
                "the console's browser tests need Chromium and its WebDriver: install Debian's `chromium` and \
                 `chromium-driver` packages (or set SLUICE_CHROMIUM and SLUICE_CHROMEDRIVER)",
            )
        })
        .clone()
}

/// One headless Chromium window, closed (with its driver) when dropped.
pub struct Browser {
    driver: Child,
    endpoint: String,
    agent: ureq::Agent,
}

impl Browser {
    pub fn start() -> Browser {
        let (chromium, chromedriver) = browser_binaries();
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromedriver.display()));
        let agent = ureq::AgentBuilder::new().timeout(DEADLINE).build();
        let base = format!("http://127.0.0.1:{port}");
        wait_until("chromedriver to listen", || agent.get(&format!("{base}/status")).call().ok());
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1300,900", "--hide-scrollbars", "--force-device-scale-factor=1"],
            },
        }}});
        let mut browser = Browser { driver, endpoint: base, agent };
        let session = browser.command("POST", "/session", Some(capabilities)).expect("a Chromium session");
        let id = session["sessionId"].as_str().expect("a session id").to_string();
        browser.endpoint = format!("{}/session/{id}", browser.endpoint);
        browser
    }

    /// One WebDriver command: its `value`, or the driver's error message.
    fn command(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let request = self.agent.request(method, &format!("{}{path}", self.endpoint));
        let reply = match body {
            Some(body) => request.send_json(body),
            None => request.call(),
        };
        let reply = match reply {
            Ok(reply) => reply,
            Err(ureq::Error::Status(_, reply)) => reply,
            Err(e) => return Err(format!("{method} {path}: {e}")),
        };
        let ok = reply.status() == 200;
        let body: Value = reply.into_json().map_err(|e| e.to_string())?;
        let value = body.get("value").cloned().unwrap_or(Value::Null);
        if ok { Ok(value) } else { Err(format!("{method} {path}: {}", value["message"].as_str().unwrap_or("?"))) }
    }

    fn must(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.command(method, path, body).unwrap_or_else(|e| panic!("WebDriver: {e}"))
    }

    pub fn goto(&self, url: &str) {
        self.must("POST", "/url", Some(json!({ "url": url })));
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns what it returns.
    pub fn script(&self, script: &str, args: Value) -> Value {
        self.must("POST", "/execute/sync", Some(json!({ "script": script, "args": args })))
    }

    /// The element `css` matches, once it exists and is shown.
    pub fn element(&self, css: &str) -> String {
        wait_until(&format!("element {css}"), || {
            let found = self.command("POST", "/element", Some(json!({"using": "css selector", "value": css}))).ok()?;
            let id = found[ELEMENT].as_str()?.to_string();
            let shown = self.command("GET", &format!("/element/{id}/displayed"), None).ok()?;
            (shown == Value::Bool(true)).then_some(id)
        })
    }

    /// A real click on the element `css` matches (waiting for it to be shown and enabled).
    pub fn click(&self, css: &str) {
        wait_until(&format!("a click on {css}"), || {
            let id = self.element(css);
            let enabled = self.command("GET", &format!("/element/{id}/enabled"), None).ok()?;
            if enabled != Value::Bool(true) {
                return None;
            }
            self.command("POST", &format!("/element/{id}/click"), Some(json!({}))).ok()
        });
    }

    /// Types `text` into the element `css` matches, after clearing it.
    pub fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css);
        self.must("POST", &format!("/element/{id}/clear"), Some(json!({})));
        self.must("POST", &format!("/element/{id}/value"), Some(json!({ "text": text })));
    }

    /// The text the first element `css` matches shows (empty if none or hidden).
    pub fn text(&self, css: &str) -> String {
        let value =
            self.script("const e = document.querySelector(arguments[0]); return e ? e.innerText : '';", json!([css]));
        value.as_str().unwrap_or_default().to_string()
    }

    /// Waits until the text of `css` satisfies `check`, and returns it.
    pub fn wait_text(&self, css: &str, what: &str, check: impl Fn(&str) -> bool) -> String {
        wait_until(what, || Some(self.text(css)).filter(|text| check(text)))
    }

    /// Whether a JavaScript dialog (`alert`) is open: an injected script would open one.
    pub fn alert_open(&self) -> bool {
        self.command("GET", "/alert/text", None).is_ok()
    }

    /// A PNG of the top of the page, written to `path`.
    pub fn screenshot(&self, path: &Path) {
        self.script("window.scrollTo(0, 0)", json!([]));
        let png = self.must("GET", "/screenshot", None);
        let bytes = base64::engine::general_purpose::STANDARD.decode(png.as_str().expect("base64")).unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    /// The browser console's messages at level SEVERE (script errors, CSP violations).
    pub fn severe_logs(&self) -> Vec<String> {
        let logs = self.command("POST", "/se/log", Some(json!({"type": "browser"}))).unwrap_or(Value::Null);
        logs.as_array()
            .map(|entries| {
                entries
                    .iter()
                    .filter(|e| e["level"] == "SEVERE")
                    .filter_map(|e| e["message"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.command("DELETE", "", None);
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
