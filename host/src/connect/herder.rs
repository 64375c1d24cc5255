//! The herder's lifecycle API: open a worker (runtime, stores, plugin folder); create,
//! update, pause, resume, stop, restart and delete connectors; bring stored connectors
//! back in their target states; inspect them. What a config must satisfy is in
//! [`super::admission`]; each connector runs in its own loop ([`super::connector`]).
//!
//! Every change is written to the config store before it returns (config, target state),
//! so a restarted worker ([`Herder::restore`]) puts every connector back as it was.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, Notify, mpsc, watch};
use tokio::task::JoinHandle;

use super::admission::{self, Admitted, Running};
use super::connector::{ConnectorRun, Control, Tasks};
use super::limits::TenantRates;
use super::metrics::{ConnectorMetrics, MetricsSnapshot};
use super::services::{IdlePolls, Services};
use super::status::StatusBoard;
use super::topics::ActiveTopics;
use crate::config::{ConfigError, ConnectorConfig, DEFAULT_TENANT, WorkerConfig, keys::NAME};
use crate::destinations;
use crate::runtime::{Plugin, Registry, Runtime};
use crate::storage::{ConnectorState, ConnectorStatus, DataDir, Namespace, State, Stores, TargetState};

/// Why a lifecycle request could not be done (the REST API's 404, 409 and 400).
#[derive(Debug, thiserror::Error)]
pub enum HerderError {
    #[error("Connector {0} not found")]
    NotFound(String),
    #[error("Task {0}-{1} not found")]
    TaskNotFound(String, u32),
    #[error("Connector {0} already exists")]
    Exists(String),
    #[error("{0}")]
    Invalid(#[from] ConfigError),
    #[error("{0}")]
    Refused(String),
    #[error("{0:#}")]
    Store(anyhow::Error),
}

/// A connector this worker knows: its config, what it should be doing, and its loop
/// while it runs (none while STOPPED).
struct Entry {
    config: ConnectorConfig,
    target: TargetState,
    tasks_max: u32,
    run: Option<RunningConnector>,
}

struct RunningConnector {
    /// Sends the stop deadline.
    stop: watch::Sender<Option<Instant>>,
    /// How long a stop may take: the connector's lifecycle call timeout.
    stop_within: Duration,
    join: JoinHandle<()>,
    metrics: Arc<ConnectorMetrics>,
    control: mpsc::UnboundedSender<Control>,
    paused: watch::Sender<bool>,
    /// The plugin it started with (a replaced file is used from the next restart).
    plugin: Arc<Plugin>,
}

impl RunningConnector {
    /// Stops the loop and its tasks gracefully, within the lifecycle timeout.
    async fn stop(self) {
        let _ = self.stop.send(Some(Instant::now() + self.stop_within));
        let _ = self.join.await;
    }
}

pub struct Herder {
    services: Arc<Services>,
    /// Held across a whole change to one connector, so changes never interleave.
    connectors: Mutex<BTreeMap<Namespace, Entry>>,
    /// What reads see: every connector as the last finished change left it, published as
    /// each change lets go of `connectors` ([`Changing`]). Reads (statuses, lists, configs,
    /// `/health`) never wait behind a change, which may wait on a plugin's call for its
    /// whole deadline or on a stuck task's stop (as Kafka Connect's status reads never wait
    /// behind its herder's requests).
    view: std::sync::RwLock<Arc<BTreeMap<Namespace, View>>>,
    /// Each connector's counters, kept while it exists: a stop and resume or a new config
    /// starts its loop again, and Prometheus counters (and the progress line's totals)
    /// must not go back to zero with it. A deleted connector's go with it.
    metrics: std::sync::Mutex<HashMap<Namespace, Arc<ConnectorMetrics>>>,
}

/// A connector as reads see it.
#[derive(Clone)]
struct View {
    config: ConnectorConfig,
    target: TargetState,
    tasks_max: u32,
    metrics: Option<Arc<ConnectorMetrics>>,
}

/// The herder's lock for one change; publishes the connectors as they are when let go,
/// if they were changed (taken mutably).
struct Changing<'a> {
    connectors: tokio::sync::MutexGuard<'a, BTreeMap<Namespace, Entry>>,
    view: &'a std::sync::RwLock<Arc<BTreeMap<Namespace, View>>>,
    changed: bool,
}

impl std::ops::Deref for Changing<'_> {
    type Target = BTreeMap<Namespace, Entry>;
    fn deref(&self) -> &Self::Target {
        &self.connectors
    }
}

impl std::ops::DerefMut for Changing<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.changed = true;
        &mut self.connectors
    }
}

impl Drop for Changing<'_> {
    fn drop(&mut self) {
        if !self.changed {
            return;
        }
        let view = self
            .connectors
            .iter()
            .map(|(ns, e)| {
                let metrics = e.run.as_ref().map(|run| run.metrics.clone());
                (ns.clone(), View { config: e.config.clone(), target: e.target, tasks_max: e.tasks_max, metrics })
            })
            .collect();
        *self.view.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(view);
    }
}

