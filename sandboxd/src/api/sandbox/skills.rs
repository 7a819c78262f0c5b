//! `/v1/skills/*`: AIO's skills registry, served by [`crate::skills`]: register (a zip or a
//! `SKILL.md`, multipart), list metadata, read a skill's content, remove one or all.

use axum::Json;
use axum::extract::{DefaultBodyLimit, FromRequest, Multipart, Path, Request, State};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::extract::AioQuery;
use crate::api::types::{
    Envelope, ErrorBody, SkillContentResult, SkillListQuery, SkillMetadata,
    SkillMetadataCollection, SkillRegisterForm, SkillRegistrationResult, SkillsCleared,
};
use crate::skills::{Skill, SkillError};

/// The longest `name` or `path` text field.
const MAX_TEXT_FIELD: usize = 4096;

pub fn routes() -> OpenApiRouter<AppState> {
    // The upload is bounded by the skills' own limit as it is read, not by the JSON limit.
    let register = OpenApiRouter::new()
        .routes(routes!(register))
        .layer(DefaultBodyLimit::disable());
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(clear))
        .routes(routes!(remove))
        .routes(routes!(content))
        .merge(register)
}

/// Registers the skills in an upload: a zip archive (one skill, with `SKILL.md` at its top or
/// in its one directory, or one directory per skill) or a lone `SKILL.md`. Skills live in
/// `$HOME/skills/<name>`; a skill of the same name is replaced. Nothing in the upload is run.
#[utoipa::path(post, path = "/v1/skills/register", tag = "skills",
    request_body(content = SkillRegisterForm, content_type = "multipart/form-data"),
    responses(
        (status = 200, description = "the skills registered", body = Envelope<SkillRegistrationResult>),
        (status = 400, description = "not a usable multipart body", body = ErrorBody),
        (status = 413, description = "the upload or what it unpacks to is over a limit", body = ErrorBody),
        (status = 422, description = "no `file`, a bad archive or front matter, a bad `name`, or `path` given", body = ErrorBody),
    ))]
pub async fn register(
    State(state): State<AppState>,
    request: Request,
) -> Result<Json<Envelope<SkillRegistrationResult>>, ApiError> {
    let mut multipart = Multipart::from_request(request, &state)
        .await
        .map_err(|rejection| {
            ApiError::new(
                rejection.status(),
                format!(
                    "expected a multipart/form-data body: {}",
                    rejection.body_text()
                ),
            )
        })?;
    let limit = state.skills.limits().max_upload_bytes;
    let mut name: Option<String> = None;
    let mut file: Option<Vec<u8>> = None;
    while let Some(mut field) = multipart.next_field().await.map_err(multipart_error)? {
        let field_name = field.name().unwrap_or_default().to_string();
        match field_name.as_str() {
            "name" | "path" => {
                let mut text = Vec::new();
                while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
                    text.extend_from_slice(&chunk);
                    if text.len() > MAX_TEXT_FIELD {
                        return Err(ApiError::invalid(
                            &field_name,
                            format!("`{field_name}` is longer than {MAX_TEXT_FIELD} bytes"),
                        ));
                    }
                }
                let text = String::from_utf8(text).map_err(|_| {
                    ApiError::invalid(&field_name, format!("`{field_name}` is not UTF-8"))
                })?;
                if text.is_empty() {
                    continue;
                }
                if field_name == "path" {
                    return Err(ApiError::invalid(
                        "path",
                        "registering a directory already in the sandbox (`path`) is not supported: upload the skill as `file` (a zip archive or a SKILL.md)",
                    ));
                }
                name = Some(text);
            }
            "file" => {
                if file.is_some() {
                    return Err(ApiError::invalid("file", "send one `file` part"));
                }
                let mut bytes = Vec::new();
                while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
                    bytes.extend_from_slice(&chunk);
                    if bytes.len() as u64 > limit {
                        return Err(ApiError::too_large(format!(
                            "the skill upload is over {limit} bytes"
                        )));
                    }
                }
                file = Some(bytes);
            }
            // Other fields are ignored, as AIO's clients may add some.
            _ => {}
        }
    }
    let file = file.ok_or_else(|| ApiError::invalid("file", "the body has no `file` part"))?;
    if file.is_empty() {
        return Err(ApiError::invalid("file", "`file` is empty"));
    }
    let skills = state.skills.clone();
    let registered = blocking(move || skills.register(&file, name.as_deref())).await?;
    Ok(Json(Envelope::ok(SkillRegistrationResult {
        count: registered.len(),
        registered: registered.into_iter().map(metadata).collect(),
    })))
}

