//! The plugin folder (`plugin.path`): finds `*.wasm` files, checks each is a component
//! that targets the `source-connector` world, compiles it once and caches the compiled
//! artifact on disk, keyed by content hash and engine compatibility, with what the plugin
//! said about itself (`version`, `config-def`) beside it, so a cached plugin loads without
//! being instantiated, and an index from each file's stat to its content hash, so a file
//! loaded before is not even read again. A bad file is reported with its name and the
//! reason and never stops the others loading. The cache is kept from growing for good:
//! what no worker has used for [`CACHE_UNUSED_FOR`] is removed when a worker starts.
//!
//! The folder is live: [`Registry::refresh`] loads files added or changed since the last
//! look (a file still being copied fails and is tried again when it changes) and forgets
//! removed ones. Connectors hold the [`Plugin`] they started with, so a replaced file is
//! used by connectors started afterwards while running ones keep their code.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use wasmtime::component::Component;

use super::bindings::{ConfigKey, ConfigType, Importance, WORLD_VERSIONS, v0_1, v0_2, v0_3, v0_4};
use super::plugin_log::escape_controls;
use super::sandbox::{InstanceContext, Runtime, WorldPre};
use crate::config::{ConfigKeyInfo, SandboxSettings};
use crate::storage::{Namespace, OffsetStore};

impl From<ConfigKey> for ConfigKeyInfo {
    fn from(key: ConfigKey) -> Self {
        let type_name = match key.type_ {
            ConfigType::Boolean => "BOOLEAN",
            ConfigType::Int => "INT",
            ConfigType::Long => "LONG",
            ConfigType::Double => "DOUBLE",
            ConfigType::String => "STRING",
            ConfigType::List => "LIST",
            ConfigType::Password => "PASSWORD",
        };
        let importance = match key.importance {
            Importance::High => "HIGH",
            Importance::Medium => "MEDIUM",
            Importance::Low => "LOW",
        };
        ConfigKeyInfo {
            name: key.name,
            type_name: type_name.into(),
            required: key.default_value.is_none(),
            default_value: key.default_value,
            importance: importance.into(),
            documentation: key.documentation,
        }
    }
}

/// A loaded plugin.
pub struct Plugin {
    pub name: String,
    pub file: PathBuf,
    pub version: String,
    pub config_def: Vec<ConfigKeyInfo>,
    /// Whether the compiled code came from the on-disk cache.
    pub from_cache: bool,
    /// Time to compile (or load from cache) the component.
    pub compile_time: Duration,
    pub(crate) pre: WorldPre,
}

impl Plugin {
    pub fn pre(&self) -> &WorldPre {
        &self.pre
    }
}

/// A file that could not be loaded, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rejected {
    /// Shown lossily: a name that is not UTF-8 is one of the reasons a file is rejected.
    #[serde(serialize_with = "path_shown")]
    pub file: PathBuf,
    pub reason: String,
}

fn path_shown<S: serde::Serializer>(path: &Path, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(&path.display())
}

pub struct Registry {
    pub dir: PathBuf,
    cache_dir: PathBuf,
    folder: std::sync::RwLock<Folder>,
    /// Whether every file of the folder has been looked at once (a worker may start with
    /// only the plugins its connectors use and load the rest in the background).
    whole_folder: tokio::sync::watch::Sender<bool>,
    /// A lock per file being loaded.
    loading: std::sync::Mutex<BTreeMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
    /// Loads by looks at the whole folder, at most [`LOADS_AT_ONCE`] at a time however
    /// many looks overlap; a connector's load on demand takes none, so it never queues
    /// behind plugins nobody asked for.
    folder_loads: tokio::sync::Semaphore,
    /// Files a look at the folder is to load, waiting for a permit: not queued again by
    /// the next look.
    queued: std::sync::Mutex<std::collections::BTreeSet<PathBuf>>,
}

/// How a look at the folder treats files whose load is under way (started by an earlier
/// look or a connector's load on demand).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UnderWay {
    /// Waits for them: the look ends with every file it saw loaded.
    Wait,
    /// Passes over them: a slow plugin's load does not hold up a file added after it.
    PassOver,
}

/// What the folder held at the last look.
#[derive(Default)]
struct Folder {
    plugins: BTreeMap<String, Arc<Plugin>>,
    rejected: BTreeMap<PathBuf, Rejected>,
    /// What each file looked at was on disk: unchanged files are not loaded again.
    seen: BTreeMap<PathBuf, FileStamp>,
}

/// A file's size, modification and change times, and inode: a file replaced by one of the
/// same size and modification time (`cp -p`, `rsync -a`, an archive's fixed times) still
/// has a new change time or inode, so it is loaded again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: (i64, i64),
    changed: (i64, i64),
    inode: (u64, u64),
}

impl FileStamp {
    fn of(meta: &std::fs::Metadata) -> FileStamp {
        use std::os::unix::fs::MetadataExt;
        FileStamp {
            len: meta.len(),
            modified: (meta.mtime(), meta.mtime_nsec()),
            changed: (meta.ctime(), meta.ctime_nsec()),
            inode: (meta.dev(), meta.ino()),
        }
    }
}

/// The offsets a plugin sees while it is only being inspected: there is no connector yet.
struct NoConnectorYet;

