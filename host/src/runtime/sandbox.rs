//! The sandbox: one wasmtime [`Engine`] (pooling allocator, epoch interruption), and one
//! [`Store`] per connector or task instance with its own memory cap, per-call deadline,
//! WASI context (clocks, random and granted directories only) and the host's imports.
//!
//! Every call into a plugin goes through [`PluginInstance`], which turns whatever went
//! wrong (a trap, a deadline, the memory cap, `raise-error`) into a [`CallError`] in plain
//! words. After a `CallError` the instance must be dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use wasmtime::component::{HasSelf, Linker, ResourceTable, TypedFunc};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ResourceLimiter, Store, UpdateDeadline,
};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::v0_1::sluice::connector::{connector_context, log, offset_storage_reader, types};
use super::bindings::{
    ConfigKey, ConfigProblem, ConnectorError, PollBatch, from_v0_2, from_v0_3, from_v0_4, poll_from_v0_2, v0_1, v0_2,
    v0_3, v0_4,
};
use super::packed_lift::{LiftedBatch, LiftedBatch04};
use super::plugin_log::{PluginLog, escape_controls, escape_controls_but};
use crate::config::{CallTimeouts, SandboxSettings, WorkerSandbox};
use crate::storage::json::canonical_object;
use crate::storage::{Namespace, OffsetStore};

/// A call that has run this long is throttled while other calls run: at each tick it also
/// sleeps for [`LONG_CALL_SLEEP_TICKS`] ticks, so one plugin's long call gets about a tenth
/// of a thread and cannot starve the others (calls are meant to be short; see the WIT
/// docs). Only running counts: time a call waits for its host calls (file reads, sleeps)
/// holds no thread, so a poll that reads hundreds of files is not throttled for it. The
/// time a call is held back is added to its deadline: on a busy host a slow but honest
/// call is slowed, never failed, by the throttle.
pub const LONG_CALL: Duration = Duration::from_millis(200);
pub const LONG_CALL_SLEEP_TICKS: u32 = 9;

/// How often the epoch advances while a call runs: the granularity of deadlines and of
/// yielding.
pub const EPOCH_TICK: Duration = Duration::from_millis(2);

/// How often the epoch advances while no call runs. Thousands of idle sandboxes make
/// short calls far apart; a ticker waking every [`EPOCH_TICK`] regardless cost a worker
/// about 1.5 % of a core doing nothing. A call that starts during this pause is first
/// interrupted at its end (then every tick): a long call yields at most this much later,
/// well inside [`LONG_CALL`] and any deadline.
const IDLE_EPOCH_TICK: Duration = Duration::from_millis(50);

/// Grants `dir` (canonical when it was admitted) to an instance, if it still leads where
/// it did. Grants are checked against a tenant's roots once, at admission; a directory
/// swapped since for a link to somewhere else (another tenant's files) would otherwise be
/// followed by every later instance (a restart, a recycled task). On Linux the directory
/// opened is the one checked: through the descriptor that was checked, not its path again.
fn preopen_granted(wasi: &mut WasiCtxBuilder, dir: &std::path::Path, name: &str, perms: FsPerms) -> Result<(), String> {
    let key = match perms {
        FsPerms::ReadWrite => crate::config::keys::SANDBOX_FS_WRITE,
        FsPerms::ReadOnly => crate::config::keys::SANDBOX_FS_READ,
    };
    let cannot = |e: &dyn std::fmt::Display| format!("{key}: cannot grant {}: {e}", dir.display());
    // On Linux the path is checked through a descriptor, which is then what is granted.
    // O_PATH, as wasmtime-wasi opens a preopen, needs only search permission on the
    // directory (a write-only drop folder is grantable), and with O_DIRECTORY a FIFO put
    // in its place is refused at once instead of blocking the open.
    #[cfg(target_os = "linux")]
    let (_held, real, open) = {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        let handle = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(dir)
            .map_err(|e| cannot(&e))?;
        let via = std::path::PathBuf::from(format!("/proc/self/fd/{}", handle.as_raw_fd()));
        match std::fs::read_link(&via) {
            Ok(real) => (handle, real, via),
            Err(_) => (handle, std::fs::canonicalize(dir).map_err(|e| cannot(&e))?, dir.to_path_buf()),
        }
    };
    #[cfg(not(target_os = "linux"))]
    let (real, open) = (std::fs::canonicalize(dir).map_err(|e| cannot(&e))?, dir.to_path_buf());
    if real != dir {
        return Err(format!(
            "{key}: '{}' now leads to '{}' (a link put in its place since the connector was admitted): refused; \
             grant the directory itself",
            dir.display(),
            real.display()
        ));
    }
    // `_held` stays open until here: `open` names it.
    wasi.preopened_dir(&open, name, perms).map_err(|e| cannot(&format!("{e:#}")))?;
    Ok(())
}

