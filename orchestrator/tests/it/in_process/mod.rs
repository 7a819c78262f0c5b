//! The orchestrator's real router inside the test process, without Docker: a backend that has
//! no containers, SQLite in a temporary directory, one admin key. For tests of routes, pages and
//! the command line that start nothing.

#![allow(dead_code)]

use std::sync::Arc;

use clap::Parser;
use orchestrator::api::{AppState, router};
use orchestrator::auth::ApiKeys;
use orchestrator::backend::{Backend, BackendError, ContainerInfo, ContainerSpec, Started};
use orchestrator::config::ServeArgs;
use orchestrator::db::{Store, sqlite_url};
use orchestrator::keyring::Keyring;
use orchestrator::metrics::Metrics;
use orchestrator::sandboxes::Sandboxes;

/// A platform without containers: the router is built and asked, nothing is started.
struct NoContainers;

#[async_trait::async_trait]
impl Backend for NoContainers {
    async fn prepare(&self) -> Result<(), BackendError> {
        Ok(())
    }
    async fn start(&self, _: &ContainerSpec) -> Result<Started, BackendError> {
        Err(BackendError::Unavailable(
            "no containers in this test".into(),
        ))
    }
    async fn remove(&self, _: &str) -> Result<(), BackendError> {
        Ok(())
    }
    async fn pause(&self, _: &str) -> Result<(), BackendError> {
        Err(BackendError::Unavailable(
            "no containers in this test".into(),
        ))
    }
    async fn resume(&self, _: &str) -> Result<(), BackendError> {
        Err(BackendError::Unavailable(
            "no containers in this test".into(),
        ))
    }
    async fn list(&self) -> Result<Vec<ContainerInfo>, BackendError> {
        Ok(Vec::new())
    }
    async fn inspect(&self, _: &str) -> Result<Option<ContainerInfo>, BackendError> {
        Ok(None)
    }
    async fn logs_tail(&self, _: &str, _: usize) -> Result<String, BackendError> {
        Ok(String::new())
    }
    async fn nodes(&self) -> Result<Vec<orchestrator::backend::NodeInfo>, BackendError> {
        Ok(vec![orchestrator::backend::NodeInfo {
            id: "in-process".into(),
            name: "in-process".into(),
            role: "engine".into(),
            state: "ready".into(),
            availability: "active".into(),
            ..Default::default()
        }])
    }
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

/// The router, its store and the data directory they live in (removed on drop).
pub struct InProcess {
    pub app: axum::Router,
    pub store: Store,
    /// The runs service behind the router (for what no route does, like retention).
    pub runs: Arc<orchestrator::runs::Runs>,
    pub data: tempfile::TempDir,
}

/// The router with the default serve flags, `admin_key` as the admin key, answering as
/// `public_url` (its own origin) under instance name `instance`.
pub async fn start(admin_key: &str, public_url: &str, instance: &str) -> InProcess {
    let data = tempfile::tempdir().expect("a temporary directory");
    let settings = Cli::try_parse_from([
        "orchestrator",
        "--data-dir",
        &data.path().display().to_string(),
    ])
    .expect("default serve flags")
    .serve
    .settings()
    .expect("default settings");
    let store = Store::connect(&sqlite_url(data.path()))
        .await
        .expect("SQLite store");
    let keys = Arc::new(ApiKeys::new(store.clone()));
    keys.bootstrap(Some(admin_key)).await.expect("admin key");
    let metrics = Arc::new(Metrics::new());
    let sandboxes = Sandboxes::new(
        store.clone(),
        Arc::new(NoContainers),
        Arc::new(settings),
        metrics.clone(),
        Keyring::from_bytes([7; 32]),
        instance.into(),
    );
    let state = AppState::new(sandboxes, keys, metrics, public_url.into());
    let runs = state.runs.clone();
    let app = router(state);
    InProcess {
        app,
        store,
        runs,
        data,
    }
}
