//! One connector's loop: its instance, its ticks, its reconfigurations (applying
//! [`super::reconfigure::plan`]) and its tasks. A failed connector is restarted with
//! exponential backoff when its `restart.policy` is `on-failure`; its tasks run on
//! meanwhile, as in Kafka Connect.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::metrics::ConnectorMetrics;
use super::reconfigure;
use super::services::{Services, StopSignal, stopped, unless_stopped};
use super::task_runner::{TaskSpec, run_task};
use crate::config::{ConnectorConfig, ConnectorSettings};
use crate::destinations::Destination;
use crate::runtime::bindings::ConnectorError;
use crate::runtime::plugin_log::escape_controls;
use crate::runtime::sandbox::describe_connector_error;
use crate::runtime::{Pairs, Plugin, PluginInstance};
use crate::storage::{Namespace, State};

pub(super) struct TaskHandle {
    config: Pairs,
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

pub(super) struct ConnectorRun {
    pub(super) services: Arc<Services>,
    pub(super) namespace: Namespace,
    pub(super) config: ConnectorConfig,
    pub(super) settings: ConnectorSettings,
    pub(super) plugin: Arc<Plugin>,
    pub(super) destination: Arc<dyn Destination>,
    pub(super) metrics: Arc<ConnectorMetrics>,
    /// `request-task-reconfiguration` from the connector or its tasks (coalesced).
    pub(super) reconfigure: Arc<Notify>,
    /// Index = task id; empty until the first `task-configs`.
    pub(super) tasks: Vec<TaskHandle>,
}

impl ConnectorRun {
    pub(super) async fn run(mut self, mut stop: StopSignal) {
        let board = self.services.board.clone();
        let name = self.namespace.clone();
        let mut attempt = 0u32;
        let mut failed = false;
        loop {
            let Some(trace) = self.run_instance(&mut stop, &mut attempt).await else { break };
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
        let deadline = *stop.borrow();
        let deadline = deadline.unwrap_or_else(|| Instant::now() + self.settings.sandbox.timeouts.lifecycle);
        stop_all(std::mem::take(&mut self.tasks), deadline).await;
        if !failed {
            board.set_connector(&name, State::Stopped, None);
        }
    }

    /// Runs one connector instance until it fails (returns the trace) or a stop is
    /// requested (returns `None`).
    async fn run_instance(&mut self, stop: &mut StopSignal, attempt: &mut u32) -> Option<String> {
        let context = self.services.context(&self.namespace, None, Some(self.reconfigure.clone()));
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
            let reconfigure = self.reconfigure.clone();
            tokio::select! {
                deadline = stopped(stop) => {
                    instance.stop_by(deadline);
                    if let Err(e) = instance.connector_stop().await {
                        tracing::warn!(connector = %self.config.name, "stop failed: {e}");
                    }
                    return None;
                }
                _ = ticks.tick() => match unless_stopped(self.timed_tick(&mut instance), stop).await {
                    // Still ticking at the stop deadline: abandoned, not called again.
                    None => return None,
                    Some(Err(e)) => return Some(e.to_string()),
                    Some(Ok(Err(ConnectorError::Retriable(message)))) => {
                        tracing::warn!(connector = %self.config.name, "tick: retriable error: {}", escape_controls(&message));
                    }
                    Some(Ok(Err(e))) => return Some(describe_connector_error(&e)),
                    Some(Ok(Ok(()))) => {}
                },
                _ = reconfigure.notified() => {
                    if let Some(trace) = self.reconfigure(&mut instance).await {
                        return Some(trace);
                    }
                }
            }
        }
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
        let running: Vec<&Pairs> = self.tasks.iter().map(|task| &task.config).collect();
        let plan = reconfigure::plan(&running, &configs);
        if plan.is_empty() {
            tracing::debug!(connector = %name, "task configs unchanged; no task restarted");
            return None;
        }
        // Stop first (each commits its offsets as it stops), then start the new ones.
        let mut tasks: Vec<Option<TaskHandle>> = std::mem::take(&mut self.tasks).into_iter().map(Some).collect();
        let deadline = Instant::now() + self.settings.sandbox.timeouts.lifecycle;
        stop_all(plan.stop.iter().filter_map(|&i| tasks[i].take()).collect(), deadline).await;
        // Every task past the new count was stopped just above.
        tasks.resize_with(configs.len(), || None);
        for &i in &plan.start {
            tasks[i] = Some(self.start_task(i as u32, configs[i].clone()));
        }
        self.tasks = tasks.into_iter().flatten().collect();
        self.services.board.retain_tasks(&self.namespace, configs.len() as u32);
        if let Err(e) = self.services.stores.configs().put_task_configs(&self.namespace, &configs) {
            tracing::warn!(connector = %name, "cannot store task configs: {e:#}");
        }
        tracing::info!(connector = %name, tasks = configs.len(), "reconfigured: (re)started tasks {:?}", plan.start);
        None
    }

    fn start_task(&self, task: u32, config: Pairs) -> TaskHandle {
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
        };
        self.services.board.set_task(&self.namespace, task, State::Unassigned, None, 0);
        TaskHandle { config, stop, join: tokio::spawn(run_task(spec, stop_rx)) }
    }
}
