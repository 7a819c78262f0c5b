//! The Docker backend (bollard): one container per sandbox, each on a bridge network of its own.
//!
//! Every container: the sandbox image; labels marking it ours (managed, sandbox id, instance,
//! the replica that made it);
//! memory, CPU, pids and shm limits; all capabilities dropped (sandboxd and everything it starts
//! run as the unprivileged `agent` and need none); `no-new-privileges`; no published ports (the
//! orchestrator reaches sandboxd at the container's address); no Docker socket; `auto_remove`,
//! so a sandbox whose dead-man switch fired disappears by itself. The per-sandbox key is handed
//! over on the container's standard input before start, never put in the environment, where
//! `docker inspect` would show it, nor in a file.
//!
//! Disk: the container's own layer holds the image and the key file, and nothing the agent can
//! write. Every directory `agent` may write to in the image is covered by a size-limited tmpfs
//! ([`writable_mounts`]): the home directory (`--disk-mib`), /tmp (a quarter of it), /var/tmp,
//! /run/lock, sandboxd's logs and its runtime folder. tmpfs pages are charged to the memory cgroup of the
//! process that writes them, so an agent's files also count against the sandbox's memory limit
//! and never reach the host's disk (fuse-overlayfs, the storage driver this was built on, has
//! no size option for a writable layer). The image's own test checks that nothing else on the
//! root filesystem is writable to `agent`.
//!
//! Networks: every sandbox is on a bridge network of its own ([`super::networks`]), with
//! inter-container traffic disabled besides; its bridge carries the prefix on which
//! [`super::egress`] hangs the rules that keep sandboxes off this host, private ranges and
//! cloud metadata. The network goes with the container.
//!
//! Removal checks the container's instance label first: this backend never removes a container
//! another orchestrator instance (or anyone else) made, whatever id it is handed.

use std::collections::HashMap;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, ListContainersOptionsBuilder, LogsOptionsBuilder,
    RemoveContainerOptionsBuilder,
};
use ipnet::Ipv4Net;

use super::egress::{EgressPolicy, EgressRules};
use super::networks::{LABEL_NETWORK, SandboxNetworks, SubnetPlan};
use super::{
    Backend, BackendError, ContainerInfo, ContainerSpec, HOME_ARCHIVE_FOLDER, HOME_ARCHIVE_NAME,
    KEY_FROM_STDIN, LABEL_INSTANCE, LABEL_MANAGED, LABEL_REPLICA, LABEL_SANDBOX_ID,
    PROFILE_ARCHIVE_NAME, Started, is_not_found,
};

/// How many empty sandbox networks are kept made ahead of the starts that need them.
const SPARE_NETWORKS: usize = 2;
/// A deleted sandbox's network is removed once claims pause, but waits at most this long.
const NETWORK_REMOVAL_MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The Docker Engine backend.
pub struct DockerBackend {
    docker: Docker,
    /// The sandbox networks' name prefix (`--network`).
    network: String,
    networks: SandboxNetworks,
    instance: String,
    /// This replica ([`LABEL_REPLICA`] on the containers it makes: who made a sandbox).
    replica: String,
    egress: EgressPolicy,
    egress_allow: Vec<ipnet::Ipv4Net>,
}

fn failed(step: &'static str) -> impl FnOnce(bollard::errors::Error) -> BackendError {
    move |error| BackendError::Failed {
        step,
        message: error.to_string(),
    }
}

/// A container that is missing or labelled as another instance's: left alone.
fn not_ours(container_id: &str, step: &'static str) -> BackendError {
    BackendError::Failed {
        step,
        message: format!("container {container_id} is not one of this orchestrator's containers"),
    }
}