/// Calls into sandboxes running now, in every runtime of the process (the ticker only
/// asks whether there is any).
static CALLS_RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Counts a call as running while it lives, however it ends (returns, fails, or its
/// future is dropped at a deadline or a stop).
struct CallRunning;

impl CallRunning {
    fn start() -> CallRunning {
        CALLS_RUNNING.fetch_add(1, Ordering::Relaxed);
        CallRunning
    }
}

impl Drop for CallRunning {
    fn drop(&mut self) {
        CALLS_RUNNING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How long past its deadline a call that epoch interruption could not stop (it is
/// blocked in a host call: a WASI sleep, a read) runs before it is abandoned.
const ABANDON_AFTER: Duration = Duration::from_millis(50);

/// Partitions looked up per store read: an `offsets` call of any size never holds the
/// offset store for longer than one chunk, so other instances' lookups interleave.
const LOOKUP_CHUNK: usize = 256;

/// The most partitions an `offsets` call may have answered on the async runtime's thread,
/// when the store can answer at once: a connector's check on its tasks, not a bulk read.
const AT_ONCE_MOST: usize = 32;

/// Host memory an answer entry costs beyond its text (tuple, `String`s, `Option`).
const ANSWER_ENTRY_OVERHEAD: u64 = 64;

/// Longest `raise-error` message kept as a status trace.
pub const MAX_TRACE_BYTES: usize = 64 << 10;

/// The engine and linker shared by every instance, and the epoch ticker thread.
pub struct Runtime {
    pub engine: Engine,
    linker: Linker<HostState>,
    next_instance: AtomicU64,
    stop_ticker: Arc<AtomicBool>,
    /// Whether calls consume fuel (CPU accounting and `sandbox.fuel.per.call`).
    pub fuel_metering: bool,
    /// `[sandbox] max_instances`: the pool's size.
    max_instances: u32,
}

impl Runtime {
    pub fn new() -> anyhow::Result<Arc<Self>> {
        Self::for_worker(&WorkerSandbox::default())
    }

    /// The engine of a worker's `[sandbox]` settings. Fuel metering is engine-wide and
    /// costs every plugin about a tenth of its speed, so it is a worker setting, as is the
    /// number of instance slots.
    pub fn for_worker(settings: &WorkerSandbox) -> anyhow::Result<Arc<Self>> {
        let (fuel_metering, max_instances) = (settings.fuel_metering, settings.max_instances);
        let mut config = Config::new();
        config.wasm_component_model(true).epoch_interruption(true).consume_fuel(fuel_metering);
        // Native unwind tables only help outside unwinders through wasm frames (wasm
        // backtraces and traps do not use them), and registering them costs a cached load
        // milliseconds per large (Python, JavaScript) component.
        config.native_unwind_info(false);
        // `perf record` of a worker names the plugins' compiled functions when this is set
        // (perf reads /tmp/perf-<pid>.map).
        if std::env::var_os("SLUICE_PERF_MAP").is_some() {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        // Instances come from preallocated slots: instantiation is a few microseconds and
        // memory is reused copy-on-write. The sizes leave room for large (Python, JS)
        // components, which have many core instances and tables.
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(max_instances)
            .total_core_instances(max_instances.saturating_mul(4).max(4096))
            .total_memories(max_instances)
            .total_tables(max_instances.saturating_mul(4).max(4096))
            // A call in progress holds a fiber stack; idle instances hold none, but every
            // instance can be in a call at once.
            .total_stacks(max_instances)
            .max_memories_per_component(16)
            .max_tables_per_component(64)
            .max_core_instances_per_component(128)
            .table_elements(200_000)
            .max_component_instance_size(8 << 20);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        super::file_reads::replace_file_calls(&mut linker)?;
        v0_1::SourceConnector::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
        v0_2::SourceConnector::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
        v0_3::SourceConnector::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
        v0_4::SourceConnector::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;

        let stop_ticker = Arc::new(AtomicBool::new(false));
        let (ticker_engine, stop) = (engine.clone(), stop_ticker.clone());
        std::thread::Builder::new().name("sluice-epoch".into()).spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let idle = CALLS_RUNNING.load(Ordering::Relaxed) == 0;
                std::thread::sleep(if idle { IDLE_EPOCH_TICK } else { EPOCH_TICK });
                ticker_engine.increment_epoch();
            }
        })?;
        Ok(Arc::new(Runtime {
            engine,
            linker,
            next_instance: AtomicU64::new(1),
            stop_ticker,
            fuel_metering,
            max_instances,
        }))
    }

    pub fn linker(&self) -> &Linker<HostState> {
        &self.linker
    }

    /// A new sandboxed instance of a plugin for a connector or one of its tasks. Boxed:
    /// instantiation's future (about 3 KiB) would otherwise stay part of the future of
    /// every connector and task that awaits it, for its whole life.
    pub fn instantiate<'a>(
        &'a self,
        pre: &'a WorldPre,
        context: InstanceContext,
        sandbox: &'a SandboxSettings,
    ) -> std::pin::Pin<Box<impl Future<Output = Result<PluginInstance, CallError>> + 'a>> {
        Box::pin(self.instantiate_inline(pre, context, sandbox))
    }

    async fn instantiate_inline(
        &self,
        pre: &WorldPre,
        context: InstanceContext,
        sandbox: &SandboxSettings,
    ) -> Result<PluginInstance, CallError> {
        let source = match context.task {
            Some(task) => format!("{}/{task}", context.namespace.connector),
            None => context.namespace.connector.clone(),
        };
        let log = PluginLog::new(&context.namespace.tenant, &source, sandbox.log_lines_per_second);
        let mut wasi = WasiCtxBuilder::new();
        wasi.allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false).stdout(log.stdout()).stderr(log.stderr());
        for dir in &sandbox.fs_write {
            preopen_granted(&mut wasi, dir, &dir.to_string_lossy(), FsPerms::ReadWrite).map_err(CallError::Setup)?;
        }
        for dir in sandbox.fs_read.iter().filter(|d| !sandbox.fs_write.contains(d)) {
            preopen_granted(&mut wasi, dir, &dir.to_string_lossy(), FsPerms::ReadOnly).map_err(CallError::Setup)?;
        }
        // The same directories under the names the config gave them through links.
        let mut aliased = std::collections::BTreeSet::new();
        for (dir, name) in &sandbox.fs_aliases {
            let perms = match (sandbox.fs_write.contains(dir), sandbox.fs_read.contains(dir)) {
                (true, _) => FsPerms::ReadWrite,
                (false, true) => FsPerms::ReadOnly,
                // Only a name of a directory granted (and checked) above.
                (false, false) => continue,
            };
            if aliased.insert(name) {
                preopen_granted(&mut wasi, dir, name, perms).map_err(CallError::Setup)?;
            }
        }
        let state = HostState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            memory_cap: sandbox.memory_max_bytes,
            memory_cap_hit: false,
            largest_memory: 0,
            call: None,
            deadline_hit: None,
            abandoned: false,
            raised_error: None,
            context,
            log,
            fuel: self.fuel_metering.then_some(Fuel { per_call: sandbox.fuel_per_call, budget: 0, used: 0 }),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| state as &mut dyn ResourceLimiter);
        // What the host lifts out of the guest in one call (import arguments, export
        // results) never exceeds what the guest itself may hold.
        store.set_hostcall_fuel(usize::try_from(sandbox.memory_max_bytes).unwrap_or(usize::MAX));
        if self.fuel_metering {
            store.set_fuel(u64::MAX).map_err(|e| CallError::Setup(format!("{e:#}")))?;
        }
        store.epoch_deadline_callback(|mut ctx| {
            let state = ctx.data_mut();
            let Some(call) = state.call.as_mut() else { return Ok(UpdateDeadline::Yield(1)) };
            if Instant::now() >= call.clock.deadline() {
                state.deadline_hit = Some(call.overran());
                return Ok(UpdateDeadline::Interrupt);
            }
            // Alone, a long call holds back nobody.
            if CALLS_RUNNING.load(Ordering::Relaxed) > 1 && call.clock.has_run() >= LONG_CALL {
                let pause = EPOCH_TICK * LONG_CALL_SLEEP_TICKS;
                return Ok(UpdateDeadline::YieldCustom(1, Box::pin(Arc::clone(&call.clock).hold_back(pause))));
            }
            // Yielding at every tick lets other instances run on a small machine.
            Ok(UpdateDeadline::Yield(1))
        });
        let (clock, _running) = begin(&mut store, "instantiate", sandbox.timeouts.lifecycle, None);
        let instantiating = async {
            match pre {
                WorldPre::V0_1(pre) => pre.instantiate_async(&mut store).await.map(World::V0_1),
                WorldPre::V0_2(pre) => pre.instantiate_async(&mut store).await.map(World::V0_2),
                WorldPre::V0_3(pre) => pre.instantiate_async(&mut store).await.map(|b| World::V0_3(b, None)),
                WorldPre::V0_4(pre) => pre.instantiate_async(&mut store).await.map(|b| World::V0_4(b, None)),
            }
        };
        let bindings = match within(&clock, instantiating).await {
            Some(Err(e)) if e.chain().any(|cause| cause.is::<wasmtime::PoolConcurrencyLimitError>()) => {
                return Err(CallError::Setup(format!(
                    "the worker already holds its most sandboxes at once ({}, each connector and task is one); \
                     raise `max_instances` under [sandbox] in sluice.toml (wasmtime: {e:#})",
                    self.max_instances
                )));
            }
            Some(Err(e)) if format!("{e:#}").contains("os error 12") => {
                return Err(CallError::Setup(format!(
                    "the system refused the sandbox its memory mappings ({e:#}); with thousands of sandboxes \
                     the limit is usually Linux's vm.max_map_count ({}): raise it, e.g. `sysctl -w vm.max_map_count=262144`",
                    std::fs::read_to_string("/proc/sys/vm/max_map_count")
                        .map_or("unknown".into(), |n| n.trim().to_string())
                )));
            }
            Some(bindings) => finish(&mut store, bindings)?,
            None => return Err(abandon(&mut store)),
        };
        Ok(PluginInstance {
            store,
            bindings,
            timeouts: sandbox.timeouts,
            stop_by: None,
            id: self.next_instance.fetch_add(1, Ordering::Relaxed),
        })
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop_ticker.store(true, Ordering::Relaxed);
    }
}