impl OffsetStore for NoConnectorYet {
    fn offsets(&self, _: &Namespace, partitions: &[String]) -> anyhow::Result<Vec<Option<String>>> {
        Ok(vec![None; partitions.len()])
    }
    fn commit_offsets(&self, _: &Namespace, _: &[(String, String)]) -> anyhow::Result<()> {
        anyhow::bail!("no offsets can be committed while a plugin is inspected")
    }
    fn all_offsets(&self, _: &Namespace) -> anyhow::Result<Vec<(String, String)>> {
        Ok(Vec::new())
    }
    fn delete_offset(&self, _: &Namespace, _: &str) -> anyhow::Result<bool> {
        Ok(false)
    }
}

/// One file's turn to load ([`Registry::loading`]): its lock, held, and forgotten when the
/// turn ends with no one else waiting for it, so the map holds only the files being loaded.
struct LoadTurn<'a> {
    loading: &'a std::sync::Mutex<BTreeMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
    file: PathBuf,
    lock: Arc<tokio::sync::Mutex<()>>,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for LoadTurn<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut loading = self.loading.lock().unwrap();
        // The map's and this turn's: a load waiting for the lock holds a third (taken
        // under the map's mutex, held here).
        if Arc::strong_count(&self.lock) == 2 {
            loading.remove(&self.file);
        }
    }
}

/// Plugin files loaded at once by one look at the folder: enough that a few slow ones
/// do not hold up the rest, few enough that compiling them does not take every core and
/// gigabytes of memory at once.
const LOADS_AT_ONCE: usize = 4;

const WASM_MAGIC: &[u8] = b"\0asm";
const NOT_WASM: &str = "not a WebAssembly file (it does not start with the \\0asm magic number)";
const CORE_MODULE_LAYER: [u8; 4] = [1, 0, 0, 0];

impl Registry {
    /// Loads every `*.wasm` in `dir`. Fails only when the folder cannot be read.
    pub async fn load(runtime: &Runtime, dir: &Path, cache_dir: &Path) -> anyhow::Result<Registry> {
        Self::load_only(runtime, dir, cache_dir, None).await
    }

    /// Loads the plugins named in `only` (every `*.wasm` when `None`): a worker that knows
    /// which plugins its connectors use waits for no other to compile. The rest load at
    /// the next [`Registry::refresh`].
    pub async fn load_only(
        runtime: &Runtime,
        dir: &Path,
        cache_dir: &Path,
        only: Option<&std::collections::BTreeSet<String>>,
    ) -> anyhow::Result<Registry> {
        let registry = Registry {
            dir: dir.to_path_buf(),
            cache_dir: cache_dir.to_path_buf(),
            folder: std::sync::RwLock::new(Folder::default()),
            whole_folder: tokio::sync::watch::Sender::new(false),
            loading: std::sync::Mutex::default(),
            folder_loads: tokio::sync::Semaphore::new(LOADS_AT_ONCE),
            queued: std::sync::Mutex::default(),
        };
        prune_once_per_process(cache_dir);
        match only {
            None => drop(registry.refresh(runtime).await?),
            Some(only) => drop(registry.refresh_matching(runtime, |name| only.contains(name), None).await?),
        }
        Ok(registry)
    }

    /// Waits until every file of the folder has been looked at once, so a list of the
    /// plugins is the folder's whole list.
    pub async fn whole_folder_loaded(&self) {
        let _ = self.whole_folder.subscribe().wait_for(|done| *done).await;
    }

    /// The plugin `name`, its file loaded now if the folder has it and it was not loaded
    /// yet (a worker that started with other plugins, or loads the rest in the background).
    pub async fn get_or_load(&self, runtime: &Runtime, name: &str) -> Option<Arc<Plugin>> {
        if let Some(plugin) = self.get(name) {
            return Some(plugin);
        }
        if let Err(e) = self.refresh_matching(runtime, |file| file == name, None).await {
            tracing::warn!("{e:#}");
        }
        self.get(name)
    }

    /// Looks at the folder again: loads `*.wasm` files that are new or changed since the
    /// last look, and forgets files that are gone. A changed file that fails to load
    /// leaves the version loaded before it in place. Returns the names of the plugins
    /// loaded, and of the files rejected, by this look.
    pub async fn refresh(&self, runtime: &Runtime) -> anyhow::Result<(Vec<String>, Vec<PathBuf>)> {
        let looked = self.refresh_matching(runtime, |_| true, Some(UnderWay::Wait)).await;
        self.whole_folder.send_replace(true);
        looked
    }

    /// One look of the folder's watch: [`Registry::refresh`], but passing over files whose
    /// load is still under way, so that looks may overlap (the watch does not wait for a
    /// slow plugin before it sees a file added after it).
    pub async fn refresh_passing_over_loads_under_way(
        &self,
        runtime: &Runtime,
    ) -> anyhow::Result<(Vec<String>, Vec<PathBuf>)> {
        let looked = self.refresh_matching(runtime, |_| true, Some(UnderWay::PassOver)).await;
        // Whole only when nothing it passed over is still loading.
        if self.loading.lock().unwrap().is_empty() && self.queued.lock().unwrap().is_empty() {
            self.whole_folder.send_replace(true);
        }
        looked
    }

