//! `sluice new connector NAME --lang rust|python|js`: each template is created by the
//! binary, copied elsewhere (the Rust project carries its own copy of the SDK), built with
//! the steps it prints, and run by `sluice run --until-done`, which must exit 0 once its
//! tasks say they are done. A second run with three tasks instead of one, a larger
//! `record.count` and its message read from a granted file must resume every stream after
//! its committed offset: every record exactly once, although the streams moved between
//! tasks. A file outside every grant fails the task with a hint naming `sandbox.fs.read`;
//! an exception added to `poll` (a Python `raise`, a JavaScript `throw`, a Rust `panic!`)
//! fails it with its own message leading the trace, and `--until-done` exits 1.

use std::path::Path;
use std::process::{Command, Output};

use sluice::config::DEFAULT_TENANT;

use crate::{run, sluice};

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

/// `sluice run --until-done` of the project's connector file.
fn run_until_done(project: &Path, data: &Path) -> Output {
    let mut command = sluice();
    command.current_dir(project).args(["run", "--until-done", "--plugin-path", "."]).arg("--data-dir").arg(data);
    command.arg("connector.json").output().unwrap()
}

fn values(data: &Path, topic: &str) -> Vec<String> {
    let Ok(db) = crate::stores(data) else { return Vec::new() };
    let records = db.local().read(DEFAULT_TENANT, topic, 0, usize::MAX >> 1).unwrap_or_default();
    records.into_iter().map(|r| String::from_utf8(r.record.value.unwrap().to_vec()).unwrap()).collect()
}

/// The templates' default streams.
const STREAMS: [&str; 4] = ["north", "south", "east", "west"];

/// Runs the project until its tasks are done; the run must end by itself with 0.
fn run_to_the_end(project: &Path, data: &Path, lang: &str) {
    let output = run_until_done(project, data);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{lang}: --until-done did not exit 0:\n{stderr}");
    assert!(stderr.contains("every connector is FINISHED"), "{lang}: {stderr}");
}

/// Each stream's messages in the topic are 0, 1, 2, ... `count - 1` in order, each once,
/// and message `n` says `message(n)`.
fn assert_exactly_once(values: &[String], count: u64, lang: &str, message: impl Fn(u64) -> &'static str) {
    assert_eq!(values.len() as u64, count * STREAMS.len() as u64, "{lang}: records lost or repeated: {values:?}");
    for stream in STREAMS {
        let sent: Vec<serde_json::Value> = values
            .iter()
            .map(|v| serde_json::from_str::<serde_json::Value>(v).unwrap())
            .filter(|v| v["stream"] == stream)
            .collect();
        let numbers: Vec<u64> = sent.iter().map(|v| v["n"].as_u64().unwrap()).collect();
        assert!(numbers.iter().copied().eq(0..count), "{lang}: stream {stream} sent {numbers:?}");
        for value in sent {
            let n = value["n"].as_u64().unwrap();
            assert_eq!(value["message"], message(n), "{lang}: stream {stream} message {n}");
        }
    }
}

/// Sets `key` to `value` in the project's connector file.
fn set(project: &Path, key: &str, value: &str) {
    let file = project.join("connector.json");
    let mut connector: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    connector["config"][key] = value.into();
    std::fs::write(&file, serde_json::to_string_pretty(&connector).unwrap()).unwrap();
}