/// Who an instance is, and the host services it may reach.
#[derive(Clone)]
pub struct InstanceContext {
    pub namespace: Namespace,
    /// `None` for the connector instance.
    pub task: Option<u32>,
    pub offsets: Arc<dyn OffsetStore>,
    /// Where `request-task-reconfiguration` goes: the connector's loop. A `Notify` keeps
    /// one pending request however many calls are made.
    pub reconfigure: Option<Arc<Notify>>,
}

struct ActiveCall {
    name: &'static str,
    timeout: Duration,
    /// Shared with the caller's wait (which cannot borrow the store during the call).
    clock: Arc<CallClock>,
}

/// A call's deadline, which moves later by the time the throttle holds the call back
/// (measured, timer latency included), but never past the stop deadline; and how long the
/// call has run (been polled), which is what the throttle looks at.
struct CallClock {
    started: Instant,
    deadline: Instant,
    /// The stop deadline, when the instance is being stopped.
    limit: Option<Instant>,
    /// Nanoseconds.
    held_back: AtomicU64,
    /// Nanoseconds the call's future spent in finished polls.
    ran: AtomicU64,
    /// When the current poll began, in nanoseconds since `started`.
    poll_began: AtomicU64,
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl CallClock {
    fn new(deadline: Instant, limit: Option<Instant>) -> CallClock {
        CallClock {
            started: Instant::now(),
            deadline,
            limit,
            held_back: AtomicU64::new(0),
            ran: AtomicU64::new(0),
            poll_began: AtomicU64::new(0),
        }
    }

    /// How long the call has run, this poll included (asked from inside a poll).
    fn has_run(&self) -> Duration {
        let now = nanos(self.started.elapsed());
        let this_poll = now.saturating_sub(self.poll_began.load(Ordering::Relaxed));
        Duration::from_nanos(self.ran.load(Ordering::Relaxed) + this_poll)
    }

    fn held_back(&self) -> Duration {
        Duration::from_nanos(self.held_back.load(Ordering::Relaxed))
    }

    fn deadline(&self) -> Instant {
        let moved = self.deadline + self.held_back();
        self.limit.map_or(moved, |limit| limit.min(moved))
    }

    /// Sleeps for `pause`, counting all of it (however late the timer wakes) as held back.
    async fn hold_back(self: Arc<Self>, pause: Duration) {
        let started = Instant::now();
        tokio::time::sleep(pause).await;
        self.held_back.fetch_add(nanos(started.elapsed()), Ordering::Relaxed);
    }
}

impl ActiveCall {
    fn overran(&self) -> String {
        let held_back = self.clock.held_back();
        if held_back.is_zero() {
            format!("{} did not return within {} ms", self.name, self.timeout.as_millis())
        } else {
            format!(
                "{} did not return within {} ms (not counting the {} ms it was held back so other plugins could run)",
                self.name,
                self.timeout.as_millis(),
                held_back.as_millis()
            )
        }
    }
}

/// Waits for `call` until its (moving) deadline and [`ABANDON_AFTER`]; `None` when that
/// passes first.
async fn within<F: std::future::Future>(clock: &CallClock, call: F) -> Option<F::Output> {
    tokio::pin!(call);
    let mut timed = std::future::poll_fn(|cx| {
        let began = Instant::now();
        clock.poll_began.store(nanos(began.duration_since(clock.started)), Ordering::Relaxed);
        let polled = call.as_mut().poll(cx);
        clock.ran.fetch_add(nanos(began.elapsed()), Ordering::Relaxed);
        polled
    });
    loop {
        let deadline = clock.deadline();
        match tokio::time::timeout_at((deadline + ABANDON_AFTER).into(), &mut timed).await {
            Ok(output) => return Some(output),
            Err(_) if clock.deadline() != deadline => continue,
            Err(_) => return None,
        }
    }
}

/// The data of one store.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    memory_cap: u64,
    memory_cap_hit: bool,
    /// Size of the instance's largest linear memory (memories never shrink).
    largest_memory: u64,
    call: Option<ActiveCall>,
    deadline_hit: Option<String>,
    /// A call was abandoned at its deadline: the instance must not be called again.
    abandoned: bool,
    raised_error: Option<String>,
    context: InstanceContext,
    log: PluginLog,
    /// `Some` when the engine meters fuel.
    fuel: Option<Fuel>,
}

