//! The `source-connector` world for file-pulse, through the `sluice-connector` SDK: the
//! connector is [`ConnectorState`], a task is [`TaskState`].
//!
//! The connector lists the directory on `tick`, reads every assigned file's committed
//! offset in one `offsets` call, cleans up finished files, hands new files to tasks
//! through `request-task-reconfiguration`, and restarts a stalled task by bumping that
//! one task's generation (so the host restarts only it). Tasks stream their files
//! round-robin, a bounded slice per poll, so a new small file never waits for a large one.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use crate::assign::Assignment;
use crate::offset::{FileKey, FileOffset};
use crate::reader::{LineReader, read_whole};
use crate::settings::{Cleanup, Completion, KEYS, ReadMode, Settings};

use sluice_connector::{
    Config, ConfigKey, ConfigProblem, ConfigType, Connector, Error, Header, Importance, Record, Task, log,
};

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn invalid((key, reason): (String, String)) -> Error {
    Error::InvalidConfig(format!("{key}: {reason}"))
}

thread_local! {
    static PREOPENS: Vec<(wasi::filesystem::types::Descriptor, String)> = wasi::filesystem::preopens::get_directories();
}

/// The file's identity: WASI's metadata hash (device and inode) of the path.
fn identity(path: &str) -> Option<String> {
    PREOPENS.with(|preopens| {
        preopens.iter().find_map(|(dir, root)| {
            let rest = path.strip_prefix(root.trim_end_matches('/'))?;
            let relative = rest.strip_prefix('/')?;
            let hash = dir.metadata_hash_at(wasi::filesystem::types::PathFlags::empty(), relative).ok()?;
            Some(format!("{:016x}", hash.lower))
        })
    })
}

/// A file read with WASI's positional `read(length, offset)`. Unlike `std::fs::File`,
/// whose WASI input stream stays closed once it reached the end, it sees data appended
/// later, and it keeps reading the same file after a rename (rotation).
struct PositionalFile {
    file: wasi::filesystem::types::Descriptor,
    offset: u64,
}

impl std::io::Read for PositionalFile {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let (data, _) =
            self.file.read(buf.len() as u64, self.offset).map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        buf[..data.len()].copy_from_slice(&data);
        self.offset += data.len() as u64;
        Ok(data.len())
    }
}

fn open_positional(path: &str, offset: u64) -> std::io::Result<PositionalFile> {
    use wasi::filesystem::types::{DescriptorFlags, OpenFlags, PathFlags};
    PREOPENS.with(|preopens| {
        for (dir, root) in preopens {
            let Some(relative) = path.strip_prefix(root.trim_end_matches('/')).and_then(|rest| rest.strip_prefix('/'))
            else {
                continue;
            };
            return dir
                .open_at(PathFlags::SYMLINK_FOLLOW, relative, OpenFlags::empty(), DescriptorFlags::READ)
                .map(|file| PositionalFile { file, offset })
                .map_err(|e| std::io::Error::other(format!("{e:?}")));
        }
        Err(std::io::Error::new(std::io::ErrorKind::NotFound, format!("{path} is not under a granted directory")))
    })
}

fn open_reader(path: &str, position: u64) -> std::io::Result<LineReader> {
    if path.ends_with(".gz") {
        return LineReader::open(path, position);
    }
    Ok(LineReader::from_source(Box::new(open_positional(path, position)?), position))
}

fn committed(keys: &[FileKey]) -> Vec<Option<FileOffset>> {
    if keys.is_empty() {
        return Vec::new();
    }
    sluice_connector::offsets::get_many(keys)
}

/// Lists matching files under the directory (relative paths, `/`-separated).
fn list(settings: &Settings) -> std::io::Result<Vec<FileKey>> {
    let mut found = Vec::new();
    let mut pending = vec![String::new()];
    while let Some(relative_dir) = pending.pop() {
        let dir = if relative_dir.is_empty() {
            settings.directory.clone()
        } else {
            format!("{}/{relative_dir}", settings.directory)
        };
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            // Hidden files are usually being written (editors, uploaders).
            if name.starts_with('.') {
                continue;
            }
            let relative = if relative_dir.is_empty() { name.clone() } else { format!("{relative_dir}/{name}") };
            let kind = entry.file_type()?;
            if kind.is_dir() {
                if settings.recursive {
                    pending.push(relative);
                }
            } else if kind.is_file() && settings.filter.is_match(&name) {
                if let Some(id) = identity(&format!("{}/{relative}", settings.directory)) {
                    found.push(FileKey { path: relative, id });
                }
            }
        }
    }
    found.sort();
    Ok(found)
}

