//! Connector and task lifecycle, with Kafka Connect's states. Owns the decision of what a
//! reconfiguration changes: after `task-configs`, only tasks whose config changed or that
//! no longer exist are stopped (their offsets committed first), new ones are started,
//! and unchanged tasks keep running. A failed connector or task is restarted with
//! exponential backoff when its `restart.policy` is `on-failure`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use tokio::sync::{Mutex, mpsc, watch};
use tokio::task::JoinHandle;

use crate::bindings::ConnectorError;
use crate::config::{CONNECTOR_CLASS, ConfigError, ConnectorConfig, ConnectorSettings};
use crate::destination::{self, Destination};
use crate::embedded::Embedded;
use crate::registry::{Plugin, Registry};
use crate::sandbox::{InstanceContext, PluginInstance, Runtime, describe_connector_error};
use crate::status::{ConnectorStatus, State, StatusBoard};
use crate::store::{ConfigStore, DEFAULT_TENANT, Namespace, OffsetStore, RecordLog};
use crate::task_runner::{TaskSpec, run_task};
use crate::tenants::Tenants;

/// What every connector of a host shares.
pub struct Services {
    pub runtime: Arc<Runtime>,
    pub registry: Arc<Registry>,
    pub offsets: Arc<dyn OffsetStore>,
    pub configs: Arc<dyn ConfigStore>,
    pub records: Arc<dyn RecordLog>,
    pub board: Arc<StatusBoard>,
    pub tenants: Arc<Tenants>,
}

struct ConnectorHandle {
    tasks_max: u32,
    stop: watch::Sender<bool>,
    join: JoinHandle<()>,
    delivered: Arc<AtomicU64>,
}

pub struct Herder {
    services: Arc<Services>,
    connectors: Mutex<BTreeMap<Namespace, ConnectorHandle>>,
}

impl Herder {
    /// A host on the embedded default: `<data_dir>/sluice.db`, compiled plugins cached in
    /// `<data_dir>/compiled`.
    pub async fn open(data_dir: &Path, plugin_dir: &Path) -> anyhow::Result<Herder> {
        Self::open_with_tenants(data_dir, plugin_dir, Tenants::default()).await
    }

    /// The same, with the tenants of a worker config (`sluice.toml`).
    pub async fn open_with_tenants(data_dir: &Path, plugin_dir: &Path, tenants: Tenants) -> anyhow::Result<Herder> {
        let runtime = Runtime::with_fuel_metering(tenants.fuel_metering)?;
        let db = Arc::new(Embedded::open(data_dir)?);
        let registry = Arc::new(Registry::load(&runtime, plugin_dir, &data_dir.join("compiled")).await?);
        let worker_id = format!("{}:{}", hostname(), std::process::id());
        let board = Arc::new(StatusBoard::new(worker_id, db.clone()));
        Ok(Herder::new(Services {
            runtime,
            registry,
            offsets: db.clone(),
            configs: db.clone(),
            records: db,
            board,
            tenants: Arc::new(tenants),
        }))
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
        self.connectors.lock().await.get(ns).map_or(0, |c| c.delivered.load(Ordering::Relaxed))
    }

    /// Checks a config the way `start` would: host keys, the plugin's `config-def`, and
    /// the plugin's own `validate`.
    pub async fn validate(&self, config: &ConnectorConfig) -> Result<(ConnectorSettings, Arc<Plugin>), ConfigError> {
        let config = &config.with_defaults(&self.services.tenants.defaults);
        let mut settings = config.settings()?;
        if settings.sandbox.fuel_per_call.is_some() && !self.services.runtime.fuel_metering {
            let reason = "fuel metering is off in this worker: set [sandbox] fuel_metering = true in sluice.toml";
            return Err(config.error("sandbox.fuel.per.call", reason));
        }
        self.check_tenant(config, &mut settings).await?;
        let name = config.plugin()?;
        let registry = &self.services.registry;
        let Some(plugin) = registry.get(name) else {
            let known: Vec<&str> = registry.plugins.keys().map(String::as_str).collect();
            return Err(config.error(
                CONNECTOR_CLASS,
                format!(
                    "unknown plugin '{name}': no usable {name}.wasm in {} (loaded: {})",
                    registry.dir.display(),
                    known.join(", ")
                ),
            ));
        };
        for key in &plugin.config_def {
            match config.get(&key.name) {
                None if key.required => {
                    return Err(config.error(&key.name, format!("required by plugin {name} ({})", key.documentation)));
                }
                Some(value) => check_type(value, &key.type_name).map_err(|reason| config.error(&key.name, reason))?,
                None => {}
            }
        }
        let context = self.context(&Namespace::new(config.tenant(), &config.name), None, None);
        let mut instance = self
            .services
            .runtime
            .instantiate(plugin.pre(), context, &settings.sandbox)
            .await
            .map_err(|e| config.error(CONNECTOR_CLASS, format!("plugin {name} could not be instantiated: {e}")))?;
        let problems = instance
            .validate(&config.to_pairs())
            .await
            .map_err(|e| config.error(CONNECTOR_CLASS, format!("plugin {name} failed in validate: {e}")))?;
        if let Some(problem) = problems.into_iter().next() {
            return Err(config.error(&problem.key, problem.message));
        }
        Ok((settings, plugin.clone()))
    }

