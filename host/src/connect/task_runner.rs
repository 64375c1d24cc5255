//! One task's loop: poll, check what the plugin returned, hand the batch to the task's
//! delivery lane ([`super::lane`]), where the destination writes it and commits the offsets
//! it advances once its records are durable, in order, while the task polls the next
//! batches (at most [`MAX_BATCHES_IN_FLIGHT`] handed over and not yet settled), and call
//! the task's `commit()` every `offset.flush.interval.ms` and on stop. A failed task is
//! marked FAILED with its reason and, under `restart.policy=on-failure`, restarted in a
//! new sandbox after an exponential backoff. A task whose memory keeps growing is recycled
//! (committed, stopped and started in a fresh sandbox) before it reaches its cap.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::lane::Lane;
use super::metrics::TaskCounters;
use super::records::{Checked, RefusalLog, Source, check_batch};
use super::services::{Services, StopSignal, stopped, unless_stopped, wake_after};
use crate::config::{ConnectorSettings, RestartPolicy, SandboxSettings};
use crate::destinations::{CommitGate, DeliveryAbandoned, Destination, RetriableDelivery, Skipped};
use crate::runtime::bindings::{ConnectorError, PollBatch};
use crate::runtime::sandbox::{CallError, describe_connector_error, human_bytes, retriable_log_text};
use crate::runtime::{Pairs, Plugin, PluginInstance};
use crate::storage::{Namespace, RecordBatch, State, now_ms};

/// Everything one task needs, fixed for its lifetime.
pub struct TaskSpec {
    pub services: Arc<Services>,
    pub namespace: Namespace,
    pub task: u32,
    /// Shared with the connector's handle of the task: thousands of tasks keep one copy.
    pub config: Arc<Pairs>,
    pub plugin: Arc<Plugin>,
    pub settings: Arc<ConnectorSettings>,
    pub destination: Arc<dyn Destination>,
    pub metrics: Arc<super::metrics::ConnectorMetrics>,
    pub reconfigure: Arc<Notify>,
    /// Told when this task finishes, so the connector can see whether all have.
    pub finished: Arc<Notify>,
    /// Changes at every reconfiguration request of the connector: an idle task polls
    /// again at once rather than at the end of its backoff.
    pub wake: tokio::sync::watch::Receiver<u64>,
    /// `true` while the connector is paused: the task does not poll.
    pub paused: tokio::sync::watch::Receiver<bool>,
    /// `errors.log.enable`'s lines for this task, whichever thread checks its batches.
    pub refusal_log: Arc<std::sync::Mutex<RefusalLog>>,
}

enum Outcome {
    Stopped,
    /// The task said it is done (0.2.0's `poll-batch.done`): everything it produced is
    /// committed and it was stopped.
    Finished {
        instance: u64,
    },
    /// Memory grew past `sandbox.memory.recycle.percent`: start a fresh instance.
    Recycled {
        instance: u64,
    },
    Failed {
        trace: String,
        instance: u64,
    },
}

/// How often a task's used fuel and memory are written to its status.
const USAGE_REPORT_INTERVAL: Duration = Duration::from_secs(1);
/// How long a delivery may take before the task's status says it is waiting.
const SLOW_DELIVERY: Duration = Duration::from_secs(5);

/// How long a task that gave up on a batch at its stop deadline waits for that batch's
/// commit if it was already under way (see [`CommitGate`]).
const COMMIT_GRACE: Duration = Duration::from_secs(5);

/// How long a stopping task waits, once its gate is shut, for the answer of a delivery
/// that may have committed just before: the lane thread sends it right after the write
/// returns. A write still running (a slow disk, a broker away) is waited for no longer
/// than this: it looks at the gate every 100 ms, and by its answer a Kafka destination has
/// noted the batch given up on, which the connector's next task instances wait for.
const ANSWER_GRACE: Duration = Duration::from_millis(500);
/// Waits between tries of a batch the destination could not take for now (1 s doubling
/// to 30 s).
const DELIVERY_RETRY_BACKOFF: RestartPolicy =
    RestartPolicy { enabled: true, initial_backoff: Duration::from_secs(1), max_backoff: Duration::from_secs(30) };

/// A sandbox recycled within this of its start counts towards [`QUICK_RECYCLES_BEFORE_BACKOFF`].
const QUICK_RECYCLE: Duration = Duration::from_secs(10);
/// Quick recycles in a row after which the next sandboxes wait [`QUICK_RECYCLE_BACKOFF`].
const QUICK_RECYCLES_BEFORE_BACKOFF: u32 = 3;
/// Waits before the sandbox after a quick recycle (1 s doubling to 60 s).
const QUICK_RECYCLE_BACKOFF: RestartPolicy =
    RestartPolicy { enabled: true, initial_backoff: Duration::from_secs(1), max_backoff: Duration::from_secs(60) };

