//! Where sandboxes run. [`Backend`] is what the lifecycle needs from a container platform;
//! [`docker::DockerBackend`] implements it with one Docker Engine, [`swarm::SwarmBackend`] with
//! a Docker Swarm cluster (one service per sandbox). A Kubernetes backend would implement the
//! same trait. What a backend cannot do it says in [`BackendFeatures`], so the lifecycle
//! refuses such a request before it changes anything.
//!
//! **Invariant:** a backend knows containers, not HTTP requests or database rows; it only ever
//! touches containers labelled as this orchestrator instance's.

pub mod docker;
pub mod egress;
pub mod networks;
pub mod swarm;

use std::collections::BTreeMap;

/// Per-sandbox resource limits.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    pub memory_mib: u64,
    pub cpus: f64,
    pub pids: i64,
    pub shm_mib: u64,
    /// The agent's home directory, MiB (the other places it may write are sized from it, see
    /// `backend::docker`).
    pub disk_mib: u64,
}

/// Labels on every container the orchestrator creates.
pub const LABEL_MANAGED: &str = "agentbox.managed";
pub const LABEL_SANDBOX_ID: &str = "agentbox.sandbox_id";
pub const LABEL_INSTANCE: &str = "agentbox.instance";
/// The orchestrator replica that made an object: on a network or a secret, which has no
/// container yet while it starts one, another replica's garbage collection leaves it alone; on
/// a container or service it says who made the sandbox (read by no code: for operators and
/// the cluster test, which checks that the pool's members were made by the replica holding
/// its duty).
pub const LABEL_REPLICA: &str = "agentbox.replica";

/// `SANDBOX_API_KEY_FILE` telling sandboxd to read its key from the first line of its standard
/// input (where the Docker backend writes it before start).
pub const KEY_FROM_STDIN: &str = "-";

/// sandboxd's port inside the sandbox: the only one the orchestrator talks to (the API, CDP at
/// `/cdp` and the remote desktop at `/vnc/websockify`, all behind the sandbox's own key).
pub const SANDBOXD_PORT: u16 = 8080;

/// What to run.
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    pub sandbox_id: String,
    pub image: String,
    /// Environment for sandboxd (user variables, screen size, the idle switch). Never the key.
    pub env: BTreeMap<String, String>,
    /// sandboxd's API key, delivered as a file.
    pub api_key: String,
    pub limits: Limits,
    /// A home archive (`crate::homes`) put into the container before it starts, which
    /// sandboxd unpacks into the home before any program runs: a hibernated sandbox's, or a
    /// snapshot's.
    pub home_archive: Option<std::path::PathBuf>,
    /// A browser profile's archive (`crate::homes`, Chromium's profile folder alone) put into
    /// the container before it starts, which sandboxd puts in place of the home's profile.
    pub profile_archive: Option<std::path::PathBuf>,
    /// Where the sandbox may run (Swarm constraints and preferences); empty for backends
    /// without nodes to choose from.
    pub placement: Placement,
}

/// Where a container finds its home archive at start (`SANDBOXD_HOME_ARCHIVE`'s default): the
/// folder is root's in the image, the archive is put there before start.
pub const HOME_ARCHIVE_FOLDER: &str = "/var/lib/agentbox/restore";
pub const HOME_ARCHIVE_NAME: &str = "home.tar";
/// Where in that folder a container finds its browser profile's archive
/// (`SANDBOXD_PROFILE_ARCHIVE`'s default).
pub const PROFILE_ARCHIVE_NAME: &str = "profile.tar";

/// Where a sandbox may be placed: Swarm constraints (`node.labels.region==eu`) and spread
/// preferences (`node.labels.zone`), checked by [`crate::validate`] before they come here. Only a backend whose
/// [`BackendFeatures::placement`] is set is handed a non-empty one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Placement {
    pub constraints: Vec<String>,
    pub preferences: Vec<String>,
}

impl Placement {
    pub fn is_empty(&self) -> bool {
        self.constraints.is_empty() && self.preferences.is_empty()
    }
}

/// One machine sandboxes run on, as the platform sees it (`GET /v1/cluster`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeInfo {
    pub id: String,
    pub name: String,
    /// `manager` or `worker` on a Swarm; `engine` for the Docker backend's one engine.
    pub role: String,
    /// `ready`, `down`, `unknown`, `disconnected`.
    pub state: String,
    /// `active`, `pause` or `drain` (whether the scheduler places new tasks there).
    pub availability: String,
    pub labels: BTreeMap<String, String>,
    /// What the machine has: CPUs in billionths, memory in bytes.
    pub nano_cpus: i64,
    pub memory_bytes: i64,
    /// What this orchestrator's sandboxes reserve there; `None` where the backend reserves
    /// nothing (the Docker backend: limits cap each sandbox, nothing is set aside).
    pub reserved_nano_cpus: Option<i64>,
    pub reserved_memory_bytes: Option<i64>,
    /// This orchestrator's running containers there (the ids [`Started::container_id`] gave).
    pub containers: Vec<String>,
}

/// A container that was created and started.
#[derive(Debug, Clone)]
pub struct Started {
    pub container_id: String,
    /// IP address on the sandbox's network.
    pub address: String,
}

