//! The README's quick start as a user types it: `cargo run --release -- demo` at the
//! workspace root (where cargo must pick `sluice` among the workspace's binaries) streams
//! the whole sample inbox, and Ctrl-C stops it cleanly with every line stored once.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::{stored_count, wait_until};

/// Lines in the demo's sample inbox (`host/src/cli/demo.rs`): three files of 20,000, a
/// gzipped one of 10,000, a CRLF file of three and an empty one.
const DEMO_LINES: u64 = 3 * 20_000 + 10_000 + 3;

/// The child, SIGKILLed when dropped (also when the test fails).
struct Demo(Child);

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_quick_start_command_streams_the_demo_inbox_and_ctrl_c_stops_it() {
    let dir = tempfile::tempdir().unwrap();
    let (demo, data) = (dir.path().join("sluice-demo"), dir.path().join("sluice-data"));
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let stderr = dir.path().join("stderr.txt");
    // The README's command, with the demo's two folders in a temporary directory rather
    // than the working directory, and the plugins from where the build puts them (the
    // default). `cargo run` replaces itself with `sluice` (exec), so a signal to the child
    // reaches the worker as a terminal's Ctrl-C does.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut child = Demo(
        Command::new(cargo)
            .current_dir(workspace)
            .args(["run", "--release", "--", "demo", "--dir"])
            .arg(&demo)
            .env("SLUICE_DATA_DIR", &data)
            .env("SLUICE_LOG", "warn")
            .env_remove("SLUICE_PLUGIN_PATH")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap(),
    );
    let said = || std::fs::read_to_string(&stderr).unwrap_or_default();
    wait_until("every line of the demo's inbox stored", || {
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!("the quick start ended on its own ({status}):\n{}", said());
        }
        (stored_count(&data) >= DEMO_LINES).then_some(())
    });
    let interrupt = Command::new("kill").arg("-INT").arg(child.0.id().to_string()).status().unwrap();
    assert!(interrupt.success());
    let status = wait_until("the demo to stop after Ctrl-C", || child.0.try_wait().unwrap());
    assert_eq!(status.code(), Some(0), "Ctrl-C must stop the demo cleanly:\n{}", said());
    assert!(said().contains("streaming"), "the demo did not say what it streams:\n{}", said());
    assert_eq!(stored_count(&data), DEMO_LINES, "every line of the sample inbox exactly once");
}
