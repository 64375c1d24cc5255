//! The mutable side of the worker config's quotas: each tenant's records-per-second budget,
//! shared fairly by all its tasks whatever their batch sizes.

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
