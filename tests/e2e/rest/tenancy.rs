//! The tenancy matrix: two tenants and the operator through every endpoint. A tenant never
//! reads, changes, restarts, deletes or sees the offsets of another's connector (those are
//! 404s, never 403s), names are per tenant, quotas and roots are checked on create and
//! update, and every request without a valid token is a 401.

use serde_json::json;

use super::{Server, all_in, plugin_folder};

const ACME: &str = "acme-token";
const GLOBEX: &str = "globex-token";
const OPERATOR: &str = "operator-token";

fn counter(name: &str, topic: &str) -> String {
    json!({"name": name, "config": {"connector.class": "counter", "topic": topic, "records.per.second": "100"}})
        .to_string()
}

/// Every endpoint about one connector: (method, path after `/connectors/{name}`, body).
const CONNECTOR_ENDPOINTS: &[(&str, &str, Option<&str>)] = &[
    ("GET", "", None),
    ("DELETE", "", None),
    ("GET", "/config", None),
    ("GET", "/status", None),
    ("POST", "/restart", None),
    ("POST", "/restart?includeTasks=true", None),
    ("PUT", "/pause", None),
    ("PUT", "/resume", None),
    ("PUT", "/stop", None),
    ("GET", "/tasks", None),
    ("GET", "/tasks/0/status", None),
    ("POST", "/tasks/0/restart", None),
    ("GET", "/topics", None),
    ("PUT", "/topics/reset", None),
    ("GET", "/offsets", None),
    ("PATCH", "/offsets", Some(r#"{"offsets": [{"partition": {"counter": 0}, "offset": null}]}"#)),
    ("DELETE", "/offsets", None),
];

/// Every other endpoint: (method, path, body).
const WORKER_ENDPOINTS: &[(&str, &str, Option<&str>)] = &[
    ("GET", "/", None),
    ("GET", "/connectors", None),
    ("GET", "/connectors?expand=status&expand=info", None),
    ("POST", "/connectors", Some(r#"{"name": "n", "config": {"connector.class": "counter", "topic": "t"}}"#)),
    ("PUT", "/connectors/n/config", Some(r#"{"connector.class": "counter", "topic": "t"}"#)),
    ("GET", "/connector-plugins", None),
    ("GET", "/connector-plugins/counter/config", None),
    ("PUT", "/connector-plugins/counter/config/validate", Some(r#"{"topic": "t"}"#)),
    ("GET", "/sluice/rejected-plugins", None),
    ("GET", "/metrics", None),
    ("GET", "/admin/loggers", None),
    ("PUT", "/admin/loggers/sluice", Some(r#"{"level": "INFO"}"#)),
];

/// The roots of acme and globex under `dir`, made and canonical.
fn tenant_roots(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let root = |name: &str| {
        let path = dir.join(name);
        std::fs::create_dir_all(&path).unwrap();
        std::fs::canonicalize(path).unwrap()
    };
    (root("acme"), root("globex"))
}

#[test]
fn tenants_see_and_touch_only_their_own_connectors() {
    let dir = tempfile::tempdir().unwrap();
    let (acme_root, globex_root) = tenant_roots(dir.path());
    let toml = format!(
        "[operator]\ntoken_sha256 = \"{}\"\n\n\
         [[tenant]]\nname = \"acme\"\ntoken_sha256 = \"{}\"\nroots = [\"{}\"]\n[tenant.quotas]\nconnectors = 2\n\n\
         [[tenant]]\nname = \"globex\"\ntoken_sha256 = \"{}\"\nroots = [\"{}\"]\n",
        sluice::config::hash_token(OPERATOR),
        sluice::config::hash_token(ACME),
        acme_root.display(),
        sluice::config::hash_token(GLOBEX),
        globex_root.display(),
    );
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, toml).unwrap();
    let server = Server::start(&dir.path().join("data"), &plugin_folder(dir.path(), &["counter"]), Some(&config));

    // Names are per tenant: both have `files`; globex also has `g-only`.
    assert_eq!(server.call("POST", "/connectors", Some(ACME), Some(&counter("files", "acme-files"))).status, 201);
    assert_eq!(server.call("POST", "/connectors", Some(GLOBEX), Some(&counter("files", "globex-files"))).status, 201);
    assert_eq!(server.call("POST", "/connectors", Some(GLOBEX), Some(&counter("g-only", "g"))).status, 201);
    assert_eq!(server.call("GET", "/connectors/files/config", Some(ACME), None).json()["topic"], "acme-files");
    assert_eq!(server.call("GET", "/connectors/files/config", Some(GLOBEX), None).json()["topic"], "globex-files");
    assert_eq!(server.call("GET", "/connectors", Some(ACME), None).json(), json!(["files"]));
    assert_eq!(server.call("GET", "/connectors", Some(GLOBEX), None).json(), json!(["files", "g-only"]));
    let expanded = server.call("GET", "/connectors?expand=status", Some(ACME), None).json();
    assert_eq!(expanded.as_object().unwrap().keys().collect::<Vec<_>>(), ["files"]);
    server.wait_for("g-only running", "/connectors/g-only/status", Some(GLOBEX), |s| all_in(s, "RUNNING", 1));
    server.wait_for("g-only committed", "/connectors/g-only/offsets", Some(GLOBEX), |o| o["offsets"][0].is_object());

    // Another tenant's connector does not exist for acme, however it is named: every
    // answer is the one for a name nobody has.
    for (name, never) in [("g-only", "never"), ("globex%2Fg-only", "globex%2Fnever")] {
        for (method, suffix, body) in CONNECTOR_ENDPOINTS {
            let reply = server.call(method, &format!("/connectors/{name}{suffix}"), Some(ACME), *body);
            let nobody = server.call(method, &format!("/connectors/{never}{suffix}"), Some(ACME), *body);
            reply.assert_error(404);
            let unnamed = |text: &str| text.replace("g-only", "NAME").replace("never", "NAME");
            assert_eq!(
                unnamed(&reply.body),
                unnamed(&nobody.body),
                "{method} {name}{suffix} differs from a missing connector"
            );
        }
    }
    // Acme's PUT of that name makes acme's own connector; globex's is untouched.
    let own = server.call(
        "PUT",
        "/connectors/g-only/config",
        Some(ACME),
        Some(r#"{"connector.class": "counter", "topic": "mine"}"#),
    );
    assert_eq!(own.status, 201, "{own:?}");
    let theirs = server.call("GET", "/connectors/g-only/config", Some(GLOBEX), None).json();
    assert_eq!(theirs["topic"], "g");
    let status = server.call("GET", "/connectors/g-only/status", Some(GLOBEX), None).json();
    assert!(all_in(&status, "RUNNING", 1), "acme's requests changed globex's connector: {status}");
    assert!(server.call("GET", "/connectors/g-only/offsets", Some(GLOBEX), None).json()["offsets"][0].is_object());
    assert_eq!(server.call("DELETE", "/connectors/g-only", Some(ACME), None).status, 204);
    assert_eq!(server.call("GET", "/connectors/g-only", Some(GLOBEX), None).status, 200);

    // Without a token, or with a wrong one: 401 everywhere but the API's description.
    for (method, path, body) in CONNECTOR_ENDPOINTS
        .iter()
        .map(|(m, s, b)| (*m, format!("/connectors/files{s}"), *b))
        .chain(WORKER_ENDPOINTS.iter().map(|(m, p, b)| (*m, p.to_string(), *b)))
    {
        server.call(method, &path, None, body).assert_error(401);
        server.call(method, &path, Some("not-a-token"), body).assert_error(401);
        let basic = server.call_with(method, &path, &[("Authorization", "Basic YWNtZTphY21l".into())], body);
        basic.assert_error(401);
    }
    assert_eq!(server.get("/openapi.json").status, 200);
    // KIP-1017's probe needs no token.
    assert_eq!(server.get("/health").json()["status"], "healthy");
    assert_eq!(server.call("GET", "/connectors/files/status", Some(GLOBEX), None).status, 200, "still there");

    // Quotas and roots, with the key named in the 400.
    assert_eq!(server.call("POST", "/connectors", Some(ACME), Some(&counter("second", "s"))).status, 201);
    let over = server.call("POST", "/connectors", Some(ACME), Some(&counter("third", "t"))).assert_error(400);
    assert!(over.contains("name") && over.contains("quota"), "{over}");
    let outside = json!({"connector.class": "counter", "topic": "t", "sandbox.fs.read": globex_root});
    let refused =
        server.call("PUT", "/connectors/second/config", Some(ACME), Some(&outside.to_string())).assert_error(400);
    assert!(refused.contains("sandbox.fs.read") && refused.contains("outside"), "{refused}");
    let inside = json!({"connector.class": "counter", "topic": "t", "sandbox.fs.read": acme_root});
    assert_eq!(server.call("PUT", "/connectors/second/config", Some(ACME), Some(&inside.to_string())).status, 200);
    let sneaky = json!({"name": "x", "config": {"connector.class": "counter", "topic": "t", "tenant": "globex"}});
    assert!(server.call("POST", "/connectors", Some(GLOBEX), Some(&sneaky.to_string())).status == 201);
    let sneaky = json!({"name": "y", "config": {"connector.class": "counter", "topic": "t", "tenant": "globex"}});
    assert!(
        server.call("POST", "/connectors", Some(ACME), Some(&sneaky.to_string())).assert_error(400).contains("tenant")
    );
    let report = server.call(
        "PUT",
        "/connector-plugins/counter/config/validate",
        Some(ACME),
        Some(&json!({"name": "q", "topic": "t"}).to_string()),
    );
    assert!(report.json()["error_count"].as_u64().unwrap() >= 1, "acme's quota shows in validate: {}", report.body);
    // What a create refuses, validate reports: another tenant's key, a '/' in the name.
    for (config, key, reason) in [
        (json!({"name": "q", "topic": "t", "tenant": "globex"}), "tenant", "is not the tenant of this request (acme)"),
        (json!({"name": "x/y", "topic": "t"}), "name", "'/' is not allowed"),
    ] {
        let report =
            server.call("PUT", "/connector-plugins/counter/config/validate", Some(ACME), Some(&config.to_string()));
        let report = report.json();
        let errors: Vec<String> = report["configs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["value"]["name"] == key)
            .flat_map(|c| c["value"]["errors"].as_array().unwrap().iter().map(|e| e.as_str().unwrap().to_string()))
            .collect();
        assert!(errors.iter().any(|e| e.contains(reason)), "{key}: {reason} not in {report}");
    }
    let slash = json!({"connector.class": "counter", "topic": "t", "name": "x/y"});
    let refused =
        server.call("PUT", "/connectors/x%2Fy/config", Some(ACME), Some(&slash.to_string())).assert_error(400);
    assert!(refused.contains("'/' is not allowed"), "{refused}");
    // The tenant's config does not show the tenant key; the operator's does. Nor do its
    // tasks' configs, nor a validate report of a config that did not name it.
    assert!(server.call("GET", "/connectors/second/config", Some(ACME), None).json().get("tenant").is_none());
    assert_eq!(server.call("GET", "/connectors/second/config", Some(OPERATOR), None).status, 404);
    let qualified = server.call("GET", "/connectors/acme%2Fsecond/config", Some(OPERATOR), None).json();
    assert_eq!(qualified["tenant"], "acme", "{qualified}");
    server.wait_for("second has its tasks", "/connectors/second/tasks", Some(ACME), |t| {
        t.as_array().is_some_and(|t| !t.is_empty())
    });
    let tasks = server.call("GET", "/connectors/second/tasks", Some(ACME), None).json();
    assert!(tasks.as_array().unwrap().iter().all(|t| t["config"].get("tenant").is_none()), "{tasks}");
    let tasks_config = server.call("GET", "/connectors/second/tasks-config", Some(ACME), None).json();
    assert!(tasks_config.as_object().unwrap().values().all(|c| c.get("tenant").is_none()), "{tasks_config}");
    let by_operator = server.call("GET", "/connectors/acme%2Fsecond/tasks", Some(OPERATOR), None).json();
    assert_eq!(by_operator[0]["config"]["tenant"], "acme", "{by_operator}");
    let report = server
        .call(
            "PUT",
            "/connector-plugins/counter/config/validate",
            Some(ACME),
            Some(&json!({"name": "q", "topic": "t"}).to_string()),
        )
        .json();
    let shown = report["configs"].as_array().unwrap().iter().find(|c| c["value"]["name"] == "tenant").cloned();
    assert!(shown.is_none_or(|c| c["value"]["value"].is_null()), "{report}");

    // A tenant's metrics are its own connectors' series; the operator's are every tenant's.
    let own = server.call("GET", "/metrics", Some(ACME), None);
    assert_eq!(own.status, 200);
    assert!(own.body.contains(r#"tenant="acme",connector="files""#), "{}", own.body);
    assert!(!own.body.contains(r#"tenant="globex""#), "a tenant reads another's metrics: {}", own.body);
    assert!(own.body.contains("sluice_connector_count 2\n"), "{}", own.body);
    let metrics = server.call("GET", "/metrics", Some(OPERATOR), None);
    assert_eq!(metrics.status, 200);
    assert!(metrics.body.contains(r#"tenant="globex",connector="g-only""#), "{}", metrics.body);
    // Log levels are the worker's: the operator's alone.
    for (method, path, body) in
        [("GET", "/admin/loggers", None), ("PUT", "/admin/loggers/sluice", Some(r#"{"level": "INFO"}"#))]
    {
        server.call(method, path, Some(ACME), body).assert_error(403);
        assert_eq!(server.call(method, path, Some(OPERATOR), body).status, 200);
    }

    // The operator sees every tenant, by qualified names or with X-Sluice-Tenant.
    let all = server.call("GET", "/connectors", Some(OPERATOR), None).json();
    assert_eq!(all, json!(["acme/files", "acme/second", "globex/files", "globex/g-only", "globex/x"]));
    let status = server.call("GET", "/connectors/globex%2Fg-only/status", Some(OPERATOR), None).json();
    assert_eq!(status["name"], "globex/g-only");
    let about_acme = [("Authorization", format!("Bearer {OPERATOR}")), ("X-Sluice-Tenant", "acme".to_string())];
    assert_eq!(server.call_with("GET", "/connectors", &about_acme, None).json(), json!(["files", "second"]));
    assert_eq!(server.call_with("GET", "/connectors/files/config", &about_acme, None).json()["topic"], "acme-files");
    server.call_with("GET", "/connectors/g-only", &about_acme, None).assert_error(404);
    let about_nobody = [("Authorization", format!("Bearer {OPERATOR}")), ("X-Sluice-Tenant", "nobody".to_string())];
    let unknown = server.call_with("GET", "/connectors", &about_nobody, None).assert_error(400);
    assert!(unknown.contains("unknown tenant 'nobody'"), "{unknown}");
    // A create's qualified name for another tenant than the header's is a 400, not a 404.
    let elsewhere = server.call_with("POST", "/connectors", &about_acme, Some(&counter("globex/o2", "op")));
    let elsewhere = elsewhere.assert_error(400);
    assert!(elsewhere.contains("globex") && elsewhere.contains("X-Sluice-Tenant"), "{elsewhere}");
    // A PUT's URL names the connector it changes: `files` is the default tenant's for the
    // operator, so a `tenant` key naming another is refused, not a second connector made.
    let moved = json!({"connector.class": "counter", "topic": "t", "tenant": "globex"}).to_string();
    let refused = server.call("PUT", "/connectors/stray/config", Some(OPERATOR), Some(&moved)).assert_error(400);
    assert!(refused.contains("tenant") && refused.contains("globex%2Fstray"), "{refused}");
    let patched = server.call("PATCH", "/connectors/acme%2Ffiles/config", Some(OPERATOR), Some(&moved));
    assert!(patched.assert_error(400).contains("tenant"), "{patched:?}");
    let all = server.call("GET", "/connectors", Some(OPERATOR), None).json();
    assert_eq!(all, json!(["acme/files", "acme/second", "globex/files", "globex/g-only", "globex/x"]));
    let made = server.call("POST", "/connectors", Some(OPERATOR), Some(&counter("globex/by-op", "op")));
    assert_eq!(made.status, 201, "{made:?}");
    assert_eq!(made.json()["name"], "globex/by-op");
    assert_eq!(server.call("GET", "/connectors/by-op/config", Some(GLOBEX), None).json()["topic"], "op");
    // A config read through the operator's view and put back under the name it was
    // listed by (`globex/by-op`) is the same connector's.
    let mut config = server.call("GET", "/connectors/globex%2Fby-op/config", Some(OPERATOR), None).json();
    config["name"] = json!("globex/by-op");
    config["records.per.second"] = json!("7");
    let put = server.call("PUT", "/connectors/globex%2Fby-op/config", Some(OPERATOR), Some(&config.to_string()));
    assert_eq!(put.status, 200, "{put:?}");
    let stored = server.call("GET", "/connectors/by-op/config", Some(GLOBEX), None).json();
    assert_eq!((&stored["name"], &stored["records.per.second"]), (&json!("by-op"), &json!("7")), "{stored}");
    assert_eq!(server.call("PUT", "/connectors/globex%2Fby-op/pause", Some(OPERATOR), None).status, 202);
    server.wait_for("by-op paused", "/connectors/by-op/status", Some(GLOBEX), |s| s["connector"]["state"] == "PAUSED");
    assert_eq!(server.call("DELETE", "/connectors/globex%2Fby-op", Some(OPERATOR), None).status, 204);
    server.call("GET", "/connectors/by-op", Some(GLOBEX), None).assert_error(404);
}

/// The values of a tenant's local topic.
fn topic_values(data: &std::path::Path, tenant: &str, topic: &str) -> Vec<String> {
    let stores = crate::stores(data).unwrap();
    let page = stores.local().read(tenant, topic, 0, 100_000).unwrap();
    page.into_iter().map(|stored| String::from_utf8_lossy(&stored.record.value.unwrap()).into_owned()).collect()
}

#[test]
fn a_granted_directory_swapped_for_a_link_is_not_followed_on_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (acme_root, globex_root) = tenant_roots(dir.path());
    let toml = format!(
        "[[tenant]]\nname = \"acme\"\ntoken_sha256 = \"{}\"\nroots = [\"{}\"]\n\n\
         [[tenant]]\nname = \"globex\"\ntoken_sha256 = \"{}\"\nroots = [\"{}\"]\n",
        sluice::config::hash_token(ACME),
        acme_root.display(),
        sluice::config::hash_token(GLOBEX),
        globex_root.display(),
    );
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, toml).unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, &plugin_folder(dir.path(), &["file-pulse"]), Some(&config));

    let inbox = acme_root.join("in");
    std::fs::create_dir(&inbox).unwrap();
    std::fs::write(inbox.join("mine.txt"), "acme-line\n").unwrap();
    std::fs::write(globex_root.join("secret.txt"), "globex-secret\n").unwrap();
    let pulse = json!({"name": "fp", "config": {
        "connector.class": "file-pulse", "topic": "fp", "tasks.max": "1",
        "fs.listing.directory.path": inbox, "sandbox.fs.read": inbox,
        "monitor.interval.ms": "100", "fs.listing.interval.ms": "100"}});
    assert_eq!(server.call("POST", "/connectors", Some(ACME), Some(&pulse.to_string())).status, 201);
    crate::wait_until("acme's line", || (topic_values(&data, "acme", "fp") == ["acme-line"]).then_some(()));

    // The granted directory becomes a link into globex's root, then acme restarts it.
    std::fs::rename(&inbox, acme_root.join("in.real")).unwrap();
    std::os::unix::fs::symlink(&globex_root, &inbox).unwrap();
    let restarted = server.call("POST", "/connectors/fp/restart?includeTasks=true", Some(ACME), None);
    assert_eq!(restarted.status, 202, "{restarted:?}");
    let failed =
        server.wait_for("fp failed", "/connectors/fp/status", Some(ACME), |s| s["connector"]["state"] == "FAILED");
    let trace = failed["connector"]["trace"].as_str().unwrap_or_default();
    assert!(trace.contains("sandbox.fs.read") && trace.contains("now leads to"), "{failed}");
    // Its task, restarted too, is not running on the link either: nothing of globex's is read.
    server.wait_for("its task stopped or failed", "/connectors/fp/status", Some(ACME), |s| {
        s["tasks"].as_array().is_some_and(|t| t.iter().all(|t| t["state"] == "FAILED"))
    });
    assert_eq!(topic_values(&data, "acme", "fp"), ["acme-line"], "another tenant's file was read");
}

#[test]
fn a_connector_that_cannot_come_back_does_not_keep_others_within_the_quota_from_starting() {
    let dir = tempfile::tempdir().unwrap();
    let (acme_root, _) = tenant_roots(dir.path());
    let toml = |connectors: u32| {
        format!(
            "[[tenant]]\nname = \"acme\"\ntoken_sha256 = \"{}\"\nroots = [\"{}\"]\n[tenant.quotas]\nconnectors = {connectors}\n",
            sluice::config::hash_token(ACME),
            acme_root.display(),
        )
    };
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, toml(3)).unwrap();
    let (data, plugins) = (dir.path().join("data"), plugin_folder(dir.path(), &["counter", "file-pulse"]));
    let mut server = Server::start(&data, &plugins, Some(&config));
    let inbox = acme_root.join("in");
    std::fs::create_dir(&inbox).unwrap();
    let files = json!({"name": "a-files", "config": {"connector.class": "file-pulse", "topic": "lines",
        "fs.listing.directory.path": inbox, "sandbox.fs.read": inbox}});
    assert_eq!(server.call("POST", "/connectors", Some(ACME), Some(&files.to_string())).status, 201);
    for name in ["b", "c"] {
        assert_eq!(server.call("POST", "/connectors", Some(ACME), Some(&counter(name, name))).status, 201);
    }
    assert!(server.terminate().success());

    // The quota lowered to two, and the first connector's folder gone: the two that can
    // run do; the one that cannot is listed FAILED and takes no place.
    std::fs::write(&config, toml(2)).unwrap();
    std::fs::remove_dir(&inbox).unwrap();
    let server = Server::start(&data, &plugins, Some(&config));
    for name in ["b", "c"] {
        server.wait_for(&format!("{name} running"), &format!("/connectors/{name}/status"), Some(ACME), |s| {
            all_in(s, "RUNNING", 1)
        });
    }
    let failed = server.call("GET", "/connectors/a-files/status", Some(ACME), None).json();
    assert_eq!(failed["connector"]["state"], "FAILED", "{failed}");
}

/// The `tenant` key counts by its text, as the config stores it: `"tenant": 42` is tenant
/// `42`'s, refused from another tenant and honoured by the operator, never a way past the
/// tenant check (into another tenant, or to grant its directories). Validate checks a
/// config as the tenant a create would store it under, the operator's qualified name's
/// too. A name too long for a URL is refused before it is made.
#[test]
fn a_tenant_key_counts_by_its_text_and_every_name_made_stays_addressable() {
    const TENANT_42: &str = "t42-token";
    let dir = tempfile::tempdir().unwrap();
    let (acme_root, t42_root) = {
        let (acme, _) = tenant_roots(dir.path());
        let t42 = dir.path().join("t42");
        std::fs::create_dir_all(&t42).unwrap();
        (acme, std::fs::canonicalize(t42).unwrap())
    };
    let toml = format!(
        "[operator]\ntoken_sha256 = \"{}\"\n\n\
         [[tenant]]\nname = \"acme\"\ntoken_sha256 = \"{}\"\nroots = [\"{}\"]\n\n\
         [[tenant]]\nname = \"42\"\ntoken_sha256 = \"{}\"\nroots = [\"{}\"]\n",
        sluice::config::hash_token(OPERATOR),
        sluice::config::hash_token(ACME),
        acme_root.display(),
        sluice::config::hash_token(TENANT_42),
        t42_root.display(),
    );
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, toml).unwrap();
    let server = Server::start(&dir.path().join("data"), &plugin_folder(dir.path(), &["counter"]), Some(&config));
    let t42 = t42_root.display().to_string();
    let into_42 = |name: &str| {
        json!({"name": name, "config": {"connector.class": "counter", "topic": "t", "records.per.second": "10",
            "tenant": 42, "sandbox.fs.read": t42}})
        .to_string()
    };
    let operator_list = || server.call("GET", "/connectors", Some(OPERATOR), None).json();

    // A tenant's create or patch naming tenant 42 by a number is refused as by text.
    let refused = server.call("POST", "/connectors", Some(ACME), Some(&into_42("sneak"))).assert_error(400);
    assert!(refused.contains("tenant") && refused.contains("'42' is not the tenant of this request"), "{refused}");
    assert_eq!(server.call("POST", "/connectors", Some(ACME), Some(&counter("own", "mine"))).status, 201);
    let patch = json!({"tenant": 42, "sandbox.fs.read": t42}).to_string();
    let refused = server.call("PATCH", "/connectors/own/config", Some(ACME), Some(&patch)).assert_error(400);
    assert!(refused.contains("tenant"), "{refused}");
    assert!(server.call("GET", "/connectors/own/config", Some(ACME), None).json().get("sandbox.fs.read").is_none());
    // The operator's PUT of the default tenant's name: the URL to use, as with text.
    let put = json!({"connector.class": "counter", "topic": "x", "tenant": 42}).to_string();
    let refused = server.call("PUT", "/connectors/sneak/config", Some(OPERATOR), Some(&put)).assert_error(400);
    assert!(refused.contains("/connectors/42%2Fsneak/config"), "{refused}");
    // The operator's create goes to tenant 42, and says so.
    let made = server.call("POST", "/connectors", Some(OPERATOR), Some(&into_42("n42")));
    assert_eq!(made.status, 201, "{made:?}");
    assert_eq!(made.header("Location"), Some("/connectors/42%2Fn42"));
    assert_eq!(made.json()["name"], "42/n42");
    let listed = operator_list();
    assert!(listed.as_array().unwrap().contains(&json!("42/n42")), "{listed}");
    assert!(!listed.as_array().unwrap().contains(&json!("42/sneak")), "{listed}");
    assert_eq!(server.call("GET", "/connectors", Some(TENANT_42), None).json(), json!(["n42"]));

    // Validate checks as the caller's tenant whatever the body says, and as the tenant an
    // operator's qualified name names: a directory of tenant 42 is outside acme's roots.
    let validate = |token: &str, config: serde_json::Value| {
        let report =
            server.call("PUT", "/connector-plugins/counter/config/validate", Some(token), Some(&config.to_string()));
        let report = report.json();
        report["configs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["value"]["name"] == "sandbox.fs.read")
            .flat_map(|c| c["value"]["errors"].as_array().unwrap().iter().map(|e| e.as_str().unwrap().to_string()))
            .collect::<Vec<_>>()
    };
    for tenant in [json!("42"), json!(42)] {
        let errors = validate(ACME, json!({"name": "v", "topic": "t", "tenant": tenant, "sandbox.fs.read": t42}));
        assert!(errors.iter().any(|e| e.contains("outside tenant acme's roots")), "{errors:?}");
    }
    let errors = validate(OPERATOR, json!({"name": "acme/v", "topic": "t", "sandbox.fs.read": t42}));
    assert!(errors.iter().any(|e| e.contains("outside tenant acme's roots")), "{errors:?}");
    assert!(validate(OPERATOR, json!({"name": "42/v", "topic": "t", "sandbox.fs.read": t42})).is_empty());

    // Names: a number in a body's `name` is the URL's name; a name past 255 bytes is
    // refused (it could never be addressed again), one of 255 is made and deleted.
    let numeric = json!({"connector.class": "counter", "topic": "t", "name": 5, "records.per.second": "10"});
    assert_eq!(server.call("PUT", "/connectors/5/config", Some(ACME), Some(&numeric.to_string())).status, 201);
    assert_eq!(server.call("DELETE", "/connectors/5", Some(ACME), None).status, 204);
    let long = "é".repeat(128);
    let refused = server.call("POST", "/connectors", Some(ACME), Some(&counter(&long, "t"))).assert_error(400);
    assert!(refused.contains("at most 255 bytes") && refused.contains("256"), "{refused}");
    let longest = format!("{}x", "é".repeat(127));
    assert_eq!(server.call("POST", "/connectors", Some(ACME), Some(&counter(&longest, "t"))).status, 201);
    let path = format!("/connectors/{}", longest.replace('é', "%C3%A9"));
    assert_eq!(server.call("DELETE", &path, Some(ACME), None).status, 204);
}
