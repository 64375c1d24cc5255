//! `sluice serve`: the long-running worker. Connectors come from the REST API and the data
//! directory (each back in its target state after any restart), the plugin folder is
//! watched, and the API is served until Ctrl-C or SIGTERM. Also the API of `sluice run
//! --listen`.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::CONFIG_ERROR;
use crate::api::{self, ApiState};
use crate::config::WorkerConfig;
use crate::connect::{Herder, Services};
use crate::storage::DataDir;

/// How often the plugin folder is looked at for added, changed and removed files.
const PLUGIN_FOLDER_POLL: Duration = Duration::from_secs(2);

/// The address to listen on, or why not (`--listen` is not loopback, and without tenants
/// the API would be open to anyone who reaches it).
pub async fn listen_address(listen: &str, insecure: bool, worker: &WorkerConfig) -> Result<SocketAddr, String> {
    let addr = tokio::net::lookup_host(listen)
        .await
        .map_err(|e| format!("--listen {listen}: not an address to listen on ({e}); expected HOST:PORT"))?
        .next()
        .ok_or_else(|| format!("--listen {listen}: the name has no address"))?;
    if !addr.ip().is_loopback() && !worker.has_tenants() && !insecure {
        return Err(format!(
            "--listen {listen}: not a loopback address, and no tenants are declared (sluice.toml), so the API would \
             let anyone who can reach it run code and read data; declare tenants with tokens, or pass \
             --insecure-listen to serve it open anyway"
        ));
    }
    Ok(addr)
}

/// A running API server, stopped with [`ApiServer::stop`].
pub struct ApiServer {
    shutdown: Arc<Notify>,
    join: JoinHandle<std::io::Result<()>>,
}

impl ApiServer {
    /// Binds `addr`, before the worker starts: a taken port stops nothing half way, and the
    /// port is known for the worker's id.
    pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
        TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr} (--listen)"))
    }

    /// Serves the herder's API on `listener`; prints where, for people and scripts.
    pub async fn start(herder: Arc<Herder>, data_dir: &DataDir, listener: TcpListener) -> anyhow::Result<ApiServer> {
        let local = listener.local_addr()?;
        let state = Arc::new(ApiState { herder, cluster_id: data_dir.cluster_id()?, local });
        let shutdown = Arc::new(Notify::new());
        let stopped = shutdown.clone();
        let join = tokio::spawn(api::serve(listener, state, async move { stopped.notified().await }));
        say!("REST API on http://{local}");
        Ok(ApiServer { shutdown, join })
    }

    /// Stops taking requests and finishes those in flight.
    pub async fn stop(self) {
        self.shutdown.notify_one();
        match self.join.await {
            Ok(Err(e)) => tracing::error!("the REST API server failed: {e}"),
            Err(e) => tracing::error!("the REST API server failed: {e}"),
            Ok(Ok(())) => {}
        }
    }
}

/// Looks at the plugin folder every couple of seconds, so added and replaced files are
/// compiled and usable without a restart.
/// Each look runs on its own, passing over the loads of earlier looks still under way: a
/// plugin slow to load does not hold up a file added after it.
fn watch_plugin_folder(services: Arc<Services>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(PLUGIN_FOLDER_POLL);
        let last_problem = Arc::new(std::sync::Mutex::new(String::new()));
        let mut looks = tokio::task::JoinSet::new();
        loop {
            ticks.tick().await;
            while looks.try_join_next().is_some() {}
            let (services, last_problem) = (services.clone(), last_problem.clone());
            looks.spawn(async move {
                let looked = services.registry.refresh_passing_over_loads_under_way(&services.runtime).await;
                let mut last_problem = last_problem.lock().unwrap();
                match looked {
                    Ok(_) => last_problem.clear(),
                    Err(e) => {
                        let problem = format!("{e:#}");
                        if problem != *last_problem {
                            tracing::warn!("{problem}");
                            *last_problem = problem;
                        }
                    }
                }
            });
        }
    })
}

pub async fn serve(
    data_dir: &Path,
    plugin_path: &Path,
    worker: WorkerConfig,
    listen: &str,
    insecure: bool,
) -> anyhow::Result<ExitCode> {
    let addr = match listen_address(listen, insecure, &worker).await {
        Ok(addr) => addr,
        Err(message) => {
            say!("error: {message}");
            return Ok(ExitCode::from(CONFIG_ERROR));
        }
    };
    let data = DataDir::new(data_dir);
    let _lock = data.lock()?;
    // The API answers before every plugin of the folder is compiled: the connectors
    // brought back load theirs first, the rest load in the background (the folder's
    // watcher looks at once), and a request naming one not loaded yet loads it.
    let none_yet = std::collections::BTreeSet::new();
    let listener = ApiServer::bind(addr).await?;
    let listening = Some(listener.local_addr()?);
    let herder = Arc::new(Herder::open_for_plugins(worker, data_dir, plugin_path, Some(&none_yet), listening).await?);
    let restored = herder.restore().await?;
    tracing::info!("{restored} stored connectors brought back in their target states");
    let watcher = watch_plugin_folder(herder.services().clone());
    let server = ApiServer::start(herder.clone(), &data, listener).await?;
    let exit = wait_for_stop(&herder).await?;
    tracing::info!("stopping: committing offsets");
    server.stop().await;
    watcher.abort();
    herder.shutdown().await;
    Ok(super::exit_code(exit))
}

/// Waits for Ctrl-C or SIGTERM (`None`), or for the worker to ask to stop (`Some(why)`).
async fn wait_for_stop(herder: &Herder) -> anyhow::Result<Option<String>> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => Ok(None),
        _ = terminate.recv() => Ok(None),
        reason = herder.services().exit.requested() => Ok(Some(reason)),
    }
}