    /// Validates and starts a connector and its tasks.
    pub async fn start(&self, config: ConnectorConfig) -> Result<(), ConfigError> {
        let (settings, plugin) = self.validate(&config).await?;
        let config = config.with_defaults(&self.services.tenants.defaults);
        let namespace = Namespace::new(config.tenant(), &config.name);
        let mut connectors = self.connectors.lock().await;
        if connectors.contains_key(&namespace) {
            return Err(config.error("name", format!("a connector named '{}' is already running", config.name)));
        }
        if let Err(e) = self.services.configs.put_connector_config(&namespace, &config.to_pairs()) {
            return Err(config.error("name", format!("cannot store the config: {e:#}")));
        }
        let (stop, stop_rx) = watch::channel(false);
        let (reconfigure, reconfigure_rx) = mpsc::unbounded_channel();
        let delivered = Arc::new(AtomicU64::new(0));
        let destination =
            destination::for_kind(settings.destination, self.services.records.clone(), self.services.offsets.clone());
        self.services.board.set_connector(&namespace, State::Unassigned, None);
        let run = ConnectorRun {
            services: self.services.clone(),
            namespace,
            config,
            settings,
            plugin,
            destination,
            delivered: delivered.clone(),
            reconfigure,
            tasks: Vec::new(),
        };
        let (key, tasks_max) = (run.namespace.clone(), run.settings.tasks_max);
        let join = tokio::spawn(run.run(stop_rx, reconfigure_rx));
        connectors.insert(key, ConnectorHandle { tasks_max, stop, join, delivered });
        Ok(())
    }

    /// Stops a connector and its tasks gracefully (offsets committed). False if unknown.
    pub async fn stop(&self, connector: &str) -> bool {
        self.stop_in(&Namespace::new(DEFAULT_TENANT, connector)).await
    }

    pub async fn stop_in(&self, ns: &Namespace) -> bool {
        let handle = self.connectors.lock().await.remove(ns);
        match handle {
            Some(handle) => {
                let _ = handle.stop.send(true);
                let _ = handle.join.await;
                true
            }
            None => false,
        }
    }

    /// Stops every connector.
    pub async fn shutdown(&self) {
        let handles: Vec<ConnectorHandle> = std::mem::take(&mut *self.connectors.lock().await).into_values().collect();
        for handle in &handles {
            let _ = handle.stop.send(true);
        }
        for handle in handles {
            let _ = handle.join.await;
        }
    }

    /// The tenant's rules: it exists, grants stay inside its roots, and its quotas hold.
    async fn check_tenant(
        &self,
        config: &ConnectorConfig,
        settings: &mut ConnectorSettings,
    ) -> Result<(), ConfigError> {
        let tenants = &self.services.tenants;
        let Some(tenant) = tenants.get(config.tenant()) else {
            let declared = tenants.names().join(", ");
            return Err(config.error("tenant", format!("unknown tenant '{}' (declared: {declared})", config.tenant())));
        };
        for (key, dirs) in
            [("sandbox.fs.read", &settings.sandbox.fs_read), ("sandbox.fs.write", &settings.sandbox.fs_write)]
        {
            if let Some(dir) = dirs.iter().find(|dir| !tenant.may_grant(dir)) {
                let reason =
                    format!("'{}' is outside tenant {}'s roots ({})", dir.display(), tenant.name, tenant.roots_text());
                return Err(config.error(key, reason));
            }
        }
        let quotas = &tenant.quotas;
        if let Some(max) = quotas.memory_max_bytes
            && settings.sandbox.memory_max_bytes > max
        {
            if config.get("sandbox.memory.max.bytes").is_some() {
                let reason = format!(
                    "{} is above tenant {}'s quota of {max} bytes per instance",
                    settings.sandbox.memory_max_bytes, tenant.name
                );
                return Err(config.error("sandbox.memory.max.bytes", reason));
            }
            settings.sandbox.memory_max_bytes = max;
        }
        let connectors = self.connectors.lock().await;
        let mine: Vec<&ConnectorHandle> = connectors
            .iter()
            .filter(|(ns, _)| ns.tenant == tenant.name && ns.connector != config.name)
            .map(|(_, c)| c)
            .collect();
        if let Some(max) = quotas.connectors
            && mine.len() as u32 >= max
        {
            return Err(config
                .error("name", format!("tenant {} already runs {} connectors, its quota", tenant.name, mine.len())));
        }
        if let Some(max) = quotas.tasks {
            let in_use: u32 = mine.iter().map(|c| c.tasks_max).sum();
            if in_use + settings.tasks_max > max {
                let reason = format!(
                    "{} more tasks would exceed tenant {}'s quota of {max} tasks ({in_use} in use)",
                    settings.tasks_max, tenant.name
                );
                return Err(config.error(crate::config::TASKS_MAX, reason));
            }
        }
        Ok(())
    }

