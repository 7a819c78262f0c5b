//! The Docker backend (bollard): one container per sandbox on a dedicated bridge network.
//!
//! Every container: the sandbox image; labels marking it ours (managed, sandbox id, instance);
//! memory, CPU, pids and shm limits; all capabilities dropped (sandboxd and everything it starts
//! run as the unprivileged `agent` and need none); `no-new-privileges`; no published ports (the
//! orchestrator reaches sandboxd at the container's address); no Docker socket; `auto_remove`,
//! so a sandbox whose dead-man switch fired disappears by itself. The per-sandbox key is copied
//! in as a file (uid 1000, mode 0400) before start, never put in the environment, where
//! `docker inspect` would show it.
//!
//! The network is a bridge with inter-container traffic disabled
//! (`com.docker.network.bridge.enable_icc=false`): sandboxes cannot reach each other. Its bridge
//! interface gets a known name, on which [`super::egress`] hangs the rules that keep sandboxes
//! off this host, private ranges and cloud metadata.
//!
//! Removal checks the container's instance label first: this backend never removes a container
//! another orchestrator instance (or anyone else) made, whatever id it is handed.

use std::collections::HashMap;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig, NetworkCreateRequest};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptionsBuilder, LogsOptionsBuilder,
    RemoveContainerOptionsBuilder, UploadToContainerOptionsBuilder,
};
use futures_util::StreamExt;

use super::egress::{EgressPolicy, EgressRules};
use super::{
    Backend, BackendError, ContainerInfo, ContainerSpec, KEY_FILE, KEY_FILE_DIR, LABEL_INSTANCE,
    LABEL_MANAGED, LABEL_SANDBOX_ID, Started,
};

/// The bridge option naming the network's interface on the host.
const BRIDGE_NAME_OPTION: &str = "com.docker.network.bridge.name";

/// The Docker Engine backend.
pub struct DockerBackend {
    docker: Docker,
    network: String,
    instance: String,
    egress: EgressPolicy,
    egress_allow: Vec<ipnet::Ipv4Net>,
}

fn failed(step: &'static str) -> impl FnOnce(bollard::errors::Error) -> BackendError {
    move |error| BackendError::Failed {
        step,
        message: error.to_string(),
    }
}