/// Runs the task until a stop is requested; it is stopped by the stop's deadline.
pub async fn run_task(spec: TaskSpec, mut stop: StopSignal) {
    let board = spec.services.board.clone();
    let counters = spec.metrics.task(spec.task);
    let mut attempt = 0u32;
    // Recycles in a row of sandboxes that lived less than QUICK_RECYCLE.
    let mut quick_recycles = 0u32;
    loop {
        TaskCounters::add(&counters.starts, 1);
        let started = Instant::now();
        let outcome = run_instance(&spec, &mut stop, attempt > 0).await;
        counters.busy.store(false, Ordering::Relaxed);
        match outcome {
            Outcome::Stopped => return,
            Outcome::Finished { instance } => {
                board.set_task(&spec.namespace, spec.task, State::Finished, None, instance);
                spec.finished.notify_one();
                stopped(&mut stop).await;
                return;
            }
            Outcome::Recycled { instance } => {
                quick_recycles = if started.elapsed() < QUICK_RECYCLE { quick_recycles.saturating_add(1) } else { 0 };
                // A plugin whose memory fills its sandbox within seconds, every time (it
                // keeps what each poll allocates): fresh sandboxes at once would be made
                // many times a second, for good. They come after a growing wait instead,
                // said in the status.
                if quick_recycles >= QUICK_RECYCLES_BEFORE_BACKOFF {
                    let delay = QUICK_RECYCLE_BACKOFF.backoff(quick_recycles - QUICK_RECYCLES_BEFORE_BACKOFF);
                    let trace = format!(
                        "the task's sandbox was recycled {quick_recycles} times in a row, each within {} s of its start: \
                         its memory grows to sandbox.memory.recycle.percent of its cap (sandbox.memory.max.bytes) \
                         that fast; the next sandbox starts in {delay:?}",
                        QUICK_RECYCLE.as_secs()
                    );
                    tracing::warn!(connector = %spec.namespace.connector, task = spec.task, "{trace}");
                    board.set_task(&spec.namespace, spec.task, State::Restarting, Some(trace), instance);
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = stopped(&mut stop) => return,
                    }
                }
            }
            Outcome::Failed { trace, instance } => {
                TaskCounters::add(&counters.failures, 1);
                board.set_task(&spec.namespace, spec.task, State::Failed, Some(trace), instance);
                let restart = spec.settings.restart;
                if !restart.enabled {
                    stopped(&mut stop).await;
                    return;
                }
                let delay = restart.backoff(attempt);
                attempt = attempt.saturating_add(1);
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = stopped(&mut stop) => return,
                }
            }
        }
    }
}

