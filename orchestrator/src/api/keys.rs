//! `/v1/keys`: API keys (admin keys only).

use axum::Extension;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::ApiJson;
use super::types::{ApiKey, CreateKeyRequest, CreatedKey, ErrorBody, KeyList};
use crate::auth::Caller;
use crate::db::ApiKeyRecord;
use agentbox_http::timestamp::rfc3339_from_unix_ms;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(revoke))
}

fn admin_only(caller: &Caller) -> Result<(), ApiError> {
    if caller.is_admin {
        Ok(())
    } else {
        Err(ApiError::forbidden("managing API keys needs an admin key"))
    }
}

fn to_wire(record: &ApiKeyRecord) -> ApiKey {
    ApiKey {
        id: record.id.clone(),
        name: record.name.clone(),
        admin: record.is_admin,
        created_at: rfc3339_from_unix_ms(record.created_at),
        revoked_at: record.revoked_at.map(rfc3339_from_unix_ms),
    }
}

/// Creates a key. Its text is in the answer, once; only a hash is stored.
#[utoipa::path(post, path = "/v1/keys", tag = "keys", request_body = CreateKeyRequest,
    responses((status = 201, body = CreatedKey), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(request): ApiJson<CreateKeyRequest>,
) -> Result<(StatusCode, Json<CreatedKey>), ApiError> {
    admin_only(&caller)?;
    let (record, key) = state
        .keys
        .create(&request.name, request.admin.unwrap_or(false))
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedKey {
            api_key: to_wire(&record),
            key,
        }),
    ))
}

/// Every key, revoked ones included.
#[utoipa::path(get, path = "/v1/keys", tag = "keys",
    responses((status = 200, body = KeyList), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<KeyList>, ApiError> {
    admin_only(&caller)?;
    let keys = state.keys.list().await?;
    Ok(Json(KeyList {
        keys: keys.iter().map(to_wire).collect(),
    }))
}

/// Revokes a key at once. A key cannot revoke itself (so the last admin is not locked out by
/// mistake).
#[utoipa::path(delete, path = "/v1/keys/{id}", tag = "keys", params(("id" = String, Path)),
    responses((status = 204, description = "revoked"), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn revoke(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    admin_only(&caller)?;
    if id == caller.key_id {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            "a key cannot revoke itself",
        ));
    }
    if state.keys.revoke(&id).await? {
        // Its open sessions, and those of the tokens it issued, end now.
        state.sandboxes.sessions().end_key(&id);
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!("no active API key {id}")))
    }
}