    fn context(
        &self,
        namespace: &Namespace,
        task: Option<u32>,
        reconfigure: Option<mpsc::UnboundedSender<()>>,
    ) -> InstanceContext {
        InstanceContext { namespace: namespace.clone(), task, offsets: self.services.offsets.clone(), reconfigure }
    }
}

fn check_type(value: &str, type_name: &str) -> Result<(), String> {
    let ok = match type_name {
        "INT" => value.trim().parse::<i32>().is_ok(),
        "LONG" => value.trim().parse::<i64>().is_ok(),
        "DOUBLE" => value.trim().parse::<f64>().is_ok(),
        "BOOLEAN" => matches!(value.trim().to_ascii_lowercase().as_str(), "true" | "false"),
        _ => true,
    };
    if ok { Ok(()) } else { Err(format!("'{value}' is not a valid {}", type_name.to_ascii_lowercase())) }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

struct TaskHandle {
    config: Vec<(String, String)>,
    stop: watch::Sender<bool>,
    join: JoinHandle<()>,
}

/// Signals every task first, then waits: tasks stop (and commit) concurrently.
async fn stop_all(tasks: Vec<TaskHandle>) {
    for task in &tasks {
        let _ = task.stop.send(true);
    }
    for task in tasks {
        let _ = task.join.await;
    }
}

/// One connector's loop: its instance, its ticks, its reconfigurations and its tasks.
struct ConnectorRun {
    services: Arc<Services>,
    namespace: Namespace,
    config: ConnectorConfig,
    settings: ConnectorSettings,
    plugin: Arc<Plugin>,
    destination: Arc<dyn Destination>,
    delivered: Arc<AtomicU64>,
    reconfigure: mpsc::UnboundedSender<()>,
    /// Index = task id.
    tasks: Vec<TaskHandle>,
}

impl ConnectorRun {
    async fn run(mut self, mut stop: watch::Receiver<bool>, mut reconfigure: mpsc::UnboundedReceiver<()>) {
        let board = self.services.board.clone();
        let name = self.namespace.clone();
        let mut attempt = 0u32;
        let mut failed = false;
        loop {
            let Some(trace) = self.run_instance(&mut stop, &mut reconfigure, &mut attempt).await else { break };
            board.set_connector(&name, State::Failed, Some(trace));
            let restart = self.settings.restart;
            if !restart.enabled {
                failed = true;
                stopped(&mut stop).await;
                break;
            }
            let delay = restart.backoff(attempt);
            attempt = attempt.saturating_add(1);
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = stopped(&mut stop) => break,
            }
            board.set_connector(&name, State::Restarting, None);
        }
        // Tasks run on when their connector fails, as in Kafka Connect; they stop with it.
        stop_all(std::mem::take(&mut self.tasks)).await;
        if !failed {
            board.set_connector(&name, State::Stopped, None);
        }
    }

    /// Runs one connector instance until it fails (returns the trace) or a stop is
    /// requested (returns `None`).
    async fn run_instance(
        &mut self,
        stop: &mut watch::Receiver<bool>,
        reconfigure: &mut mpsc::UnboundedReceiver<()>,
        attempt: &mut u32,
    ) -> Option<String> {
        let context = InstanceContext {
            namespace: self.namespace.clone(),
            task: None,
            offsets: self.services.offsets.clone(),
            reconfigure: Some(self.reconfigure.clone()),
        };
        let mut instance =
            match self.services.runtime.instantiate(self.plugin.pre(), context, &self.settings.sandbox).await {
                Ok(instance) => instance,
                Err(e) => return Some(e.to_string()),
            };
        match instance.connector_start(&self.config.to_pairs()).await {
            Err(e) => return Some(e.to_string()),
            Ok(Err(e)) => return Some(describe_connector_error(&e)),
            Ok(Ok(())) => {}
        }
        self.services.board.set_connector(&self.namespace, State::Running, None);
        if let Some(trace) = self.reconfigure(&mut instance).await {
            return Some(trace);
        }
        let started = Instant::now();
        let mut ticks = tokio::time::interval(self.settings.monitor_interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            if started.elapsed() > self.settings.restart.max_backoff {
                *attempt = 0;
            }
            tokio::select! {
                _ = stopped(stop) => {
                    if let Err(e) = instance.connector_stop().await {
                        tracing::warn!(connector = %self.config.name, "stop failed: {e}");
                    }
                    return None;
                }
                _ = ticks.tick() => match instance.tick().await {
                    Err(e) => return Some(e.to_string()),
                    Ok(Err(ConnectorError::Retriable(message))) => {
                        tracing::warn!(connector = %self.config.name, "tick: retriable error: {message}");
                    }
                    Ok(Err(e)) => return Some(describe_connector_error(&e)),
                    Ok(Ok(())) => {}
                },
                Some(()) = reconfigure.recv() => {
                    while reconfigure.try_recv().is_ok() {}
                    if let Some(trace) = self.reconfigure(&mut instance).await {
                        return Some(trace);
                    }
                }
            }
        }
    }

    /// Asks the connector for task configs and applies the difference.
    async fn reconfigure(&mut self, instance: &mut PluginInstance) -> Option<String> {
        let name = self.config.name.clone();
        let max = self.settings.tasks_max;
        let mut configs = match instance.task_configs(max).await {
            Err(e) => return Some(e.to_string()),
            Ok(Err(e)) => return Some(describe_connector_error(&e)),
            Ok(Ok(configs)) => configs,
        };
        if configs.len() > max as usize {
            tracing::warn!(connector = %name, "task-configs returned {} configs but tasks.max is {max}; using the first {max}", configs.len());
            configs.truncate(max as usize);
        }
        let unchanged =
            |i: usize, tasks: &[TaskHandle]| tasks.get(i).zip(configs.get(i)).is_some_and(|(t, c)| t.config == *c);
        let changed: Vec<usize> =
            (0..self.tasks.len().max(configs.len())).filter(|&i| !unchanged(i, &self.tasks)).collect();
        if changed.is_empty() {
            tracing::debug!(connector = %name, "task configs unchanged; no task restarted");
            return None;
        }
        // Stop first (each commits its offsets as it stops), then start the new ones.
        let old = std::mem::take(&mut self.tasks);
        let mut kept: Vec<Option<TaskHandle>> = Vec::with_capacity(configs.len());
        let mut stopping = Vec::new();
        for (i, task) in old.into_iter().enumerate() {
            if changed.contains(&i) {
                stopping.push(task);
                kept.push(None);
            } else {
                kept.push(Some(task));
            }
        }
        stop_all(stopping).await;
        kept.resize_with(configs.len(), || None);
        for (i, config) in configs.iter().enumerate() {
            if kept[i].is_none() {
                kept[i] = Some(self.start_task(i as u32, config.clone()));
            }
        }
        self.tasks = kept.into_iter().flatten().collect();
        self.services.board.retain_tasks(&self.namespace, configs.len() as u32);
        if let Err(e) = self.services.configs.put_task_configs(&self.namespace, &configs) {
            tracing::warn!(connector = %name, "cannot store task configs: {e:#}");
        }
        tracing::info!(connector = %name, tasks = configs.len(), "reconfigured: (re)started tasks {:?}", changed.iter().filter(|&&i| i < configs.len()).collect::<Vec<_>>());
        None
    }

    fn start_task(&self, task: u32, config: Vec<(String, String)>) -> TaskHandle {
        let (stop, stop_rx) = watch::channel(false);
        let spec = TaskSpec {
            services: self.services.clone(),
            namespace: self.namespace.clone(),
            task,
            config: config.clone(),
            plugin: self.plugin.clone(),
            settings: self.settings.clone(),
            destination: self.destination.clone(),
            delivered: self.delivered.clone(),
            reconfigure: self.reconfigure.clone(),
        };
        self.services.board.set_task(&self.namespace, task, State::Unassigned, None, 0);
        TaskHandle { config, stop, join: tokio::spawn(run_task(spec, stop_rx)) }
    }
}

/// Resolves once a stop was requested (or the requester is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}