async fn run_instance(spec: &TaskSpec, stop: &mut StopSignal, restarting: bool) -> Outcome {
    let services = &spec.services;
    let board = &services.board;
    let connector = &spec.namespace.connector;
    let context = services.context(&spec.namespace, Some(spec.task), Some(spec.reconfigure.clone()));
    let failed = |trace: String, instance: u64| Outcome::Failed { trace, instance };
    let mut instance = match services.runtime.instantiate(spec.plugin.pre(), context, &spec.settings.sandbox).await {
        Ok(instance) => instance,
        Err(e) => return failed(e.to_string(), 0),
    };
    let id = instance.id;
    // Exactly-once gives each instance a producer of its own, whose start fences the
    // task's previous instance.
    if spec.destination.settling_given_up_batch(&spec.namespace, spec.task) {
        let trace = "waiting for the destination to answer for a batch a task of this connector gave up on \
                     (what it takes is committed, so the task does not send it again; message.timeout.ms at most)";
        board.set_task(&spec.namespace, spec.task, State::Restarting, Some(trace.into()), id);
    }
    let destination = {
        let (shared, namespace, task) = (spec.destination.clone(), spec.namespace.clone(), spec.task);
        let made =
            tokio::task::spawn_blocking(move || shared.for_task(&namespace, task).map(|own| own.unwrap_or(shared)));
        // Its wait for a batch given up on (up to message.timeout.ms) ends with a stop.
        let made = tokio::select! {
            made = made => made,
            _ = stopped(stop) => return Outcome::Stopped,
        };
        match made {
            Ok(Ok(destination)) => destination,
            Ok(Err(e)) => return failed(format!("destination: {e:#}"), id),
            Err(e) => return failed(format!("destination: {e}"), id),
        }
    };
    let placement = CheckPlacement::new(destination.checks_beside_delivery());
    if restarting {
        board.set_task(&spec.namespace, spec.task, State::Restarting, None, id);
    }
    match instance.task_start(&spec.config).await {
        Err(e) => return failed(e.to_string(), id),
        Ok(Err(e)) => return failed(describe_connector_error(&e), id),
        Ok(Ok(())) => {}
    }
    let state = if *spec.paused.borrow() { State::Paused } else { State::Running };
    board.set_task(&spec.namespace, spec.task, state, None, id);
    let counters = spec.metrics.task(spec.task);
    counters.busy.store(true, Ordering::Relaxed);
    let recycle_at = recycle_threshold(&spec.settings.sandbox, instance.largest_memory(), connector, spec.task);

    let mut idle = Duration::ZERO;
    // Counted among the worker's idle tasks from the first empty poll to the next records.
    let mut idling = None;
    // Whether batches were delivered since the destination last settled them.
    let mut unsettled = false;
    let mut last_commit = Instant::now();
    let mut last_usage_report = Instant::now();
    let mut reported_usage = None;
    let mut paused = spec.paused.clone();
    let mut wake = spec.wake.clone();
    wake.mark_unchanged();
    // The batches being delivered while the next one is polled, oldest first: run in order
    // on the task's lane, so a partition's offsets still commit in order; all settled
    // before anything else happens (commit, pause, flush, recycle, stop).
    let lane = Lane::new();
    // What a batch still being written when this instance gives up on it must get past to
    // commit (see [`CommitGate`]).
    let gate = Arc::new(CommitGate::default());
    let _close_lane = CloseOnDrop(lane.clone(), gate.clone());
    let mut in_flight = InFlight::default();
    while stop.borrow().is_none() {
        if *paused.borrow_and_update() {
            match in_flight.settle_all(id).await {
                Ok(delivered) => unsettled |= delivered,
                Err(outcome) => return outcome,
            }
            if in_flight.given_up {
                break; // stopping meanwhile
            }
            // Everything delivered is committed: tell the task, and wait to be resumed.
            if let Some(outcome) = commit(&mut instance, &destination, spec, id, None, true).await {
                return outcome;
            }
            board.set_task(&spec.namespace, spec.task, State::Paused, None, id);
            idling = None;
            tokio::select! {
                _ = paused.wait_for(|paused| !*paused) => {}
                _ = stopped(stop) => break,
            }
            board.set_task(&spec.namespace, spec.task, State::Running, None, id);
            continue;
        }
        // Timed by itself: the delivery running beside it is not poll time. The batch is
        // checked inside the same future, so the checks (turning the packed batch into
        // records) also run while the batch before it is being delivered.
        let polled = {
            let polling = unless_stopped(
                async {
                    let check_here = placement.check_here();
                    let poll_started = Instant::now();
                    let polled = instance.poll().await;
                    let poll_time = poll_started.elapsed();
                    placement.polled(poll_time);
                    (prepare_batch(polled, spec, check_here), poll_time)
                },
                stop,
            );
            // Deliveries that end while the guest polls are settled as they end.
            let mut polling = std::pin::pin!(polling);
            loop {
                let Some(oldest) = in_flight.oldest() else { break polling.await };
                let delivered = tokio::select! {
                    // The delivery first: a guest's poll runs to its end within one poll of
                    // its future.
                    biased;
                    delivered = oldest => delivered,
                    polled = &mut polling => break polled,
                };
                match in_flight.settled(delivered, id) {
                    Ok(delivered) => unsettled |= delivered,
                    // Whatever the poll returned is dropped undelivered: nothing of it is
                    // committed, so a restart polls it again.
                    Err(outcome) => return outcome,
                }
            }
        };
        let Some((prepared, poll_time)) = polled else {
            // Still polling at the stop deadline: abandoned. Nothing of it was delivered,
            // so nothing is lost; the instance is not called again.
            return Outcome::Stopped;
        };
        let Prepared { polled, done, batch } = match prepared {
            Ok(prepared) => prepared,
            // What was polled before the failed poll is still delivered and committed (a
            // failure among those batches comes first: it happened first).
            Err(trace) => {
                return match in_flight.settle_all(id).await {
                    Ok(_) => failed(trace, id),
                    Err(outcome) => outcome,
                };
            }
        };
        TaskCounters::add(&counters.polls, 1);
        TaskCounters::time(&counters.poll_nanos, poll_time);
        TaskCounters::add(&counters.polled, polled);
        match batch {
            None => {
                // The destination settles only once nothing is being written beside it.
                match in_flight.settle_all(id).await {
                    Ok(delivered) => unsettled |= delivered,
                    Err(outcome) => return outcome,
                }
                if unsettled {
                    // Nothing new to send: the destination settles what it holds (an open
                    // exactly-once transaction commits) rather than waiting for the next batch.
                    unsettled = false;
                    if let Err(outcome) = settle_destination(&destination, spec, id, None).await {
                        return outcome;
                    }
                }
                counters.busy.store(false, Ordering::Relaxed);
                // `poll.idle.max.ms` (1 s by default, as Kafka Connect's file source waits): the
                // pause ends at once on a stop, a pause or a reconfiguration request of the
                // connector, so only a source that really has nothing waits this long.
                // Past the worker's budget of idle polls, longer (`IdlePolls`).
                idling.get_or_insert_with(|| services.idle_polls.enter());
                let longest = services.idle_polls.longest_pause(spec.settings.poll_idle_max);
                idle = (idle * 2).clamp(Duration::from_millis(1), longest);
                tokio::select! {
                    _ = tokio::time::sleep_until(wake_after(idle).into()) => {}
                    _ = stop.changed() => {}
                    _ = paused.changed() => {}
                    _ = wake.changed() => idle = Duration::ZERO,
                }
            }
            Some(batch) => {
                idle = Duration::ZERO;
                idling = None;
                counters.busy.store(true, Ordering::Relaxed);
                let (counted, outgoing) = match batch {
                    Batch::Checked(Checked { records, offsets, refused, .. }) => {
                        if refused > 0 {
                            board.add_refused(&spec.namespace, spec.task, refused);
                        }
                        (records.len(), Outgoing::Checked { records, offsets })
                    }
                    // Counted before the checks: records refused under errors.tolerance=all
                    // count against the tenant's rate too.
                    Batch::Unchecked(batch) => (batch.records.len(), Outgoing::Unchecked(batch)),
                };
                // The tenant's records/s, unless the task is stopped meanwhile: a big batch
                // under a low quota waits minutes, and a stop (SIGTERM, a delete, a new
                // config) must not wait with it. Stopped, the batch is dropped undelivered:
                // nothing of it is committed, so the next instance polls it again.
                let throttled = tokio::select! {
                    _ = services.rates.throttle(&spec.namespace.tenant, counted as u64) => true,
                    _ = stopped(stop) => false,
                };
                if !throttled {
                    break;
                }
                let writes = placement.writes.clone();
                in_flight.push(deliver(spec, destination.clone(), id, stop.clone(), outgoing, (&lane, &gate), writes));
                // At most this many batches wait for the destination: past it, the task
                // waits for the oldest before it polls again.
                while in_flight.len() >= MAX_BATCHES_IN_FLIGHT {
                    match in_flight.settle_oldest(id).await {
                        Ok(delivered) => unsettled |= delivered,
                        Err(outcome) => return outcome,
                    }
                }
            }
        }
        if done {
            // Everything it produced is delivered and committed before it is stopped, so
            // a restart of a finished task resumes after its last record.
            if let Err(outcome) = in_flight.settle_all(id).await {
                return outcome;
            }
            if in_flight.given_up {
                break; // stopping meanwhile
            }
            tracing::info!(connector = %connector, task = spec.task, "the task is done: stopping it");
            let deadline = Instant::now() + spec.settings.sandbox.timeouts.lifecycle;
            return match stop_instance(&mut instance, &destination, spec, id, deadline, true).await {
                Outcome::Stopped => Outcome::Finished { instance: id },
                failed => failed,
            };
        }
        if last_usage_report.elapsed() >= USAGE_REPORT_INTERVAL {
            last_usage_report = Instant::now();
            // Idle tasks' usage does not change: they report nothing.
            let usage = (instance.fuel_used(), instance.largest_memory());
            if reported_usage != Some(usage) {
                reported_usage = Some(usage);
                board.set_task_usage(&spec.namespace, spec.task, usage.0, usage.1);
            }
        }
        if recycle_at.is_some_and(|limit| instance.largest_memory() >= limit) {
            // `stop_instance` settles the destination itself.
            if let Err(outcome) = in_flight.settle_all(id).await {
                return outcome;
            }
            if in_flight.given_up {
                break; // stopping meanwhile
            }
            // Everything delivered is committed; a fresh sandbox resumes from there.
            tracing::info!(
                connector = %connector,
                task = spec.task,
                "recycling the task's sandbox: its memory grew to {} of its {} cap (sandbox.memory.recycle.percent)",
                human_bytes(instance.largest_memory()),
                human_bytes(spec.settings.sandbox.memory_max_bytes)
            );
            let deadline = Instant::now() + spec.settings.sandbox.timeouts.lifecycle;
            return match stop_instance(&mut instance, &destination, spec, id, deadline, true).await {
                Outcome::Stopped => Outcome::Recycled { instance: id },
                failed => failed,
            };
        }
        if last_commit.elapsed() >= spec.settings.offset_flush_interval {
            match in_flight.settle_all(id).await {
                Ok(delivered) => unsettled |= delivered,
                Err(outcome) => return outcome,
            }
            if in_flight.given_up {
                break; // stopping meanwhile
            }
            last_commit = Instant::now();
            // Nothing delivered since the destination last settled: nothing for it to do,
            // and an idle task's periodic commit costs no trip to a blocking thread.
            let settle = std::mem::take(&mut unsettled);
            if let Some(outcome) = commit(&mut instance, &destination, spec, id, None, settle).await {
                return outcome;
            }
        }
    }
    if let Err(outcome) = in_flight.settle_all(id).await {
        return outcome;
    }
    let deadline = stopped(stop).await;
    stop_instance(&mut instance, &destination, spec, id, deadline, !in_flight.given_up).await
}