impl DockerBackend {
    /// Connects to the engine named by `DOCKER_HOST` (`unix://` or `tcp://`; the local socket
    /// when unset) and negotiates the API version, so older engines (20.10 speaks 1.41) work.
    /// An unsupported `DOCKER_HOST` is an error, not silently replaced by the local socket.
    pub async fn connect(
        network: &str,
        sandbox_subnets: Ipv4Net,
        instance: &str,
        replica: &str,
        egress: EgressPolicy,
        egress_allow: Vec<ipnet::Ipv4Net>,
    ) -> Result<Self, BackendError> {
        let docker = super::connect_engine().await?;
        let networks = SandboxNetworks::new(
            docker.clone(),
            network,
            instance,
            replica,
            SubnetPlan::new(sandbox_subnets),
            SPARE_NETWORKS,
            EgressRules::for_network(network, egress, egress_allow.clone()),
        );
        Ok(Self {
            docker,
            network: network.to_string(),
            networks,
            instance: instance.to_string(),
            replica: replica.to_string(),
            egress,
            egress_allow,
        })
    }

    fn labels(&self, sandbox_id: &str, network: &str) -> HashMap<String, String> {
        HashMap::from([
            (LABEL_MANAGED.to_string(), "true".to_string()),
            (LABEL_SANDBOX_ID.to_string(), sandbox_id.to_string()),
            (LABEL_INSTANCE.to_string(), self.instance.clone()),
            (LABEL_NETWORK.to_string(), network.to_string()),
            (LABEL_REPLICA.to_string(), self.replica.clone()),
        ])
    }

    /// Takes a network for the sandbox, then makes its container on it; on failure neither
    /// is left.
    async fn create_and_start(&self, spec: &ContainerSpec) -> Result<String, BackendError> {
        let network = self.networks.take().await?;
        let started = self.create_container(spec, &network).await;
        self.networks.started(&network);
        if started.is_err() {
            self.networks.remove(&network).await;
        }
        started
    }

