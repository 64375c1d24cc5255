//! Incremental reconfiguration: unchanged task configs restart nothing; a changed task is
//! the only one restarted, after committing its offsets; the task count shrinks and grows.

use serde_json::{Value, json};
use sluice::storage::State;

use crate::common::*;

fn instances(host: &TestHost) -> Vec<(u32, u64, State)> {
    host.status("r").unwrap().tasks.iter().map(|t| (t.id, t.instance, t.state)).collect()
}

async fn all_running(host: &TestHost, count: usize) -> Vec<(u32, u64, State)> {
    wait_until(&format!("{count} tasks RUNNING"), || {
        let tasks = instances(host);
        (tasks.len() == count && tasks.iter().all(|t| t.2 == State::Running)).then_some(tasks)
    })
    .await
}

async fn task_configs_calls_above(observe: &str, calls: u64) {
    wait_until("task-configs to be called again", || {
        (read_json(observe)?["task_configs_calls"].as_u64()? > calls).then_some(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_changed_tasks_restart() {
    let host = TestHost::new(&["testkit"]).await;
    let control = host.scratch("control.json");
    let observe = host.scratch("observed.json");
    let scratch = host.scratch_dir();
    let tasks = |list: Value| json!({ "tasks": list });
    write_json(&control, tasks(json!([{"task.id": "a"}, {"task.id": "b"}, {"task.id": "c"}])));
    let config = [
        ("topic", "t"),
        ("tasks.max", "3"),
        ("records.per.second", "100"),
        ("monitor.interval.ms", "50"),
        ("control.file", control.as_str()),
        ("observe.file", observe.as_str()),
        ("sandbox.fs.write", scratch.as_str()),
    ];
    host.start(connector("r", "testkit", &config)).await;
    let before = all_running(&host, 3).await;

    // The control file's text changes but the task configs do not.
    let calls = read_json(&observe).and_then(|o| o["task_configs_calls"].as_u64()).unwrap_or(0);
    std::fs::write(&control, format!("{}\n\n", tasks(json!([{"task.id": "a"}, {"task.id": "b"}, {"task.id": "c"}]))))
        .unwrap();
    task_configs_calls_above(&observe, calls).await;
    assert_eq!(instances(&host), before, "unchanged configs must not restart any task");

    // Change task 1 only.
    wait_until("task b to commit something", || host.seq("r", r#"{"task":"b"}"#)).await;
    write_json(&control, tasks(json!([{"task.id": "a"}, {"task.id": "b", "x": "1"}, {"task.id": "c"}])));
    let after = wait_until("task 1 to be restarted", || {
        let tasks = instances(&host);
        (tasks.len() == 3 && tasks[1].1 != before[1].1 && tasks[1].2 == State::Running).then_some(tasks)
    })
    .await;
    assert_eq!((after[0], after[2]), (before[0], before[2]), "tasks 0 and 2 must keep running untouched");
    // The stopped task committed what it delivered, so the new one resumed right after it.
    let committed_before = host.seq("r", r#"{"task":"b"}"#).unwrap();
    wait_until("b to go on", || (host.seq("r", r#"{"task":"b"}"#)? > committed_before + 5).then_some(())).await;
    let b_values = values_of(&host.values("t"), "b");
    assert_eq!(b_values, sequence("b", b_values.len() as u64), "task b lost or repeated records across its restart");

    // Shrink to one task: task 0 keeps running.
    write_json(&control, tasks(json!([{"task.id": "a"}])));
    let shrunk = all_running(&host, 1).await;
    assert_eq!(shrunk[0], before[0]);

    // Grow to three again: task 0 still untouched, two new tasks.
    write_json(&control, tasks(json!([{"task.id": "a"}, {"task.id": "d"}, {"task.id": "e"}])));
    let grown = all_running(&host, 3).await;
    assert_eq!(grown[0], before[0]);
    assert!(grown[1].1 > after[2].1 && grown[2].1 > after[2].1, "tasks 1 and 2 must be new instances");
    wait_until("new task e to deliver", || host.seq("r", r#"{"task":"e"}"#)).await;
}

/// The same config PUT again (a deploy tool re-applying what is there) restarts no task,
/// as in Kafka Connect: the tasks keep their instances and go on delivering. A changed
/// config still restarts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_config_put_again_restarts_no_task() {
    let host = TestHost::new(&["counter"]).await;
    let config =
        |rate: &str| connector("r", "counter", &[("topic", "r"), ("tasks.max", "2"), ("records.per.second", rate)]);
    host.start(config("100")).await;
    let before = all_running(&host, 2).await;
    assert!(!host.herder.put_config(config("100")).await.unwrap(), "an update, not a create");
    let seq = host.seq("r", r#"{"counter":1}"#).unwrap_or(0);
    wait_until("task 1 to go on", || (host.seq("r", r#"{"counter":1}"#)? > seq + 20).then_some(())).await;
    assert_eq!(instances(&host), before, "the same config restarted a task");
    host.wait_state("r", State::Running).await;

    host.herder.put_config(config("200")).await.unwrap();
    wait_until("both tasks restarted on the changed config", || {
        let now = instances(&host);
        let restarted = now.len() == 2 && now.iter().zip(&before).all(|(now, then)| now.1 != then.1);
        (restarted && now.iter().all(|t| t.2 == State::Running)).then_some(())
    })
    .await;
}

/// A stop and resume, or a new config, starts a connector's loop again; its counters (the
/// Prometheus counters, the progress line's totals) go on from where they were rather
/// than back to zero. A connector deleted and made again starts from zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_go_on_across_a_stop_a_resume_and_a_new_config() {
    let host = TestHost::new(&["counter"]).await;
    let ns = sluice::storage::Namespace::new(sluice::config::DEFAULT_TENANT, "c");
    let config = |rate: &str| connector("c", "counter", &[("topic", "t"), ("records.per.second", rate)]);
    host.start(config("500")).await;
    let mut last = 0;
    for step in ["started", "stopped and resumed", "given a new config"] {
        match step {
            "stopped and resumed" => {
                host.herder.stop_connector(&ns).await.unwrap();
                host.herder.set_paused(&ns, false).await.unwrap();
            }
            "given a new config" => {
                host.herder.put_config(config("501")).await.unwrap();
            }
            _ => {}
        }
        let at_once = host.herder.delivered_in(&ns).await;
        assert!(at_once >= last, "{step}: counted {at_once} right after, {last} before");
        let started = std::time::Instant::now();
        // Past what it had delivered before: counting on, not from zero again.
        last = loop {
            let now = host.herder.delivered_in(&ns).await;
            if now > last {
                break now;
            }
            assert!(started.elapsed() < DEADLINE, "{step}: no records counted past {last}");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
    }
    host.herder.delete(&ns).await.unwrap();
    host.start(config("500")).await;
    assert!(host.herder.delivered_in(&ns).await < last, "a connector made again counts from zero");
    host.herder.shutdown().await;
}
