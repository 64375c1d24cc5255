//! The live plugin folder while a connector streams: a file added appears in
//! `GET /connector-plugins`; a replaced file is used by connectors created (or restarted)
//! afterwards while running ones keep their code, two versions side by side; a half-copied
//! and a garbage file are listed with their reason and never stop the others; a removed
//! file stops nothing. What the streaming connectors deliver is exactly once throughout.
//! A connector whose plugin or granted directory was gone when `serve` started stays
//! listed, FAILED with why, and starts on a restart once it is back.

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

#[test]
fn a_connector_whose_plugin_was_gone_at_start_is_restarted_once_it_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let plugins = plugin_folder(dir.path(), &["counter"]);
    let mut server = Server::start(&data, &plugins, None);
    let body =
        json!({"name": "c", "config": {"connector.class": "counter", "topic": "c", "records.per.second": "100"}});
    assert_eq!(server.call("POST", "/connectors", None, Some(&body.to_string())).status, 201);
    server.wait_for("c running", "/connectors/c/status", None, |s| all_in(s, "RUNNING", 1));
    assert!(server.terminate().success());

    // Brought back without its plugin: FAILED, saying why; a restart is refused with why.
    let code = std::fs::read(plugins.join("counter.wasm")).unwrap();
    std::fs::remove_file(plugins.join("counter.wasm")).unwrap();
    let server = Server::start(&data, &plugins, None);
    let failed = server.wait_for("c failed", "/connectors/c/status", None, |s| s["connector"]["state"] == "FAILED");
    assert!(failed["connector"]["trace"].as_str().is_some_and(|t| t.contains("counter")), "{failed}");
    let refused = server.call("POST", "/connectors/c/restart", None, None).assert_error(400);
    assert!(refused.contains("connector.class") && !refused.contains("STOPPED"), "{refused}");

    // The plugin back in the folder: a restart starts it, as Connect restarts a FAILED one.
    std::fs::write(plugins.join("counter.wasm"), code).unwrap();
    crate::wait_until("counter back", || plugin_version(&server, "counter"));
    let restarted = server.call("POST", "/connectors/c/restart?includeTasks=true", None, None);
    assert_eq!(restarted.status, 202, "{restarted:?}");
    server.wait_for("c running again", "/connectors/c/status", None, |s| all_in(s, "RUNNING", 1));
    let before = counter_records(&data, "default", "c").len();
    crate::wait_until("c streaming again", || (counter_records(&data, "default", "c").len() > before).then_some(()));
}

/// As in Connect, resume only sets the target state: a STOPPED connector whose plugin file
/// was removed meanwhile is resumed (202) and FAILED with why, and a restart starts it
/// once the file is back.
#[test]
fn a_stopped_connector_resumed_without_its_plugin_fails_and_restarts_once_it_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let plugins = plugin_folder(dir.path(), &[]);
    let code = std::fs::read(built_plugin("counter")).unwrap();
    std::fs::write(plugins.join("cnt2.wasm"), &code).unwrap();
    let server = Server::start(&data, &plugins, None);
    crate::wait_until("cnt2 listed", || plugin_version(&server, "cnt2"));
    let body = json!({"name": "r", "config": {"connector.class": "cnt2", "topic": "r", "records.per.second": "100"}});
    assert_eq!(server.call("POST", "/connectors", None, Some(&body.to_string())).status, 201);
    server.wait_for("r running", "/connectors/r/status", None, |s| all_in(s, "RUNNING", 1));
    assert_eq!(server.call("PUT", "/connectors/r/stop", None, None).status, 204);

    std::fs::remove_file(plugins.join("cnt2.wasm")).unwrap();
    crate::wait_until("cnt2 gone", || plugin_version(&server, "cnt2").is_none().then_some(()));
    assert_eq!(server.call("PUT", "/connectors/r/resume", None, None).status, 202);
    let failed = server.wait_for("r failed", "/connectors/r/status", None, |s| s["connector"]["state"] == "FAILED");
    assert!(failed["connector"]["trace"].as_str().is_some_and(|t| t.contains("cnt2")), "{failed}");
    assert_eq!(failed["tasks"], json!([]), "{failed}");

    std::fs::write(plugins.join("cnt2.wasm"), &code).unwrap();
    crate::wait_until("cnt2 back", || plugin_version(&server, "cnt2"));
    assert_eq!(server.call("POST", "/connectors/r/restart?includeTasks=true", None, None).status, 202);
    server.wait_for("r running again", "/connectors/r/status", None, |s| all_in(s, "RUNNING", 1));
    let before = counter_records(&data, "default", "r").len();
    crate::wait_until("r streaming again", || (counter_records(&data, "default", "r").len() > before).then_some(()));
}