    /// The files being loaded now.
    pub fn loads_under_way(&self) -> Vec<PathBuf> {
        self.loading.lock().unwrap().keys().cloned().collect()
    }

    /// The names of the `*.wasm` files in the folder now, loaded or not.
    pub fn files_in_folder(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .map(|entries| {
                entries
                    .filter_map(|entry| entry.ok().map(|e| e.path()))
                    .filter(|path| path.extension().is_some_and(|ext| ext == "wasm") && path.is_file())
                    .filter_map(|path| plugin_name(&path))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// [`Registry::refresh`] of the files whose plugin name `wanted` accepts. A look at the
    /// whole folder (`folder_look`) loads within [`Registry::folder_loads`]; one for named
    /// plugins (`None`) loads them at once and waits for loads under way.
    async fn refresh_matching(
        &self,
        runtime: &Runtime,
        wanted: impl Fn(&str) -> bool,
        folder_look: Option<UnderWay>,
    ) -> anyhow::Result<(Vec<String>, Vec<PathBuf>)> {
        // `*.wasm` entries that are not files to load (a directory, a link to nothing) are
        // rejected with the reason, as a bad file is, rather than passed over in silence.
        let mut not_files: Vec<Rejected> = Vec::new();
        let mut files: Vec<(PathBuf, FileStamp)> = std::fs::read_dir(&self.dir)
            .with_context(|| format!("cannot read plugin folder {}", self.dir.display()))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| seems_a_plugin_file(path))
            .filter_map(|path| {
                let reason = match std::fs::metadata(&path) {
                    // Not loaded, but said: a user who dropped `Source.WASM` in sees why.
                    _ if path.file_name().is_some_and(|name| name.eq_ignore_ascii_case(".wasm")) => {
                        "it has no name before .wasm (a plugin is named by its file name): rename it".to_string()
                    }
                    _ if path.extension().is_none_or(|ext| ext != "wasm") => {
                        "its name ends in .WASM (or another case): a plugin file's name ends in .wasm, in lower case; rename it".to_string()
                    }
                    // A plugin is named by its file's name, which configs must be able to say.
                    Ok(meta) if meta.is_file() && plugin_name(&path).is_none() => {
                        "its name is not valid UTF-8 or has a control or bidirectional character: rename it (a plugin is named by its file name)".to_string()
                    }
                    Ok(meta) if meta.is_file() => return Some((path, FileStamp::of(&meta))),
                    Ok(meta) if meta.is_dir() => "a directory, not a component file".to_string(),
                    Ok(_) => "not a regular file".to_string(),
                    Err(e) => format!("cannot be read: {e} (a link to a missing file?)"),
                };
                not_files.push(Rejected { file: path, reason });
                None
            })
            .collect();
        files.sort_by(|a, b| a.0.cmp(&b.0));
        let changed: Vec<PathBuf> = {
            let mut folder = self.folder.write().unwrap();
            let present: std::collections::BTreeSet<&PathBuf> = files.iter().map(|(path, _)| path).collect();
            folder.rejected.retain(|path, _| present.contains(path));
            for rejected in not_files {
                folder.rejected.insert(rejected.file.clone(), rejected);
            }
            let gone: Vec<PathBuf> = folder.seen.keys().filter(|path| !present.contains(path)).cloned().collect();
            for path in gone {
                folder.seen.remove(&path);
                if let Some(name) = plugin_name(&path)
                    && folder.plugins.get(&name).is_some_and(|p| p.file == path)
                {
                    tracing::info!(plugin = %name, "plugin file {} was removed", path.display());
                    folder.plugins.remove(&name);
                }
            }
            let under_way = self.loading.lock().unwrap();
            let mut queued = self.queued.lock().unwrap();
            let changed: Vec<PathBuf> = files
                .iter()
                .filter(|(path, stamp)| folder.seen.get(path) != Some(stamp))
                .filter(|(path, _)| plugin_name(path).is_some_and(|name| wanted(&name)))
                .filter(|(path, _)| {
                    folder_look != Some(UnderWay::PassOver) || !(under_way.contains_key(path) || queued.contains(path))
                })
                .map(|(p, _)| p.clone())
                .collect();
            if folder_look.is_some() {
                queued.extend(changed.iter().cloned());
            }
            changed
        };
        let permits = folder_look.map(|_| &self.folder_loads);
        // Several at once: a file whose plugin is slow to load (a `version` that sleeps to
        // its deadline) holds up only its own slot, not every file after it.
        let outcomes: Vec<Option<Result<String, PathBuf>>> = futures_util::stream::iter(changed)
            .map(|file| self.load_file(runtime, file, permits))
            .buffer_unordered(LOADS_AT_ONCE)
            .collect()
            .await;
        let (mut loaded, mut rejected) = (Vec::new(), Vec::new());
        for outcome in outcomes.into_iter().flatten() {
            match outcome {
                Ok(name) => loaded.push(name),
                Err(file) => rejected.push(file),
            }
        }
        Ok((loaded, rejected))
    }

    /// Loads one plugin file and files it among the plugins or the rejected: its plugin's
    /// name, or the file when rejected; `None` when there was nothing to do (removed, or
    /// loaded as it is now by another look meanwhile).
    async fn load_file(
        &self,
        runtime: &Runtime,
        file: PathBuf,
        permits: Option<&tokio::sync::Semaphore>,
    ) -> Option<Result<String, PathBuf>> {
        // The permit before the file's lock: a connector's load on demand then waits for
        // no permit, only for a load of its own file that is running.
        let _permit = match permits {
            Some(permits) => {
                let permit = permits.acquire().await;
                self.queued.lock().unwrap().remove(&file);
                Some(permit.ok()?)
            }
            None => None,
        };
        // One load of a file at a time: the background look and a connector's load on
        // demand do not both compile it, and the one that waited finds it done.
        let lock = self.loading.lock().unwrap().entry(file.clone()).or_default().clone();
        let guard = lock.clone().lock_owned().await;
        let _turn = LoadTurn { loading: &self.loading, file: file.clone(), lock, guard: Some(guard) };
        let meta = std::fs::metadata(&file).ok()?; // removed meanwhile
        let stamp = FileStamp::of(&meta);
        if self.folder.read().unwrap().seen.get(&file) == Some(&stamp) {
            return None; // loaded as it is now while this look waited
        }
        let result = load_plugin(runtime, &file, &self.cache_dir).await;
        let mut folder = self.folder.write().unwrap();
        // Stamped as it was before the load: changed during it, it is loaded again.
        folder.seen.insert(file.clone(), stamp);
        Some(match result {
            Ok(plugin) => {
                tracing::info!(
                    plugin = %plugin.name,
                    version = %plugin.version,
                    "{} {} in {} ms",
                    if plugin.from_cache { "loaded compiled plugin from cache" } else { "compiled plugin" },
                    file.display(),
                    plugin.compile_time.as_millis()
                );
                folder.rejected.remove(&file);
                let name = plugin.name.clone();
                folder.plugins.insert(name.clone(), Arc::new(plugin));
                Ok(name)
            }
            Err(reason) => {
                tracing::warn!("rejected plugin file {}: {reason}", escape_controls(&file.display().to_string()));
                folder.rejected.insert(file.clone(), Rejected { file: file.clone(), reason });
                Err(file)
            }
        })
    }

    /// The plugin named `name` (its file's name without `.wasm`), as loaded now.
    pub fn get(&self, name: &str) -> Option<Arc<Plugin>> {
        self.folder.read().unwrap().plugins.get(name).cloned()
    }

    /// Every loaded plugin, by name.
    pub fn plugins(&self) -> Vec<Arc<Plugin>> {
        self.folder.read().unwrap().plugins.values().cloned().collect()
    }

    pub fn names(&self) -> Vec<String> {
        self.folder.read().unwrap().plugins.keys().cloned().collect()
    }

    /// Files that could not be loaded, with the reason.
    pub fn rejected(&self) -> Vec<Rejected> {
        self.folder.read().unwrap().rejected.values().cloned().collect()
    }
}

/// The most a plugin file may hold. The largest shipped (Python, with its interpreter) is
/// about 18 MB; a file far past this is not a connector, and reading it whole to find out
/// would take the worker's memory.
pub const MAX_PLUGIN_BYTES: u64 = 256 << 20;

/// A plugin file's bytes, refused without reading it whole when it is larger than
/// [`MAX_PLUGIN_BYTES`] (or grows past it while being read).
fn read_bounded(file: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let too_large = |len: u64| {
        format!("is {:.1} MB, more than a plugin file may be ({} MiB)", len as f64 / 1e6, MAX_PLUGIN_BYTES >> 20)
    };
    let mut opened = std::fs::File::open(file).map_err(|e| format!("cannot read: {e}"))?;
    let len = opened.metadata().map_err(|e| format!("cannot read: {e}"))?.len();
    if len > MAX_PLUGIN_BYTES {
        return Err(too_large(len));
    }
    // The magic number first: a large file that is not WebAssembly (a video dropped in the
    // wrong folder) is refused without being read whole.
    let mut bytes = Vec::with_capacity(8);
    (&mut opened).take(8).read_to_end(&mut bytes).map_err(|e| format!("cannot read: {e}"))?;
    if !bytes.starts_with(WASM_MAGIC) {
        return Err(NOT_WASM.into());
    }
    bytes.reserve(len as usize);
    opened.take(MAX_PLUGIN_BYTES + 1 - 8).read_to_end(&mut bytes).map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > MAX_PLUGIN_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Whether `path` is, or was meant to be, a plugin file: `*.wasm`, in any case, or `.wasm`.
fn seems_a_plugin_file(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext.eq_ignore_ascii_case("wasm"))
        || path.file_name().is_some_and(|name| name.eq_ignore_ascii_case(".wasm"))
}

/// The name a plugin file gives its plugin: none when configs, URLs and log lines could
/// not say it (not UTF-8, or a control character such as a newline in it).
fn plugin_name(file: &Path) -> Option<String> {
    file.file_stem()
        .and_then(|s| s.to_str())
        .filter(|name| !name.chars().any(crate::runtime::plugin_log::needs_escape))
        .map(String::from)
}

async fn load_plugin(runtime: &Runtime, file: &Path, cache_dir: &Path) -> Result<Plugin, String> {
    let name = plugin_name(file).ok_or("its name is not valid UTF-8 or has a control or bidirectional character")?;
    let started = Instant::now();
    let stat = std::fs::metadata(file).ok().map(|meta| (stat_key(file, &meta), settled(&meta)));
    let index = stat.as_ref().map(|(key, _)| index_path(cache_dir, key));
    let indexed = index.as_ref().and_then(|index| std::fs::read_to_string(index).ok());
    if let (Some(content), Some(index)) = (indexed, &index)
        && let Some(plugin) = load_indexed(runtime, &name, file, content.trim(), cache_dir, started)
    {
        mark_used(index);
        return Ok(plugin);
    }
    let bytes = read_bounded(file)?;
    let content = content_hex(&bytes);
    let plugin = inspect_with(runtime, &name, file, &bytes, Some((cache_dir, &content))).await?;
    // Settled when it was read (not when the compile ends): a rewrite after the read then
    // has a new stat.
    if let Some((key, true)) = stat
        && let Err(e) = write_atomically(&index_path(cache_dir, &key), content.as_bytes())
    {
        tracing::warn!("cannot index plugin file {}: {e:#}", file.display());
    }
    Ok(plugin)
}

/// A file's identity on disk (path, size, modification and change times, inode): what the
/// folder watch compares too. It names a small index entry holding the file's content hash,
/// so a file loaded before is neither read nor hashed again (18 MB of Python take ~10 ms
/// to hash).
fn stat_key(file: &Path, meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    let path = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    let mut hasher = Sha256::new();
    hasher.update(path.as_os_str().as_encoded_bytes());
    for n in [meta.len() as i64, meta.mtime(), meta.mtime_nsec(), meta.ctime(), meta.ctime_nsec()] {
        hasher.update(n.to_le_bytes());
    }
    hasher.update(meta.ino().to_le_bytes());
    hasher.update(meta.dev().to_le_bytes());
    hex(&hasher.finalize()[..16])
}

fn index_path(cache_dir: &Path, stat_key: &str) -> PathBuf {
    cache_dir.join("files").join(stat_key)
}

/// Whether a file's times are old enough to stand for its content: file systems stamp
/// times coarsely (milliseconds), so a file rewritten at the same size within that grain
/// keeps its stat; one untouched for two seconds is not being rewritten (git's "racy
/// clean" rule).
fn settled(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    let changed = std::time::UNIX_EPOCH + Duration::new(meta.ctime().max(0) as u64, meta.ctime_nsec() as u32);
    let modified = meta.modified().unwrap_or(std::time::UNIX_EPOCH).max(changed);
    modified.elapsed().is_ok_and(|age| age >= Duration::from_secs(2))
}

/// A plugin whose content hash the index gave: its compiled code and metadata from the
/// cache, or `None` (then it is read and loaded the long way).
fn load_indexed(
    runtime: &Runtime,
    name: &str,
    file: &Path,
    content: &str,
    cache_dir: &Path,
    started: Instant,
) -> Option<Plugin> {
    let compiled = cache_path(runtime, content, cache_dir);
    let Metadata { version, config_def } = Metadata::read(&compiled.with_extension("meta.json"))?;
    let version = shown_version(version);
    // SAFETY: as in `compile_cached`: this engine wrote the file; a bad one fails the checks.
    let component = unsafe { Component::deserialize_file(&runtime.engine, &compiled) }.ok()?;
    let pre = link(runtime, &component).ok()?;
    let compile_time = started.elapsed();
    mark_used(&compiled.with_extension("meta.json"));
    mark_used(&compiled);
    Some(Plugin { name: name.into(), file: file.into(), version, config_def, from_cache: true, compile_time, pre })
}

fn content_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The component linked against the version of the world it exports: what every instance
/// is made from.
fn link(runtime: &Runtime, component: &Component) -> Result<WorldPre, String> {
    let versions = WORLD_VERSIONS.join(" or ");
    let exported =
        component.component_type().exports(&runtime.engine).map(|(name, _)| name.to_string()).collect::<Vec<_>>();
    let targets = |version: &str| exported.iter().any(|name| name == &format!("sluice:connector/task@{version}"));
    let instance_pre = runtime.linker().instantiate_pre(component).map_err(|e| {
        let imported =
            component.component_type().imports(&runtime.engine).map(|(name, _)| name.to_string()).collect::<Vec<_>>();
        match unserved_import(&imported) {
            Some(said) => format!("{said} ({e:#})"),
            None => format!(
                "imports something Sluice does not provide (it must target sluice:connector/source-connector@{versions}): {e:#}"
            ),
        }
    })?;
    let linked = if targets("0.4.0") {
        v0_4::SourceConnectorPre::new(instance_pre).map(WorldPre::V0_4)
    } else if targets("0.3.0") {
        v0_3::SourceConnectorPre::new(instance_pre).map(WorldPre::V0_3)
    } else if targets("0.2.0") {
        v0_2::SourceConnectorPre::new(instance_pre).map(WorldPre::V0_2)
    } else {
        v0_1::SourceConnectorPre::new(instance_pre).map(WorldPre::V0_1)
    };
    linked.map_err(|e| {
        format!("does not export the source-connector world (sluice:connector/connector and sluice:connector/task @{versions}): {e:#}")
    })
}

/// The import of a component that Sluice does not serve, said in a plugin author's words:
/// a version of Sluice's world newer (or other) than those served, or WASI's HTTP (the
/// sandbox has no network; componentize-js adds it unless told not to).
fn unserved_import(imported: &[String]) -> Option<String> {
    let served = WORLD_VERSIONS.join(", ");
    if let Some(version) = imported
        .iter()
        .filter_map(|name| name.strip_prefix("sluice:connector/")?.split_once('@').map(|(_, version)| version))
        .find(|version| !WORLD_VERSIONS.contains(version))
    {
        return Some(format!(
            "targets sluice:connector@{version}, which this Sluice does not serve (it serves {served}): build it against one of those"
        ));
    }
    imported.iter().find(|name| name.starts_with("wasi:http/")).map(|name| {
        format!(
            "imports {name}: the sandbox has no network (with componentize-js, build with `--disable http fetch-event`)"
        )
    })
}

/// Everything the loader does with a file's bytes: check, compile (through the cache when
/// one is given), link against the world, and read `version` and `config-def` in a
/// sandbox. The fuzz target (`fuzz/`) drives this with arbitrary bytes.
pub async fn inspect(
    runtime: &Runtime,
    name: &str,
    file: &Path,
    bytes: &[u8],
    cache_dir: Option<&Path>,
) -> Result<Plugin, String> {
    let content = cache_dir.map(|_| content_hex(bytes));
    inspect_with(runtime, name, file, bytes, cache_dir.zip(content.as_deref())).await
}

/// [`inspect`] with the cache folder and the bytes' content hash.
async fn inspect_with(
    runtime: &Runtime,
    name: &str,
    file: &Path,
    bytes: &[u8],
    cache: Option<(&Path, &str)>,
) -> Result<Plugin, String> {
    let name = name.to_string();
    if bytes.len() < 8 || !bytes.starts_with(WASM_MAGIC) {
        return Err(NOT_WASM.into());
    }
    if bytes[4..8] == CORE_MODULE_LAYER {
        return Err("a core WebAssembly module, not a component: build it for the wasm32-wasip2 target \
                    (or wrap it with `wasm-tools component new`)"
            .into());
    }
    let started = Instant::now();
    let (component, from_cache, metadata_path) = match cache {
        Some((cache_dir, content)) => {
            let (component, from_cache, path) = compile_cached(runtime, &name, bytes, content, cache_dir)?;
            (component, from_cache, Some(path.with_extension("meta.json")))
        }
        None => {
            let component =
                Component::new(&runtime.engine, bytes).map_err(|e| format!("not a valid component: {e:#}"))?;
            (component, false, None)
        }
    };
    let compile_time = started.elapsed();
    let pre = link(runtime, &component)?;
    let cached = metadata_path.as_deref().filter(|_| from_cache).and_then(Metadata::read);
    if let Some(Metadata { version, config_def }) = cached {
        let version = shown_version(version);
        return Ok(Plugin { name, file: file.to_path_buf(), version, config_def, from_cache, compile_time, pre });
    }
    let context = InstanceContext {
        namespace: Namespace::new("", ""),
        task: None,
        offsets: Arc::new(NoConnectorYet),
        reconfigure: None,
    };
    let mut instance = runtime
        .instantiate(&pre, context, &SandboxSettings::default())
        .await
        .map_err(|e| format!("cannot be instantiated: {e}"))?;
    let version = shown_version(instance.version().await.map_err(|e| format!("version() failed: {e}"))?);
    let config_def: Vec<ConfigKeyInfo> = instance
        .config_def()
        .await
        .map_err(|e| format!("config-def() failed: {e}"))?
        .into_iter()
        .map(ConfigKeyInfo::from)
        .collect();
    if let Some(path) = &metadata_path {
        let metadata = Metadata { version: version.clone(), config_def: config_def.clone() };
        if let Err(e) = write_atomically(path, &serde_json::to_vec(&metadata).expect("metadata serializes")) {
            tracing::warn!("cannot cache plugin metadata at {}: {e:#}", path.display());
        }
    }
    Ok(Plugin { name, file: file.to_path_buf(), version, config_def, from_cache, compile_time, pre })
}

/// Longest plugin version shown (in every status, listing and log line that names it).
const MAX_VERSION_BYTES: usize = 128;

/// A plugin's `version()` as the host shows it: control characters escaped (the plugin
/// wrote it; it goes into log lines and `sluice plugins`) and cut to
/// [`MAX_VERSION_BYTES`], so a plugin cannot make every status of its tasks megabytes.
fn shown_version(version: String) -> String {
    let mut shown = crate::runtime::plugin_log::escape_controls(&version).into_owned();
    if shown.len() > MAX_VERSION_BYTES {
        super::sandbox::cut_at_char_boundary(&mut shown, MAX_VERSION_BYTES - 3);
        shown.push_str("...");
    }
    shown
}

/// What a plugin says about itself, cached beside its compiled code (same content and
/// engine key), so that loading it again needs no instance and no call into it.
#[derive(Serialize, Deserialize)]
struct Metadata {
    version: String,
    config_def: Vec<ConfigKeyInfo>,
}

impl Metadata {
    fn read(path: &Path) -> Option<Metadata> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }
}

/// `<cache>/<sha256 of the file>-<engine compatibility>.cwasm`
fn cache_path(runtime: &Runtime, content_hex: &str, cache_dir: &Path) -> PathBuf {
    let mut engine = DefaultHasher::new();
    runtime.engine.precompile_compatibility_hash().hash(&mut engine);
    env!("CARGO_PKG_VERSION").hash(&mut engine);
    cache_dir.join(format!("{content_hex}-{:016x}.cwasm", engine.finish()))
}

/// The compiled component, whether it came from the cache, and its path there.
fn compile_cached(
    runtime: &Runtime,
    name: &str,
    bytes: &[u8],
    content_hex: &str,
    cache_dir: &Path,
) -> Result<(Component, bool, PathBuf), String> {
    let path = cache_path(runtime, content_hex, cache_dir);
    if path.exists() {
        // SAFETY: the cache directory is written only by this function, from components
        // this engine compiled; a file that fails wasmtime's header checks is recompiled.
        match unsafe { Component::deserialize_file(&runtime.engine, &path) } {
            Ok(component) => {
                mark_used(&path);
                mark_used(&path.with_extension("meta.json"));
                return Ok((component, true, path));
            }
            Err(e) => tracing::warn!("ignoring unusable compiled cache entry {}: {e:#}", path.display()),
        }
    }
    // Compiling a large (Python, JavaScript) component takes seconds: say so before.
    tracing::info!(
        "compiling plugin {name} ({:.1} MB); later starts load it from the compile cache",
        bytes.len() as f64 / 1e6
    );
    let compiled = runtime.engine.precompile_component(bytes).map_err(|e| format!("not a valid component: {e:#}"))?;
    if let Err(e) = write_atomically(&path, &compiled) {
        tracing::warn!("cannot cache compiled plugin at {}: {e:#}", path.display());
    }
    // SAFETY: `compiled` was produced by this engine a moment ago.
    let component = unsafe { Component::deserialize(&runtime.engine, &compiled) }.map_err(|e| format!("{e:#}"))?;
    Ok((component, false, path))
}

/// How long a compile cache entry may go unused before a worker's start removes it. The
/// cache is shared by every data directory of the user and keyed by content and engine,
/// so each rebuilt plugin and each Sluice upgrade leaves entries no worker asks for again
/// (a compiled Python plugin is about 100 MB). A month, as cargo's cache cleaning.
pub const CACHE_UNUSED_FOR: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// How often an entry in use has its time renewed: loads write nothing most days.
const CACHE_MARK_EVERY: Duration = Duration::from_secs(24 * 60 * 60);

/// What [`prune_compile_cache`] removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    pub files: usize,
    pub bytes: u64,
}

