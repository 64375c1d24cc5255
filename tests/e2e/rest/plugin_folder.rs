//! The live plugin folder while a connector streams: a file added appears in
//! `GET /connector-plugins`; a replaced file is used by connectors created (or restarted)
//! afterwards while running ones keep their code, two versions side by side; a half-copied
//! and a garbage file are listed with their reason and never stop the others; a removed
//! file stops nothing. What the streaming connectors deliver is exactly once throughout.

use std::path::Path;

use serde_json::json;

use super::{Server, all_in, assert_counter_exactly_once, built_plugin, counter_records, plugin_folder};

const COUNT: u64 = 4000;

fn ticker(name: &str) -> String {
    json!({"name": name, "config": {
        "connector.class": "ticker", "topic": name, "tasks.max": "2",
        "record.count": COUNT.to_string(), "records.per.second": "250", "batch.size": "20"}})
    .to_string()
}

fn plugin_version(server: &Server, name: &str) -> Option<String> {
    let listed = server.get("/connector-plugins").json();
    listed.as_array().unwrap().iter().find(|p| p["class"] == name).map(|p| p["version"].as_str().unwrap().to_string())
}

fn rejected(server: &Server, file: &str) -> Option<String> {
    let listed = server.get("/sluice/rejected-plugins").json();
    listed
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["file"].as_str().is_some_and(|f| f.ends_with(file)))
        .map(|r| r["reason"].as_str().unwrap().to_string())
}

/// Writes `bytes` the way `cp` does: in place, in pieces.
fn copy_in_place(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    let mut file = std::fs::File::create(path).unwrap();
    for chunk in bytes.chunks(256 << 10) {
        file.write_all(chunk).unwrap();
    }
}

#[test]
fn plugins_come_and_go_while_connectors_stream() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let plugins = plugin_folder(dir.path(), &[]);
    let (old_code, new_code) =
        (std::fs::read(built_plugin("counter")).unwrap(), std::fs::read(built_plugin("counter-next")).unwrap());
    std::fs::write(plugins.join("ticker.wasm"), &old_code).unwrap();
    let mut server = Server::start(&data, &plugins, None);
    assert_eq!(plugin_version(&server, "ticker").as_deref(), Some("0.1.0"));
    assert_eq!(server.call("POST", "/connectors", None, Some(&ticker("old"))).status, 201);
    server.wait_for("old streaming", "/connectors/old/status", None, |s| all_in(s, "RUNNING", 2));

    // Added: compiled and listed within seconds.
    std::fs::copy(built_plugin("file-pulse"), plugins.join("pulse.wasm")).unwrap();
    server.wait_for("pulse listed", "/connector-plugins", None, |l| l.to_string().contains(r#""class":"pulse""#));

    // Half copied: rejected with a reason, then loaded once the copy completes.
    std::fs::write(plugins.join("partial.wasm"), &new_code[..new_code.len() / 2]).unwrap();
    let reason = crate::wait_until("partial.wasm rejected", || rejected(&server, "partial.wasm"));
    assert!(!reason.is_empty());
    copy_in_place(&plugins.join("partial.wasm"), &new_code);
    crate::wait_until("partial.wasm loaded", || plugin_version(&server, "partial").filter(|v| v == "0.2.0-next"));
    assert_eq!(rejected(&server, "partial.wasm"), None);

    // Garbage: rejected, listed, nothing else affected.
    std::fs::write(plugins.join("garbage.wasm"), b"\0asm\x0d\x00\x01\x00 this is not a component").unwrap();
    let reason = crate::wait_until("garbage.wasm rejected", || rejected(&server, "garbage.wasm"));
    assert!(reason.contains("component") || reason.contains("WebAssembly"), "{reason}");
    assert_eq!(plugin_version(&server, "ticker").as_deref(), Some("0.1.0"));

    // Replaced: new connectors get the new code while the old one keeps its own.
    copy_in_place(&plugins.join("ticker.wasm"), &new_code);
    crate::wait_until("ticker replaced", || plugin_version(&server, "ticker").filter(|v| v == "0.2.0-next"));
    assert_eq!(server.call("POST", "/connectors", None, Some(&ticker("new"))).status, 201);
    server.wait_for("new streaming", "/connectors/new/status", None, |s| all_in(s, "RUNNING", 2));
    let old = server.get("/connectors/old/status").json();
    let new = server.get("/connectors/new/status").json();
    assert!(all_in(&old, "RUNNING", 2) && all_in(&new, "RUNNING", 2), "{old}\n{new}");
    assert_eq!(old["connector"]["version"], "0.1.0", "the running connector keeps its code");
    assert_eq!(old["tasks"][0]["version"], "0.1.0");
    assert_eq!(new["connector"]["version"], "0.2.0-next");
    assert_eq!(new["tasks"][1]["version"], "0.2.0-next");

    // Removed: nothing running stops; nothing new can start on it.
    std::fs::remove_file(plugins.join("ticker.wasm")).unwrap();
    crate::wait_until("ticker gone", || plugin_version(&server, "ticker").is_none().then_some(()));
    let refused = server.call("POST", "/connectors", None, Some(&ticker("late"))).assert_error(400);
    assert!(refused.contains("connector.class"), "{refused}");
    // With the file gone, a restart restarts on the code the connector runs.
    assert_eq!(server.call("POST", "/connectors/old/restart?includeTasks=true", None, None).status, 202);
    server.wait_for("old running again", "/connectors/old/status", None, |s| all_in(s, "RUNNING", 2));
    assert_eq!(server.get("/connectors/old/status").json()["connector"]["version"], "0.1.0");

    // Back, as the new version: a restart of old now moves it to the new code.
    std::fs::write(plugins.join("ticker.wasm"), &new_code).unwrap();
    crate::wait_until("ticker back", || plugin_version(&server, "ticker").filter(|v| v == "0.2.0-next"));
    assert_eq!(server.call("POST", "/connectors/old/restart", None, None).status, 204);
    server.wait_for("old on the new code", "/connectors/old/status", None, |s| {
        all_in(s, "RUNNING", 2) && s["connector"]["version"] == "0.2.0-next" && s["tasks"][0]["version"] == "0.2.0-next"
    });

    for name in ["old", "new"] {
        server.wait_for(&format!("{name} delivered everything"), &format!("/connectors/{name}/offsets"), None, |o| {
            let done = |p: &serde_json::Value| p["offset"]["seq"].as_u64() == Some(COUNT - 1);
            o["offsets"].as_array().is_some_and(|list| list.len() == 2 && list.iter().all(done))
        });
    }
    assert!(server.terminate().success(), "{}", server.log());
    for name in ["old", "new"] {
        assert_counter_exactly_once(&counter_records(&data, "default", name), 2, COUNT, name);
    }
}
