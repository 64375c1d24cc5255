//! The herder's lifecycle API: open a worker (runtime, stores, plugin folder), start,
//! stop and inspect connectors. What a config must satisfy is in [`super::admission`];
//! each connector runs in its own loop ([`super::connector`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use std::time::{Duration, Instant};

use tokio::sync::{Mutex, Notify, watch};
use tokio::task::JoinHandle;

use super::admission::{self, Admitted, Running};
use super::connector::ConnectorRun;
use super::limits::TenantRates;
use super::metrics::{ConnectorMetrics, MetricsSnapshot};
use super::services::Services;
use super::status::StatusBoard;
use crate::config::{ConfigError, ConnectorConfig, DEFAULT_TENANT, WorkerConfig, keys::NAME};
use crate::destinations;
use crate::runtime::{Registry, Runtime};
use crate::storage::{ConnectorStatus, DataDir, Namespace, State, Stores};

struct ConnectorHandle {
    tasks_max: u32,
    /// Sends the stop deadline.
    stop: watch::Sender<Option<Instant>>,
    /// How long a stop may take: the connector's lifecycle call timeout.
    stop_within: Duration,
    join: JoinHandle<()>,
    metrics: Arc<ConnectorMetrics>,
}

pub struct Herder {
    services: Arc<Services>,
    connectors: Mutex<BTreeMap<Namespace, ConnectorHandle>>,
}

impl Herder {
    /// A worker with the default worker config (no tenants, SQLite in `data_dir`).
    pub async fn open(data_dir: &Path, plugin_dir: &Path) -> anyhow::Result<Herder> {
        Self::open_with_config(WorkerConfig::default(), data_dir, plugin_dir).await
    }

    /// A worker with the stores its config names, in `data_dir`, and the plugins of
    /// `plugin_dir` (compiled through the data directory's cache).
    pub async fn open_with_config(worker: WorkerConfig, data_dir: &Path, plugin_dir: &Path) -> anyhow::Result<Herder> {
        let data_dir = DataDir::new(data_dir);
        let runtime = Runtime::with_fuel_metering(worker.sandbox.fuel_metering)?;
        let stores = Stores::open(&worker.storage, &data_dir)?;
        let registry = Arc::new(Registry::load(&runtime, plugin_dir, &data_dir.compile_cache()).await?);
        let worker_id = format!("{}:{}", hostname(), std::process::id());
        let board = Arc::new(StatusBoard::new(worker_id, stores.statuses().clone()));
        let rates = Arc::new(TenantRates::new(&worker));
        let exit = Arc::default();
        Ok(Herder::new(Services { exit, runtime, registry, stores, board, worker: Arc::new(worker), rates }))
    }

    pub fn new(services: Services) -> Herder {
        Herder { services: Arc::new(services), connectors: Mutex::new(BTreeMap::new()) }
    }

    pub fn services(&self) -> &Arc<Services> {
        &self.services
    }

    pub fn registry(&self) -> &Registry {
        &self.services.registry
    }

    /// The status of a connector of the `default` tenant.
    pub fn status(&self, connector: &str) -> Option<ConnectorStatus> {
        self.status_in(&Namespace::new(DEFAULT_TENANT, connector))
    }

    pub fn status_in(&self, ns: &Namespace) -> Option<ConnectorStatus> {
        self.services.board.get(ns)
    }

    pub fn statuses(&self) -> Vec<(Namespace, ConnectorStatus)> {
        self.services.board.all()
    }

    /// Records delivered by a connector's tasks since this process started it (`default`
    /// tenant).
    pub async fn delivered(&self, connector: &str) -> u64 {
        self.delivered_in(&Namespace::new(DEFAULT_TENANT, connector)).await
    }

    pub async fn delivered_in(&self, ns: &Namespace) -> u64 {
        self.connectors.lock().await.get(ns).map_or(0, |c| c.metrics.delivered())
    }

    /// A running connector's counters: deliveries, ticks, the connector's memory.
    pub async fn metrics_in(&self, ns: &Namespace) -> Option<MetricsSnapshot> {
        self.connectors.lock().await.get(ns).map(|c| c.metrics.snapshot())
    }

