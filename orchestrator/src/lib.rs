//! The Agentbox orchestrator: one sandbox container per task.
//!
//! Layout:
//! - [`config`]: `serve` flags (each with an environment variable) and the settings built from
//!   them;
//! - [`db`]: the SQL store (SQLite by default, Postgres with `DATABASE_URL`; one set of
//!   migrations);
//! - [`auth`]: API keys (hashed; admin key bootstrap); [`tokens`]: signed viewer tokens;
//! - [`keyring`]: the master key and the secrets derived from it (sandbox keys, token signing);
//!   [`data_dir`]: the data directory's permissions;
//! - [`sessions`]: open proxied sessions and the authority each rests on; [`console`]: web
//!   console sign-ins (an API key traded for a revocable server-side session);
//! - [`backend`]: the container platform behind a trait; [`backend::docker`] with bollard;
//! - [`sandboxes`]: the lifecycle (create, ready, claim, delete), reconciliation, the reaper,
//!   heartbeats and the warm pool;
//! - [`runs`]: runs (the `agent` crate's loop driving a sandbox, or a remote A2A agent handed
//!   the task): event log, takeover, artifacts, leases;
//! - [`a2a`]: the A2A protocol and its client; [`a2a_server`]: the orchestrator as an A2A agent;
//! - [`proxy`]: HTTP and WebSocket relays and the RFB view-only filter;
//! - [`api`]: the REST API (axum), the only part that knows HTTP status codes;
//! - [`metrics`]: Prometheus metrics; [`cli`]: the command line (logging is `agentbox-http`'s);
//! - [`replicas`]: this process among the orchestrators sharing one database (its id, its
//!   beat, the leases of the duties one replica does at a time);
//! - [`secret`]: random secrets, ids, hashes and time helpers; [`clock`]: the time as the
//!   lifecycle reads it (a trait, so tests can move it).

pub mod a2a;
pub mod a2a_server;
pub mod api;
pub mod auth;
pub mod backend;
pub mod cli;
pub mod clock;
pub mod config;
pub mod console;
pub mod data_dir;
pub mod db;
pub mod homes;
pub mod keyring;
pub mod lull;
pub mod metrics;
pub mod proxy;
pub mod replicas;
pub mod runs;
pub mod sandboxes;
pub mod secret;
pub mod sessions;
pub mod tokens;
pub mod validate;

#[cfg(test)]
pub(crate) mod testing;

use std::sync::Arc;

use agentbox_http::signals::TerminationSignals;
use anyhow::Context;

use crate::backend::docker::DockerBackend;
use crate::backend::swarm::SwarmBackend;
use crate::backend::{Backend, BackendKind};
use crate::config::Settings;

/// What start-up prepared: the server is ready to serve from these.
struct Started {
    store: db::Store,
    listener: tokio::net::TcpListener,
    sandboxes: Arc<sandboxes::Sandboxes>,
    keys: Arc<auth::ApiKeys>,
    metrics: Arc<metrics::Metrics>,
    public_url: String,
    instance: String,
}

/// Runs the server until SIGINT or SIGTERM.
///
/// `signals` are installed before anything else (see `cli::main`): a signal during start-up
/// cancels it at its next wait (the database, Docker, reconciliation: each is safe to redo at
/// the next start) and the process exits 0 at once, as after a stop once it serves.
pub async fn serve(settings: Settings, mut signals: TerminationSignals) -> anyhow::Result<()> {
    let settings = Arc::new(settings);
    let started = match signals.unless_stopped(start(settings.clone())).await {
        Ok(started) => started?,
        Err(stopped) => {
            tracing::info!(
                signal = stopped.signal,
                "termination requested during start-up; exiting"
            );
            return Ok(());
        }
    };
    let Started {
        store,
        listener,
        sandboxes,
        keys,
        metrics,
        public_url,
        instance,
    } = started;
    let local = listener.local_addr()?;

    tokio::spawn(sandboxes.store().clone().watch_reachability());
    tokio::spawn(sandboxes.store().clone().listen_forever());
    tokio::spawn(replicas::beat_forever(
        store.clone(),
        sandboxes.replica.clone(),
        sandboxes.boot.clone(),
        sandboxes.clock.clone(),
    ));
    tokio::spawn(sandboxes.clone().reap_forever());
    tokio::spawn(sandboxes.clone().heartbeat_forever());
    tokio::spawn(sandboxes.clone().sweep_sessions_forever());
    tokio::spawn(sandboxes.clone().write_activity_forever());
    tokio::spawn(sandboxes::pool::Pool::refill_forever(sandboxes.clone()));

    let runs = runs::Runs::from_settings(&sandboxes);
    tokio::spawn(runs.clone().resume_forever());
    tokio::spawn(runs.clone().report_sandbox_changes_forever());
    tokio::spawn(runs.clone().retain_forever());
    tokio::spawn(runs.clone().relay_commands_forever());

    let state =
        api::AppState::new(sandboxes.clone(), keys, metrics, public_url.clone()).with_runs(runs);
    let app = api::router(state);
    tracing::info!(addr = %local, %public_url, %instance, replica = %sandboxes.replica, image = %settings.image, pool_size = settings.pool_size, "listening");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(api::serve(listener, app, async {
        let _ = stopped.await;
    }));
    let signal = signals.recv().await;
    tracing::info!(signal, "shutting down");
    let _ = stop.send(());
    // Requests in flight get a moment to finish; open WebSocket sessions do not hold the exit.
    match tokio::time::timeout(std::time::Duration::from_secs(10), server).await {
        Ok(Ok(result)) => result?,
        Ok(Err(error)) => tracing::error!(%error, "the server task failed"),
        Err(_) => tracing::warn!("requests still open after 10 s; exiting anyway"),
    }
    // Peers take this replica's duties over at once.
    sandboxes.duties.release_all().await;
    store.close().await;
    tracing::info!("stopped; sandboxes keep running and are adopted at the next start");
    Ok(())
}