    async fn create_container(
        &self,
        spec: &ContainerSpec,
        network: &str,
    ) -> Result<String, BackendError> {
        let mut env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        env.push(format!("SANDBOX_API_KEY_FILE={KEY_FROM_STDIN}"));
        let limits = &spec.limits;
        let memory = (limits.memory_mib * 1024 * 1024) as i64;
        let config = ContainerCreateBody {
            image: Some(spec.image.clone()),
            env: Some(env),
            // The key arrives on standard input (see `hand_over_key`).
            open_stdin: Some(true),
            stdin_once: Some(true),
            attach_stdin: Some(true),
            labels: Some(self.labels(&spec.sandbox_id, network)),
            host_config: Some(HostConfig {
                memory: Some(memory),
                memory_swap: Some(memory),
                nano_cpus: Some((limits.cpus * 1e9) as i64),
                pids_limit: Some(limits.pids),
                shm_size: Some((limits.shm_mib * 1024 * 1024) as i64),
                tmpfs: Some(writable_mounts(limits.disk_mib)),
                cap_drop: Some(vec!["ALL".to_string()]),
                security_opt: Some(vec!["no-new-privileges".to_string()]),
                network_mode: Some(network.to_string()),
                auto_remove: Some(true),
                init: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        };
        // No name: the orchestrator knows its containers by id and by label, and a name would
        // be one more record in Docker's resolver (which, on a network of one, only the
        // sandbox itself can ask).
        let created = self
            .docker
            .create_container(
                None::<bollard::query_parameters::CreateContainerOptions>,
                config,
            )
            .await
            .map_err(|error| match &error {
                e if is_not_found(e) => BackendError::ImageMissing(spec.image.clone()),
                _ => BackendError::Failed {
                    step: "creating the container",
                    message: error.to_string(),
                },
            })?;
        let id = created.id;
        let result = async {
            if let Some(archive) = &spec.home_archive {
                self.put_home_archive(&id, archive, HOME_ARCHIVE_NAME)
                    .await?;
            }
            if let Some(archive) = &spec.profile_archive {
                self.put_home_archive(&id, archive, PROFILE_ARCHIVE_NAME)
                    .await?;
            }
            self.hand_over_key(&id, &spec.api_key).await?;
            self.docker
                .start_container(&id, None)
                .await
                .map_err(failed("starting the container"))
        }
        .await;
        if let Err(error) = result {
            let _ = self.remove(&id).await;
            return Err(error);
        }
        Ok(id)
    }

    /// Writes the key as the first line of the created container's standard input, then
    /// closes it: the container was created with `OpenStdin` and `StdinOnce`, so the line
    /// waits in the attach stream until sandboxd reads it at start (`SANDBOX_API_KEY_FILE=-`),
    /// and the stream ends after it. The key never touches a file, the environment (which
    /// `docker inspect` and every process of the sandbox could read) or the container's layer.
    async fn hand_over_key(&self, id: &str, key: &str) -> Result<(), BackendError> {
        use tokio::io::AsyncWriteExt;
        let options = AttachContainerOptionsBuilder::default()
            .stdin(true)
            .stream(true)
            .build();
        let mut attached = self
            .docker
            .attach_container(id, Some(options))
            .await
            .map_err(failed("attaching to the container's input"))?;
        let write = async {
            attached
                .input
                .write_all(format!("{key}\n").as_bytes())
                .await?;
            attached.input.flush().await?;
            attached.input.shutdown().await
        };
        write.await.map_err(|e| BackendError::Failed {
            step: "handing the key to the container",
            message: e.to_string(),
        })
    }

    /// Puts a kept archive (a home's or a browser profile's) into the created container as
    /// `name`, where sandboxd finds it at start (`HOME_ARCHIVE_FOLDER`). It lands in the
    /// container's own layer, as one file, and goes with the container.
    async fn put_home_archive(
        &self,
        id: &str,
        archive: &std::path::Path,
        name: &str,
    ) -> Result<(), BackendError> {
        let stream = crate::homes::wrapped_in_tar(archive, name)
            .await
            .map_err(|e| BackendError::Failed {
                step: "reading the home archive",
                message: e.to_string(),
            })?;
        let options = bollard::query_parameters::UploadToContainerOptionsBuilder::default()
            .path(HOME_ARCHIVE_FOLDER)
            .build();
        self.docker
            .upload_to_container(id, Some(options), bollard::body_try_stream(stream))
            .await
            .map_err(failed("putting the home archive into the container"))
    }

    /// The address on a container's own sandbox network (named by its label).
    fn address_in(
        networks: Option<HashMap<String, bollard::models::EndpointSettings>>,
        network: Option<&String>,
    ) -> Option<String> {
        networks?
            .remove(network?)?
            .ip_address
            .filter(|ip| !ip.is_empty())
    }

    async fn address_of(&self, container_id: &str) -> Result<Option<String>, BackendError> {
        Ok(self.inspect(container_id).await?.and_then(|c| c.address))
    }
}

/// The places `agent` can write in the sandbox image, each a tmpfs of bounded size (MiB) and
/// inode count, owned by `agent` (uid 1000). The home directory starts empty: sandboxd puts the
/// shell's dotfiles and the workspace folder back (`sandboxd::home`).
pub(super) fn writable_mounts(disk_mib: u64) -> HashMap<String, String> {
    let tmpfs = |size_mib: u64, mode: &str| {
        // About one inode per 4 KiB: a tree of small files (node_modules, a Python package)
        // runs out of space before it runs out of inodes, and inodes are memory too.
        let inodes = (size_mib * 256).max(4096);
        format!("rw,nosuid,nodev,size={size_mib}m,nr_inodes={inodes},uid=1000,gid=1000,mode={mode}")
    };
    HashMap::from([
        ("/home/agent".to_string(), tmpfs(disk_mib, "0755")),
        ("/tmp".to_string(), tmpfs((disk_mib / 4).max(64), "1777")),
        ("/var/tmp".to_string(), tmpfs(64, "1777")),
        // sandboxd rotates each program's log at 5 MiB, keeping 3: about 20 MiB a program.
        ("/var/log/agentbox".to_string(), tmpfs(256, "0755")),
        ("/run/sandboxd".to_string(), tmpfs(4, "0700")),
        // Debian's lock folder (also /var/lock), writable to everyone.
        ("/run/lock".to_string(), tmpfs(1, "1777")),
    ])
}

#[async_trait::async_trait]
impl Backend for DockerBackend {
    fn busy(&self) {
        self.networks.lull().busy();
    }

    async fn prepare(&self) -> Result<(), BackendError> {
        // The rules first: a sandbox network made from here on is covered from its first packet.
        let rules = EgressRules::for_network(&self.network, self.egress, self.egress_allow.clone());
        super::egress::apply(&rules)
            .await
            .map_err(|e| BackendError::Failed {
                step: "enforcing the egress policy",
                message: e.to_string(),
            })?;
        self.networks.keep_stocked();
        Ok(())
    }

    async fn start(&self, spec: &ContainerSpec) -> Result<Started, BackendError> {
        let container_id = self.create_and_start(spec).await?;
        match self.address_of(&container_id).await {
            Ok(Some(address)) => Ok(Started {
                container_id,
                address,
            }),
            Ok(None) => {
                let logs = self.logs_tail(&container_id, 20).await.unwrap_or_default();
                let _ = self.remove(&container_id).await;
                Err(BackendError::Failed {
                    step: "finding the container's address",
                    message: format!(
                        "the container has no address on its network (it may have exited); \
                         output: {logs}"
                    ),
                })
            }
            Err(error) => {
                let _ = self.remove(&container_id).await;
                Err(error)
            }
        }
    }

    async fn remove(&self, container_id: &str) -> Result<(), BackendError> {
        // Only ever remove a container labelled as this instance's.
        let network = match self.docker.inspect_container(container_id, None).await {
            Ok(container) => {
                let labels = container.config.and_then(|c| c.labels).unwrap_or_default();
                if labels.get(LABEL_INSTANCE) != Some(&self.instance) {
                    return Err(BackendError::Failed {
                        step: "removing the container",
                        message: format!(
                            "container {container_id} is not this orchestrator's (instance {:?}, \
                             labelled {:?}); it is left alone",
                            self.instance,
                            labels.get(LABEL_INSTANCE)
                        ),
                    });
                }
                if container.state.and_then(|s| s.paused).unwrap_or(false) {
                    // Thawed first, so the removal's stop is not held up by frozen processes.
                    let _ = self.docker.unpause_container(container_id).await;
                }
                labels.get(LABEL_NETWORK).cloned()
            }
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(BackendError::Unavailable(e.to_string())),
        };
        let options = RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(true)
            .build();
        match self
            .docker
            .remove_container(container_id, Some(options))
            .await
        {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {}
            // Already being removed (auto_remove after exit).
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            }) => {}
            Err(e) => return Err(failed("removing the container")(e)),
        }
        if let Some(network) = network {
            // Off the delete's path, once claims pause (bounded): a network whose endpoint
            // lingers is tried again for a few seconds, and one left over is the sweep's.
            let networks = self.networks.clone();
            tokio::spawn(async move {
                networks.lull().wait(NETWORK_REMOVAL_MAX_WAIT).await;
                networks.remove(&network).await
            });
        }
        Ok(())
    }

