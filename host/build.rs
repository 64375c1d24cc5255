//! Builds the WebAssembly plugins from source so that the quick start and the tests always
//! run fresh components: `plugins/*` (shipped examples) and `tests/plugins/*` (fixtures).
//!
//! The nested cargo uses its own target directory (`target/wasm`), as wasmtime's
//! test-programs do, so it never waits on the lock held by the outer build.
//!
//! The Python plugin is built with componentize-py and the JavaScript plugin with
//! componentize-js, each installed by the build into a private place at a pinned version
//! (pip into `target/wasm/python-tools`, `npm ci` from the plugin's own lock file), so
//! nothing needs installing by hand but Python 3 with pip and Node.js with npm. A missing
//! toolchain leaves that plugin out with a warning that says how to install it, so the
//! quick start needs only Rust; the tests then fail with the same words
//! (`sluice::PLUGIN_BUILD_PROBLEMS`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// (crate as cargo names its `.wasm`, folder under the target dir it is copied to)
const PLUGINS: &[(&str, &str)] = &[
    ("counter", "plugins"),
    ("file_pulse", "plugins"),
    ("testkit", "test-plugins"),
    ("hostile", "test-plugins"),
    ("slow_version", "test-plugins"),
    ("slow_config_def", "test-plugins"),
    ("counter_next", "test-plugins"),
    ("counter_v0_2", "test-plugins"),
];

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir.parent().unwrap().to_path_buf();
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|dir| if dir.is_absolute() { dir } else { root.join(dir) })
        .unwrap_or_else(|| root.join("target"));
    for watched in ["wit", "plugins", "tests/plugins", "host/templates", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }

    println!("cargo:rustc-env=SLUICE_COMMIT={}", git_commit(&root));
    println!("cargo:rustc-env=SLUICE_BUILT_PLUGINS={}", target_dir.join("plugins").display());
    println!("cargo:rustc-env=SLUICE_TEST_PLUGINS={}", target_dir.join("test-plugins").display());
    println!("cargo:rerun-if-env-changed=SLUICE_SKIP_PLUGIN_BUILD");
    // The fuzz target links the host library only; it needs no plugins.
    if std::env::var_os("SLUICE_SKIP_PLUGIN_BUILD").is_some() {
        println!("cargo:rustc-env=SLUICE_PLUGIN_BUILD_PROBLEMS=the plugins were not built (SLUICE_SKIP_PLUGIN_BUILD)");
        return;
    }
    let wasm_target_dir = target_dir.join("wasm");
    ensure_wasm_target();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(&cargo);
    command
        .current_dir(&root)
        .args(["build", "--release", "--target", "wasm32-wasip2", "--target-dir"])
        .arg(&wasm_target_dir);
    for (krate, _) in PLUGINS {
        command.args(["-p", &krate.replace('_', "-")]);
    }
    // The outer build's flags and wrappers (clippy, coverage) are for the host target.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_MAKEFLAGS",
        "MAKEFLAGS",
        "MFLAGS",
    ] {
        command.env_remove(var);
    }
    let status = command.status().expect("could not run cargo to build the plugins");
    if !status.success() {
        panic!(
            "building the WebAssembly plugins failed (see above). If the error is about a \
             missing target, run: rustup target add wasm32-wasip2"
        );
    }

    for (krate, folder) in PLUGINS {
        let built = wasm_target_dir.join("wasm32-wasip2/release").join(format!("{krate}.wasm"));
        let dest_dir = target_dir.join(folder);
        std::fs::create_dir_all(&dest_dir).unwrap();
        let dest = dest_dir.join(format!("{}.wasm", krate.replace('_', "-")));
        copy_if_changed(&built, &dest);
    }

    // A missing Python or JavaScript toolchain does not stop the build (the quick start
    // needs only Rust): it is reported as a warning, the plugin is left out, and the tests
    // fail on it with the same install instructions (`sluice::PLUGIN_BUILD_PROBLEMS`).
    let plugins_dir = target_dir.join("plugins");
    let mut problems = Vec::new();
    let (python_dir, javascript_dir) = (wasm_target_dir.join("python"), wasm_target_dir.join("javascript"));
    let test_plugins_dir = target_dir.join("test-plugins");
    let (wit_0_1, wit_0_4) = (root.join("wit"), root.join("wit/0.4.0"));
    let sensor_fleet = root.join("plugins/sensor-fleet");
    let ndjson_replay = build_javascript_plugin(&root, "ndjson-replay", &javascript_dir, &plugins_dir);
    // The minimal Python and JavaScript connectors `sluice-bench record-path` measures
    // (test fixtures; the JavaScript one uses the componentize-js ndjson-replay installed).
    let counter_js = match &ndjson_replay {
        Ok(()) => build_javascript_file(&root, "counter-js", &wit_0_4, &javascript_dir, &test_plugins_dir),
        Err(_) => Err("the JavaScript plugin counter-js was not built: see ndjson-replay".to_string()),
    };
    let built = [
        ("sensor-fleet", build_python_plugin(&sensor_fleet, &wit_0_1, "sensor-fleet", &python_dir, &plugins_dir)),
        ("ndjson-replay", ndjson_replay),
        (
            "counter-py",
            build_python_plugin(
                &root.join("tests/plugins/counter-py"),
                &wit_0_4,
                "counter-py",
                &python_dir,
                &test_plugins_dir,
            ),
        ),
        ("counter-js", counter_js),
    ];
    for (name, result) in built {
        if let Err(problem) = result {
            let folder = if name.starts_with("counter-") { &test_plugins_dir } else { &plugins_dir };
            let stale = folder.join(format!("{name}.wasm"));
            let _ = std::fs::remove_file(&stale);
            // A missing path makes cargo rerun this script on every build until it is fixed.
            println!("cargo:rerun-if-changed={}", stale.display());
            println!("cargo:warning={problem}");
            problems.push(problem);
        }
    }
    println!("cargo:rustc-env=SLUICE_PLUGIN_BUILD_PROBLEMS={}", problems.join(" | "));
}