struct Fuel {
    per_call: Option<u64>,
    /// What the current call was given.
    budget: u64,
    /// Used by all calls so far.
    used: u64,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl ResourceLimiter for HostState {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired as u64 > self.memory_cap {
            self.memory_cap_hit = true;
            return Err(wasmtime::Error::msg(memory_cap_message(self.memory_cap)));
        }
        self.largest_memory = self.largest_memory.max(desired as u64);
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

fn memory_cap_message(cap: u64) -> String {
    format!("exceeded memory cap of {}", human_bytes(cap))
}

pub fn human_bytes(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / f64::from(1 << 20)),
        b => format!("{b} bytes"),
    }
}

impl types::Host for HostState {}

impl offset_storage_reader::Host for HostState {
    async fn offset(&mut self, partition: String) -> wasmtime::Result<Option<String>> {
        Ok(self.lookup(vec![partition]).await?.pop().and_then(|(_, offset)| offset))
    }

    async fn offsets(&mut self, partitions: Vec<String>) -> wasmtime::Result<Vec<(String, Option<String>)>> {
        self.lookup(partitions).await
    }
}

impl HostState {
    /// Committed offsets of `partitions` (already bounded by the hostcall fuel, that is by
    /// the instance's memory cap). A connector's short list is read at once when the store
    /// can answer without waiting: a connector checking its tasks' offsets every tick then
    /// pays no thread handoff. Anything else is read off the async runtime's threads a
    /// chunk at a time, tasks' lookups included: a task reads its offsets when it starts,
    /// and a read at once runs on the sandbox's own stack, where SQLite's frames would leave
    /// a page resident in each of thousands of tasks (10,000 idle tasks: 40 MB more). An
    /// answer that would take more host memory than the instance's own cap is refused, and
    /// so is a store that cannot be read: resuming from nothing would send records twice.
    async fn lookup(&mut self, partitions: Vec<String>) -> wasmtime::Result<Vec<(String, Option<String>)>> {
        let (store, ns, cap) = (self.context.offsets.clone(), self.context.namespace.clone(), self.memory_cap);
        let asked = partitions.len();
        if asked <= AT_ONCE_MOST && self.context.task.is_none() {
            let (canonical, valid) = canonical_partitions(&partitions);
            if let Some(found) = store.offsets_at_once(&ns, &valid) {
                let mut answer = LookupAnswer::new(asked, cap);
                answer.add(partitions, canonical, found.map_err(unreadable_offsets)?)?;
                return Ok(answer.entries);
            }
        }
        // Work for a call that was abandoned at its deadline stops too.
        let deadline = self.call.as_ref().map(|call| call.clock.deadline() + ABANDON_AFTER);
        // Said as the call's overrun is said when the host interrupts it: whichever notices
        // the deadline first, the trace reads the same.
        let overran = self.call.as_ref().map(|call| (call.name, call.timeout, Arc::clone(&call.clock)));
        let lookup = move || -> wasmtime::Result<Vec<(String, Option<String>)>> {
            let mut answer = LookupAnswer::new(asked, cap);
            let mut partitions = partitions.into_iter().peekable();
            while partitions.peek().is_some() {
                if deadline.is_some_and(|deadline| Instant::now() > deadline) {
                    let (name, timeout, clock) = overran.clone().expect("a deadline comes from a call");
                    let call = ActiveCall { name, timeout, clock };
                    return Err(wasmtime::Error::msg(format!(
                        "{} (its deadline passed during an offsets lookup)",
                        call.overran()
                    )));
                }
                let chunk: Vec<String> = partitions.by_ref().take(LOOKUP_CHUNK).collect();
                let (canonical, valid) = canonical_partitions(&chunk);
                answer.add(chunk, canonical, store.offsets(&ns, &valid).map_err(unreadable_offsets)?)?;
            }
            Ok(answer.entries)
        };
        tokio::task::spawn_blocking(lookup)
            .await
            .map_err(|e| wasmtime::Error::msg(format!("offset lookup failed: {e}")))?
    }
}

/// Each partition as the offset store keys it, `None` for one that is not a flat JSON
/// object (it has no committed offset); and those keys alone, to ask the store for.
fn canonical_partitions(partitions: &[String]) -> (Vec<Option<String>>, Vec<String>) {
    let canonical: Vec<Option<String>> = partitions.iter().map(|p| canonical_object(p).ok()).collect();
    let valid = canonical.iter().flatten().cloned().collect();
    (canonical, valid)
}

fn unreadable_offsets(e: anyhow::Error) -> wasmtime::Error {
    wasmtime::Error::msg(format!("the offset store could not be read: {e:#}"))
}

/// An `offsets` answer being built, held to the instance's memory cap.
struct LookupAnswer {
    entries: Vec<(String, Option<String>)>,
    bytes: u64,
    asked: usize,
    cap: u64,
}

impl LookupAnswer {
    fn new(asked: usize, cap: u64) -> Self {
        LookupAnswer { entries: Vec::with_capacity(asked), bytes: 0, asked, cap }
    }

    /// `partitions` with `found`, the store's answer for those of them that are valid.
    fn add(
        &mut self,
        partitions: Vec<String>,
        canonical: Vec<Option<String>>,
        found: Vec<Option<String>>,
    ) -> wasmtime::Result<()> {
        let mut found = found.into_iter();
        for (partition, canonical) in partitions.into_iter().zip(canonical) {
            let offset = canonical.and_then(|_| found.next().flatten());
            self.bytes += (partition.len() + offset.as_ref().map_or(0, String::len)) as u64 + ANSWER_ENTRY_OVERHEAD;
            if self.bytes > self.cap {
                return Err(wasmtime::Error::msg(format!(
                    "offsets: the answer for {} partitions would take more than the instance's memory cap of {} (sandbox.memory.max.bytes); ask in smaller batches",
                    self.asked,
                    human_bytes(self.cap)
                )));
            }
            self.entries.push((partition, offset));
        }
        Ok(())
    }
}

