//! What every connector and task of a worker shares, built once by [`super::Herder`].

use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use super::limits::TenantRates;
use super::status::StatusBoard;
use crate::config::WorkerConfig;
use crate::runtime::{InstanceContext, Registry, Runtime};
use crate::storage::{Namespace, Stores};

pub struct Services {
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
        reconfigure: Option<mpsc::UnboundedSender<()>>,
    ) -> InstanceContext {
        InstanceContext { namespace: namespace.clone(), task, offsets: self.stores.offsets().clone(), reconfigure }
    }
}

/// Resolves once a stop was requested (or the requester is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}
