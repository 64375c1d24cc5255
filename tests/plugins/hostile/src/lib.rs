//! Hostile test fixture: does exactly one bad thing, chosen by `hostile.attack`, so that
//! each test can show the host survives it and only this plugin's connector or task is
//! hurt. `hostile.target` is a path for the filesystem attacks.
//!
//! Attacks: `loop-in-poll`, `loop-in-tick`, `loop-in-start`, `loop-in-task-configs`, `grow-memory`, `huge-alloc`,
//! `recursion`, `trap`, `panic` (a Rust panic naming `hostile.panic.cause`), `big-record`, `many-big-records`, `million-records`, `escape` (opens
//! `hostile.target` and reports what happened as a record), `read-fifo` (reads the FIFO
//! `hostile.target` with `descriptor.read` and reports the answer, or the open's), `stat-files` (opens
//! the directory `hostile.target`, its regular file `data` and its FIFO `fifo`, and
//! reports what `descriptor.stat` answers for each), `raise-error-flood`,
//! `log-flood`, `print-flood`, `busy` (spins `hostile.busy.ms` per poll, for the fairness
//! benchmark), `partition-not-object`, `offset-nested`, `partition-wide-integer`, `offset-wide-integer`,
//! `invalid-utf8-topic`, `long-topic`, `too-many-tasks`; `sleep-in-<call>` (a WASI sleep,
//! where epoch interruption cannot reach, of `hostile.sleep.ms`, default an hour, in
//! `start`, `validate`, `task-configs`, `tick`, `stop`, `task-start`, `poll`, `commit` or
//! `task-stop`), `huge-offsets` (one `offsets` call with `hostile.count` partitions, default
//! 4,500,000, all pointing at the same bytes), `offsets-flood` (`offset` called in a loop),
//! `many-headers` (a record with `hostile.count` empty headers, default 1,000,000),
//! `forge-log` (log lines, stdout and a `raise-error` with newlines and escape sequences
//! that would forge lines of the host's log).
//!
//! A component only: on any other target the crate is empty, so `cargo build --workspace`
//! works on the host.
#![cfg(target_family = "wasm")]

use std::cell::RefCell;

wit_bindgen::generate!({ path: "../../../wit", world: "source-connector" });

use exports::sluice::connector::connector::{
    Config, ConfigKey, ConfigProblem, ConnectorError, Guest as ConnectorGuest,
};
use exports::sluice::connector::task::{Guest as TaskGuest, SourceRecord};
use sluice::connector::connector_context;
use sluice::connector::log::{Level, log};

thread_local! {
    static CONFIG: RefCell<Config> = const { RefCell::new(Vec::new()) };
    static SENT: RefCell<bool> = const { RefCell::new(false) };
    /// `work`: loop iterations per millisecond, measured at task start.
    static PER_MS: RefCell<u64> = const { RefCell::new(0) };
    /// What `leak-per-poll` keeps: 1 MiB more each poll.
    static KEPT: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// `iterations` rounds of busy work.
fn work(iterations: u64) -> u64 {
    let mut n = 0u64;
    for _ in 0..iterations {
        n = std::hint::black_box(n.wrapping_add(1));
    }
    n
}

fn get(key: &str) -> String {
    CONFIG.with_borrow(|c| c.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()).unwrap_or_default())
}

fn attack() -> String {
    get("hostile.attack")
}

fn sleep_if(call: &str) {
    if attack() == format!("sleep-in-{call}") {
        let millis = get("hostile.sleep.ms").parse().unwrap_or(3_600_000);
        std::thread::sleep(std::time::Duration::from_millis(millis));
    }
}

fn count(default: usize) -> usize {
    get("hostile.count").parse().unwrap_or(default)
}

/// One string of a lowered `list<string>`: where its bytes are, and how many.
#[repr(C)]
#[derive(Clone, Copy)]
struct RawString {
    ptr: *const u8,
    len: usize,
}

