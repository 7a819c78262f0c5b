//! Browser profiles: `POST /v1/profiles`, `GET /v1/profiles`, `GET|DELETE /v1/profiles/{id}`.
//! A sandbox uses one with `profile` in `POST /v1/sandboxes`.

use axum::Extension;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::ApiJson;
use super::types::{CreateProfileRequest, ErrorBody, Profile, ProfileList};
use crate::auth::Caller;
use crate::db::ProfileRecord;
use agentbox_http::timestamp::rfc3339_from_unix_ms;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(get, delete))
}

fn to_wire_profile(record: &ProfileRecord) -> Profile {
    Profile {
        id: record.id.clone(),
        name: record.name.clone(),
        in_use_by: record.holder_sandbox_id.clone(),
        size_bytes: record.size_bytes,
        created_at: rfc3339_from_unix_ms(record.created_at),
        saved_at: record.saved_at.map(rfc3339_from_unix_ms),
    }
}

/// Makes an empty browser profile. A sandbox created with `profile` (its id or name) starts
/// its browser with it and saves it back when it ends (deleted, idle, expired): cookies,
/// logins, local storage, history and settings, what Chromium keeps in its profile folder.
/// Not kept: open tabs (a new task starts on a fresh page), caches, the rest of the home. One
/// sandbox at a time uses a profile.
#[utoipa::path(post, path = "/v1/profiles", tag = "profiles",
    request_body = CreateProfileRequest,
    responses((status = 201, body = Profile), (status = 401, body = ErrorBody),
        (status = 409, description = "the key has a profile of that name, or --max-profiles-per-key profiles", body = ErrorBody),
        (status = 422, description = "`name` is not a valid name", body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(request): ApiJson<CreateProfileRequest>,
) -> Result<(StatusCode, Json<Profile>), ApiError> {
    let profile = state
        .sandboxes
        .create_profile(&caller.key_id, &request.name)
        .await?;
    Ok((StatusCode::CREATED, Json(to_wire_profile(&profile))))
}

/// The key's profiles (every key's for the admin key), oldest first.
#[utoipa::path(get, path = "/v1/profiles", tag = "profiles",
    responses((status = 200, body = ProfileList), (status = 401, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<ProfileList>, ApiError> {
    let profiles = state.sandboxes.profiles(caller.owner()).await?;
    Ok(Json(ProfileList {
        profiles: profiles.iter().map(to_wire_profile).collect(),
    }))
}

/// One profile (by id, or by name among the key's): its size, when it was last saved, and the
/// sandbox using it now.
#[utoipa::path(get, path = "/v1/profiles/{id}", tag = "profiles",
    params(("id" = String, Path, description = "the profile's id or name")),
    responses((status = 200, body = Profile), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Profile>, ApiError> {
    let profile = state
        .sandboxes
        .profile_as(&id, caller.owner(), Some(&caller.key_id))
        .await?;
    Ok(Json(to_wire_profile(&profile)))
}

/// Deletes a profile and its saved state. A profile in use by a sandbox cannot be deleted.
#[utoipa::path(delete, path = "/v1/profiles/{id}", tag = "profiles",
    params(("id" = String, Path, description = "the profile's id or name")),
    responses((status = 204, description = "deleted"), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "a sandbox uses it (its id is named)", body = ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    state
        .sandboxes
        .delete_profile(&id, caller.owner(), Some(&caller.key_id))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
