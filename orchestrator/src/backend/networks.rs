//! Sandbox networks: every sandbox gets a bridge network of its own, so no two sandboxes share
//! a link or a resolver (Docker's DNS answers a container with the members of its own
//! networks, here the sandbox alone; attack review, issue 28: on one shared network a reverse
//! lookup named other sandboxes).
//!
//! - **Addresses:** each network is a /28 ([`SANDBOX_SUBNET_PREFIX`]) cut from
//!   `--sandbox-subnets` by [`SubnetPlan`]: the first one no Docker network on the engine
//!   overlaps. Creations in this process take turns; a subnet another process took meanwhile
//!   is refused by Docker, and the next one is tried.
//! - **Names:** `<network>-<random>`, bridge interface [`egress::bridge_name`] (one prefix per
//!   `--network`, on which the egress rules hang, so they hold from the bridge's first packet).
//!   A container records its network's name in the label [`LABEL_NETWORK`].
//! - **A stock:** creating a network costs Docker 0.3-1 s of iptables work, so a few empty ones
//!   ([`SandboxNetworks::new`]'s `spare`) are kept made in the background, and a start takes
//!   one at once; an empty stock means a start makes its own. The top-up, like the removal of
//!   a deleted sandbox's network, waits for a pause in warm-pool claims ([`crate::lull`]).
//! - **Egress:** Docker puts each new network's own `ACCEPT` rules on top of `FORWARD`, above
//!   the egress hook; the hook is put back on top ([`egress::rehook_forward`]) as soon as a
//!   network is made, before any container is on it.
//! - **Removal:** a network goes with its container ([`SandboxNetworks::remove`]); one left
//!   behind (a container that removed itself while the orchestrator was away) is removed by
//!   [`SandboxNetworks::sweep`], which leaves the stock and networks in use alone.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bollard::Docker;
use bollard::models::{Ipam, IpamConfig, NetworkCreateRequest};
use bollard::query_parameters::ListNetworksOptionsBuilder;
use ipnet::Ipv4Net;

use super::egress;
use super::{BackendError, LABEL_INSTANCE, LABEL_MANAGED, LABEL_REPLICA, is_not_found};
use crate::lull::Lull;

/// The prefix length of one sandbox's network: the network's own address, the gateway (this
/// host), the sandbox, the broadcast address, and room to spare.
pub const SANDBOX_SUBNET_PREFIX: u8 = 28;

/// The label on a sandbox container naming its network.
pub const LABEL_NETWORK: &str = "agentbox.network";

/// The label on a sandbox network naming the `--network` it belongs to.
const LABEL_NETWORK_FAMILY: &str = "agentbox.network_family";

/// The bridge option naming the network's interface on the host.
const BRIDGE_NAME_OPTION: &str = "com.docker.network.bridge.name";

/// How sandbox networks are cut from `--sandbox-subnets`: /28s in order, skipping every one
/// that overlaps a network in use.
#[derive(Debug, Clone, Copy)]
pub struct SubnetPlan {
    range: Ipv4Net,
}

impl SubnetPlan {
    pub fn new(range: Ipv4Net) -> Self {
        Self {
            range: range.trunc(),
        }
    }

    /// The free /28s in order, skipping every one that overlaps `taken`.
    pub fn free<'a>(&self, taken: &'a [Ipv4Net]) -> impl Iterator<Item = Ipv4Net> + 'a {
        // A range narrower than one sandbox network holds none.
        let subnets = self
            .range
            .subnets(SANDBOX_SUBNET_PREFIX)
            .into_iter()
            .flatten();
        subnets.filter(move |candidate| {
            !taken
                .iter()
                .any(|t| t.contains(&candidate.network()) || candidate.contains(&t.network()))
        })
    }

    /// The gateway (this host's address on the bridge): the subnet's first host address.
    pub fn gateway(subnet: &Ipv4Net) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(subnet.network()) + 1)
    }
}

/// Which of this process's networks are spoken for.
#[derive(Default)]
struct Held {
    /// Made and empty, ready for a start.
    spare: Vec<String>,
    /// Taken by a start still under way: no container on them yet.
    starting: HashSet<String>,
}

