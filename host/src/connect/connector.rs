//! One connector's loop: its instance, its ticks, its reconfigurations (applying
//! [`super::reconfigure::plan`]) and its tasks. A failed connector is restarted with
//! exponential backoff when its `restart.policy` is `on-failure`; its tasks run on
//! meanwhile, as in Kafka Connect.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;

use super::metrics::ConnectorMetrics;
use super::reconfigure;
use super::services::{Services, StopSignal, stopped, unless_stopped, wake_after};
use super::task_runner::{TaskSpec, run_task};
use crate::config::{ConnectorConfig, ConnectorSettings, SandboxSettings};
use crate::destinations::Destination;
use crate::runtime::bindings::ConnectorError;
use crate::runtime::sandbox::{describe_connector_error, retriable_log_text};
use crate::runtime::{Pairs, Plugin, PluginInstance};
use crate::storage::{Namespace, State};

/// What the herder may ask of a running connector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Restart the connector instance (when `connector`) and these tasks.
    Restart { connector: bool, tasks: Tasks },
}

/// Which tasks a restart touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tasks {
    None,
    All,
    Failed,
    One(u32),
}

/// How one connector instance ended.
enum InstanceEnd {
    Stopped,
    Failed(String),
    /// Asked to restart: a new instance at once.
    Restart,
    /// Every task finished (said it was done): the instance was stopped.
    Finished,
}

pub(super) struct TaskHandle {
    config: Arc<Pairs>,
    stop: watch::Sender<Option<Instant>>,
    join: JoinHandle<()>,
}

/// Signals every task first, then waits: tasks stop (and commit) concurrently, each by
/// `deadline`.
async fn stop_all(tasks: Vec<TaskHandle>, deadline: Instant) {
    for task in &tasks {
        let _ = task.stop.send(Some(deadline));
    }
    for task in tasks {
        let _ = task.join.await;
    }
}

/// The granted directories (`sandbox.fs.read` and `sandbox.fs.write`) as they were when a
/// connector instance was made. An instance holds each open, so one removed and made again
/// under its name (`rm -rf in && mkdir in`) is not the one it lists or moves files into:
/// the connector and its tasks are restarted to grant the new one (checked again at
/// instantiation, as every grant is), once no task is part way through what it reads.
struct GrantedDirs(Vec<(PathBuf, Option<(u64, u64)>)>);

/// How long the restart for a replaced grant waits for busy tasks (a log renamed away with
/// its directory and still written keeps its task busy for as long as it is written).
const REPLACED_GRANT_MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

impl GrantedDirs {
    fn now(sandbox: &SandboxSettings) -> GrantedDirs {
        let dirs = sandbox.fs_read.iter().chain(&sandbox.fs_write);
        GrantedDirs(dirs.map(|dir| (dir.clone(), identity(dir))).collect())
    }

    /// A granted directory that is now another directory (one that is gone and not back
    /// yet is not: a restart could not grant it).
    fn replaced(&self) -> Option<&Path> {
        self.0.iter().find_map(|(dir, then)| {
            let now = identity(dir)?;
            then.is_some_and(|then| then != now).then_some(dir.as_path())
        })
    }

    /// A granted directory that was there when the instance was made and is gone now.
    fn gone(&self) -> Option<&Path> {
        self.0.iter().find_map(|(dir, then)| (then.is_some() && identity(dir).is_none()).then_some(dir.as_path()))
    }
}

