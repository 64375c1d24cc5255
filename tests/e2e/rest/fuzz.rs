//! API fuzzing from the OpenAPI document: schemathesis (a schema-based fuzzer from PyPI,
//! pinned and installed by this test under `target/`, as `host/build.rs` installs
//! componentize-py) sends generated valid and invalid requests to every operation of a
//! real `sluice serve` with tenants, as a tenant. It must find no 5xx, no response whose
//! content type the document does not declare (every error is JSON), and the server must
//! be alive and answering afterwards.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Server, plugin_folder};

/// The schemathesis release the fuzz test runs.
const SCHEMATHESIS: &str = "4.32.5";
const TOKEN: &str = "fuzz-token";
const CONNECTORS: [&str; 4] = ["fuzzed", "fuzzed-2", "fuzzed-3", "fuzzed-4"];

/// schemathesis' install directory, installed by pip on first use.
fn schemathesis() -> PathBuf {
    let target = Path::new(sluice::BUILT_PLUGINS).parent().unwrap();
    let tools = target.join("python-tools").join(format!("schemathesis-{SCHEMATHESIS}"));
    if !tools.join("schemathesis").exists() {
        let installed = Command::new("python3")
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target"])
            .arg(&tools)
            .arg(format!("schemathesis=={SCHEMATHESIS}"))
            .status()
            .expect("python3 is needed to install schemathesis (the API fuzzer)");
        assert!(installed.success(), "pip could not install schemathesis=={SCHEMATHESIS} into {}", tools.display());
    }
    tools
}

#[test]
fn schemathesis_finds_no_server_error_and_no_non_json_error() {
    let tools = schemathesis();
    let dir = tempfile::tempdir().unwrap();
    let inbox = dir.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "[[tenant]]\nname = \"fuzz\"\ntoken_sha256 = \"{}\"\nroots = [\"{}\"]\n[tenant.quotas]\nconnectors = 20\n",
            sluice::config::hash_token(TOKEN),
            std::fs::canonicalize(&inbox).unwrap().display()
        ),
    )
    .unwrap();
    let server = Server::start(&dir.path().join("data"), &plugin_folder(dir.path(), &["counter"]), Some(&config));
    // Connectors the generated requests name most of the time (random names are 404s), and
    // a plugin most generated configs name (random ones are 400s).
    for name in CONNECTORS {
        let body = format!(
            r#"{{"name": "{name}", "config": {{"connector.class": "counter", "topic": "t", "records.per.second": "50"}}}}"#
        );
        assert_eq!(server.call("POST", "/connectors", Some(TOKEN), Some(&body)).status, 201);
    }
    let settings = dir.path().join("schemathesis.toml");
    std::fs::write(
        &settings,
        format!(
            "[dictionaries.connectors]\nvalues = {CONNECTORS:?}\n\n[dictionaries.plugins]\nvalues = [\"counter\"]\n\n\
             [parameters]\n\"path.name\" = {{ dictionary = \"connectors\", probability = 0.7 }}\n\
             \"body.config.connector.class\" = {{ dictionary = \"plugins\", probability = 0.7 }}\n\
             \"path.plugin\" = {{ dictionary = \"plugins\", probability = 0.7 }}\n"
        ),
    )
    .unwrap();

    let output = Command::new("python3")
        .env("PYTHONPATH", &tools)
        .env("SCHEMATHESIS_HOOKS", "")
        .current_dir(dir.path())
        .args(["-m", "schemathesis.cli", "--config-file"])
        .arg(&settings)
        .arg("run")
        .arg(format!("{}/openapi.json", server.base))
        .args(["--url", &server.base])
        .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
        .args(["--checks", "not_a_server_error,content_type_conformance"])
        .args(["--phases", "examples,coverage,fuzzing,stateful"])
        // One worker: with two, hypothesis' shared lambda-source cache races in CPython's
        // AST parser now and then ("AST constructor recursion depth mismatch"), a tool
        // error that says nothing of the server.
        .args(["--max-examples", "100", "--workers", "1", "--seed", "1"])
        .args(["--suppress-health-check", "all", "--request-timeout", "60", "--no-color"])
        .output()
        .expect("running schemathesis");
    let report = format!("{}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    println!("{report}");
    assert!(output.status.success(), "schemathesis found problems:\n{report}\nserver log:\n{}", server.log());
    // Alive and answering.
    assert_eq!(server.call("GET", "/connectors", Some(TOKEN), None).status, 200, "{}", server.log());
}
