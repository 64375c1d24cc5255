//! What every connector and task of a worker shares, built once by [`super::Herder`].

use std::sync::Arc;

use std::time::Instant;

use tokio::sync::{Notify, watch};

use super::limits::TenantRates;
use super::status::StatusBoard;
use crate::config::WorkerConfig;
use crate::runtime::{InstanceContext, Registry, Runtime};
use crate::storage::{Namespace, Stores};

pub struct Services {
    /// Set when the whole worker must stop (the `stdout` reader went away).
    pub exit: Arc<ExitRequest>,
    pub runtime: Arc<Runtime>,
    pub registry: Arc<Registry>,
    pub stores: Stores,
    pub board: Arc<StatusBoard>,
    pub worker: Arc<WorkerConfig>,
    pub rates: Arc<TenantRates>,
}

impl Services {
    /// Who an instance is and what it may reach: its connector's committed offsets, and
    /// (for the connector and its tasks, not for validation) the reconfiguration channel.
    pub fn context(
        &self,
        namespace: &Namespace,
        task: Option<u32>,
        reconfigure: Option<Arc<Notify>>,
    ) -> InstanceContext {
        InstanceContext { namespace: namespace.clone(), task, offsets: self.stores.offsets().clone(), reconfigure }
    }
}

/// A request that the whole worker stop, with the reason; what `sluice run` waits on
/// besides signals.
#[derive(Default)]
pub struct ExitRequest {
    reason: std::sync::Mutex<Option<String>>,
    requested: Notify,
}

impl ExitRequest {
    /// Asks the worker to stop; the first reason is kept.
    pub fn request(&self, reason: String) {
        self.reason.lock().unwrap().get_or_insert(reason);
        self.requested.notify_one();
    }

    /// Resolves with the reason once a stop was requested.
    pub async fn requested(&self) -> String {
        loop {
            if let Some(reason) = self.reason.lock().unwrap().clone() {
                return reason;
            }
            self.requested.notified().await;
        }
    }
}

/// A stop request: `Some(deadline)`, the moment by which the connector or task must be
/// stopped (calls still running then are abandoned).
pub type StopSignal = watch::Receiver<Option<Instant>>;

/// Runs `call` to its end, unless a stop is requested meanwhile and the call is still
/// running at the stop deadline: then `None`, and the call's future is dropped (which
/// abandons the guest call: the instance must not be called again).
pub(crate) async fn unless_stopped<T>(call: impl Future<Output = T>, stop: &mut StopSignal) -> Option<T> {
    tokio::pin!(call);
    // The call first: one that returns at once (an idle poll) never registers a waiter.
    let deadline = tokio::select! {
        biased;
        result = &mut call => return Some(result),
        deadline = stopped(stop) => deadline,
    };
    tokio::select! {
        biased;
        result = &mut call => Some(result),
        _ = tokio::time::sleep_until(deadline.into()) => None,
    }
}

/// Resolves with the stop deadline once a stop was requested (or at once, with the
/// current moment, if the requester is gone).
pub(crate) async fn stopped(stop: &mut StopSignal) -> Instant {
    match stop.wait_for(Option::is_some).await {
        Ok(deadline) => deadline.unwrap_or_else(Instant::now),
        Err(_) => Instant::now(),
    }
}
