//! The Docker Swarm backend (`serve --backend swarm`): one Swarm service per sandbox, placed by
//! the Swarm scheduler on any node of the cluster that the orchestrator's engine manages.
//!
//! Every service: one replica of the sandbox image, **no restart** (a crashed sandbox or one on
//! a lost node is reported, never silently replaced under a running task), the labels of the
//! Docker backend on the service and its container, the same limits (memory, CPU, pids) and
//! **reservations** of the same size, so the scheduler spreads sandboxes by what they may use
//! and refuses a start when no node has room ([`BackendError::NoCapacity`]); the placement
//! constraints and preferences of the create request (`node.labels.*`); the sandbox overlay
//! network (`--swarm-network`), no published ports; a random name (Docker's), and `dnsrr`
//! endpoints (no virtual IP, no load balancer).
//!
//! **The key** travels as a Swarm secret made for that sandbox alone and removed with its
//! service. Swarm mounts it as a file that cannot be deleted, so the file is root's and
//! readable by root alone; sandboxd starts as root with no capability but `SETUID` and
//! `SETGID`, reads the key and becomes `agent` for good (`SANDBOXD_RUN_AS`, sandboxd's
//! `privileges`), with `no_new_privs` set for everything it starts. No process left in the
//! sandbox can read the key file.
//!
//! **The network** is an overlay made `internal` (no gateway: sandboxes reach neither the
//! nodes, the host, nor the internet) and `attachable` (the orchestrator's own container joins
//! it, which is how it reaches sandboxd), encrypted between nodes (`--swarm-encrypt`, IPsec,
//! which needs the kernel's ESP support on every node). Unlike the Docker backend's network per
//! sandbox, the sandboxes of one cluster share it: one sandbox can open a connection to
//! another's sandboxd, which answers nothing without that sandbox's key (SECURITY.md).
//!
//! **Disk:** the writable places are the Docker backend's size-limited tmpfs mounts, with the
//! same owners and inode bounds, each a task-scoped volume of the local driver ([`writable_mounts`]).
//!
//! **Addresses** come from the overlay's verbose inspection on the orchestrator's engine (the
//! cluster's endpoint table, one call for every sandbox); a task is `running` when Swarm says
//! so *and* its node is `ready`: a node lost takes its sandboxes with it.
//!
//! Not offered here (each refused with [`BackendError::Unsupported`] before anything is
//! changed): pause (a service cannot be frozen) and starting from a home archive (hibernated
//! sandboxes' wakes, snapshots' starts and forks, browser profiles: a service has no way to be
//! handed a file before its first process runs).

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::models::{
    EndpointSpec, EndpointSpecModeEnum, Limit, Mount, MountTmpfsOptions, MountType,
    MountVolumeOptions, MountVolumeOptionsDriverConfig, NetworkAttachmentConfig,
    NetworkCreateRequest, NodeState, ResourceObject, SecretSpec, ServiceSpec, ServiceSpecMode,
    ServiceSpecModeReplicated, TaskSpec, TaskSpecContainerSpec, TaskSpecContainerSpecFile,
    TaskSpecContainerSpecSecrets, TaskSpecPlacement, TaskSpecPlacementPreferences,
    TaskSpecPlacementSpread, TaskSpecResources, TaskSpecRestartPolicy,
    TaskSpecRestartPolicyConditionEnum, TaskState,
};
use bollard::query_parameters::{
    InspectNetworkOptionsBuilder, ListNodesOptions, ListSecretsOptionsBuilder,
    ListServicesOptionsBuilder, ListTasksOptionsBuilder, LogsOptionsBuilder,
};

use super::{
    Backend, BackendError, BackendFeatures, ContainerInfo, ContainerSpec, LABEL_INSTANCE,
    LABEL_MANAGED, LABEL_REPLICA, LABEL_SANDBOX_ID, Started, is_not_found,
};

/// Where the key file lands in the sandbox (`/run/secrets/<name>`).
const KEY_SECRET_FILE: &str = "sandbox-key";
/// How long a start waits for Swarm to run the sandbox's task (the image is on the node: no
/// pull; most of this is the scheduler and the node's container start).
const TASK_START_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a task may stay pending for want of room before the start gives up.
const PENDING_FOR_ROOM: Duration = Duration::from_secs(3);
/// How long a started task's address may take to reach the orchestrator's endpoint table.
const ADDRESS_TIMEOUT: Duration = Duration::from_secs(20);

/// The Swarm backend's settings.
#[derive(Debug, Clone)]
pub struct SwarmSettings {
    /// The overlay network sandboxes (and the orchestrator) are on.
    pub network: String,
    /// Whether that network, when this orchestrator makes it, is encrypted between nodes.
    pub encrypt: bool,
}