/// The componentize-py release the Python plugins are built with.
const COMPONENTIZE_PY: &str = "0.25.1";

/// How to run componentize-py: `$COMPONENTIZE_PY` when set, else the pinned release,
/// installed by pip into `<tools_dir>` on first use (as `npm ci` installs componentize-js),
/// so no global Python package is needed. `Err` (one line, saying what to install) when
/// neither works.
fn componentize_py(tools_dir: &Path) -> Result<Command, String> {
    println!("cargo:rerun-if-env-changed=COMPONENTIZE_PY");
    if let Ok(tool) = std::env::var("COMPONENTIZE_PY") {
        println!("cargo:rustc-env=SLUICE_COMPONENTIZE_PY=env '{tool}'");
        return Ok(Command::new(tool));
    }
    let tools_dir = tools_dir.join(COMPONENTIZE_PY);
    let script = tools_dir.join("bin/componentize-py");
    // For the scaffold test, which builds a generated Python project as its user would.
    println!(
        "cargo:rustc-env=SLUICE_COMPONENTIZE_PY=env PYTHONPATH='{}' python3 '{}'",
        tools_dir.display(),
        script.display()
    );
    let python = || {
        let mut command = Command::new("python3");
        command.env("PYTHONPATH", &tools_dir).env("PYTHONDONTWRITEBYTECODE", "1");
        command
    };
    if !script.exists() {
        println!("cargo:warning=installing componentize-py {COMPONENTIZE_PY} into {}", tools_dir.display());
        let _ = std::fs::remove_dir_all(&tools_dir);
        let installed = python()
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-warn-script-location"])
            .arg("--target")
            .arg(&tools_dir)
            .arg(format!("componentize-py=={COMPONENTIZE_PY}"))
            .status();
        if !installed.is_ok_and(|s| s.success()) || !script.exists() {
            let _ = std::fs::remove_dir_all(&tools_dir);
            return Err(format!(
                "componentize-py {COMPONENTIZE_PY} could not be installed into target/: the build needs python3 \
                 with pip (Debian: `apt-get install python3-pip`), or COMPONENTIZE_PY set to a componentize-py"
            ));
        }
    }
    let mut command = python();
    command.arg(script);
    Ok(command)
}

