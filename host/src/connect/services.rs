//! What every connector and task of a worker shares, built once by [`super::Herder`].

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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
    pub validations: Arc<super::limits::TenantValidations>,
    pub idle_polls: Arc<IdlePolls>,
    pub topics: Arc<super::topics::ActiveTopics>,
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

/// The worker's budget of idle polls (`[sandbox] idle_polls_per_second`): the tasks that
/// find nothing are polled at most this often a second together. Up to that many idle
/// tasks each keep their own `poll.idle.max.ms`; past it their longest pause stretches in
/// proportion (10,000 idle tasks at 1,000 a second: 10 s), so an idle worker's cost stays
/// flat however many tasks it holds. A busy task is never slowed: only empty polls back off.
pub struct IdlePolls {
    idle_tasks: Arc<AtomicUsize>,
    per_second: u32,
}

impl IdlePolls {
    /// `per_second` 0: no budget, every idle task pauses at most its `poll.idle.max.ms`.
    pub fn new(per_second: u32) -> IdlePolls {
        IdlePolls { idle_tasks: Arc::default(), per_second }
    }

    /// Counts the caller as idle until the returned guard is dropped.
    pub fn enter(&self) -> IdleTask {
        self.idle_tasks.fetch_add(1, Ordering::Relaxed);
        IdleTask(self.idle_tasks.clone())
    }

    /// The longest pause of an idle task whose connector set `configured`: that, or longer
    /// while more tasks are idle than the budget polls in that time.
    pub fn longest_pause(&self, configured: Duration) -> Duration {
        self.longest_pause_among(self.idle_tasks.load(Ordering::Relaxed), configured)
    }

    /// [`Self::longest_pause`] with `idle_tasks` idle tasks.
    pub fn longest_pause_among(&self, idle_tasks: usize, configured: Duration) -> Duration {
        if self.per_second == 0 {
            return configured;
        }
        let budgeted = (idle_tasks as u64).saturating_mul(1_000_000) / u64::from(self.per_second);
        configured.max(Duration::from_micros(budgeted))
    }
}

/// One task counted as idle by [`IdlePolls`], while it lives.
pub struct IdleTask(Arc<AtomicUsize>);

impl Drop for IdleTask {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
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

/// Pauses this long or longer (an idle task's backoff, a connector's `monitor.interval.ms`)
/// end on a grid of [`WAKE_GRID`] shared by the whole worker: a thousand connectors ticking
/// every second, or ten thousand idle tasks, then wake in a few dozen bursts a second
/// instead of one at a time around the clock, and a worker thread parks and wakes once
/// per burst rather than once per wake-up. Shorter pauses stay exact.
const COALESCE_FROM: Duration = Duration::from_millis(100);
const WAKE_GRID: Duration = Duration::from_millis(20);

/// When a pause of `pause` that starts now ends: at most [`WAKE_GRID`] later than asked.
pub(crate) fn wake_after(pause: Duration) -> Instant {
    static ANCHOR: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let anchor = *ANCHOR.get_or_init(Instant::now);
    on_grid(anchor, Instant::now(), pause)
}

/// `now + pause`, rounded up to a whole number of [`WAKE_GRID`] steps after `anchor` when
/// the pause is at least [`COALESCE_FROM`].
fn on_grid(anchor: Instant, now: Instant, pause: Duration) -> Instant {
    let end = now + pause;
    if pause < COALESCE_FROM {
        return end;
    }
    let grid = WAKE_GRID.as_nanos();
    let rounded = end.saturating_duration_since(anchor).as_nanos().div_ceil(grid) * grid;
    anchor + Duration::from_nanos(u64::try_from(rounded).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_tasks_past_the_budget_stretch_the_longest_pause_and_stop_counting_when_they_go() {
        let second = Duration::from_secs(1);
        let budget = IdlePolls::new(1000);
        let few: Vec<IdleTask> = (0..1000).map(|_| budget.enter()).collect();
        assert_eq!(budget.longest_pause(second), second);
        let many: Vec<IdleTask> = (0..9000).map(|_| budget.enter()).collect();
        assert_eq!(budget.longest_pause(second), Duration::from_secs(10));
        // A connector's own longer pause is kept.
        assert_eq!(budget.longest_pause(Duration::from_secs(30)), Duration::from_secs(30));
        drop(many);
        assert_eq!(budget.longest_pause(second), second);
        drop(few);
        let unlimited = IdlePolls::new(0);
        let _all: Vec<IdleTask> = (0..100_000).map(|_| unlimited.enter()).collect();
        assert_eq!(unlimited.longest_pause(second), second);
    }

    #[test]
    fn long_pauses_end_on_the_shared_grid_never_early_and_short_ones_exactly() {
        let anchor = Instant::now();
        let ms = Duration::from_millis;
        for (after, pause, expected) in [
            // On the grid already: unchanged.
            (ms(0), ms(100), ms(100)),
            (ms(20), ms(1000), ms(1020)),
            // Off the grid: the next grid step, never sooner.
            (ms(7), ms(1000), ms(1020)),
            (ms(19), ms(137), ms(160)),
            (ms(1), ms(30_000), ms(30_020)),
            // Short pauses are exact.
            (ms(7), ms(99), ms(106)),
            (ms(3), ms(1), ms(4)),
        ] {
            assert_eq!(on_grid(anchor, anchor + after, pause) - anchor, expected, "{after:?} + {pause:?}");
        }
        let (asked, woken) = (Instant::now() + ms(1000), wake_after(ms(1000)));
        assert!(woken >= asked && woken - asked <= WAKE_GRID + ms(50), "woken {:?} after it was due", woken - asked);
    }
}