/// Where a polled batch is checked: on the task's thread as soon as the guest's poll
/// returns (beside the delivery of the batch before it), or with its own delivery, on the
/// delivery's thread. A task runs a poll and the delivery of the batch before it at once,
/// so a batch takes as long as the longer of the two: the checks go with the shorter,
/// each side's time smoothed over the last few batches. Until both were measured, as the
/// destination suggests ([`Destination::checks_beside_delivery`]). The same plugin and
/// destination change sides with their data: file-pulse polls 100-byte lines in less time
/// than `stdout` writes them as JSON, a Python plugin's poll takes longer.
struct CheckPlacement {
    /// The smoothed poll time in nanoseconds (0 until measured).
    polls: AtomicU64,
    /// The smoothed time of the destination's writes in nanoseconds, without the checks
    /// (0 until measured), written on the delivery's thread.
    writes: Arc<AtomicU64>,
    beside_delivery_at_first: bool,
}

impl CheckPlacement {
    fn new(beside_delivery_at_first: bool) -> CheckPlacement {
        CheckPlacement { polls: Default::default(), writes: Arc::default(), beside_delivery_at_first }
    }

    fn check_here(&self) -> bool {
        match (self.polls.load(Ordering::Relaxed), self.writes.load(Ordering::Relaxed)) {
            (0, _) | (_, 0) => !self.beside_delivery_at_first,
            (poll, write) => poll < write,
        }
    }

    fn polled(&self, took: Duration) {
        self.polls.store(smoothed(self.polls.load(Ordering::Relaxed), took), Ordering::Relaxed);
    }

    /// One poll and one delivery at a time per task: a load and a store do not race.
    fn wrote(writes: &AtomicU64, took: Duration) {
        writes.store(smoothed(writes.load(Ordering::Relaxed), took), Ordering::Relaxed);
    }
}

/// `average` moved an eighth of the way to `took` (`took` itself when there is none yet).
fn smoothed(average: u64, took: Duration) -> u64 {
    let took = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX).max(1);
    match average {
        0 => took,
        average => average - average / 8 + took / 8,
    }
}