// ---------------------------------------------------------------- connector

#[derive(Default)]
struct ConnectorState {
    config: BTreeMap<String, String>,
    settings: Option<Settings>,
    assignment: Assignment,
    generations: Vec<u64>,
    finished: BTreeSet<FileKey>,
    /// Files whose offset says failed and that this connector moved to the failure path:
    /// if one comes back into the directory, it is retried.
    moved_failed: BTreeMap<FileKey, u32>,
    /// Retry attempt per file (in the task config).
    attempts: BTreeMap<FileKey, u32>,
    /// Per task: (offsets of its unfinished files, when they last changed).
    progress: Vec<(String, u64)>,
    last_listing_ms: u64,
    /// Found by `start`, assigned by the first `task-configs` (which knows `tasks.max`).
    initial: Vec<FileKey>,
}

impl ConnectorState {
    fn settings(&self) -> &Settings {
        self.settings.as_ref().expect("started")
    }

    /// Lists the directory; returns the files to assign (new ones, and failed ones moved back).
    fn discover(&mut self) -> Result<Vec<FileKey>, Error> {
        let files = list(self.settings())
            .map_err(|e| Error::Retriable(format!("listing {}: {e}", self.settings().directory)))?;
        let mut new = Vec::new();
        // A file this connector moved away after it failed, now back: read it again.
        let returned: Vec<FileKey> = files.iter().filter(|f| self.moved_failed.contains_key(f)).cloned().collect();
        for file in &returned {
            let attempt = self.moved_failed.remove(file).unwrap_or(0) + 1;
            log::info(&format!("{} was moved back after failing: retrying it (attempt {attempt})", file.path));
            self.attempts.insert(file.clone(), attempt);
            self.finished.remove(file);
            for task in &mut self.assignment.tasks {
                task.retain(|f| f != file);
            }
            new.push(file.clone());
        }
        let candidates: Vec<FileKey> = files
            .into_iter()
            .filter(|f| !new.contains(f) && !self.assignment.contains(f) && !self.finished.contains(f))
            .collect();
        let offsets = committed(&candidates);
        for (file, offset) in candidates.into_iter().zip(offsets) {
            match offset {
                Some(offset) if offset.done => {
                    // Finished before (a restart, or cleanup did not run): clean up now.
                    self.clean_up(&file, &offset);
                    self.finished.insert(file);
                }
                _ => new.push(file),
            }
        }
        if !new.is_empty() {
            let names: Vec<&str> = new.iter().map(|f| f.path.as_str()).collect();
            log::info(&format!("{} new file(s): {}", new.len(), names.join(", ")));
        }
        Ok(new)
    }

    fn clean_up(&mut self, file: &FileKey, offset: &FileOffset) {
        let settings = self.settings().clone();
        let source = format!("{}/{}", settings.directory, file.path);
        if identity(&source).as_deref() != Some(file.id.as_str()) {
            return; // gone, or replaced by another file under the same name
        }
        let result = match (settings.cleanup, &offset.failed) {
            (Cleanup::None, _) => return,
            // A file that could not be read is kept for a person to look at.
            (Cleanup::Delete, Some(_)) => return,
            (Cleanup::Delete, None) => std::fs::remove_file(&source).map(|_| format!("deleted {}", file.path)),
            (Cleanup::Move, failed) => {
                let root = if failed.is_some() { &settings.move_failure } else { &settings.move_success };
                let target = format!("{root}/{}", file.path);
                if let Some(parent) = std::path::Path::new(&target).parent() {
                    let _ = std::fs::create_dir_all(parent);
                }
                std::fs::rename(&source, &target).map(|_| {
                    if failed.is_some() {
                        self.moved_failed.insert(file.clone(), offset.attempt);
                    }
                    format!("moved {} to {target}", file.path)
                })
            }
        };
        match result {
            Ok(done) => log::info(&done),
            Err(e) => log::warn(&format!("cleanup of {} failed: {e}", file.path)),
        }
    }

