//! Builds the WebAssembly plugins from source so that the quick start and the tests always
//! run fresh components: `plugins/*` (shipped examples) and `tests/plugins/*` (fixtures).
//!
//! The nested cargo uses its own target directory (`target/wasm`), as wasmtime's
//! test-programs do, so it never waits on the lock held by the outer build.

use std::path::{Path, PathBuf};
use std::process::Command;

/// (crate as cargo names its `.wasm`, folder under the target dir it is copied to)
const PLUGINS: &[(&str, &str)] =
    &[("counter", "plugins"), ("file_pulse", "plugins"), ("testkit", "test-plugins"), ("hostile", "test-plugins")];

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir.parent().unwrap().to_path_buf();
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|dir| if dir.is_absolute() { dir } else { root.join(dir) })
        .unwrap_or_else(|| root.join("target"));
    for watched in ["wit", "plugins", "tests/plugins", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }

    println!("cargo:rustc-env=SLUICE_BUILT_PLUGINS={}", target_dir.join("plugins").display());
    println!("cargo:rustc-env=SLUICE_TEST_PLUGINS={}", target_dir.join("test-plugins").display());
    println!("cargo:rerun-if-env-changed=SLUICE_SKIP_PLUGIN_BUILD");
    // The fuzz target links the host library only; it needs no plugins.
    if std::env::var_os("SLUICE_SKIP_PLUGIN_BUILD").is_some() {
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
