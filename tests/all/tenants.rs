//! Tenants: the same connector name in two tenants shares nothing (offsets, records);
//! a tenant cannot grant directories outside its roots (and that is the one problem said);
//! its quotas hold.

use sluice::storage::Namespace;

use crate::common::*;

/// A config as the API takes it, before its host keys are checked.
fn unchecked(pairs: &[(&str, &str)]) -> sluice::config::ConnectorConfig {
    let values = pairs.iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(*v))).collect();
    sluice::config::ConnectorConfig::from_map(Some("c".into()), &values, "c").unwrap()
}

fn canonical(dir: &tempfile::TempDir) -> String {
    std::fs::canonicalize(dir.path()).unwrap().display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_see_only_their_own_offsets_and_records() {
    let host = TestHost::with_tenants(&["testkit"], "[[tenant]]\nname = \"a\"\n[[tenant]]\nname = \"b\"\n").await;
    let config = |tenant: &str, count: &str| {
        connector("same", "testkit", &[("tenant", tenant), ("topic", "t"), ("record.count", count)])
    };
    let offsets = host.herder.services().stores.offsets().clone();
    let records = host.herder.services().stores.local().clone();
    let seq = |tenant: &str| {
        let found = offsets.offsets(&Namespace::new(tenant, "same"), &[r#"{"task":"0"}"#.to_string()]).unwrap();
        found[0]
            .as_deref()
            .and_then(|o| serde_json::from_str::<serde_json::Value>(o).ok())
            .and_then(|o| o["seq"].as_u64())
    };
    let values = |tenant: &str| -> Vec<String> {
        records
            .read(tenant, "t", 0, 1 << 20)
            .unwrap()
            .into_iter()
            .map(|r| String::from_utf8(r.record.value.unwrap().to_vec()).unwrap())
            .collect()
    };
    host.start(config("b", "50")).await;
    wait_until("b's 50 records", || (seq("b") == Some(49)).then_some(())).await;
    // a's task reads its own (absent) offset, not b's: it starts from 0.
    host.start(config("a", "20")).await;
    wait_until("a's 20 records", || (seq("a") == Some(19)).then_some(())).await;
    assert_eq!(values("a"), sequence("0", 20));
    assert_eq!(values("b"), sequence("0", 50));
    assert_eq!(host.herder.status_in(&Namespace::new("a", "same")).unwrap().name, "same");
    assert!(host.status("same").is_none(), "nothing of a or b is visible as the default tenant");
    // Restarted with more to do, a resumes from its own offset.
    assert!(host.herder.stop_in(&Namespace::new("a", "same")).await);
    host.start(config("a", "30")).await;
    wait_until("a's 30 records", || (seq("a") == Some(29)).then_some(())).await;
    assert_eq!(values("a"), sequence("0", 30));
    assert_eq!(values("b"), sequence("0", 50));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_outside_the_tenant_roots_are_refused() {
    let (root, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::create_dir(root.path().join("inbox")).unwrap();
    let toml = format!("[[tenant]]\nname = \"a\"\nroots = [\"{}\"]\n", canonical(&root));
    let host = TestHost::with_tenants(&["counter"], &toml).await;
    let inside = format!("{}/inbox", canonical(&root));
    let ok = connector("c", "counter", &[("tenant", "a"), ("topic", "t"), ("sandbox.fs.read", &inside)]);
    host.herder.validate(&ok).await.unwrap();
    let outside = canonical(&elsewhere);
    for key in ["sandbox.fs.read", "sandbox.fs.write"] {
        let bad = connector("c", "counter", &[("tenant", "a"), ("topic", "t"), (key, &outside)]);
        let error = host.herder.validate(&bad).await.err().expect("refused");
        assert_eq!(error.key.as_deref(), Some(key));
        assert!(
            error.reason.contains("is outside tenant a's roots") && error.reason.contains(&canonical(&root)),
            "{error}"
        );
    }
    // Whether a path outside the roots exists, or is a file or a directory, is nobody's
    // business of the tenant's: one answer for each, from start and validate alike.
    std::fs::write(elsewhere.path().join("payroll.csv"), "secret").unwrap();
    let probes = [
        outside.clone(),
        format!("{outside}/payroll.csv"),
        format!("{outside}/missing.csv"),
        format!("{}/inbox/../../{}", canonical(&root), elsewhere.path().file_name().unwrap().to_string_lossy()),
    ];
    for probe in &probes {
        let bad =
            unchecked(&[("connector.class", "counter"), ("tenant", "a"), ("topic", "t"), ("sandbox.fs.read", probe)]);
        let expected = format!("'{probe}' is outside tenant a's roots ({})", canonical(&root));
        for error in [host.herder.check(&bad).expect_err("refused"), host.herder.validate(&bad).await.err().unwrap()] {
            assert_eq!((error.key.as_deref(), error.reason.as_str()), (Some("sandbox.fs.read"), expected.as_str()));
        }
        let problems = host.herder.problems(&bad).await;
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].reason, expected);
    }
    // Inside the roots the reasons say what is wrong; a root reached through a link is in.
    let missing = format!("{}/inbox/missing", canonical(&root));
    let bad =
        unchecked(&[("connector.class", "counter"), ("tenant", "a"), ("topic", "t"), ("sandbox.fs.read", &missing)]);
    let error = host.herder.check(&bad).expect_err("refused");
    assert!(error.reason.contains("cannot be granted"), "{error}");
    let link = elsewhere.path().join("to-inbox");
    std::os::unix::fs::symlink(format!("{}/inbox", canonical(&root)), &link).unwrap();
    let aliased = link.display().to_string();
    host.herder
        .validate(&connector("c", "counter", &[("tenant", "a"), ("topic", "t"), ("sandbox.fs.read", &aliased)]))
        .await
        .unwrap();
    let unknown = connector("c", "counter", &[("tenant", "nobody"), ("topic", "t")]);
    let error = host.herder.validate(&unknown).await.err().expect("refused");
    assert_eq!(
        (error.key.as_deref(), error.reason.as_str()),
        (Some("tenant"), "unknown tenant 'nobody' (the tenants: a, default)")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_grant_is_the_one_problem_said_not_the_plugins_view_without_it() {
    let (root, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let toml = format!("[[tenant]]\nname = \"a\"\nroots = [\"{}\"]\n", canonical(&root));
    let host = TestHost::with_tenants(&["file-pulse"], &toml).await;
    let outside = canonical(&elsewhere);
    let config = unchecked(&[
        ("connector.class", "file-pulse"),
        ("tenant", "a"),
        ("topic", "t"),
        ("fs.listing.directory.path", &outside),
        ("sandbox.fs.read", &outside),
    ]);
    // file-pulse, run without the refused grant, would add that the directory cannot be
    // listed: true in its sandbox, but not the reason.
    let problems = host.herder.problems(&config).await;
    let said: Vec<(Option<&str>, &str)> = problems.iter().map(|p| (p.key.as_deref(), p.reason.as_str())).collect();
    let expected = format!("'{outside}' is outside tenant a's roots ({})", canonical(&root));
    assert_eq!(said, [(Some("sandbox.fs.read"), expected.as_str())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_quotas_hold() {
    let toml = "[[tenant]]\nname = \"q\"\n[tenant.quotas]\nconnectors = 1\ntasks = 2\nmemory_max_bytes = 33554432\nrecords_per_second = 100\n";
    let host = TestHost::with_tenants(&["counter"], toml).await;
    let config = |name: &str, extra: &[(&str, &str)]| {
        let mut pairs = vec![("tenant", "q"), ("topic", "t")];
        pairs.extend_from_slice(extra);
        connector(name, "counter", &pairs)
    };
    let too_many_tasks = host.herder.validate(&config("c", &[("tasks.max", "3")])).await.err().expect("refused");
    assert_eq!(too_many_tasks.key.as_deref(), Some("tasks.max"), "{too_many_tasks}");
    let too_much_memory =
        host.herder.validate(&config("c", &[("sandbox.memory.max.bytes", "67108864")])).await.err().expect("refused");
    assert_eq!(too_much_memory.key.as_deref(), Some("sandbox.memory.max.bytes"), "{too_much_memory}");
    // A call deadline past the tenant's (60 s unless sluice.toml says otherwise): a stop
    // waits for it, and changes to connectors run one at a time.
    let forever = host.herder.validate(&config("c", &[("sandbox.call.timeout.ms", "999999999999")])).await;
    let forever = forever.err().expect("refused");
    assert_eq!(forever.key.as_deref(), Some("sandbox.call.timeout.ms"), "{forever}");
    assert!(forever.reason.contains("call_timeout_max_ms"), "{forever}");
    host.herder.validate(&config("c", &[("sandbox.call.timeout.ms", "60000")])).await.expect("within the quota");
    // A value that cannot be read is said once, for what it is: not compared with the quota
    // as the default that stood in for it.
    let unreadable = unchecked(&[
        ("connector.class", "counter"),
        ("tenant", "q"),
        ("topic", "t"),
        ("sandbox.memory.max.bytes", "1000000000000000000000"),
    ]);
    let problems = host.herder.problems(&unreadable).await;
    let said: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(problems.len(), 1, "{said:?}");
    assert!(said[0].contains("sandbox.memory.max.bytes") && !said[0].contains("quota"), "{said:?}");

    host.start(config("c", &[("tasks.max", "2")])).await;
    let second = host.herder.start(config("d", &[])).await.unwrap_err();
    assert_eq!(second.key.as_deref(), Some("name"));
    assert!(second.reason.contains("already runs 1 connectors, its quota"), "{second}");

    // Two unthrottled tasks share the tenant's 100 records/s.
    let ns = Namespace::new("q", "c");
    wait_until("records to flow", || host.herder.status_in(&ns).filter(|s| s.tasks.len() == 2)).await;
    // On a loaded machine the tasks can take a while to deliver their first batch: the
    // window is measured once they have.
    let local = host.herder.services().stores.local().clone();
    wait_until("a first record", || {
        local.topics("q").ok()?.iter().any(|(topic, n)| topic == "t" && *n > 0).then_some(())
    })
    .await;
    // Time 600 more records: at 100/s they take at least three seconds past the burst and
    // the batches in flight; unthrottled, milliseconds.
    let started = std::time::Instant::now();
    let before = host.herder.delivered_in(&ns).await;
    let delivered = loop {
        let delivered = host.herder.delivered_in(&ns).await - before;
        if delivered >= 600 {
            break delivered;
        }
        assert!(started.elapsed() < DEADLINE, "the tenant's connector stopped delivering ({delivered} records)");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let allowed = 100.0 * started.elapsed().as_secs_f64() + 100.0 /* burst */ + 200.0 /* two batches in flight */;
    assert!((delivered as f64) <= allowed, "{delivered} records in {:?} exceed the quota of 100/s", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_inside_the_roots_leading_out_says_nothing_of_what_is_there() {
    let (root, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::write(elsewhere.path().join("payroll.csv"), "secret").unwrap();
    std::fs::create_dir(elsewhere.path().join("dir")).unwrap();
    let toml = format!("[[tenant]]\nname = \"a\"\nroots = [\"{}\"]\n", canonical(&root));
    let host = TestHost::with_tenants(&["counter"], &toml).await;
    // A link the tenant made (or unpacked) in its own root, to the host's files.
    std::os::unix::fs::symlink(elsewhere.path(), root.path().join("out")).unwrap();
    std::os::unix::fs::symlink("/", root.path().join("host")).unwrap();
    // Links that lead nowhere: whether their targets exist is the host's business too.
    std::os::unix::fs::symlink(elsewhere.path().join("missing.csv"), root.path().join("gone")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path().join("payroll.csv"), root.path().join("there")).unwrap();
    std::os::unix::fs::symlink("loop", root.path().join("loop")).unwrap();
    let through = |rest: &str| format!("{}/{rest}", canonical(&root));
    for probe in [
        through("out"),
        through("out/payroll.csv"),
        through("out/dir"),
        through("out/missing"),
        through("out/missing/deeper"),
        through("host/proc/self/cwd"),
        through("host/etc/passwd"),
        through("out/dir/../../.."),
        through("gone"),
        through("gone/deeper"),
        through("there"),
        through("loop"),
    ] {
        let bad =
            unchecked(&[("connector.class", "counter"), ("tenant", "a"), ("topic", "t"), ("sandbox.fs.read", &probe)]);
        let expected = format!("'{probe}' is outside tenant a's roots ({})", canonical(&root));
        let error = host.herder.check(&bad).expect_err("refused");
        assert_eq!((error.key.as_deref(), error.reason.as_str()), (Some("sandbox.fs.read"), expected.as_str()));
        let problems = host.herder.problems(&bad).await;
        let said: Vec<&str> = problems.iter().map(|p| p.reason.as_str()).collect();
        assert_eq!(said, [expected.as_str()], "{probe}");
    }
    // The tenant's own missing directory, and its own file, are still said as such.
    for (own, reason) in [(through("missing/deeper"), "cannot be granted"), (through("file"), "is not a directory")] {
        std::fs::write(root.path().join("file"), "mine").unwrap();
        let bad =
            unchecked(&[("connector.class", "counter"), ("tenant", "a"), ("topic", "t"), ("sandbox.fs.read", &own)]);
        let error = host.herder.check(&bad).expect_err("refused");
        assert!(error.reason.contains(reason), "{own}: {error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_cap_what_a_config_leaves_unset_and_every_breach_is_said_by_its_setting() {
    // The operator's default above the tenant's quota is brought within it, not refused.
    let toml = "[defaults]\n\"sandbox.log.lines.per.second\" = 5000\n[[tenant]]\nname = \"q\"\n[tenant.quotas]\nconnectors = 2\ntasks = 4\nmemory_max_bytes = 33554432\ncall_timeout_max_ms = 1000\n";
    let host = TestHost::with_tenants(&["counter", "hostile"], toml).await;
    let config = |name: &str, plugin: &str, extra: &[(&str, &str)]| {
        let mut pairs = vec![("tenant", "q"), ("topic", "t")];
        pairs.extend_from_slice(extra);
        connector(name, plugin, &pairs)
    };
    host.start(config("c", "counter", &[("tasks.max", "2")])).await;
    // Two in use and the most tasks.max may be (Connect's INT, so the sum cannot wrap; it
    // is added in u64 all the same): refused.
    let huge = host.herder.validate(&config("d", "counter", &[("tasks.max", "2147483647")])).await.err().unwrap();
    assert_eq!(huge.key.as_deref(), Some("tasks.max"), "{huge}");
    assert!(huge.reason.contains("(2 in use; tasks in [tenant.quotas] of sluice.toml)"), "{huge}");
    // Every breach at once, each naming the setting that allows more.
    let greedy = config(
        "d",
        "counter",
        &[("tasks.max", "3"), ("sandbox.memory.max.bytes", "67108864"), ("sandbox.log.lines.per.second", "100000")],
    );
    let problems = host.herder.problems(&greedy).await;
    let said: Vec<String> = problems.iter().map(ToString::to_string).collect();
    for setting in ["tasks in", "memory_max_bytes in", "log_lines_per_second_max in"] {
        assert!(said.iter().any(|s| s.contains(setting)), "{setting} not in {said:?}");
    }
    let admitted = host.herder.validate(&config("d", "counter", &[])).await.expect("the default, capped");
    assert_eq!(admitted.settings.sandbox.log_lines_per_second, 1000);
    // A plugin's validate that sleeps: the tenant's 1 s deadline holds whether the config
    // sets a longer one (refused, and validate still runs within the quota) or none (the
    // default 10 s is above the quota).
    for extra in [vec![("sandbox.call.timeout.ms", "600000")], vec![]] {
        let mut pairs = vec![("hostile.attack", "sleep-in-validate"), ("hostile.sleep.ms", "600000")];
        pairs.extend(extra);
        let problems = host.herder.problems(&config("slow", "hostile", &pairs)).await;
        let said: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert!(said.iter().any(|s| s.contains("validate did not return within 1000 ms")), "{said:?}");
    }
}

/// A task waiting for its tenant's records/s quota (a batch of 10,000 under 10 records/s:
/// 1,000 s) is stopped at once, its batch dropped undelivered and nothing of it committed
/// (the next instance polls it again), so a stop, a delete, a new config and SIGTERM do not
/// wait with it, nor do the other tenants' changes behind the herder's lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_waiting_for_its_tenants_records_per_second_is_stopped_at_once() {
    let toml = "[[tenant]]\nname = \"slow\"\n[tenant.quotas]\nrecords_per_second = 10\n";
    let host = TestHost::with_tenants(&["counter"], toml).await;
    let pairs = [("tenant", "slow"), ("topic", "t"), ("batch.size", "10000")];
    host.start(connector("big", "counter", &pairs)).await;
    let ns = Namespace::new("slow", "big");
    let metrics = host.herder.all_metrics().await.into_iter().find(|(n, _)| *n == ns).expect("its metrics").1;
    let polled =
        || metrics.tasks().iter().map(|(_, task)| task.polled.load(std::sync::atomic::Ordering::Relaxed)).sum::<u64>();
    wait_until("a batch polled, now waiting for the quota", || (polled() >= 10_000).then_some(())).await;
    let stopping = std::time::Instant::now();
    host.herder.stop_connector(&ns).await.unwrap();
    let took = stopping.elapsed();
    assert!(took < std::time::Duration::from_secs(20), "the stop waited {took:?} on the records/s quota");
    let stored = host.herder.services().stores.local().read("slow", "t", 0, 10).unwrap();
    assert!(stored.is_empty(), "the batch waiting for the quota was delivered: {}", stored.len());
    assert_eq!(host.herder.offsets(&ns).await.unwrap(), Vec::new(), "an offset of the dropped batch was committed");
}
