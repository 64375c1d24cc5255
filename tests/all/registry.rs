//! The plugin folder: bad files are rejected with their name and reason without stopping
//! the good ones, and compiled components are cached by content.

use std::path::Path;

use sluice::runtime::Registry;
use sluice::runtime::Runtime;

use crate::common::plugin_file;

async fn load(dir: &Path, cache: &Path) -> Registry {
    Registry::load(&Runtime::new().unwrap(), dir, cache).await.unwrap()
}

fn reason(registry: &Registry, file: &str) -> String {
    let rejected = registry.rejected().into_iter().find(|r| r.file.file_name().unwrap() == file);
    rejected.unwrap_or_else(|| panic!("{file} was not rejected: {:?}", registry.rejected())).reason
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
    // Sparse: 3 GB that take no disk, and that the worker must not read whole to refuse.
    std::fs::File::create(dir.path().join("huge.wasm")).unwrap().set_len(3 << 30).unwrap();

    let registry = load(dir.path(), cache.path()).await;

    assert_eq!(registry.names(), ["counter"]);
    assert_eq!(registry.get("counter").unwrap().version, "0.1.0");
    assert_eq!(registry.rejected().len(), 6, "{:?}", registry.rejected());
    assert_reason(&registry, "huge.wasm", "is 3221.2 MB, more than a plugin file may be (256 MiB)");
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
    assert!(!first.get("counter").unwrap().from_cache, "a new plugin must be compiled");
    let second = load(dir.path(), cache.path()).await;
    assert!(second.get("counter").unwrap().from_cache, "a second start must not recompile");

    // A changed file (here: an extra custom section) is recompiled.
    bytes.extend_from_slice(&[0, 6, 5, b'n', b'o', b't', b'e', b'!']);
    std::fs::write(&file, &bytes).unwrap();
    let changed = load(dir.path(), cache.path()).await;
    assert!(!changed.get("counter").unwrap().from_cache, "a changed plugin must be recompiled");
    let entries = |suffix: &str| {
        std::fs::read_dir(cache.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(suffix))
            .count()
    };
    assert_eq!((entries(".cwasm"), entries(".meta.json")), (2, 2), "one cache entry per content");
}

/// A cached plugin is loaded without an instance: its version and keys come from the
/// metadata saved beside the compiled code (what a loaded plugin reports is what that file
/// says, proven here by editing it), and unreadable metadata is asked of the plugin again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_plugins_load_without_being_instantiated() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    std::fs::copy(plugin_file("counter"), dir.path().join("counter.wasm")).unwrap();
    let first = load(dir.path(), cache.path()).await;
    let counter = first.get("counter").unwrap();
    let metadata = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".meta.json"))
        .expect("metadata beside the compiled plugin");
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&metadata).unwrap()).unwrap();
    assert_eq!(saved["version"], counter.version.as_str());
    assert_eq!(saved["config_def"].as_array().unwrap().len(), counter.config_def.len());

    let mut edited = saved.clone();
    edited["version"] = "9.9.9-from-the-cache".into();
    std::fs::write(&metadata, edited.to_string()).unwrap();
    let second = load(dir.path(), cache.path()).await;
    let cached = second.get("counter").unwrap();
    assert!(cached.from_cache);
    assert_eq!(cached.version, "9.9.9-from-the-cache", "the plugin was asked again instead of the cache");
    assert_eq!(cached.config_def, counter.config_def);

    std::fs::write(&metadata, b"{ not json").unwrap();
    let third = load(dir.path(), cache.path()).await;
    assert_eq!(third.get("counter").unwrap().version, counter.version, "bad metadata: asked the plugin again");
    let rewritten: serde_json::Value = serde_json::from_slice(&std::fs::read(&metadata).unwrap()).unwrap();
    assert_eq!(rewritten, saved, "and saved again");
}