/// `<source>/app.py` (and the other `.py` files beside it), for the world in `wit`, to
/// `<name>.wasm` in `plugins_dir`; `Err` (one line, with what to install) when
/// componentize-py cannot be had.
fn build_python_plugin(
    source: &Path,
    wit: &Path,
    name: &str,
    work_dir: &Path,
    plugins_dir: &Path,
) -> Result<(), String> {
    let tool = || componentize_py(&work_dir.join("python-tools"));
    let not_built = |problem: String| format!("the Python plugin {name} was not built: {problem}");
    let version = tool().map_err(not_built)?.arg("--version").output().ok().filter(|o| o.status.success());
    let Some(version) = version else {
        return Err(not_built(format!(
            "componentize-py did not run (set COMPONENTIZE_PY to a working one, or delete {} to reinstall it)",
            work_dir.join("python-tools").display()
        )));
    };
    if !String::from_utf8_lossy(&version.stdout).contains(COMPONENTIZE_PY) {
        println!(
            "cargo:warning=componentize-py is {}; the tested version is {COMPONENTIZE_PY}",
            String::from_utf8_lossy(&version.stdout).trim()
        );
    }
    let inputs = [files_with_ext(source, "py"), files_with_ext(wit, "wit")].concat();
    let out = work_dir.join(format!("{name}.wasm"));
    let mut command = tool().map_err(not_built)?;
    command
        .arg("-d")
        .arg(wit)
        .args(["-w", "source-connector", "componentize", "-p"])
        .arg(source)
        .arg("app")
        .arg("-o")
        .arg(&out);
    build_if_changed(&inputs, &version.stdout, &out, || command);
    copy_if_changed(&out, &plugins_dir.join(format!("{name}.wasm")));
    Ok(())
}

/// `plugins/<name>` (an npm project with `build.mjs`) to `<name>.wasm`; `Err` when Node.js
/// is missing or `npm ci` cannot install componentize-js.
fn build_javascript_plugin(root: &Path, name: &str, work_dir: &Path, plugins_dir: &Path) -> Result<(), String> {
    let source = root.join("plugins").join(name);
    let node = Command::new("node").arg("--version").output().ok().filter(|o| o.status.success());
    let Some(node) = node else {
        return Err(format!(
            "the JavaScript plugin {name} was not built: Node.js was not found. Install Node.js 20 or \
             later with npm (Debian: `apt-get install nodejs npm`)"
        ));
    };
    // `npm ci` whenever node_modules was not installed from this very lock file.
    let lock = source.join("package-lock.json");
    let lock_hash = hash_hex(&std::fs::read(&lock).unwrap_or_else(|e| panic!("{}: {e}", lock.display())));
    let installed_from = source.join("node_modules/.installed-from-lock");
    if std::fs::read_to_string(&installed_from).ok().as_deref() != Some(&lock_hash) {
        println!("cargo:warning=installing componentize-js for {name}: npm ci --prefix plugins/{name}");
        let installed = Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(&source).status();
        if !installed.is_ok_and(|s| s.success()) {
            return Err(format!(
                "the JavaScript plugin {name} was not built: `npm ci` could not install componentize-js \
                 (run `npm ci --prefix plugins/{name}` to see why)"
            ));
        }
        std::fs::write(&installed_from, &lock_hash).unwrap();
    }
    let inputs = [
        files_with_ext(&source.join("src"), "js"),
        files_with_ext(&source.join("data"), "ndjson"),
        files_with_ext(&root.join("wit"), "wit"),
        // The WASI file helper and the WIT it needs, shared with the JavaScript template.
        files_with_ext(&root.join("host/templates/js"), "js"),
        files_with_ext(&root.join("host/templates/js/wit/deps"), "wit"),
        vec![source.join("build.mjs"), source.join("files.wit"), lock],
    ]
    .concat();
    let out = work_dir.join(format!("{name}.wasm"));
    build_if_changed(&inputs, &node.stdout, &out, || {
        let mut command = Command::new("node");
        command.arg(source.join("build.mjs")).arg(&out);
        command
    });
    copy_if_changed(&out, &plugins_dir.join(format!("{name}.wasm")));
    Ok(())
}