#[test]
fn a_connector_whose_granted_directory_was_gone_at_start_stays_listed_failed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let input = dir.path().join("in");
    std::fs::create_dir(&input).unwrap();
    let plugins = plugin_folder(dir.path(), &["file-pulse"]);
    let mut server = Server::start(&data, &plugins, None);
    let input_text = input.to_str().unwrap();
    let body = json!({"name": "files", "config": {"connector.class": "file-pulse", "topic": "lines",
        "fs.listing.directory.path": input_text, "sandbox.fs.read": input_text}});
    assert_eq!(server.call("POST", "/connectors", None, Some(&body.to_string())).status, 201);
    server.wait_for("files running", "/connectors/files/status", None, |s| s["connector"]["state"] == "RUNNING");
    assert!(server.terminate().success());

    // Brought back without the folder it was granted: listed, FAILED naming the key, and
    // its name still taken; never a 404 that a create would then quietly reuse.
    std::fs::remove_dir(&input).unwrap();
    let server = Server::start(&data, &plugins, None);
    let failed =
        server.wait_for("files failed", "/connectors/files/status", None, |s| s["connector"]["state"] == "FAILED");
    let trace = failed["connector"]["trace"].as_str().unwrap_or_default();
    assert!(trace.contains("sandbox.fs.read") && trace.contains("cannot be granted"), "{failed}");
    assert_eq!(server.get("/connectors").json(), json!(["files"]));
    assert_eq!(server.get("/connectors/files/config").json()["fs.listing.directory.path"], input_text);
    let again = json!({"name": "files", "config": {"connector.class": "file-pulse", "topic": "other"}});
    server.call("POST", "/connectors", None, Some(&again.to_string())).assert_error(409);
    let refused = server.call("POST", "/connectors/files/restart", None, None).assert_error(400);
    assert!(refused.contains("sandbox.fs.read"), "{refused}");

    // The folder back: a restart starts it; and a delete removes it.
    std::fs::create_dir(&input).unwrap();
    let restarted = server.call("POST", "/connectors/files/restart?includeTasks=true", None, None);
    assert_eq!(restarted.status, 202, "{restarted:?}");
    server.wait_for("files running again", "/connectors/files/status", None, |s| s["connector"]["state"] == "RUNNING");
    assert_eq!(server.call("DELETE", "/connectors/files", None, None).status, 204);
    assert_eq!(server.get("/connectors").json(), json!([]));
}

#[test]
fn serve_answers_and_streams_before_a_slow_plugin_of_the_folder_is_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let plugins = plugin_folder(dir.path(), &["counter", "slow-config-def"]);
    std::fs::write(plugins.join("garbage.wasm"), b"not a component").unwrap();
    let server = Server::start(&data, &plugins, None);
    let body = json!({"name": "fast", "config": {"connector.class": "counter", "topic": "fast", "record.count": "5"}});
    assert_eq!(server.call("POST", "/connectors", None, Some(&body.to_string())).status, 201);
    crate::wait_until("the counter's five records", || {
        (counter_records(&data, "default", "fast").len() == 5).then_some(())
    });
    // slow-config-def's config-def runs into its 10 s load deadline; nothing waited for it.
    assert!(!server.log().contains("slow-config-def"), "{}", server.log());

    // The plugin lists are of the whole folder: they answer once every file was looked at.
    assert_eq!(
        server.get("/connector-plugins").json(),
        json!([{"class": "counter", "type": "source", "version": "0.1.0"}])
    );
    let rejected = server.get("/sluice/rejected-plugins").json();
    let files: Vec<&str> = rejected.as_array().unwrap().iter().map(|r| r["file"].as_str().unwrap()).collect();
    assert!(files.iter().any(|f| f.ends_with("slow-config-def.wasm")), "{rejected}");
    assert!(files.iter().any(|f| f.ends_with("garbage.wasm")), "{rejected}");
}
