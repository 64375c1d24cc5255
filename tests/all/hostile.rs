//! The hostile plugin suite: every attack runs beside a well-behaved connector in the
//! same host; only the attacker's connector or task fails (or its attempt is refused),
//! with the reason in plain words, and the neighbour keeps delivering every record.

use sluice::storage::State;

use crate::common::*;

enum Expect {
    /// The task ends FAILED and its trace contains all of these.
    TaskFailed(&'static [&'static str]),
    /// The connector ends FAILED and its trace contains all of these.
    ConnectorFailed(&'static [&'static str]),
    /// The task stays RUNNING and delivers a record whose value contains this.
    Delivers(&'static str),
}

async fn attack(name: &str, extra: &[(&str, &str)], expect: Expect) -> TestHost {
    let host = TestHost::new(&["hostile", "counter"]).await;
    start_neighbour(&host).await;
    let mut config = vec![("topic", "hostile"), ("hostile.attack", name), ("sandbox.call.timeout.ms", "1000")];
    config.extend_from_slice(extra);
    host.start(connector("attacker", "hostile", &config)).await;
    match expect {
        Expect::TaskFailed(words) => {
            let task = host.wait_task("attacker", 0, State::Failed).await;
            let trace = task.trace.unwrap();
            for word in words {
                assert!(trace.contains(word), "{name}: expected {word:?} in the task's trace {trace:?}");
            }
            assert_eq!(host.status("attacker").unwrap().connector.state, State::Running);
        }
        Expect::ConnectorFailed(words) => {
            let status = host.wait_state("attacker", State::Failed).await;
            let trace = status.connector.trace.unwrap();
            for word in words {
                assert!(trace.contains(word), "{name}: expected {word:?} in the connector's trace {trace:?}");
            }
        }
        Expect::Delivers(text) => {
            wait_until(&format!("{name}: a record with {text:?}"), || {
                host.values("hostile").iter().any(|v| v.contains(text)).then_some(())
            })
            .await;
            assert_eq!(host.status("attacker").unwrap().tasks[0].state, State::Running);
        }
    }
    assert_neighbour_keeps_delivering(&host).await;
    host
}

/// Floods finish, but a call that runs long is throttled (see `sandbox::LONG_CALL`): give
/// it a deadline it can meet on a loaded machine, so the test is about the flood.
const SLOW_BUT_FINITE: (&str, &str) = ("sandbox.call.timeout.ms", "30000");

macro_rules! hostile_test {
    ($test:ident, $attack:literal, $extra:expr, $expect:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            attack($attack, $extra, $expect).await;
        }
    };
}

hostile_test!(infinite_loop_in_poll, "loop-in-poll", &[], Expect::TaskFailed(&["poll did not return within 1000 ms"]));
hostile_test!(
    infinite_loop_in_tick,
    "loop-in-tick",
    &[],
    Expect::ConnectorFailed(&["tick did not return within 1000 ms"])
);
hostile_test!(
    infinite_loop_in_start,
    "loop-in-start",
    &[],
    Expect::ConnectorFailed(&["start did not return within 1000 ms"])
);
// Filling 64 MiB is a long call on a loaded machine (and long calls are throttled): the
// deadline is not what these test.
hostile_test!(
    memory_grown_until_the_cap,
    "grow-memory",
    &[SLOW_BUT_FINITE],
    Expect::TaskFailed(&["exceeded memory cap of 64 MiB"])
);
hostile_test!(
    one_huge_allocation,
    "huge-alloc",
    &[SLOW_BUT_FINITE],
    Expect::TaskFailed(&["exceeded memory cap of 64 MiB"])
);
// Rust keeps its stack in linear memory: overflowing it is an out-of-bounds access (just
// under 4 GiB, which the trace says is most likely a stack overflow), and the backtrace
// names the recursing function.
hostile_test!(
    unbounded_recursion,
    "recursion",
    &[],
    Expect::TaskFailed(&["trap in poll", "out of bounds memory access", "stack overflowed", "recurse"])
);
hostile_test!(trap_unreachable, "trap", &[], Expect::TaskFailed(&["trap in poll", "unreachable"]));