/// Renews an entry's modification time, the time it was last used, when it is older than
/// [`CACHE_MARK_EVERY`]. A cache the worker may not write is used as it is.
fn mark_used(path: &Path) {
    let now = std::time::SystemTime::now();
    let modified = std::fs::metadata(path).and_then(|meta| meta.modified());
    if modified.is_ok_and(|time| now.duration_since(time).is_ok_and(|age| age >= CACHE_MARK_EVERY))
        && let Ok(file) = std::fs::File::open(path)
    {
        let _ = file.set_modified(now);
    }
}

/// Removes the compile cache's entries (compiled code, metadata, the stat index's entries,
/// and writes a crash cut short) that no worker has used for `unused_for`. Only names the
/// cache itself writes are removed; anything else in the folder is left alone. An entry
/// removed while another worker loads it is compiled again by that worker.
pub fn prune_compile_cache(cache_dir: &Path, unused_for: Duration) -> Pruned {
    let is_hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    let is_entry = |name: &str| {
        let stem = name.strip_suffix(".cwasm").or_else(|| name.strip_suffix(".meta.json"));
        stem.and_then(|stem| stem.split_once('-'))
            .is_some_and(|(content, engine)| is_hex(content, 64) && is_hex(engine, 16))
    };
    // `.<pid>.<n>.tmp`, left by a worker killed while it wrote.
    let is_unfinished_write = |name: &str| {
        name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp")).and_then(|n| n.split_once('.')).is_some_and(
            |(pid, n)| !pid.is_empty() && !n.is_empty() && (pid.bytes().chain(n.bytes())).all(|b| b.is_ascii_digit()),
        )
    };
    let mut pruned = Pruned::default();
    let mut prune_in = |dir: &Path, ours: &dyn Fn(&str) -> bool| {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str().filter(|name| ours(name)) else { continue };
            let Ok(meta) = entry.metadata() else { continue };
            let unused = meta.modified().ok().and_then(|time| time.elapsed().ok()).is_some_and(|age| age >= unused_for);
            if meta.is_file() && unused && std::fs::remove_file(entry.path()).is_ok() {
                tracing::debug!("removed {} from the compile cache: unused for {unused_for:?}", name);
                pruned.files += 1;
                pruned.bytes += meta.len();
            }
        }
    };
    prune_in(cache_dir, &|name| is_entry(name) || is_unfinished_write(name));
    prune_in(&cache_dir.join("files"), &|name| is_hex(name, 32) || is_unfinished_write(name));
    pruned
}

