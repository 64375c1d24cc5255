//! Every released version of the world in one host: a `sluice:connector@0.1.0` plugin
//! (`testkit`, built from its own 0.1.0 bindings, as a plugin built before 0.2.0 was), a
//! 0.2.0 one (`counter-v0-2`, whose records carry their own bytes), 0.3.0 ones (the Rust
//! SDK's `counter`, whose batches are packed) and a 0.4.0 one (`counter-py`, whose records
//! are bytes too) run side by side; a 0.4.0 batch that breaks its layout fails its task with
//! the reason; the `done` flag (0.2.0 on) finishes tasks and connectors.

use sluice::storage::State;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_of_every_released_version_run_side_by_side() {
    let host = TestHost::new(&["testkit", "counter-v0-2", "counter", "counter-py"]).await;
    let registry = host.herder.registry();
    assert_eq!(registry.get("testkit").unwrap().pre().version(), "0.1.0");
    assert_eq!(registry.get("counter-v0-2").unwrap().pre().version(), "0.2.0");
    assert_eq!(registry.get("counter").unwrap().pre().version(), "0.3.0");
    assert_eq!(registry.get("counter-py").unwrap().pre().version(), "0.4.0");

    host.start(connector("old", "testkit", &[("topic", "old"), ("tasks.max", "2"), ("record.count", "40")])).await;
    let small = |topic| [("topic", topic), ("batch.size", "10"), ("record.size", "8")];
    host.start(connector("middle", "counter-v0-2", &small("middle"))).await;
    host.start(connector("new", "counter", &[("topic", "new"), ("tasks.max", "2"), ("record.count", "40")])).await;
    host.start(connector("newest", "counter-py", &small("newest"))).await;
    let (old, middle, new, newest) = wait_until("every version delivered its records", || {
        let (old, middle, new, newest) =
            (host.values("old"), host.values("middle"), host.values("new"), host.values("newest"));
        (old.len() >= 80 && middle.len() >= 100 && new.len() >= 80 && newest.len() >= 100)
            .then_some((old, middle, new, newest))
    })
    .await;
    for task in 0..2 {
        assert_eq!(values_of(&old, &task.to_string()), sequence(&task.to_string(), 40), "0.1.0 task {task}");
        // 0.3.0: every record's bytes arrive whole through the batch's spans, in order.
        let counted: Vec<&String> = new.iter().filter(|v| v.starts_with(&format!("{task}-"))).collect();
        let expected: Vec<String> =
            (0..40).map(|seq| String::from_utf8(counter::generator::value(task, seq, 64)).unwrap()).collect();
        assert_eq!(counted, expected.iter().collect::<Vec<_>>(), "0.3.0 task {task}");
        assert_eq!(host.seq("new", &format!(r#"{{"counter":{task}}}"#)), Some(39));
    }
    // 0.2.0 and 0.4.0: "<n>" then dots, 8 bytes each, in order.
    for (version, name, values) in [("0.2.0", "middle", &middle), ("0.4.0", "newest", &newest)] {
        for (n, value) in values.iter().take(100).enumerate() {
            assert_eq!(value, &format!("{n:.<8}"), "{version} record {n}");
        }
        assert!(host.seq(name, r#"{"counter":0}"#).is_some_and(|seq| seq >= 99), "{version}");
    }
    // None finishes: 0.1.0 cannot say so, and no counter was asked to.
    for name in ["old", "middle", "new", "newest"] {
        let status = host.status(name).unwrap();
        assert_eq!(status.connector.state, State::Running, "{name}: {status:?}");
        assert!(status.tasks.iter().all(|t| t.state == State::Running), "{name}: {status:?}");
    }
}

/// A 0.4.0 batch whose bytes break the layout its WIT documents fails its task, with the
/// record or list named, before anything of it is stored; the plugin's good batches go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_4_batch_that_breaks_its_layout_fails_its_task_with_the_reason() {
    let host = TestHost::new(&["counter-py"]).await;
    let cases = [
        ("flags", "record 3 of the batch has unknown flags 0x15"),
        ("length", "the batch's records are 5199 bytes, not a whole number of 52-byte records"),
        ("span", "value span 1790..1798 is past the end of the batch's 1790 bytes of data"),
    ];
    for (corrupt, _) in cases {
        let config = [("topic", corrupt), ("batch.size", "100"), ("record.size", "8"), ("corrupt", corrupt)];
        host.start(connector(corrupt, "counter-py", &config)).await;
    }
    for (corrupt, reason) in cases {
        let trace = host.wait_task(corrupt, 0, State::Failed).await.trace.unwrap_or_default();
        assert!(trace.contains(reason), "{corrupt}: {trace}");
        assert!(host.values(corrupt).is_empty(), "{corrupt}: nothing of the broken batch was stored");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_that_are_done_finish_their_connector_with_every_record_committed() {
    let host = TestHost::new(&["counter"]).await;
    let config = [("topic", "done"), ("tasks.max", "3"), ("record.count", "250"), ("finish", "true")];
    host.start(connector("bounded", "counter", &config)).await;
    let status = host.wait_state("bounded", State::Finished).await;
    assert_eq!(status.tasks.len(), 3);
    assert!(status.tasks.iter().all(|t| t.state == State::Finished && t.trace.is_none()), "{status:?}");
    let values = host.values("done");
    assert_eq!(values.len(), 750, "every record once");
    for task in 0..3 {
        assert_eq!(host.seq("bounded", &format!(r#"{{"counter":{task}}}"#)), Some(249), "task {task}'s last offset");
    }

    // A restart of a finished connector resumes after the last record: nothing again.
    host.herder
        .restart(&sluice::storage::Namespace::new(sluice::config::DEFAULT_TENANT, "bounded"), true, false)
        .await
        .unwrap();
    wait_until("the restarted connector finished again", || {
        let status = host.status("bounded")?;
        (status.connector.state == State::Finished
            && status.tasks.len() == 3
            && status.tasks.iter().all(|t| t.state == State::Finished))
        .then_some(())
    })
    .await;
    assert_eq!(host.values("done").len(), 750, "a restart sent nothing twice");
}
