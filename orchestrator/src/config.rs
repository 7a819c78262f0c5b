//! Settings of `orchestrator serve`: flags, each with an environment variable, and the values
//! derived from them. Nothing here reads the environment except through clap.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use agentbox_http::logging::LogFormat;

pub use crate::backend::Limits;

/// `orchestrator serve` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address of the REST API.
    #[arg(long, env = "AGENTBOX_LISTEN", default_value = "127.0.0.1:8090")]
    pub listen: SocketAddr,
    /// Directory for the SQLite database (unless DATABASE_URL is set).
    #[arg(long, env = "AGENTBOX_DATA_DIR", default_value = "./agentbox-data")]
    pub data_dir: PathBuf,
    /// Where `script:<path>` model files must be (relative paths resolve against it). The
    /// repository's `examples/` holds the demo.
    #[arg(long, env = "AGENTBOX_SCRIPTS_DIR", default_value = "./examples")]
    pub scripts_dir: PathBuf,
    /// Seconds a run's lease lasts without renewal: after a crash, another process (or this
    /// one restarted) resumes the run once it expires.
    #[arg(long, env = "AGENTBOX_RUN_LEASE_SECS", default_value_t = 30)]
    pub run_lease_secs: u64,
    /// `postgres://...` selects Postgres; default: SQLite in the data directory.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Base URL clients use to reach this server (in `urls` and viewer links). Default:
    /// `http://<listen address>`.
    #[arg(long, env = "AGENTBOX_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Sandbox image used when a request names none.
    #[arg(
        long,
        env = "AGENTBOX_SANDBOX_IMAGE",
        default_value = "agentbox/sandbox:latest"
    )]
    pub image: String,
    /// Further images a request may name (comma-separated in the environment). The default
    /// image is always allowed; nothing else is unless listed.
    #[arg(
        long = "allow-image",
        env = "AGENTBOX_ALLOWED_IMAGES",
        value_delimiter = ','
    )]
    pub allowed_images: Vec<String>,
    /// Where sandboxes run: `docker`, a container each on this Docker Engine, or `swarm`, a
    /// service each on the Docker Swarm cluster this engine manages (no pause, hibernation,
    /// forks, starts from snapshots or browser profiles there).
    #[arg(long, env = "AGENTBOX_BACKEND", value_enum, default_value = "docker")]
    pub backend: crate::backend::BackendKind,
    /// The Swarm backend's overlay network, made (internal, attachable) when missing. The
    /// orchestrator's own container must be attached to it: it reaches sandboxes there.
    #[arg(
        long = "swarm-network",
        env = "AGENTBOX_SWARM_NETWORK",
        default_value = "agentbox-sandboxes"
    )]
    pub swarm_network: String,
    /// Whether the Swarm backend's overlay, when it makes it, is encrypted between nodes
    /// (IPsec: every node's kernel needs ESP support).
    #[arg(
        long = "swarm-encrypt",
        env = "AGENTBOX_SWARM_ENCRYPT",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub swarm_encrypt: bool,
    /// Name prefix of the sandbox networks: each sandbox gets a bridge network of its own,
    /// `<network>-<random>`, so no two sandboxes share a link or a resolver.
    #[arg(long, env = "AGENTBOX_NETWORK", default_value = "agentbox")]
    pub network: String,
    /// The address range the sandbox networks are cut from, a /28 each (4,096 sandboxes in the
    /// default /16). Pick a range nothing on the host's networks uses.
    #[arg(
        long = "sandbox-subnets",
        env = "AGENTBOX_SANDBOX_SUBNETS",
        default_value = "10.222.0.0/16"
    )]
    pub sandbox_subnets: String,
    /// Label value marking this orchestrator's containers. Default: an id kept in the database,
    /// so a restart with the same data adopts its containers.
    #[arg(long, env = "AGENTBOX_INSTANCE")]
    pub instance: Option<String>,
    /// This replica's name among the orchestrators sharing one database (letters, digits,
    /// `.`, `_`, `-`; at most 64). Default: an id kept in the data directory, so a restart
    /// with the same data is the same replica. Two running processes must not share one.
    #[arg(long, env = "AGENTBOX_REPLICA")]
    pub replica: Option<String>,
    /// Ready containers kept waiting for the default image.
    #[arg(long, env = "AGENTBOX_POOL_SIZE", default_value_t = 2)]
    pub pool_size: usize,
    /// Fill the warm pool from this snapshot (`snp-...`, kept by this instance) instead of the
    /// bare image: creates that name it, by the key that owns it, are served from the pool;
    /// others start cold.
    #[arg(long, env = "AGENTBOX_POOL_SNAPSHOT")]
    pub pool_snapshot: Option<String>,
    /// Memory limit per sandbox, MiB.
    #[arg(long, env = "AGENTBOX_SANDBOX_MEMORY_MIB", default_value_t = 2048)]
    pub memory_mib: u64,
    /// CPU limit per sandbox (cores).
    #[arg(long, env = "AGENTBOX_SANDBOX_CPUS", default_value_t = 1.0)]
    pub cpus: f64,
    /// Process limit per sandbox.
    #[arg(long, env = "AGENTBOX_SANDBOX_PIDS", default_value_t = 1024)]
    pub pids: i64,
    /// /dev/shm size per sandbox, MiB (Chromium needs more than Docker's 64).
    #[arg(long, env = "AGENTBOX_SANDBOX_SHM_MIB", default_value_t = 512)]
    pub shm_mib: u64,
    /// Space for the agent's files per sandbox, MiB: its home directory holds at most this
    /// much, /tmp a quarter of it. Every place an agent can write is a size-limited tmpfs (the
    /// container's own layer is not writable to it), so files count against the sandbox's
    /// memory limit and never reach the host's disk.
    #[arg(long, env = "AGENTBOX_SANDBOX_DISK_MIB", default_value_t = 1024)]
    pub disk_mib: u64,
    /// Sandboxes booting at the same time (0: one per CPU, at least 2). Further creates wait
    /// their turn: a desktop and a browser starting at once on every core would slow every
    /// start until sandboxd's own readiness limits give up.
    #[arg(long, env = "AGENTBOX_MAX_CONCURRENT_STARTS", default_value_t = 0)]
    pub max_concurrent_starts: usize,
    /// Idle timeout when a request gives none, seconds.
    #[arg(long, env = "AGENTBOX_IDLE_TIMEOUT_SECS", default_value_t = 600)]
    pub idle_timeout_secs: i64,
    /// Idle this long (seconds), a sandbox is paused (frozen, memory kept) until something
    /// resumes it, when its create request gives no `idle_pause_secs`; 0: never. Paused, it is
    /// still removed once idle for its idle timeout.
    #[arg(long, env = "AGENTBOX_IDLE_PAUSE_SECS", default_value_t = 0)]
    pub idle_pause_secs: i64,
    /// Idle this long (seconds), a sandbox is hibernated (its container removed, its home kept
    /// on disk) until something wakes it, when its create request gives no
    /// `idle_hibernate_secs`; 0: never. Hibernated, it is still removed once idle for its idle
    /// timeout.
    #[arg(long, env = "AGENTBOX_IDLE_HIBERNATE_SECS", default_value_t = 0)]
    pub idle_hibernate_secs: i64,
    /// Snapshots one API key may keep.
    #[arg(long, env = "AGENTBOX_MAX_SNAPSHOTS_PER_KEY", default_value_t = 20)]
    pub max_snapshots_per_key: usize,
    /// Browser profiles one API key may keep.
    #[arg(long, env = "AGENTBOX_MAX_PROFILES_PER_KEY", default_value_t = 20)]
    pub max_profiles_per_key: usize,
    /// Absolute lifetime when a request gives none, seconds.
    #[arg(long, env = "AGENTBOX_MAX_LIFETIME_SECS", default_value_t = 3600)]
    pub max_lifetime_secs: i64,
    /// Largest lifetime (and idle timeout) a request may ask for, seconds.
    #[arg(long, env = "AGENTBOX_LIFETIME_CAP_SECS", default_value_t = 7 * 24 * 3600)]
    pub lifetime_cap_secs: i64,
    /// How long a new container may take to become ready, seconds.
    #[arg(long, env = "AGENTBOX_READY_TIMEOUT_SECS", default_value_t = 120)]
    pub ready_timeout_secs: u64,
    /// Heartbeat period, seconds. Sandboxes exit on their own after 3 missed heartbeats
    /// (`SANDBOXD_IDLE_EXIT_SECS`), so nothing outlives a dead orchestrator for long.
    #[arg(long, env = "AGENTBOX_HEARTBEAT_SECS", default_value_t = 10)]
    pub heartbeat_secs: u64,
    /// How often the reaper looks for idle and expired sandboxes, milliseconds.
    #[arg(long, env = "AGENTBOX_REAPER_INTERVAL_MS", default_value_t = 1000)]
    pub reaper_interval_ms: u64,
    /// How long records of sandboxes whose container vanished are kept, seconds.
    #[arg(long, env = "AGENTBOX_LOST_RETENTION_SECS", default_value_t = 3600)]
    pub lost_retention_secs: u64,
    /// Sandboxes one API key may have running at once (creating, ready or degraded; 0: no limit).
    #[arg(long, env = "AGENTBOX_MAX_SANDBOXES_PER_KEY", default_value_t = 20)]
    pub max_sandboxes_per_key: usize,
    /// WebSocket relays (viewers, CDP, the sandbox API's sockets) one API key may hold open at
    /// once; one more is refused with 429.
    #[arg(long, env = "AGENTBOX_RELAYS_PER_KEY", default_value_t = 64)]
    pub relays_per_key: usize,
    /// How long a message a client began on a relay may stay unfinished before the relay is
    /// closed, seconds.
    #[arg(long, env = "AGENTBOX_RELAY_UNFINISHED_SECS", default_value_t = 30)]
    pub relay_unfinished_secs: u64,
    /// Artifacts (screenshots and copied outputs) one run may keep, MiB; past it a file is not
    /// kept and the run's log says so (`artifact.skipped`).
    #[arg(long, env = "AGENTBOX_RUN_ARTIFACTS_MIB", default_value_t = 1024)]
    pub run_artifacts_mib: u64,
    /// Artifacts all the runs of one API key may keep together, MiB.
    #[arg(long, env = "AGENTBOX_KEY_ARTIFACTS_MIB", default_value_t = 10240)]
    pub key_artifacts_mib: u64,
    /// Ended runs older than this many days are deleted with their events and artifacts
    /// (0: kept until deleted).
    #[arg(long, env = "AGENTBOX_RUN_RETENTION_DAYS", default_value_t = 30)]
    pub run_retention_days: u64,
    /// The master key file (256 bits; sandbox keys and the token-signing key are derived from
    /// it, so the database holds neither). Default: `master.key` in the data directory, created
    /// at first start. Instances sharing a database must share this file.
    #[arg(long, env = "AGENTBOX_MASTER_KEY_FILE")]
    pub master_key_file: Option<PathBuf>,
    /// What sandboxes may reach on the network: `public` (the internet, but not this host,
    /// other sandboxes, private, loopback, link-local (cloud metadata) or multicast ranges) or
    /// `none` (nothing). Enforced with the host's iptables (root or CAP_NET_ADMIN needed);
    /// `unrestricted` skips enforcement (not recommended).
    #[arg(long, env = "AGENTBOX_EGRESS", value_enum, default_value = "public")]
    pub egress: crate::backend::egress::EgressPolicy,
    /// Destinations sandboxes may reach even when private (CIDR, e.g. `10.1.2.3/32`; comma-
    /// separated in the environment): an internal proxy, a package mirror.
    #[arg(
        long = "egress-allow",
        env = "AGENTBOX_EGRESS_ALLOW",
        value_delimiter = ','
    )]
    pub egress_allow: Vec<String>,
    /// The model a task sent over A2A runs with when its message does not name one in its
    /// metadata (`model`), e.g. `anthropic:claude-sonnet-4-5` or `script:demo.json`.
    #[arg(long, env = "AGENTBOX_A2A_MODEL")]
    pub a2a_model: Option<String>,
    /// Offers the A2A conformance executor (model `conformance`): tasks answered by the
    /// prefix of their message id, as the A2A conformance kit expects, with no sandbox. A
    /// testing aid; off by default.
    #[arg(long, env = "AGENTBOX_A2A_CONFORMANCE", default_value_t = false)]
    pub a2a_conformance: bool,
    /// Address ranges besides the public internet that `a2a:` runs may reach (the card,
    /// the endpoint, file downloads), e.g. `127.0.0.0/8` for an agent on this host or
    /// `10.0.0.0/8` for one on the private network. Default: none (public addresses only).
    #[arg(
        long = "a2a-remote-networks",
        env = "AGENTBOX_A2A_REMOTE_NETWORKS",
        value_delimiter = ','
    )]
    pub a2a_remote_networks: Vec<String>,
    /// Admin key to install (at least 24 characters). Default: one is generated at first start
    /// and printed once.
    #[arg(long, env = "AGENTBOX_ADMIN_KEY", hide_env_values = true)]
    pub admin_key: Option<String>,
    #[arg(long, env = "AGENTBOX_LOG_FORMAT", value_enum, default_value = "json")]
    pub log_format: LogFormat,
}

