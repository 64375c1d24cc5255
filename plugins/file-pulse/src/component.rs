//! The `source-connector` world for file-pulse, through the `sluice-connector` SDK: the
//! connector is [`ConnectorState`], a task is [`TaskState`].
//!
//! The connector walks the directory a bounded slice per `tick` (so no tick nears its
//! deadline, however many files there are), decides what each file is from its committed
//! offset ([`crate::identity`]), hands files to tasks through
//! `request-task-reconfiguration`, reads the offsets of the files its tasks hold (KIP-131)
//! to clean up finished ones, and restarts a stalled task by bumping that one task's
//! generation. Tasks stream their files round-robin, a bounded slice per poll, so a new
//! small file never waits for a large one.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::rc::Rc;
use std::time::{Duration, Instant};

use wasi::filesystem::types::{
    Descriptor, DescriptorFlags, DescriptorStat, DescriptorType, DirectoryEntryStream, ErrorCode, OpenFlags, PathFlags,
};

use crate::assign::{Assigned, Assignment};
use crate::cleanup::{claim_name, claimed_from, numbered_name};
use crate::identity::{Decision, Seen, decide};
use crate::offset::{End, FileOffset, HEAD_BYTES, OffsetWriter, decimal, head_hash, partition};
use crate::reader::{self, LineReader, is_too_long, read_whole};
use crate::settings::{Cleanup, Completion, KEYS, ReadMode, Settings};

use sluice_connector::{Batch, Config, ConfigKey, ConfigProblem, ConfigType, Connector, Error, Importance, Task, log};

/// How long a failed file found shorter than what was sent must stay unchanged before it
/// is read again from its start (see `decide_all`).
const FIXED_IN_PLACE_SETTLE_MS: u64 = 5_000;

/// Whether a file modified at `seen.mtime` was modified less than `ms` ago (or in the future).
fn modified_within(seen: Seen, ms: u64) -> bool {
    now_ms().saturating_sub(seen.mtime / 1_000_000) < ms
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

std::thread_local! {
    /// The clock read once at the start of a poll: every line of the poll is stamped with
    /// it (a clock call per line cost more than building the line's record).
    static POLL_CLOCK_MS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn poll_clock_ms() -> u64 {
    POLL_CLOCK_MS.get()
}

fn invalid((key, reason): (String, String)) -> Error {
    Error::InvalidConfig(format!("{key}: {reason}"))
}

/// Control characters in a file name are escaped in log lines, so a name cannot forge one.
fn printable(name: &str) -> String {
    name.escape_debug().to_string()
}

// ---------------------------------------------------------------- files through WASI

thread_local! {
    static PREOPENS: Vec<(Descriptor, String)> = wasi::filesystem::preopens::get_directories();
}

/// Runs `f` with the granted directory holding `path` and the path relative to it.
fn in_preopen<T>(path: &str, f: impl FnOnce(&Descriptor, &str) -> Result<T, ErrorCode>) -> Result<T, ErrorCode> {
    PREOPENS.with(|preopens| {
        let (dir, relative) = preopens
            .iter()
            .filter_map(|(dir, root)| {
                let rest = path.strip_prefix(root.trim_end_matches('/'))?;
                if rest.is_empty() {
                    return Some((dir, "."));
                }
                Some((dir, rest.strip_prefix('/')?))
            })
            .max_by_key(|(_, relative)| std::cmp::Reverse(relative.len()))
            .ok_or(ErrorCode::NotPermitted)?;
        f(dir, relative)
    })
}

/// Why the directory at `path` cannot be written through the grants, if it cannot: it
/// is under no granted directory, or only under read-only ones.
fn not_writable(path: &str) -> Option<&'static str> {
    match in_preopen(path, |dir, _| dir.get_flags()) {
        Err(_) => Some("not granted"),
        Ok(flags) if !flags.contains(DescriptorFlags::MUTATE_DIRECTORY) => Some("granted read-only"),
        Ok(_) => None,
    }
}

fn hash_hex(hash: wasi::filesystem::types::MetadataHashValue) -> String {
    format!("{:016x}", hash.lower)
}

fn mtime_ns(stat: &DescriptorStat) -> u64 {
    stat.data_modification_timestamp.map_or(0, |t| t.seconds * 1_000_000_000 + u64::from(t.nanoseconds))
}

/// Identity, size and modification time of the file at `path` (of the file a symbolic
/// link there leads to).
fn look(path: &str) -> Result<(String, Seen), ErrorCode> {
    look_at(path).map(|(id, seen, _)| (id, seen))
}

/// [`look`], and whether it is a regular file.
fn look_at(path: &str) -> Result<(String, Seen, bool), ErrorCode> {
    following_links(path, |path| {
        in_preopen(path, |dir, relative| {
            let id = hash_hex(dir.metadata_hash_at(PathFlags::SYMLINK_FOLLOW, relative)?);
            let stat = dir.stat_at(PathFlags::SYMLINK_FOLLOW, relative)?;
            Ok((id, Seen { size: stat.size, mtime: mtime_ns(&stat) }, stat.type_ == DescriptorType::RegularFile))
        })
    })
}

/// `f` of `path`, or of where the symbolic link at `path` leads when WASI does not follow
/// it itself: a relative link out of the granted directory that holds it (WASI resolves a
/// path inside one grant). The grants stay the boundary: the target is opened through
/// the grant it is in, if any. (WASI does not read a link to an absolute path at all.)
fn following_links<T>(path: &str, f: impl Fn(&str) -> Result<T, ErrorCode>) -> Result<T, ErrorCode> {
    let mut path = std::borrow::Cow::Borrowed(path);
    for _ in 0..8 {
        match f(&path) {
            Err(refused @ (ErrorCode::NotPermitted | ErrorCode::Access)) => {
                let target = in_preopen(&path, |dir, relative| dir.readlink_at(relative)).map_err(|_| refused)?;
                let parent = path.rsplit_once('/').map_or("", |(parent, _)| parent);
                let joined = if target.starts_with('/') { target } else { format!("{parent}/{target}") };
                path = std::borrow::Cow::Owned(lexically_normal(&joined));
            }
            other => return other,
        }
    }
    Err(ErrorCode::Loop)
}

/// `path` with its `.` and `..` steps resolved by name.
fn lexically_normal(path: &str) -> String {
    let mut steps: Vec<&str> = Vec::new();
    for step in path.split('/') {
        match step {
            "" | "." => {}
            ".." => {
                steps.pop();
            }
            step => steps.push(step),
        }
    }
    format!("/{}", steps.join("/"))
}

/// `name` in the folder `parent`, either of which may be empty (a walk's relative path of
/// the listed directory itself is "").
fn joined(parent: &str, name: &str) -> String {
    match (parent.is_empty(), name.is_empty()) {
        (true, _) => name.to_string(),
        (_, true) => parent.to_string(),
        _ => format!("{parent}/{name}"),
    }
}

fn identity(path: &str) -> Option<String> {
    following_links(path, |path| {
        in_preopen(path, |dir, relative| dir.metadata_hash_at(PathFlags::SYMLINK_FOLLOW, relative))
    })
    .ok()
    .map(hash_hex)
}

/// The entries of the directory at `path`, through WASI directly: unlike `std::fs::ReadDir`,
/// whose stream ends at the first entry it cannot read, it goes on past a name that is not
/// UTF-8.
fn list_dir(path: &str) -> Result<(Descriptor, DirectoryEntryStream), ErrorCode> {
    let dir = in_preopen(path, |dir, relative| {
        dir.open_at(PathFlags::SYMLINK_FOLLOW, relative, OpenFlags::DIRECTORY, DescriptorFlags::READ)
    })?;
    let entries = dir.read_directory()?;
    Ok((dir, entries))
}

fn open(path: &str) -> Result<Descriptor, ErrorCode> {
    following_links(path, |path| {
        in_preopen(path, |dir, relative| {
            dir.open_at(PathFlags::SYMLINK_FOLLOW, relative, OpenFlags::empty(), DescriptorFlags::READ)
        })
    })
}

/// A file read with WASI's positional `read(length, offset)`. Unlike `std::fs::File`,
/// whose WASI input stream stays closed once it reached the end, it sees data appended
/// later, and it keeps reading the same file after a rename (rotation).
struct PositionalFile {
    file: Rc<Descriptor>,
    offset: u64,
    /// The file's first bytes as they were read (up to [`HEAD_BYTES`]), to notice a file
    /// rewritten in place under the reader.
    head: Rc<RefCell<Vec<u8>>>,
    /// Where reading stops (`u64::MAX`: the file's end, wherever it is then). A `.gz` is
    /// read up to its size when it was opened: a deflate decoder that met the end of its
    /// input takes bytes added after it for a corrupt stream.
    end: u64,
}

impl std::io::Read for PositionalFile {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let room = self.end.saturating_sub(self.offset).min(buf.len() as u64);
        if room == 0 {
            return Ok(0);
        }
        let (data, _) = self.file.read(room, self.offset).map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        buf[..data.len()].copy_from_slice(&data);
        let mut head = self.head.borrow_mut();
        if self.offset as usize == head.len() && head.len() < HEAD_BYTES {
            let take = data.len().min(HEAD_BYTES - head.len());
            head.extend_from_slice(&data[..take]);
        }
        self.offset += data.len() as u64;
        Ok(data.len())
    }
}

/// The first `min(len, HEAD_BYTES)` bytes of a file, hashed.
fn head_of(file: &Descriptor, len: u64) -> Option<String> {
    let (bytes, _) = file.read(len.min(HEAD_BYTES as u64), 0).ok()?;
    Some(head_hash(&bytes))
}

/// The offset's `head` of a file read up to `position`: the hash of the first
/// `min(position, HEAD_BYTES)` bytes its reader recorded (`head`; fewer if it has fewer).
fn head_read(head: &[u8], position: u64) -> String {
    head_hash(&head[..head.len().min(position as usize).min(HEAD_BYTES)])
}

/// The first `min(len, HEAD_BYTES)` bytes of a `.gz` file's decompressed stream, hashed
/// (a `.gz`'s head and position count decompressed bytes), or `None` when fewer are there.
fn gz_head_of(file: Descriptor, len: u64) -> Option<String> {
    use std::io::Read;
    let want = len.min(HEAD_BYTES as u64);
    let source = PositionalFile { file: Rc::new(file), offset: 0, head: Rc::default(), end: u64::MAX };
    let mut bytes = Vec::new();
    flate2::read::MultiGzDecoder::new(source).take(want).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 == want).then(|| head_hash(&bytes))
}

fn error_text(e: ErrorCode) -> String {
    match e {
        ErrorCode::NoEntry => "no such file".into(),
        // EACCES: the file's mode or owner; EPERM: outside what the sandbox was granted.
        ErrorCode::Access => "permission denied (the worker's user may not read it)".into(),
        ErrorCode::NotPermitted => "not permitted (is its directory granted?)".into(),
        other => format!("{other:?}"),
    }
}

/// An I/O error of the standard library as words: its kind where it came from the system
/// (whose number is WASI's, not the host's, and would mislead), its own text otherwise.
fn io_text(e: &std::io::Error) -> String {
    if e.raw_os_error().is_some() { e.kind().to_string() } else { e.to_string() }
}

// ---------------------------------------------------------------- connector

/// What the log named once and should not repeat at every listing while it lasts (a link
/// that cannot be followed, a folder that cannot be listed, a cleanup that failed), each
/// with the listing pass that last saw it: forgotten after a whole pass without it, and
/// named again if it comes back.
#[derive(Default)]
struct SaidOnce(HashMap<String, u64>);

impl SaidOnce {
    /// Notes `key` as seen in `pass`; true the first time, when it is to be said.
    fn first(&mut self, key: &str, pass: u64) -> bool {
        self.0.insert(key.to_string(), pass).is_none()
    }

    fn forget_unseen_since(&mut self, pass: u64) {
        self.0.retain(|_, seen| *seen >= pass);
    }
}

/// What the connector knows of a file it has seen.
#[derive(Debug, Clone)]
struct Known {
    path: String,
    version: u32,
    attempt: u32,
    state: KnownState,
    /// The listing pass that last saw it.
    pass: u64,
}