/// The imports of a later version of the world, served by the 0.1.0 ones (their
/// interfaces are the same).
macro_rules! later_imports {
    ($imports:path) => {
        const _: () = {
            use $imports as imports;

            impl imports::types::Host for HostState {}

            impl imports::offset_storage_reader::Host for HostState {
                async fn offset(&mut self, partition: String) -> wasmtime::Result<Option<String>> {
                    offset_storage_reader::Host::offset(self, partition).await
                }

                async fn offsets(
                    &mut self,
                    partitions: Vec<String>,
                ) -> wasmtime::Result<Vec<(String, Option<String>)>> {
                    self.lookup(partitions).await
                }
            }

            impl imports::connector_context::Host for HostState {
                fn request_task_reconfiguration(&mut self) {
                    connector_context::Host::request_task_reconfiguration(self)
                }

                fn raise_error(&mut self, message: String) {
                    connector_context::Host::raise_error(self, message)
                }
            }

            impl imports::log::Host for HostState {
                fn log(&mut self, level: imports::log::Level, message: String) {
                    use imports::log::Level as New;
                    let level = match level {
                        New::Trace => log::Level::Trace,
                        New::Debug => log::Level::Debug,
                        New::Info => log::Level::Info,
                        New::Warn => log::Level::Warn,
                        New::Error => log::Level::Error,
                    };
                    self.log.emit(level, &message);
                }
            }
        };
    };
}

later_imports!(super::bindings::v0_2::sluice::connector);
later_imports!(super::bindings::v0_3::sluice::connector);
later_imports!(super::bindings::v0_4::sluice::connector);

impl connector_context::Host for HostState {
    fn request_task_reconfiguration(&mut self) {
        if let Some(requests) = &self.context.reconfigure {
            requests.notify_one();
        }
    }

    fn raise_error(&mut self, mut message: String) {
        if self.raised_error.is_none() {
            cut_at_char_boundary(&mut message, MAX_TRACE_BYTES);
            self.raised_error = Some(escape_controls(&message).into_owned());
        }
    }
}

impl log::Host for HostState {
    fn log(&mut self, level: log::Level, message: String) {
        self.log.emit(level, &message);
    }
}

/// Why a call into a plugin did not return normally. The instance is unusable after it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("raise-error: {0}")]
    Raised(String),
    /// "poll did not return within 5000 ms"
    #[error("{0}")]
    Deadline(String),
    /// "exceeded memory cap of 64 MiB"
    #[error("{0}")]
    MemoryCap(String),
    /// Led by what the plugin wrote to stderr during the call, when it wrote anything.
    #[error("{}trap in {call}: {detail}", .guest_stderr.as_ref().map(|text| format!("{text}\n")).unwrap_or_default())]
    Trap { call: &'static str, detail: String, guest_stderr: Option<String> },
    /// "poll used all of its sandbox.fuel.per.call (1000000)"
    #[error("{0}")]
    Fuel(String),
    #[error("{0}")]
    Setup(String),
}