/// Every skill's metadata (its `SKILL.md` front matter), or those named in `names`
/// (comma-separated; unknown names are skipped).
#[utoipa::path(get, path = "/v1/skills/metadatas", tag = "skills",
    params(SkillListQuery),
    responses((status = 200, body = Envelope<SkillMetadataCollection>)))]
pub async fn list(
    State(state): State<AppState>,
    AioQuery(query): AioQuery<SkillListQuery>,
) -> Result<Json<Envelope<SkillMetadataCollection>>, ApiError> {
    let names: Option<Vec<String>> = query.names.as_deref().map(|names| {
        names
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect()
    });
    let skills = state.skills.clone();
    let listed = blocking(move || skills.list(names.as_deref())).await?;
    Ok(Json(Envelope::ok(SkillMetadataCollection {
        skills: listed.into_iter().map(metadata).collect(),
    })))
}

/// Removes every skill.
#[utoipa::path(delete, path = "/v1/skills", tag = "skills",
    responses((status = 200, body = Envelope<SkillsCleared>)))]
pub async fn clear(
    State(state): State<AppState>,
) -> Result<Json<Envelope<SkillsCleared>>, ApiError> {
    let skills = state.skills.clone();
    let removed = blocking(move || skills.clear()).await?;
    Ok(Json(Envelope::ok(SkillsCleared { removed })))
}

/// Removes one skill; answers what it was.
#[utoipa::path(delete, path = "/v1/skills/{name}", tag = "skills",
    params(("name" = String, Path, description = "the skill's name")),
    responses(
        (status = 200, body = Envelope<SkillMetadata>),
        (status = 404, description = "no such skill", body = ErrorBody),
        (status = 422, description = "not a skill name", body = ErrorBody),
    ))]
pub async fn remove(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Envelope<SkillMetadata>>, ApiError> {
    path_name(&name)?;
    let skills = state.skills.clone();
    let removed = blocking(move || skills.remove(&name)).await?;
    Ok(Json(Envelope::ok(metadata(removed))))
}

/// A skill's `SKILL.md` without its front matter.
#[utoipa::path(get, path = "/v1/skills/{name}/content", tag = "skills",
    params(("name" = String, Path, description = "the skill's name")),
    responses(
        (status = 200, body = Envelope<SkillContentResult>),
        (status = 404, description = "no such skill", body = ErrorBody),
        (status = 422, description = "not a skill name", body = ErrorBody),
    ))]
pub async fn content(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Envelope<SkillContentResult>>, ApiError> {
    path_name(&name)?;
    let skills = state.skills.clone();
    let (skill, content) = blocking(move || skills.content(&name)).await?;
    Ok(Json(Envelope::ok(SkillContentResult {
        name: skill.name,
        path: skill.path.to_string_lossy().into_owned(),
        content,
    })))
}

async fn blocking<T: Send + 'static>(
    op: impl FnOnce() -> Result<T, SkillError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(op)
        .await
        .map_err(|e| ApiError::internal(format!("the skills task failed: {e}")))?
        .map_err(skill_error)
}

fn metadata(skill: Skill) -> SkillMetadata {
    SkillMetadata {
        name: skill.name,
        path: skill.path.to_string_lossy().into_owned(),
        metadata: skill.metadata,
        dependency_commands: Some(Vec::new()),
    }
}

fn skill_error(error: SkillError) -> ApiError {
    let message = error.to_string();
    match error {
        SkillError::InvalidName { .. } => ApiError::invalid("name", message),
        SkillError::NotFound(_) => ApiError::not_found(message),
        SkillError::BadUpload(_) | SkillError::FrontMatter { .. } => {
            ApiError::invalid("file", message)
        }
        SkillError::TooLarge(_) => ApiError::too_large(message),
        SkillError::Io { .. } => ApiError::internal(message),
    }
}

/// A skill name in the path: refused with a 422 at `["path", "name"]`.
fn path_name(name: &str) -> Result<(), ApiError> {
    crate::skills::check_name(name)
        .map_err(|e| ApiError::invalid_at(vec!["path".into(), "name".into()], e.to_string()))
}

fn multipart_error(error: axum::extract::multipart::MultipartError) -> ApiError {
    ApiError::new(
        error.status(),
        format!("cannot read the multipart body: {}", error.body_text()),
    )
}