    /// Reads the committed offsets of every assigned, unfinished file: finished files are
    /// cleaned up, and a task with no progress for the stall timeout gets a new generation.
    fn watch(&mut self, now: u64) -> BTreeSet<usize> {
        let open: Vec<FileKey> =
            self.assignment.tasks.iter().flatten().filter(|f| !self.finished.contains(f)).cloned().collect();
        let offsets: BTreeMap<FileKey, Option<FileOffset>> = open.iter().cloned().zip(committed(&open)).collect();
        for (file, offset) in &offsets {
            // An offset from an earlier attempt says nothing about a retried file.
            let attempt = self.attempts.get(file).copied().unwrap_or(0);
            if let Some(offset) = offset.as_ref().filter(|o| o.done && o.attempt >= attempt) {
                if let Some(reason) = &offset.failed {
                    log::warn(&format!("{} failed: {reason}", file.path));
                }
                self.clean_up(file, offset);
                self.finished.insert(file.clone());
            }
        }
        // A file read up to its current size is waiting for data, not stalled. (Not
        // decidable for .gz, whose positions count decompressed bytes.)
        let directory = self.settings().directory.clone();
        let caught_up: BTreeSet<FileKey> = offsets
            .iter()
            .filter(|(file, offset)| {
                let size = std::fs::metadata(format!("{directory}/{}", file.path)).map(|m| m.len()).unwrap_or(0);
                !file.path.ends_with(".gz") && offset.as_ref().is_some_and(|o| o.position >= size)
            })
            .map(|(file, _)| file.clone())
            .collect();
        let timeout = self.settings().stall_timeout_ms;
        let mut restart = BTreeSet::new();
        for task in 0..self.assignment.tasks.len() {
            let unfinished: Vec<&FileKey> = self.assignment.tasks[task]
                .iter()
                .filter(|f| !self.finished.contains(f) && !caught_up.contains(f))
                .collect();
            let snapshot: String = unfinished.iter().map(|f| format!("{}={:?};", f.path, offsets.get(*f))).collect();
            let (last, since) = &mut self.progress[task];
            if unfinished.is_empty() || *last != snapshot {
                *last = snapshot;
                *since = now;
            } else if now.saturating_sub(*since) >= timeout {
                let names: Vec<&str> = unfinished.iter().map(|f| f.path.as_str()).collect();
                log::warn(&format!(
                    "task {task} made no progress on {} for {} ms: restarting it",
                    names.join(", "),
                    now - *since
                ));
                self.generations[task] += 1;
                *since = now;
                restart.insert(task);
            }
        }
        restart
    }

    fn resize(&mut self, tasks: usize) {
        let tasks = tasks.max(1);
        if self.assignment.tasks.len() != tasks {
            let orphans: Vec<FileKey> = self.assignment.tasks.iter().skip(tasks).flatten().cloned().collect();
            self.assignment.tasks.resize(tasks, Vec::new());
            self.assignment.add(&orphans, &self.finished);
        }
        self.generations.resize(tasks, 0);
        self.progress.resize(tasks, (String::new(), now_ms()));
    }
}

impl Connector for ConnectorState {
    fn version() -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    fn config_def() -> Vec<ConfigKey> {
        KEYS.iter()
            .map(|(name, default, importance, doc)| ConfigKey {
                name: name.to_string(),
                type_: match *name {
                    "fs.listing.recursive" => ConfigType::Boolean,
                    n if n.ends_with(".ms") || n.ends_with(".size") || n.starts_with("poll.max") => ConfigType::Long,
                    _ => ConfigType::String,
                },
                default_value: default.map(String::from),
                importance: match *importance {
                    "high" => Importance::High,
                    "medium" => Importance::Medium,
                    _ => Importance::Low,
                },
                documentation: doc.to_string(),
            })
            .collect()
    }

    fn validate(config: &Config) -> Vec<ConfigProblem> {
        let settings = match Settings::parse(&config.0) {
            Ok(settings) => settings,
            Err((key, message)) => return vec![ConfigProblem { key, message }],
        };
        if let Err(e) = std::fs::read_dir(&settings.directory) {
            return vec![ConfigProblem {
                key: "fs.listing.directory.path".into(),
                message: format!(
                    "'{}' cannot be listed ({e}); grant it with sandbox.fs.read, or sandbox.fs.write when fs.cleanup.policy deletes or moves",
                    settings.directory
                ),
            }];
        }
        Vec::new()
    }

    fn start(config: Config) -> Result<Self, Error> {
        let settings = Settings::parse(&config.0).map_err(invalid)?;
        let mut state = ConnectorState { config: config.0, settings: Some(settings), ..ConnectorState::default() };
        state.last_listing_ms = now_ms();
        // List once now, so the first task configs already carry the files.
        state.initial = state.discover()?;
        Ok(state)
    }