/// Cuts `text` to at most `max` bytes, on a character boundary.
pub fn cut_at_char_boundary(text: &mut String, max: usize) {
    if text.len() > max {
        let mut cut = max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
}

/// Starts a call: its deadline is its timeout, or the stop deadline when that is sooner.
/// Returns the call's clock (its deadline), and its count in [`CALLS_RUNNING`] (kept for the call).
fn begin(
    store: &mut Store<HostState>,
    name: &'static str,
    timeout: Duration,
    stop_by: Option<Instant>,
) -> (Arc<CallClock>, CallRunning) {
    let state = store.data_mut();
    let started = Instant::now();
    let deadline = stop_by.map_or(started + timeout, |stop_by| stop_by.min(started + timeout));
    let timeout = deadline.saturating_duration_since(started);
    let clock = Arc::new(CallClock::new(deadline, stop_by));
    state.call = Some(ActiveCall { name, timeout, clock: Arc::clone(&clock) });
    state.deadline_hit = None;
    state.log.clear_stderr_tail();
    if let Some(fuel) = &mut state.fuel {
        fuel.budget = fuel.per_call.unwrap_or(u64::MAX / 2);
        let budget = fuel.budget;
        let _ = store.set_fuel(budget);
    }
    store.set_epoch_deadline(1);
    (clock, CallRunning::start())
}

/// A call that overran its deadline while blocked where epoch interruption cannot reach
/// (a host call): its future was dropped, which unwinds the guest; the instance is unusable.
fn abandon(store: &mut Store<HostState>) -> CallError {
    let state = store.data_mut();
    state.abandoned = true;
    match state.call.take() {
        Some(call) => CallError::Deadline(call.overran()),
        None => CallError::Deadline("a call did not return by its deadline".into()),
    }
}

fn finish<R>(store: &mut Store<HostState>, result: wasmtime::Result<R>) -> Result<R, CallError> {
    if store.data().fuel.is_some() {
        let left = store.get_fuel().unwrap_or(0);
        if let Some(fuel) = &mut store.data_mut().fuel {
            fuel.used += fuel.budget.saturating_sub(left);
        }
    }
    let state = store.data_mut();
    let call = state.call.take().map_or("call", |c| c.name);
    match result {
        Ok(value) => match state.raised_error.take() {
            Some(message) => Err(CallError::Raised(message)),
            None => Ok(value),
        },
        Err(error) => {
            if let Some(message) = state.deadline_hit.take() {
                Err(CallError::Deadline(message))
            } else if state.memory_cap_hit {
                Err(CallError::MemoryCap(memory_cap_message(state.memory_cap)))
            } else if let (Some(wasmtime::Trap::OutOfFuel), Some(fuel)) =
                (error.downcast_ref::<wasmtime::Trap>(), &state.fuel)
            {
                Err(CallError::Fuel(format!("{call} used all of its sandbox.fuel.per.call ({})", fuel.budget)))
            } else if format!("{error:#}").contains("fuel allocated for hostcalls has been exhausted") {
                let detail = format!(
                    "passed more data between the plugin and the host in one call than its memory cap of {} allows (sandbox.memory.max.bytes)",
                    human_bytes(state.memory_cap)
                );
                Err(CallError::Trap { call, detail, guest_stderr: None })
            } else {
                let guest_stderr = state.log.take_stderr_tail().map(|text| explain_thrown_value(text, call));
                Err(CallError::Trap { call, detail: describe_trap(&error), guest_stderr })
            }
        }
    }
}

/// componentize-js lowers what a JavaScript export throws as its `connector-error`; any
/// other value thrown (an `Error`) fails in its generated glue with a message about a
/// variant tag, whose stack is the glue's. Said first in plain words, with the way out.
fn explain_thrown_value(stderr: String, call: &str) -> String {
    const GLUE: &str = "invalid variant tag value `undefined` (received `";
    // SpiderMonkey's word on the abort that follows any uncaught error, and Rust's hint
    // after componentize-py's runtime panics on a Python exception (a plugin has no
    // environment to set): nothing for its author to act on.
    let stderr = stderr
        .replace("Redirecting call to abort() to mozalloc_abort\n", "")
        .replace("note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n", "");
    let Some(at) = stderr.find(GLUE) else { return explain_unconvertible_return(stderr, call) };
    let rest = &stderr[at + GLUE.len()..];
    let Some(end) = rest.find("`) specified for `ConnectorError`") else { return stderr };
    format!(
        "uncaught exception in {call}: {}\n(a JavaScript export fails by throwing {{ tag: 'fatal', val: message }} \
         ('retriable' and 'invalid-config' too); any other value thrown, such as an Error, is not a \
         connector-error and its stack is lost in componentize-js's glue: catch it and throw \
         {{ tag: 'fatal', val: String(error.stack ?? error) }} to keep it)\n{stderr}",
        &rest[..end]
    )
}

/// An error whose stack is all componentize-js's glue, through the export `call`: what
/// the export returned could not be lowered to the WIT's types (a field missing, or a
/// number where a string goes), which the glue says in its own words only.
fn explain_unconvertible_return(stderr: String, call: &str) -> String {
    let Some((said, stack)) = stderr.split_once("Stack:") else { return stderr };
    let frames: Vec<&str> = stack.lines().map(str::trim).filter(|frame| !frame.is_empty()).collect();
    let all_glue = !frames.is_empty() && frames.iter().all(|frame| frame.contains("initializer.js:"));
    if !all_glue || !frames.iter().any(|frame| frame.contains(&format!("${call}@"))) {
        return stderr;
    }
    format!(
        "{call} returned a value that does not match the WIT's types: {}\n(componentize-js's glue could not \
         convert it: a field missing, or of another type, such as a number where the WIT has a string; see \
         the JavaScript types in docs/writing-connectors.md)\n{stderr}",
        said.trim()
    )
}

fn describe_trap(error: &wasmtime::Error) -> String {
    // The chain's links but the backtrace (said once, last): wasmtime puts it first, so
    // `{error:#}` of a host import's error began with the backtrace and had it twice.
    let links: Vec<String> = error
        .chain()
        .map(|link| link.to_string())
        .filter(|link| !link.starts_with("error while executing at wasm backtrace"))
        .collect();
    let trap = error.downcast_ref::<wasmtime::Trap>();
    let mut text = match trap {
        Some(trap) => trap.to_string(),
        None => links.join(": "),
    };
    let backtrace = error.downcast_ref::<wasmtime::WasmBacktrace>();
    if trap == Some(&wasmtime::Trap::MemoryOutOfBounds)
        && (links.iter().any(|link| stack_overflow_address(link)) || backtrace.is_some_and(looks_recursive))
    {
        text.push_str(
            " (most likely the plugin's stack overflowed, as in unbounded recursion: a stack kept in \
             linear memory, as Rust and C keep it, runs off the start of memory)",
        );
    }
    if let Some(backtrace) = backtrace {
        text.push_str(&format!("\n{backtrace}"));
    }
    // Function names in the backtrace come from the plugin: one frame per line, nothing more.
    escape_controls_but(&text, &['\n']).into_owned()
}

/// Whether a link of a trap's chain is a memory fault in the last 64 KiB under 4 GiB:
/// toolchains that keep their stack at the start of linear memory (Rust, C) wrap there when
/// it overflows, so the trap is an out-of-bounds access rather than a stack overflow.
fn stack_overflow_address(link: &str) -> bool {
    link.strip_prefix("memory fault at wasm address 0x")
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_hexdigit()).next())
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .is_some_and(|address| (0xffff_0000..=0xffff_ffff).contains(&address))
}

/// Whether a trap's backtrace is one or a few functions calling each other over and over
/// (its frames are capped, so a deep recursion fills them all).
fn looks_recursive(backtrace: &wasmtime::WasmBacktrace) -> bool {
    let frames = backtrace.frames();
    let functions: std::collections::HashSet<(Option<&str>, u32)> =
        frames.iter().map(|frame| (frame.module().name(), frame.func_index())).collect();
    frames.len() >= 16 && functions.len() <= 3
}

/// A plugin linked against the version of the world it targets: what every instance of
/// it is made from.
pub enum WorldPre {
    V0_1(v0_1::SourceConnectorPre<HostState>),
    V0_2(v0_2::SourceConnectorPre<HostState>),
    V0_3(v0_3::SourceConnectorPre<HostState>),
    V0_4(v0_4::SourceConnectorPre<HostState>),
}

impl WorldPre {
    /// The version of `sluice:connector` the plugin targets.
    pub fn version(&self) -> &'static str {
        match self {
            WorldPre::V0_1(_) => "0.1.0",
            WorldPre::V0_2(_) => "0.2.0",
            WorldPre::V0_3(_) => "0.3.0",
            WorldPre::V0_4(_) => "0.4.0",
        }
    }
}

/// A live instance's exports, by the version of the world its plugin targets.
enum World {
    V0_1(v0_1::SourceConnector),
    V0_2(v0_2::SourceConnector),
    /// With its `poll` typed to lift the batch's large lists quickly ([`LiftedBatch`]),
    /// once it is first called.
    V0_3(v0_3::SourceConnector, Option<PackedPoll>),
    /// As 0.3.0, its `poll` typed to read the batch's byte lists ([`LiftedBatch04`]).
    V0_4(v0_4::SourceConnector, Option<PackedPoll04>),
}

type PackedPoll = TypedFunc<(), (Result<LiftedBatch, v0_3::sluice::connector::types::ConnectorError>,)>;
type PackedPoll04 = TypedFunc<(), (Result<LiftedBatch04, v0_4::sluice::connector::types::ConnectorError>,)>;

/// One live instance of a plugin, for the connector or for one task.
pub struct PluginInstance {
    store: Store<HostState>,
    bindings: World,
    timeouts: CallTimeouts,
    /// Once stopping: no call may run past this moment.
    stop_by: Option<Instant>,
    /// Host-unique: tells one (re)start of a task from another.
    pub id: u64,
}

impl PluginInstance {
    /// Size of the instance's largest linear memory, which `sandbox.memory.max.bytes` caps.
    pub fn largest_memory(&self) -> u64 {
        self.store.data().largest_memory
    }

