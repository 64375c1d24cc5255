//! The worker config beyond tenants: fuel metering (a per-call budget, used fuel in the
//! status) and defaults for connector keys.

use sluice::storage::State;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuel_is_metered_and_a_call_over_its_budget_fails() {
    let host = TestHost::with_tenants(&["hostile", "counter"], "[sandbox]\nfuel_metering = true\n").await;
    start_neighbour(&host).await;
    let config = [("topic", "h"), ("hostile.attack", "loop-in-poll"), ("sandbox.fuel.per.call", "1000000")];
    host.start(connector("spender", "hostile", &config)).await;
    let failed = host.wait_task("spender", 0, State::Failed).await;
    assert_eq!(failed.trace.as_deref(), Some("poll used all of its sandbox.fuel.per.call (1000000)"));
    // CPU accounting: the well-behaved neighbour's used fuel shows in its status.
    let fuel = wait_until("the neighbour's fuel in its status", || {
        host.status("neighbour")?.tasks[0].fuel_used.filter(|f| *f > 0)
    })
    .await;
    assert!(fuel > 0);
    assert_neighbour_keeps_delivering(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fuel_budget_needs_fuel_metering() {
    let host = TestHost::new(&["counter"]).await;
    let config = connector("c", "counter", &[("topic", "t"), ("sandbox.fuel.per.call", "1000")]);
    let error = host.herder.validate(&config).await.err().expect("refused");
    assert_eq!(error.key.as_deref(), Some("sandbox.fuel.per.call"));
    assert!(error.reason.contains("fuel_metering = true"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_defaults_apply_to_connectors_that_do_not_set_the_key() {
    let host = TestHost::with_tenants(&["testkit"], "[defaults]\n\"sandbox.call.timeout.ms\" = 300\n").await;
    host.start(connector("spinner", "testkit", &[("topic", "t"), ("poll.loop.at", "3")])).await;
    let failed = host.wait_task("spinner", 0, State::Failed).await;
    // Time the fairness throttle held it back is added (and said) after the deadline.
    let trace = failed.trace.unwrap();
    assert!(trace.starts_with("poll did not return within 300 ms"), "{trace}");
    // A connector's own value wins.
    host.start(connector(
        "patient",
        "testkit",
        &[("topic", "t2"), ("poll.loop.at", "3"), ("sandbox.call.timeout.ms", "700")],
    ))
    .await;
    let failed = host.wait_task("patient", 0, State::Failed).await;
    let trace = failed.trace.unwrap();
    assert!(trace.starts_with("poll did not return within 700 ms"), "{trace}");
}