/// A start refused, as a config problem of the file `source`: an invalid config as it is,
/// anything else (the name taken, the store) against its `name`.
fn as_config_error(source: String, error: HerderError) -> ConfigError {
    match error {
        HerderError::Invalid(e) => e,
        other => ConfigError { source, key: Some(NAME.into()), reason: other.to_string() },
    }
}

impl Herder {
    /// A worker with the default worker config (no tenants, SQLite in `data_dir`).
    pub async fn open(data_dir: &Path, plugin_dir: &Path) -> anyhow::Result<Herder> {
        Self::open_with_config(WorkerConfig::default(), data_dir, plugin_dir).await
    }

    /// A worker with the stores its config names, in `data_dir`, and the plugins of
    /// `plugin_dir` (compiled through the data directory's cache).
    pub async fn open_with_config(worker: WorkerConfig, data_dir: &Path, plugin_dir: &Path) -> anyhow::Result<Herder> {
        Self::open_for_plugins(worker, data_dir, plugin_dir, None, None).await
    }

    /// [`Herder::open_with_config`] that loads only the plugins named in `only` (all when
    /// `None`); the rest load at the registry's next refresh. `listening` is the REST API's
    /// address, if it serves one: statuses then name this worker `host:port`, as Connect's
    /// do, and `host:pid` otherwise.
    pub async fn open_for_plugins(
        worker: WorkerConfig,
        data_dir: &Path,
        plugin_dir: &Path,
        only: Option<&std::collections::BTreeSet<String>>,
        listening: Option<std::net::SocketAddr>,
    ) -> anyhow::Result<Herder> {
        let data_dir = DataDir::new(data_dir);
        let runtime = Runtime::for_worker(&worker.sandbox)?;
        let stores = Stores::open(&worker, &data_dir)?;
        let registry = Arc::new(Registry::load_only(&runtime, plugin_dir, &data_dir.plugin_cache(), only).await?);
        let worker_id = match listening {
            Some(addr) => format!("{}:{}", hostname(), addr.port()),
            None => format!("{}:{}", hostname(), std::process::id()),
        };
        let board = Arc::new(StatusBoard::new(worker_id, stores.statuses().clone()));
        let rates = Arc::new(TenantRates::new(&worker));
        let validations = Arc::new(super::limits::TenantValidations::new(&worker));
        let idle_polls = Arc::new(IdlePolls::new(worker.sandbox.idle_polls_per_second));
        let exit = Arc::default();
        let topics = Arc::new(ActiveTopics::new(worker.topic_tracking, stores.statuses().clone()));
        Ok(Herder::new(Services {
            exit,
            runtime,
            registry,
            stores,
            board,
            worker: Arc::new(worker),
            rates,
            validations,
            idle_polls,
            topics,
        }))
    }

    pub fn new(services: Services) -> Herder {
        Herder {
            services: Arc::new(services),
            connectors: Mutex::new(BTreeMap::new()),
            view: Default::default(),
            metrics: Default::default(),
        }
    }

    /// Returns once the herder could answer a read (reads never wait behind a change).
    pub async fn responsive(&self) {
        drop(self.view());
    }