#[cfg(unix)]
fn identity(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn identity(_dir: &Path) -> Option<(u64, u64)> {
    None
}

pub(super) struct ConnectorRun {
    pub(super) services: Arc<Services>,
    pub(super) namespace: Namespace,
    pub(super) config: ConnectorConfig,
    /// Shared with every task.
    pub(super) settings: Arc<ConnectorSettings>,
    pub(super) plugin: Arc<Plugin>,
    pub(super) destination: Arc<dyn Destination>,
    pub(super) metrics: Arc<ConnectorMetrics>,
    /// `request-task-reconfiguration` from the connector or its tasks (coalesced).
    pub(super) reconfigure: Arc<Notify>,
    /// A task finished: time to see whether all have.
    pub(super) finished: Arc<Notify>,
    /// Bumped at every reconfiguration request, so idle tasks poll again at once.
    pub(super) wake: watch::Sender<u64>,
    /// Index = task id; empty until the first `task-configs`.
    pub(super) tasks: Vec<TaskHandle>,
    /// `true` while the connector is paused (its tasks do not poll, it does not tick).
    pub(super) paused: watch::Receiver<bool>,
    /// Brought back by a worker that starts: while it is paused, its tasks are those of
    /// the task configs stored last (as Connect brings them back).
    pub(super) restored: bool,
}

impl ConnectorRun {
    pub(super) async fn run(mut self, mut stop: StopSignal, mut control: mpsc::UnboundedReceiver<Control>) {
        let board = self.services.board.clone();
        let name = self.namespace.clone();
        let mut attempt = 0u32;
        // How the loop ended, for the state left on the board.
        let (mut failed, mut finished) = (false, false);
        'instances: loop {
            let trace = match self.run_instance(&mut stop, &mut control, &mut attempt).await {
                InstanceEnd::Stopped => break,
                InstanceEnd::Restart => {
                    board.set_connector(&name, State::Restarting, None);
                    continue;
                }
                InstanceEnd::Failed(trace) => trace,
                InstanceEnd::Finished => {
                    board.set_connector(&name, State::Finished, None);
                    // Finished: nothing runs until a restart request or the stop.
                    loop {
                        tokio::select! {
                            _ = stopped(&mut stop) => {
                                finished = true;
                                break 'instances;
                            }
                            Some(Control::Restart { connector, tasks }) = control.recv() => {
                                self.restart_tasks(tasks).await;
                                if connector {
                                    board.set_connector(&name, State::Restarting, None);
                                    continue 'instances;
                                }
                            }
                        }
                    }
                }
            };
            board.set_connector(&name, State::Failed, Some(trace));
            let restart = self.settings.restart;
            // Failed: wait for the backoff (when the restart policy says so), a restart
            // request or the stop. Tasks run on meanwhile, as in Kafka Connect.
            let backoff = restart.enabled.then(|| restart.backoff(attempt));
            attempt = attempt.saturating_add(1);
            let sleep = tokio::time::sleep(backoff.unwrap_or(std::time::Duration::MAX / 4));
            tokio::pin!(sleep);
            loop {
                tokio::select! {
                    _ = &mut sleep, if backoff.is_some() => break,
                    _ = stopped(&mut stop) => {
                        failed = true;
                        break 'instances;
                    }
                    Some(Control::Restart { connector, tasks }) = control.recv() => {
                        self.restart_tasks(tasks).await;
                        if connector {
                            break;
                        }
                    }
                }
            }
            board.set_connector(&name, State::Restarting, None);
        }
        let deadline = *stop.borrow();
        let deadline = deadline.unwrap_or_else(|| Instant::now() + self.settings.sandbox.timeouts.lifecycle);
        stop_all(std::mem::take(&mut self.tasks), deadline).await;
        if !failed && !finished {
            board.set_connector(&name, State::Stopped, None);
        }
    }

    /// Runs one connector instance until it fails, is asked to restart, or a stop is
    /// requested.
    async fn run_instance(
        &mut self,
        stop: &mut StopSignal,
        control: &mut mpsc::UnboundedReceiver<Control>,
        attempt: &mut u32,
    ) -> InstanceEnd {
        // Before the instance opens them, so a directory replaced in between is seen as
        // replaced at the first tick (one restart too many, never one too few).
        let granted = GrantedDirs::now(&self.settings.sandbox);
        let mut gone_reported: Option<PathBuf> = None;
        let context = self.services.context(&self.namespace, None, Some(self.reconfigure.clone()));
        let mut instance =
            match self.services.runtime.instantiate(self.plugin.pre(), context, &self.settings.sandbox).await {
                Ok(instance) => instance,
                Err(e) => return InstanceEnd::Failed(e.to_string()),
            };
        // Still starting at the stop deadline: abandoned, as a tick is (a `start` that spins
        // must not hold up a worker's stop, or a DELETE, past it).
        match unless_stopped(instance.connector_start(&self.config.to_pairs()), stop).await {
            None => return InstanceEnd::Stopped,
            Some(Err(e)) => return InstanceEnd::Failed(e.to_string()),
            Some(Ok(Err(e))) => return InstanceEnd::Failed(describe_connector_error(&e)),
            Some(Ok(Ok(()))) => {}
        }
        let mut paused = self.paused.clone();
        let running = |paused: bool| if paused { State::Paused } else { State::Running };
        let started_paused = *paused.borrow_and_update();
        self.services.board.set_connector(&self.namespace, running(started_paused), None);
        // Brought back paused (a worker restarted), its tasks are those of the configs
        // stored last, paused, as Connect brings them back; the plugin is asked for new
        // ones once it is resumed. Asked now, file-pulse (which assigns files in a tick,
        // which a paused connector does not run) had none: the status showed no task.
        let mut reconfigure_on_resume = false;
        if started_paused && std::mem::take(&mut self.restored) && self.tasks.is_empty() && self.start_stored_tasks() {
            reconfigure_on_resume = true;
        } else if let Some(end) = self.reconfigure(&mut instance, stop).await {
            return end;
        }
        // Set once resumed: the plugin is asked for task configs after its first tick,
        // not before (file-pulse, asked before listing its directory, would have none, and
        // every task would stop only to start again).
        let mut ask_after_tick = false;
        // Restarted alone after its tasks finished: they have nothing more to say.
        if self.all_tasks_finished() {
            self.finished.notify_one();
        }
        let started = Instant::now();
        // The first tick is at once: a connector that finds its work in `tick`, as
        // file-pulse lists its directory, starts its tasks without waiting
        // `monitor.interval.ms`. Each later one is due an interval after the one before
        // began (never sooner: file-pulse lists when its interval has passed), on the
        // worker's shared grid of wake-ups.
        let mut next_tick = Instant::now();
        // When a granted directory was first seen replaced.
        let mut replaced_since: Option<Instant> = None;
        loop {
            if started.elapsed() > self.settings.restart.max_backoff {
                *attempt = 0;
            }
            let reconfigure = self.reconfigure.clone();
            let is_paused = *paused.borrow();
            tokio::select! {
                deadline = stopped(stop) => {
                    // Its tasks stop beside it, within the same deadline (as Connect stops a
                    // connector's tasks apart from it): a connector whose own `stop` takes the
                    // whole deadline left its tasks none, their commit and stop skipped.
                    for task in &self.tasks {
                        let _ = task.stop.send(Some(deadline));
                    }
                    instance.stop_by(deadline);
                    if let Err(e) = instance.connector_stop().await {
                        tracing::warn!(connector = %self.config.name, "stop failed: {e}");
                    }
                    return InstanceEnd::Stopped;
                }
                Ok(()) = paused.changed() => {
                    let now_paused = *paused.borrow_and_update();
                    self.services.board.set_connector(&self.namespace, running(now_paused), None);
                    if !now_paused && std::mem::take(&mut reconfigure_on_resume) {
                        ask_after_tick = true;
                    }
                }
                Some(Control::Restart { connector, tasks }) = control.recv() => {
                    self.restart_tasks(tasks).await;
                    if connector {
                        self.stop_instance(&mut instance).await;
                        return InstanceEnd::Restart;
                    }
                }
                _ = tokio::time::sleep_until(next_tick.into()), if !is_paused => {
                    next_tick = wake_after(self.settings.monitor_interval);
                    // Said once while it lasts: the instance holds the old directory open
                    // and sees nothing in it, which would otherwise look like an idle source.
                    match (granted.gone(), &gone_reported) {
                        (Some(dir), None) => {
                            tracing::warn!(
                                connector = %self.config.name,
                                "'{}' is gone (removed or renamed away) since the connector started: nothing new is read from it until a directory is made under its name again, which the connector then restarts to see",
                                dir.display()
                            );
                            gone_reported = Some(dir.to_path_buf());
                        }
                        (None, Some(_)) => gone_reported = None,
                        _ => {}
                    }
                    if let Some(dir) = granted.replaced() {
                        // A task part way through a file of the old directory reads it to
                        // its end first: a restart would reopen it by a path it no longer has.
                        let since = *replaced_since.get_or_insert_with(|| {
                            tracing::warn!(
                                connector = %self.config.name,
                                "'{}' was replaced (removed or renamed, and made again) since the connector started: it and its tasks restart to see the new one, once its tasks have read what they are reading",
                                dir.display()
                            );
                            Instant::now()
                        });
                        if !self.metrics.any_task_busy() || since.elapsed() >= REPLACED_GRANT_MAX_WAIT {
                            tracing::warn!(connector = %self.config.name, "restarting to grant the new '{}'", dir.display());
                            self.restart_tasks(Tasks::All).await;
                            self.stop_instance(&mut instance).await;
                            return InstanceEnd::Restart;
                        }
                    }
                    match unless_stopped(self.timed_tick(&mut instance), stop).await {
                        // Still ticking at the stop deadline: abandoned, not called again.
                        None => return InstanceEnd::Stopped,
                        Some(Err(e)) => return InstanceEnd::Failed(e.to_string()),
                        Some(Ok(Err(ConnectorError::Retriable(message)))) => {
                            tracing::warn!(connector = %self.config.name, "tick: retriable error: {}", retriable_log_text(&message));
                        }
                        Some(Ok(Err(e))) => return InstanceEnd::Failed(describe_connector_error(&e)),
                        Some(Ok(Ok(()))) => {}
                    }
                    if std::mem::take(&mut ask_after_tick) {
                        reconfigure.notify_one();
                    }
                }
                _ = reconfigure.notified() => {
                    self.wake.send_modify(|requests| *requests += 1);
                    if let Some(end) = self.reconfigure(&mut instance, stop).await {
                        return end;
                    }
                }
                _ = self.finished.notified() => {
                    if self.all_tasks_finished() {
                        tracing::info!(connector = %self.config.name, "every task is done: the connector is FINISHED");
                        self.stop_instance(&mut instance).await;
                        return InstanceEnd::Finished;
                    }
                }
            }
        }
    }

    /// Starts a task for each config the store holds for this connector, when they are
    /// this config's (each carries every key of it, as the plugins copy them; otherwise
    /// nothing starts and the plugin is asked). Returns whether any started.
    fn start_stored_tasks(&mut self) -> bool {
        let Ok(stored) = self.services.stores.configs().task_configs(&self.namespace) else { return false };
        let own = self.config.to_pairs();
        let made_from_this_config = |task: &Pairs| own.iter().all(|pair| task.contains(pair));
        if stored.is_empty()
            || stored.len() > self.settings.tasks_max as usize
            || stored.len() as u64 >= u64::from(self.services.worker.sandbox.max_instances)
            || !stored.iter().all(made_from_this_config)
        {
            return false;
        }
        for (task, config) in stored.into_iter().enumerate() {
            let handle = self.start_task(task as u32, Arc::new(config));
            self.tasks.push(handle);
        }
        self.services.board.retain_tasks(&self.namespace, self.tasks.len() as u32);
        tracing::info!(connector = %self.config.name, tasks = self.tasks.len(), "paused: its stored tasks started paused; their configs are asked for again on resume");
        true
    }

    /// Stops the connector instance within the lifecycle timeout, whatever its plugin does.
    async fn stop_instance(&self, instance: &mut PluginInstance) {
        instance.stop_by(Instant::now() + self.settings.sandbox.timeouts.lifecycle);
        if let Err(e) = instance.connector_stop().await {
            tracing::warn!(connector = %self.config.name, "stop failed: {e}");
        }
    }

    /// Whether the connector has tasks and every one of them finished.
    fn all_tasks_finished(&self) -> bool {
        let status = self.services.board.get(&self.namespace);
        !self.tasks.is_empty()
            && status.is_some_and(|s| {
                (0..self.tasks.len() as u32)
                    .all(|task| s.tasks.iter().any(|t| t.id == task && t.state == State::Finished))
            })
    }

    /// Restarts the selected tasks in new instances (each commits and stops first).
    async fn restart_tasks(&mut self, which: Tasks) {
        let status = self.services.board.get(&self.namespace);
        let failed = |task: usize| {
            status.as_ref().is_some_and(|s| s.tasks.iter().any(|t| t.id as usize == task && t.state == State::Failed))
        };
        let selected: Vec<usize> = (0..self.tasks.len())
            .filter(|&task| match which {
                Tasks::None => false,
                Tasks::All => true,
                Tasks::Failed => failed(task),
                Tasks::One(id) => task == id as usize,
            })
            .collect();
        if selected.is_empty() {
            return;
        }
        // Stop first (each commits), then start: never two instances of one task at once.
        let deadline = Instant::now() + self.settings.sandbox.timeouts.lifecycle;
        let mut tasks: Vec<Option<TaskHandle>> = std::mem::take(&mut self.tasks).into_iter().map(Some).collect();
        let stopping: Vec<TaskHandle> = selected.iter().filter_map(|&task| tasks[task].take()).collect();
        let configs: Vec<(usize, Arc<Pairs>)> =
            selected.iter().copied().zip(stopping.iter().map(|t| t.config.clone())).collect();
        for &task in &selected {
            self.services.board.set_task(&self.namespace, task as u32, State::Restarting, None, 0);
        }
        stop_all(stopping, deadline).await;
        for (task, config) in configs {
            tasks[task] = Some(self.start_task(task as u32, config));
        }
        self.tasks = tasks.into_iter().flatten().collect();
    }

    async fn timed_tick(
        &self,
        instance: &mut PluginInstance,
    ) -> Result<Result<(), ConnectorError>, crate::runtime::CallError> {
        let started = Instant::now();
        let result = instance.tick().await;
        self.metrics.record_tick(started.elapsed(), instance.largest_memory());
        result
    }

    /// Asks the connector for task configs and applies the difference.
    async fn reconfigure(&mut self, instance: &mut PluginInstance, stop: &mut StopSignal) -> Option<InstanceEnd> {
        let name = self.config.name.clone();
        let max = self.settings.tasks_max;
        // Still asking at the stop deadline: abandoned, as a tick is.
        let mut configs = match unless_stopped(instance.task_configs(max), stop).await {
            None => return Some(InstanceEnd::Stopped),
            Some(Err(e)) => return Some(InstanceEnd::Failed(e.to_string())),
            Some(Ok(Err(e))) => return Some(InstanceEnd::Failed(describe_connector_error(&e))),
            Some(Ok(Ok(configs))) => configs,
        };
        if configs.len() > max as usize {
            // KIP-1004: the configs past tasks.max hold work (partitions, files) that no
            // task would do.
            if self.settings.tasks_max_enforce {
                return Some(InstanceEnd::Failed(format!(
                    "The connector {name} has generated {} tasks, which is greater than {max}, the maximum number of tasks it is configured to create (tasks.max). This behaviour should be considered a bug and is disallowed. If necessary, it can be permitted by reconfiguring the connector with 'tasks.max.enforce' set to false",
                    configs.len()
                )));
            }
            tracing::warn!(connector = %name, "task-configs returned {} configs but tasks.max is {max}; using the first {max} (tasks.max.enforce=false)", configs.len());
            configs.truncate(max as usize);
        }
        // Tasks that could never all run in this worker are not started one by one to fail
        // (100,000 of them kept a worker busy for minutes, and its DELETE waiting).
        let most = self.services.worker.sandbox.max_instances;
        if configs.len() as u64 >= u64::from(most) {
            return Some(InstanceEnd::Failed(format!(
                "The connector {name} has generated {} tasks: with the connector, more sandboxes than this worker holds at once ({most}); lower tasks.max, or raise `max_instances` under [sandbox] in sluice.toml",
                configs.len()
            )));
        }
        let running: Vec<&Pairs> = self.tasks.iter().map(|task| &*task.config).collect();
        let plan = reconfigure::plan(&running, &configs);
        if plan.is_empty() {
            tracing::debug!(connector = %name, "task configs unchanged; no task restarted");
            return None;
        }
        // Stop first (each commits its offsets as it stops), then start the new ones.
        let mut tasks: Vec<Option<TaskHandle>> = std::mem::take(&mut self.tasks).into_iter().map(Some).collect();
        let deadline = Instant::now() + self.settings.sandbox.timeouts.lifecycle;
        stop_all(plan.stop.iter().filter_map(|&i| tasks[i].take()).collect(), deadline).await;
        // Tasks of the previous generation past the new count (here, or stored by a worker
        // before this one) are fenced where the destination can (exactly-once).
        let stored = self.services.stores.configs().task_configs(&self.namespace).map_or(0, |c| c.len());
        let previous = tasks.len().max(stored) as u32;
        if (configs.len() as u32) < previous {
            let (destination, namespace, retired) =
                (self.destination.clone(), self.namespace.clone(), configs.len() as u32..previous);
            match tokio::task::spawn_blocking(move || destination.retire_tasks(&namespace, retired)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(connector = %name, "{e:#}"),
                Err(e) => tracing::warn!(connector = %name, "{e}"),
            }
        }
        // Every task past the new count was stopped just above.
        tasks.resize_with(configs.len(), || None);
        for &i in &plan.start {
            tasks[i] = Some(self.start_task(i as u32, Arc::new(configs[i].clone())));
        }
        self.tasks = tasks.into_iter().flatten().collect();
        self.services.board.retain_tasks(&self.namespace, configs.len() as u32);
        if let Err(e) = self.services.stores.configs().put_task_configs(&self.namespace, &configs) {
            tracing::warn!(connector = %name, "cannot store task configs: {e:#}");
        }
        tracing::info!(connector = %name, tasks = configs.len(), "reconfigured: (re)started tasks {:?}", plan.start);
        None
    }

    fn start_task(&self, task: u32, config: Arc<Pairs>) -> TaskHandle {
        let (stop, stop_rx) = watch::channel(None);
        let spec = TaskSpec {
            services: self.services.clone(),
            namespace: self.namespace.clone(),
            task,
            config: config.clone(),
            plugin: self.plugin.clone(),
            settings: self.settings.clone(),
            destination: self.destination.clone(),
            metrics: self.metrics.clone(),
            reconfigure: self.reconfigure.clone(),
            finished: self.finished.clone(),
            wake: self.wake.subscribe(),
            paused: self.paused.clone(),
            refusal_log: Arc::new(std::sync::Mutex::new(super::records::RefusalLog::new(
                self.settings.sandbox.log_lines_per_second,
            ))),
        };
        self.services.board.set_task(&self.namespace, task, State::Unassigned, None, 0);
        TaskHandle { config, stop, join: tokio::spawn(run_task(spec, stop_rx)) }
    }
}
