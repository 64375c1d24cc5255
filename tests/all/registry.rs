//! The plugin folder: bad files are rejected with their name and reason without stopping
//! the good ones, and compiled components are cached by content.

use std::path::Path;

use sluice::runtime::Registry;
use sluice::runtime::Runtime;

use crate::common::plugin_file;

async fn load(dir: &Path, cache: &Path) -> Registry {
    Registry::load(&Runtime::new().unwrap(), dir, cache).await.unwrap()
}

fn reason<'a>(registry: &'a Registry, file: &str) -> &'a str {
    let rejected = registry.rejected.iter().find(|r| r.file.file_name().unwrap() == file);
    &rejected.unwrap_or_else(|| panic!("{file} was not rejected: {:?}", registry.rejected)).reason
}

fn assert_reason(registry: &Registry, file: &str, expected: &str) {
    let reason = reason(registry, file);
    assert!(reason.contains(expected), "{file}: expected {expected:?} in {reason:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_files_are_reported_and_the_good_one_loads() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let good = std::fs::read(plugin_file("counter")).unwrap();
    std::fs::write(dir.path().join("counter.wasm"), &good).unwrap();
    std::fs::write(dir.path().join("garbage.wasm"), b"this is not webassembly at all").unwrap();
    std::fs::write(dir.path().join("core.wasm"), wat::parse_str("(module (func (export \"f\")))").unwrap()).unwrap();
    std::fs::write(dir.path().join("empty.wasm"), wat::parse_str("(component)").unwrap()).unwrap();
    std::fs::write(dir.path().join("truncated.wasm"), &good[..good.len() / 2]).unwrap();
    let other_world =
        wat::parse_str(r#"(component (import "acme:other/api@1.0.0" (instance (export "f" (func)))))"#).unwrap();
    std::fs::write(dir.path().join("other-world.wasm"), other_world).unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"ignored: not a .wasm").unwrap();

    let registry = load(dir.path(), cache.path()).await;

    assert_eq!(registry.plugins.keys().collect::<Vec<_>>(), ["counter"]);
    assert_eq!(registry.plugins["counter"].version, "0.1.0");
    assert_eq!(registry.rejected.len(), 5, "{:?}", registry.rejected);
    assert_reason(&registry, "garbage.wasm", "not a WebAssembly file");
    assert_reason(&registry, "core.wasm", "core WebAssembly module, not a component");
    assert_reason(&registry, "empty.wasm", "does not export the source-connector world");
    assert_reason(&registry, "truncated.wasm", "not a valid component");
    assert_reason(&registry, "other-world.wasm", "acme:other/api");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compiled_components_are_cached_by_content() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let file = dir.path().join("counter.wasm");
    let mut bytes = std::fs::read(plugin_file("counter")).unwrap();
    std::fs::write(&file, &bytes).unwrap();

    let first = load(dir.path(), cache.path()).await;
    assert!(!first.plugins["counter"].from_cache, "a new plugin must be compiled");
    let second = load(dir.path(), cache.path()).await;
    assert!(second.plugins["counter"].from_cache, "a second start must not recompile");

    // A changed file (here: an extra custom section) is recompiled.
    bytes.extend_from_slice(&[0, 6, 5, b'n', b'o', b't', b'e', b'!']);
    std::fs::write(&file, &bytes).unwrap();
    let changed = load(dir.path(), cache.path()).await;
    assert!(!changed.plugins["counter"].from_cache, "a changed plugin must be recompiled");
    assert_eq!(std::fs::read_dir(cache.path()).unwrap().count(), 2, "one cache entry per content");
}