/// One of this instance's containers, as the platform sees it.
#[derive(Debug, Clone)]
pub struct ContainerInfo {
    pub container_id: String,
    pub sandbox_id: Option<String>,
    /// Its processes exist (running, or frozen when `paused`).
    pub running: bool,
    /// Frozen by [`Backend::pause`].
    pub paused: bool,
    pub address: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("the container platform is unreachable: {0}")]
    Unavailable(String),
    #[error("image {0} not found: build it with images/build.sh")]
    ImageMissing(String),
    #[error("{step}: {message}")]
    Failed { step: &'static str, message: String },
    /// The platform has no room for the sandbox now (every node's reservations are taken).
    #[error("no node has room for the sandbox: {0}")]
    NoCapacity(String),
    /// This backend cannot do that at all (see [`BackendFeatures`]).
    #[error("{0} is not possible with this orchestrator's backend")]
    Unsupported(&'static str),
}

/// What a backend can do beyond starting and removing sandboxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendFeatures {
    /// Freezing and thawing a sandbox ([`Backend::pause`], [`Backend::resume`]).
    pub pause: bool,
    /// Starting a sandbox with a home or profile archive put in first (wakes, snapshots,
    /// forks, browser profiles).
    pub home_archives: bool,
    /// Honouring [`ContainerSpec::placement`].
    pub placement: bool,
}

/// Which backend `serve --backend` runs sandboxes with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// One Docker Engine: a container per sandbox, each on a network of its own.
    Docker,
    /// A Docker Swarm cluster: a service per sandbox, on the nodes the scheduler picks.
    Swarm,
}

/// Whether Docker answered 404 (the container or network is not there).
pub(crate) fn is_not_found(error: &bollard::errors::Error) -> bool {
    matches!(
        error,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// Connects to the engine named by `DOCKER_HOST` (`unix://` or `tcp://`; the local socket when
/// unset) and negotiates the API version, so older engines (20.10 speaks 1.41) work. An
/// unsupported `DOCKER_HOST` is an error naming it, not silently replaced by the local socket.
pub async fn connect_engine() -> Result<bollard::Docker, BackendError> {
    let host = || match std::env::var("DOCKER_HOST") {
        Ok(host) => format!("DOCKER_HOST={host}"),
        Err(_) => "the local socket /var/run/docker.sock".to_string(),
    };
    bollard::Docker::connect_with_defaults()
        .map_err(|e| BackendError::Unavailable(format!("{e} ({})", host())))?
        .negotiate_version()
        .await
        .map_err(|e| BackendError::Unavailable(format!("{e} ({})", host())))
}

/// The last output of a container or service, read from Docker's log stream and cut at 64 KiB
/// (for failure reports); a container already gone ends the read.
pub(crate) async fn read_log_tail(
    mut stream: impl futures_util::Stream<
        Item = Result<bollard::container::LogOutput, bollard::errors::Error>,
    > + Unpin,
    step: &'static str,
) -> Result<String, BackendError> {
    use futures_util::StreamExt;
    let mut out = String::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(output) => out.push_str(&String::from_utf8_lossy(&output.into_bytes())),
            Err(e) if is_not_found(&e) => break,
            Err(e) => {
                return Err(BackendError::Failed {
                    step,
                    message: e.to_string(),
                });
            }
        }
        if out.len() > 64 * 1024 {
            break;
        }
    }
    Ok(out)
}

/// What the lifecycle needs from a container platform.
#[async_trait::async_trait]
pub trait Backend: Send + Sync {
    /// What this backend can do; the Docker backend does everything.
    fn features(&self) -> BackendFeatures {
        BackendFeatures {
            pause: true,
            home_archives: true,
            placement: false,
        }
    }
    /// A latency-sensitive request (a warm-pool claim) came now: background work of the
    /// backend's own that loads the machine (making and removing networks) waits for a quiet
    /// moment after it ([`crate::lull`]).
    fn busy(&self) {}
    /// One-time setup (the egress rules); idempotent.
    async fn prepare(&self) -> Result<(), BackendError>;
    /// Creates the container, delivers the key file, starts it and returns its address.
    /// On failure nothing is left behind.
    async fn start(&self, spec: &ContainerSpec) -> Result<Started, BackendError>;
    /// Removes a container and its anonymous volumes; a missing container is not an error.
    /// A paused container is removed too.
    async fn remove(&self, container_id: &str) -> Result<(), BackendError>;
    /// Freezes every process of a running container (the cgroup freezer): no CPU, memory and
    /// open connections kept. Pausing a paused container is not an error.
    async fn pause(&self, container_id: &str) -> Result<(), BackendError>;
    /// Thaws a paused container. Resuming a running container is not an error.
    async fn resume(&self, container_id: &str) -> Result<(), BackendError>;
    /// This instance's containers, running or not.
    async fn list(&self) -> Result<Vec<ContainerInfo>, BackendError>;
    /// One container, `None` when it does not exist.
    async fn inspect(&self, container_id: &str) -> Result<Option<ContainerInfo>, BackendError>;
    /// Why a container that stopped running went away, when the platform knows more than
    /// that (its node is down); `None` otherwise.
    async fn lost_reason(&self, _container_id: &str) -> Option<String> {
        None
    }
    /// The machines sandboxes run on, with what this orchestrator's containers take on each.
    async fn nodes(&self) -> Result<Vec<NodeInfo>, BackendError>;
    /// The last lines of a container's output (for failure reports).
    async fn logs_tail(&self, container_id: &str, lines: usize) -> Result<String, BackendError>;
    /// Removes what this instance's containers left behind when they went away without it (a
    /// container whose dead-man switch fired while the orchestrator was down takes itself
    /// away, not its network). Called at start and now and then by the reaper. What a replica
    /// in `busy` made ([`LABEL_REPLICA`]) is left alone: it may be about to use it.
    async fn collect_garbage(
        &self,
        _busy: &std::collections::HashSet<String>,
    ) -> Result<(), BackendError> {
        Ok(())
    }
}