/// What the plugin wrote to stderr in the call that trapped leads the trace: here Rust's
/// panic message, before the trap and its wasm backtrace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_message_leads_the_trace() {
    let extra = [("hostile.panic.cause", "the input ended early")];
    let expect = Expect::TaskFailed(&["hostile panic: the input ended early", "trap in poll", "unreachable"]);
    let host = attack("panic", &extra, expect).await;
    let trace = host.status("attacker").unwrap().tasks[0].trace.clone().unwrap();
    assert!(trace.starts_with("thread '"), "Rust's panic line first: {trace}");
    let (cause, trap) = (trace.find("the input ended early").unwrap(), trace.find("trap in poll").unwrap());
    assert!(cause < trap, "the panic message before the trap: {trace}");
}
hostile_test!(
    record_over_the_cap,
    "big-record",
    &[],
    Expect::TaskFailed(&["record 0 of 3.0 MiB exceeds sandbox.record.max.bytes (1 MiB)"])
);
// One call may copy out of the guest at most the instance's memory cap (here 512 MiB, so
// the batch is lifted), and the batch cap then refuses it.
hostile_test!(
    a_million_records_in_one_batch,
    "million-records",
    &[("sandbox.memory.max.bytes", "536870912"), SLOW_BUT_FINITE],
    Expect::TaskFailed(&["poll batch of 1000000 records", "exceeds sandbox.batch.max.bytes"])
);
hostile_test!(
    a_batch_over_the_cap,
    "many-big-records",
    &[],
    Expect::TaskFailed(&["poll batch of 20 records, 20.0 MiB, exceeds sandbox.batch.max.bytes (16 MiB)"])
);
hostile_test!(
    raise_error_a_million_times,
    "raise-error-flood",
    &[SLOW_BUT_FINITE],
    Expect::TaskFailed(&["raise-error: error number 0"])
);
/// Two connectors spinning in `start` and in `task-configs` slow each other down (each
/// call is held back so the other can run, and the time held back is added to its
/// deadline), but a stop does not wait for their stretched deadlines: both calls are given
/// up at the stop deadline (the lifecycle timeout, 10 s), as a tick or a poll is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spinning_lifecycle_calls_are_given_up_at_the_stop_deadline() {
    let host = TestHost::new(&["hostile"]).await;
    for (name, attack) in [("in-start", "loop-in-start"), ("in-task-configs", "loop-in-task-configs")] {
        host.start(connector(name, "hostile", &[("topic", "hostile"), ("hostile.attack", attack)])).await;
    }
    let stopping = std::time::Instant::now();
    host.herder.shutdown().await;
    // Their own deadlines, stretched by the time each was held back, ran past a minute.
    let took = stopping.elapsed();
    assert!(took < std::time::Duration::from_secs(45), "the stop took {took:?}");
}

/// A `validate` that names 200,000 problems: the host keeps the first 1,000 and says how
/// many more there were (each one costs every validate request and its answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_validate_problems_is_cut() {
    let host = TestHost::new(&["hostile"]).await;
    let config = connector("flood", "hostile", &[("topic", "hostile"), ("hostile.attack", "problems-flood")]);
    let problems = host.herder.problems(&config).await;
    assert_eq!(problems.len(), 1001, "{:?}", problems.last());
    assert_eq!(problems[0].key.as_deref(), Some("key.0"));
    assert!(problems[1000].reason.contains("199000 more problems"), "{:?}", problems[1000]);
}

/// A plugin's own error message is cut to 64 KiB in the status, as `raise-error`'s is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_error_message_is_cut_in_the_status() {
    let host = attack("huge-fatal-error", &[], Expect::TaskFailed(&["fatal error: EEEE"])).await;
    let trace = host.status("attacker").unwrap().tasks[0].trace.clone().unwrap();
    assert!(trace.len() <= 65 << 10, "a trace of {} bytes", trace.len());
}
hostile_test!(log_a_million_times, "log-flood", &[SLOW_BUT_FINITE], Expect::Delivers("logged"));
hostile_test!(print_flood_on_stdout_and_stderr, "print-flood", &[SLOW_BUT_FINITE], Expect::Delivers("printed"));
hostile_test!(
    partition_not_an_object,
    "partition-not-object",
    &[],
    Expect::TaskFailed(&["connector 'attacker' task 0: record 0", "partition is not a JSON object"])
);
hostile_test!(
    offset_with_a_nested_value,
    "offset-nested",
    &[],
    Expect::TaskFailed(&["offset is", "\"n\" is not a primitive"])
);
hostile_test!(
    partition_with_an_integer_past_64_bits,
    "partition-wide-integer",
    &[],
    Expect::TaskFailed(&["record 0", "partition is", "\"id\" is an integer too large to be kept exactly"])
);
hostile_test!(
    offset_with_an_integer_past_64_bits,
    "offset-wide-integer",
    &[],
    Expect::TaskFailed(&["record 0", "offset is", "\"n\" is an integer too large to be kept exactly"])
);
hostile_test!(invalid_utf8_topic, "invalid-utf8-topic", &[], Expect::TaskFailed(&["trap in poll", "utf-8"]));
hostile_test!(
    topic_longer_than_249,
    "long-topic",
    &[],
    Expect::TaskFailed(&["topic is 250 characters long, more than 249"])
);