struct Inner {
    docker: Docker,
    /// The `--network` the names start with.
    family: String,
    instance: String,
    /// This replica ([`super::LABEL_REPLICA`] on the networks it makes).
    replica: String,
    plan: SubnetPlan,
    /// How many spare networks to keep.
    spare: usize,
    /// The egress rules, put back on top of `FORWARD` after each network is made.
    egress: egress::EgressRules,
    held: Mutex<Held>,
    /// One creation at a time in this process, so two never pick one subnet.
    creating: tokio::sync::Mutex<()>,
    /// Wakes the stocking task.
    restock: tokio::sync::Notify,
    /// When claims came: making and removing networks waits for a quiet moment after them.
    lull: Lull,
}

/// The stock's top-up waits at most this long for a quiet moment before each network.
const RESTOCK_MAX_WAIT: Duration = Duration::from_secs(1);

/// This orchestrator's sandbox networks.
#[derive(Clone)]
pub struct SandboxNetworks {
    inner: Arc<Inner>,
}

impl SandboxNetworks {
    /// Networks named `<family>-...`, cut from `plan`, labelled with `instance`, `spare` of them
    /// kept ready once [`Self::keep_stocked`] runs.
    pub fn new(
        docker: Docker,
        family: &str,
        instance: &str,
        replica: &str,
        plan: SubnetPlan,
        spare: usize,
        egress: egress::EgressRules,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                docker,
                family: family.to_string(),
                instance: instance.to_string(),
                replica: replica.to_string(),
                plan,
                spare,
                egress,
                held: Mutex::new(Held::default()),
                creating: tokio::sync::Mutex::new(()),
                restock: tokio::sync::Notify::new(),
                lull: Lull::new(),
            }),
        }
    }

    fn held(&self) -> MutexGuard<'_, Held> {
        // Every change under the lock is a single insert, push or removal: a panic elsewhere
        // cannot leave it half-done.
        self.inner
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// When latency-sensitive requests came (see [`crate::lull`]).
    pub fn lull(&self) -> &Lull {
        &self.inner.lull
    }

    /// Starts the task that keeps the stock full (once, from `prepare`).
    pub fn keep_stocked(&self) {
        if self.inner.spare == 0 {
            return;
        }
        let networks = self.clone();
        tokio::spawn(async move {
            loop {
                while networks.held().spare.len() < networks.inner.spare {
                    // iptables and a bridge: kernel work on every core, after claims pause.
                    networks.inner.lull.wait(RESTOCK_MAX_WAIT).await;
                    match networks.create().await {
                        Ok(name) => {
                            let mut held = networks.held();
                            held.starting.remove(&name);
                            held.spare.push(name);
                        }
                        Err(error) => {
                            tracing::warn!(%error, "could not make a spare sandbox network; trying again in 5 s");
                            tokio::time::sleep(Duration::from_secs(5)).await;
                        }
                    }
                }
                networks.inner.restock.notified().await;
            }
        });
    }

    /// A network for a start: a spare one, or one made now. It stays held (the sweep leaves
    /// it alone) until [`Self::started`].
    pub async fn take(&self) -> Result<String, BackendError> {
        let spare = {
            let mut held = self.held();
            let spare = held.spare.pop();
            if let Some(name) = &spare {
                held.starting.insert(name.clone());
            }
            spare
        };
        self.inner.restock.notify_one();
        if let Some(name) = spare {
            return Ok(name);
        }
        self.create().await
    }

    /// The start that took `name` is over (its container is on it, or it failed and the
    /// network was removed).
    pub fn started(&self, name: &str) {
        self.held().starting.remove(name);
    }

    /// Makes a network on the first free /28 of the plan. Its name is held (as starting)
    /// from before Docker makes it, so the sweep never sees it unclaimed; on failure it is let
    /// go.
    async fn create(&self) -> Result<String, BackendError> {
        let name = format!(
            "{}-{}",
            self.inner.family,
            hex::encode(crate::secret::random_bytes::<6>())
        );
        self.held().starting.insert(name.clone());
        let created = self.create_named(&name).await;
        if created.is_err() {
            self.held().starting.remove(&name);
        }
        created.map(|()| name)
    }

    async fn create_named(&self, name: &str) -> Result<(), BackendError> {
        let inner = &self.inner;
        let _one_at_a_time = inner.creating.lock().await;
        let mut taken = self.subnets_in_use().await?;
        for _ in 0..16 {
            let Some(subnet) = inner.plan.free(&taken).next() else {
                return Err(BackendError::Failed {
                    step: "creating a sandbox network",
                    message: format!(
                        "every /{SANDBOX_SUBNET_PREFIX} of --sandbox-subnets {} is in use",
                        inner.plan.range
                    ),
                });
            };
            let request = NetworkCreateRequest {
                name: name.to_string(),
                driver: Some("bridge".into()),
                ipam: Some(Ipam {
                    driver: Some("default".into()),
                    config: Some(vec![IpamConfig {
                        subnet: Some(subnet.to_string()),
                        gateway: Some(SubnetPlan::gateway(&subnet).to_string()),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                options: Some(HashMap::from([
                    (
                        "com.docker.network.bridge.enable_icc".to_string(),
                        "false".to_string(),
                    ),
                    (
                        BRIDGE_NAME_OPTION.to_string(),
                        egress::bridge_name(&inner.family, name),
                    ),
                ])),
                labels: Some(HashMap::from([
                    (LABEL_MANAGED.to_string(), "true".to_string()),
                    (LABEL_INSTANCE.to_string(), inner.instance.clone()),
                    (LABEL_REPLICA.to_string(), inner.replica.clone()),
                    (LABEL_NETWORK_FAMILY.to_string(), inner.family.clone()),
                ])),
                ..Default::default()
            };
            match inner.docker.create_network(request).await {
                Ok(_) => {
                    // Docker put the new bridge's ACCEPT rules on top of FORWARD: the egress
                    // hook goes back above them before any container is on the network.
                    if let Err(error) = egress::rehook_forward(&inner.egress).await {
                        let _ = inner.docker.remove_network(name).await;
                        return Err(BackendError::Failed {
                            step: "keeping the egress rules first in FORWARD",
                            message: error.to_string(),
                        });
                    }
                    return Ok(());
                }
                Err(bollard::errors::Error::DockerResponseServerError { message, .. })
                    if message.contains("overlap") =>
                {
                    tracing::debug!(%subnet, %message, "subnet taken meanwhile; trying the next");
                    taken.push(subnet);
                }
                Err(error) => {
                    return Err(BackendError::Failed {
                        step: "creating a sandbox network",
                        message: error.to_string(),
                    });
                }
            }
        }
        Err(BackendError::Failed {
            step: "creating a sandbox network",
            message: "every subnet tried was taken meanwhile".to_string(),
        })
    }

    /// The subnets of every Docker network on the engine (ours and anyone's).
    async fn subnets_in_use(&self) -> Result<Vec<Ipv4Net>, BackendError> {
        let networks = self
            .inner
            .docker
            .list_networks(None::<bollard::query_parameters::ListNetworksOptions>)
            .await
            .map_err(|e| BackendError::Unavailable(e.to_string()))?;
        Ok(networks
            .into_iter()
            .filter_map(|n| n.ipam?.config)
            .flatten()
            .filter_map(|c| c.subnet?.parse::<Ipv4Net>().ok())
            .collect())
    }

    /// Removes a sandbox's network once its container has let go of it (a container being
    /// removed holds its endpoint a moment longer); one still in use after that, or held by
    /// a start, is left to the sweep.
    pub async fn remove(&self, name: &str) {
        if !self.is_ours(name) || self.held().starting.contains(name) {
            return;
        }
        for attempt in 0..20u64 {
            match self.inner.docker.remove_network(name).await {
                Ok(()) => return,
                Err(e) if is_not_found(&e) => return,
                Err(e) if attempt == 19 => {
                    tracing::warn!(network = %name, error = %e, "could not remove a sandbox network; the sweep will");
                }
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50 * (attempt + 1).min(5))).await;
                }
            }
        }
    }

    /// Whether `name` is one of this family's network names (a label read back from a
    /// container is not trusted to name anything else).
    fn is_ours(&self, name: &str) -> bool {
        name.strip_prefix(&self.inner.family)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|id| id.len() == 12 && id.bytes().all(|b| b.is_ascii_hexdigit()))
    }

    /// Removes this instance's networks that no container is on, except the stock and those
    /// held by a start, here or in a `busy` replica (Docker refuses to remove a network a
    /// container is on).
    pub async fn sweep(&self, busy: &HashSet<String>) -> Result<(), BackendError> {
        let inner = &self.inner;
        let filters = HashMap::from([(
            "label".to_string(),
            vec![
                format!("{LABEL_MANAGED}=true"),
                format!("{LABEL_INSTANCE}={}", inner.instance),
                format!("{LABEL_NETWORK_FAMILY}={}", inner.family),
            ],
        )]);
        let options = ListNetworksOptionsBuilder::default()
            .filters(&filters)
            .build();
        let networks = inner
            .docker
            .list_networks(Some(options))
            .await
            .map_err(|e| BackendError::Unavailable(e.to_string()))?;
        let mut swept = 0;
        for network in networks {
            let made_by = network.labels.as_ref().and_then(|l| l.get(LABEL_REPLICA));
            if made_by.is_some_and(|r| busy.contains(r)) {
                continue;
            }
            let Some(name) = network.name else { continue };
            let held = {
                let held = self.held();
                held.starting.contains(&name) || held.spare.contains(&name)
            };
            if !held && inner.docker.remove_network(&name).await.is_ok() {
                swept += 1;
            }
        }
        if swept > 0 {
            tracing::info!(swept, "removed sandbox networks no container was on");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_subnets_are_cut_around_every_network_in_use() {
        let plan = SubnetPlan::new("10.222.0.0/16".parse().unwrap());
        let first: Vec<Ipv4Net> = plan.free(&[]).take(2).collect();
        assert_eq!(first[0].to_string(), "10.222.0.0/28");
        assert_eq!(first[1].to_string(), "10.222.0.16/28");
        assert_eq!(SubnetPlan::gateway(&first[0]).to_string(), "10.222.0.1");
        // Taken: one of ours, and someone's /24 that covers sixteen of them.
        let taken: Vec<Ipv4Net> = vec![
            "10.222.0.0/28".parse().unwrap(),
            "10.222.0.32/24".parse::<Ipv4Net>().unwrap().trunc(),
        ];
        let next: Vec<String> = plan.free(&taken).take(2).map(|s| s.to_string()).collect();
        assert_eq!(next, ["10.222.1.0/28", "10.222.1.16/28"]);
        // A network wider than the whole plan leaves nothing.
        let everything = vec!["10.0.0.0/8".parse().unwrap()];
        assert_eq!(plan.free(&everything).count(), 0);
        assert_eq!(plan.free(&[]).count(), 4096);
        // A plan narrower than one sandbox network holds none (the settings refuse it).
        let tiny = SubnetPlan::new("10.222.0.0/30".parse().unwrap());
        assert_eq!(tiny.free(&[]).count(), 0);
    }

    #[test]
    fn only_names_this_family_makes_are_removed() {
        let docker =
            Docker::connect_with_http("http://127.0.0.1:1", 1, bollard::API_DEFAULT_VERSION)
                .expect("a client (never used)");
        let networks = SandboxNetworks::new(
            docker,
            "agentbox",
            "i",
            "r",
            SubnetPlan::new("10.222.0.0/16".parse().unwrap()),
            0,
            egress::EgressRules::for_network(
                "agentbox",
                egress::EgressPolicy::Unrestricted,
                vec![],
            ),
        );
        assert!(networks.is_ours("agentbox-0123456789ab"));
        for other in [
            "bridge",
            "host",
            "agentbox",
            "agentbox-other",
            "agentbox-0123456789ab-x",
            "agentbox-x-0123456789ab",
            "agentbox-0123456789zz",
        ] {
            assert!(!networks.is_ours(other), "{other}");
        }
    }
}