    fn task_configs(&mut self, max_tasks: u32) -> Result<Vec<Config>, Error> {
        self.resize(max_tasks as usize);
        let initial = std::mem::take(&mut self.initial);
        self.assignment.add(&initial, &self.finished);
        Ok(self
            .assignment
            .tasks
            .iter()
            .enumerate()
            .map(|(task, files)| {
                let files: Vec<(String, String, u32)> = files
                    .iter()
                    .map(|f| (f.path.clone(), f.id.clone(), self.attempts.get(f).copied().unwrap_or(0)))
                    .collect();
                Config(self.config.clone())
                    .with("file-pulse.task", task)
                    .with("file-pulse.generation", self.generations[task])
                    .with("file-pulse.files", serde_json::to_string(&files).expect("serializable"))
            })
            .collect())
    }

    fn tick(&mut self) -> Result<(), Error> {
        let now = now_ms();
        let mut changed = BTreeSet::new();
        if now.saturating_sub(self.last_listing_ms) >= self.settings().listing_interval_ms {
            self.last_listing_ms = now;
            let new = self.discover()?;
            changed.extend(self.assignment.add(&new, &self.finished));
        }
        changed.extend(self.watch(now));
        if !changed.is_empty() {
            sluice_connector::request_task_reconfiguration();
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- task

struct TaskFile {
    key: FileKey,
    /// `key.partition()`, built once: it goes on every record.
    partition: String,
    path: String,
    offset: FileOffset,
    reader: Option<LineReader>,
    last_growth_ms: u64,
    finished: bool,
    /// Tail mode: the file was rotated away; one more read to its end, then done.
    draining: bool,
}

struct TaskState {
    /// Shared, so a poll can hold it while reading files (`&mut self`) without a copy.
    settings: Rc<Settings>,
    files: Vec<TaskFile>,
    cursor: usize,
    /// Test-only: with generation 0, stop emitting a file's lines after this many.
    stall_after_lines: Option<u64>,
}

impl TaskFile {
    fn record(&self, topic: &str, value: Option<Vec<u8>>) -> Record {
        Record {
            partition: self.partition.clone(),
            offset: self.offset.to_json(),
            topic: value.as_ref().map(|_| topic.to_string()),
            key: Some(self.key.path.clone().into_bytes()),
            value,
            headers: vec![
                Header { key: "file.path".into(), value: self.key.path.clone().into_bytes() },
                Header { key: "file.line".into(), value: self.offset.line.to_string().into_bytes() },
            ],
            timestamp: Some(now_ms() as i64),
        }
    }

    /// Ends the file: the done flag rides on its last record of this poll, or on an
    /// offset-only record when this poll produced none.
    fn finish(&mut self, records: &mut Vec<Record>, last_of_this_poll: Option<usize>, failed: Option<String>) {
        self.offset.done = true;
        if let Some(reason) = failed {
            log::warn(&format!("{}: {reason}", self.key.path));
            self.offset.failed = Some(reason);
        }
        self.finished = true;
        self.reader = None;
        match last_of_this_poll {
            Some(index) if self.offset.failed.is_none() => records[index].offset = self.offset.to_json(),
            _ => records.push(self.record("", None)),
        }
    }
}

impl TaskState {
    /// Reads from one file until the poll's budget is spent or nothing more is there.
    fn read_file(&mut self, index: usize, records: &mut Vec<Record>, bytes: &mut usize) {
        let settings = Rc::clone(&self.settings);
        let stall_after = self.stall_after_lines;
        let file = &mut self.files[index];
        let mut last_of_this_poll = None;
        let size = std::fs::metadata(&file.path).map(|m| m.len()).unwrap_or(file.offset.size);
        if settings.read_mode == ReadMode::Bytes {
            match read_whole(&file.path, settings.bytes_max) {
                Ok(content) => {
                    file.offset.position = content.len() as u64;
                    file.offset.size = size;
                    file.offset.line = 1;
                    *bytes += content.len();
                    records.push(file.record(&settings.topic, Some(content)));
                    let last = records.len() - 1;
                    file.finish(records, Some(last), None);
                }
                Err(e) => file.finish(records, None, Some(format!("cannot be read: {e}"))),
            }
            return;
        }
        if file.reader.is_none() {
            match open_reader(&file.path, file.offset.position) {
                Ok(reader) => file.reader = Some(reader),
                Err(e) => return file.finish(records, None, Some(format!("cannot be read: {e}"))),
            }
        }
        let hold_partial = settings.completion == Completion::Tail;
        while records.len() < settings.poll_max_records && *bytes < settings.poll_max_bytes {
            if stall_after.is_some_and(|n| file.offset.line >= n) {
                return;
            }
            let reader = file.reader.as_mut().expect("opened above");
            match reader.next_line(hold_partial) {
                Ok(Some(line)) => {
                    file.offset.position = reader.position;
                    file.offset.line += 1;
                    file.offset.size = size;
                    file.last_growth_ms = now_ms();
                    *bytes += line.len();
                    records.push(file.record(&settings.topic, Some(line)));
                    last_of_this_poll = Some(records.len() - 1);
                }
                Ok(None) => {
                    let done = match settings.completion {
                        Completion::Eof => true,
                        // Rotated, replaced or removed: everything written to it was read
                        // through the open handle, so it is finished.
                        Completion::Tail => {
                            let rotated = identity(&file.path).as_deref() != Some(file.key.id.as_str());
                            if rotated && !file.draining {
                                // Read what was written before the rotation, then finish.
                                file.draining = true;
                                continue;
                            }
                            rotated
                                || (settings.tail_idle_ms > 0
                                    && now_ms().saturating_sub(file.last_growth_ms) >= settings.tail_idle_ms)
                        }
                    };
                    if done {
                        file.finish(records, last_of_this_poll, None);
                    }
                    return;
                }
                Err(e) => return file.finish(records, last_of_this_poll, Some(format!("cannot be read: {e}"))),
            }
        }
    }
}

impl Task for TaskState {
    fn start(config: Config) -> Result<Self, Error> {
        let config = config.0;
        let settings = Settings::parse(&config).map_err(invalid)?;
        let listed: Vec<(String, String, u32)> = config
            .get("file-pulse.files")
            .map(|text| serde_json::from_str(text))
            .transpose()
            .map_err(|e| Error::InvalidConfig(format!("file-pulse.files: {e}")))?
            .unwrap_or_default();
        let keys: Vec<FileKey> =
            listed.iter().map(|(path, id, _)| FileKey { path: path.clone(), id: id.clone() }).collect();
        let offsets = committed(&keys);
        let now = now_ms();
        let files = keys
            .into_iter()
            .zip(offsets)
            .zip(listed)
            .map(|((key, offset), (_, _, attempt))| {
                let offset = match offset {
                    Some(offset) if offset.attempt >= attempt => offset,
                    _ => FileOffset { attempt, ..FileOffset::default() },
                };
                TaskFile {
                    partition: key.partition(),
                    path: format!("{}/{}", settings.directory, key.path),
                    finished: offset.done,
                    key,
                    offset,
                    reader: None,
                    last_growth_ms: now,
                    draining: false,
                }
            })
            .collect::<Vec<_>>();
        let generation: u64 = config.get("file-pulse.generation").and_then(|g| g.parse().ok()).unwrap_or(0);
        // Test-only: task `test.stall.task` (default all) stalls in its first generation.
        let this_task = config.get("file-pulse.task").cloned().unwrap_or_default();
        let stalls_here = config.get("test.stall.task").is_none_or(|t| *t == this_task);
        let stall_after_lines = config
            .get("test.stall.after.lines")
            .and_then(|n| n.parse().ok())
            .filter(|_| generation == 0 && stalls_here);
        let open = files.iter().filter(|f| !f.finished).count();
        log::info(&format!("streaming {open} of {} assigned file(s), generation {generation}", files.len()));
        Ok(TaskState { settings: Rc::new(settings), files, cursor: 0, stall_after_lines })
    }

    fn poll(&mut self) -> Result<Vec<Record>, Error> {
        let mut records = Vec::new();
        let mut bytes = 0;
        let count = self.files.len();
        let settings = Rc::clone(&self.settings);
        for step in 0..count {
            if records.len() >= settings.poll_max_records || bytes >= settings.poll_max_bytes {
                break;
            }
            let index = (self.cursor + step) % count;
            if !self.files[index].finished {
                self.read_file(index, &mut records, &mut bytes);
            }
        }
        // The next poll starts with the next file: every file gets its turn.
        self.cursor = if count == 0 { 0 } else { (self.cursor + 1) % count };
        Ok(records)
    }
}

sluice_connector::export_connector!(ConnectorState, TaskState);