/// A polled batch after the checks.
struct Prepared {
    /// Records the plugin returned, before the checks.
    polled: u64,
    /// The task said it is done.
    done: bool,
    /// What to deliver, or `None` when the plugin had nothing (an idle poll).
    batch: Option<Batch>,
}

/// What a poll returned that is to be delivered, checked on the task's thread or not yet
/// (see [`Destination::checks_beside_delivery`]).
enum Batch {
    Checked(Checked),
    Unchecked(PollBatch),
}

/// Checks what a poll returned, or says why the task fails: a trap, a non-retriable
/// error, or a record the checks refuse.
fn prepare_batch(
    polled: Result<Result<PollBatch, ConnectorError>, CallError>,
    spec: &TaskSpec,
    check_here: bool,
) -> Result<Prepared, String> {
    let connector = &spec.namespace.connector;
    let batch = match polled {
        Err(e) => return Err(e.to_string()),
        Ok(Err(ConnectorError::Retriable(message))) => {
            tracing::warn!(connector = %connector, task = spec.task, "poll: retriable error: {}", retriable_log_text(&message));
            PollBatch::empty()
        }
        Ok(Err(e)) => return Err(describe_connector_error(&e)),
        Ok(Ok(batch)) => batch,
    };
    let (polled, done) = (batch.records.len() as u64, batch.done);
    if polled == 0 && !done {
        return Ok(Prepared { polled, done, batch: None });
    }
    let batch = match check_here {
        true => Batch::Checked(check_records(batch, &spec.settings, connector, spec.task, &spec.refusal_log)?),
        false => Batch::Unchecked(batch),
    };
    Ok(Prepared { polled, done, batch: Some(batch) })
}

/// The host's checks of one polled batch: the records to deliver and the offsets they
/// advance, or why the task fails (a record the checks refuse, named).
fn check_records(
    batch: PollBatch,
    settings: &ConnectorSettings,
    connector: &str,
    task: u32,
    refusal_log: &std::sync::Mutex<RefusalLog>,
) -> Result<Checked, String> {
    let source = Source { connector, task };
    let checked = check_batch(batch, &settings.sandbox, &settings.errors, &settings.transforms, now_ms(), &source)?;
    if !checked.refusals.is_empty() {
        refusal_log.lock().unwrap().log(&source, &checked.refusals, checked.refused);
    }
    Ok(checked)
}

/// What a delivery sends: records checked on the task's thread with the offsets they
/// advance, or a polled batch still to be checked. An unchecked batch is checked on the
/// lane's thread just before it is written, in the same job: for a destination whose
/// delivery is quicker than a plugin's poll, the checks and the write then both run beside
/// the guest's next poll. A batch the checks refuse fails the task when this delivery
/// settles, with nothing of it delivered (it halts the lane, so nothing queued after it is
/// written either, and the poll after it is dropped undelivered).
enum Outgoing {
    Checked {
        records: RecordBatch,
        offsets: Vec<(String, String)>,
    },
    Unchecked(PollBatch),
    /// Written by an earlier try whose offsets' commit failed: only the commit is tried.
    Written {
        records: RecordBatch,
        offsets: Vec<(String, String)>,
    },
}

/// How the delivery of one batch ended.
enum Delivery {
    /// Delivered with its offsets, or (`delivered: false`) given up on because the task is
    /// stopping while the destination was away: nothing of it was committed.
    Done {
        delivered: bool,
    },
    /// Still not taken by the stop deadline: nothing of it was committed.
    Abandoned,
    Failed(String),
}

impl Delivery {
    /// Whether the batch was delivered, or how the task instance ends.
    fn settle(self, instance: u64) -> Result<bool, Outcome> {
        match self {
            Delivery::Done { delivered } => Ok(delivered),
            Delivery::Abandoned => Err(Outcome::Stopped),
            Delivery::Failed(trace) => Err(Outcome::Failed { trace, instance }),
        }
    }
}

/// At most this many batches of a task are handed to its destination and not yet settled
/// (each up to `sandbox.batch.max.bytes`, held by the host until written). With two, one
/// being written while the next waits behind it, the lane's thread goes from one batch to
/// the next without waiting for the task; a third lets either side run a batch ahead of
/// the other, so a slow batch on one side does not stall the other when both take about
/// as long (file-pulse to `stdout`, 200 MB, four alternating runs: 0.98-1.04 s with two,
/// 0.75-0.80 s with three; to `local` 1.92-1.99 s and 1.86-1.92 s).
const MAX_BATCHES_IN_FLIGHT: usize = 3;

type PendingDelivery<'a> = std::pin::Pin<Box<dyn Future<Output = Delivery> + Send + 'a>>;

/// A task's batches handed to its lane and not yet settled, oldest first. Only the oldest
/// is awaited: the lane runs them in order whether or not their futures are polled.
#[derive(Default)]
struct InFlight<'a> {
    deliveries: std::collections::VecDeque<PendingDelivery<'a>>,
    /// A batch was given up on undelivered (the task stopping while its destination was
    /// away): the task's `commit()` must not be called, as it says "everything returned so
    /// far is durable", and a plugin may acknowledge its upstream on it.
    given_up: bool,
}