    /// Checks a config the way `start` would: host keys, the tenant's rules, the plugin's
    /// `config-def`, and the plugin's own `validate`.
    pub async fn validate(&self, config: &ConnectorConfig) -> Result<Admitted, ConfigError> {
        admission::admit(&self.services, config, &self.running().await).await
    }

    /// Checks several configs as if all were started, each against the tenants' quotas
    /// with the ones before it counted: nothing need start for a bad one to be refused.
    pub async fn validate_all(&self, configs: &[ConnectorConfig]) -> Result<Vec<Admitted>, ConfigError> {
        let mut running = self.running().await;
        let mut admitted = Vec::with_capacity(configs.len());
        for config in configs {
            let one = admission::admit(&self.services, config, &running).await?;
            let tenant = config.with_defaults(&self.services.worker.defaults).tenant().to_string();
            running.push((Namespace::new(tenant, &config.name), one.settings.tasks_max));
            admitted.push(one);
        }
        Ok(admitted)
    }

    async fn running(&self) -> Vec<Running> {
        self.connectors.lock().await.iter().map(|(ns, c)| (ns.clone(), c.tasks_max)).collect()
    }

    /// Validates and starts a connector and its tasks; warnings about the config (unknown
    /// keys) go to the log.
    pub async fn start(&self, config: ConnectorConfig) -> Result<(), ConfigError> {
        let Admitted { settings, plugin, warnings } = self.validate(&config).await?;
        for warning in warnings {
            tracing::warn!("{warning}");
        }
        let config = config.with_defaults(&self.services.worker.defaults);
        let namespace = Namespace::new(config.tenant(), &config.name);
        let mut connectors = self.connectors.lock().await;
        if connectors.contains_key(&namespace) {
            return Err(config.error(NAME, format!("a connector named '{}' is already running", config.name)));
        }
        if let Err(e) = self.services.stores.configs().put_connector_config(&namespace, &config.to_pairs()) {
            return Err(config.error(NAME, format!("cannot store the config: {e:#}")));
        }
        let (stop, stop_rx) = watch::channel(None);
        let reconfigure = Arc::new(Notify::new());
        let metrics = Arc::new(ConnectorMetrics::default());
        let destination = destinations::for_kind(settings.destination, &self.services.stores);
        self.services.board.set_connector(&namespace, State::Unassigned, None);
        let (tasks_max, stop_within) = (settings.tasks_max, settings.sandbox.timeouts.lifecycle);
        let run = ConnectorRun {
            services: self.services.clone(),
            namespace: namespace.clone(),
            config,
            settings,
            plugin,
            destination,
            metrics: metrics.clone(),
            reconfigure,
            tasks: Vec::new(),
        };
        let join = tokio::spawn(run.run(stop_rx));
        connectors.insert(namespace, ConnectorHandle { tasks_max, stop, stop_within, join, metrics });
        Ok(())
    }

    /// Stops a connector and its tasks gracefully (offsets committed), within its lifecycle
    /// call timeout whatever its plugin does. False if unknown.
    pub async fn stop(&self, connector: &str) -> bool {
        self.stop_in(&Namespace::new(DEFAULT_TENANT, connector)).await
    }

    pub async fn stop_in(&self, ns: &Namespace) -> bool {
        let handle = self.connectors.lock().await.remove(ns);
        match handle {
            Some(handle) => {
                let _ = handle.stop.send(Some(Instant::now() + handle.stop_within));
                let _ = handle.join.await;
                true
            }
            None => false,
        }
    }

    /// Stops every connector, all at once: within the longest lifecycle call timeout.
    pub async fn shutdown(&self) {
        let handles: Vec<ConnectorHandle> = std::mem::take(&mut *self.connectors.lock().await).into_values().collect();
        let now = Instant::now();
        for handle in &handles {
            let _ = handle.stop.send(Some(now + handle.stop_within));
        }
        for handle in handles {
            let _ = handle.join.await;
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}
