//! The mutable side of the worker config's quotas: each tenant's records-per-second budget,
//! shared fairly by all its tasks whatever their batch sizes, and its share of the
//! sandboxes that check configs.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::config::WorkerConfig;
use crate::runtime::rate::TokenBucket;

struct TenantRate {
    bucket: Mutex<TokenBucket>,
    /// Whose turn it is: a fair (first come, first served) lock, held for one slice.
    turn: tokio::sync::Mutex<()>,
    /// Records one turn may take: about 10 ms of the budget. A batch of 2,000 records takes
    /// as many turns as it needs, in line with everyone else's.
    slice: u64,
}

pub struct TenantRates {
    tenants: BTreeMap<String, TenantRate>,
}

impl TenantRates {
    /// One budget per tenant with a `records_per_second` quota, holding one second's worth.
    pub fn new(worker: &WorkerConfig) -> TenantRates {
        let tenants = worker
            .tenants()
            .filter_map(|tenant| {
                let rate = tenant.quotas.records_per_second?.max(1);
                let budget = TenantRate {
                    bucket: Mutex::new(TokenBucket::new(rate as f64, rate as f64)),
                    turn: tokio::sync::Mutex::new(()),
                    slice: (rate / 100).max(1),
                };
                Some((tenant.name.clone(), budget))
            })
            .collect();
        TenantRates { tenants }
    }

    /// Waits until `tenant` may deliver `records` more under its records/s quota. Tasks
    /// take turns a slice at a time, so each gets an equal share of the budget per record,
    /// not per poll.
    pub async fn throttle(&self, tenant: &str, records: u64) {
        let Some(rate) = self.tenants.get(tenant) else { return };
        let mut left = records;
        while left > 0 {
            let take = left.min(rate.slice);
            let _turn = rate.turn.lock().await;
            let wait = rate.bucket.lock().unwrap().take(take as f64);
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            left -= take;
        }
    }
}

/// How many of a declared tenant's configs a plugin checks at once (`validate`, for the
/// validate endpoint, a create or an update; not those run under the herder's lock). Each check holds a sandbox for up to the tenant's
/// call deadline; without a cap, a tenant sending slow checks in parallel held every
/// sandbox the worker may make, and other tenants' connectors could not start.
pub const VALIDATIONS_PER_TENANT: usize = 4;

pub struct TenantValidations {
    tenants: BTreeMap<String, std::sync::Arc<tokio::sync::Semaphore>>,
}

impl TenantValidations {
    /// One set of places per declared tenant; the unlimited `default` tenant has none.
    pub fn new(worker: &WorkerConfig) -> TenantValidations {
        let tenants = worker
            .tenants()
            .filter(|tenant| !tenant.is_unlimited_default())
            .map(|tenant| {
                (tenant.name.clone(), std::sync::Arc::new(tokio::sync::Semaphore::new(VALIDATIONS_PER_TENANT)))
            })
            .collect();
        TenantValidations { tenants }
    }

    /// A place for one of `tenant`'s checks, waited for while its others run.
    pub async fn place(&self, tenant: &str) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let places = self.tenants.get(tenant)?.clone();
        places.acquire_owned().await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_tenant_checks_so_many_configs_at_once_and_the_default_any_number() {
        let worker = WorkerConfig::parse("[[tenant]]\nname = \"a\"\n[[tenant]]\nname = \"b\"\n").unwrap();
        let validations = TenantValidations::new(&worker);
        let mut held = Vec::new();
        for _ in 0..VALIDATIONS_PER_TENANT {
            held.push(validations.place("a").await.expect("a declared tenant has places"));
        }
        let waiting = validations.place("a");
        tokio::pin!(waiting);
        assert!(futures_poll_once(waiting.as_mut()).await.is_none(), "a fifth check waits");
        // Another tenant's checks are not held up by a's.
        assert!(validations.place("b").await.is_some());
        assert!(validations.place("default").await.is_none(), "the default tenant is not limited");
        held.pop();
        assert!(waiting.await.is_some(), "a place freed is taken");
    }

    /// The future's output if it is ready on its first poll.
    async fn futures_poll_once<F: std::future::Future + Unpin>(future: F) -> Option<F::Output> {
        let mut future = future;
        std::future::poll_fn(|cx| match std::pin::Pin::new(&mut future).poll(cx) {
            std::task::Poll::Ready(output) => std::task::Poll::Ready(Some(output)),
            std::task::Poll::Pending => std::task::Poll::Ready(None),
        })
        .await
    }
}