/// The Docker Swarm backend.
pub struct SwarmBackend {
    docker: Docker,
    settings: SwarmSettings,
    instance: String,
    /// This replica ([`LABEL_REPLICA`] on the services and key secrets it makes).
    replica: String,
}

fn failed(step: &'static str) -> impl FnOnce(bollard::errors::Error) -> BackendError {
    move |error| BackendError::Failed {
        step,
        message: error.to_string(),
    }
}

/// What Swarm knows of one service's current task.
#[derive(Debug, Clone)]
struct TaskView {
    id: String,
    node_id: Option<String>,
    state: Option<TaskState>,
    desired: Option<TaskState>,
    error: Option<String>,
    created: String,
}

impl TaskView {
    fn from_task(task: bollard::models::Task) -> Option<(String, Self)> {
        let service = task.service_id?;
        let status = task.status.unwrap_or_default();
        Some((
            service,
            Self {
                id: task.id?,
                node_id: task.node_id,
                state: status.state,
                desired: task.desired_state,
                error: status.err.filter(|e| !e.is_empty()),
                created: task.created_at.map(|d| d.to_string()).unwrap_or_default(),
            },
        ))
    }

    fn is_running(&self) -> bool {
        self.state == Some(TaskState::RUNNING) && self.desired == Some(TaskState::RUNNING)
    }
}

impl SwarmBackend {
    /// Connects to the engine named by `DOCKER_HOST` (the local socket when unset), which must
    /// be a manager of a Swarm.
    pub async fn connect(
        settings: SwarmSettings,
        instance: &str,
        replica: &str,
    ) -> Result<Self, BackendError> {
        Ok(Self {
            docker: super::connect_engine().await?,
            settings,
            instance: instance.to_string(),
            replica: replica.to_string(),
        })
    }

    fn labels(&self, sandbox_id: &str) -> HashMap<String, String> {
        HashMap::from([
            (LABEL_MANAGED.to_string(), "true".to_string()),
            (LABEL_SANDBOX_ID.to_string(), sandbox_id.to_string()),
            (LABEL_INSTANCE.to_string(), self.instance.clone()),
            (LABEL_REPLICA.to_string(), self.replica.clone()),
        ])
    }

    fn ours(&self, labels: Option<&HashMap<String, String>>) -> bool {
        labels.and_then(|l| l.get(LABEL_INSTANCE)) == Some(&self.instance)
    }

    fn label_filters(&self) -> HashMap<String, Vec<String>> {
        HashMap::from([(
            "label".to_string(),
            vec![
                format!("{LABEL_MANAGED}=true"),
                format!("{LABEL_INSTANCE}={}", self.instance),
            ],
        )])
    }

    /// One service, `None` when it does not exist (whoever's it is: callers check [`Self::ours`]).
    async fn service(
        &self,
        service_id: &str,
    ) -> Result<Option<bollard::models::Service>, BackendError> {
        match self
            .docker
            .inspect_service(
                service_id,
                None::<bollard::query_parameters::InspectServiceOptions>,
            )
            .await
        {
            Ok(service) => Ok(Some(service)),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(BackendError::Unavailable(e.to_string())),
        }
    }

    /// This instance's sandbox services.
    async fn our_services(&self) -> Result<Vec<bollard::models::Service>, BackendError> {
        let filters = self.label_filters();
        let options = ListServicesOptionsBuilder::default()
            .filters(&filters)
            .build();
        let services = self
            .docker
            .list_services(Some(options))
            .await
            .map_err(|e| BackendError::Unavailable(e.to_string()))?;
        Ok(services
            .into_iter()
            .filter(|s| self.ours(s.spec.as_ref().and_then(|s| s.labels.as_ref())))
            .collect())
    }