/// Start-up up to the first request: the data directory, the keyring, the database, Docker, the
/// listening socket and reconciliation. Nothing is spawned here, so dropping it part way leaves
/// nothing running.
async fn start(settings: Arc<Settings>) -> anyhow::Result<Started> {
    // Private before anything is written: the database and the master key live here.
    data_dir::prepare(&settings.data_dir)?;
    let replica = replicas::resolve_id(settings.replica.as_deref(), &settings.data_dir)
        .context("the replica id (--replica, or the one kept in the data directory)")?;
    let settings = Arc::new(Settings {
        replica: Some(replica.clone()),
        ..(*settings).clone()
    });
    let keyring = keyring::Keyring::load_or_create(&settings.master_key_file)?;
    let store = db::Store::connect(&settings.database_url).await?;
    tracing::info!(database = %db::redact_url(&settings.database_url), "database ready");
    let check = store
        .setting_or_insert("master_key_check", &keyring.check_value())
        .await?;
    keyring.verify_check(&check)?;

    let keys = Arc::new(auth::ApiKeys::new(store.clone()));
    if let Some(key) = keys.bootstrap(settings.admin_key.as_deref()).await? {
        // Printed once, on stdout, outside the logs: it is not stored anywhere in clear.
        println!("admin API key (shown once, store it now): {key}");
    }
    let instance = match &settings.instance {
        Some(instance) => instance.clone(),
        None => {
            store
                .setting_or_insert("instance_id", &secret::new_id(""))
                .await?
        }
    };

    let backend: Arc<dyn Backend> = match settings.backend {
        BackendKind::Docker => {
            let backend = DockerBackend::connect(
                &settings.network,
                settings.sandbox_subnets,
                &instance,
                &replica,
                settings.egress,
                settings.egress_allow.clone(),
            )
            .await?;
            backend.prepare().await?;
            tracing::info!(network = %settings.network, subnets = %settings.sandbox_subnets, egress = ?settings.egress, "Docker ready");
            Arc::new(backend)
        }
        BackendKind::Swarm => {
            let backend =
                SwarmBackend::connect(settings.swarm.clone(), &instance, &replica).await?;
            backend.prepare().await?;
            tracing::info!(network = %settings.swarm.network, "Docker Swarm ready");
            Arc::new(backend)
        }
    };

    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("listening on {}", settings.listen))?;
    let local = listener.local_addr()?;
    let public_url = settings
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{local}"));

    let metrics = Arc::new(metrics::Metrics::new());
    let sandboxes = sandboxes::Sandboxes::new(
        store.clone(),
        backend,
        settings.clone(),
        metrics.clone(),
        keyring,
        instance.clone(),
    );
    store
        .register_replica(
            &replica,
            &sandboxes.boot,
            Some(public_url.as_str()),
            sandboxes.clock.now_ms(),
        )
        .await?;
    sandboxes.use_pool_snapshot().await?;
    sandboxes.reconcile().await?;
    Ok(Started {
        store,
        listener,
        sandboxes,
        keys,
        metrics,
        public_url,
        instance,
    })
}