/// [`prune_compile_cache`] with [`CACHE_UNUSED_FOR`], once per cache folder in a process
/// (a worker's start; tests start many hosts on one cache).
fn prune_once_per_process(cache_dir: &Path) {
    static PRUNED: std::sync::Mutex<std::collections::BTreeSet<PathBuf>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    if !PRUNED.lock().unwrap().insert(cache_dir.to_path_buf()) {
        return;
    }
    let pruned = prune_compile_cache(cache_dir, CACHE_UNUSED_FOR);
    if pruned.files > 0 {
        tracing::info!(
            "removed {} files ({:.1} MB) unused for {} days from the compile cache {}",
            pruned.files,
            pruned.bytes as f64 / 1e6,
            CACHE_UNUSED_FOR.as_secs() / 86_400,
            cache_dir.display()
        );
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = path.parent().context("cache path has no folder")?;
    std::fs::create_dir_all(dir)?;
    // Unique per write: two hosts in one process (tests) may cache the same plugin at once.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let write = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{}.{write}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_is_shown_escaped_and_short() {
        assert_eq!(shown_version("1.2.0".into()), "1.2.0");
        assert_eq!(shown_version("1.0\n\u{1b}[2KERROR forged".into()), "1.0\\n\\u{1b}[2KERROR forged");
        let long = shown_version("é".repeat(1 << 20));
        assert!(long.len() <= MAX_VERSION_BYTES && long.ends_with("..."), "{long}");
    }

    #[test]
    fn an_unserved_world_version_or_network_import_is_said_in_a_plugin_authors_words() {
        let names = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let future =
            unserved_import(&names(&["wasi:io/streams@0.2.0", "sluice:connector/offset-storage-reader@0.9.0"]));
        assert!(future.unwrap().starts_with(
            "targets sluice:connector@0.9.0, which this Sluice does not serve (it serves 0.4.0, 0.3.0, 0.2.0, 0.1.0)"
        ));
        let http = unserved_import(&names(&["sluice:connector/types@0.2.0", "wasi:http/types@0.2.10"])).unwrap();
        assert!(http.contains("the sandbox has no network") && http.contains("--disable http"), "{http}");
        assert_eq!(unserved_import(&names(&["sluice:connector/types@0.1.0", "wasi:cli/environment@0.2.0"])), None);
    }

    #[tokio::test]
    async fn a_files_turn_to_load_is_forgotten_once_it_is_loaded() {
        let (dir, cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(dir.path().join("garbage.wasm"), b"not a component").unwrap();
        let runtime = Runtime::new().unwrap();
        let registry = Registry::load(&runtime, dir.path(), cache.path()).await.unwrap();
        assert_eq!(registry.rejected().len(), 1);
        std::fs::write(dir.path().join("garbage.wasm"), b"still not a component").unwrap();
        registry.refresh(&runtime).await.unwrap();
        assert!(registry.loading.lock().unwrap().is_empty(), "files loaded and done are not kept in the map");
    }

    #[tokio::test]
    async fn a_file_whose_name_is_not_utf8_is_named_with_the_reason() {
        use std::os::unix::ffi::OsStrExt;
        let (dir, cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let file = dir.path().join(std::ffi::OsStr::from_bytes(b"caf\xe9.wasm"));
        std::fs::write(&file, b"\0asm\x0d\0\x01\0").unwrap();
        let runtime = Runtime::new().unwrap();
        let registry = Registry::load(&runtime, dir.path(), cache.path()).await.unwrap();
        let rejected = registry.rejected();
        assert_eq!(rejected.len(), 1, "{rejected:?}");
        assert_eq!(rejected[0].file, file);
        assert!(rejected[0].reason.contains("not valid UTF-8"), "{}", rejected[0].reason);
        let shown = serde_json::to_value(&rejected[0]).unwrap();
        assert_eq!(shown["file"], file.display().to_string());
    }

    #[tokio::test]
    async fn a_file_whose_name_has_a_newline_is_named_with_the_reason() {
        // Its name in a log line would start a line of its own.
        let (dir, cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(dir.path().join("new\nline.wasm"), b"\0asm\x0d\0\x01\0").unwrap();
        // One that shows as another (`\u{202E}mvsa.exe` as `exe.asvm`).
        std::fs::write(dir.path().join("\u{202E}mvsa.exe.wasm"), b"\0asm\x0d\0\x01\0").unwrap();
        // Meant as plugins, never loaded, said: a name in upper case, and no name at all.
        std::fs::write(dir.path().join("UP.WASM"), b"\0asm\x0d\0\x01\0").unwrap();
        std::fs::write(dir.path().join(".wasm"), b"\0asm\x0d\0\x01\0").unwrap();
        let runtime = Runtime::new().unwrap();
        let registry = Registry::load(&runtime, dir.path(), cache.path()).await.unwrap();
        let rejected = registry.rejected();
        assert_eq!(rejected.len(), 4, "{rejected:?}");
        let reason = |file: &str| rejected.iter().find(|r| r.file.file_name().unwrap() == file).unwrap().reason.clone();
        assert!(reason("new\nline.wasm").contains("control or bidirectional character"));
        assert!(reason("\u{202E}mvsa.exe.wasm").contains("control or bidirectional character"));
        assert!(reason("UP.WASM").contains("ends in .wasm, in lower case"));
        assert!(reason(".wasm").contains("no name before .wasm"));
        assert!(registry.files_in_folder().is_empty(), "{:?}", registry.files_in_folder());
    }
}
