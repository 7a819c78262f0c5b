//! What the cluster looks like to this orchestrator (`GET /v1/cluster`): the machines its
//! backend runs sandboxes on, what each has and what this orchestrator's sandboxes reserve
//! there, which sandboxes run where, and the replicas serving the installation.

use super::{SandboxError, Sandboxes};
use crate::backend::{BackendKind, NodeInfo};
use crate::db::SandboxFilter;
use crate::replicas::ReplicaStatus;

/// One machine and the sandboxes on it.
#[derive(Debug, Clone)]
pub struct ClusterNode {
    pub node: NodeInfo,
    /// Sandboxes of this instance on the node (warm-pool members apart).
    pub sandboxes: Vec<String>,
    /// Warm-pool members on the node.
    pub pool_members: usize,
}

impl Sandboxes {
    /// The backend's name as `serve --backend` takes it.
    pub fn backend_name(&self) -> &'static str {
        match self.settings.backend {
            BackendKind::Docker => "docker",
            BackendKind::Swarm => "swarm",
        }
    }

    /// The orchestrator replicas serving this installation and the duties each holds.
    pub async fn replicas(&self) -> Result<Vec<ReplicaStatus>, SandboxError> {
        Ok(self.duties.roster().await?)
    }

    /// The backend's machines, each with this instance's sandboxes on it.
    pub async fn cluster(&self) -> Result<Vec<ClusterNode>, SandboxError> {
        let nodes = self.backend.nodes().await?;
        let records = self
            .store
            .list_sandboxes(&SandboxFilter {
                instance: Some(self.instance.clone()),
                include_pooled: true,
                ..SandboxFilter::default()
            })
            .await?;
        Ok(nodes
            .into_iter()
            .map(|node| {
                let mut sandboxes = Vec::new();
                let mut pool_members = 0;
                for record in &records {
                    let here = record
                        .container_id
                        .as_ref()
                        .is_some_and(|c| node.containers.contains(c));
                    match (here, record.pooled) {
                        (true, true) => pool_members += 1,
                        (true, false) => sandboxes.push(record.id.clone()),
                        (false, _) => {}
                    }
                }
                sandboxes.sort();
                ClusterNode {
                    node,
                    sandboxes,
                    pool_members,
                }
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use crate::clock::Clock as _;
    use crate::replicas::Duty;
    use crate::sandboxes::CreateSpec;
    use crate::testing::harness::Harness;

    #[tokio::test]
    async fn the_cluster_lists_each_sandbox_on_its_node_and_pool_members_apart() {
        let h = Harness::new().await;
        let (a, _) = h
            .sandboxes
            .create("key-a", CreateSpec::default())
            .await
            .unwrap();
        let (b, _) = h
            .sandboxes
            .create("key-b", CreateSpec::default())
            .await
            .unwrap();
        let nodes = h.sandboxes.cluster().await.unwrap();
        assert_eq!(nodes.len(), 1);
        let mut expected = vec![a.id.clone(), b.id.clone()];
        expected.sort();
        assert_eq!(nodes[0].sandboxes, expected);
        h.sandboxes
            .remove(&a, crate::sandboxes::EndReason::Deleted)
            .await
            .unwrap();
        let nodes = h.sandboxes.cluster().await.unwrap();
        assert_eq!(nodes[0].sandboxes, vec![b.id]);
    }

    #[tokio::test]
    async fn the_replicas_are_listed_with_the_duties_each_holds() {
        let h = Harness::new().await;
        let replica = h.sandboxes.replica.clone();
        let boot = "boot-1";
        let now = h.clock.now_ms();
        h.store
            .register_replica(&replica, boot, None, now)
            .await
            .unwrap();
        h.store
            .register_replica("peer", "boot-2", None, now)
            .await
            .unwrap();
        h.store
            .register_replica("gone", "boot-3", None, now - 60_000)
            .await
            .unwrap();
        assert!(h.sandboxes.duties.mine(Duty::Reaper).await);
        assert!(
            h.store
                .hold_lease(Duty::PoolRefill.lease(), "peer", now, now + 10_000)
                .await
                .unwrap()
        );
        let roster = h.sandboxes.replicas().await.unwrap();
        let view: Vec<_> = roster
            .iter()
            .map(|r| (r.id.as_str(), r.duties.clone(), r.this))
            .collect();
        let mut expected = vec![
            (replica.as_str(), vec!["reaper"], true),
            ("peer", vec!["pool_refill"], false),
        ];
        expected.sort();
        assert_eq!(view, expected, "the gone replica is left out");
    }
}