    /// The service's spec: see the module's documentation for each choice.
    fn service_spec(
        &self,
        spec: &ContainerSpec,
        secret_id: &str,
        secret_name: &str,
    ) -> ServiceSpec {
        let limits = &spec.limits;
        let memory = (limits.memory_mib * 1024 * 1024) as i64;
        let nano_cpus = (limits.cpus * 1e9) as i64;
        let mut env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        env.push(format!(
            "SANDBOX_API_KEY_FILE=/run/secrets/{KEY_SECRET_FILE}"
        ));
        env.push("SANDBOXD_RUN_AS=agent".to_string());
        let labels = self.labels(&spec.sandbox_id);
        let placement = &spec.placement;
        ServiceSpec {
            labels: Some(labels.clone()),
            task_template: Some(TaskSpec {
                container_spec: Some(TaskSpecContainerSpec {
                    image: Some(spec.image.clone()),
                    labels: Some(labels),
                    env: Some(env),
                    user: Some("0".to_string()),
                    capability_drop: Some(vec!["ALL".to_string()]),
                    capability_add: Some(["CAP_SETUID", "CAP_SETGID"].map(String::from).to_vec()),
                    init: Some(false),
                    mounts: Some(writable_mounts(limits.disk_mib, limits.shm_mib)),
                    secrets: Some(vec![TaskSpecContainerSpecSecrets {
                        file: Some(TaskSpecContainerSpecFile {
                            name: Some(KEY_SECRET_FILE.to_string()),
                            uid: Some("0".to_string()),
                            gid: Some("0".to_string()),
                            mode: Some(0o400),
                        }),
                        secret_id: Some(secret_id.to_string()),
                        secret_name: Some(secret_name.to_string()),
                    }]),
                    stop_grace_period: Some(10_000_000_000),
                    ..Default::default()
                }),
                resources: Some(TaskSpecResources {
                    limits: Some(Limit {
                        nano_cpus: Some(nano_cpus),
                        memory_bytes: Some(memory),
                        pids: Some(limits.pids),
                    }),
                    reservations: Some(ResourceObject {
                        nano_cpus: Some(nano_cpus),
                        memory_bytes: Some(memory),
                        generic_resources: None,
                    }),
                    ..Default::default()
                }),
                restart_policy: Some(TaskSpecRestartPolicy {
                    condition: Some(TaskSpecRestartPolicyConditionEnum::NONE),
                    max_attempts: Some(0),
                    ..Default::default()
                }),
                placement: Some(TaskSpecPlacement {
                    constraints: Some(placement.constraints.clone()),
                    preferences: Some(
                        placement
                            .preferences
                            .iter()
                            .map(|descriptor| TaskSpecPlacementPreferences {
                                spread: Some(TaskSpecPlacementSpread {
                                    spread_descriptor: Some(descriptor.clone()),
                                }),
                            })
                            .collect(),
                    ),
                    ..Default::default()
                }),
                networks: Some(vec![NetworkAttachmentConfig {
                    target: Some(self.settings.network.clone()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            mode: Some(ServiceSpecMode {
                replicated: Some(ServiceSpecModeReplicated { replicas: Some(1) }),
                ..Default::default()
            }),
            endpoint_spec: Some(EndpointSpec {
                mode: Some(EndpointSpecModeEnum::DNSRR),
                ports: None,
            }),
            ..Default::default()
        }
    }

    /// Makes the key's secret and the service; on failure neither is left.
    async fn create(&self, spec: &ContainerSpec) -> Result<String, BackendError> {
        use base64::Engine as _;
        let secret_name = format!(
            "agentbox-key-{}-{}",
            spec.sandbox_id,
            crate::secret::new_id("")
        );
        let secret = self
            .docker
            .create_secret(SecretSpec {
                name: Some(secret_name.clone()),
                labels: Some(self.labels(&spec.sandbox_id)),
                data: Some(
                    base64::engine::general_purpose::STANDARD.encode(format!("{}\n", spec.api_key)),
                ),
                ..Default::default()
            })
            .await
            .map_err(failed("creating the key's secret"))?;
        let created = self
            .docker
            .create_service(self.service_spec(spec, &secret.id, &secret_name), None)
            .await;
        match created {
            Ok(response) => match response.id {
                Some(id) => Ok(id),
                None => Err(BackendError::Failed {
                    step: "creating the service",
                    message: "Docker answered without the service's id".to_string(),
                }),
            },
            Err(error) => {
                let _ = self.docker.delete_secret(&secret.id).await;
                Err(failed("creating the service")(error))
            }
        }
    }

    /// The current (newest) task of each service, by service id.
    async fn tasks(&self, services: &[String]) -> Result<HashMap<String, TaskView>, BackendError> {
        if services.is_empty() {
            return Ok(HashMap::new());
        }
        let filters = HashMap::from([("service".to_string(), services.to_vec())]);
        let options = ListTasksOptionsBuilder::default().filters(&filters).build();
        let tasks = self
            .docker
            .list_tasks(Some(options))
            .await
            .map_err(|e| BackendError::Unavailable(e.to_string()))?;
        let mut newest: HashMap<String, TaskView> = HashMap::new();
        for (service, view) in tasks.into_iter().filter_map(TaskView::from_task) {
            match newest.get(&service) {
                Some(kept) if kept.created >= view.created => {}
                _ => {
                    newest.insert(service, view);
                }
            }
        }
        Ok(newest)
    }

    /// Nodes and whether each is `ready`.
    async fn ready_nodes(&self) -> Result<HashMap<String, bool>, BackendError> {
        let nodes = self
            .docker
            .list_nodes(None::<ListNodesOptions>)
            .await
            .map_err(|e| BackendError::Unavailable(e.to_string()))?;
        Ok(nodes
            .into_iter()
            .filter_map(|node| {
                let ready = node.status.and_then(|s| s.state) == Some(NodeState::READY);
                Some((node.id?, ready))
            })
            .collect())
    }

    /// Task id -> address on the sandbox network, from the overlay's endpoint table.
    async fn addresses(&self) -> Result<HashMap<String, String>, BackendError> {
        let options = InspectNetworkOptionsBuilder::default()
            .verbose(true)
            .scope("swarm")
            .build();
        let network = match self
            .docker
            .inspect_network(&self.settings.network, Some(options))
            .await
        {
            Ok(network) => network,
            Err(e) if is_not_found(&e) => return Ok(HashMap::new()),
            Err(e) => return Err(BackendError::Unavailable(e.to_string())),
        };
        Ok(endpoint_addresses(network.services.unwrap_or_default()))
    }

    fn info(
        service_id: String,
        sandbox_id: Option<String>,
        task: Option<&TaskView>,
        nodes: &HashMap<String, bool>,
        addresses: &HashMap<String, String>,
    ) -> ContainerInfo {
        let node_ready = task
            .and_then(|t| t.node_id.as_ref())
            .is_some_and(|node| nodes.get(node).copied().unwrap_or(false));
        let running = task.is_some_and(TaskView::is_running) && node_ready;
        ContainerInfo {
            container_id: service_id,
            sandbox_id,
            running,
            paused: false,
            address: task.and_then(|t| addresses.get(&t.id).cloned()),
        }
    }

    /// Waits until the service's task runs and its address is known; a task that fails, is
    /// rejected, or stays pending for want of room ends the wait with the reason.
    async fn wait_running(&self, service_id: &str) -> Result<String, BackendError> {
        let started = tokio::time::Instant::now();
        let mut pending_since: Option<tokio::time::Instant> = None;
        let mut running_since: Option<tokio::time::Instant> = None;
        loop {
            let task = self
                .tasks(&[service_id.to_string()])
                .await?
                .remove(service_id);
            if let Some(task) = &task {
                match task.state {
                    Some(TaskState::RUNNING) => {
                        let since = *running_since.get_or_insert_with(tokio::time::Instant::now);
                        if let Some(address) = self.addresses().await?.remove(&task.id) {
                            return Ok(address);
                        }
                        if since.elapsed() > ADDRESS_TIMEOUT {
                            return Err(BackendError::Failed {
                                step: "finding the sandbox's address",
                                message: format!(
                                    "task {} runs but has no address on {}: is this \
                                     orchestrator's container attached to that network?",
                                    task.id, self.settings.network
                                ),
                            });
                        }
                    }
                    Some(
                        TaskState::FAILED
                        | TaskState::REJECTED
                        | TaskState::COMPLETE
                        | TaskState::SHUTDOWN
                        | TaskState::ORPHANED
                        | TaskState::REMOVE,
                    ) => {
                        return Err(BackendError::Failed {
                            step: "starting the sandbox's task",
                            message: format!(
                                "task {} ended ({:?}): {}",
                                task.id,
                                task.state,
                                task.error.as_deref().unwrap_or("no reason given")
                            ),
                        });
                    }
                    Some(TaskState::PENDING) if task.error.is_some() => {
                        // "no suitable node (insufficient resources on 3 nodes)": wait a
                        // moment in case a removal frees room, then say so.
                        let since = *pending_since.get_or_insert_with(tokio::time::Instant::now);
                        if since.elapsed() > PENDING_FOR_ROOM {
                            return Err(BackendError::NoCapacity(
                                task.error.clone().unwrap_or_default(),
                            ));
                        }
                    }
                    _ => {}
                }
            }
            if started.elapsed() > TASK_START_TIMEOUT {
                return Err(BackendError::Failed {
                    step: "starting the sandbox's task",
                    message: format!(
                        "not running after {} s (task state {:?})",
                        TASK_START_TIMEOUT.as_secs(),
                        task.and_then(|t| t.state)
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The secrets a service uses (those this backend made for it).
    fn secrets_of(service: &bollard::models::Service) -> Vec<String> {
        service
            .spec
            .as_ref()
            .and_then(|s| s.task_template.as_ref())
            .and_then(|t| t.container_spec.as_ref())
            .and_then(|c| c.secrets.as_ref())
            .map(|secrets| secrets.iter().filter_map(|s| s.secret_id.clone()).collect())
            .unwrap_or_default()
    }

    async fn delete_secret(&self, secret_id: &str) {
        // Swarm refuses while the service that uses it is being removed: tried again for a
        // few seconds, and one left over is the garbage collector's.
        for _ in 0..20 {
            match self.docker.delete_secret(secret_id).await {
                Ok(()) => return,
                Err(e) if is_not_found(&e) => return,
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }
}

/// The writable places of the sandbox image, with the Docker backend's sizes, owners and inode
/// bounds ([`super::docker::writable_mounts`]), and the shared-memory mount. Each is a volume
/// of the local driver of type tmpfs, made for the task and removed with it: a Swarm mount of
/// type tmpfs takes no owner, no inode bound, and is always `noexec` on the engines this runs
/// on, and an agent runs scripts from its home.
fn writable_mounts(disk_mib: u64, shm_mib: u64) -> Vec<Mount> {
    let mut mounts: Vec<Mount> = super::docker::writable_mounts(disk_mib)
        .into_iter()
        .map(|(target, options)| Mount {
            target: Some(target),
            typ: Some(MountType::VOLUME),
            volume_options: Some(MountVolumeOptions {
                no_copy: Some(true),
                labels: Some(HashMap::from([(
                    LABEL_MANAGED.to_string(),
                    "true".to_string(),
                )])),
                driver_config: Some(MountVolumeOptionsDriverConfig {
                    name: Some("local".to_string()),
                    options: Some(HashMap::from([
                        ("type".to_string(), "tmpfs".to_string()),
                        ("device".to_string(), "tmpfs".to_string()),
                        (
                            "o".to_string(),
                            options.trim_start_matches("rw,").to_string(),
                        ),
                    ])),
                }),
                subpath: None,
            }),
            ..Default::default()
        })
        .collect();
    mounts.sort_by(|a, b| a.target.cmp(&b.target));
    mounts.push(Mount {
        target: Some("/dev/shm".to_string()),
        typ: Some(MountType::TMPFS),
        tmpfs_options: Some(MountTmpfsOptions {
            size_bytes: Some((shm_mib * 1024 * 1024) as i64),
            mode: Some(0o1777),
            options: None,
        }),
        ..Default::default()
    });
    mounts
}

/// Removes, now and every `interval` until `stop` resolves, the volumes the Swarm backend's
/// sandboxes left on this node (`orchestrator sweep-node`, run on every node as a global
/// service: `compose.swarm.yaml`). Swarm removes a finished task's container but keeps the
/// volumes its mounts made ([`writable_mounts`]); only unused volumes labelled
/// [`LABEL_MANAGED`] are removed, so a running sandbox's are never touched.
pub async fn sweep_node_forever(
    interval: Duration,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), BackendError> {
    let docker = super::connect_engine().await?;
    // Unused (`dangling`) volumes with the label, removed one by one: the engine's own prune
    // leaves volumes made with driver options (Docker 20.10), and a volume in use is refused.
    let filters = HashMap::from([
        ("label".to_string(), vec![format!("{LABEL_MANAGED}=true")]),
        ("dangling".to_string(), vec!["true".to_string()]),
    ]);
    tokio::pin!(stop);
    loop {
        let options = bollard::query_parameters::ListVolumesOptionsBuilder::default()
            .filters(&filters)
            .build();
        match docker.list_volumes(Some(options)).await {
            Ok(listed) => {
                let mut removed = 0;
                for volume in listed.volumes.unwrap_or_default() {
                    match docker
                        .remove_volume(
                            &volume.name,
                            None::<bollard::query_parameters::RemoveVolumeOptions>,
                        )
                        .await
                    {
                        Ok(()) => removed += 1,
                        Err(e) if is_not_found(&e) => {}
                        Err(error) => {
                            tracing::debug!(volume = %volume.name, %error, "volume kept")
                        }
                    }
                }
                if removed > 0 {
                    tracing::info!(removed, "removed the volumes of finished sandboxes");
                }
            }
            Err(error) => tracing::warn!(%error, "listing finished sandboxes' volumes failed"),
        }
        tokio::select! {
            () = &mut stop => return Ok(()),
            () = tokio::time::sleep(interval) => {}
        }
    }
}

/// Task id -> address, from a verbose network inspection's `Services` table:
/// `{service name: {"Tasks": [{"Name": "<service>.<slot>.<task id>", "EndpointIP": ip}]}}`.
fn endpoint_addresses(services: HashMap<String, serde_json::Value>) -> HashMap<String, String> {
    let mut addresses = HashMap::new();
    for service in services.values() {
        let Some(tasks) = service.get("Tasks").and_then(|t| t.as_array()) else {
            continue;
        };
        for task in tasks {
            let name = task.get("Name").and_then(|n| n.as_str());
            let ip = task.get("EndpointIP").and_then(|n| n.as_str());
            if let (Some(name), Some(ip)) = (name, ip)
                && let Some(task_id) = name.rsplit('.').next()
                && !ip.is_empty()
            {
                addresses.insert(task_id.to_string(), ip.to_string());
            }
        }
    }
    addresses
}

#[async_trait::async_trait]
impl Backend for SwarmBackend {
    fn features(&self) -> BackendFeatures {
        BackendFeatures {
            pause: false,
            home_archives: false,
            placement: true,
        }
    }

    async fn prepare(&self) -> Result<(), BackendError> {
        let info = self
            .docker
            .info()
            .await
            .map_err(|e| BackendError::Unavailable(e.to_string()))?;
        let manager = info
            .swarm
            .and_then(|s| s.control_available)
            .unwrap_or(false);
        if !manager {
            return Err(BackendError::Failed {
                step: "checking the Swarm",
                message: "--backend swarm needs the engine of a Swarm manager (this one is not \
                          part of a Swarm, or is a worker): `docker swarm init`, or point \
                          DOCKER_HOST at a manager"
                    .to_string(),
            });
        }
        match self
            .docker
            .inspect_network(
                &self.settings.network,
                None::<bollard::query_parameters::InspectNetworkOptions>,
            )
            .await
        {
            Ok(network) if network.driver.as_deref() == Some("overlay") => {}
            Ok(network) => {
                return Err(BackendError::Failed {
                    step: "checking the sandbox network",
                    message: format!(
                        "network {} is a {:?} network, not an overlay",
                        self.settings.network, network.driver
                    ),
                });
            }
            Err(e) if is_not_found(&e) => {
                let mut options = HashMap::new();
                if self.settings.encrypt {
                    options.insert("encrypted".to_string(), String::new());
                }
                self.docker
                    .create_network(NetworkCreateRequest {
                        name: self.settings.network.clone(),
                        driver: Some("overlay".to_string()),
                        internal: Some(true),
                        attachable: Some(true),
                        options: Some(options),
                        labels: Some(HashMap::from([(
                            LABEL_MANAGED.to_string(),
                            "true".to_string(),
                        )])),
                        ..Default::default()
                    })
                    .await
                    .map_err(failed("creating the sandbox overlay network"))?;
                tracing::info!(network = %self.settings.network, encrypted = self.settings.encrypt, "sandbox overlay network created");
            }
            Err(e) => return Err(BackendError::Unavailable(e.to_string())),
        }
        Ok(())
    }

    async fn start(&self, spec: &ContainerSpec) -> Result<Started, BackendError> {
        if spec.home_archive.is_some() || spec.profile_archive.is_some() {
            return Err(BackendError::Unsupported(
                "starting from a home archive or a browser profile",
            ));
        }
        let service_id = self.create(spec).await?;
        match self.wait_running(&service_id).await {
            Ok(address) => Ok(Started {
                container_id: service_id,
                address,
            }),
            Err(error) => {
                let logs = match &error {
                    BackendError::Failed { .. } => {
                        self.logs_tail(&service_id, 20).await.unwrap_or_default()
                    }
                    _ => String::new(),
                };
                let _ = self.remove(&service_id).await;
                Err(match error {
                    BackendError::Failed { step, message } if !logs.trim().is_empty() => {
                        BackendError::Failed {
                            step,
                            message: format!("{message}; output: {logs}"),
                        }
                    }
                    other => other,
                })
            }
        }
    }

    async fn remove(&self, service_id: &str) -> Result<(), BackendError> {
        let Some(service) = self.service(service_id).await? else {
            return Ok(());
        };
        let labels = service.spec.as_ref().and_then(|s| s.labels.as_ref());
        if !self.ours(labels) {
            return Err(BackendError::Failed {
                step: "removing the service",
                message: format!(
                    "service {service_id} is not this orchestrator's (instance {:?}); it is left \
                     alone",
                    self.instance
                ),
            });
        }
        match self.docker.delete_service(service_id).await {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(failed("removing the service")(e)),
        }
        for secret in Self::secrets_of(&service) {
            self.delete_secret(&secret).await;
        }
        Ok(())
    }

    async fn pause(&self, _service_id: &str) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("pausing a sandbox"))
    }

    async fn resume(&self, _service_id: &str) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("resuming a sandbox"))
    }

    async fn list(&self) -> Result<Vec<ContainerInfo>, BackendError> {
        let services = self.our_services().await?;
        let ids: Vec<String> = services.iter().filter_map(|s| s.id.clone()).collect();
        let tasks = self.tasks(&ids).await?;
        let nodes = self.ready_nodes().await?;
        let addresses = self.addresses().await?;
        Ok(services
            .into_iter()
            .filter_map(|service| {
                let id = service.id?;
                let sandbox_id = service
                    .spec
                    .and_then(|s| s.labels)
                    .and_then(|mut l| l.remove(LABEL_SANDBOX_ID));
                Some(Self::info(
                    id.clone(),
                    sandbox_id,
                    tasks.get(&id),
                    &nodes,
                    &addresses,
                ))
            })
            .collect())
    }

    async fn inspect(&self, service_id: &str) -> Result<Option<ContainerInfo>, BackendError> {
        let Some(service) = self.service(service_id).await? else {
            return Ok(None);
        };
        let labels = service.spec.and_then(|s| s.labels);
        if !self.ours(labels.as_ref()) {
            return Ok(None);
        }
        let id = service.id.unwrap_or_else(|| service_id.to_string());
        let task = self.tasks(std::slice::from_ref(&id)).await?.remove(&id);
        let nodes = self.ready_nodes().await?;
        let addresses = self.addresses().await?;
        Ok(Some(Self::info(
            id,
            labels.and_then(|mut l| l.remove(LABEL_SANDBOX_ID)),
            task.as_ref(),
            &nodes,
            &addresses,
        )))
    }

    async fn lost_reason(&self, service_id: &str) -> Option<String> {
        let task = self
            .tasks(&[service_id.to_string()])
            .await
            .ok()?
            .remove(service_id)?;
        let node_id = task.node_id.clone()?;
        let node = self.docker.inspect_node(&node_id).await.ok()?;
        let name = node.description.and_then(|d| d.hostname).unwrap_or(node_id);
        match node.status.and_then(|s| s.state) {
            Some(NodeState::READY) => task
                .error
                .map(|error| format!("its task on node {name} ended: {error}")),
            state => Some(format!(
                "its node {name} is {}",
                state.map_or("unknown".to_string(), |s| s.to_string())
            )),
        }
    }

    async fn nodes(&self) -> Result<Vec<super::NodeInfo>, BackendError> {
        let unavailable = |e: bollard::errors::Error| BackendError::Unavailable(e.to_string());
        let nodes = self
            .docker
            .list_nodes(None::<ListNodesOptions>)
            .await
            .map_err(unavailable)?;
        let services = self.our_services().await?;
        let ids: Vec<String> = services.iter().filter_map(|s| s.id.clone()).collect();
        // Reservations are what the scheduler counts: every service's current task that is
        // meant to run, on the node it was given.
        let filters = HashMap::from([
            ("service".to_string(), ids.clone()),
            ("desired-state".to_string(), vec!["running".to_string()]),
        ]);
        let tasks = if ids.is_empty() {
            Vec::new()
        } else {
            self.docker
                .list_tasks(Some(
                    ListTasksOptionsBuilder::default().filters(&filters).build(),
                ))
                .await
                .map_err(unavailable)?
        };
        Ok(nodes
            .into_iter()
            .filter_map(|node| {
                let id = node.id?;
                let spec = node.spec.unwrap_or_default();
                let description = node.description.unwrap_or_default();
                let resources = description.resources.unwrap_or_default();
                let mut info = super::NodeInfo {
                    name: description.hostname.unwrap_or_else(|| id.clone()),
                    role: spec.role.map_or("unknown".to_string(), |r| r.to_string()),
                    state: node
                        .status
                        .and_then(|s| s.state)
                        .map_or("unknown".to_string(), |s| s.to_string()),
                    availability: spec
                        .availability
                        .map_or("unknown".to_string(), |a| a.to_string()),
                    labels: spec.labels.unwrap_or_default().into_iter().collect(),
                    nano_cpus: resources.nano_cpus.unwrap_or(0),
                    memory_bytes: resources.memory_bytes.unwrap_or(0),
                    reserved_nano_cpus: Some(0),
                    reserved_memory_bytes: Some(0),
                    containers: Vec::new(),
                    id,
                };
                for task in tasks
                    .iter()
                    .filter(|t| t.node_id.as_ref() == Some(&info.id))
                {
                    let reserved = task
                        .spec
                        .as_ref()
                        .and_then(|s| s.resources.as_ref())
                        .and_then(|r| r.reservations.as_ref());
                    info.reserved_nano_cpus = Some(
                        info.reserved_nano_cpus.unwrap_or(0)
                            + reserved.and_then(|r| r.nano_cpus).unwrap_or(0),
                    );
                    info.reserved_memory_bytes = Some(
                        info.reserved_memory_bytes.unwrap_or(0)
                            + reserved.and_then(|r| r.memory_bytes).unwrap_or(0),
                    );
                    if let Some(service) = &task.service_id {
                        info.containers.push(service.clone());
                    }
                }
                Some(info)
            })
            .collect())
    }

    async fn logs_tail(&self, service_id: &str, lines: usize) -> Result<String, BackendError> {
        let options = LogsOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .tail(&lines.to_string())
            .build();
        super::read_log_tail(
            self.docker.service_logs(service_id, Some(options)),
            "reading the service's logs",
        )
        .await
    }

    /// Removes the services whose sandboxd ended by itself (its dead-man switch fired while
    /// the orchestrator was away: Swarm keeps a service whose one task completed) and the key
    /// secrets no service uses any more.
    async fn collect_garbage(
        &self,
        busy: &std::collections::HashSet<String>,
    ) -> Result<(), BackendError> {
        let services = self.our_services().await?;
        let ids: Vec<String> = services.iter().filter_map(|s| s.id.clone()).collect();
        let tasks = self.tasks(&ids).await?;
        let mut in_use = std::collections::HashSet::new();
        for service in &services {
            let Some(id) = &service.id else { continue };
            let finished = tasks.get(id).is_some_and(|t| {
                matches!(t.state, Some(TaskState::COMPLETE))
                    && matches!(t.desired, Some(TaskState::SHUTDOWN | TaskState::COMPLETE))
            });
            if finished {
                tracing::info!(service_id = %id, "removing a sandbox service whose sandboxd exited by itself");
                let _ = self.docker.delete_service(id).await;
            } else {
                in_use.extend(Self::secrets_of(service));
            }
        }
        let filters = self.label_filters();
        let secrets = self
            .docker
            .list_secrets(Some(
                ListSecretsOptionsBuilder::default()
                    .filters(&filters)
                    .build(),
            ))
            .await
            .map_err(|e| BackendError::Unavailable(e.to_string()))?;
        for secret in secrets {
            let made_by = secret
                .spec
                .as_ref()
                .and_then(|s| s.labels.as_ref())
                .and_then(|l| l.get(LABEL_REPLICA));
            if made_by.is_some_and(|r| busy.contains(r)) {
                continue;
            }
            if let Some(id) = secret.id
                && !in_use.contains(&id)
            {
                let _ = self.docker.delete_secret(&id).await;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_read_per_task_from_the_endpoint_table() {
        let table: HashMap<String, serde_json::Value> = serde_json::from_str(
            r#"{"quirky_noether":{"VIP":"<nil>","Ports":[],"LocalLBIndex":260,"Tasks":[
                {"Name":"quirky_noether.1.w2tq6mzd82asv8aevwvgzj0wj","EndpointID":"11",
                 "EndpointIP":"10.0.1.13","Info":{"Host IP":"10.213.0.2"}}]},
               "other":{"Tasks":[{"Name":"other.1.abc","EndpointIP":""}]},
               "broken":{"VIP":"10.0.1.8"}}"#,
        )
        .unwrap();
        let addresses = endpoint_addresses(table);
        assert_eq!(
            addresses
                .get("w2tq6mzd82asv8aevwvgzj0wj")
                .map(String::as_str),
            Some("10.0.1.13")
        );
        assert_eq!(addresses.len(), 1, "{addresses:?}");
    }

    #[test]
    fn every_writable_place_is_a_bounded_tmpfs() {
        let mounts = writable_mounts(2048, 256);
        for mount in &mounts {
            match mount.typ {
                Some(MountType::VOLUME) => {
                    let options = mount
                        .volume_options
                        .as_ref()
                        .and_then(|v| v.driver_config.as_ref())
                        .and_then(|d| d.options.as_ref())
                        .unwrap();
                    assert_eq!(options["type"], "tmpfs", "{mount:?}");
                    for part in ["size=", "nr_inodes=", "uid=1000", "nosuid", "nodev"] {
                        assert!(options["o"].contains(part), "{mount:?}");
                    }
                    assert!(!options["o"].contains("noexec"), "{mount:?}");
                }
                Some(MountType::TMPFS) => {
                    assert_eq!(mount.target.as_deref(), Some("/dev/shm"));
                }
                _ => panic!("{mount:?}"),
            }
        }
        let home = mounts
            .iter()
            .find(|m| m.target.as_deref() == Some("/home/agent"))
            .unwrap();
        let o = &home
            .volume_options
            .as_ref()
            .unwrap()
            .driver_config
            .as_ref()
            .unwrap()
            .options
            .as_ref()
            .unwrap()["o"];
        assert!(o.contains("size=2048m"), "{o}");
    }
}