    /// Fuel used by every call so far, when the engine meters fuel.
    pub fn fuel_used(&self) -> Option<u64> {
        self.store.data().fuel.as_ref().map(|f| f.used)
    }

    /// From now on every call ends by `deadline` (the instance is being stopped).
    pub fn stop_by(&mut self, deadline: Instant) {
        self.stop_by = Some(self.stop_by.map_or(deadline, |d| d.min(deadline)));
    }
}

/// Calls an export under its deadline and turns failures into [`CallError`]. The deadline
/// holds on the whole call, wall-clock (moved by what the throttle held the call back, see
/// [`CallClock`]): epoch interruption stops running wasm at it, and a call blocked in a
/// host call is abandoned just after it. The export is called in the
/// version of the world the plugin targets; `$v0_1` turns a 0.1.0 result into the host's
/// types, and `$later` names the function of `from_v0_2`, `from_v0_3` and `from_v0_4` that
/// does it for the later versions.
macro_rules! guest_call {
    ($self:ident, $name:literal, $timeout:ident, $interface:ident . $method:ident ( $($arg:expr),* ), $v0_1:expr, $later:ident) => {
        call_export!($self, $name, $timeout, |store, bindings| match bindings {
            World::V0_1(bindings) => bindings.$interface().$method(&mut *store $(, $arg)*).await.map($v0_1),
            World::V0_2(bindings) => bindings.$interface().$method(&mut *store $(, $arg)*).await.map(from_v0_2::$later),
            World::V0_3(bindings, _) => bindings.$interface().$method(&mut *store $(, $arg)*).await.map(from_v0_3::$later),
            World::V0_4(bindings, _) => bindings.$interface().$method(&mut *store $(, $arg)*).await.map(from_v0_4::$later),
        })
    };
}

/// The frame of every export call of [`guest_call`]: `$call` runs with `$store` and
/// `$bindings` under the call's deadline.
macro_rules! call_export {
    ($self:ident, $name:literal, $timeout:ident, |$store:ident, $bindings:ident| $call:expr) => {{
        if $self.store.data().abandoned {
            return Err(CallError::Setup(format!("{} not called: the instance was abandoned", $name)));
        }
        let (clock, _running) = begin(&mut $self.store, $name, $self.timeouts.$timeout, $self.stop_by);
        let $store = &mut $self.store;
        let $bindings = &$self.bindings;
        // Boxed: the call's future (wasmtime's, about 1.5 KiB) then takes no room in the
        // future of every idle task that awaits it, only while it runs.
        let call = Box::pin(async { $call });
        match within(&clock, call).await {
            Some(result) => finish(&mut $self.store, result),
            None => Err(abandon(&mut $self.store)),
        }
    }};
}

use from_v0_2::same;

pub type Pairs = Vec<(String, String)>;

impl PluginInstance {
    pub async fn version(&mut self) -> Result<String, CallError> {
        guest_call!(self, "version", lifecycle, sluice_connector_connector.call_version(), same, same)
    }

    pub async fn config_def(&mut self) -> Result<Vec<ConfigKey>, CallError> {
        guest_call!(self, "config-def", lifecycle, sluice_connector_connector.call_config_def(), same, config_keys)
    }

    pub async fn validate(&mut self, config: &Pairs) -> Result<Vec<ConfigProblem>, CallError> {
        guest_call!(
            self,
            "validate",
            lifecycle,
            sluice_connector_connector.call_validate(config),
            same,
            config_problems
        )
    }

    pub async fn connector_start(&mut self, config: &Pairs) -> Result<Result<(), ConnectorError>, CallError> {
        guest_call!(self, "start", lifecycle, sluice_connector_connector.call_start(config), same, result).capped()
    }

    pub async fn task_configs(&mut self, max_tasks: u32) -> Result<Result<Vec<Pairs>, ConnectorError>, CallError> {
        guest_call!(
            self,
            "task-configs",
            lifecycle,
            sluice_connector_connector.call_task_configs(max_tasks),
            same,
            result
        )
        .capped()
    }

    pub async fn tick(&mut self) -> Result<Result<(), ConnectorError>, CallError> {
        guest_call!(self, "tick", hot, sluice_connector_connector.call_tick(), same, result).capped()
    }

    pub async fn connector_stop(&mut self) -> Result<(), CallError> {
        guest_call!(self, "stop", lifecycle, sluice_connector_connector.call_stop(), same, same)
    }

    pub async fn task_start(&mut self, config: &Pairs) -> Result<Result<(), ConnectorError>, CallError> {
        guest_call!(self, "start", lifecycle, sluice_connector_task.call_start(config), same, result).capped()
    }

    /// The next batch, whichever version the plugin targets (a 0.1.0 plugin's records are
    /// converted, and it is never done; 0.3.0 and 0.4.0 batches are lifted by
    /// `packed_lift`, through `poll` typed once on first use).
    pub async fn poll(&mut self) -> Result<Result<PollBatch, ConnectorError>, CallError> {
        self.poll_uncapped().await.capped()
    }

    async fn poll_uncapped(&mut self) -> Result<Result<PollBatch, ConnectorError>, CallError> {
        /// `poll` typed to lift a packed batch, once per instance.
        fn typed_once<T: wasmtime::component::ComponentNamedList + wasmtime::component::Lift>(
            typed: &mut Option<TypedFunc<(), T>>,
            func: &wasmtime::component::Func,
            store: &Store<HostState>,
            version: &str,
        ) -> Result<TypedFunc<(), T>, CallError> {
            if let Some(poll) = typed {
                return Ok(*poll);
            }
            let poll = func
                .typed(store)
                .map_err(|e| CallError::Setup(format!("poll not called: its type is not {version}'s ({e:#})")))?;
            Ok(*typed.insert(poll))
        }
        match &mut self.bindings {
            World::V0_3(bindings, packed) => {
                let poll =
                    typed_once(packed, bindings.sluice_connector_task().func_poll().func(), &self.store, "0.3.0")?;
                call_export!(self, "poll", hot, |store, _bindings| {
                    let polled = poll.call_async(&mut *store, ()).await;
                    polled.map(|(polled,)| polled.map(PollBatch::from).map_err(from_v0_3::error))
                })
            }
            World::V0_4(bindings, packed) => {
                let poll =
                    typed_once(packed, bindings.sluice_connector_task().func_poll().func(), &self.store, "0.4.0")?;
                call_export!(self, "poll", hot, |store, _bindings| {
                    let polled = poll.call_async(&mut *store, ()).await;
                    polled.map(|(polled,)| polled.map(PollBatch::from).map_err(from_v0_4::error))
                })
            }
            World::V0_1(_) | World::V0_2(_) => call_export!(self, "poll", hot, |store, bindings| match bindings {
                World::V0_1(bindings) => {
                    let polled = bindings.sluice_connector_task().call_poll(&mut *store).await;
                    polled.map(|polled| polled.map(PollBatch::from_records))
                }
                World::V0_2(bindings) => {
                    bindings.sluice_connector_task().call_poll(&mut *store).await.map(poll_from_v0_2)
                }
                World::V0_3(..) | World::V0_4(..) => unreachable!("a packed batch is polled above"),
            }),
        }
    }