impl<'a> InFlight<'a> {
    fn push(&mut self, delivery: PendingDelivery<'a>) {
        self.deliveries.push_back(delivery);
    }

    fn len(&self) -> usize {
        self.deliveries.len()
    }

    fn oldest(&mut self) -> Option<&mut PendingDelivery<'a>> {
        self.deliveries.front_mut()
    }

    /// The oldest delivery ended as `delivery`: whether it delivered, or how the task
    /// instance ends.
    fn settled(&mut self, delivery: Delivery, instance: u64) -> Result<bool, Outcome> {
        self.deliveries.pop_front();
        self.given_up |= matches!(delivery, Delivery::Done { delivered: false });
        delivery.settle(instance)
    }

    async fn settle_oldest(&mut self, instance: u64) -> Result<bool, Outcome> {
        match self.deliveries.front_mut() {
            None => Ok(false),
            Some(oldest) => {
                let delivery = oldest.await;
                self.settled(delivery, instance)
            }
        }
    }

    /// Waits for every batch in flight: whether any was delivered, or how the task
    /// instance ends.
    async fn settle_all(&mut self, instance: u64) -> Result<bool, Outcome> {
        let mut delivered = false;
        while !self.deliveries.is_empty() {
            delivered |= self.settle_oldest(instance).await?;
        }
        Ok(delivered)
    }
}

/// Closes a task instance's lane however the instance ends, so that nothing it queued
/// is written after it, and shuts its commit gate (a commit already under way goes
/// through; one given up on at the stop deadline was waited for there).
struct CloseOnDrop(Arc<Lane<Attempt>>, Arc<CommitGate>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
        self.1.shut_unless_committing();
    }
}

/// How one try at delivering a batch went, on the lane's thread.
enum Attempt {
    /// Written with its offsets: how many records, whether offsets were committed, and how
    /// long the checks and the write took.
    Delivered {
        count: u64,
        commits: bool,
        took: Duration,
    },
    /// The destination is away for now: the batch, kept for another try (of its offsets'
    /// commit alone when it was `written`).
    Retry {
        error: anyhow::Error,
        records: RecordBatch,
        offsets: Vec<(String, String)>,
        written: bool,
    },
    /// The checks refused a record (named in the trace).
    Refused(String),
    Failed(anyhow::Error),
}

/// The work of one try at delivering `outgoing`, for the task's lane: the checks when the
/// batch was not checked on the task's thread, then the destination's write. The lane goes
/// on after it only when it delivered.
fn delivery_work(
    spec: &TaskSpec,
    destination: Arc<dyn Destination>,
    outgoing: Outgoing,
    gate: Arc<CommitGate>,
    writes: Arc<AtomicU64>,
) -> impl FnOnce() -> (Attempt, bool) + Send + 'static {
    let (namespace, settings, statuses, task) =
        (spec.namespace.clone(), spec.settings.clone(), spec.services.board.clone(), spec.task);
    let refusal_log = spec.refusal_log.clone();
    let active_topics = spec.services.topics.clone();
    move || {
        let started = Instant::now();
        let (records, offsets, written) = match outgoing {
            Outgoing::Checked { records, offsets } => (records, offsets, false),
            Outgoing::Written { records, offsets } => (records, offsets, true),
            Outgoing::Unchecked(batch) => {
                match check_records(batch, &settings, &namespace.connector, task, &refusal_log) {
                    Ok(Checked { records, offsets, refused, .. }) => {
                        if refused > 0 {
                            statuses.add_refused(&namespace, task, refused);
                        }
                        (records, offsets, false)
                    }
                    Err(trace) => return (Attempt::Refused(trace), false),
                }
            }
        };
        let write_started = Instant::now();
        let result = match written {
            true => destination.commit_written(&namespace, &offsets, &gate).map(|()| Skipped::default()),
            false => destination.deliver(&namespace, &records, &offsets, &gate),
        };
        CheckPlacement::wrote(&writes, write_started.elapsed());
        match result {
            // The records are dropped here rather than on the task's thread (a reference
            // count per key, value, offset and header).
            Ok(Skipped(skipped)) => {
                if !skipped.is_empty() {
                    statuses.add_refused(&namespace, task, skipped.len() as u64);
                    if settings.errors.log {
                        let source = Source { connector: &namespace.connector, task };
                        refusal_log.lock().unwrap().log(&source, &skipped, skipped.len() as u64);
                    }
                }
                active_topics.delivered(&namespace, task, &records);
                let (count, commits) = ((records.len() - skipped.len()) as u64, !offsets.is_empty());
                drop(records);
                (Attempt::Delivered { count, commits, took: started.elapsed() }, true)
            }
            Err(error) if RetriableDelivery::is(&error) => {
                let written = RetriableDelivery::is_written(&error);
                (Attempt::Retry { error, records, offsets, written }, false)
            }
            Err(error) => (Attempt::Failed(error), false),
        }
    }
}

/// Hands `outgoing` to the task's lane at once (behind the batches handed over before it)
/// and returns what settles it ([`settle_delivery`]).
fn deliver<'a>(
    spec: &'a TaskSpec,
    destination: Arc<dyn Destination>,
    id: u64,
    stop: StopSignal,
    outgoing: Outgoing,
    (lane, gate): (&'a Arc<Lane<Attempt>>, &'a Arc<CommitGate>),
    writes: Arc<AtomicU64>,
) -> PendingDelivery<'a> {
    let handed_over = lane.submit(delivery_work(spec, destination.clone(), outgoing, gate.clone(), writes.clone()));
    Box::pin(settle_delivery(spec, destination, id, stop, handed_over, (lane, gate), writes))
}

