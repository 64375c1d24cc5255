//! Each import of the world, used from a real plugin: the connector's offset reader
//! (single and batch), `request-task-reconfiguration` from the connector and from a task,
//! `raise-error`, and a task resuming from its committed offset.

use serde_json::json;
use sluice::storage::State;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connector_tick_reads_offsets_its_tasks_committed() {
    let host = TestHost::new(&["testkit"]).await;
    let observe = host.scratch("observed.json");
    let scratch = host.scratch_dir();
    host.start(connector(
        "watcher",
        "testkit",
        &[
            ("topic", "t"),
            ("tasks.max", "2"),
            ("record.count", "30"),
            ("monitor.interval.ms", "50"),
            ("observe.file", &observe),
            ("sandbox.fs.write", &scratch),
        ],
    ))
    .await;
    let done = json!({"seq": 29});
    let observed = wait_until("the connector to observe both tasks finished", || {
        let observed = read_json(&observe)?;
        let batch = &observed["batch"];
        (batch[r#"{"task":"0"}"#] == done && batch[r#"{"task":"1"}"#] == done).then_some(observed)
    })
    .await;
    assert_eq!(observed["single"], observed["batch"], "offset() and offsets() disagree");
    assert_eq!(host.offset("watcher", r#"{"task":"0"}"#), Some(done.clone()));
    assert_eq!(host.offset("watcher", r#"{"task":"1"}"#), Some(done));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connector_requests_reconfiguration_from_tick() {
    let host = TestHost::new(&["testkit"]).await;
    let control = host.scratch("control.json");
    let scratch = host.scratch_dir();
    write_json(&control, json!({"tasks": [{"task.id": "a", "record.count": "5"}]}));
    let config = [
        ("topic", "t"),
        ("tasks.max", "4"),
        ("monitor.interval.ms", "50"),
        ("control.file", control.as_str()),
        ("sandbox.fs.read", scratch.as_str()),
    ];
    host.start(connector("growing", "testkit", &config)).await;
    host.wait_task("growing", 0, State::Running).await;
    write_json(
        &control,
        json!({"tasks": [{"task.id": "a", "record.count": "5"}, {"task.id": "b", "record.count": "5"}]}),
    );
    wait_until("task b to deliver its records", || (host.seq("growing", r#"{"task":"b"}"#) == Some(4)).then_some(()))
        .await;
    assert_eq!(host.status("growing").unwrap().tasks.len(), 2);
    assert_eq!(values_of(&host.values("t"), "b"), sequence("b", 5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_request_is_forwarded_to_the_connector() {
    let host = TestHost::new(&["testkit"]).await;
    let observe = host.scratch("observed.json");
    let scratch = host.scratch_dir();
    let config = [
        ("topic", "t"),
        ("monitor.interval.ms", "50"),
        ("poll.reconfigure.at", "3"),
        ("observe.file", observe.as_str()),
        ("sandbox.fs.write", scratch.as_str()),
    ];
    host.start(connector("asker", "testkit", &config)).await;
    let first = host.wait_task("asker", 0, State::Running).await;
    wait_until("task-configs to be called again", || {
        (read_json(&observe)?["task_configs_calls"].as_u64()? >= 2).then_some(())
    })
    .await;
    // Same configs came back: the task was not restarted.
    let task = &host.status("asker").unwrap().tasks[0];
    assert_eq!((task.instance, task.state), (first.instance, State::Running));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_resumes_from_its_committed_offset_after_a_restart() {
    let host = TestHost::new(&["testkit"]).await;
    let config = [("topic", "t"), ("record.count", "300"), ("records.per.second", "150")];
    host.start(connector("resumer", "testkit", &config)).await;
    wait_until("some records", || (host.seq("resumer", r#"{"task":"0"}"#)? >= 20).then_some(())).await;
    let host = host.reopen().await;
    let stopped_at = host.seq("resumer", r#"{"task":"0"}"#).unwrap();
    assert!(stopped_at < 299, "the first run should have been stopped part-way (at {stopped_at})");
    host.start(connector("resumer", "testkit", &config)).await;
    wait_until("all 300 records", || (host.seq("resumer", r#"{"task":"0"}"#)? == 299).then_some(())).await;
    assert_eq!(host.values("t"), sequence("0", 300), "records lost or repeated across the restart");
}
