//! `GET /v1/cluster` (admin keys only): the machines sandboxes run on, their state, what each
//! has and has left, which sandboxes run where, and the orchestrator replicas with their duties.

use agentbox_http::timestamp::rfc3339_from_unix_ms as rfc3339;
use axum::Extension;
use axum::Json;
use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::types::{Cluster, ClusterNode, ClusterReplica, ErrorBody};
use crate::auth::Caller;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(cluster))
}

const MIB: i64 = 1024 * 1024;

/// The cluster: every machine the backend runs sandboxes on (one, the engine, for the `docker`
/// backend), its state and capacity, what this orchestrator's sandboxes reserve there (Swarm:
/// the scheduler places a sandbox only where its reservation fits) and its sandboxes.
#[utoipa::path(get, path = "/v1/cluster", tag = "cluster",
    responses((status = 200, body = Cluster), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn cluster(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Cluster>, ApiError> {
    if !caller.is_admin {
        return Err(ApiError::forbidden("the cluster's view needs an admin key"));
    }
    let nodes = state.sandboxes.cluster().await?;
    let replicas = state.sandboxes.replicas().await?;
    let backend = state.sandboxes.backend_name();
    Ok(Json(Cluster {
        backend: backend.to_string(),
        nodes: nodes
            .into_iter()
            .map(|entry| {
                let node = entry.node;
                let cpus = node.nano_cpus as f64 / 1e9;
                let memory_mib = node.memory_bytes / MIB;
                let reserved_cpus = node.reserved_nano_cpus.map(|n| n as f64 / 1e9);
                let reserved_memory_mib = node.reserved_memory_bytes.map(|b| b / MIB);
                ClusterNode {
                    id: node.id,
                    name: node.name,
                    role: node.role,
                    state: node.state,
                    availability: node.availability,
                    labels: node.labels,
                    cpus,
                    memory_mib,
                    free_cpus: reserved_cpus.map(|r| (cpus - r).max(0.0)),
                    free_memory_mib: reserved_memory_mib.map(|r| (memory_mib - r).max(0)),
                    reserved_cpus,
                    reserved_memory_mib,
                    sandboxes: entry.sandboxes,
                    pool_members: entry.pool_members,
                }
            })
            .collect(),
        replicas: replicas
            .into_iter()
            .map(|replica| ClusterReplica {
                id: replica.id,
                started_at: rfc3339(replica.started_at),
                seen_at: rfc3339(replica.seen_at),
                duties: replica.duties.into_iter().map(str::to_string).collect(),
                answering: replica.this,
            })
            .collect(),
    }))
}
