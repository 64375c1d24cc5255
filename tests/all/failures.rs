//! A connector's `raise-error`, a trap in a task's `poll` and a deadline overrun each fail
//! exactly the affected connector or task, with the reason in its trace, while another
//! connector in the same host keeps delivering; and restart with backoff works.

use serde_json::json;
use sluice::storage::State;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raise_error_from_the_connector_fails_only_that_connector() {
    let host = TestHost::new(&["testkit", "counter"]).await;
    start_neighbour(&host).await;
    let control = host.scratch("control.json");
    let scratch = host.scratch_dir();
    write_json(&control, json!({"tasks": [{"task.id": "0"}], "raise_error": "source is gone"}));
    let config =
        [("topic", "t"), ("monitor.interval.ms", "50"), ("control.file", &control), ("sandbox.fs.read", &scratch)];
    host.start(connector("doomed", "testkit", &config)).await;
    let status = host.wait_state("doomed", State::Failed).await;
    assert_eq!(status.connector.trace.as_deref(), Some("raise-error: source is gone"));
    assert_neighbour_keeps_delivering(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trap_in_poll_fails_only_that_task() {
    let host = TestHost::new(&["testkit", "counter"]).await;
    start_neighbour(&host).await;
    let control = host.scratch("control.json");
    let scratch = host.scratch_dir();
    // One record per poll for the trapping task: the poll that traps at 5 then holds no
    // earlier record, so exactly 0..=4 are delivered (with the default batch a slow poll
    // could carry 4 and 5 together, and trap with 4 in it).
    write_json(
        &control,
        json!({"tasks": [{"task.id": "ok"}, {"task.id": "bad", "poll.trap.at": "5", "batch.size": "1"}]}),
    );
    let config = [("topic", "t"), ("tasks.max", "2"), ("control.file", &control), ("sandbox.fs.read", &scratch)];
    host.start(connector("trapper", "testkit", &config)).await;
    let failed = host.wait_task("trapper", 1, State::Failed).await;
    let trace = failed.trace.unwrap();
    assert!(trace.starts_with("trap in poll:") && trace.contains("unreachable"), "{trace}");
    assert_eq!(host.seq("trapper", r#"{"task":"bad"}"#), Some(4), "records before the trap are delivered");
    let status = host.status("trapper").unwrap();
    assert_eq!((status.connector.state, status.tasks[0].state), (State::Running, State::Running));
    let ok_now = host.seq("trapper", r#"{"task":"ok"}"#).unwrap_or(0);
    wait_until("the healthy task to go on", || (host.seq("trapper", r#"{"task":"ok"}"#)? > ok_now + 10).then_some(()))
        .await;
    assert_neighbour_keeps_delivering(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_overrun_fails_the_task_with_the_reason() {
    let host = TestHost::new(&["testkit", "counter"]).await;
    start_neighbour(&host).await;
    let config = [("topic", "t"), ("poll.loop.at", "3"), ("sandbox.call.timeout.ms", "300")];
    host.start(connector("spinner", "testkit", &config)).await;
    let failed = host.wait_task("spinner", 0, State::Failed).await;
    // Time the fairness throttle held it back is added (and said) after the deadline.
    let trace = failed.trace.unwrap();
    assert!(trace.starts_with("poll did not return within 300 ms"), "{trace}");
    assert_eq!(host.status("spinner").unwrap().connector.state, State::Running);
    assert_neighbour_keeps_delivering(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_task_restarts_with_backoff_and_loses_nothing() {
    let host = TestHost::new(&["testkit"]).await;
    let marker = host.scratch("trapped");
    let scratch = host.scratch_dir();
    let config = [
        ("topic", "t"),
        ("record.count", "40"),
        ("poll.trap.at", "10"),
        ("trap.marker.file", &marker),
        ("sandbox.fs.write", &scratch),
        ("restart.policy", "on-failure"),
        ("restart.backoff.initial.ms", "200"),
    ];
    host.start(connector("phoenix", "testkit", &config)).await;
    let first = host.wait_task("phoenix", 0, State::Running).await;
    wait_until("all 40 records after the restart", || (host.seq("phoenix", r#"{"task":"0"}"#)? == 39).then_some(()))
        .await;
    assert!(std::path::Path::new(&marker).exists(), "the task must have trapped once");
    let task = host.wait_task("phoenix", 0, State::Running).await;
    assert!(task.instance > first.instance, "the task must run in a new sandbox instance");
    assert_eq!(host.values("t"), sequence("0", 40));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_connector_restarts_with_backoff() {
    let host = TestHost::new(&["testkit"]).await;
    let control = host.scratch("control.json");
    let scratch = host.scratch_dir();
    write_json(&control, json!({"tasks": [{"task.id": "0"}], "raise_error": "flaky"}));
    let config = [
        ("topic", "t"),
        ("monitor.interval.ms", "50"),
        ("control.file", &control),
        ("sandbox.fs.read", &scratch),
        ("restart.policy", "on-failure"),
        ("restart.backoff.initial.ms", "100"),
    ];
    host.start(connector("flaky", "testkit", &config)).await;
    host.wait_state("flaky", State::Failed).await;
    write_json(&control, json!({"tasks": [{"task.id": "0"}]}));
    let status = host.wait_state("flaky", State::Running).await;
    assert_eq!(status.connector.trace, None);
}

/// A changed config restarts the connector and its tasks; when the new connector then
/// fails to start, no task of the old config is left looking RUNNING while nothing runs
/// it (nor restartable: Connect's 404 for a task that is not there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connector_whose_new_config_fails_to_start_shows_no_stale_tasks() {
    let host = TestHost::new(&["testkit"]).await;
    let config = [("topic", "t"), ("tasks.max", "2")];
    host.start(connector("changed", "testkit", &config)).await;
    host.wait_task("changed", 1, State::Running).await;
    let ns = sluice::storage::Namespace::new(sluice::config::DEFAULT_TENANT, "changed");
    host.herder
        .patch_config(&ns, |_| {
            Ok(connector("changed", "testkit", &[("topic", "t"), ("tasks.max", "2"), ("start.error", "unreachable")]))
        })
        .await
        .unwrap();
    let status = host.wait_state("changed", State::Failed).await;
    assert_eq!(status.connector.trace.as_deref(), Some("fatal error: unreachable"));
    assert!(status.tasks.is_empty(), "tasks of the old config shown after it was replaced: {:?}", status.tasks);
    let restart = host.herder.restart_task(&ns, 0).await;
    assert!(matches!(restart, Err(sluice::connect::HerderError::TaskNotFound(..))), "{restart:?}");
}

/// An update or a delete the store refuses (here: another process holds the database's
/// write lock past its busy timeout, as Kafka away refuses it on Kafka storage) is an
/// error and changes nothing: the connector runs on with its old config, and can be
/// deleted once the store takes writes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_or_delete_the_store_refuses_leaves_the_connector_running_as_it_was() {
    let host = TestHost::new(&["counter"]).await;
    let ns = sluice::storage::Namespace::new(sluice::config::DEFAULT_TENANT, "c");
    // Its own writes wait on the lock too, and fail the task: restarted at once.
    let restarts = [("restart.policy", "on-failure"), ("restart.backoff.initial.ms", "100")];
    let mut old = vec![("topic", "old"), ("records.per.second", "200")];
    old.extend_from_slice(&restarts);
    host.start(connector("c", "counter", &old)).await;
    wait_until("records", || (!host.values("old").is_empty()).then_some(())).await;

    let db = rusqlite::Connection::open(host.data.path().join("sluice.db")).unwrap();
    db.execute_batch("BEGIN IMMEDIATE").unwrap();
    let mut new = vec![("topic", "new"), ("records.per.second", "200")];
    new.extend_from_slice(&restarts);
    let update = connector("c", "counter", &new);
    assert!(host.herder.put_config(update).await.is_err(), "the store took the new config");
    assert!(host.herder.delete(&ns).await.is_err(), "the store took the delete");
    db.execute_batch("COMMIT").unwrap();

    let (config, _) = host.herder.connector(&ns).await.expect("still there");
    assert_eq!(config.get("topic"), Some("old"));
    let before = host.values("old").len();
    wait_until("records go on to the old topic", || (host.values("old").len() > before).then_some(())).await;
    host.wait_task("c", 0, State::Running).await;
    assert_eq!(host.status("c").unwrap().connector.state, State::Running);
    host.herder.delete(&ns).await.expect("deleted once the store takes writes");
    assert!(host.herder.connector(&ns).await.is_none());
    assert!(host.values("new").is_empty());
}