/// KIP-1004: more task configs than `tasks.max` fail the connector, naming both counts;
/// with `tasks.max.enforce=false` the first `tasks.max` run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_task_configs_than_tasks_max() {
    let host = TestHost::new(&["hostile", "counter"]).await;
    start_neighbour(&host).await;
    let attack = [("topic", "hostile"), ("hostile.attack", "too-many-tasks"), ("tasks.max", "2")];
    host.start(connector("attacker", "hostile", &attack)).await;
    let failed = wait_until("the attacker FAILED", || {
        let status = host.status("attacker")?;
        (status.connector.state == State::Failed).then_some(status)
    })
    .await;
    let trace = failed.connector.trace.clone().unwrap_or_default();
    assert!(
        trace.contains("has generated 205 tasks, which is greater than 2") && trace.contains("tasks.max.enforce"),
        "{trace}"
    );
    assert!(failed.tasks.is_empty(), "no task started: {failed:?}");

    let lenient = [attack.as_slice(), &[("tasks.max.enforce", "false")]].concat();
    host.start(connector("lenient", "hostile", &lenient)).await;
    let status = wait_until("two tasks RUNNING", || {
        let status = host.status("lenient")?;
        (status.tasks.len() == 2 && status.tasks.iter().all(|t| t.state == State::Running)).then_some(status)
    })
    .await;
    assert_eq!(status.connector.state, State::Running);
    assert_neighbour_keeps_delivering(&host).await;
}

/// `..`, a symlink out of the grant, `/etc/passwd`, and a directory granted to another
/// connector: every attempt is refused, nothing escapes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_escapes_are_refused() {
    let granted = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let granted_dir = std::fs::canonicalize(granted.path()).unwrap();
    let inner = granted_dir.join("inner");
    std::fs::create_dir(&inner).unwrap();
    std::fs::write(outside.path().join("secret"), b"secret").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), inner.join("link")).unwrap();
    let outside_secret = std::fs::canonicalize(outside.path()).unwrap().join("secret");
    let targets = [
        format!("{}/{}{}", inner.display(), "../".repeat(12), outside_secret.display()),
        inner.join("link").display().to_string(),
        "/etc/passwd".to_string(),
        outside_secret.display().to_string(),
    ];
    let host = TestHost::new(&["hostile", "counter"]).await;
    start_neighbour(&host).await;
    // Another connector is granted the "outside" directory; the attacker is not.
    let outside_grant = std::fs::canonicalize(outside.path()).unwrap().display().to_string();
    host.start(connector("owner", "counter", &[("topic", "owner"), ("sandbox.fs.read", &outside_grant)])).await;
    for (n, target) in targets.iter().enumerate() {
        let grant = granted_dir.display().to_string();
        let config = [
            ("topic", "hostile"),
            ("hostile.attack", "escape"),
            ("hostile.target", target.as_str()),
            ("sandbox.fs.read", &grant),
        ];
        host.start(connector(&format!("attacker-{n}"), "hostile", &config)).await;
    }
    let values = wait_until("every attempt reported", || {
        let values = host.values("hostile");
        (values.len() == targets.len()).then_some(values)
    })
    .await;
    for value in &values {
        assert!(value.starts_with("refused "), "an escape succeeded: {value}");
    }
    assert_neighbour_keeps_delivering(&host).await;
}

/// Opening a FIFO waits in the kernel for its writer, where no deadline reaches, and the
/// thread is never given back: the host refuses the open at once (`would-block`), with or
/// without a writer, and the task goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_a_fifo_is_refused_at_once_with_or_without_a_writer() {
    let granted = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(granted.path()).unwrap();
    let fifo = dir.join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success(), "mkfifo");
    let config = [("hostile.target", fifo.to_str().unwrap()), ("sandbox.fs.read", dir.to_str().unwrap())];
    attack("read-fifo", &config, Expect::Delivers("open failed: ErrorCode { code: 1, name: \"would-block\"")).await;
    // Opened for reading and writing by the test, which never blocks: it has a writer.
    let writer = std::fs::OpenOptions::new().read(true).write(true).open(&fifo).unwrap();
    attack("read-fifo", &config, Expect::Delivers("open failed: ErrorCode { code: 1, name: \"would-block\"")).await;
    drop(writer);
}