/// A waiting batch's status line, with why the destination thinks it waits, if it knows.
fn with_waiting_reason(mut trace: String, destination: &dyn Destination) -> String {
    if let Some(reason) = destination.waiting_reason() {
        trace.push_str("; ");
        trace.push_str(&reason);
    }
    trace
}

/// Settles one batch handed to the lane (`handed_over`): retried while the destination
/// says it is away for now (with a note in the task's status), given up on at the stop
/// deadline. Giving up closes the lane, so nothing queued after the batch is written.
async fn settle_delivery(
    spec: &TaskSpec,
    destination: Arc<dyn Destination>,
    id: u64,
    mut stop: StopSignal,
    mut handed_over: tokio::sync::oneshot::Receiver<Attempt>,
    (lane, gate): (&Arc<Lane<Attempt>>, &Arc<CommitGate>),
    writes: Arc<AtomicU64>,
) -> Delivery {
    let (board, connector) = (&spec.services.board, &spec.namespace.connector);
    let counters = spec.metrics.task(spec.task);
    let mut retries = 0u32;
    // Whether the status carries a note about this batch, cleared once delivered.
    let mut noted = false;
    let attempt = loop {
        // A destination that keeps a batch waiting (a broker outage, before its
        // producer gives up) is said in the status while it waits.
        let mut waited = 0u32;
        let attempt = loop {
            tokio::select! {
                attempt = &mut handed_over => break attempt,
                deadline = stopped(&mut stop) => {
                    // Stopping: the delivery may finish until the stop deadline;
                    // after it, it is abandoned: a write still running is refused its
                    // commit (one committing is waited for), so its offsets are not
                    // committed and the batch is sent again after a restart, once.
                    match tokio::time::timeout_at(deadline.into(), &mut handed_over).await {
                        Ok(attempt) => break attempt,
                        Err(_) => {
                            lane.close();
                            // A commit under way is waited for, within bounds: one that
                            // waits on an absent broker (Kafka-backed offsets) must not hold
                            // the stop for its whole timeout.
                            if tokio::time::timeout(COMMIT_GRACE, gate.shut()).await.is_err() {
                                tracing::warn!(connector = %connector, task = spec.task, "the last batch's commit was still under way {COMMIT_GRACE:?} after the stop deadline; stopping without it");
                            }
                            // It may have committed just before the gate shut, its answer
                            // on its way back: worth a short wait, so that a batch that was
                            // written is counted and not said to be sent again.
                            match tokio::time::timeout(ANSWER_GRACE, &mut handed_over).await {
                                Ok(Ok(Attempt::Failed(e))) if e.chain().any(|e| e.is::<DeliveryAbandoned>()) => {}
                                Ok(Ok(attempt)) => break Ok(attempt),
                                Ok(Err(_)) | Err(_) => {}
                            }
                            tracing::warn!(connector = %connector, task = spec.task, "the destination did not take the last batch by the stop deadline; what it did not take is sent again after a restart");
                            return Delivery::Abandoned;
                        }
                    }
                }
                _ = tokio::time::sleep(SLOW_DELIVERY) => {
                    waited += 1;
                    let trace = with_waiting_reason(
                        format!(
                            "delivery waiting: the destination has not taken the batch for {} s",
                            waited * SLOW_DELIVERY.as_secs() as u32
                        ),
                        &*destination,
                    );
                    board.set_task(&spec.namespace, spec.task, State::Running, Some(trace), id);
                }
            }
        };
        noted |= waited > 0;
        match attempt {
            Ok(Attempt::Retry { error, records, offsets, written }) => {
                // The destination is away for now (a broker outage): keep the batch,
                // say so in the status, and try again before anything queued after it.
                let delay = DELIVERY_RETRY_BACKOFF.backoff(retries);
                retries = retries.saturating_add(1);
                let trace = with_waiting_reason(
                    format!("delivery failed ({error:#}); retrying in {delay:?} (attempt {retries})"),
                    &*destination,
                );
                noted = true;
                board.set_task(&spec.namespace, spec.task, State::Running, Some(trace), id);
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {
                        let outgoing = match written {
                            true => Outgoing::Written { records, offsets },
                            false => Outgoing::Checked { records, offsets },
                        };
                        handed_over = lane.retry_first(delivery_work(spec, destination.clone(), outgoing, gate.clone(), writes.clone()));
                    }
                    // Nothing of the batch is committed: it is polled again on restart. A
                    // batch already written has its commit tried once more first, or it
                    // would be written twice.
                    _ = stopped(&mut stop) => {
                        lane.close();
                        if written {
                            let (destination, namespace, gate) = (destination.clone(), spec.namespace.clone(), gate.clone());
                            let commit = tokio::task::spawn_blocking(move || destination.commit_written(&namespace, &offsets, &gate));
                            if let Ok(Ok(())) = commit.await {
                                return Delivery::Done { delivered: true };
                            }
                        }
                        return Delivery::Done { delivered: false };
                    }
                }
            }
            Ok(attempt) => break attempt,
            // Dropped unrun: a batch before it was given up on as the task stops.
            Err(_) if lane.is_closed() => return Delivery::Done { delivered: false },
            Err(_) => break Attempt::Failed(anyhow::anyhow!("the delivery panicked")),
        }
    };
    if noted {
        board.set_task(&spec.namespace, spec.task, State::Running, None, id);
    }
    match attempt {
        Attempt::Delivered { count, commits, took } => {
            spec.metrics.add_delivered(count);
            TaskCounters::add(&counters.delivered, count);
            TaskCounters::add(&counters.deliveries, 1);
            TaskCounters::time(&counters.deliver_nanos, took);
            TaskCounters::add(&counters.commits, u64::from(commits));
            Delivery::Done { delivered: true }
        }
        // A record the checks refused: the task fails with it named.
        Attempt::Refused(trace) => Delivery::Failed(trace),
        Attempt::Failed(e) => {
            // The `stdout` reader went away: like any tool in a pipe, stop (what was
            // not written is not committed).
            let broken_pipe = e.chain().any(|e| {
                e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            });
            if broken_pipe {
                spec.services.exit.request("the stdout destination's reader went away (broken pipe)".into());
            }
            Delivery::Failed(format!("destination failed: {e:#}"))
        }
        Attempt::Retry { .. } => unreachable!("a retry is tried again above"),
    }
}

