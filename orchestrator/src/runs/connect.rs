//! The seam between a run and its sandbox: [`SandboxConnector`] turns a ready sandbox into the
//! [`Computer`] the loop drives and the [`SandboxFiles`] the sink copies `~/outputs` through
//! (and the driver puts a run's input files in `~/inputs` with).
//!
//! [`SandboxdConnector`] is the one the server runs with: one `sandbox-client` (and connection
//! pool) per run, used both by [`SandboxdComputer`] and by the sink, with the sandbox's own key.
//! The crate's unit tests put a fake sandbox behind the same traits (`crate::testing`).

use std::sync::Arc;

use agent::{Computer, SandboxdComputer};
use async_trait::async_trait;
use sandbox_client::types::{FileInfo, FileListRequest};
use sandbox_client::{ClientError, SandboxClient};

use crate::backend::SANDBOXD_PORT;
use crate::db::SandboxRecord;

/// Why a ready sandbox could not be connected to. The message names the sandbox.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("sandbox {0} has no address")]
    NoAddress(String),
    #[error("sandbox {sandbox_id}: {message}")]
    Client { sandbox_id: String, message: String },
    #[error("sandbox {sandbox_id}: reading its context: {message}")]
    Context { sandbox_id: String, message: String },
}

/// Why listing or reading a sandbox's files failed.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// No such file or folder.
    #[error("{0}")]
    NotFound(String),
    /// The file is larger than the caller's limit.
    #[error("{0}")]
    TooLarge(String),
    #[error("{0}")]
    Failed(String),
}

/// A ready sandbox, connected.
pub struct Connection {
    /// What the loop drives.
    pub computer: Arc<dyn Computer>,
    /// What the sink copies outputs through.
    pub files: Arc<dyn SandboxFiles>,
    /// The agent's home directory (`~`).
    pub home: String,
}

/// Turns a ready sandbox into a [`Connection`].
#[async_trait]
pub trait SandboxConnector: Send + Sync {
    /// Connects to `sandbox` (ready, with an address) with its own `key`.
    async fn connect(&self, sandbox: &SandboxRecord, key: &str)
    -> Result<Connection, ConnectError>;
}

/// The files of one sandbox, as the sink copies them.
#[async_trait]
pub trait SandboxFiles: Send + Sync {
    /// The files and folders under `root` (recursive, four levels at most, hidden ones left
    /// out, with sizes). [`FilesError::NotFound`] when `root` does not exist.
    async fn list(&self, root: &str) -> Result<Vec<FileInfo>, FilesError>;

    /// The bytes of the file at `path`, when it has at most `limit` of them
    /// ([`FilesError::TooLarge`] otherwise, however large the listing said it was).
    async fn download_at_most(&self, path: &str, limit: u64) -> Result<Vec<u8>, FilesError>;
    /// Writes `bytes` as the file at `path` (its folder made if missing), replacing it.
    async fn upload(&self, path: &str, bytes: Vec<u8>) -> Result<(), FilesError>;
}

/// The real connector: sandboxd's REST API at the sandbox's address.
#[derive(Debug, Clone, Copy, Default)]
pub struct SandboxdConnector;

#[async_trait]
impl SandboxConnector for SandboxdConnector {
    async fn connect(
        &self,
        sandbox: &SandboxRecord,
        key: &str,
    ) -> Result<Connection, ConnectError> {
        let address = sandbox
            .address
            .as_deref()
            .ok_or_else(|| ConnectError::NoAddress(sandbox.id.clone()))?;
        let base = format!("http://{address}:{SANDBOXD_PORT}");
        // One client (and connection pool) for the loop's calls and the outputs copier.
        let client =
            SandboxClient::with_config(&base, Some(key), &SandboxdComputer::client_config())
                .map_err(|e| ConnectError::Client {
                    sandbox_id: sandbox.id.clone(),
                    message: e.to_string(),
                })?;
        let computer = SandboxdComputer::from_client(client.clone());
        let home = client
            .sandbox_context()
            .await
            .map_err(|e| ConnectError::Context {
                sandbox_id: sandbox.id.clone(),
                message: e.to_string(),
            })?
            .home_dir;
        Ok(Connection {
            computer: Arc::new(computer),
            files: Arc::new(client),
            home,
        })
    }
}

fn files_error(error: ClientError) -> FilesError {
    match error {
        error if error.status().is_some_and(|s| s.as_u16() == 404) => {
            FilesError::NotFound(error.to_string())
        }
        error @ ClientError::TooLarge { .. } => FilesError::TooLarge(error.to_string()),
        error => FilesError::Failed(error.to_string()),
    }
}

#[async_trait]
impl SandboxFiles for SandboxClient {
    async fn list(&self, root: &str) -> Result<Vec<FileInfo>, FilesError> {
        let listing = self
            .file_list(&FileListRequest {
                path: root.to_string(),
                recursive: Some(true),
                show_hidden: Some(false),
                file_types: None,
                max_depth: Some(4),
                include_size: Some(true),
                include_permissions: None,
                sort_by: None,
                sort_desc: None,
            })
            .await
            .map_err(files_error)?;
        Ok(listing.files)
    }

    async fn download_at_most(&self, path: &str, limit: u64) -> Result<Vec<u8>, FilesError> {
        self.file_download_at_most(path, limit)
            .await
            .map_err(files_error)
    }

    async fn upload(&self, path: &str, bytes: Vec<u8>) -> Result<(), FilesError> {
        let name = path.rsplit('/').next().unwrap_or(path);
        self.file_upload(Some(path), name, bytes)
            .await
            .map(drop)
            .map_err(files_error)
    }
}