fn is_not_found(error: &bollard::errors::Error) -> bool {
    matches!(
        error,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

impl DockerBackend {
    /// Connects to the engine named by `DOCKER_HOST` (`unix://` or `tcp://`; the local socket
    /// when unset) and negotiates the API version, so older engines (20.10 speaks 1.41) work.
    /// An unsupported `DOCKER_HOST` is an error, not silently replaced by the local socket.
    pub async fn connect(
        network: &str,
        instance: &str,
        egress: EgressPolicy,
        egress_allow: Vec<ipnet::Ipv4Net>,
    ) -> Result<Self, BackendError> {
        let docker = Docker::connect_with_defaults()
            .map_err(|e| {
                BackendError::Unavailable(format!(
                    "{e} (DOCKER_HOST={})",
                    std::env::var("DOCKER_HOST").unwrap_or_default()
                ))
            })?
            .negotiate_version()
            .await
            .map_err(|e| BackendError::Unavailable(e.to_string()))?;
        Ok(Self {
            docker,
            network: network.to_string(),
            instance: instance.to_string(),
            egress,
            egress_allow,
        })
    }

    /// The bridge name a new network gets: `abx-` and a hash of the network's name (interface
    /// names are at most 15 bytes).
    fn bridge_name(&self) -> String {
        use sha2::Digest;
        let hash = sha2::Sha256::digest(self.network.as_bytes());
        format!("abx-{}", hex::encode(&hash[..5]))
    }

    /// The network's bridge interface: the name it was given, or Docker's default `br-<id>`.
    async fn network_bridge(&self) -> Result<String, BackendError> {
        let network = self
            .docker
            .inspect_network(&self.network, None)
            .await
            .map_err(|e| BackendError::Unavailable(e.to_string()))?;
        if let Some(name) = network
            .options
            .as_ref()
            .and_then(|o| o.get(BRIDGE_NAME_OPTION))
        {
            return Ok(name.clone());
        }
        let id = network.id.unwrap_or_default();
        Ok(format!("br-{}", id.chars().take(12).collect::<String>()))
    }

    fn name(&self, sandbox_id: &str) -> String {
        format!("agentbox-{sandbox_id}")
    }

    fn labels(&self, sandbox_id: &str) -> HashMap<String, String> {
        HashMap::from([
            (LABEL_MANAGED.to_string(), "true".to_string()),
            (LABEL_SANDBOX_ID.to_string(), sandbox_id.to_string()),
            (LABEL_INSTANCE.to_string(), self.instance.clone()),
        ])
    }

    async fn create_and_start(&self, spec: &ContainerSpec) -> Result<String, BackendError> {
        let mut env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        env.push(format!("SANDBOX_API_KEY_FILE={KEY_FILE}"));
        let limits = &spec.limits;
        let memory = (limits.memory_mib * 1024 * 1024) as i64;
        let config = ContainerCreateBody {
            image: Some(spec.image.clone()),
            env: Some(env),
            labels: Some(self.labels(&spec.sandbox_id)),
            host_config: Some(HostConfig {
                memory: Some(memory),
                memory_swap: Some(memory),
                nano_cpus: Some((limits.cpus * 1e9) as i64),
                pids_limit: Some(limits.pids),
                shm_size: Some((limits.shm_mib * 1024 * 1024) as i64),
                cap_drop: Some(vec!["ALL".to_string()]),
                security_opt: Some(vec!["no-new-privileges".to_string()]),
                network_mode: Some(self.network.clone()),
                auto_remove: Some(true),
                init: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        };
        let options = CreateContainerOptionsBuilder::default()
            .name(&self.name(&spec.sandbox_id))
            .build();
        let created = self
            .docker
            .create_container(Some(options), config)
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
            let archive = key_archive(&spec.api_key).map_err(|e| BackendError::Failed {
                step: "packing the key file",
                message: e.to_string(),
            })?;
            let options = UploadToContainerOptionsBuilder::default()
                .path(KEY_FILE_DIR)
                .build();
            self.docker
                .upload_to_container(&id, Some(options), bollard::body_full(archive.into()))
                .await
                .map_err(failed("copying the key file into the container"))?;
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

    /// Creates the sandbox network unless it exists (idempotent; tolerant of a concurrent
    /// creation by another instance).
    async fn create_network(&self) -> Result<(), BackendError> {
        match self.docker.inspect_network(&self.network, None).await {
            Ok(_) => return Ok(()),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(BackendError::Unavailable(e.to_string())),
        }
        let request = NetworkCreateRequest {
            name: self.network.clone(),
            driver: Some("bridge".into()),
            options: Some(HashMap::from([
                (
                    "com.docker.network.bridge.enable_icc".to_string(),
                    "false".to_string(),
                ),
                (BRIDGE_NAME_OPTION.to_string(), self.bridge_name()),
            ])),
            labels: Some(HashMap::from([(
                LABEL_MANAGED.to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        };
        match self.docker.create_network(request).await {
            Ok(_) => Ok(()),
            // Another instance created it at the same moment.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            }) => Ok(()),
            Err(e) => Err(failed("creating the sandbox network")(e)),
        }
    }

    async fn address_of(&self, container_id: &str) -> Result<Option<String>, BackendError> {
        Ok(self.inspect(container_id).await?.and_then(|c| c.address))
    }
}

/// A tar archive holding `api-key` (uid/gid 1000, mode 0400).
fn key_archive(key: &str) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(key.len() as u64 + 1);
    header.set_mode(0o400);
    header.set_uid(1000);
    header.set_gid(1000);
    header.set_mtime(0);
    header.set_entry_type(tar::EntryType::Regular);
    let content = format!("{key}\n");
    builder.append_data(&mut header, "api-key", content.as_bytes())?;
    builder.into_inner()
}

#[async_trait::async_trait]
impl Backend for DockerBackend {
    async fn prepare(&self) -> Result<(), BackendError> {
        self.create_network().await?;
        let rules = EgressRules {
            bridge: self.network_bridge().await?,
            policy: self.egress,
            allow: self.egress_allow.clone(),
        };
        super::egress::apply(&rules)
            .await
            .map_err(|e| BackendError::Failed {
                step: "enforcing the egress policy",
                message: e.to_string(),
            })
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
                        "the container has no address on {} (it may have exited); output: {logs}",
                        self.network
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
        match self.docker.inspect_container(container_id, None).await {
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
            }
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(BackendError::Unavailable(e.to_string())),
        }
        let options = RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(true)
            .build();
        match self
            .docker
            .remove_container(container_id, Some(options))
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            // Already being removed (auto_remove after exit).
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            }) => Ok(()),
            Err(e) => Err(failed("removing the container")(e)),
        }
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
                let running = c.state.map(|s| s.to_string() == "running").unwrap_or(false);
                let address = c
                    .network_settings
                    .and_then(|n| n.networks)
                    .and_then(|mut n| n.remove(&self.network))
                    .and_then(|n| n.ip_address)
                    .filter(|ip| !ip.is_empty());
                Some(ContainerInfo {
                    container_id,
                    sandbox_id: labels.get(LABEL_SANDBOX_ID).cloned(),
                    running,
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
        let running = c.state.and_then(|s| s.running).unwrap_or(false);
        let address = c
            .network_settings
            .and_then(|n| n.networks)
            .and_then(|mut n| n.remove(&self.network))
            .and_then(|n| n.ip_address)
            .filter(|ip| !ip.is_empty());
        Ok(Some(ContainerInfo {
            container_id: c.id.unwrap_or_else(|| container_id.to_string()),
            sandbox_id: labels.get(LABEL_SANDBOX_ID).cloned(),
            running,
            address,
        }))
    }

    async fn logs_tail(&self, container_id: &str, lines: usize) -> Result<String, BackendError> {
        let options = LogsOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .tail(&lines.to_string())
            .build();
        let mut stream = self.docker.logs(container_id, Some(options));
        let mut out = String::new();
        while let Some(item) = stream.next().await {
            match item {
                Ok(output) => out.push_str(&String::from_utf8_lossy(&output.into_bytes())),
                Err(e) if is_not_found(&e) => break,
                Err(e) => return Err(failed("reading the container's logs")(e)),
            }
            if out.len() > 64 * 1024 {
                break;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_archive_holds_one_private_file_for_the_agent() {
        let archive = key_archive("secret").unwrap();
        let mut reader = tar::Archive::new(archive.as_slice());
        let entries: Vec<_> = reader.entries().unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(entries.len(), 1);
        let header = entries[0].header();
        assert_eq!(header.path().unwrap().to_str(), Some("api-key"));
        assert_eq!(header.mode().unwrap(), 0o400);
        assert_eq!(header.uid().unwrap(), 1000);
        assert_eq!(header.gid().unwrap(), 1000);
        assert_eq!(header.size().unwrap(), 7);
    }
}