/// Validated settings the server runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub scripts_dir: PathBuf,
    pub run_lease: Duration,
    pub database_url: String,
    pub public_url: Option<String>,
    pub image: String,
    pub allowed_images: Vec<String>,
    pub backend: crate::backend::BackendKind,
    pub swarm: crate::backend::swarm::SwarmSettings,
    pub network: String,
    pub sandbox_subnets: ipnet::Ipv4Net,
    pub instance: Option<String>,
    /// `--replica`, or (once the server starts) the id kept in the data directory.
    pub replica: Option<String>,
    pub pool_size: usize,
    pub pool_snapshot: Option<String>,
    pub max_concurrent_starts: usize,
    pub limits: Limits,
    pub idle_timeout_secs: i64,
    /// `None`: sandboxes are not paused when idle unless their request asks.
    pub idle_pause_secs: Option<i64>,
    /// `None`: sandboxes are not hibernated when idle unless their request asks.
    pub idle_hibernate_secs: Option<i64>,
    pub max_snapshots_per_key: usize,
    pub max_profiles_per_key: usize,
    pub max_lifetime_secs: i64,
    pub lifetime_cap_secs: i64,
    pub ready_timeout: Duration,
    pub heartbeat: Duration,
    pub reaper_interval: Duration,
    pub lost_retention: Duration,
    pub admin_key: Option<String>,
    pub log_format: LogFormat,
    pub max_sandboxes_per_key: usize,
    pub relays_per_key: usize,
    pub relay_unfinished: Duration,
    pub run_artifact_bytes: u64,
    pub key_artifact_bytes: u64,
    /// `None`: ended runs are kept until deleted.
    pub run_retention: Option<Duration>,
    pub master_key_file: PathBuf,
    pub egress: crate::backend::egress::EgressPolicy,
    pub egress_allow: Vec<ipnet::Ipv4Net>,
    /// The model of A2A tasks whose message names none.
    pub a2a_model: Option<String>,
    /// Whether the A2A conformance executor is offered.
    pub a2a_conformance: bool,
    /// Non-public ranges `a2a:` runs may reach.
    pub a2a_remote_networks: Vec<ipnet::IpNet>,
}