/// A file a walk lists for a decision: its identity, the name it is listed under, its size
/// and time, and its [`ConnectorState::missing`] entry if it was being searched for.
type Listed = (String, String, Seen, Option<(String, u64)>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KnownState {
    /// Waiting for room in a task.
    Pending,
    /// In a task's config, being read.
    Assigned,
    /// Done, as it looked then.
    Finished { seen: Seen },
    /// Could not be read; `parked` when moving it to the failure path did not work, so it
    /// is not retried until it changes.
    Failed { seen: Seen, parked: bool },
}

/// A file a task follows, as `take_turns` sees it.
#[derive(Clone, Copy)]
struct Followed {
    /// Its last committed (position, size, mtime).
    mark: Option<(u64, u64, u64)>,
    /// Since when that has not changed.
    quiet_since: u64,
    /// Since when its task holds it.
    held_since: u64,
}

/// A walk over the listed directory, a slice per tick.
struct Walk {
    pass: u64,
    /// Directories still to list, relative to the listed one.
    dirs: Vec<String>,
    /// The directory being listed: its path, its descriptor and its entries.
    current: Option<(String, Descriptor, DirectoryEntryStream)>,
    undecodable: u64,
}

/// Most files held by all tasks at once (each task gets an equal share, at least
/// [`MIN_WINDOW`]): bounds task configs, the connector's offset reads per tick and the
/// tasks' memory, whatever the size of the directory.
const MAX_IN_FLIGHT: usize = 1024;
const MIN_WINDOW: usize = 16;
/// Tail mode, with every task's window full and files waiting: how long a followed file
/// must show no committed progress before it gives its place to a waiting one (see
/// `ConnectorState::take_turns`).
const TAIL_TURN_MS: u64 = 5_000;
/// Work per tick on the directory walk; the rest waits for the next tick.
const WALK_BUDGET: Duration = Duration::from_millis(40);
/// Files whose offsets are read in one `offsets` call.
const LOOKUP_BATCH: usize = 512;

#[derive(Default)]
struct ConnectorState {
    config: std::collections::BTreeMap<String, String>,
    settings: Option<Rc<Settings>>,
    known: HashMap<String, Known>,
    pending: VecDeque<Assigned>,
    assignment: Assignment,
    generations: Vec<u64>,
    /// Per task: a hash of its open files' offsets, and when it last changed.
    progress: Vec<(u64, u64)>,
    /// Per task: since when it has been held back from new files (see `held_tasks`).
    held_since: Vec<Option<u64>>,
    walk: Option<Walk>,
    passes: u64,
    last_pass_ms: u64,
    max_tasks: usize,
    /// The listed directory's own paths that a recursive walk must not enter.
    excluded: BTreeSet<String>,
    /// The identities of the success and failure folders (under `move`), looked at when a
    /// walk starts: a folder of the listing that is one of them, named through a link, is
    /// not entered either (its files were moved one folder deeper at every listing).
    excluded_ids: Vec<String>,
    /// Files cleaned up since the last tick's summary line: finished ones, and failed
    /// ones moved to the failure path.
    cleaned: u64,
    cleaned_failed: u64,
    /// How many undecodable names the log last reported (it warns again only when the
    /// number changes).
    undecodable_reported: u64,
    /// Symbolic links the log said it cannot follow.
    unfollowed_links: SaidOnce,
    /// Whether the log said that a name the filter is only found in is not streamed.
    partial_filter_said: bool,
    /// Folders of a recursive walk the log said it cannot list.
    unlistable: SaidOnce,
    /// Files whose cleanup the log said failed (it is tried again at every listing).
    failed_cleanups: SaidOnce,
    /// Each file a task follows: its last committed (position, size, mtime), since when
    /// it has been that, and since when its task has held it (see `take_turns`).
    followed: HashMap<String, Followed>,
    /// When followed files last took turns with waiting ones.
    last_turn_ms: u64,
    /// Whether the log said that tail files take turns (said again once none waits).
    turns_said: bool,
    /// Files a task could not open though they were where they were listed (their mode or
    /// owner does not let the worker read them), by identity: the name they were last
    /// seen under, and the pass that last saw them. Not handed out again until they open;
    /// walks look for them under every name, as for [`ConnectorState::missing`].
    unreadable: HashMap<String, (String, u64)>,
    /// Files whose modification time the log said is in the future (each named once).
    future_reported: BTreeSet<String>,
    /// Unfinished files a task did not find at their listed path (a log rotated before its
    /// task opened it), by identity: the name they were listed under, and the pass that
    /// started after they went missing. Until found, walks also look at the names the
    /// filter leaves out (`app.log.1` beside `.*[.]log$`), so the rest of such a file is
    /// read under its new name; one no walk finds is said to be gone.
    missing: HashMap<String, (String, u64)>,
    /// Logs finished in tail mode that a pass no longer listed (renamed to a name the
    /// filter leaves out, `app.log` to `app.log.1`, say), by identity: the name they were
    /// finished under, and until when (ms) walks look for them under every name. Their
    /// writer may still add a few lines before it reopens its log; found grown, they are
    /// read on. Not found by then, they are forgotten, as any finished file no longer here.
    rotated_away: HashMap<String, (String, u64)>,
}

impl ConnectorState {
    fn settings(&self) -> Rc<Settings> {
        Rc::clone(self.settings.as_ref().expect("started"))
    }

    /// Whether a task's entry is a file it has to read: assigned, and the version and
    /// attempt the connector handed out last. (A finished file that grew may be handed to
    /// another task; the entry of the task that read it before stays in that task's list
    /// until its list changes, and must not count, nor be read.)
    fn is_open(&self, entry: &Assigned) -> bool {
        is_current(&self.known, entry)
    }

    /// Whether walks look for a log finished in tail mode that is no longer listed.
    fn looking_for_rotated_away(&self) -> bool {
        !self.rotated_away.is_empty() && {
            let now = now_ms();
            self.rotated_away.values().any(|(_, until)| *until > now)
        }
    }

    /// A file the walk found but cannot decide now (its name led to another file by the
    /// time it was looked at again): the next pass decides it, searching on if it was
    /// searched for.
    fn decide_later(&mut self, id: String, was_missing: Option<(String, u64)>) {
        if let Some(was_missing) = was_missing {
            self.missing.insert(id, was_missing);
        }
    }

    /// The listing pass under way, or the next one between passes: the pass that must see
    /// what is noted now for it to be kept.
    fn pass_now_or_next(&self) -> u64 {
        self.walk.as_ref().map_or(self.passes + 1, |w| w.pass)
    }

    fn window(&self) -> usize {
        (MAX_IN_FLIGHT / self.max_tasks.max(1)).max(MIN_WINDOW)
    }

    fn absolute(&self, relative: &str) -> String {
        format!("{}/{relative}", self.settings().directory)
    }

    /// The next file of the walk (a relative path, whether it is a symbolic link, and
    /// whether the filter lists it), `None` when the pass is over. Names the filter leaves
    /// out come only while a file is [`ConnectorState::missing`].
    fn next_listed(&mut self) -> Option<(String, bool, bool)> {
        let settings = self.settings();
        let searching = !self.missing.is_empty() || !self.unreadable.is_empty() || self.looking_for_rotated_away();
        let walk = self.walk.as_mut()?;
        loop {
            let Some((dir, _, entries)) = &walk.current else {
                let dir = walk.dirs.pop()?;
                let absolute = joined(&settings.directory, &dir);
                match list_dir(&absolute) {
                    Ok((descriptor, entries)) => walk.current = Some((dir, descriptor, entries)),
                    Err(e) => {
                        if self.unlistable.first(&absolute, walk.pass) {
                            log::warn(&format!("cannot list {}: {}", printable(&absolute), error_text(e)));
                        }
                    }
                }
                continue;
            };
            let entry = match entries.read_directory_entry() {
                Ok(Some(entry)) => entry,
                Ok(None) => {
                    walk.current = None;
                    continue;
                }
                Err(ErrorCode::IllegalByteSequence) => {
                    // WASI passes only UTF-8 names: this entry cannot even be named here.
                    walk.undecodable += 1;
                    continue;
                }
                Err(e) => {
                    let listed = joined(&settings.directory, dir);
                    log::warn(&format!("listing {}: {}", printable(&listed), error_text(e)));
                    continue;
                }
            };
            let name = entry.name;
            // Hidden files are usually being written (editors, uploaders).
            if name.starts_with('.') {
                let file_or_link = matches!(entry.type_, DescriptorType::RegularFile | DescriptorType::SymbolicLink);
                if let Some(original) = claimed_from(&name).filter(|_| file_or_link) {
                    // Held by a cleanup that a crash cut short: given its name back (or a
                    // numbered one), and the next pass decides what it is.
                    let at = |name: &str| joined(&joined(&settings.directory, dir), name);
                    let held = at(&name);
                    match give_back(&held, &at(original)) {
                        Ok(named) => {
                            log::info(&format!("{} given back its name after a cleanup cut short", printable(&named)))
                        }
                        Err(e) if self.failed_cleanups.first(&held, walk.pass) => {
                            log::warn(&format!("cannot give {} back its name: {}", printable(&held), io_text(&e)))
                        }
                        Err(_) => {}
                    }
                }
                continue;
            }
            let relative = joined(dir, &name);
            if !self.partial_filter_said
                && matches!(entry.type_, DescriptorType::RegularFile | DescriptorType::SymbolicLink)
                && !settings.filter.is_match(&name)
                && let Some(found_in) = settings.filter_found_in.as_ref().filter(|f| f.is_match(&name))
            {
                // Said once: a pattern written for a search (`\.log$`) takes nothing now.
                self.partial_filter_said = true;
                log::warn(&format!(
                    "{} is not streamed: file.filter.regex.pattern must match a whole file name, as in FilePulse, and '{}' is only found in it (write '.*{}' to take such names)",
                    printable(&relative),
                    found_in.as_str(),
                    found_in.as_str().trim_start_matches('^')
                ));
            }
            match entry.type_ {
                DescriptorType::Directory
                    if settings.recursive
                        && !self.excluded.contains(&relative)
                        && (self.excluded_ids.is_empty()
                            || identity(&format!("{}/{relative}", settings.directory))
                                .is_none_or(|id| !self.excluded_ids.contains(&id))) =>
                {
                    walk.dirs.push(relative);
                }
                DescriptorType::RegularFile if settings.filter.is_match(&name) => return Some((relative, false, true)),
                DescriptorType::RegularFile if searching => return Some((relative, false, false)),
                // Read as the file it leads to, as Connect's file sources read one; a link
                // to a directory is not walked, so no walk loops.
                DescriptorType::SymbolicLink if settings.filter.is_match(&name) => return Some((relative, true, true)),
                _ => {}
            }
        }
    }

    /// Walks on for at most [`WALK_BUDGET`], deciding what each new or changed file is.
    fn walk_step(&mut self) {
        let deadline = Instant::now() + WALK_BUDGET;
        let mut batch: Vec<Listed> = Vec::new();
        // The files of `batch` by identity, to the name each was listed under.
        let mut batched: HashMap<String, String> = HashMap::new();
        let mut over = false;
        while Instant::now() < deadline {
            let Some((relative, link, listed)) = self.next_listed() else {
                over = true;
                break;
            };
            let (id, seen) = match look_at(&self.absolute(&relative)) {
                Ok((id, seen, true)) => (id, seen),
                Ok((_, _, false)) => continue, // a link to a directory, or to a device
                Err(e) if link => {
                    let pass = self.walk.as_ref().map_or(0, |w| w.pass);
                    if self.unfollowed_links.first(&relative, pass) {
                        log::warn(&format!(
                            "{}: a symbolic link that cannot be followed ({}): it leads nowhere, or outside the granted directories",
                            printable(&relative),
                            error_text(e)
                        ));
                    }
                    continue;
                }
                Err(_) => continue, // gone meanwhile
            };
            let unreadable = self.unreadable.contains_key(&id);
            let was_missing = self.missing.remove(&id);
            let rotated_away = || self.rotated_away.get(&id).is_some_and(|(_, until)| *until > now_ms());
            if was_missing.is_none() && !listed && !unreadable && !rotated_away() {
                continue;
            }
            let pass = self.walk.as_ref().map_or(0, |w| w.pass);
            if unreadable {
                if matches!(open(&self.absolute(&relative)), Err(ErrorCode::Access)) {
                    self.unreadable.insert(id, (relative, pass));
                    continue;
                }
                // Readable now, under this name: decided from its offset (read on).
                self.unreadable.remove(&id);
            }
            // Two names of one file (hard links, or a symbolic link and its file) listed
            // together: one file, read once, under the first name.
            if let Some(first) = batched.get(&id) {
                log::info(&format!(
                    "{} is the same file as {}: reading it once, as {}",
                    printable(&relative),
                    printable(first),
                    printable(first)
                ));
                continue;
            }
            // Another name of a file known under a name that still leads to it: the file
            // keeps its name (its records' key, what its task opens and what its cleanup
            // acts on) until that name is gone.
            if let Some(known) = self.known.get(&id)
                && known.path != relative
                && (known.pass == pass || identity(&self.absolute(&known.path)).as_deref() == Some(id.as_str()))
            {
                continue;
            }
            let (cleanup, tailing) = (self.settings().cleanup, self.settings().completion == Completion::Tail);
            let recheck = match self.known.get_mut(&id) {
                None => true,
                Some(known) => {
                    known.pass = pass;
                    let renamed = known.path != relative;
                    known.path.clone_from(&relative);
                    match known.state {
                        KnownState::Pending | KnownState::Assigned => false,
                        // A log finished idle, then rotated: it may still hold back an
                        // unfinished last line, which no newline will complete now.
                        KnownState::Finished { seen: then } if then == seen && renamed && tailing => true,
                        // Finished, but still here: its cleanup did not happen yet, or a new
                        // file took its inode with the same size and time (`tar -x` keeps
                        // times). Decided again from its offset, whose head tells the two
                        // apart, before anything is deleted or moved.
                        KnownState::Finished { seen: then } if then == seen => cleanup != Cleanup::None,
                        KnownState::Finished { .. } => true,
                        KnownState::Failed { seen: then, parked } => {
                            then != seen || (cleanup == Cleanup::Move && !parked)
                        }
                    }
                }
            };
            // Its identity and its size and time are two lookups by name: a rename between
            // them (names shifted by a log rotation) pairs one file's identity with
            // another's size, which looked like a finished file that changed and read it
            // again. Decided only when the name still leads to it, else at the next pass.
            if recheck && identity(&self.absolute(&relative)).as_deref() != Some(id.as_str()) {
                self.decide_later(id, was_missing);
                continue;
            }
            if recheck {
                batched.insert(id.clone(), relative.clone());
                batch.push((id, relative, seen, was_missing));
                if batch.len() >= LOOKUP_BATCH {
                    self.decide_all(std::mem::take(&mut batch));
                    batched.clear();
                }
            }
        }
        self.decide_all(batch);
        if over {
            self.end_pass();
        }
    }

    fn end_pass(&mut self) {
        let Some(walk) = self.walk.take() else { return };
        if walk.undecodable > 0 && walk.undecodable != self.undecodable_reported {
            self.undecodable_reported = walk.undecodable;
            log::warn(&format!(
                "skipped {} file name(s) in {} that are not valid UTF-8 (WASI passes only UTF-8 names to plugins): rename them to stream them",
                walk.undecodable,
                printable(&self.settings().directory)
            ));
        }
        // Finished or failed files no longer listed are forgotten: the connector's memory
        // and its ticks follow what is in the directory, not everything ever read. A log
        // finished in tail mode is looked for a while first (rotated while quiet).
        let settings = self.settings();
        let (now, tailing) = (now_ms(), settings.completion == Completion::Tail && settings.cleanup == Cleanup::None);
        let search_until = now + settings.rotation_grace_ms.max(settings.listing_interval_ms * 2);
        let rotated_away = &mut self.rotated_away;
        self.known.retain(|id, k| {
            let kept = k.pass >= walk.pass || matches!(k.state, KnownState::Assigned | KnownState::Pending);
            if !kept && tailing && matches!(k.state, KnownState::Finished { .. }) {
                rotated_away.entry(id.clone()).or_insert_with(|| (k.path.clone(), search_until));
            }
            kept
        });
        // Past its time, an entry stays while the file is known (found under a name the
        // filter leaves out, it is listed only while walks look), so that forgetting it
        // does not start another search.
        let known = &self.known;
        self.rotated_away.retain(|id, (_, until)| *until > now || known.contains_key(id));
        self.unfollowed_links.forget_unseen_since(walk.pass);
        self.unlistable.forget_unseen_since(walk.pass);
        self.failed_cleanups.forget_unseen_since(walk.pass);
        // A whole pass did not find it under any name: removed, or moved out of the
        // directory, before its task could read on. Said, as what it still held is lost.
        let directory = printable(&self.settings().directory);
        self.unreadable.retain(|_, (path, seen)| {
            if *seen >= walk.pass {
                return true;
            }
            log::warn(&format!(
                "{}: it could not be read, and no file in {directory} is it any more (removed, or moved out): \
                 what it held past its committed offset is not read",
                printable(path),
            ));
            false
        });
        self.missing.retain(|_, (path, since)| {
            if *since > walk.pass {
                return true;
            }
            log::warn(&format!(
                "{}: its task did not find it at its listed path, and no file in {directory} is it any more \
                 (removed, or moved out, before it was read to its end): what it held past its committed offset is not read",
                printable(path),
            ));
            false
        });
    }

    /// Whether a file modified at `seen.mtime` is younger than `file.filter.minimum.age.ms`.
    /// A time in the future (a clock ahead, an archive's times) waits for the clock to pass
    /// it, and is said once per file.
    fn too_young(&mut self, relative: &str, seen: Seen) -> bool {
        let minimum_age_ms = self.settings().minimum_age_ms;
        if minimum_age_ms == 0 {
            return false;
        }
        let (now, modified) = (now_ms(), seen.mtime / 1_000_000);
        if modified > now + 1000 && self.future_reported.insert(relative.to_string()) {
            log::warn(&format!(
                "{}: modified {} s in the future (a clock ahead?): it waits for file.filter.minimum.age.ms after that time",
                printable(relative),
                (modified - now) / 1000
            ));
        }
        modified_within(seen, minimum_age_ms)
    }

    /// Reads the committed offsets of `batch` in one call and decides each file.
    fn decide_all(&mut self, batch: Vec<Listed>) {
        if batch.is_empty() {
            return;
        }
        let settings = self.settings();
        let partitions: Vec<String> = batch.iter().map(|(id, _, _, _)| partition(id)).collect();
        let offsets = committed(&partitions);
        let pass = self.walk.as_ref().map_or(self.passes, |w| w.pass);
        for ((id, relative, seen, was_missing), offset) in batch.into_iter().zip(offsets) {
            let path = self.absolute(&relative);
            let compressed = relative.ends_with(".gz");
            // Another file under the name by the time its head is read: decided at the next
            // pass, not from that file's first bytes.
            let renamed_meanwhile = std::cell::Cell::new(false);
            let head_unchanged = |offset: &FileOffset| {
                let Some(expected) = &offset.head else { return false };
                let Ok(file) = open(&path) else { return false };
                if file.metadata_hash().map(hash_hex).ok().as_deref() != Some(id.as_str()) {
                    renamed_meanwhile.set(true);
                    return false;
                }
                let now = if compressed { gz_head_of(file, offset.position) } else { head_of(&file, offset.position) };
                now.as_ref() == Some(expected)
            };
            let decision =
                decide(offset.as_ref(), seen, &relative, settings.completion, settings.cleanup, head_unchanged);
            if renamed_meanwhile.get() {
                self.decide_later(id, was_missing);
                continue;
            }
            // A file to read from its start, modified too recently (still being copied in,
            // say): left for a later listing. One being read on is not held back. A failed
            // file found shorter than what was sent is most likely being fixed in place
            // (`cat fixed > file` truncates it first): it waits until it has stopped
            // changing, so that the fix, which starts with the lines sent, is read on from
            // where they stopped rather than taken for a new file and sent again.
            let fixing = offset.as_ref().is_some_and(|o| o.done && o.end == End::Failed);
            let settling = fixing && modified_within(seen, FIXED_IN_PLACE_SETTLE_MS);
            let waits = match decision {
                Decision::Start { .. } => self.too_young(&relative, seen) || settling,
                // A fix already longer than what was sent may still be being written: read
                // on once it has stopped changing, not up to the middle of the write.
                Decision::ReadOn { .. } => settling,
                _ => false,
            };
            if waits {
                continue;
            }
            let (version, attempt) = offset.as_ref().map_or((0, 0), |o| (o.version, o.attempt));
            let (version, attempt, state) = match decision {
                Decision::Start { version, reason } => {
                    if let Some(reason) = reason {
                        log::info(&format!(
                            "{}: {reason}: reading it from the start (version {version})",
                            printable(&relative)
                        ));
                    }
                    (version, 0, KnownState::Pending)
                }
                Decision::Continue => (version, attempt, KnownState::Pending),
                Decision::ReadOn { attempt, reason } => {
                    log::info(&format!(
                        "{}: {reason}: reading on from its offset (attempt {attempt})",
                        printable(&relative)
                    ));
                    (version, attempt, KnownState::Pending)
                }
                Decision::Finished => {
                    let offset = offset.expect("finished files have an offset");
                    self.clean_up(&id, &relative, &offset);
                    (version, attempt, KnownState::Finished { seen })
                }
                Decision::Failed => (version, attempt, KnownState::Failed { seen, parked: true }),
            };
            if state == KnownState::Pending {
                self.pending.push_back(Assigned { id: id.clone(), path: relative.clone(), version, attempt });
            }
            self.known.insert(id, Known { path: relative, version, attempt, state, pass });
        }
    }

    /// Applies the cleanup policy to a finished (or failed) file, if it is still the file
    /// at `relative`. Returns false when a move to the failure path did not work.
    fn clean_up(&mut self, id: &str, relative: &str, offset: &FileOffset) -> bool {
        let settings = self.settings();
        let source = self.absolute(relative);
        // The listed entry itself (a symbolic link is one of its own), the file it is, and
        // the entry again: the two looks were of the same entry.
        let Ok((entry, _)) = look_entry(&source) else { return true };
        let Ok((found, seen)) = look(&source) else { return true };
        if found != id || look_entry(&source).map(|(again, _)| again).as_ref() != Ok(&entry) {
            return true; // gone, or another file under that name: the walk finds it wherever it is
        }
        // Written to since it was read to its end (a writer that paused longer than the
        // task waited): deleting or moving it now would lose what was added. The next
        // listing sees the change and decides what it is.
        let recorded = offset.size != 0 || offset.mtime != 0;
        if recorded && seen != (Seen { size: offset.size, mtime: offset.mtime }) {
            log::debug(&format!("{} changed after it was read: not cleaned up", printable(relative)));
            return true;
        }
        let failed = offset.end == End::Failed;
        // What it must still be when it is removed from its name: a file renamed over it
        // since the look above is a new one, which is read, not deleted or archived.
        let read = WasRead { id, entry, seen: recorded.then_some(seen) };
        let result = match (settings.cleanup, failed) {
            (Cleanup::None, _) => return true,
            // A file that could not be read is kept for a person to look at.
            (Cleanup::Delete, true) => return true,
            (Cleanup::Delete, false) => remove_if_still(&source, &read)
                .map(|removed| removed.then(|| format!("deleted {}", printable(relative)))),
            (Cleanup::Move, failed) => {
                let root = if failed { &settings.move_failure } else { &settings.move_success };
                move_without_overwriting(&source, root, relative, &read).map(|target| {
                    target.map(|target| format!("moved {} to {}", printable(relative), printable(&target)))
                })
            }
        };
        match result {
            Ok(None) => {
                log::debug(&format!("{} was replaced before its cleanup: the new file is read", printable(relative)));
                true
            }
            Ok(Some(done)) => {
                log::debug(&done);
                if failed {
                    self.cleaned_failed += 1;
                } else {
                    self.cleaned += 1;
                }
                true
            }
            // A large file on its way to another file system: it goes on at the next cleanup.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                log::info(&format!("{}: {e}", printable(relative)));
                false
            }
            Err(e) => {
                let pass = self.pass_now_or_next();
                if self.failed_cleanups.first(relative, pass) {
                    log::warn(&format!("cleanup of {} failed: {}", printable(relative), io_text(&e)));
                }
                false
            }
        }
    }

    /// Reads the committed offsets of every file the tasks hold; finished ones are
    /// cleaned up and leave their task's count.
    fn watch(&mut self) -> Vec<Option<FileOffset>> {
        let open: Vec<(String, String)> = self
            .assignment
            .tasks
            .iter()
            .flatten()
            .filter(|f| self.is_open(f))
            .map(|f| (f.id.clone(), partition(&f.id)))
            .collect();
        let partitions: Vec<String> = open.iter().map(|(_, p)| p.clone()).collect();
        let offsets = committed(&partitions);
        let mut by_id: HashMap<String, Option<FileOffset>> = HashMap::new();
        for ((id, _), offset) in open.into_iter().zip(offsets) {
            let Some(known) = self.known.get(&id).cloned() else { continue };
            let current = offset
                .filter(|o| o.version > known.version || (o.version == known.version && o.attempt >= known.attempt));
            if let Some(offset) = current.as_ref().filter(|o| o.done) {
                let seen = Seen { size: offset.size, mtime: offset.mtime };
                let relative = known.path.clone();
                let state = match offset.end {
                    End::Failed => {
                        log::warn(&format!(
                            "{} failed: {}",
                            printable(&relative),
                            offset.failed.as_deref().unwrap_or("unknown reason")
                        ));
                        let moved = self.clean_up(&id, &relative, offset);
                        Some(KnownState::Failed { seen, parked: !moved })
                    }
                    End::Missing => None,
                    _ => {
                        self.clean_up(&id, &relative, offset);
                        Some(KnownState::Finished { seen })
                    }
                };
                match state {
                    Some(state) => {
                        let known = self.known.get_mut(&id).expect("known");
                        known.state = state;
                        known.version = offset.version;
                    }
                    None => {
                        self.known.remove(&id);
                        let absolute = self.absolute(&relative);
                        if identity(&absolute).as_deref() == Some(id.as_str())
                            && matches!(self::open(&absolute), Err(ErrorCode::Access))
                        {
                            // Where it was listed, but its task could not open it (its mode or
                            // owner): it waits there, tried at each listing, rather than be
                            // searched for and handed out again at every one.
                            let pass = self.pass_now_or_next();
                            self.unreadable.insert(id.clone(), (relative, pass));
                        } else {
                            // Not where it was listed: the next walk finds it wherever it is now.
                            self.missing.insert(id.clone(), (relative, self.passes + 1));
                        }
                    }
                }
            }
            by_id.insert(id, current);
        }
        self.assignment.tasks.iter().flatten().map(|f| by_id.get(&f.id).cloned().flatten()).collect()
    }

    /// A task whose open files showed no committed progress for the stall timeout, and
    /// that has not read everything there is, is restarted alone (a new generation).
    fn stalled(&mut self, now: u64, offsets: &[Option<FileOffset>]) -> BTreeSet<usize> {
        let settings = self.settings();
        let mut offsets = offsets.iter();
        let tasks: Vec<Vec<(String, String, Option<FileOffset>)>> = self
            .assignment
            .tasks
            .iter()
            .map(|files| {
                files
                    .iter()
                    .zip(offsets.by_ref())
                    .filter(|(file, _)| self.is_open(file))
                    .map(|(file, offset)| {
                        let path = self.known.get(&file.id).map_or(&file.path, |k| &k.path);
                        (file.id.clone(), path.clone(), offset.clone())
                    })
                    .collect()
            })
            .collect();
        let mut restart = BTreeSet::new();
        for (task, open) in tasks.iter().enumerate() {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            for (_, path, offset) in open {
                (path, offset.as_ref().map(FileOffset::to_json)).hash(&mut hasher);
            }
            let snapshot = hasher.finish();
            let (last, since) = self.progress[task];
            if open.is_empty() || last != snapshot {
                self.progress[task] = (snapshot, now);
                continue;
            }
            if now.saturating_sub(since) < settings.stall_timeout_ms {
                continue;
            }
            // Waiting for data is not a stall: a file whose every byte the task has seen
            // (sent, or held back as an unfinished last line) is caught up.
            let (mut behind, mut displaced) = (Vec::new(), Vec::new());
            for (id, path, offset) in open {
                match look(&self.absolute(path)) {
                    Ok((found, seen)) if found == *id => {
                        if path.ends_with(".gz") || offset.as_ref().is_none_or(|o| o.size < seen.size) {
                            behind.push(printable(path));
                        }
                    }
                    // No longer at its path (removed, or the name is another file's): only
                    // the task's open reader has it.
                    _ => displaced.push(printable(path)),
                }
            }
            self.progress[task].1 = now;
            if behind.is_empty() && displaced.is_empty() {
                continue;
            }
            if !displaced.is_empty() {
                // A restart would reopen it by its path and lose the rest (see
                // `held_tasks`); no progress is most often a destination that does not
                // take records (a broker away), after which the task goes on by itself.
                log::warn(&format!(
                    "task {task} made no progress for {} ms, but is not restarted: it holds {}, no longer at its path, whose rest a restart would lose",
                    now - since,
                    displaced.join(", ")
                ));
                continue;
            }
            log::warn(&format!(
                "task {task} made no progress on {} for {} ms: restarting it",
                behind.join(", "),
                now - since
            ));
            self.generations[task] += 1;
            restart.insert(task);
        }
        restart
    }

    /// The tasks that must not be restarted now: each holds an unfinished file that is no
    /// longer at the path the walk last saw it under (removed, or its name now another
    /// file's, as when the same name is dropped again while it is read). The task reads it
    /// on through the descriptor it has open; a restart would reopen it by path and lose
    /// the rest. They get new files once that file is done, or once they have been held
    /// for the stall timeout (a writer that goes on appending to a log renamed out of the
    /// listing keeps its task busy for as long as it writes): past that, the files waiting
    /// come first. Nothing is held while no file waits.
    fn held_tasks(&mut self) -> Vec<bool> {
        let displaced: Vec<bool> = if self.pending.is_empty() {
            Vec::new()
        } else {
            self.assignment
                .tasks
                .iter()
                .map(|files| {
                    files.iter().filter(|f| self.is_open(f)).any(|f| {
                        let path = self.known.get(&f.id).map_or(&f.path, |k| &k.path);
                        identity(&self.absolute(path)).as_deref() != Some(f.id.as_str())
                    })
                })
                .collect()
        };
        let (now, limit) = (now_ms(), self.settings().stall_timeout_ms);
        self.held_since.resize(displaced.len(), None);
        displaced
            .into_iter()
            .zip(self.held_since.iter_mut())
            .enumerate()
            .map(|(task, (displaced, since))| {
                if !displaced {
                    *since = None;
                    return false;
                }
                let since = *since.get_or_insert(now);
                if now.saturating_sub(since) < limit {
                    return true;
                }
                log::warn(&format!(
                    "task {task} has read a file that is no longer at its path for {} ms while new files wait: \
                     restarting it with them (what it has not read of that file yet is lost)",
                    now - since
                ));
                false
            })
            .collect()
    }

    /// Tail mode never finishes a file that keeps growing, so once every task's window is
    /// full the files past it would wait for good (a directory of more logs than
    /// `MAX_IN_FLIGHT`). So followed files take turns: while files wait and no task has
    /// room, at most once every [`TAIL_TURN_MS`], as many followed files as wait leave
    /// their tasks' lists (unfinished: their committed offsets stay) for the back of the
    /// queue, and the waiting files take their places. A file that leaves is read on from
    /// its offset when its turn comes again, as after any task restart. Those that leave are
    /// the ones quiet longest (no committed progress: read to their end) among those
    /// followed for at least a turn, and never files of a task holding a file no longer at
    /// its listed path (a restart would lose the rest of that one).
    ///
    /// Returns the tasks whose lists changed and the files that left them, which join the
    /// queue only after this tick's assignment: a file handed to another task in the same
    /// reconfiguration could be read there before its old task has committed and stopped.
    fn take_turns(&mut self, now: u64, offsets: &[Option<FileOffset>]) -> (BTreeSet<usize>, Vec<Assigned>) {
        if self.settings().completion != Completion::Tail {
            return Default::default();
        }
        let mut followed = HashMap::new();
        let mut candidates: Vec<(usize, String, u64)> = Vec::new();
        let mut offsets = offsets.iter();
        for (task, files) in self.assignment.tasks.iter().enumerate() {
            for (file, offset) in files.iter().zip(offsets.by_ref()) {
                if !self.is_open(file) {
                    continue;
                }
                let mark = offset.as_ref().map(|o| (o.position, o.size, o.mtime));
                let entry = match self.followed.get(&file.id) {
                    Some(last) if last.mark == mark => *last,
                    Some(last) => Followed { mark, quiet_since: now, held_since: last.held_since },
                    None => Followed { mark, quiet_since: now, held_since: now },
                };
                followed.insert(file.id.clone(), entry);
                if now.saturating_sub(entry.held_since) >= TAIL_TURN_MS {
                    candidates.push((task, file.id.clone(), entry.quiet_since));
                }
            }
        }
        self.followed = followed;
        if self.pending.is_empty() {
            self.turns_said = false;
            return Default::default();
        }
        let window = self.window();
        let full = self.assignment.tasks.len() >= self.max_tasks.max(1)
            && self.assignment.tasks.iter().all(|files| files.iter().filter(|f| self.is_open(f)).count() >= window);
        if !full || now.saturating_sub(self.last_turn_ms) < TAIL_TURN_MS {
            return Default::default();
        }
        if !self.turns_said {
            self.turns_said = true;
            log::info(&format!(
                "{} file(s) wait for a place: at most {} files are followed at once ({} per task), so followed files \
                 take turns with waiting ones every {} s, the longest quiet first, each read on from its offset \
                 when its turn comes",
                self.pending.len(),
                window * self.assignment.tasks.len(),
                window,
                TAIL_TURN_MS / 1000
            ));
        }
        let displaced: Vec<bool> = (0..self.assignment.tasks.len())
            .map(|task| {
                self.assignment.tasks[task].iter().filter(|f| self.is_open(f)).any(|f| {
                    let path = self.known.get(&f.id).map_or(&f.path, |k| &k.path);
                    identity(&self.absolute(path)).as_deref() != Some(f.id.as_str())
                })
            })
            .collect();
        candidates.retain(|(task, _, _)| !displaced[*task]);
        candidates.sort_by_key(|(_, _, quiet)| *quiet);
        candidates.truncate(self.pending.len());
        if candidates.is_empty() {
            return Default::default();
        }
        self.last_turn_ms = now;
        let (mut changed, mut leaving) = (BTreeSet::new(), Vec::new());
        for (task, id, _) in candidates {
            self.assignment.tasks[task].retain(|f| f.id != id);
            changed.insert(task);
            self.followed.remove(&id);
            let Some(known) = self.known.get_mut(&id) else { continue };
            known.state = KnownState::Pending;
            let (path, version, attempt) = (known.path.clone(), known.version, known.attempt);
            leaving.push(Assigned { id, path, version, attempt });
        }
        (changed, leaving)
    }

    fn assign(&mut self) -> BTreeSet<usize> {
        let window = self.window();
        let held = self.held_tasks();
        let mut pending = std::mem::take(&mut self.pending);
        let known = &self.known;
        let open = |entry: &Assigned| is_current(known, entry);
        let held = |task: usize| held.get(task).copied().unwrap_or(false);
        let mut changed = self.assignment.add(&mut pending, open, held, self.max_tasks, window);
        for task in &changed {
            for file in &mut self.assignment.tasks[*task] {
                if let Some(known) = self.known.get_mut(&file.id) {
                    if known.state == KnownState::Pending {
                        known.state = KnownState::Assigned;
                    }
                    // Its config changes anyway: where the walk last saw each file (a
                    // rotated log under its new name).
                    file.path.clone_from(&known.path);
                }
            }
        }
        self.pending = pending;
        let before = self.assignment.tasks.len();
        let known = &self.known;
        if self.assignment.drop_idle_tail(|entry| is_current(known, entry)) {
            changed.insert(before);
        }
        let tasks = self.assignment.tasks.len();
        self.generations.resize(tasks, 0);
        self.progress.resize(tasks, (0, now_ms()));
        changed
    }
}