    pub async fn commit(&mut self) -> Result<Result<(), ConnectorError>, CallError> {
        guest_call!(self, "commit", hot, sluice_connector_task.call_commit(), same, result).capped()
    }

    pub async fn task_stop(&mut self) -> Result<(), CallError> {
        guest_call!(self, "stop", lifecycle, sluice_connector_task.call_stop(), same, same)
    }
}

/// A plugin's own error with its message cut to [`MAX_TRACE_BYTES`], as `raise-error`'s
/// is: it becomes a status trace, stored and sent with every status.
trait CappedError {
    fn capped(self) -> Self;
}

impl<T> CappedError for Result<Result<T, ConnectorError>, CallError> {
    fn capped(self) -> Self {
        self.map(|result| {
            result.map_err(|error| match error {
                ConnectorError::Retriable(mut m) => {
                    cut_at_char_boundary(&mut m, MAX_TRACE_BYTES);
                    ConnectorError::Retriable(m)
                }
                ConnectorError::Fatal(mut m) => {
                    cut_at_char_boundary(&mut m, MAX_TRACE_BYTES);
                    ConnectorError::Fatal(m)
                }
                ConnectorError::InvalidConfig(mut m) => {
                    cut_at_char_boundary(&mut m, MAX_TRACE_BYTES);
                    ConnectorError::InvalidConfig(m)
                }
            })
        })
    }
}

/// A plugin's retriable error as a log line: escaped and cut to 1 KiB, as it may come back
/// at every poll.
pub fn retriable_log_text(message: &str) -> String {
    const MAX: usize = 1 << 10;
    let mut text = escape_controls(message).into_owned();
    if text.len() > MAX {
        let length = message.len();
        cut_at_char_boundary(&mut text, MAX);
        text.push_str(&format!("... ({length} bytes)"));
    }
    text
}

/// The text of a plugin's own error, for a status trace (escaped: the plugin wrote it).
pub fn describe_connector_error(error: &ConnectorError) -> String {
    match error {
        ConnectorError::Retriable(m) => format!("retriable error: {}", escape_controls(m)),
        ConnectorError::Fatal(m) => format!("fatal error: {}", escape_controls(m)),
        ConnectorError::InvalidConfig(m) => format!("invalid config: {}", escape_controls(m)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_a_javascript_export_throws_is_said_as_an_uncaught_exception() {
        let glue = "invalid variant tag value `undefined` (received `Error: poll threw at 4`) specified for `ConnectorError`\n  Stack:\n    export_task_0_2_0$poll@initializer.js:8428:17";
        let said = explain_thrown_value(glue.to_string(), "poll");
        assert!(said.starts_with("uncaught exception in poll: Error: poll threw at 4\n"), "{said}");
        assert!(said.contains("{ tag: 'fatal', val: message }") && said.ends_with(glue), "{said}");
        let other = "Traceback (most recent call last):\n  ValueError: x";
        assert_eq!(explain_thrown_value(other.to_string(), "poll"), other);
    }

    #[test]
    fn a_javascript_return_value_the_glue_cannot_convert_is_said_as_such() {
        let glue = "expected a string, received [number]\nStack:\n  _utf8AllocateAndEncode@/tmp/x/sources/initializer.js:97:11\n  export_task_0_2_0$poll@/tmp/x/sources/initializer.js:8255:47\n\nRedirecting call to abort() to mozalloc_abort\n";
        let said = explain_thrown_value(glue.to_string(), "poll");
        assert!(
            said.starts_with(
                "poll returned a value that does not match the WIT's types: expected a string, received [number]\n"
            ),
            "{said}"
        );
        assert!(!said.contains("mozalloc_abort"), "{said}");
        let python = "Traceback (most recent call last):\n  ValueError: x\nthread '<unnamed>' (1) panicked at runtime/src/lib.rs:1293:29:\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert!(!explain_thrown_value(python.to_string(), "poll").contains("RUST_BACKTRACE"));
        // The user's own code in the stack: its own error, said as it is.
        let own = "TypeError: x is undefined\nStack:\n  poll@/tmp/x/sources/connector.js:12:3\n  export_task_0_2_0$poll@/tmp/x/sources/initializer.js:8255:47\n";
        assert_eq!(explain_thrown_value(own.to_string(), "poll"), own);
        let elsewhere = "expected a string, received [number]\nStack:\n  export_task_0_2_0$commit@/tmp/x/sources/initializer.js:1:1\n";
        assert_eq!(explain_thrown_value(elsewhere.to_string(), "poll"), elsewhere);
    }

    #[test]
    fn a_host_error_is_said_before_the_backtrace_and_not_after_it() {
        let error = wasmtime::Error::msg("offsets: the answer would take more than the memory cap")
            .context("error while executing at wasm backtrace:\n    0: 0x1a - hostile!poll");
        assert_eq!(describe_trap(&error), "offsets: the answer would take more than the memory cap");
    }

    #[test]
    fn an_access_just_under_4_gib_is_named_as_a_stack_overflow() {
        let fault = |address: &str| {
            wasmtime::Error::new(wasmtime::Trap::MemoryOutOfBounds)
                .context(format!("memory fault at wasm address {address} in linear memory of size 0x120000"))
        };
        let overflow = describe_trap(&fault("0xfffffff0"));
        assert!(overflow.starts_with("wasm trap: out of bounds memory access (most likely"), "{overflow}");
        assert!(overflow.contains("stack overflowed"), "{overflow}");
        assert_eq!(describe_trap(&fault("0x200000")), "wasm trap: out of bounds memory access");
        assert!(!stack_overflow_address("memory fault at wasm address 0xfffeffff in linear memory"));
    }
}