#[derive(Debug, thiserror::Error)]
#[error("invalid setting --{flag}: {message}")]
pub struct ConfigError {
    pub flag: &'static str,
    pub message: String,
}

fn invalid(flag: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        flag,
        message: message.into(),
    }
}

impl ServeArgs {
    /// Checks every flag and turns them into the [`Settings`] the server runs with; a bad flag
    /// is a [`ConfigError`] naming it.
    pub fn settings(self) -> Result<Settings, ConfigError> {
        self.check_bounds()?;
        let sandbox_subnets = sandbox_subnets(&self.sandbox_subnets)?;
        let database_url = database_url(self.database_url.as_deref(), &self.data_dir)?;
        let egress_allow = egress_allow(&self.egress_allow)?;
        let public_url = public_url(self.public_url.as_deref())?;
        let master_key_file = self
            .master_key_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join("master.key"));
        Ok(Settings {
            listen: self.listen,
            data_dir: self.data_dir,
            scripts_dir: self.scripts_dir,
            run_lease: Duration::from_secs(self.run_lease_secs),
            database_url,
            public_url,
            image: self.image,
            allowed_images: self
                .allowed_images
                .into_iter()
                .filter(|i| !i.is_empty())
                .collect(),
            backend: self.backend,
            swarm: crate::backend::swarm::SwarmSettings {
                network: self.swarm_network.clone(),
                encrypt: self.swarm_encrypt,
            },
            network: self.network,
            sandbox_subnets,
            instance: self.instance.filter(|i| !i.is_empty()),
            replica: self.replica.filter(|r| !r.is_empty()),
            pool_size: self.pool_size,
            pool_snapshot: self.pool_snapshot.clone(),
            max_concurrent_starts: if self.max_concurrent_starts == 0 {
                std::thread::available_parallelism()
                    .map_or(2, |n| n.get())
                    .max(2)
            } else {
                self.max_concurrent_starts
            },
            limits: Limits {
                memory_mib: self.memory_mib,
                cpus: self.cpus,
                pids: self.pids,
                shm_mib: self.shm_mib,
                disk_mib: self.disk_mib,
            },
            idle_timeout_secs: self.idle_timeout_secs,
            idle_pause_secs: (self.idle_pause_secs > 0).then_some(self.idle_pause_secs),
            idle_hibernate_secs: (self.idle_hibernate_secs > 0).then_some(self.idle_hibernate_secs),
            max_snapshots_per_key: self.max_snapshots_per_key,
            max_profiles_per_key: self.max_profiles_per_key,
            max_lifetime_secs: self.max_lifetime_secs,
            lifetime_cap_secs: self.lifetime_cap_secs,
            ready_timeout: Duration::from_secs(self.ready_timeout_secs.max(1)),
            heartbeat: Duration::from_secs(self.heartbeat_secs),
            reaper_interval: Duration::from_millis(self.reaper_interval_ms),
            lost_retention: Duration::from_secs(self.lost_retention_secs),
            admin_key: self.admin_key.filter(|k| !k.is_empty()),
            log_format: self.log_format,
            max_sandboxes_per_key: self.max_sandboxes_per_key,
            relays_per_key: self.relays_per_key,
            relay_unfinished: Duration::from_secs(self.relay_unfinished_secs),
            run_artifact_bytes: self.run_artifacts_mib * 1024 * 1024,
            key_artifact_bytes: self.key_artifacts_mib * 1024 * 1024,
            run_retention: (self.run_retention_days > 0)
                .then(|| Duration::from_secs(self.run_retention_days * 86_400)),
            master_key_file,
            egress: self.egress,
            egress_allow,
            a2a_model: self.a2a_model.filter(|m| !m.trim().is_empty()),
            a2a_conformance: self.a2a_conformance,
            a2a_remote_networks: ip_ranges("a2a-remote-networks", &self.a2a_remote_networks)?,
        })
    }

    /// The numeric flags, each within its range.
    fn check_bounds(&self) -> Result<(), ConfigError> {
        if self.cpus <= 0.0 || self.cpus > 256.0 {
            return Err(invalid("cpus", "must be in (0, 256]"));
        }
        if self.memory_mib < 256 {
            return Err(invalid("memory-mib", "must be at least 256"));
        }
        if self.disk_mib < 64 || self.disk_mib > 1024 * 1024 {
            return Err(invalid("disk-mib", "must be between 64 and 1048576"));
        }
        if self.pids < 64 {
            return Err(invalid("pids", "must be at least 64"));
        }
        if !(3..=3600).contains(&self.run_lease_secs) {
            return Err(invalid("run-lease-secs", "must be between 3 and 3600"));
        }
        if self.heartbeat_secs == 0 {
            return Err(invalid("heartbeat-secs", "must be at least 1"));
        }
        if let Some(replica) = self.replica.as_deref().filter(|r| !r.is_empty())
            && !crate::replicas::is_valid_id(replica)
        {
            return Err(invalid(
                "replica",
                "letters, digits, '.', '_' and '-' only, at most 64",
            ));
        }
        if self.run_artifacts_mib == 0 || self.run_artifacts_mib > self.key_artifacts_mib {
            return Err(invalid(
                "run-artifacts-mib",
                "must be at least 1 and at most --key-artifacts-mib",
            ));
        }
        if self.run_retention_days > 36_500 {
            return Err(invalid("run-retention-days", "must be at most 36500"));
        }
        if self.relays_per_key == 0 {
            return Err(invalid("relays-per-key", "must be at least 1"));
        }
        if self.backend == crate::backend::BackendKind::Swarm {
            // What the Swarm backend cannot do is refused here rather than failing later,
            // sandbox by sandbox.
            for (flag, set) in [
                ("idle-pause-secs", self.idle_pause_secs > 0),
                ("idle-hibernate-secs", self.idle_hibernate_secs > 0),
                ("pool-snapshot", self.pool_snapshot.is_some()),
            ] {
                if set {
                    return Err(invalid(flag, "is not possible with --backend swarm"));
                }
            }
            if self.swarm_network.is_empty() {
                return Err(invalid("swarm-network", "must not be empty"));
            }
        }
        if !(1..=3600).contains(&self.relay_unfinished_secs) {
            return Err(invalid(
                "relay-unfinished-secs",
                "must be between 1 and 3600",
            ));
        }
        if self.idle_timeout_secs < 1 || self.idle_timeout_secs > self.lifetime_cap_secs {
            return Err(invalid(
                "idle-timeout-secs",
                "must be between 1 and the lifetime cap",
            ));
        }
        if self.idle_pause_secs < 0 || self.idle_pause_secs > self.lifetime_cap_secs {
            return Err(invalid(
                "idle-pause-secs",
                "must be between 0 (never) and the lifetime cap",
            ));
        }
        if self.idle_hibernate_secs < 0 || self.idle_hibernate_secs > self.lifetime_cap_secs {
            return Err(invalid(
                "idle-hibernate-secs",
                "must be between 0 (never) and the lifetime cap",
            ));
        }
        if self.max_lifetime_secs < 1 || self.max_lifetime_secs > self.lifetime_cap_secs {
            return Err(invalid(
                "max-lifetime-secs",
                "must be between 1 and the lifetime cap",
            ));
        }
        if self.reaper_interval_ms < 50 {
            return Err(invalid("reaper-interval-ms", "must be at least 50"));
        }
        if self.network.is_empty() {
            return Err(invalid("network", "must not be empty"));
        }
        Ok(())
    }
}