#[link(wasm_import_module = "sluice:connector/offset-storage-reader@0.1.0")]
unsafe extern "C" {
    /// The raw `offsets` import, to pass a list whose entries all point at the same bytes
    /// (which the generated bindings would copy).
    #[link_name = "offsets"]
    fn raw_offsets(list: *const RawString, len: usize, answer: *mut [usize; 2]);
}

/// `offsets` with `n` partitions that are all the same few bytes: a list the guest can
/// afford (8 bytes an entry) that costs the host a string per entry.
fn huge_offsets(n: usize) {
    let partition = br#"{"p":0}"#;
    let list = vec![RawString { ptr: partition.as_ptr(), len: partition.len() }; n];
    let mut answer = [0usize; 2];
    // SAFETY: the list and the bytes it points at live across the call; the answer area
    // is two words, as the canonical ABI returns a list.
    unsafe { raw_offsets(list.as_ptr(), list.len(), &mut answer) };
    std::hint::black_box(answer);
}

fn spin() -> ! {
    let mut n = 0u64;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

#[allow(unconditional_recursion)]
fn recurse(depth: u64) -> u64 {
    let frame = std::hint::black_box([depth; 64]);
    recurse(depth + 1) + frame[0]
}

fn record(partition: &str, offset: &str, topic: &str, value: Vec<u8>) -> SourceRecord {
    SourceRecord {
        partition: partition.into(),
        offset: offset.into(),
        topic: Some(topic.into()),
        key: None,
        value: Some(value),
        headers: Vec::new(),
        timestamp: None,
    }
}

struct Hostile;

impl ConnectorGuest for Hostile {
    fn version() -> String {
        "0.0.0-hostile".into()
    }

    fn config_def() -> Vec<ConfigKey> {
        Vec::new()
    }

    fn validate(config: Config) -> Vec<ConfigProblem> {
        CONFIG.with_borrow_mut(|c| *c = config);
        sleep_if("validate");
        match attack().as_str() {
            // More problems than any config has keys, each under a key of its own.
            "problems-flood" => (0..200_000)
                .map(|n| ConfigProblem { key: format!("key.{n}"), message: format!("problem {n}") })
                .collect(),
            _ => Vec::new(),
        }
    }

    fn start(config: Config) -> Result<(), ConnectorError> {
        CONFIG.with_borrow_mut(|c| *c = config);
        if attack() == "loop-in-start" {
            spin();
        }
        sleep_if("start");
        Ok(())
    }

    fn task_configs(max_tasks: u32) -> Result<Vec<Config>, ConnectorError> {
        if attack() == "loop-in-task-configs" {
            spin();
        }
        sleep_if("task-configs");
        let count = if attack() == "too-many-tasks" { max_tasks * 100 + 5 } else { max_tasks };
        let config = CONFIG.with_borrow(Clone::clone);
        Ok((0..count).map(|_| config.clone()).collect())
    }

    fn tick() -> Result<(), ConnectorError> {
        if attack() == "loop-in-tick" {
            spin();
        }
        sleep_if("tick");
        Ok(())
    }

    fn stop() {
        sleep_if("stop");
    }
}

impl TaskGuest for Hostile {
    fn start(config: Config) -> Result<(), ConnectorError> {
        CONFIG.with_borrow_mut(|c| *c = config);
        sleep_if("task-start");
        if attack() == "work" {
            // Measured once, short enough never to be throttled: the poll then does a
            // fixed amount of work, however long the host makes it take.
            let started = std::time::Instant::now();
            let mut rounds = 0u64;
            while started.elapsed().as_millis() < 20 {
                work(10_000);
                rounds += 1;
            }
            PER_MS.with_borrow_mut(|per_ms| *per_ms = rounds * 10_000 / 20);
        }
        Ok(())
    }

    fn poll() -> Result<Vec<SourceRecord>, ConnectorError> {
        sleep_if("poll");
        let ok = |value: &str| Ok(vec![record(r#"{"p":0}"#, r#"{"n":0}"#, "hostile", value.as_bytes().to_vec())]);
        match attack().as_str() {
            "loop-in-poll" => spin(),
            "busy" => {
                // Burn CPU for `hostile.busy.ms` of every poll, just under the deadline.
                let millis: u128 = get("hostile.busy.ms").parse().unwrap_or(4000);
                let started = std::time::Instant::now();
                let mut n = 0u64;
                while started.elapsed().as_millis() < millis {
                    for _ in 0..10_000 {
                        n = std::hint::black_box(n.wrapping_add(1));
                    }
                }
                Ok(Vec::new())
            }
            "work" => {
                // CPU work worth `hostile.work.ms` unthrottled: an honest long call.
                let millis: u64 = get("hostile.work.ms").parse().unwrap_or(600);
                work(PER_MS.with_borrow(|per_ms| *per_ms) * millis);
                ok("worked")
            }
            "leak-per-poll" => {
                KEPT.with_borrow_mut(|kept| kept.push(vec![1u8; 1 << 20]));
                ok("leaked")
            }
            "grow-memory" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "huge-alloc" => {
                let huge = vec![7u8; 1 << 30];
                std::hint::black_box(&huge);
                ok("allocated")
            }
            "recursion" => ok(&recurse(0).to_string()),
            "trap" => core::arch::wasm32::unreachable(),
            "panic" => panic!("hostile panic: {}", get("hostile.panic.cause")),
            "big-record" => Ok(vec![record(r#"{"p":0}"#, r#"{"n":0}"#, "hostile", vec![b'x'; 3 << 20])]),
            "many-big-records" => Ok((0..20)
                .map(|n| record(r#"{"p":0}"#, &format!(r#"{{"n":{n}}}"#), "t", vec![b'x'; 1 << 20]))
                .collect()),
            "million-records" => {
                Ok((0..1_000_000).map(|n| record(r#"{"p":0}"#, &format!(r#"{{"n":{n}}}"#), "t", Vec::new())).collect())
            }
            "escape" => {
                if SENT.replace(true) {
                    return Ok(Vec::new());
                }
                let target = get("hostile.target");
                match std::fs::read(&target) {
                    Ok(bytes) => ok(&format!("ESCAPED {target}: read {} bytes", bytes.len())),
                    Err(e) => ok(&format!("refused {target}: {e}")),
                }
            }
            "read-fifo" => {
                // `descriptor.read` of a FIFO the test holds open and never writes to,
                // once: its answer is the record.
                use wasi::filesystem::types::{DescriptorFlags, OpenFlags, PathFlags};
                if SENT.replace(true) {
                    return Ok(Vec::new());
                }
                let target = get("hostile.target");
                let Some((dir, relative)) = wasi::filesystem::preopens::get_directories()
                    .into_iter()
                    .find_map(|(dir, path)| Some((dir, target.strip_prefix(&format!("{path}/"))?.to_string())))
                else {
                    return ok(&format!("{target} is not in a granted directory"));
                };
                match dir.open_at(PathFlags::empty(), &relative, OpenFlags::empty(), DescriptorFlags::READ) {
                    Ok(fifo) => match fifo.read(4096, 0) {
                        Ok((bytes, _)) => ok(&format!("read {} bytes", bytes.len())),
                        Err(e) => ok(&format!("read failed: {e:?}")),
                    },
                    Err(e) => ok(&format!("open failed: {e:?}")),
                }
            }
            "stat-files" => {
                use wasi::filesystem::types::{Descriptor, DescriptorFlags, OpenFlags, PathFlags};
                if SENT.replace(true) {
                    return Ok(Vec::new());
                }
                let target = get("hostile.target");
                let Some((preopen, _)) =
                    wasi::filesystem::preopens::get_directories().into_iter().find(|(_, path)| *path == target)
                else {
                    return ok(&format!("{target} is not a granted directory"));
                };
                let described = |descriptor: &Descriptor| match descriptor.stat() {
                    Ok(stat) => format!(
                        "{:?} {} bytes {} links modified {}",
                        stat.type_,
                        stat.size,
                        stat.link_count,
                        stat.data_modification_timestamp.map_or("never".into(), |t| t.seconds.to_string())
                    ),
                    Err(e) => format!("stat failed: {e:?}"),
                };
                let mut answers = vec![format!("dir: {}", described(&preopen).split(' ').next().unwrap_or(""))];
                for name in ["data", "fifo"] {
                    match preopen.open_at(PathFlags::empty(), name, OpenFlags::empty(), DescriptorFlags::READ) {
                        Ok(file) => answers.push(format!("{name}: {}", described(&file))),
                        Err(e) => answers.push(format!("{name}: open failed: {e:?}")),
                    }
                }
                ok(&answers.join("; "))
            }
            "raise-error-flood" => {
                for n in 0..1_000_000 {
                    connector_context::raise_error(&format!("error number {n}"));
                }
                Ok(Vec::new())
            }
            // An error message of 32 MiB: a status trace, stored and sent with every status.
            "huge-fatal-error" => Err(ConnectorError::Fatal("E".repeat(32 << 20))),
            "huge-retriable-error" => Err(ConnectorError::Retriable("R".repeat(32 << 20))),
            "log-flood" => {
                for n in 0..1_000_000 {
                    log(Level::Error, &format!("log line number {n}"));
                }
                ok("logged")
            }
            "print-flood" => {
                for n in 0..100_000 {
                    eprintln!("printed line number {n}");
                    println!("printed line number {n}");
                }
                ok("printed")
            }
            "partition-not-object" => Ok(vec![record(r#"["not","an","object"]"#, r#"{"n":0}"#, "hostile", Vec::new())]),
            "offset-nested" => Ok(vec![record(r#"{"p":0}"#, r#"{"n":{"deep":1}}"#, "hostile", Vec::new())]),
            // Past 64 bits: read as a float, such an integer would be stored rounded (and two
            // partitions rounded alike would be one).
            "partition-wide-integer" => {
                Ok(vec![record(r#"{"id":18446744073709551621}"#, r#"{"n":0}"#, "hostile", Vec::new())])
            }
            "offset-wide-integer" => {
                Ok(vec![record(r#"{"p":0}"#, r#"{"n":-18446744073709551621}"#, "hostile", Vec::new())])
            }
            "invalid-utf8-topic" => {
                // SAFETY: deliberately not UTF-8; the host must refuse it, not trust it.
                let topic = unsafe { String::from_utf8_unchecked(vec![b'b', 0xff, 0xfe, b'd']) };
                Ok(vec![record(r#"{"p":0}"#, r#"{"n":0}"#, &topic, Vec::new())])
            }
            "long-topic" => Ok(vec![record(r#"{"p":0}"#, r#"{"n":0}"#, &"t".repeat(250), Vec::new())]),
            "forge-log" => {
                log(Level::Info, "innocent\nERROR sluice: forged line\r\u{1b}[2K");
                println!("printed\rERROR sluice: forged line");
                connector_context::raise_error("failing\nERROR sluice: forged line");
                ok("forged")
            }
            "huge-offsets" => {
                huge_offsets(count(4_500_000));
                ok("looked up")
            }
            "offsets-flood" => {
                for _ in 0..count(usize::MAX) {
                    std::hint::black_box(sluice::connector::offset_storage_reader::offset(r#"{"p":0}"#));
                }
                ok("flooded")
            }
            "many-headers" => {
                let mut record = record(r#"{"p":0}"#, r#"{"n":0}"#, "hostile", Vec::new());
                record.headers = (0..count(1_000_000))
                    .map(|_| sluice::connector::types::Header { key: String::new(), value: Vec::new() })
                    .collect();
                Ok(vec![record])
            }
            _ => Ok(Vec::new()),
        }
    }

    fn commit() -> Result<(), ConnectorError> {
        sleep_if("commit");
        Ok(())
    }

    fn stop() {
        sleep_if("task-stop");
    }
}

export!(Hostile);
