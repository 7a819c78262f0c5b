//! Agent skills (`/v1/skills/*`): AIO's `SkillMetadata`, registration and content results. A
//! skill is a directory holding a `SKILL.md` whose YAML front matter carries its metadata.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One registered skill.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct SkillMetadata {
    /// The skill's name (its directory's name in the skills directory).
    pub name: String,
    /// The skill's directory (absolute).
    pub path: String,
    /// The YAML front matter of its `SKILL.md`, as JSON.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// Dependency commands run for the skill: sandboxd runs none (install what a skill needs
    /// with the shell API), so this is always empty.
    pub dependency_commands: Option<Vec<DependencyCommandResult>>,
}

/// A dependency command and its outcome (AIO's shape; sandboxd runs none).
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct DependencyCommandResult {
    pub command: Vec<String>,
    pub success: bool,
    pub stdout: Option<String>,
    pub stderr: Option<String>,
}

/// `GET /v1/skills/metadatas`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct SkillMetadataCollection {
    pub skills: Vec<SkillMetadata>,
}

/// `POST /v1/skills/register`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct SkillRegistrationResult {
    /// How many skills the upload registered.
    pub count: usize,
    pub registered: Vec<SkillMetadata>,
}

/// `GET /v1/skills/{name}/content`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct SkillContentResult {
    pub name: String,
    /// The skill's directory (absolute).
    pub path: String,
    /// `SKILL.md` without its front matter.
    pub content: String,
}

/// `DELETE /v1/skills`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct SkillsCleared {
    /// The names of the skills removed.
    pub removed: Vec<String>,
}

/// `GET /v1/skills/metadatas` query.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SkillListQuery {
    /// Comma-separated names to list (default: every skill).
    pub names: Option<String>,
}

/// `POST /v1/skills/register` (multipart/form-data), for the OpenAPI document.
#[derive(Debug, ToSchema)]
#[allow(dead_code)] // Documents the form; the handler reads the parts one by one.
pub struct SkillRegisterForm {
    /// A zip archive of one skill (`SKILL.md` at its top, or in its one top directory) or of
    /// several (one directory per skill), or a lone `SKILL.md`.
    #[schema(value_type = String, format = Binary)]
    pub file: Vec<u8>,
    /// The name of the skill, when the upload holds one (default: the front matter's `name`,
    /// else the directory's or file's name).
    pub name: Option<String>,
    /// Not supported: registering a directory already in the sandbox (422 when given).
    pub path: Option<String>,
}
