//! `sluice new connector NAME --lang rust|python|js`: each template is created by the
//! binary, copied elsewhere (the Rust project carries its own copy of the SDK), built with
//! the steps it prints, and run by `sluice run`; a second run with three tasks instead of
//! one and a larger `record.count` must resume every stream after its committed offset:
//! every record exactly once, although the streams moved between tasks.

use std::path::Path;
use std::process::{Child, Command};

use sluice::config::DEFAULT_TENANT;

use crate::{run, sluice, wait_until};

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Creates the project and returns the build steps `sluice new` printed.
fn scaffold(name: &str, lang: &str, project: &Path) -> Vec<String> {
    let output = run(&["new", "connector", name, "--lang", lang, "--dir", project.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "sluice new failed: {}", String::from_utf8_lossy(&output.stderr));
    let (_, next) = stdout.split_once("next, in").unwrap_or_else(|| panic!("no next steps in:\n{stdout}"));
    next.lines().skip(1).map(str::trim).filter(|l| !l.starts_with("sluice run")).map(String::from).collect()
}

/// Where a test puts the tools a user would have installed (first on the build's `PATH`).
const TEST_BIN: &str = ".test-bin";

fn build(project: &Path, steps: &[String]) {
    let path = format!("{}:{}", project.join(TEST_BIN).display(), std::env::var("PATH").unwrap_or_default());
    for step in steps {
        let status = Command::new("sh").arg("-c").arg(step).env("PATH", &path).current_dir(project).status().unwrap();
        assert!(status.success(), "build step failed in {}: {step}", project.display());
    }
}

fn start(project: &Path, data: &Path) -> Child {
    let mut command = sluice();
    command.current_dir(project).args(["run", "--plugin-path", "."]).arg("--data-dir").arg(data);
    command.arg("connector.json").spawn().unwrap()
}

fn values(data: &Path, topic: &str) -> Vec<String> {
    let Ok(db) = crate::stores(data) else { return Vec::new() };
    let records = db.local().read(DEFAULT_TENANT, topic, 0, usize::MAX >> 1).unwrap_or_default();
    records.into_iter().map(|r| String::from_utf8(r.record.value.unwrap()).unwrap()).collect()
}

/// The templates' default streams.
const STREAMS: [&str; 4] = ["north", "south", "east", "west"];

/// Every stream's messages 0..count, sorted.
fn expected(count: u64) -> Vec<String> {
    let mut all: Vec<String> = STREAMS
        .iter()
        .flat_map(|stream| (0..count).map(move |n| format!(r#"{{"stream":"{stream}","n":{n},"message":"hello"}}"#)))
        .collect();
    all.sort();
    all
}

/// Runs the built project until it has sent `count` records per stream, then stops it.
fn run_until(project: &Path, data: &Path, name: &str, count: u64) {
    let mut child = start(project, data);
    let total = count * STREAMS.len() as u64;
    wait_until(&format!("{name} to send {total} records"), || (values(data, name).len() as u64 >= total).then_some(()));
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Each stream's messages in the topic are 0, 1, 2, ... in order, and together exactly
/// `expected(count)`: nothing lost, nothing sent twice.
fn assert_exactly_once(values: &[String], count: u64, lang: &str) {
    for stream in STREAMS {
        let numbers: Vec<u64> = values
            .iter()
            .map(|v| serde_json::from_str::<serde_json::Value>(v).unwrap())
            .filter(|v| v["stream"] == stream)
            .map(|v| v["n"].as_u64().unwrap())
            .collect();
        assert!(numbers.iter().copied().eq(0..count), "{lang}: stream {stream} sent {numbers:?}");
    }
    let mut sorted = values.to_vec();
    sorted.sort();
    assert_eq!(sorted, expected(count), "{lang}: records lost or repeated");
}

/// `prepare` readies the project for this machine and returns the printed steps to skip.
fn build_and_run(lang: &str, prepare: impl FnOnce(&Path) -> Vec<&'static str>) {
    let dir = tempfile::tempdir().unwrap();
    let name = format!("hello-{lang}");
    let generated = dir.path().join("generated").join(&name);
    let steps = scaffold(&name, lang, &generated);
    // Built from a copy elsewhere, as a user moves a project: nothing in it may point back
    // at where it was made or at this checkout.
    let project = dir.path().join(&name);
    let copied = Command::new("cp").arg("-r").arg(&generated).arg(&project).status().unwrap();
    assert!(copied.success());
    std::fs::remove_dir_all(dir.path().join("generated")).unwrap();
    for file in ["Cargo.toml", "sluice-connector/Cargo.toml", "package.json"] {
        let text = std::fs::read_to_string(project.join(file)).unwrap_or_default();
        assert!(!text.contains(repo().to_str().unwrap()), "{file} points into the checkout: {text}");
    }
    let skip = prepare(&project);
    build(&project, &steps.into_iter().filter(|s| !skip.contains(&s.as_str())).collect::<Vec<_>>());
    assert!(project.join(format!("{name}.wasm")).exists(), "the build made no {name}.wasm");

    let data = dir.path().join("data");
    run_until(&project, &data, &name, 10);
    assert_exactly_once(&values(&data, &name), 10, lang);
    // Run again with more tasks and more messages: the streams move to other tasks, which
    // resume after each stream's committed offset.
    let connector = project.join("connector.json");
    let text = std::fs::read_to_string(&connector).unwrap();
    let resized = text.replace(r#""record.count": "10""#, r#""record.count": "15""#);
    let resized = resized.replace(r#""tasks.max": "1""#, r#""tasks.max": "3""#);
    assert_ne!(resized, text);
    std::fs::write(&connector, resized).unwrap();
    run_until(&project, &data, &name, 15);
    assert_exactly_once(&values(&data, &name), 15, lang);
}

#[test]
fn rust_template_builds_and_runs() {
    build_and_run("rust", |project| {
        // Share the plugins' wasm build folder (its dependencies are already compiled)
        // and build offline from the crates that build downloaded.
        std::os::unix::fs::symlink(repo().join("target/wasm"), project.join("target")).unwrap();
        std::fs::create_dir_all(project.join(".cargo")).unwrap();
        std::fs::write(project.join(".cargo/config.toml"), "[net]\noffline = true\n").unwrap();
        vec![]
    });
}

#[test]
fn python_template_builds_and_runs() {
    build_and_run("python", |project| {
        // The user installed componentize-py (the generated README says how); the build of
        // this repository installed the same pinned release privately: put it on PATH.
        let bin = project.join(TEST_BIN);
        std::fs::create_dir_all(&bin).unwrap();
        let shim = bin.join("componentize-py");
        std::fs::write(&shim, format!("#!/bin/sh\nexec {} \"$@\"\n", env!("SLUICE_COMPONENTIZE_PY"))).unwrap();
        std::fs::set_permissions(&shim, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        vec![]
    });
}

#[test]
fn javascript_template_builds_and_runs() {
    build_and_run("js", |project| {
        // The template pins the packages that ndjson-replay's lock file installed;
        // use that install rather than fetching it again, so `npm install` is skipped.
        let template: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(project.join("package.json")).unwrap()).unwrap();
        let ours: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(repo().join("plugins/ndjson-replay/package.json")).unwrap())
                .unwrap();
        assert_eq!(
            template["devDependencies"], ours["devDependencies"],
            "the template and ndjson-replay pin different versions"
        );
        std::os::unix::fs::symlink(repo().join("plugins/ndjson-replay/node_modules"), project.join("node_modules"))
            .unwrap();
        vec!["npm install"]
    });
}

#[test]
fn a_bad_name_or_a_used_folder_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("p");
    let output = run(&["new", "connector", "My_Source", "--lang", "python", "--dir", project.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("connector name 'My_Source'"), "{stderr}");
    assert!(!project.exists(), "nothing may be written for a bad name");

    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("keep.txt"), "mine").unwrap();
    let output = run(&["new", "connector", "ok", "--lang", "js", "--dir", project.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("exists and is not empty"));
    assert_eq!(std::fs::read_dir(&project).unwrap().count(), 1, "a used folder must be left as it was");
}
