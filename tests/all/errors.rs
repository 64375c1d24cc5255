//! Kafka Connect's error handling for source records: a record the host refuses fails its
//! task (`errors.tolerance=none`, the default), or is skipped with its offset committed in
//! order and a copy in the dead-letter topic (`errors.tolerance=all`).

use sluice::config::DEFAULT_TENANT;
use sluice::storage::State;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_record_goes_to_the_dead_letter_topic_and_the_task_runs_on() {
    let host = TestHost::new(&["testkit"]).await;
    let config = || {
        connector(
            "tolerant",
            "testkit",
            &[
                ("topic", "t"),
                ("record.count", "20"),
                ("poll.oversize.at", "7"),
                ("errors.tolerance", "all"),
                ("errors.deadletterqueue.topic.name", "dlq"),
                ("errors.log.enable", "true"),
            ],
        )
    };
    host.start(config()).await;
    wait_until("all 20 offsets committed", || (host.seq("tolerant", r#"{"task":"0"}"#)? == 19).then_some(())).await;
    let expected: Vec<String> = (0..20).filter(|&n| n != 7).map(|n| format!("0-{n}")).collect();
    assert_eq!(values_of(&host.values("t"), "0"), expected);
    let dead = host.herder.services().stores.local().read(DEFAULT_TENANT, "dlq", 0, 10).unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    let header = |name: &str| {
        dead[0].record.headers.iter().find(|(k, _)| k == name).map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    };
    assert!(header("__connect.errors.exception.message").unwrap().contains("exceeds sandbox.record.max.bytes"));
    assert_eq!(header("__connect.errors.connector.name").as_deref(), Some("tolerant"));
    assert_eq!(header("__connect.errors.source.partition").as_deref(), Some(r#"{"task":"0"}"#));
    assert_eq!(header("__connect.errors.truncated").as_deref(), Some("true"));
    assert_eq!(header("__connect.errors.stage").as_deref(), Some("TASK_POLL"));
    assert_eq!(header("__connect.errors.class.name"), None);
    assert!(dead[0].record.value.as_ref().unwrap().starts_with(b"0-7"));
    let task = host.wait_task("tolerant", 0, State::Running).await;
    assert_eq!(task.records_refused, 1, "{task:?}");

    // The refused record's offset was committed: a restart does not meet it again.
    let host = host.reopen().await;
    host.start(config()).await;
    host.wait_task("tolerant", 0, State::Running).await;
    wait_until("the restarted task to settle", || (host.seq("tolerant", r#"{"task":"0"}"#)? == 19).then_some(())).await;
    assert!(host.herder.stop("tolerant").await);
    assert_eq!(host.herder.services().stores.local().read(DEFAULT_TENANT, "dlq", 0, 10).unwrap().len(), 1);
    assert_eq!(values_of(&host.values("t"), "0"), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tolerance_a_refused_record_fails_the_task_and_commits_nothing_past_it() {
    let host = TestHost::new(&["testkit"]).await;
    host.start(connector("strict", "testkit", &[("topic", "t"), ("record.count", "20"), ("poll.oversize.at", "7")]))
        .await;
    let task = host.wait_task("strict", 0, State::Failed).await;
    assert!(task.trace.unwrap().contains("exceeds sandbox.record.max.bytes"));
    assert!(host.seq("strict", r#"{"task":"0"}"#).unwrap_or(0) < 7);
}