    async fn pause(&self, container_id: &str) -> Result<(), BackendError> {
        match self.inspect(container_id).await? {
            None => Err(not_ours(container_id, "pausing the container")),
            Some(info) if info.paused => Ok(()),
            Some(info) if !info.running => Err(BackendError::Failed {
                step: "pausing the container",
                message: format!("container {container_id} is not running"),
            }),
            Some(_) => self
                .docker
                .pause_container(container_id)
                .await
                .map_err(failed("pausing the container")),
        }
    }

    async fn resume(&self, container_id: &str) -> Result<(), BackendError> {
        match self.inspect(container_id).await? {
            None => Err(not_ours(container_id, "resuming the container")),
            Some(info) if !info.paused => Ok(()),
            Some(_) => self
                .docker
                .unpause_container(container_id)
                .await
                .map_err(failed("resuming the container")),
        }
    }

    async fn collect_garbage(
        &self,
        busy: &std::collections::HashSet<String>,
    ) -> Result<(), BackendError> {
        self.networks.sweep(busy).await
    }

    async fn list(&self) -> Result<Vec<ContainerInfo>, BackendError> {
        let filters = HashMap::from([(
            "label".to_string(),
            vec![
                format!("{LABEL_MANAGED}=true"),
                format!("{LABEL_INSTANCE}={}", self.instance),
            ],
        )]);
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let containers = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|e| BackendError::Unavailable(e.to_string()))?;
        Ok(containers
            .into_iter()
            .filter_map(|c| {
                let container_id = c.id?;
                let labels = c.labels.unwrap_or_default();
                let state = c.state.map(|s| s.to_string()).unwrap_or_default();
                let paused = state == "paused";
                let running = state == "running" || paused;
                let address = Self::address_in(
                    c.network_settings.and_then(|n| n.networks),
                    labels.get(LABEL_NETWORK),
                );
                Some(ContainerInfo {
                    container_id,
                    sandbox_id: labels.get(LABEL_SANDBOX_ID).cloned(),
                    running,
                    paused,
                    address,
                })
            })
            .collect())
    }

    async fn inspect(&self, container_id: &str) -> Result<Option<ContainerInfo>, BackendError> {
        let c = match self.docker.inspect_container(container_id, None).await {
            Ok(c) => c,
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => return Err(BackendError::Unavailable(e.to_string())),
        };
        let labels = c.config.and_then(|c| c.labels).unwrap_or_default();
        if labels.get(LABEL_INSTANCE) != Some(&self.instance) {
            return Ok(None);
        }
        let running = c.state.as_ref().and_then(|s| s.running).unwrap_or(false);
        let paused = c.state.as_ref().and_then(|s| s.paused).unwrap_or(false);
        let address = Self::address_in(
            c.network_settings.and_then(|n| n.networks),
            labels.get(LABEL_NETWORK),
        );
        Ok(Some(ContainerInfo {
            container_id: c.id.unwrap_or_else(|| container_id.to_string()),
            sandbox_id: labels.get(LABEL_SANDBOX_ID).cloned(),
            running,
            paused,
            address,
        }))
    }

    async fn nodes(&self) -> Result<Vec<super::NodeInfo>, BackendError> {
        let info = self
            .docker
            .info()
            .await
            .map_err(|e| BackendError::Unavailable(e.to_string()))?;
        let containers = self
            .list()
            .await?
            .into_iter()
            .filter(|c| c.running)
            .map(|c| c.container_id)
            .collect();
        Ok(vec![super::NodeInfo {
            id: info.id.unwrap_or_default(),
            name: info.name.unwrap_or_default(),
            role: "engine".to_string(),
            state: "ready".to_string(),
            availability: "active".to_string(),
            labels: info
                .labels
                .unwrap_or_default()
                .into_iter()
                .filter_map(|l| {
                    l.split_once('=')
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                })
                .collect(),
            nano_cpus: info.ncpu.unwrap_or(0) * 1_000_000_000,
            memory_bytes: info.mem_total.unwrap_or(0),
            reserved_nano_cpus: None,
            reserved_memory_bytes: None,
            containers,
        }])
    }

    async fn logs_tail(&self, container_id: &str, lines: usize) -> Result<String, BackendError> {
        let options = LogsOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .tail(&lines.to_string())
            .build();
        super::read_log_tail(
            self.docker.logs(container_id, Some(options)),
            "reading the container's logs",
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_writable_place_is_a_bounded_tmpfs_owned_by_the_agent() {
        let mounts = writable_mounts(2048);
        for path in [
            "/home/agent",
            "/tmp",
            "/var/tmp",
            "/var/log/agentbox",
            "/run/sandboxd",
        ] {
            let options = mounts
                .get(path)
                .unwrap_or_else(|| panic!("{path} is not mounted"));
            for part in [
                "size=",
                "nr_inodes=",
                "uid=1000",
                "gid=1000",
                "nosuid",
                "nodev",
            ] {
                assert!(options.contains(part), "{path}: {options}");
            }
        }
        assert!(mounts["/home/agent"].contains("size=2048m"));
        assert!(mounts["/tmp"].contains("size=512m"));
        assert!(writable_mounts(64)["/tmp"].contains("size=64m"));
    }
}
