//! The mutable side of the worker config's quotas: each tenant's records-per-second budget,
//! shared by all its tasks.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::config::WorkerConfig;
use crate::runtime::rate::TokenBucket;

pub struct TenantRates {
    buckets: BTreeMap<String, Mutex<TokenBucket>>,
}

impl TenantRates {
    /// One bucket per tenant with a `records_per_second` quota, holding one second's worth.
    pub fn new(worker: &WorkerConfig) -> TenantRates {
        let buckets = worker
            .tenants()
            .filter_map(|tenant| {
                let rate = tenant.quotas.records_per_second?.max(1) as f64;
                Some((tenant.name.clone(), Mutex::new(TokenBucket::new(rate, rate))))
            })
            .collect();
        TenantRates { buckets }
    }

    /// Waits until `tenant` may deliver `records` more under its records/s quota.
    pub async fn throttle(&self, tenant: &str, records: u64) {
        let Some(bucket) = self.buckets.get(tenant) else { return };
        let wait = bucket.lock().unwrap().take(records as f64);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}