    /// The herder's lock for a change (see [`Herder::view`]).
    async fn change(&self) -> Changing<'_> {
        Changing { connectors: self.connectors.lock().await, view: &self.view, changed: false }
    }

    /// Every connector as the last finished change left it.
    fn view(&self) -> Arc<BTreeMap<Namespace, View>> {
        self.view.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    fn running_now(&self) -> Vec<Running> {
        self.view().iter().map(|(ns, v)| (ns.clone(), v.tasks_max)).collect()
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

    /// The status of a connector this worker knows (UNASSIGNED until its loop reports).
    pub async fn connector_status(&self, ns: &Namespace) -> Result<ConnectorStatus, HerderError> {
        self.must_exist(ns).await?;
        let board = &self.services.board;
        Ok(board.get(ns).unwrap_or_else(|| ConnectorStatus {
            name: ns.connector.clone(),
            connector: ConnectorState {
                state: State::Unassigned,
                worker_id: board.worker_id().to_string(),
                trace: None,
                version: None,
            },
            tasks: Vec::new(),
            kind: "source".into(),
        }))
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
        self.metrics_in(ns).await.map_or(0, |m| m.delivered)
    }

    /// A running connector's counters: deliveries, ticks, the connector's memory.
    pub async fn metrics_in(&self, ns: &Namespace) -> Option<MetricsSnapshot> {
        self.view().get(ns)?.metrics.as_ref().map(|metrics| metrics.snapshot())
    }

    /// Every connector this worker knows, with its config and target state.
    pub async fn connectors(&self) -> Vec<(Namespace, ConnectorConfig, TargetState)> {
        self.view().iter().map(|(ns, v)| (ns.clone(), v.config.clone(), v.target)).collect()
    }

    /// A connector's config and target state.
    pub async fn connector(&self, ns: &Namespace) -> Option<(ConnectorConfig, TargetState)> {
        self.view().get(ns).map(|v| (v.config.clone(), v.target))
    }

    /// [`ConnectorConfig::check`] (a plugin named, the host's keys parse) after the
    /// tenant's grants are seen to stay inside its roots, so that parsing them (which looks
    /// at the filesystem) tells a tenant nothing of paths outside them.
    pub fn check(&self, config: &ConnectorConfig) -> Result<(), ConfigError> {
        let config = config.with_defaults(&self.services.worker.defaults);
        if let Some(problem) = admission::grants_outside_roots(&self.services, &config).into_iter().next() {
            return Err(problem);
        }
        config.check()
    }

    /// Checks a config the way `start` would: host keys, the tenant's rules, the plugin's
    /// `config-def`, and the plugin's own `validate`.
    pub async fn validate(&self, config: &ConnectorConfig) -> Result<Admitted, ConfigError> {
        let _place = self.validation_place(config).await;
        admission::admit(&self.services, config, &self.running_now()).await
    }

    /// A place for one of the config's tenant's plugin checks (`limits::TenantValidations`),
    /// taken only where the herder's lock is not held: a check waiting for its tenant's
    /// place must not hold up every other tenant's changes.
    async fn validation_place(&self, config: &ConnectorConfig) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.services.validations.place(&self.namespace_of(config).tenant).await
    }

    /// Checks several configs as if all were started, each against the tenants' quotas
    /// with the ones before it counted: nothing need start for a bad one to be refused
    /// (the error says which: its index in `configs`).
    pub async fn validate_all(&self, configs: &[ConnectorConfig]) -> Result<Vec<Admitted>, (usize, ConfigError)> {
        let mut running = self.running_now();
        let mut admitted = Vec::with_capacity(configs.len());
        for (at, config) in configs.iter().enumerate() {
            let one = admission::admit(&self.services, config, &running).await.map_err(|e| (at, e))?;
            running.push((self.namespace_of(config), one.settings.tasks_max));
            admitted.push(one);
        }
        Ok(admitted)
    }

    /// Loads the plugin `config` names if the folder has it and it is not loaded yet (it
    /// is compiled before the connectors' lock is taken: other requests need not wait).
    async fn load_plugin_of(&self, config: &ConnectorConfig) {
        if let Ok(name) = config.plugin() {
            self.services.registry.get_or_load(&self.services.runtime, name).await;
        }
    }

    /// [`Herder::load_plugin_of`] the config a connector has now.
    async fn load_plugin_of_connector(&self, ns: &Namespace) {
        if let Some((config, _)) = self.connector(ns).await {
            self.load_plugin_of(&config).await;
        }
    }

    fn running(&self, connectors: &BTreeMap<Namespace, Entry>) -> Vec<Running> {
        connectors.iter().map(|(ns, e)| (ns.clone(), e.tasks_max)).collect()
    }

    fn namespace_of(&self, config: &ConnectorConfig) -> Namespace {
        Namespace::new(config.with_defaults(&self.services.worker.defaults).tenant(), &config.name)
    }

    /// Validates and starts a new connector (refused if one of that name exists); its
    /// config and target state are stored first. Warnings (unknown keys) go to the log.
    pub async fn start(&self, config: ConnectorConfig) -> Result<(), ConfigError> {
        let source = config.source.clone();
        self.create(config).await.map(|_| ()).map_err(|e| as_config_error(source, e))
    }

    /// Starts a connector [`Herder::validate_all`] admitted, without asking its plugin
    /// again: `sluice run` checks every file before any starts, and a plugin's
    /// `validate` needs a sandbox the connectors started before it may by then hold.
    pub async fn start_admitted(&self, config: ConnectorConfig, admitted: Admitted) -> Result<(), ConfigError> {
        let source = config.source.clone();
        let ns = self.namespace_of(&config);
        let created = self.create_admitted(&ns, config, admitted, TargetState::Started).await;
        created.map(|_| ()).map_err(|e| as_config_error(source, e))
    }

    /// Creates a connector: 409-style `Exists` if the name is taken in its tenant.
    pub async fn create(&self, config: ConnectorConfig) -> Result<Namespace, HerderError> {
        self.create_in(config, TargetState::Started).await
    }

    /// Creates a connector in `target` (KIP-980's `initial_state`: created PAUSED or
    /// STOPPED, it writes nothing until resumed, so its offsets can be set first).
    pub async fn create_in(&self, config: ConnectorConfig, target: TargetState) -> Result<Namespace, HerderError> {
        let ns = self.namespace_of(&config);
        if self.view().contains_key(&ns) {
            return Err(HerderError::Exists(config.name.clone()));
        }
        let admitted = self.admit_unlocked(&config).await?;
        self.create_admitted(&ns, config, admitted, target).await
    }

    /// Admits `config` without the herder's lock: compiling its plugin and the plugin's
    /// `config-def` and `validate` calls (each up to its deadline) hold up no other
    /// change. The tenant's quotas are checked again under the lock
    /// ([`admission::recheck_tenant`]).
    async fn admit_unlocked(&self, config: &ConnectorConfig) -> Result<Admitted, HerderError> {
        self.load_plugin_of(config).await;
        let _place = self.validation_place(config).await;
        Ok(admission::admit(&self.services, config, &self.running_now()).await?)
    }

    async fn create_admitted(
        &self,
        ns: &Namespace,
        config: ConnectorConfig,
        mut admitted: Admitted,
        target: TargetState,
    ) -> Result<Namespace, HerderError> {
        let mut connectors = self.change().await;
        // Another create of the name may have won meanwhile.
        if connectors.contains_key(ns) {
            return Err(HerderError::Exists(config.name.clone()));
        }
        admission::recheck_tenant(&self.services, &config, &mut admitted, &self.running(&connectors))?;
        let ns = ns.clone();
        self.store_config(&ns, &config, target)?;
        let entry = self.launch(&ns, config, admitted, target, false);
        connectors.insert(ns.clone(), entry);
        Ok(ns)
    }

    /// Creates the connector, or replaces its config (restarting it with the new one, in
    /// its target state). Returns whether it was created.
    pub async fn put_config(&self, config: ConnectorConfig) -> Result<bool, HerderError> {
        let ns = self.namespace_of(&config);
        let mut admitted = self.admit_unlocked(&config).await?;
        let mut connectors = self.change().await;
        let Some(target) = connectors.get(&ns).map(|e| e.target) else {
            drop(connectors);
            return self.create_admitted(&ns, config, admitted, TargetState::Started).await.map(|_| true);
        };
        admission::recheck_tenant(&self.services, &config, &mut admitted, &self.running(&connectors))?;
        // The same config again (a deploy tool applying what is already there): as in
        // Kafka Connect, the connector instance restarts and its tasks run on untouched,
        // since the task configs it generates are the same.
        let entry = connectors.get(&ns).expect("checked above");
        if let Some(run) = &entry.run
            && !run.join.is_finished()
            && entry.config.values == config.values
            && self.replaced_plugin(entry).is_none()
        {
            let _ = run.control.send(Control::Restart { connector: true, tasks: Tasks::None });
            return Ok(false);
        }
        // Stored first: a store that refuses the write (Kafka away) leaves the connector
        // running as it was, as the answer says, not stopped until the next restart.
        self.store_config(&ns, &config, target)?;
        let old = connectors.remove(&ns).expect("checked above");
        if let Some(run) = old.run {
            run.stop().await;
        }
        let entry = self.launch(&ns, config, admitted, target, false);
        connectors.insert(ns, entry);
        Ok(false)
    }

    /// Replaces a connector's config with what `change` makes of it and restarts it in its
    /// target state. The new config is admitted (its plugin loaded, its `validate` called,
    /// which may take the call's whole deadline) without the lock that creates, updates and
    /// deletes take, as a create's is, so nobody else's change waits on it; under the lock
    /// the patch is applied again to the config then current if another change came in
    /// between (two patches of different keys both stay), and after a few such rounds it
    /// is admitted under the lock. `NotFound` if there is no such connector: a patch never
    /// creates one.
    pub async fn patch_config(
        &self,
        ns: &Namespace,
        mut change: impl FnMut(&ConnectorConfig) -> Result<ConnectorConfig, HerderError>,
    ) -> Result<ConnectorConfig, HerderError> {
        /// Rounds admitted without the lock before one is admitted under it.
        const UNLOCKED_ROUNDS: usize = 3;
        let not_found = || HerderError::NotFound(ns.connector.clone());
        for round in 0..=UNLOCKED_ROUNDS {
            let locked = round == UNLOCKED_ROUNDS;
            let mut admitted_unlocked = None;
            let mut connectors = if locked {
                self.load_plugin_of_connector(ns).await;
                self.change().await
            } else {
                let (current, _) = self.connector(ns).await.ok_or_else(not_found)?;
                let config = self.patched(ns, &current, &mut change)?;
                let admitted = self.admit_unlocked(&config).await?;
                admitted_unlocked = Some((current, config, admitted));
                self.change().await
            };
            let entry = connectors.get(ns).ok_or_else(not_found)?;
            let target = entry.target;
            let (config, admitted) = match admitted_unlocked {
                // Changed meanwhile: the patch is applied to what is there now.
                Some((current, _, _)) if current.values != entry.config.values => continue,
                Some((_, config, mut admitted)) => {
                    admission::recheck_tenant(&self.services, &config, &mut admitted, &self.running(&connectors))?;
                    (config, admitted)
                }
                None => {
                    let config = self.patched(ns, &entry.config, &mut change)?;
                    let admitted = admission::admit(&self.services, &config, &self.running(&connectors)).await?;
                    (config, admitted)
                }
            };
            // Stored first, as by `put_config`.
            self.store_config(ns, &config, target)?;
            let old = connectors.remove(ns).expect("checked above");
            if let Some(run) = old.run {
                run.stop().await;
            }
            let entry = self.launch(ns, config.clone(), admitted, target, false);
            connectors.insert(ns.clone(), entry);
            return Ok(config);
        }
        unreachable!("the last round is admitted under the lock")
    }

    /// What `change` makes of `current`, refused when it names another tenant than the one
    /// the connector is stored under: a patch does not move a connector.
    fn patched(
        &self,
        ns: &Namespace,
        current: &ConnectorConfig,
        change: &mut impl FnMut(&ConnectorConfig) -> Result<ConnectorConfig, HerderError>,
    ) -> Result<ConnectorConfig, HerderError> {
        let config = change(current)?;
        if self.namespace_of(&config) != *ns {
            let reason = format!("the connector is tenant '{}''s; a patch does not move it to another", ns.tenant);
            return Err(config.error(crate::config::keys::TENANT, reason).into());
        }
        Ok(config)
    }

    fn store_config(&self, ns: &Namespace, config: &ConnectorConfig, target: TargetState) -> Result<(), HerderError> {
        let configs = self.services.stores.configs();
        configs.put_connector_config(ns, &config.to_pairs()).map_err(HerderError::Store)?;
        configs.put_target_state(ns, target).map_err(HerderError::Store)
    }

    /// Starts the connector's loop in `target` (none for STOPPED).
    /// `restored`: brought back by a worker that starts (its stored tasks are its tasks while
    /// it is paused, as in Connect).
    fn launch(
        &self,
        ns: &Namespace,
        config: ConnectorConfig,
        admitted: Admitted,
        target: TargetState,
        restored: bool,
    ) -> Entry {
        let Admitted { settings, plugin, warnings } = admitted;
        for warning in warnings {
            tracing::warn!("{warning}");
        }
        let tasks_max = settings.tasks_max;
        let board = &self.services.board;
        board.set_version(ns, &plugin.version);
        if target == TargetState::Stopped {
            board.set_connector(ns, State::Stopped, None);
            board.retain_tasks(ns, 0);
            return Entry { config, target, tasks_max, run: None };
        }
        let config = config.with_defaults(&self.services.worker.defaults);
        let (stop, stop_rx) = watch::channel(None);
        let (control, control_rx) = mpsc::unbounded_channel();
        let (paused, paused_rx) = watch::channel(target == TargetState::Paused);
        let metrics = self.metrics.lock().unwrap().entry(ns.clone()).or_default().clone();
        let destination =
            match destinations::for_connector(&settings, &config, &self.services.worker, &self.services.stores) {
                Ok(destination) => destination,
                Err(e) => {
                    board.set_connector(ns, State::Failed, Some(format!("destination: {e:#}")));
                    board.retain_tasks(ns, 0);
                    return Entry { config, target, tasks_max, run: None };
                }
            };
        board.set_connector(ns, State::Unassigned, None);
        // A new run starts with no task: those of a run before it (an old config's) were
        // stopped with it, and would otherwise stay on the board looking RUNNING should
        // this run's connector fail before it starts any.
        board.retain_tasks(ns, 0);
        let stop_within = settings.sandbox.timeouts.lifecycle;
        let run_plugin = plugin.clone();
        let run = ConnectorRun {
            services: self.services.clone(),
            namespace: ns.clone(),
            config: config.clone(),
            settings: Arc::new(settings),
            plugin,
            destination,
            metrics: metrics.clone(),
            reconfigure: Arc::new(Notify::new()),
            finished: Arc::new(Notify::new()),
            wake: tokio::sync::watch::Sender::new(0),
            tasks: Vec::new(),
            paused: paused_rx,
            restored,
        };
        let join = tokio::spawn(run.run(stop_rx, control_rx));
        let run = RunningConnector { stop, stop_within, join, metrics, control, paused, plugin: run_plugin };
        Entry { config, target, tasks_max, run: Some(run) }
    }

    /// Brings back every stored connector in its target state (`sluice serve` at start).
    /// A config that no longer passes (its plugin is gone, say) is left FAILED with why.
    pub async fn restore(&self) -> anyhow::Result<usize> {
        let stored = self.services.stores.configs().stored_connectors()?;
        let mut connectors = self.change().await;
        let mut restored = 0;
        // Those that cannot start join the list after every one that can: listed before,
        // they would count against a tenant's quota and keep healthy ones from starting.
        let mut failed = Vec::new();
        for (ns, pairs, target) in stored {
            if connectors.contains_key(&ns) {
                continue;
            }
            let map: serde_json::Map<String, serde_json::Value> =
                pairs.into_iter().map(|(key, value)| (key, serde_json::Value::String(value))).collect();
            let config = match ConnectorConfig::from_map(Some(ns.connector.clone()), &map, &ns.connector) {
                Ok(config) => config,
                Err(e) => {
                    tracing::error!(tenant = %ns.tenant, connector = %ns.connector, "cannot bring back: {e}");
                    self.services.board.set_connector(&ns, State::Failed, Some(e.to_string()));
                    continue;
                }
            };
            // A config that no longer passes its checks (a granted directory gone, say)
            // stays listed, FAILED with why, for a restart once it is fixed or a delete.
            let checked = config.check().map_err(|e| e.to_string());
            let admitted = match checked {
                Ok(()) => admission::admit(&self.services, &config, &self.running(&connectors))
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e),
            };
            match admitted {
                Ok(admitted) => {
                    let entry = self.launch(&ns, config, admitted, target, true);
                    connectors.insert(ns, entry);
                    restored += 1;
                }
                Err(e) => {
                    tracing::error!(tenant = %ns.tenant, connector = %ns.connector, "cannot bring back: {e}");
                    self.services.board.set_connector(&ns, State::Failed, Some(e.to_string()));
                    let tasks_max = config.settings().map_or(1, |s| s.tasks_max);
                    failed.push((ns, Entry { config, target, tasks_max, run: None }));
                }
            }
        }
        connectors.extend(failed);
        Ok(restored)
    }

    /// Pauses (tasks stop polling, offsets committed) or resumes a connector; resuming a
    /// STOPPED one starts it.
    pub async fn set_paused(&self, ns: &Namespace, pause: bool) -> Result<(), HerderError> {
        self.load_plugin_of_connector(ns).await;
        let mut connectors = self.change().await;
        let entry = connectors.get_mut(ns).ok_or_else(|| HerderError::NotFound(ns.connector.clone()))?;
        let target = if pause { TargetState::Paused } else { TargetState::Started };
        self.services.stores.configs().put_target_state(ns, target).map_err(HerderError::Store)?;
        if let Some(run) = &entry.run {
            let _ = run.paused.send(pause);
            entry.target = target;
            return Ok(());
        }
        let config = entry.config.clone();
        entry.target = target;
        match admission::admit(&self.services, &config, &self.running(&connectors)).await {
            Ok(admitted) => {
                let entry = self.launch(ns, config, admitted, target, false);
                connectors.insert(ns.clone(), entry);
            }
            // As in Connect, a resume only sets the target state: a connector that then
            // cannot start (its plugin file removed meanwhile, its tenant's quota full) is
            // FAILED with why, and a restart tries again once that is mended.
            Err(e) => {
                tracing::error!(tenant = %ns.tenant, connector = %ns.connector, "cannot start: {e}");
                self.services.board.set_connector(ns, State::Failed, Some(e.to_string()));
                self.services.board.retain_tasks(ns, 0);
            }
        }
        Ok(())
    }

    /// Stops a connector (Kafka Connect's KIP-875 STOPPED): its tasks and instance are shut
    /// down, offsets committed first; it stays, with its config, until resumed or deleted.
    pub async fn stop_connector(&self, ns: &Namespace) -> Result<(), HerderError> {
        let mut connectors = self.change().await;
        let entry = connectors.get_mut(ns).ok_or_else(|| HerderError::NotFound(ns.connector.clone()))?;
        self.services.stores.configs().put_target_state(ns, TargetState::Stopped).map_err(HerderError::Store)?;
        entry.target = TargetState::Stopped;
        if let Some(run) = entry.run.take() {
            run.stop().await;
        }
        self.services.board.set_connector(ns, State::Stopped, None);
        self.services.board.retain_tasks(ns, 0);
        Ok(())
    }

    /// Restarts the connector instance and/or its tasks, as Kafka Connect's
    /// `POST /connectors/{name}/restart?includeTasks&onlyFailed`. Returns the status as it
    /// stands, with what will restart shown RESTARTING (`None` when nothing will).
    pub async fn restart(
        &self,
        ns: &Namespace,
        include_tasks: bool,
        only_failed: bool,
    ) -> Result<Option<ConnectorStatus>, HerderError> {
        // A restart may start it on a plugin file loaded only now: compiled before the lock.
        self.load_plugin_of_connector(ns).await;
        let connectors = self.change().await;
        let entry = connectors.get(ns).ok_or_else(|| HerderError::NotFound(ns.connector.clone()))?;
        let mut status = self.services.board.get(ns).ok_or_else(|| HerderError::NotFound(ns.connector.clone()))?;
        let Some(run) = &entry.run else {
            if entry.target == TargetState::Stopped {
                // As Connect does: restarted in its target state, which runs nothing, and
                // the answer shows it RESTARTING as Connect's restart plan does (the
                // status goes back to STOPPED). Resuming is what starts it.
                if !only_failed {
                    status.connector.state = State::Restarting;
                }
                return Ok((include_tasks || only_failed).then_some(status));
            }
            // It is meant to run but never started (its plugin was gone when the worker
            // started, a grant or its destination was refused): start it afresh.
            drop(connectors);
            self.relaunch(ns).await?;
            status.connector.state = State::Restarting;
            return Ok((include_tasks || only_failed).then_some(status));
        };
        let connector = !only_failed || status.connector.state == State::Failed;
        if connector && let Some(newer) = self.replaced_plugin(entry) {
            // The plugin file was replaced: the connector and all its tasks start again on
            // the new code, as a new connector would.
            drop(connectors);
            self.relaunch(ns).await?;
            tracing::info!(tenant = %ns.tenant, connector = %ns.connector, version = %newer, "restarted on the replaced plugin");
            status.connector.state = State::Restarting;
            for task in &mut status.tasks {
                task.state = State::Restarting;
            }
            return Ok((include_tasks || only_failed).then_some(status));
        }
        let tasks = match (include_tasks, only_failed) {
            (false, _) => Tasks::None,
            (true, false) => Tasks::All,
            (true, true) => Tasks::Failed,
        };
        let _ = run.control.send(Control::Restart { connector, tasks });
        if connector {
            status.connector.state = State::Restarting;
        }
        for task in &mut status.tasks {
            if tasks == Tasks::All || (tasks == Tasks::Failed && task.state == State::Failed) {
                task.state = State::Restarting;
            }
        }
        Ok((include_tasks || only_failed).then_some(status))
    }

    /// The version of the plugin file now in the folder, when it is not what `entry` runs.
    fn replaced_plugin(&self, entry: &Entry) -> Option<String> {
        let running = entry.run.as_ref()?.plugin.clone();
        let now = self.services.registry.get(&running.name)?;
        (!Arc::ptr_eq(&running, &now)).then(|| now.version.clone())
    }

    /// Stops the connector and starts it again from its stored config, admitted afresh
    /// (so on the plugin file in the folder now), in its target state.
    async fn relaunch(&self, ns: &Namespace) -> Result<(), HerderError> {
        let mut connectors = self.change().await;
        let entry = connectors.get(ns).ok_or_else(|| HerderError::NotFound(ns.connector.clone()))?;
        let (config, target) = (entry.config.clone(), entry.target);
        let admitted = match admission::admit(&self.services, &config, &self.running(&connectors)).await {
            Ok(admitted) => admitted,
            Err(e) if entry.run.is_none() => {
                // Still cannot start: the status says why now.
                self.services.board.set_connector(ns, State::Failed, Some(e.to_string()));
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        };
        let old = connectors.remove(ns).expect("checked above");
        if let Some(run) = old.run {
            run.stop().await;
        }
        let entry = self.launch(ns, config, admitted, target, false);
        connectors.insert(ns.clone(), entry);
        Ok(())
    }

    /// Every problem in `config`, for Kafka Connect's validate endpoint (empty when it
    /// would be admitted).
    pub async fn problems(&self, config: &ConnectorConfig) -> Vec<ConfigError> {
        let _place = self.validation_place(config).await;
        admission::problems(&self.services, config, &self.running_now()).await
    }

    /// The task configs the connector last generated (stored), by task id; none while it
    /// is STOPPED, as Connect shows a stopped connector (the stored ones stay, so the
    /// tasks of that generation are still fenced when it starts again with fewer).
    pub async fn task_configs(&self, ns: &Namespace) -> Result<Vec<Vec<(String, String)>>, HerderError> {
        match self.view().get(ns) {
            None => return Err(HerderError::NotFound(ns.connector.clone())),
            Some(view) if view.target == TargetState::Stopped => return Ok(Vec::new()),
            Some(_) => {}
        }
        self.services.stores.configs().task_configs(ns).map_err(HerderError::Store)
    }

    /// `NotFound` unless the connector exists.
    async fn must_exist(&self, ns: &Namespace) -> Result<(), HerderError> {
        match self.view().contains_key(ns) {
            true => Ok(()),
            false => Err(HerderError::NotFound(ns.connector.clone())),
        }
    }

    /// A connector's committed offsets, as (partition, offset) JSON texts.
    pub async fn offsets(&self, ns: &Namespace) -> Result<Vec<(String, String)>, HerderError> {
        self.must_exist(ns).await?;
        self.services.stores.offsets().all_offsets(ns).map_err(HerderError::Store)
    }

    /// The topics the connector has written to since they were last reset (KIP-558).
    pub async fn active_topics(&self, ns: &Namespace) -> Result<Vec<String>, HerderError> {
        self.must_exist(ns).await?;
        self.services.topics.list(ns).map_err(HerderError::Store)
    }

    /// Forgets the topics the connector has written to (KIP-558's reset): the next batch
    /// to each is recorded afresh.
    pub async fn reset_active_topics(&self, ns: &Namespace) -> Result<(), HerderError> {
        self.must_exist(ns).await?;
        self.services.topics.reset(ns).map_err(HerderError::Store)
    }

    /// Forgets every committed offset of a STOPPED connector (KIP-875's reset).
    pub async fn reset_offsets(&self, ns: &Namespace) -> Result<(), HerderError> {
        let all = self.services.stores.offsets().all_offsets(ns).map_err(HerderError::Store)?;
        let changes: Vec<(String, Option<String>)> = all.into_iter().map(|(partition, _)| (partition, None)).collect();
        self.alter_offsets(ns, &changes).await
    }

    /// The counters of every running connector.
    pub async fn all_metrics(&self) -> Vec<(Namespace, Arc<ConnectorMetrics>)> {
        self.view()
            .iter()
            .filter_map(|(ns, v)| v.metrics.as_ref().map(|metrics| (ns.clone(), metrics.clone())))
            .collect()
    }

    /// Restarts one task.
    pub async fn restart_task(&self, ns: &Namespace, task: u32) -> Result<(), HerderError> {
        let connectors = self.change().await;
        let entry = connectors.get(ns).ok_or_else(|| HerderError::NotFound(ns.connector.clone()))?;
        let status = self.services.board.get(ns);
        let exists = status.is_some_and(|s| s.tasks.iter().any(|t| t.id == task));
        match &entry.run {
            Some(run) if exists => {
                let _ = run.control.send(Control::Restart { connector: false, tasks: Tasks::One(task) });
                Ok(())
            }
            _ => Err(HerderError::TaskNotFound(ns.connector.clone(), task)),
        }
    }

    /// Deletes a connector: stopped gracefully, then forgotten (its offsets stay).
    pub async fn delete(&self, ns: &Namespace) -> Result<(), HerderError> {
        let mut connectors = self.change().await;
        if !connectors.contains_key(ns) {
            return Err(HerderError::NotFound(ns.connector.clone()));
        }
        // Forgotten in the store first: a delete the store refuses (Kafka away) leaves the
        // connector running, to be deleted again, rather than stopped here and back at
        // the next restart.
        self.services.stores.configs().delete_connector(ns).map_err(HerderError::Store)?;
        let entry = connectors.remove(ns).expect("checked above");
        if let Some(run) = entry.run {
            run.stop().await;
            // What its stop wrote (its statuses) goes too.
            if let Err(e) = self.services.stores.configs().delete_connector(ns) {
                tracing::warn!(tenant = %ns.tenant, connector = %ns.connector, "deleted, but the statuses its stop wrote stay: {e:#}");
            }
        }
        self.services.board.remove(ns);
        self.metrics.lock().unwrap().remove(ns);
        // A connector made again under the name starts with no active topics (KIP-558):
        // they were deleted with its config.
        self.services.topics.forget(ns);
        Ok(())
    }

    /// Changes committed offsets (KIP-875): only while the connector is STOPPED. `None`
    /// as an offset forgets the partition's.
    pub async fn alter_offsets(&self, ns: &Namespace, changes: &[(String, Option<String>)]) -> Result<(), HerderError> {
        let connectors = self.change().await;
        let entry = connectors.get(ns).ok_or_else(|| HerderError::NotFound(ns.connector.clone()))?;
        if entry.target != TargetState::Stopped || entry.run.is_some() {
            return Err(HerderError::Refused(format!(
                "Connectors must be in the STOPPED state before their offsets can be modified. This can be done for the specified connector by issuing a 'PUT' request to the '/connectors/{}/stop' endpoint",
                ns.connector
            )));
        }
        // A batch given up on as it stopped (the broker away) commits its offsets when
        // Kafka answers for it: a change now would be undone by that commit.
        if crate::destinations::kafka::delivery_under_way(ns) {
            return Err(HerderError::Refused(format!(
                "A batch connector {} gave up on as it stopped is still with the Kafka producer (the cluster is away); its offsets are committed when Kafka answers for it, message.timeout.ms at most. Modify the offsets after that",
                ns.connector
            )));
        }
        let offsets = self.services.stores.offsets();
        let set: Vec<(String, String)> =
            changes.iter().filter_map(|(p, o)| o.as_ref().map(|o| (p.clone(), o.clone()))).collect();
        offsets.commit_offsets(ns, &set).map_err(HerderError::Store)?;
        for (partition, _) in changes.iter().filter(|(_, o)| o.is_none()) {
            offsets.delete_offset(ns, partition).map_err(HerderError::Store)?;
        }
        Ok(())
    }

    /// Stops one connector of the `default` tenant and forgets it in this process (its
    /// stored config and offsets stay). False if unknown.
    pub async fn stop(&self, connector: &str) -> bool {
        self.stop_in(&Namespace::new(DEFAULT_TENANT, connector)).await
    }

    pub async fn stop_in(&self, ns: &Namespace) -> bool {
        let entry = self.change().await.remove(ns);
        match entry {
            Some(entry) => {
                if let Some(run) = entry.run {
                    run.stop().await;
                }
                true
            }
            None => false,
        }
    }

    /// Stops every connector, all at once: within the longest lifecycle call timeout.
    pub async fn shutdown(&self) {
        let runs: Vec<RunningConnector> =
            std::mem::take(&mut *self.change().await).into_values().filter_map(|e| e.run).collect();
        let now = Instant::now();
        for run in &runs {
            let _ = run.stop.send(Some(now + run.stop_within));
        }
        for run in runs {
            let _ = run.join.await;
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}