/// The host answers `descriptor.stat` itself (`runtime::file_reads`) as wasmtime-wasi
/// would: a directory, a regular file with its size, hard links and modification time;
/// a FIFO (held open by the test, never written to) is not opened at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stat_answers_as_wasi_would_for_a_directory_a_file_and_a_fifo() {
    let granted = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(granted.path()).unwrap();
    std::fs::write(dir.join("data"), vec![b'x'; 1234]).unwrap();
    std::fs::hard_link(dir.join("data"), dir.join("data-again")).unwrap();
    let modified = std::fs::metadata(dir.join("data"))
        .unwrap()
        .modified()
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let fifo = dir.join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success(), "mkfifo");
    let writer = std::fs::OpenOptions::new().read(true).write(true).open(&fifo).unwrap();
    let config = [("hostile.target", dir.to_str().unwrap()), ("sandbox.fs.read", dir.to_str().unwrap())];
    let expected = format!(
        "dir: DescriptorType::Directory; data: DescriptorType::RegularFile 1234 bytes 2 links modified {modified}; \
         fifo: open failed: ErrorCode {{ code: 1, name: \"would-block\""
    );
    attack("stat-files", &config, Expect::Delivers(Box::leak(expected.into_boxed_str()))).await;
    drop(writer);
}

/// Two tasks whose every poll is 400 ms of honest CPU work, under a 1 s deadline: they
/// run long enough to be throttled (each is held back while the other runs), and the time
/// held back does not count against the deadline, so a busy host slows them, never fails
/// them. Counting it would make each poll take over 2 s. (400 ms, not more: the deadline
/// is wall-clock, and the tests running beside this one on a 2-core machine take their
/// share of it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_honest_calls_on_a_busy_host_are_slowed_not_failed() {
    let host = TestHost::new(&["hostile", "counter"]).await;
    start_neighbour(&host).await;
    let config = [
        ("topic", "hostile"),
        ("hostile.attack", "work"),
        ("hostile.work.ms", "400"),
        ("sandbox.call.timeout.ms", "1000"),
        ("tasks.max", "2"),
    ];
    host.start(connector("attacker", "hostile", &config)).await;
    wait_until("three polls' records from the working tasks", || {
        (host.values("hostile").iter().filter(|v| *v == "worked").count() >= 3).then_some(())
    })
    .await;
    let status = host.status("attacker").unwrap();
    assert_eq!(status.tasks.len(), 2);
    for task in &status.tasks {
        assert_eq!(task.state, State::Running, "{:?}", task.trace);
    }
    assert_neighbour_keeps_delivering(&host).await;
}

/// A plugin that keeps 1 MiB of every poll fills its sandbox within a second, every time:
/// recycled at once for good, it was made anew 25 times a second with nothing in its
/// status. After three quick recycles in a row the next sandbox waits, growing, and the
/// status says why; the neighbour keeps delivering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_recycled_again_and_again_backs_off_saying_why() {
    let host = TestHost::new(&["hostile", "counter"]).await;
    start_neighbour(&host).await;
    let config = [
        ("topic", "hostile"),
        ("hostile.attack", "leak-per-poll"),
        ("sandbox.memory.max.bytes", "33554432"),
        ("sandbox.memory.recycle.percent", "50"),
    ];
    host.start(connector("leaky", "hostile", &config)).await;
    let task = wait_until("the status saying the recycles back off", || {
        host.status("leaky")?.tasks.into_iter().find(|t| t.trace.as_deref().is_some_and(|t| t.contains("in a row")))
    })
    .await;
    assert_eq!(task.state, State::Restarting);
    let trace = task.trace.unwrap();
    assert!(
        trace.contains("sandbox.memory.recycle.percent") && trace.contains("the next sandbox starts in"),
        "{trace}"
    );
    assert!(host.values("hostile").iter().any(|v| v == "leaked"), "it delivers between recycles");
    assert_neighbour_keeps_delivering(&host).await;
    host.herder.shutdown().await;
}