/// `prepare` readies the project for this machine and returns the printed steps to skip;
/// `source` and `anchor` say where an exception goes (before the anchor, in `poll`), and
/// `exception` is the statement that raises it with `boom from <lang>`.
fn build_and_run(
    lang: &str,
    prepare: impl FnOnce(&Path) -> Vec<&'static str>,
    (source, anchor, exception): (&str, &str, &str),
) {
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
    let steps: Vec<String> = steps.into_iter().filter(|s| !skip.contains(&s.as_str())).collect();
    build(&project, &steps);
    assert!(project.join(format!("{name}.wasm")).exists(), "the build made no {name}.wasm");

    let data = dir.path().join("data");
    run_to_the_end(&project, &data, lang);
    assert_exactly_once(&values(&data, &name), 10, lang, |_| "hello");

    // Again with more tasks and more messages, each read from a granted file: the streams
    // move to other tasks, which resume after each stream's committed offset.
    let granted = dir.path().join("granted");
    std::fs::create_dir_all(&granted).unwrap();
    std::fs::write(granted.join("message.txt"), "hello from a file\n").unwrap();
    set(&project, "record.count", "15");
    set(&project, "tasks.max", "3");
    // A stream named twice is still one stream, owned by one task (two sent it before).
    set(&project, "streams", "north,south,east,west,north");
    set(&project, "message.file", granted.join("message.txt").to_str().unwrap());
    set(&project, "sandbox.fs.read", granted.to_str().unwrap());
    run_to_the_end(&project, &data, lang);
    assert_exactly_once(&values(&data, &name), 15, lang, |n| if n < 10 { "hello" } else { "hello from a file" });

    // A file outside every grant: the task fails, and the trace says which grant to add.
    let outside = dir.path().join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("message.txt"), "not granted\n").unwrap();
    set(&project, "record.count", "20");
    set(&project, "message.file", outside.join("message.txt").to_str().unwrap());
    let output = run_until_done(&project, &data);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{lang}: {stderr}");
    // What `--until-done` printed last: the failure with its whole trace.
    let failure = stderr.rsplit_once("error: connector '").map_or("", |(_, trace)| trace);
    assert!(failure.contains("cannot read") && failure.contains("sandbox.fs.read"), "{lang}: {stderr}");
    assert_eq!(values(&data, &name).len(), 60, "{lang}: a failed start sent nothing");

    // A bug in `poll`: its own message leads the trace, before the wasm backtrace.
    set(&project, "message.file", "");
    let code = std::fs::read_to_string(project.join(source)).unwrap();
    assert!(code.contains(anchor), "{lang}: no {anchor:?} in {source}");
    std::fs::write(project.join(source), code.replacen(anchor, &format!("{exception}{anchor}"), 1)).unwrap();
    build(&project, &steps);
    let output = run_until_done(&project, &data);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{lang}: {stderr}");
    // What `--until-done` printed last: the failure with its whole trace.
    let failure = stderr.rsplit_once("error: connector '").map_or("", |(_, trace)| trace);
    let boom = failure.find(&format!("boom from {lang}")).unwrap_or_else(|| panic!("{lang}: {stderr}"));
    let trap = failure.find("trap in poll").unwrap_or_else(|| panic!("{lang}: {stderr}"));
    assert!(boom < trap, "{lang}: the guest's message must lead the trace:\n{failure}");
}

#[test]
fn rust_template_builds_and_runs() {
    build_and_run(
        "rust",
        |project| {
            // Share the plugins' wasm build folder (its dependencies are already compiled)
            // and build offline from the crates that build downloaded.
            std::os::unix::fs::symlink(repo().join("target/wasm"), project.join("target")).unwrap();
            // The project's own flags (SIMD, as this repository's plugins) stay.
            let config = project.join(".cargo/config.toml");
            let flags = std::fs::read_to_string(&config).unwrap();
            assert!(flags.contains("+simd128"), "{flags}");
            std::fs::write(&config, format!("{flags}\n[net]\noffline = true\n")).unwrap();
            vec![]
        },
        ("src/lib.rs", "        let mut records = Vec::new();", "        panic!(\"boom from rust\");\n"),
    );
}

#[test]
fn python_template_builds_and_runs() {
    build_and_run(
        "python",
        |project| {
            // The user installed componentize-py (the generated README says how); the build of
            // this repository installed the same pinned release privately: put it on PATH.
            let bin = project.join(TEST_BIN);
            std::fs::create_dir_all(&bin).unwrap();
            let shim = bin.join("componentize-py");
            std::fs::write(&shim, format!("#!/bin/sh\nexec {} \"$@\"\n", env!("SLUICE_COMPONENTIZE_PY"))).unwrap();
            std::fs::set_permissions(&shim, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
            vec![]
        },
        (
            "app.py",
            "        count = int(State.values[\"record.count\"])",
            "        raise ValueError(\"boom from python\")\n",
        ),
    );
}

#[test]
fn javascript_template_builds_and_runs() {
    build_and_run(
        "js",
        |project| {
            // The template pins the packages that ndjson-replay's lock file installed;
            // use that install rather than fetching it again, so `npm install` is skipped.
            let template: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(project.join("package.json")).unwrap()).unwrap();
            let ours: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(repo().join("plugins/ndjson-replay/package.json")).unwrap(),
            )
            .unwrap();
            assert_eq!(
                template["devDependencies"], ours["devDependencies"],
                "the template and ndjson-replay pin different versions"
            );
            std::os::unix::fs::symlink(repo().join("plugins/ndjson-replay/node_modules"), project.join("node_modules"))
                .unwrap();
            vec!["npm install"]
        },
        ("connector.js", "    const records = [];", "    throw new Error('boom from js');\n"),
    );
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