/// See [`ConnectorState::is_open`].
fn is_current(known: &HashMap<String, Known>, entry: &Assigned) -> bool {
    known
        .get(&entry.id)
        .is_some_and(|k| k.state == KnownState::Assigned && k.version == entry.version && k.attempt == entry.attempt)
}

/// The file a cleanup is for, as it was read: its identity, the identity of the entry it
/// was listed as (itself, or a symbolic link to it) and, where its offset recorded them,
/// its size and modification time.
struct WasRead<'a> {
    id: &'a str,
    entry: String,
    seen: Option<Seen>,
}

impl WasRead<'_> {
    /// Whether the entry at `path` is the one listed, unchanged: the file itself, or the
    /// same symbolic link (whose file was checked through it when it was looked at; moved
    /// into another folder, a relative link may no longer lead there).
    fn is_at(&self, path: &str) -> bool {
        look_entry(path).is_ok_and(|(entry, now)| {
            entry == self.entry && (entry != self.id || self.seen.is_none_or(|seen| seen == now))
        })
    }
}

/// The identity, size and modification time of the entry at `path` itself, a symbolic
/// link not followed.
fn look_entry(path: &str) -> Result<(String, Seen), ErrorCode> {
    in_preopen(path, |dir, relative| {
        let id = hash_hex(dir.metadata_hash_at(PathFlags::empty(), relative)?);
        let stat = dir.stat_at(PathFlags::empty(), relative)?;
        Ok((id, Seen { size: stat.size, mtime: mtime_ns(&stat) }))
    })
}

