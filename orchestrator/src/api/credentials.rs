//! `/v1/a2a/credentials`: the bearer tokens a key stores for remote A2A agents (what its
//! `a2a:<card URL>` runs send), one per agent origin. Stored sealed; listed by origin, never
//! returned.

use axum::Extension;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::ApiJson;
use super::types::{CreateCredentialRequest, Credential, CredentialList, ErrorBody};
use crate::auth::Caller;
use crate::db::CredentialRecord;
use agentbox_http::timestamp::rfc3339_from_unix_ms as rfc3339;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(delete))
}

fn to_wire(record: &CredentialRecord) -> Credential {
    Credential {
        id: record.id.clone(),
        origin: record.origin.clone(),
        created_at: rfc3339(record.created_at),
    }
}

/// Stores the bearer token this key's `a2a:` runs send to the agent at `agent` (to its origin
/// only), replacing the key's earlier one for that origin. The token is sealed at rest and
/// never returned.
#[utoipa::path(post, path = "/v1/a2a/credentials", tag = "runs",
    request_body = CreateCredentialRequest,
    responses((status = 201, body = Credential), (status = 401, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(request): ApiJson<CreateCredentialRequest>,
) -> Result<(StatusCode, Json<Credential>), ApiError> {
    let record = state
        .runs
        .put_credential(&caller.key_id, &request.agent, &request.token)
        .await?;
    Ok((StatusCode::CREATED, Json(to_wire(&record))))
}

/// This key's stored credentials, by origin (without the tokens).
#[utoipa::path(get, path = "/v1/a2a/credentials", tag = "runs",
    responses((status = 200, body = CredentialList), (status = 401, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<CredentialList>, ApiError> {
    let records = state.runs.credentials(&caller.key_id).await?;
    Ok(Json(CredentialList {
        credentials: records.iter().map(to_wire).collect(),
    }))
}

/// Deletes one of this key's credentials; its runs then call that agent without one.
#[utoipa::path(delete, path = "/v1/a2a/credentials/{id}", tag = "runs",
    params(("id" = String, Path)),
    responses((status = 204), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.runs.delete_credential(&caller.key_id, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