/// `tests/plugins/<name>/`, a folder holding one `.js` module, for the world in `wit`, to
/// `<name>.wasm` in `out_dir`, with the componentize-js that ndjson-replay's `npm ci`
/// installed.
fn build_javascript_file(root: &Path, name: &str, wit: &Path, work_dir: &Path, out_dir: &Path) -> Result<(), String> {
    let source = root.join("tests/plugins").join(name);
    let files = files_with_ext(&source, "js");
    let [module] = files.as_slice() else {
        return Err(format!("the JavaScript plugin {name} was not built: {} must hold one .js file", source.display()));
    };
    let tool = root.join("plugins/ndjson-replay/node_modules/.bin/componentize-js");
    let node = Command::new("node").arg("--version").output().map_err(|e| format!("{name}: node: {e}"))?;
    let inputs = [files.clone(), files_with_ext(wit, "wit")].concat();
    let out = work_dir.join(format!("{name}.wasm"));
    build_if_changed(&inputs, &node.stdout, &out, || {
        let mut command = Command::new(&tool);
        command.arg("--wit").arg(wit).args(["--world-name", "source-connector", "--disable", "http", "fetch-event"]);
        command.arg("-o").arg(&out).arg(module);
        command
    });
    std::fs::create_dir_all(out_dir).unwrap();
    copy_if_changed(&out, &out_dir.join(format!("{name}.wasm")));
    Ok(())
}

fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| path.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    files
}

/// Runs `command` unless `out` was built from these very inputs (and tool version) before:
/// componentizing takes seconds, and the build script reruns on any change under `plugins/`.
fn build_if_changed(inputs: &[PathBuf], tool_version: &[u8], out: &Path, command: impl FnOnce() -> Command) {
    let contents: Vec<(&PathBuf, Vec<u8>)> = inputs
        .iter()
        .map(|input| (input, std::fs::read(input).unwrap_or_else(|e| panic!("{}: {e}", input.display()))))
        .collect();
    let fingerprint = hash_hex(&(contents, tool_version));
    let stamp = out.with_extension("inputs");
    if out.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&fingerprint) {
        return;
    }
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let mut command = command();
    let status = command.status().unwrap_or_else(|e| panic!("could not run {command:?}: {e}"));
    if !status.success() {
        panic!("building {} failed (see above): {command:?}", out.display());
    }
    std::fs::write(stamp, fingerprint).unwrap();
}

/// A stamp for build inputs (the toolchain is fixed per build, so its hasher is stable).
fn hash_hex(value: &impl std::hash::Hash) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut hasher);
    format!("{:016x}", std::hash::Hasher::finish(&hasher))
}

/// `rust-toolchain.toml` names the target, but rustup adds it only when it installs the
/// toolchain; a toolchain that was already there needs `rustup target add`.
fn ensure_wasm_target() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(rustc).args(["--print", "sysroot"]).output().ok().filter(|o| o.status.success());
    let Some(sysroot) = sysroot else { return };
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    if sysroot.join("lib/rustlib/wasm32-wasip2").exists() {
        return;
    }
    let mut rustup = Command::new("rustup");
    rustup.args(["target", "add", "wasm32-wasip2"]);
    if let Ok(toolchain) = std::env::var("RUSTUP_TOOLCHAIN") {
        rustup.args(["--toolchain", &toolchain]);
    }
    match rustup.status() {
        Ok(status) if status.success() => {}
        _ => println!("cargo:warning=the wasm32-wasip2 target is missing and `rustup target add wasm32-wasip2` failed"),
    }
}

/// Copying only changed files keeps the modification time (and the host's compile
/// cache key, which is the content hash anyway) stable across builds.
fn copy_if_changed(from: &Path, to: &Path) {
    let new = std::fs::read(from).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    if std::fs::read(to).ok().as_deref() != Some(&new[..]) {
        std::fs::write(to, new).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
    }
}

/// The commit checked out in `root` (`GET /`'s `commit`), rebuilt when HEAD moves; `unknown`
/// outside a git checkout.
fn git_commit(root: &Path) -> String {
    let git = root.join(".git");
    for watched in [git.join("HEAD"), git.join("refs/heads"), git.join("packed-refs")] {
        if watched.exists() {
            println!("cargo:rerun-if-changed={}", watched.display());
        }
    }
    Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(root)
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|commit| commit.trim().to_string())
        .filter(|commit| !commit.is_empty())
        .unwrap_or_else(|| "unknown".into())
}