/// `--sandbox-subnets`: an IPv4 range holding at least one sandbox network.
fn sandbox_subnets(text: &str) -> Result<ipnet::Ipv4Net, ConfigError> {
    let subnets = text
        .trim()
        .parse::<ipnet::Ipv4Net>()
        .map_err(|_| {
            invalid(
                "sandbox-subnets",
                format!("{text:?} is not an IPv4 CIDR range"),
            )
        })?
        .trunc();
    if subnets.prefix_len() > crate::backend::networks::SANDBOX_SUBNET_PREFIX {
        return Err(invalid(
            "sandbox-subnets",
            format!(
                "must hold at least one /{} (a sandbox's network)",
                crate::backend::networks::SANDBOX_SUBNET_PREFIX
            ),
        ));
    }
    Ok(subnets)
}

/// `--database-url`: Postgres or SQLite; SQLite in the data directory when not given.
fn database_url(url: Option<&str>, data_dir: &std::path::Path) -> Result<String, ConfigError> {
    match url.filter(|u| !u.is_empty()) {
        Some(url)
            if url.starts_with("postgres://")
                || url.starts_with("postgresql://")
                || url.starts_with("sqlite:") =>
        {
            Ok(url.to_string())
        }
        Some(_) => Err(invalid(
            "database-url",
            "must start with postgres://, postgresql:// or sqlite:",
        )),
        None => Ok(crate::db::sqlite_url(data_dir)),
    }
}