/// A file loaded before is found by its stat (path, size, times, inode) in the cache's
/// index and is neither read nor hashed again, once its times are two seconds old; a newer
/// file is always read, and a rewritten file has a new stat, so it is read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_file_is_found_by_its_stat_and_a_changed_one_is_read_again() {
    use sha2::Digest;
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let file = dir.path().join("counter.wasm");
    std::fs::copy(plugin_file("counter"), &file).unwrap();
    let index = cache.path().join("files");
    let entries =
        || std::fs::read_dir(&index).map(|d| d.map(|e| e.unwrap().path()).collect::<Vec<_>>()).unwrap_or_default();

    let fresh = load(dir.path(), cache.path()).await;
    assert_eq!(fresh.get("counter").unwrap().version, "0.1.0");
    assert!(
        entries().is_empty(),
        "a file written just now is not indexed: it may still be rewritten within the times' grain"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let entry = loop {
        assert!(load(dir.path(), cache.path()).await.get("counter").unwrap().from_cache);
        if let [entry] = entries().as_slice() {
            break entry.clone();
        }
        assert!(std::time::Instant::now() < deadline, "the file was not indexed once two seconds old");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let counter_bytes = std::fs::read(&file).unwrap();
    let content: String = sha2::Sha256::digest(&counter_bytes).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(std::fs::read_to_string(&entry).unwrap(), content);

    // The index is what a load trusts: pointed at another plugin's cached code (here the
    // counter's next version, loaded from another folder into the same cache), the
    // unchanged file loads as that plugin, without being read.
    let next_dir = tempfile::tempdir().unwrap();
    std::fs::copy(plugin_file("counter-next"), next_dir.path().join("counter.wasm")).unwrap();
    let next_bytes = std::fs::read(next_dir.path().join("counter.wasm")).unwrap();
    assert_eq!(load(next_dir.path(), cache.path()).await.get("counter").unwrap().version, "0.2.0-next");
    let next_content: String = sha2::Sha256::digest(&next_bytes).iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&entry, &next_content).unwrap();
    assert_eq!(load(dir.path(), cache.path()).await.get("counter").unwrap().version, "0.2.0-next");
    std::fs::write(&entry, &content).unwrap();

    // Rewriting the file (a new version dropped in place) changes its stat: read again.
    std::fs::write(&file, &next_bytes).unwrap();
    assert_eq!(load(dir.path(), cache.path()).await.get("counter").unwrap().version, "0.2.0-next");
    std::fs::write(&file, &counter_bytes).unwrap();
    assert_eq!(load(dir.path(), cache.path()).await.get("counter").unwrap().version, "0.1.0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_folder_is_live_added_replaced_half_copied_and_removed_files() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let runtime = Runtime::new().unwrap();
    let registry = Registry::load(&runtime, dir.path(), cache.path()).await.unwrap();
    assert!(registry.names().is_empty());
    let good = std::fs::read(plugin_file("counter")).unwrap();

    // A file still being copied is rejected with its reason, and tried again when it changes.
    std::fs::write(dir.path().join("counter.wasm"), &good[..good.len() / 3]).unwrap();
    registry.refresh(&runtime).await.unwrap();
    assert!(registry.get("counter").is_none());
    assert!(reason(&registry, "counter.wasm").contains("not a valid component"));
    std::fs::write(dir.path().join("counter.wasm"), &good).unwrap();
    registry.refresh(&runtime).await.unwrap();
    let first = registry.get("counter").expect("loaded once complete");
    assert!(registry.rejected().is_empty());

    // Replaced: the new version is served; whoever holds the old one keeps it.
    let mut changed = good.clone();
    changed.extend_from_slice(&[0, 6, 5, b'n', b'o', b't', b'e', b'!']);
    std::fs::write(dir.path().join("counter.wasm"), &changed).unwrap();
    let (loaded, _) = registry.refresh(&runtime).await.unwrap();
    assert_eq!(loaded, ["counter"]);
    assert!(!std::sync::Arc::ptr_eq(&first, &registry.get("counter").unwrap()));

    // Replaced by a file of the same size and modification time (`cp -p`, `rsync -a`, an
    // archive's fixed times): moved in over it, then rewritten in place. Each is a new
    // file, found by its change time and inode.
    let file = dir.path().join("counter.wasm");
    let old_times = std::fs::metadata(&file).unwrap().modified().unwrap();
    for (how, note) in [("moved in", b'?'), ("rewritten in place", b'.')] {
        let before = registry.get("counter").unwrap();
        let mut same_size = changed.clone();
        *same_size.last_mut().unwrap() = note;
        let written = if how == "moved in" { dir.path().join("incoming.tmp") } else { file.clone() };
        std::fs::write(&written, &same_size).unwrap();
        std::fs::File::options().write(true).open(&written).unwrap().set_modified(old_times).unwrap();
        if written != file {
            std::fs::rename(&written, &file).unwrap();
        }
        let (loaded, _) = registry.refresh(&runtime).await.unwrap();
        assert_eq!(loaded, ["counter"], "a file {how} with the same size and modification time was not loaded");
        assert!(!std::sync::Arc::ptr_eq(&before, &registry.get("counter").unwrap()));
    }

    // A garbage file beside it does not disturb it; a removed file is forgotten.
    std::fs::write(dir.path().join("garbage.wasm"), b"nope").unwrap();
    registry.refresh(&runtime).await.unwrap();
    assert_eq!(registry.names(), ["counter"]);
    assert!(reason(&registry, "garbage.wasm").contains("not a WebAssembly file"));
    std::fs::remove_file(dir.path().join("counter.wasm")).unwrap();
    std::fs::remove_file(dir.path().join("garbage.wasm")).unwrap();
    registry.refresh(&runtime).await.unwrap();
    assert!(registry.names().is_empty() && registry.rejected().is_empty());
    assert_eq!(first.name, "counter", "a running connector's plugin lives on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_files_slow_to_load_do_not_hold_up_one_added_beside_them() {
    let (dir, cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let runtime = Runtime::new().unwrap();
    let registry = Registry::load(&runtime, dir.path(), cache.path()).await.unwrap();
    // Three files whose `version` sleeps to its load deadline, and a good one that sorts
    // after them: loaded one after another, it would wait out three deadlines first.
    for slow in ["slow1", "slow2", "slow3"] {
        std::fs::copy(plugin_file("slow-version"), dir.path().join(format!("{slow}.wasm"))).unwrap();
    }
    std::fs::copy(plugin_file("counter"), dir.path().join("zz-good.wasm")).unwrap();
    let look = registry.refresh(&runtime);
    let good_first =
        crate::common::wait_until("zz-good loaded", || registry.get("zz-good").map(|_| registry.rejected().len()));
    let (looked, rejected_before_good) = tokio::join!(look, good_first);
    looked.unwrap();
    assert!(rejected_before_good < 3, "the good plugin waited for all {rejected_before_good} slow files");
    for slow in ["slow1.wasm", "slow2.wasm", "slow3.wasm"] {
        assert_reason(&registry, slow, "version");
    }
}

/// The folder's watch looks again while an earlier look is still loading slow files: the
/// new look passes over them, so a file added after them is loaded without waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_at_the_folder_passes_over_slow_loads_of_an_earlier_look() {
    let (dir, cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let runtime = std::sync::Arc::new(Runtime::new().unwrap());
    let registry = std::sync::Arc::new(Registry::load(&runtime, dir.path(), cache.path()).await.unwrap());
    let slow = ["slow1.wasm", "slow2.wasm", "slow3.wasm"];
    for file in slow {
        std::fs::copy(plugin_file("slow-version"), dir.path().join(file)).unwrap();
    }
    let first_look = {
        let (registry, runtime) = (registry.clone(), runtime.clone());
        tokio::spawn(async move { registry.refresh_passing_over_loads_under_way(&runtime).await.unwrap() })
    };
    crate::common::wait_until("the slow files' loads under way", || {
        (registry.loads_under_way().len() == slow.len()).then_some(())
    })
    .await;
    std::fs::copy(plugin_file("counter"), dir.path().join("added-after.wasm")).unwrap();
    let (loaded, _) = registry.refresh_passing_over_loads_under_way(&runtime).await.unwrap();
    assert_eq!(loaded, ["added-after"]);
    assert!(registry.rejected().is_empty(), "the second look waited for the slow loads: {:?}", registry.rejected());
    assert_eq!(registry.loads_under_way().len(), slow.len(), "the slow loads are still under way");
    let (_, rejected) = first_look.await.unwrap();
    assert_eq!(rejected.len(), slow.len());
    for file in slow {
        assert_reason(&registry, file, "version");
    }
}

/// The compile cache, shared by every data directory of the user, does not grow for good:
/// what no worker used for a month (an older build of a plugin, an unfinished write, an
/// index entry of a file long gone) is removed, while what a load uses has its time renewed
/// and is kept, and files the cache did not write are left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compile_cache_entries_unused_for_a_month_are_removed_and_used_ones_kept() {
    use sha2::Digest;
    use sluice::runtime::registry::{CACHE_UNUSED_FOR, Pruned, prune_compile_cache};
    let (dir, old_dir, cache) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::copy(plugin_file("counter"), dir.path().join("counter.wasm")).unwrap();
    std::fs::copy(plugin_file("counter-next"), old_dir.path().join("counter.wasm")).unwrap();
    assert!(!load(old_dir.path(), cache.path()).await.get("counter").unwrap().from_cache);
    assert!(!load(dir.path(), cache.path()).await.get("counter").unwrap().from_cache);
    std::fs::create_dir_all(cache.path().join("files")).unwrap();
    std::fs::write(cache.path().join("files").join("0123456789abcdef0123456789abcdef"), b"gone").unwrap();
    std::fs::write(cache.path().join(".4242.7.tmp"), b"cut short").unwrap();
    std::fs::write(cache.path().join("notes.txt"), b"the user's own").unwrap();
    // Everything in the cache last used 40 days ago...
    let forty_days_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(40 * 24 * 60 * 60);
    let files = |dir: &Path| std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_file());
    for file in files(cache.path()).chain(files(&cache.path().join("files"))) {
        std::fs::File::open(&file).unwrap().set_modified(forty_days_ago).unwrap();
    }
    // ... but the counter, used again now.
    assert!(load(dir.path(), cache.path()).await.get("counter").unwrap().from_cache);

    let pruned = prune_compile_cache(cache.path(), CACHE_UNUSED_FOR);
    // (More when the loads above came two seconds after the copies: then the files were
    // indexed too, and counter-next's index entry goes as well.)
    assert!(pruned.files >= 4, "counter-next's code and metadata, the write cut short, the index entry: {pruned:?}");
    let mut left: Vec<_> = files(cache.path()).map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    left.sort();
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(left[0].ends_with(".cwasm") && left[1].ends_with(".meta.json") && left[2] == "notes.txt", "{left:?}");
    let counter = sha2::Sha256::digest(std::fs::read(dir.path().join("counter.wasm")).unwrap());
    let counter: String = counter.iter().map(|b| format!("{b:02x}")).collect();
    for index in files(&cache.path().join("files")) {
        assert_eq!(std::fs::read_to_string(&index).unwrap(), counter, "only the counter's index entry may be left");
    }
    assert_eq!(prune_compile_cache(cache.path(), CACHE_UNUSED_FOR), Pruned::default(), "nothing else is old");
    assert!(load(dir.path(), cache.path()).await.get("counter").unwrap().from_cache, "what was used is kept");
    assert!(
        !load(old_dir.path(), cache.path()).await.get("counter").unwrap().from_cache,
        "what was not is compiled again"
    );
}