/// Offsets of everything delivered are already durable: tell the task, then stop it, all
/// by `deadline`. With `all_delivered` false (a batch was given up on), the task is not
/// told: its `commit()` says everything it returned is durable, and a plugin may
/// acknowledge its upstream on it.
async fn stop_instance(
    instance: &mut PluginInstance,
    destination: &Arc<dyn Destination>,
    spec: &TaskSpec,
    id: u64,
    deadline: Instant,
    all_delivered: bool,
) -> Outcome {
    instance.stop_by(deadline);
    if !all_delivered {
        tracing::warn!(connector = %spec.namespace.connector, task = spec.task, "stopping with a batch its destination did not take: the task's commit() is not called");
    } else if let Some(outcome) = commit(instance, destination, spec, id, Some(deadline), true).await {
        return outcome;
    }
    if let Err(e) = instance.task_stop().await {
        tracing::warn!(connector = %spec.namespace.connector, task = spec.task, "stop failed: {e}");
    }
    Outcome::Stopped
}

/// The memory size at which a task is recycled, or `None`. Some guest toolchains never
/// give back what lowering a poll batch allocated (componentize-py's `bytes`, for one),
/// so their memory only grows; recycling turns a sure memory-cap failure into a clean
/// restart from committed offsets. A task that starts above the threshold is left alone,
/// or it would be recycled on every poll.
fn recycle_threshold(sandbox: &SandboxSettings, at_start: u64, connector: &str, task: u32) -> Option<u64> {
    let threshold = sandbox.recycle_bytes()?;
    if at_start >= threshold {
        tracing::warn!(
            connector,
            task,
            "the task started with {} of memory, past sandbox.memory.recycle.percent of its cap: it will not be recycled",
            human_bytes(at_start)
        );
        return None;
    }
    Some(threshold)
}

/// Makes what was delivered durable (an open transaction commits) when `settle` says
/// there is any, then calls the task's `commit()`.
async fn commit(
    instance: &mut PluginInstance,
    destination: &Arc<dyn Destination>,
    spec: &TaskSpec,
    id: u64,
    deadline: Option<Instant>,
    settle: bool,
) -> Option<Outcome> {
    if settle {
        match settle_destination(destination, spec, id, deadline).await {
            Ok(true) => {}
            // Not settled by the stop deadline: the task is not told it was.
            Ok(false) => return None,
            Err(outcome) => return Some(outcome),
        }
    }
    match instance.commit().await {
        Err(e) => Some(Outcome::Failed { trace: e.to_string(), instance: id }),
        Ok(Err(ConnectorError::Retriable(m))) => {
            tracing::warn!(connector = %spec.namespace.connector, task = spec.task, "commit: retriable error: {}", retriable_log_text(&m));
            None
        }
        Ok(Err(e)) => Some(Outcome::Failed { trace: describe_connector_error(&e), instance: id }),
        Ok(Ok(())) => None,
    }
}

/// Has the destination make durable everything delivered so far (`flush`): whether it
/// did by the deadline, or how the task instance ends.
async fn settle_destination(
    destination: &Arc<dyn Destination>,
    spec: &TaskSpec,
    id: u64,
    deadline: Option<Instant>,
) -> Result<bool, Outcome> {
    let (flushing, namespace) = (destination.clone(), spec.namespace.clone());
    let flush = tokio::task::spawn_blocking(move || flushing.flush(&namespace));
    let flushed = match deadline {
        Some(deadline) => match tokio::time::timeout_at(deadline.into(), flush).await {
            Ok(flushed) => flushed,
            Err(_) => {
                // Stopping, and the destination is away: what it holds is not committed
                // (sent again after a restart), and the task is not told it was.
                tracing::warn!(connector = %spec.namespace.connector, task = spec.task, "the destination did not settle by the stop deadline; its last batches are sent again after a restart");
                return Ok(false);
            }
        },
        None => flush.await,
    };
    match flushed {
        Ok(Ok(())) => Ok(true),
        Ok(Err(e)) => Err(Outcome::Failed { trace: format!("destination failed: {e:#}"), instance: id }),
        Err(e) => Err(Outcome::Failed { trace: format!("destination failed: {e}"), instance: id }),
    }
}