/// `--egress-allow`: IPv4 addresses or ranges (blank entries ignored).
fn egress_allow(entries: &[String]) -> Result<Vec<ipnet::Ipv4Net>, ConfigError> {
    entries
        .iter()
        .map(|c| c.trim())
        .filter(|c| !c.is_empty())
        .map(|c| {
            c.parse::<ipnet::Ipv4Net>()
                .or_else(|_| c.parse::<std::net::Ipv4Addr>().map(ipnet::Ipv4Net::from))
                .map_err(|_| {
                    invalid(
                        "egress-allow",
                        format!("{c:?} is not an IPv4 address or CIDR range"),
                    )
                })
        })
        .collect()
}

/// IPv4 or IPv6 addresses or ranges (blank entries ignored), for the flag `name`.
fn ip_ranges(name: &'static str, entries: &[String]) -> Result<Vec<ipnet::IpNet>, ConfigError> {
    entries
        .iter()
        .map(|c| c.trim())
        .filter(|c| !c.is_empty())
        .map(|c| {
            c.parse::<ipnet::IpNet>()
                .or_else(|_| c.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| invalid(name, format!("{c:?} is not an IP address or CIDR range")))
        })
        .collect()
}

/// `--public-url`: an http(s) URL without its trailing slash, or none.
fn public_url(url: Option<&str>) -> Result<Option<String>, ConfigError> {
    let url = url
        .map(|u| u.trim_end_matches('/').to_string())
        .filter(|u| !u.is_empty());
    if let Some(url) = &url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(invalid("public-url", "must start with http:// or https://"));
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn settings(flags: &[&str]) -> Result<Settings, ConfigError> {
        let mut args = vec!["orchestrator"];
        args.extend_from_slice(flags);
        Cli::try_parse_from(args)
            .expect("the flags parse")
            .serve
            .settings()
    }

    #[test]
    fn sandbox_subnets_must_be_a_range_holding_a_sandbox_network() {
        let default = settings(&[]).expect("the defaults are valid");
        assert_eq!(default.sandbox_subnets.to_string(), "10.222.0.0/16");
        let loose = settings(&["--sandbox-subnets", "10.9.8.7/20"]).expect("valid");
        assert_eq!(
            loose.sandbox_subnets.to_string(),
            "10.9.0.0/20",
            "the network's own address"
        );
        for bad in ["", "10.0.0.0", "10.0.0.0/29", "fd00::/64", "ten"] {
            let error = settings(&["--sandbox-subnets", bad])
                .err()
                .unwrap_or_else(|| panic!("{bad:?} is refused"));
            assert_eq!(error.flag, "sandbox-subnets", "{bad:?}: {error}");
        }
    }
}