/// Takes the file at `path` off its name: renamed (atomically) to its hidden
/// [`claim_name`] beside it, and checked there to be `read`. Another file (put under the
/// name since it was looked at) is given its name back, and `None` returned; so is one
/// gone. The listing never sees the hidden name, and gives the name back to a file a
/// crash left under it.
fn claim(path: &str, read: &WasRead) -> std::io::Result<Option<String>> {
    let (dir, name) = path.rsplit_once('/').unwrap_or((".", path));
    let claimed = format!("{dir}/{}", claim_name(name));
    if std::fs::symlink_metadata(&claimed).is_ok() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{claimed} is in the way (a cleanup cut short: the next listing gives it its name back)"),
        ));
    }
    match std::fs::rename(path, &claimed) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    }
    if read.is_at(&claimed) {
        return Ok(Some(claimed));
    }
    give_back(&claimed, path)?;
    Ok(None)
}

/// Gives the file held under `claimed` its name `path` back, or, when a file took that
/// name meanwhile, a numbered name beside it (`data-1.csv`), never overwriting one.
fn give_back(claimed: &str, path: &str) -> std::io::Result<String> {
    let (dir, name) = path.rsplit_once('/').unwrap_or((".", path));
    let (stem, extension) = split_name(name);
    for n in 0..10_000u32 {
        let candidate = if n == 0 { path.to_string() } else { format!("{dir}/{}", numbered_name(stem, n, extension)) };
        match std::fs::hard_link(claimed, &candidate) {
            Ok(()) => {
                std::fs::remove_file(claimed)?;
                return Ok(candidate);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(_) if std::fs::symlink_metadata(&candidate).is_ok() => continue,
            // No links on this file system (or not allowed, as for another user's file
            // under `protected_hardlinks`): renamed.
            Err(_) => {
                std::fs::rename(claimed, &candidate)?;
                return Ok(candidate);
            }
        }
    }
    Err(std::io::Error::other(format!("10,000 files named like {name} already in {dir}")))
}

/// Removes the file at `path` if it is still the one `read`: whether it was.
fn remove_if_still(path: &str, read: &WasRead) -> std::io::Result<bool> {
    let Some(claimed) = claim(path, read)? else { return Ok(false) };
    std::fs::remove_file(&claimed).inspect_err(|_| {
        let _ = give_back(&claimed, path);
    })?;
    Ok(true)
}

/// `name` split before its first dot (not a leading one): `("data", ".tar.gz")`.
fn split_name(name: &str) -> (&str, &str) {
    match name.find('.') {
        Some(0) | None => (name, ""),
        Some(dot) => name.split_at(dot),
    }
}

/// Moves `source` to `<root>/<relative>`, never over an existing file: a name that is
/// taken gets a `-1`, `-2`, ... before its first dot. Hard link then unlink, so taking
/// the name is atomic; a plain rename where links are not supported. Only the file
/// `read` is moved: `None` when another one is at `source` now (it is read, not archived).
fn move_without_overwriting(
    source: &str,
    root: &str,
    relative: &str,
    read: &WasRead,
) -> std::io::Result<Option<String>> {
    let target = format!("{root}/{relative}");
    if let Some(parent) = std::path::Path::new(&target).parent() {
        std::fs::create_dir_all(parent)?;
    }
    let (dir, name) = target.rsplit_once('/').unwrap_or(("", &target));
    let (stem, extension) = split_name(name);
    let first = NEXT_NUMBER.with(|next| next.borrow().get(&target).copied()).unwrap_or(0);
    let taken = |n: u32| {
        NEXT_NUMBER.with(|next| {
            let mut next = next.borrow_mut();
            if next.len() >= 10_000 {
                next.clear();
            }
            let next = next.entry(target.clone()).or_insert(0);
            *next = (*next).max(n + 1);
        })
    };
    // The name itself first (free again when someone took the file out of the folder),
    // then on from the last number given.
    for n in std::iter::once(0).chain(first.max(1)..u32::MAX) {
        let candidate = if n == 0 { target.clone() } else { format!("{dir}/{}", numbered_name(stem, n, extension)) };
        let archived = |candidate: String| {
            taken(n);
            Ok(Some(candidate))
        };
        match std::fs::hard_link(source, &candidate) {
            Ok(()) => {
                if !read.is_at(&candidate) {
                    // Another file was put under the listed name before the link: it stays
                    // where it is, to be read.
                    std::fs::remove_file(&candidate)?;
                    return Ok(None);
                }
                // Archived. Whatever is at `source` now leaves it only if it is this file.
                remove_if_still(source, read)?;
                return archived(candidate);
            }
            // The same file under that name: a move cut short between its link and its
            // unlink (a crash), finished now rather than linked again under a new name.
            Err(_) if same_file_linked(&candidate, source) => {
                remove_if_still(source, read)?;
                return archived(candidate);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(_) => {
                if std::fs::metadata(&candidate).is_ok() {
                    continue;
                }
                // A copy to another file system under way goes on: no rename crosses.
                let copying = COPIES.with(|copies| copies.borrow().contains_key(source));
                if !copying {
                    let Some(claimed) = claim(source, read)? else { return Ok(None) };
                    match std::fs::rename(&claimed, &candidate) {
                        Ok(()) => return archived(candidate),
                        Err(e) => {
                            give_back(&claimed, source)?;
                            match e.kind() {
                                // What a copy would not get past either (the source cannot
                                // be removed, a read-only listing): said as it is.
                                std::io::ErrorKind::NotFound
                                | std::io::ErrorKind::PermissionDenied
                                | std::io::ErrorKind::ReadOnlyFilesystem => return Err(e),
                                _ => {}
                            }
                        }
                    }
                }
                // Neither a link nor a rename crosses file systems (an archive on another
                // mount): copied instead.
                match copy_then_remove(source, &candidate, read) {
                    Ok(true) => return archived(candidate),
                    Ok(false) => return Ok(None),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Err(std::io::Error::other(format!("every numbered name like {name} is taken in {dir}")))
}

/// How long one call copies a file to another file system before it returns, to go on
/// at the next cleanup: a large file takes several listings, never a call past its
/// deadline.
const COPY_SLICE: Duration = Duration::from_secs(1);

thread_local! {
    /// The number to try after the name itself for an archive name that was taken (by
    /// target path), so a name archived thousands of times is not tried from `-1` up at
    /// each cleanup (one filesystem call each). Forgotten at a restart, when the first
    /// cleanup counts up once.
    static NEXT_NUMBER: RefCell<HashMap<String, u32>> = RefCell::new(HashMap::new());
    /// Copies to another file system under way, by source path: the source's size and
    /// modification time when the copy began, and the bytes in the partial copy so far.
    static COPIES: RefCell<HashMap<String, (FileStamp, u64)>> = RefCell::new(HashMap::new());
}

type FileStamp = (u64, Option<std::time::SystemTime>);

fn stamp(path: &str) -> std::io::Result<FileStamp> {
    std::fs::metadata(path).map(|m| (m.len(), m.modified().ok()))
}

/// Moves `source` to `target` on another file system: copied to a hidden name beside
/// `target` (`COPY_SLICE` at a time; `Interrupted` until it is whole) and synced, given
/// `target`'s name without overwriting (`AlreadyExists` when it is taken) and its
/// modification time, and only then removed from the listing (if that fails, the named
/// copy is removed again, so a file that cannot leave is never archived twice). A file
/// that changes while it is copied is copied again from its start. A crash part way
/// leaves the source in place and the next cleanup copies it again. Only the file `read`
/// is moved: `false` (and no copy left) when another one is at `source` now.
fn copy_then_remove(source: &str, target: &str, read: &WasRead) -> std::io::Result<bool> {
    use std::io::{Read, Seek, Write};
    if !read.is_at(source) {
        return Ok(false);
    }
    let (dir, name) = target.rsplit_once('/').unwrap_or((".", target));
    let partial = format!("{dir}/.{name}.sluice-partial");
    let now = stamp(source)?;
    let resumed = COPIES.with(|copies| copies.borrow().get(source).copied());
    let from_byte = match resumed {
        Some((then, copied)) if then == now && std::fs::metadata(&partial).is_ok_and(|m| m.len() == copied) => copied,
        _ => 0,
    };
    // The bytes in the partial copy, and whether the source was read to its end (else the
    // copy paused after `COPY_SLICE`, to go on at the next call).
    let copy = || -> std::io::Result<(u64, bool)> {
        let mut from = std::fs::File::open(source)?;
        from.seek(std::io::SeekFrom::Start(from_byte))?;
        let mut to = if from_byte > 0 {
            std::fs::OpenOptions::new().append(true).open(&partial)?
        } else {
            std::fs::File::create(&partial)?
        };
        let started = Instant::now();
        let (mut copied, mut buffer) = (from_byte, vec![0u8; 1 << 20]);
        loop {
            let n = from.read(&mut buffer)?;
            if n == 0 {
                break;
            }
            to.write_all(&buffer[..n])?;
            copied += n as u64;
            if started.elapsed() > COPY_SLICE && copied < now.0 {
                return Ok((copied, false));
            }
        }
        if let Some(modified) = now.1 {
            let _ = to.set_modified(modified);
        }
        to.sync_all()?;
        Ok((copied, true))
    };
    let copied = copy();
    if let Ok((so_far, false)) = copied {
        COPIES.with(|copies| copies.borrow_mut().insert(source.to_string(), (now, so_far)));
        return Err(std::io::Error::new(
            std::io::ErrorKind::Interrupted,
            format!("copying to another file system: {so_far} of {} bytes so far", now.0),
        ));
    }
    COPIES.with(|copies| copies.borrow_mut().remove(source));
    let named = match copied {
        Ok((copied, _)) if copied == now.0 && stamp(source)? == now => match std::fs::hard_link(&partial, target) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(e),
            // No links on that file system: renamed, if the name is still free.
            Err(_) if std::fs::metadata(target).is_ok() => Err(std::io::ErrorKind::AlreadyExists.into()),
            Err(_) => std::fs::rename(&partial, target),
        },
        Ok(_) => Err(std::io::Error::other("it changed while it was copied to another file system")),
        Err(e) => Err(e),
    };
    let _ = std::fs::remove_file(&partial);
    named?;
    let removed = remove_if_still(source, read);
    if !matches!(removed, Ok(true)) {
        // Still listed (or replaced while it was copied, so the copy may be the new file's):
        // no archive of it.
        let _ = std::fs::remove_file(target);
    }
    removed
}

/// Whether `candidate` is `source` itself under a second name: a hard link (never a
/// symbolic one, which unlinking the source would leave pointing nowhere) to a file that
/// has at least two.
fn same_file_linked(candidate: &str, source: &str) -> bool {
    let id_and_stat = |path: &str| {
        in_preopen(path, |dir, relative| {
            let stat = dir.stat_at(PathFlags::empty(), relative)?;
            Ok((hash_hex(dir.metadata_hash_at(PathFlags::empty(), relative)?), stat))
        })
    };
    match (id_and_stat(candidate), id_and_stat(source)) {
        (Ok((linked, stat)), Ok((original, source_stat))) => {
            linked == original && stat.type_ == DescriptorType::RegularFile && source_stat.link_count >= 2
        }
        _ => false,
    }
}

fn committed(partitions: &[String]) -> Vec<Option<FileOffset>> {
    if partitions.is_empty() {
        return Vec::new();
    }
    let asked: Vec<serde_json::Value> =
        partitions.iter().map(|p| serde_json::from_str(p).expect("partitions are JSON")).collect();
    sluice_connector::offsets::get_many(&asked)
}

/// file-pulse's own checks of a config: its keys, then that the listed directory can be
/// listed and every path its cleanup writes to is granted for writing.
fn validate_settings(config: &Config) -> Vec<ConfigProblem> {
    let settings = match Settings::parse_all(&config.0) {
        Ok(settings) => settings,
        Err(problems) => return problems.into_iter().map(|(key, message)| ConfigProblem { key, message }).collect(),
    };
    if let Err(e) = std::fs::read_dir(&settings.directory) {
        // The sandbox sees only what is granted, so a directory that exists outside the
        // grants is "not found" too; the WASI error number would mislead beside it.
        // WASI's EACCES (2): the directory's mode or owner, which no grant changes.
        let message = if e.raw_os_error() == Some(2) {
            format!("'{}' cannot be listed (permission denied: the worker's user may not read it)", settings.directory)
        } else {
            let why = match e.kind() {
                std::io::ErrorKind::NotFound => "it does not exist, or is not granted".to_string(),
                kind => kind.to_string(),
            };
            format!(
                "'{}' cannot be listed ({why}); grant it with sandbox.fs.read, or sandbox.fs.write when fs.cleanup.policy deletes or moves",
                settings.directory
            )
        };
        return vec![ConfigProblem { key: "fs.listing.directory.path".into(), message }];
    }
    // Every path the cleanup writes to must be granted for writing: said now, not at
    // the first file's cleanup.
    let mut writes: Vec<(&str, &str, &str)> = Vec::new();
    match settings.cleanup {
        Cleanup::None => {}
        Cleanup::Delete => writes.push(("fs.listing.directory.path", &settings.directory, "deletes files from it")),
        Cleanup::Move => {
            writes.push(("fs.listing.directory.path", &settings.directory, "moves files out of it"));
            writes.push(("fs.cleanup.policy.move.success.path", &settings.move_success, "moves finished files there"));
            writes.push(("fs.cleanup.policy.move.failure.path", &settings.move_failure, "moves failed files there"));
        }
    }
    for (key, path, why) in writes {
        if let Some(problem) = not_writable(path) {
            return vec![ConfigProblem {
                key: key.into(),
                message: format!(
                    "'{path}' is {problem}, and fs.cleanup.policy={} {why}: add it (or a directory above it) to sandbox.fs.write",
                    match settings.cleanup {
                        Cleanup::Delete => "delete",
                        _ => "move",
                    }
                ),
            }];
        }
    }
    Vec::new()
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
        let mut problems = validate_settings(config);
        // A topic Kafka would refuse: said at create, not at the first record.
        let topic = config.get("topic").filter(|t| !t.is_empty());
        if let Some(message) = topic.and_then(sluice_connector::topic_problem)
            && !problems.iter().any(|p| p.key == "topic")
        {
            problems.push(ConfigProblem { key: "topic".into(), message });
        }
        problems
    }

    fn start(config: Config) -> Result<Self, Error> {
        let settings = Settings::parse(&config.0).map_err(invalid)?;
        // The listed directory itself, named through a link: every file moved there would
        // be listed again, and moved again under a new name, for good.
        let listed = identity(&settings.directory);
        for (key, path) in [
            ("fs.cleanup.policy.move.success.path", &settings.move_success),
            ("fs.cleanup.policy.move.failure.path", &settings.move_failure),
        ] {
            if settings.cleanup == Cleanup::Move && listed.is_some() && identity(path) == listed {
                return Err(Error::InvalidConfig(format!(
                    "{key}: '{path}' is the listed directory itself (through a symbolic link): files moved there would be read again"
                )));
            }
        }
        // A recursive walk never enters the connector's own success or failure folders.
        let excluded = [&settings.move_success, &settings.move_failure]
            .into_iter()
            .filter(|path| settings.cleanup == Cleanup::Move && !path.is_empty())
            .filter_map(|path| path.strip_prefix(&format!("{}/", settings.directory)).map(String::from))
            .collect();
        // The first walk starts at the first tick: `start` stays fast whatever the size of
        // the directory.
        Ok(ConnectorState {
            config: config.0,
            settings: Some(Rc::new(settings)),
            excluded,
            ..ConnectorState::default()
        })
    }

    fn task_configs(&mut self, max_tasks: u32) -> Result<Vec<Config>, Error> {
        self.max_tasks = max_tasks as usize;
        Ok(self
            .assignment
            .tasks
            .iter()
            .enumerate()
            .map(|(task, files)| {
                Config(self.config.clone())
                    .with("file-pulse.task", task)
                    .with("file-pulse.generation", self.generations[task])
                    .with("file-pulse.files", serde_json::to_string(files).expect("serializable"))
            })
            .collect())
    }

    fn tick(&mut self) -> Result<(), Error> {
        let now = now_ms();
        let offsets = self.watch();
        let mut changed = self.stalled(now, &offsets);
        if self.walk.is_none() && self.settings().listing_due(now, self.last_pass_ms) {
            self.passes += 1;
            self.last_pass_ms = now;
            self.walk = Some(Walk { pass: self.passes, dirs: vec![String::new()], current: None, undecodable: 0 });
            let settings = self.settings();
            self.excluded_ids = [&settings.move_success, &settings.move_failure]
                .into_iter()
                .filter(|path| settings.recursive && settings.cleanup == Cleanup::Move && !path.is_empty())
                .filter_map(|path| identity(path))
                .collect();
        }
        if self.walk.is_some() {
            self.walk_step();
        }
        let (turned, leaving) = self.take_turns(now, &offsets);
        changed.extend(turned);
        changed.extend(self.assign());
        self.pending.extend(leaving);
        if !changed.is_empty() {
            sluice_connector::request_task_reconfiguration();
        }
        if self.cleaned > 0 {
            let policy = match self.settings().cleanup {
                Cleanup::Delete => "deleted".to_string(),
                _ => format!("moved to {}", printable(&self.settings().move_success)),
            };
            log::info(&format!(
                "{} finished file(s) {policy} (each one at debug level)",
                std::mem::take(&mut self.cleaned)
            ));
        }
        if self.cleaned_failed > 0 {
            log::info(&format!(
                "{} file(s) that could not be read moved to {}",
                std::mem::take(&mut self.cleaned_failed),
                printable(&self.settings().move_failure)
            ));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- task

/// Readers a task keeps open at once (each holds a buffer); plain files beyond it are
/// closed and reopened at their position when their turn comes.
const MAX_OPEN_READERS: usize = 16;

struct OpenFile {
    file: Rc<Descriptor>,
    reader: LineReader,
    /// The first bytes read from the file (when it was read from its start).
    head: Rc<RefCell<Vec<u8>>>,
    /// The poll that last read it (least recently read plain files are closed first).
    last_poll: u64,
    /// Where its reader stops: a `.gz`'s size when the reader was made (see
    /// [`PositionalFile::end`]), a plain file's end wherever it is (`u64::MAX`).
    end: u64,
    /// A `.gz`'s modification time when its reader was made (0 for a plain file): with
    /// `end`, what tells that it changed under the reader.
    modified: u64,
}

struct TaskFile {
    key: Assigned,
    /// `partition(id)`, built once: it goes on every record.
    partition: String,
    absolute: String,
    offset: FileOffset,
    open: Option<OpenFile>,
    /// Bytes mode: the file, held open from the first look while it waits to be quiet, so
    /// that a file replaced under its name or removed meanwhile is still read whole (as
    /// lines mode reads it through its open reader).
    whole: Option<Rc<Descriptor>>,
    finished: bool,
    last_growth_ms: u64,
    /// Tail mode: when the file was first seen renamed away.
    rotated_since: Option<u64>,
    /// Eof mode: the size and modification time it had when last looked at for whether it
    /// may still be being written.
    last_look: Option<(u64, u64)>,
    /// Its committed offset is of an earlier version or attempt: commit the current one
    /// at the first chance, so the connector sees it is being read.
    announce: bool,
}

impl TaskFile {
    /// Eof mode, at the end of what there is: whether the (open) file may still be being
    /// written ([`Self::modified_moments_ago`]), as far as a look at it now tells.
    fn may_still_grow(&mut self, settings: &Settings) -> bool {
        let Some(Ok(stat)) = self.open.as_ref().map(|open| open.file.stat()) else { return false };
        self.still_being_written(&stat, settings)
    }

    /// [`Self::modified_moments_ago`] by `stat`, a look at the file now, noting a change
    /// since the last look as growth this task saw.
    fn still_being_written(&mut self, stat: &DescriptorStat, settings: &Settings) -> bool {
        let look = (stat.size, mtime_ns(stat));
        if self.last_look != Some(look) {
            self.last_look = Some(look);
            self.last_growth_ms = self.last_growth_ms.max(poll_clock_ms());
        }
        self.modified_moments_ago(look.1, now_ms(), settings.eof_quiet_ms)
    }

    /// A `.gz` whose stream stops where its writer is: its reader is dropped, to be opened
    /// again at a later poll (decompressed up to its last whole line) and read on.
    fn reopen_later(&mut self, batch: &mut Batch, last: Option<usize>) {
        self.open = None;
        self.note_growth(batch, last);
    }

    /// While it waits to be quiet: how far the file has grown since its committed offset
    /// said (its last look), committed, so a long copy is not taken for a stalled task.
    fn note_growth(&mut self, batch: &mut Batch, last: Option<usize>) {
        let looked = self.last_look.filter(|&look| look != (self.offset.size, self.offset.mtime));
        if let Some((size, mtime)) = looked {
            (self.offset.size, self.offset.mtime) = (size, mtime);
        }
        if looked.is_some() || self.announce {
            self.note_progress(batch, last);
        }
    }

    /// Commits where the file is while it is not finished: on the poll's last record of
    /// it, or an offset-only record when it has none, so the connector sees progress (and
    /// a new version or attempt being read).
    fn note_progress(&mut self, batch: &mut Batch, last: Option<usize>) {
        self.announce = false;
        match last {
            Some(index) => batch.set_offset(index, &self.offset.to_json()),
            None => self.put(batch, "", None),
        }
    }

    /// Whether the file, modified at `mtime_ns`, may still be being written (`eof.quiet.ms`
    /// is `quiet_ms`): modified less than that long before `now_ms`, and seen to grow by
    /// this task within it too (so a modification time ahead of this clock holds a file
    /// only while it grows).
    fn modified_moments_ago(&self, mtime_ns: u64, now_ms: u64, quiet_ms: u64) -> bool {
        quiet_ms > 0
            && now_ms.saturating_sub(mtime_ns / 1_000_000) < quiet_ms
            && now_ms.saturating_sub(self.last_growth_ms) < quiet_ms
    }
}

struct TaskState {
    /// Shared, so a poll can hold it while reading files (`&mut self`) without a copy.
    settings: Rc<Settings>,
    files: Vec<TaskFile>,
    cursor: usize,
    polls: u64,
    /// Test-only: with generation 0, stop emitting a file's lines after this many.
    stall_after_lines: Option<u64>,
}

/// Writes one record of a file into the batch: `line` (or, without one, an offset-only
/// record), keyed by the file's path, with its path and line number as headers. Takes the
/// file's parts rather than the file, so a line still borrowed from its reader can be
/// written.
fn put(batch: &mut Batch, partition: &str, offset: &FileOffset, path: &str, topic: &str, line: Option<&[u8]>) {
    thread_local! {
        static OFFSET: std::cell::RefCell<(String, OffsetWriter)> = std::cell::RefCell::default();
    }
    OFFSET.with_borrow_mut(|(text, writer)| {
        text.clear();
        let line_digits = writer.write(offset, text);
        let mut number = [0u8; 20];
        let line_number = match line_digits {
            Some(digits) => &text.as_bytes()[digits],
            None => decimal(offset.line, &mut number),
        };
        let record = batch.record(partition, text, line.map(|_| topic)).key(path.as_bytes());
        let record = match line {
            Some(line) => record.value(line),
            None => record,
        };
        record.header("file.path", path.as_bytes()).header("file.line", line_number).timestamp(poll_clock_ms() as i64);
    });
}

impl TaskFile {
    fn put(&self, batch: &mut Batch, topic: &str, line: Option<&[u8]>) {
        put(batch, &self.partition, &self.offset, &self.key.path, topic, line);
    }

    /// Ends this version of the file: the done flag rides on its last record of this poll,
    /// or on an offset-only record when this poll produced none (or it failed). A file read
    /// to its end keeps the size and time of the look that found it so (its caller's): a
    /// look taken now could count bytes written since as read, and the cleanup, which
    /// removes only a file still as it was read, would remove them unread.
    fn finish(&mut self, batch: &mut Batch, last_of_this_poll: Option<usize>, end: End, failed: Option<String>) {
        if end == End::Failed
            && let Some(stat) = self.open.as_ref().and_then(|open| open.file.stat().ok())
        {
            self.offset.size = stat.size;
            self.offset.mtime = mtime_ns(&stat);
        }
        self.offset.done = true;
        self.offset.end = end;
        if let Some(reason) = failed {
            // The lines read tell apart two files listed under one name (a log and the
            // one that replaced it), whose warnings would otherwise read the same.
            log::warn(&format!(
                "{}: {reason} (after {} line(s) read from it)",
                printable(&self.key.path),
                self.offset.line
            ));
            self.offset.failed = Some(reason);
        }
        self.finished = true;
        self.open = None;
        match last_of_this_poll {
            Some(index) if end != End::Failed => batch.set_offset(index, &self.offset.to_json()),
            _ => self.put(batch, "", None),
        }
    }

    /// The reader is past a too-long line it skipped: the offset moves past it (carried by
    /// the next record, or by an offset-only one when the file ends or waits).
    fn skipped_long_line(&mut self) {
        let Some(open) = &self.open else { return };
        let before = self.offset.position;
        self.offset.position = open.reader.position;
        self.offset.line += 1;
        if !self.key.path.ends_with(".gz") {
            self.offset.size = self.offset.size.max(self.offset.position);
        }
        // As for a line read: a skipped line that began in the head is part of it, or
        // every reopen would find the head changed and read the file again from its
        // start (endlessly, for a task that reopens its files in turn).
        if before < HEAD_BYTES as u64 {
            self.offset.head = Some(head_read(&open.head.borrow(), self.offset.position));
        }
        self.announce = true;
    }

    /// Starts the next version from its beginning (the file was truncated or rewritten).
    fn restart_version(&mut self, why: String) {
        log::info(&format!("{}: {why}: reading it again from the start", printable(&self.key.path)));
        self.offset = FileOffset { rewritten: true, ..FileOffset::start(&self.key.path, self.offset.version + 1, 0) };
        self.open = None;
        // New content is not a rotated log: whether it is renamed away is looked at afresh.
        self.rotated_since = None;
    }

    /// Whether the open plain file was truncated or rewritten in place since it was read
    /// (as logrotate's `copytruncate` does): it is shorter than what was read, or its first
    /// bytes are not the ones read. Checked before each read, so nothing is read from the
    /// old position of new content.
    fn rewritten(&self) -> Option<String> {
        let open = self.open.as_ref()?;
        if self.key.path.ends_with(".gz") {
            return None;
        }
        let stat = open.file.stat().ok()?;
        if stat.size < self.offset.position {
            return Some(format!("it shrank to {} bytes, below the {} read", stat.size, self.offset.position));
        }
        // Only the bytes of lines sent count: bytes held back past them (zeros of a file
        // sized before it was filled) may be written over, which is no rewrite.
        let head = open.head.borrow();
        let sent = &head[..head.len().min(self.offset.position as usize)];
        let changed = !sent.is_empty() && open.file.read(sent.len() as u64, 0).ok().is_none_or(|(now, _)| now != sent);
        changed.then(|| "it was rewritten in place (truncated and written again)".to_string())
    }

    /// The largest line one record may hold: the cap minus the key and headers.
    fn max_line(&self, settings: &Settings) -> usize {
        // The host counts 64 bytes per record and 32 per header beyond their contents.
        let overhead = 2 * self.key.path.len() + "file.path".len() + "file.line".len() + 20 + 64 + 2 * 32;
        (settings.record_max_bytes as usize).saturating_sub(overhead).max(1)
    }
}

impl TaskState {
    /// Opens a file for reading at its offset, checking it is still the file assigned.
    fn open_file(&mut self, index: usize) -> Result<(), (End, String)> {
        let settings = Rc::clone(&self.settings);
        let open_plain = self.files.iter().filter(|f| f.open.is_some() && !f.key.path.ends_with(".gz")).count();
        let open_now = self.files.iter().filter(|f| f.open.is_some()).count();
        if open_now >= MAX_OPEN_READERS {
            if open_plain == 0 {
                return Ok(()); // every slot holds a .gz stream: wait for one to finish
            }
            // A file no longer at its path (removed, or its name taken by another file)
            // can only be read through its open reader: that one is never closed.
            let lru = (0..self.files.len())
                .filter(|&i| !self.files[i].key.path.ends_with(".gz"))
                .filter_map(|i| Some((i, self.files[i].open.as_ref()?.last_poll)))
                .filter(|&(i, _)| identity(&self.files[i].absolute).as_deref() == Some(self.files[i].key.id.as_str()))
                .min_by_key(|(_, poll)| *poll)
                .map(|(i, _)| i);
            if let Some(lru) = lru {
                self.files[lru].open = None;
            }
        }
        let file = &mut self.files[index];
        let missing = |why: String| (End::Missing, why);
        let descriptor = open(&file.absolute).map_err(|e| match e {
            ErrorCode::Access => missing(format!("cannot be opened: {}", error_text(e))),
            e => missing(format!("not found at its listed path ({})", error_text(e))),
        })?;
        let id = descriptor.metadata_hash().map(hash_hex).map_err(|e| missing(error_text(e)))?;
        if id != file.key.id {
            return Err(missing("its listed path now names another file".into()));
        }
        let descriptor = Rc::new(descriptor);
        let compressed = file.key.path.ends_with(".gz");
        if !compressed
            && let Ok(stat) = descriptor.stat()
            && stat.size < file.offset.position
        {
            file.restart_version(format!("it shrank to {} bytes, below the {} read", stat.size, file.offset.position));
        }
        let max_line = file.max_line(&settings);
        // Resuming mid-file: the first bytes must be the ones read before (the offset's
        // head), or the file was rewritten or replaced while no reader had it open (a
        // `copytruncate` refilled past the position while the task was down, a name
        // dropped again on a reused inode): that is new content, read from its start.
        let mut known_head = Vec::new();
        if file.offset.position > 0 && !compressed {
            let read = descriptor.read(file.offset.position.min(HEAD_BYTES as u64), 0);
            known_head = read.map(|(bytes, _)| bytes).unwrap_or_default();
            let now = head_hash(&known_head);
            match &file.offset.head {
                Some(read) if *read != now => {
                    file.restart_version("its first bytes are not the ones read before (rewritten or replaced)".into());
                    known_head.clear();
                }
                // An offset from before heads were kept, or written by hand: the first
                // bytes as they are now stand for the ones read.
                None => file.offset.head = Some(now),
                Some(_) => {}
            }
        }
        let head = Rc::new(RefCell::new(known_head));
        let (end, modified) = match descriptor.stat() {
            Ok(stat) if compressed => (stat.size, mtime_ns(&stat)),
            _ => (u64::MAX, 0),
        };
        // A `.gz`'s head is of its decompressed stream (its positions count decompressed
        // bytes), which its reader records; its compressed bytes are not.
        let file_head = if compressed { Rc::new(RefCell::new(Vec::new())) } else { Rc::clone(&head) };
        let source = |offset| {
            Box::new(PositionalFile { file: Rc::clone(&descriptor), offset, head: Rc::clone(&file_head), end })
        };
        let reader = if compressed {
            let mut opened = LineReader::gzip(source(0), file.offset.position, max_line, Rc::clone(&head));
            // Resuming mid-stream: the first bytes decompressed while skipping to the
            // position must be the ones read before, or the `.gz` was replaced under its
            // name (`cp` over it, a new export on the same inode) and is read from its
            // start; read on from the old position, its first lines were lost.
            // Compared once as many bytes as the head covers were decompressed, or the
            // whole stream was and is shorter: fewer (a read error part way, the stream
            // still being written) say nothing of what the file is.
            let covers = (file.offset.position as usize).min(HEAD_BYTES);
            let whole_and_shorter = matches!(&opened, Err(e) if e.to_string() == reader::SHORTER_THAN_OFFSET);
            if file.offset.position > 0 && (head.borrow().len() >= covers || whole_and_shorter) {
                let now = head_read(&head.borrow(), file.offset.position);
                match &file.offset.head {
                    Some(read) if *read != now => {
                        file.restart_version("its first bytes are not the ones read before (replaced)".into());
                        head.borrow_mut().clear();
                        opened = LineReader::gzip(source(0), 0, max_line, Rc::clone(&head));
                    }
                    None if opened.is_ok() => file.offset.head = Some(now),
                    _ => {}
                }
            }
            match opened {
                Ok(reader) => reader,
                // Its stream ends where its writer is (`gzip` still compressing it in
                // place): opened again at a later poll.
                Err(e)
                    if e.kind() == std::io::ErrorKind::UnexpectedEof
                        && settings.completion == Completion::Eof
                        && descriptor.stat().is_ok_and(|stat| file.still_being_written(&stat, &settings)) =>
                {
                    return Ok(());
                }
                Err(e) => return Err((End::Failed, format!("cannot be read: {e}"))),
            }
        } else {
            LineReader::new(source(file.offset.position), file.offset.position, max_line)
        };
        file.open = Some(OpenFile { file: descriptor, reader, head, last_poll: self.polls, end, modified });
        Ok(())
    }

    /// Reads from one file until the poll's budget is spent or nothing more is there.
    fn read_file(&mut self, index: usize, batch: &mut Batch, bytes: &mut usize) {
        let settings = Rc::clone(&self.settings);
        if settings.read_mode == ReadMode::Bytes {
            return self.read_whole_file(index, batch, bytes);
        }
        if self.files[index].open.is_none() {
            if let Err((end, why)) = self.open_file(index) {
                return self.files[index].finish(batch, None, end, Some(why));
            }
            if self.files[index].open.is_none() {
                return; // no reader slot this time
            }
        }
        let stall_after = self.stall_after_lines;
        let polls = self.polls;
        let file = &mut self.files[index];
        if let Some(why) = file.rewritten() {
            return file.restart_version(why);
        }
        // Rewritten while this poll read it: what was read may be new content at old
        // positions, so it is dropped (nothing was delivered yet) and the new version read.
        let first = batch.len();
        let rewritten_meanwhile = |file: &mut TaskFile, batch: &mut Batch| {
            let why = file.rewritten()?;
            batch.truncate(first);
            file.restart_version(why);
            Some(())
        };
        let mut last_of_this_poll = None;
        // A last line without its newline waits for the file's end: in tail mode always,
        // in eof mode while the file may still be being written (`eof.quiet.ms`).
        let mut hold_partial = settings.completion == Completion::Tail || settings.eof_quiet_ms > 0;
        // Eof mode: the file has been quiet long enough for what is held to be its end.
        let quiet_now = |file: &mut TaskFile, settings: &Settings| {
            settings.completion == Completion::Eof && !file.may_still_grow(settings)
        };
        // Eof mode: a .gz whose stream stops short was modified moments ago: it is being
        // compressed in place, not cut.
        let still_compressing = |file: &mut TaskFile, settings: &Settings, e: std::io::ErrorKind| {
            e == std::io::ErrorKind::UnexpectedEof
                && file.key.path.ends_with(".gz")
                && settings.completion == Completion::Eof
                && file.may_still_grow(settings)
        };
        while batch.len() < settings.poll_max_records && *bytes < settings.poll_max_bytes {
            if stall_after.is_some_and(|n| file.offset.line >= n) {
                return;
            }
            let open = file.open.as_mut().expect("opened above");
            open.last_poll = polls;
            // Past a too-long line being skipped first; nothing more of it now is the end.
            if open.reader.is_skipping() {
                match open.reader.skip_rest(hold_partial) {
                    Ok(true) => file.skipped_long_line(),
                    Ok(false) if rewritten_meanwhile(file, batch).is_some() => return,
                    Ok(false) if hold_partial && quiet_now(file, &settings) => {
                        hold_partial = false; // the too-long last line ends with the file
                        continue;
                    }
                    Ok(false) => return Self::at_end(file, &settings, batch, last_of_this_poll, hold_partial),
                    Err(e) if still_compressing(file, &settings, e.kind()) => {
                        return file.reopen_later(batch, last_of_this_poll);
                    }
                    Err(e) => {
                        let reason = format!("cannot be read: {e}");
                        return file.finish(batch, last_of_this_poll, End::Failed, Some(reason));
                    }
                }
            }
            let open = file.open.as_mut().expect("opened above");
            match open.reader.next_line(hold_partial) {
                Ok(Some((line, position))) => {
                    let before = file.offset.position;
                    file.offset.position = position;
                    file.offset.line += 1;
                    if !file.key.path.ends_with(".gz") {
                        file.offset.size = file.offset.size.max(file.offset.position);
                    }
                    // The head covers the first `min(position, HEAD_BYTES)` bytes (of the
                    // decompressed stream, for a `.gz`).
                    if before < HEAD_BYTES as u64 {
                        file.offset.head = Some(head_read(&open.head.borrow(), position));
                    }
                    file.last_growth_ms = poll_clock_ms();
                    *bytes += line.len();
                    put(batch, &file.partition, &file.offset, &file.key.path, &settings.topic, Some(line));
                    last_of_this_poll = Some(batch.len() - 1);
                    file.announce = false;
                }
                Ok(None) => {
                    if rewritten_meanwhile(file, batch).is_some() {
                        return;
                    }
                    if hold_partial && quiet_now(file, &settings) {
                        // Quiet: a last line without its newline is the last line, read now
                        // as every other one (too long, unreadable), then the file ends.
                        hold_partial = false;
                        continue;
                    }
                    return Self::at_end(file, &settings, batch, last_of_this_poll, hold_partial);
                }
                Err(e) if is_too_long(&e) && settings.skip_long_lines => {
                    log::warn(&format!(
                        "{}: line {} is {e}: skipped (errors.tolerance=all)",
                        printable(&file.key.path),
                        file.offset.line + 1
                    ));
                    if open.reader.skip_long_line() {
                        file.skipped_long_line();
                    }
                }
                Err(e) if is_too_long(&e) => {
                    let reason = format!("line {} is {e}", file.offset.line + 1);
                    return file.finish(batch, last_of_this_poll, End::Failed, Some(reason));
                }
                Err(e) => {
                    let (kind, reason) = (e.kind(), format!("cannot be read: {e}"));
                    if still_compressing(file, &settings, kind) {
                        return file.reopen_later(batch, last_of_this_poll);
                    }
                    return file.finish(batch, last_of_this_poll, End::Failed, Some(reason));
                }
            }
        }
        if rewritten_meanwhile(file, batch).is_some() {
            return;
        }
        // The budget ran out mid-file: note the size seen on the last record.
        if let (Some(index), Some(stat)) = (last_of_this_poll, file.open.as_ref().and_then(|o| o.file.stat().ok())) {
            file.offset.size = stat.size;
            file.offset.mtime = mtime_ns(&stat);
            batch.set_offset(index, &file.offset.to_json());
        }
    }

    /// Tail mode: sends the file's last line, held back while it had no newline, now that
    /// the file ends there (past the rest of a too-long line being skipped).
    fn send_held_line(file: &mut TaskFile, settings: &Settings, batch: &mut Batch, last: &mut Option<usize>) {
        let open = file.open.as_mut().expect("open");
        if open.reader.is_skipping() && open.reader.skip_rest(false).is_ok_and(|past| past) {
            file.skipped_long_line();
        }
        let open = file.open.as_mut().expect("open");
        if let Ok(Some((line, position))) = open.reader.next_line(false) {
            file.offset.position = position;
            file.offset.line += 1;
            put(batch, &file.partition, &file.offset, &file.key.path, &settings.topic, Some(line));
            *last = Some(batch.len() - 1);
        }
    }

    /// Everything there is now was read: decide whether the file is done.
    /// `holding`: a last line without its newline (or the rest of a too-long one) may be
    /// held back; in eof mode the file is not finished while it is (the read loop lets it
    /// go once the file is quiet, and comes back here).
    fn at_end(file: &mut TaskFile, settings: &Settings, batch: &mut Batch, last: Option<usize>, holding: bool) {
        let open = file.open.as_ref().expect("open");
        let Ok(stat) = open.file.stat() else {
            return file.finish(batch, last, End::Failed, Some("cannot be read: its status is unavailable".into()));
        };
        let compressed = file.key.path.ends_with(".gz");
        if !compressed && stat.size < file.offset.position {
            return file
                .restart_version(format!("it shrank to {} bytes, below the {} read", stat.size, file.offset.position));
        }
        // A `.gz` changed since its reader was made: grown past where the reader stops (a
        // member appended to a followed log, its compression going on), or rewritten in
        // place. The reader is made again on the same descriptor (a rotated or removed file
        // has no path to open), decompressing up to the position, and reads on at the next
        // poll, unless the first bytes decompressed are not the ones read: then it is new
        // content, read from its start. Finished now, what was added would never be read.
        if compressed && (stat.size, mtime_ns(&stat)) != (open.end, open.modified) {
            let max_line = file.max_line(settings);
            let descriptor = Rc::clone(&open.file);
            let source = Box::new(PositionalFile { file: descriptor, offset: 0, head: Rc::default(), end: stat.size });
            // The head the offset records is the one the new reader decompresses again.
            let head = Rc::clone(&open.head);
            head.borrow_mut().clear();
            match LineReader::gzip(source, file.offset.position, max_line, Rc::clone(&head)) {
                Ok(reader) => {
                    let now = head_read(&head.borrow(), file.offset.position);
                    if file.offset.head.as_ref().is_some_and(|read| *read != now) {
                        return file.restart_version("its first bytes are not the ones read before (replaced)".into());
                    }
                    let open = file.open.as_mut().expect("open");
                    (open.reader, open.end, open.modified) = (reader, stat.size, mtime_ns(&stat));
                }
                // Shorter than the position, or its stream stops mid-way (being written):
                // opened again at a later poll, where what it is now is looked at.
                Err(_) => file.open = None,
            }
            file.last_growth_ms = now_ms();
            return file.note_progress(batch, last);
        }
        let seen_all = compressed || stat.size <= file.offset.position + open.reader.pending_len();
        let grew = stat.size != file.offset.size || mtime_ns(&stat) != file.offset.mtime;
        file.offset.size = stat.size;
        file.offset.mtime = mtime_ns(&stat);
        let now = now_ms();
        match settings.completion {
            Completion::Eof if seen_all => {
                if grew {
                    file.last_growth_ms = now;
                }
                let held = holding && (open.reader.pending_len() > 0 || open.reader.is_skipping());
                if !held && !file.modified_moments_ago(mtime_ns(&stat), now, settings.eof_quiet_ms) {
                    return file.finish(batch, last, End::Eof, None);
                }
                // Perhaps still being copied in: read on at the next poll, as more arrives.
                // Its growth is committed (an offset-only record when no line is whole), so
                // a long copy is not taken for a stalled task.
                if grew || file.announce {
                    file.note_progress(batch, last);
                }
                if compressed && grew {
                    // Its reader stops where the file ended when it was opened: opened
                    // again for what was added (a member appended, a compression going on).
                    file.open = None;
                }
            }
            Completion::Eof => {}
            Completion::Tail => {
                let end = if stat.link_count == 0 {
                    Some(End::Removed)
                } else if file.rotated_since.is_some()
                    || identity(&file.absolute).as_deref() != Some(file.key.id.as_str())
                {
                    let since = *file.rotated_since.get_or_insert(now);
                    (now.saturating_sub(since.max(file.last_growth_ms)) >= settings.rotation_grace_ms)
                        .then_some(End::Rotated)
                } else if settings.tail_idle_ms > 0 && now.saturating_sub(file.last_growth_ms) >= settings.tail_idle_ms
                {
                    Some(End::Idle)
                } else {
                    None
                };
                match end {
                    Some(end) if seen_all => {
                        let mut last = last;
                        // A removed or rotated file will not get its last newline, nor
                        // one finished idle that its cleanup deletes or moves away.
                        if matches!(end, End::Removed | End::Rotated)
                            || (end == End::Idle && settings.cleanup != Cleanup::None)
                        {
                            Self::send_held_line(file, settings, batch, &mut last);
                        }
                        // A `.gz`'s head is already its decompressed stream's.
                        if !compressed {
                            file.offset.head = head_of(&file.open.as_ref().expect("open").file, file.offset.position);
                        }
                        file.finish(batch, last, end, None);
                    }
                    _ => {
                        if grew || file.announce {
                            file.last_growth_ms = now;
                            // Progress the connector can see, also when no line is complete.
                            file.note_progress(batch, last);
                        }
                    }
                }
            }
        }
        // Bytes held back as an unfinished last line can be written over in place before
        // their newline comes (a file whose size is set before it is filled holds zeros
        // there first, as Windows copies and preallocating downloaders make them): when
        // the file changed, they are read again from after its last whole line. Kept, the
        // zeros were sent as its last line and the lines written over them never were.
        // The reader is made again on the descriptor it reads (not the path, which a rotated
        // or removed file no longer has), from the last whole line. A too-long line being
        // skipped is not read again: it would be refused twice.
        if grew
            && !compressed
            && !file.offset.done
            && file.open.as_ref().is_some_and(|open| open.reader.pending_len() > 0 && !open.reader.is_skipping())
        {
            let (position, max_line) = (file.offset.position, file.max_line(settings));
            let open = file.open.as_mut().expect("checked above");
            let source = Box::new(PositionalFile {
                file: Rc::clone(&open.file),
                offset: position,
                head: Rc::clone(&open.head),
                end: u64::MAX,
            });
            open.reader = LineReader::new(source, position, max_line);
        }
    }

    fn read_whole_file(&mut self, index: usize, batch: &mut Batch, bytes: &mut usize) {
        let settings = Rc::clone(&self.settings);
        let file = &mut self.files[index];
        let held = file.whole.take();
        let descriptor = match held.map_or_else(|| open(&file.absolute).map(Rc::new), Ok) {
            Ok(d) if d.metadata_hash().map(hash_hex).ok().as_deref() == Some(file.key.id.as_str()) => d,
            Err(e @ ErrorCode::Access) => {
                let why = format!("cannot be opened: {}", error_text(e));
                return file.finish(batch, None, End::Missing, Some(why));
            }
            _ => {
                let why = "not found at its listed path, or it now names another file".to_string();
                return file.finish(batch, None, End::Missing, Some(why));
            }
        };
        let stat = descriptor.stat().ok();
        // Read whole only once a copy into the folder is over (`eof.quiet.ms`).
        if let Some(stat) = &stat
            && file.still_being_written(stat, &settings)
        {
            file.whole = Some(descriptor);
            return file.note_growth(batch, None);
        }
        let record_cap = file.max_line(&settings) as u64;
        let (max, why) = if settings.bytes_max <= record_cap {
            (settings.bytes_max, "read.bytes.max.size")
        } else {
            (record_cap, "what one record may hold (sandbox.record.max.bytes)")
        };
        let source =
            Box::new(PositionalFile { file: Rc::clone(&descriptor), offset: 0, head: Rc::default(), end: u64::MAX });
        match read_whole(source, file.key.path.ends_with(".gz"), max, why) {
            Ok(content) => {
                file.offset.position = content.len() as u64;
                // What tells this file from a new one on its inode with its size and time.
                file.offset.head = Some(head_hash(&content[..content.len().min(HEAD_BYTES)]));
                file.offset.size = stat.as_ref().map_or(0, |s| s.size);
                file.offset.mtime = stat.as_ref().map_or(0, mtime_ns);
                file.offset.line = 1;
                *bytes += content.len();
                file.put(batch, &settings.topic, Some(&content));
                let last = batch.len() - 1;
                file.finish(batch, Some(last), End::Eof, None);
            }
            Err(e) => {
                file.offset.size = stat.as_ref().map_or(0, |s| s.size);
                file.offset.mtime = stat.as_ref().map_or(0, mtime_ns);
                file.finish(batch, None, End::Failed, Some(format!("cannot be read: {e}")));
            }
        }
    }
}

impl Task for TaskState {
    fn start(config: Config) -> Result<Self, Error> {
        let config = config.0;
        let settings = Settings::parse(&config).map_err(invalid)?;
        let listed: Vec<Assigned> = config
            .get("file-pulse.files")
            .map(|text| serde_json::from_str(text))
            .transpose()
            .map_err(|e| Error::InvalidConfig(format!("file-pulse.files: {e}")))?
            .unwrap_or_default();
        let partitions: Vec<String> = listed.iter().map(|f| partition(&f.id)).collect();
        let offsets = committed(&partitions);
        let now = now_ms();
        let files = listed
            .into_iter()
            .zip(offsets)
            .zip(partitions)
            .map(|((key, committed), partition)| {
                let announce = committed.as_ref().is_none_or(|o| o.version != key.version || o.attempt != key.attempt);
                // Renamed since it was read (a rotated log found under its new name): the
                // same version read on. A new version under another name is a new file that
                // took the identity (a reused inode), not the old one rotated. Nor is a file
                // whose committed name still leads to it: one file with two names (a hard
                // link listed first after a restart), still written under both.
                let renamed = committed.as_ref().is_some_and(|o| {
                    !o.path.is_empty()
                        && o.path != key.path
                        && o.version == key.version
                        && identity(&format!("{}/{}", settings.directory, o.path)).as_deref() != Some(key.id.as_str())
                });
                let later = committed.as_ref().is_some_and(|o| (o.version, o.attempt) > (key.version, key.attempt));
                // A later version this task started itself, finding the file rewritten in
                // place as it read it (the connector only ever hands a file to one task,
                // and takes it back before it hands it on): read on from it.
                let own_rewrite = later && committed.as_ref().is_some_and(|o| o.rewritten);
                // Committed by a later version or attempt the connector started: the file
                // was handed to another task since this list was made (a finished log that
                // grew again, say). That task reads it; reading it here too would send its
                // lines twice.
                let handed_on = later && !own_rewrite;
                let offset = match committed {
                    Some(o) if later || (o.version == key.version && o.attempt == key.attempt) => o,
                    // A retry, or the new bytes of a finished log: on from where it stopped,
                    // if its first bytes are still the ones read (checked as it opens; a
                    // failed file fixed with other first lines is new content, read from
                    // its start).
                    Some(o) if o.version == key.version => FileOffset {
                        done: false,
                        end: End::Eof,
                        failed: None,
                        attempt: key.attempt,
                        path: key.path.clone(),
                        ..o
                    },
                    _ => FileOffset::start(&key.path, key.version, key.attempt),
                };
                TaskFile {
                    absolute: format!("{}/{}", settings.directory, key.path),
                    finished: offset.done || handed_on,
                    partition,
                    key,
                    offset,
                    open: None,
                    whole: None,
                    last_growth_ms: now,
                    rotated_since: (renamed && settings.completion == Completion::Tail).then_some(now),
                    last_look: None,
                    announce,
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
        Ok(TaskState { settings: Rc::new(settings), files, cursor: 0, polls: 0, stall_after_lines })
    }

    /// Lines are written straight into the batch (no allocation per line).
    fn poll_into(&mut self, batch: &mut Batch) -> Result<(), Error> {
        POLL_CLOCK_MS.set(now_ms());
        let mut bytes = 0;
        let count = self.files.len();
        let settings = Rc::clone(&self.settings);
        self.polls += 1;
        for step in 0..count {
            if batch.len() >= settings.poll_max_records || bytes >= settings.poll_max_bytes {
                break;
            }
            let index = (self.cursor + step) % count;
            if !self.files[index].finished {
                self.read_file(index, batch, &mut bytes);
            }
        }
        // The next poll starts with the next file: every file gets its turn.
        self.cursor = if count == 0 { 0 } else { (self.cursor + 1) % count };
        Ok(())
    }
}

sluice_connector::export_connector!(ConnectorState, TaskState);
