//! Agent skills: directories holding a `SKILL.md` whose YAML front matter carries the skill's
//! metadata (Anthropic-style agent skills), kept under one directory (`$HOME/skills`) that the
//! agent's user owns, since sandboxd runs as that user.
//!
//! Skills arrive as uploads: a zip archive (one skill, or one directory per skill) or a lone
//! `SKILL.md`. An archive is unpacked into a staging directory inside the skills directory,
//! bounded in entries and unpacked bytes, every entry's path checked to stay inside (no `..`,
//! no absolute path, no symlink entry); only then are the skills moved into place, replacing
//! skills of the same names. Nothing is run: a skill's dependencies are the agent's to install.
//!
//! All of it is blocking file-system work: callers on an async runtime run it on blocking
//! threads. One registry operation runs at a time.

use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Map, Value};

/// The file that makes a directory a skill.
pub const SKILL_FILE: &str = "SKILL.md";

/// Size limits, in bytes and counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest upload (zip or `SKILL.md`).
    pub max_upload_bytes: u64,
    /// The most bytes an archive may unpack to.
    pub max_unpacked_bytes: u64,
    /// The most entries an archive may hold.
    pub max_entries: usize,
    /// The largest `SKILL.md`.
    pub max_skill_file_bytes: u64,
    /// The most skills the directory may hold.
    pub max_skills: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_upload_bytes: 32 << 20,
            max_unpacked_bytes: 128 << 20,
            max_entries: 4096,
            max_skill_file_bytes: 1 << 20,
            max_skills: 256,
        }
    }
}

/// Why a skill operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SkillError {
    /// A skill name that is not a plain directory name.
    #[error(
        "invalid skill name {name:?}: a name is 1 to 64 letters, digits, `.`, `_` or `-`, not starting with `.`"
    )]
    InvalidName { name: String },
    #[error("no skill named {0:?}")]
    NotFound(String),
    /// The upload is not a usable archive or `SKILL.md` (the message says why).
    #[error("{0}")]
    BadUpload(String),
    /// The upload or what it unpacks to is over a limit.
    #[error("{0}")]
    TooLarge(String),
    /// A `SKILL.md` whose front matter is not a YAML mapping.
    #[error("{file}: the front matter is not a YAML mapping with string keys: {why}")]
    FrontMatter { file: String, why: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SkillError + '_ {
    move |source| SkillError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One skill.
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    pub name: String,
    /// Its directory.
    pub path: PathBuf,
    /// Its `SKILL.md` front matter, if it has one.
    pub metadata: Option<Map<String, Value>>,
}

/// The skills directory.
#[derive(Debug)]
pub struct Skills {
    root: PathBuf,
    limits: Limits,
    lock: Mutex<()>,
}

impl Skills {
    pub fn new(root: PathBuf, limits: Limits) -> Self {
        Self {
            root,
            limits,
            lock: Mutex::new(()),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    fn guard(&self) -> std::sync::MutexGuard<'_, ()> {
        // The lock guards no data, only the order of file-system work.
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers the skills in `upload` (a zip archive, or a lone `SKILL.md`). `name` names the
    /// skill when the upload holds exactly one. Returns the skills registered.
    pub fn register(&self, upload: &[u8], name: Option<&str>) -> Result<Vec<Skill>, SkillError> {
        if upload.len() as u64 > self.limits.max_upload_bytes {
            return Err(SkillError::TooLarge(format!(
                "the upload is {} bytes; at most {} are accepted",
                upload.len(),
                self.limits.max_upload_bytes
            )));
        }
        if let Some(name) = name {
            check_name(name)?;
        }
        let _guard = self.guard();
        std::fs::create_dir_all(&self.root).map_err(io(&self.root))?;
        let staging = Staging::new(&self.root)?;
        if upload.starts_with(b"PK") {
            self.unpack(upload, &staging.0)?;
        } else {
            let text = std::str::from_utf8(upload).map_err(|_| {
                SkillError::BadUpload(
                    "the upload is neither a zip archive nor a SKILL.md (UTF-8 text)".into(),
                )
            })?;
            let file = staging.0.join(SKILL_FILE);
            std::fs::write(&file, text).map_err(io(&file))?;
        }
        let found = skill_dirs(&staging.0)?;
        if found.is_empty() {
            return Err(SkillError::BadUpload(format!(
                "the upload holds no {SKILL_FILE}: a skill is a directory with a {SKILL_FILE} \
                 (at the archive's top, or one directory per skill)"
            )));
        }
        // Each skill with its staged directory as `path`, until it is moved into place.
        let mut planned: Vec<Skill> = Vec::new();
        for dir in &found {
            let (metadata, _) = self.read_skill_file(&dir.join(SKILL_FILE))?;
            let chosen = match name {
                Some(name) if found.len() == 1 => name.to_string(),
                _ => default_name(dir, &staging.0, metadata.as_ref())?,
            };
            check_name(&chosen)?;
            if planned.iter().any(|s| s.name == chosen) {
                return Err(SkillError::BadUpload(format!(
                    "the upload holds two skills named {chosen:?}"
                )));
            }
            planned.push(Skill {
                name: chosen,
                path: dir.clone(),
                metadata,
            });
        }
        let existing = self.names()?;
        let new = planned
            .iter()
            .filter(|s| !existing.contains(&s.name))
            .count();
        if existing.len() + new > self.limits.max_skills {
            return Err(SkillError::TooLarge(format!(
                "{} skills are registered and the upload adds {new}: at most {} may be",
                existing.len(),
                self.limits.max_skills
            )));
        }
        let mut registered = Vec::new();
        for mut skill in planned {
            let target = self.root.join(&skill.name);
            remove_entry(&target)?;
            std::fs::rename(&skill.path, &target).map_err(io(&target))?;
            skill.path = target;
            registered.push(skill);
        }
        Ok(registered)
    }

    /// Every skill, or those named in `names` (unknown names are skipped), by name.
    pub fn list(&self, names: Option<&[String]>) -> Result<Vec<Skill>, SkillError> {
        let _guard = self.guard();
        let mut skills = Vec::new();
        for name in self.names()? {
            if names.is_some_and(|wanted| !wanted.contains(&name)) {
                continue;
            }
            let path = self.root.join(&name);
            let metadata = match self.read_skill_file(&path.join(SKILL_FILE)) {
                Ok((metadata, _)) => metadata,
                Err(error) => {
                    tracing::warn!(skill = %name, %error, "cannot read a skill's metadata");
                    None
                }
            };
            skills.push(Skill {
                name,
                path,
                metadata,
            });
        }
        Ok(skills)
    }

    /// A skill and its `SKILL.md` without the front matter.
    pub fn content(&self, name: &str) -> Result<(Skill, String), SkillError> {
        check_name(name)?;
        let _guard = self.guard();
        let path = self.existing(name)?;
        let (metadata, body) = self.read_skill_file(&path.join(SKILL_FILE))?;
        Ok((
            Skill {
                name: name.to_string(),
                path,
                metadata,
            },
            body,
        ))
    }

    /// Removes a skill; returns what it was.
    pub fn remove(&self, name: &str) -> Result<Skill, SkillError> {
        check_name(name)?;
        let _guard = self.guard();
        let path = self.existing(name)?;
        let metadata = self
            .read_skill_file(&path.join(SKILL_FILE))
            .ok()
            .and_then(|(m, _)| m);
        remove_entry(&path)?;
        Ok(Skill {
            name: name.to_string(),
            path,
            metadata,
        })
    }

    /// Removes every skill; returns their names.
    pub fn clear(&self) -> Result<Vec<String>, SkillError> {
        let _guard = self.guard();
        let names = self.names()?;
        for name in &names {
            remove_entry(&self.root.join(name))?;
        }
        Ok(names)
    }

    /// The directory of skill `name`, if it is one (a directory, not a symlink, with a
    /// `SKILL.md`).
    fn existing(&self, name: &str) -> Result<PathBuf, SkillError> {
        let path = self.root.join(name);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() && path.join(SKILL_FILE).is_file() => Ok(path),
            _ => Err(SkillError::NotFound(name.to_string())),
        }
    }

    /// The names of the skills in the directory, sorted.
    fn names(&self) -> Result<Vec<String>, SkillError> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&self.root)(e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io(&self.root))?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if check_name(&name).is_err() {
                continue;
            }
            if self.existing(&name).is_ok() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    /// The front matter and body of a `SKILL.md`, refusing a file over the size limit.
    fn read_skill_file(
        &self,
        file: &Path,
    ) -> Result<(Option<Map<String, Value>>, String), SkillError> {
        let meta = std::fs::symlink_metadata(file).map_err(io(file))?;
        if !meta.is_file() {
            return Err(SkillError::BadUpload(format!(
                "{} is not a regular file",
                file.display()
            )));
        }
        if meta.len() > self.limits.max_skill_file_bytes {
            return Err(SkillError::TooLarge(format!(
                "{} is {} bytes; at most {} are accepted",
                file.display(),
                meta.len(),
                self.limits.max_skill_file_bytes
            )));
        }
        let bytes = std::fs::read(file).map_err(io(file))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| SkillError::BadUpload(format!("{} is not UTF-8 text", file.display())))?;
        let (front, body) = split_front_matter(&text);
        let metadata = front
            .map(|yaml| parse_front_matter(yaml).map_err(|why| front_matter_error(file, why)))
            .transpose()?;
        Ok((metadata, body.to_string()))
    }

    /// Unpacks a zip archive into `dir`, within the limits, refusing entries that would land
    /// outside it and symlinks.
    fn unpack(&self, upload: &[u8], dir: &Path) -> Result<(), SkillError> {
        let bad = |why: String| SkillError::BadUpload(format!("not a usable zip archive: {why}"));
        let mut archive =
            zip::ZipArchive::new(std::io::Cursor::new(upload)).map_err(|e| bad(e.to_string()))?;
        if archive.len() > self.limits.max_entries {
            return Err(SkillError::TooLarge(format!(
                "the archive holds {} entries; at most {} are accepted",
                archive.len(),
                self.limits.max_entries
            )));
        }
        let mut budget = self.limits.max_unpacked_bytes;
        for index in 0..archive.len() {
            let mut entry = archive.by_index(index).map_err(|e| bad(e.to_string()))?;
            let raw = entry
                .name()
                .map(|n| n.into_owned())
                .map_err(|e| bad(format!("entry {index}: {e}")))?;
            let relative = entry
                .enclosed_name()
                .filter(|p| p.components().all(|c| matches!(c, Component::Normal(_))))
                .ok_or_else(|| bad(format!("entry {raw:?} would land outside the archive")))?;
            if relative.as_os_str().is_empty()
                || relative
                    .components()
                    .next()
                    .is_some_and(|c| c.as_os_str() == "__MACOSX")
            {
                continue;
            }
            if entry.is_symlink() {
                return Err(bad(format!(
                    "entry {raw:?} is a symlink; skills hold files only"
                )));
            }
            let target = dir.join(&relative);
            if entry.is_dir() {
                std::fs::create_dir_all(&target).map_err(io(&target))?;
                continue;
            }
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            let executable = entry.unix_mode().is_some_and(|mode| mode & 0o111 != 0);
            let mut options = std::fs::OpenOptions::new();
            std::os::unix::fs::OpenOptionsExt::mode(
                options.write(true).create_new(true),
                if executable { 0o755 } else { 0o644 },
            );
            let mut out = options.open(&target).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    bad(format!("entry {raw:?} appears twice"))
                } else {
                    io(&target)(e)
                }
            })?;
            // The sizes an archive declares are not trusted: count what it unpacks to.
            let copied = std::io::copy(&mut (&mut entry).take(budget + 1), &mut out)
                .map_err(|e| bad(format!("entry {raw:?}: {e}")))?;
            if copied > budget {
                return Err(SkillError::TooLarge(format!(
                    "the archive unpacks to more than {} bytes",
                    self.limits.max_unpacked_bytes
                )));
            }
            budget -= copied;
            out.flush().map_err(io(&target))?;
        }
        Ok(())
    }
}

/// A staging directory inside the skills directory, removed when dropped.
struct Staging(PathBuf);

impl Staging {
    fn new(root: &Path) -> Result<Self, SkillError> {
        let dir = root.join(format!(".staging-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir(&dir).map_err(io(&dir))?;
        Ok(Self(dir))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_dir_all(&self.0)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.0.display(), %error, "cannot remove a skills staging directory");
        }
    }
}

/// Checks a skill name: 1 to 64 of `[A-Za-z0-9._-]`, not starting with `.`.
pub fn check_name(name: &str) -> Result<(), SkillError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(SkillError::InvalidName {
            name: name.to_string(),
        })
    }
}

/// A skill's name when the upload does not give one: the front matter's `name`, else its
/// directory's name.
fn default_name(
    dir: &Path,
    staging: &Path,
    metadata: Option<&Map<String, Value>>,
) -> Result<String, SkillError> {
    if let Some(Value::String(name)) = metadata.and_then(|m| m.get("name")) {
        return Ok(name.trim().to_string());
    }
    if dir == staging {
        return Err(SkillError::BadUpload(format!(
            "the skill has no name: give `name`, or a `name` in its {SKILL_FILE} front matter"
        )));
    }
    Ok(dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default())
}

/// The directories under `dir` holding a `SKILL.md` (`dir` itself, or else the shallowest ones,
/// at most three levels down), without following symlinks.
fn skill_dirs(dir: &Path) -> Result<Vec<PathBuf>, SkillError> {
    fn walk(dir: &Path, depth: usize, found: &mut Vec<PathBuf>) -> Result<(), SkillError> {
        if std::fs::symlink_metadata(dir.join(SKILL_FILE)).is_ok_and(|m| m.is_file()) {
            found.push(dir.to_path_buf());
            return Ok(());
        }
        if depth == 0 {
            return Ok(());
        }
        let mut children = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io(dir))? {
            let entry = entry.map_err(io(dir))?;
            if entry.file_type().map_err(io(dir))?.is_dir() {
                children.push(entry.path());
            }
        }
        children.sort();
        for child in children {
            walk(&child, depth - 1, found)?;
        }
        Ok(())
    }
    let mut found = Vec::new();
    walk(dir, 3, &mut found)?;
    Ok(found)
}

/// Removes a file, symlink or directory tree at `path` (never following a symlink); absent is
/// fine.
fn remove_entry(path: &Path) -> Result<(), SkillError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path).map_err(io(path)),
        Ok(_) => std::fs::remove_file(path).map_err(io(path)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(path)(e)),
    }
}

/// Splits `---\n<yaml>\n---\n<body>` into the YAML and the body; a text without front matter
/// is all body.
pub fn split_front_matter(text: &str) -> (Option<&str>, &str) {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return (None, text);
    };
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        let trimmed = line.trim_end_matches(['\r', '\n']);
        if trimmed == "---" || trimmed == "..." {
            let body = &rest[offset + line.len()..];
            return (Some(&rest[..offset]), body);
        }
        offset += line.len();
    }
    // No closing line: not front matter.
    (None, text)
}

/// Parses front matter YAML into a JSON object.
pub fn parse_front_matter(yaml: &str) -> Result<Map<String, Value>, String> {
    if yaml.trim().is_empty() {
        return Ok(Map::new());
    }
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(yaml).map_err(|e| e.to_string())?;
    match serde_json::to_value(value).map_err(|e| e.to_string())? {
        Value::Object(map) => Ok(map),
        other => Err(format!("got {}", json_kind(&other))),
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

fn front_matter_error(file: &Path, why: String) -> SkillError {
    SkillError::FrontMatter {
        file: file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = std::io::Cursor::new(Vec::new());
        {
            let mut writer = zip::ZipWriter::new(&mut out);
            let options = zip::write::SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Deflated);
            for (name, data) in entries {
                writer.start_file(*name, options).expect("entry");
                writer.write_all(data).expect("data");
            }
            writer.finish().expect("finish");
        }
        out.into_inner()
    }

    fn store() -> (tempdir::Dir, Skills) {
        let dir = tempdir::Dir::new();
        let skills = Skills::new(dir.0.join("skills"), Limits::default());
        (dir, skills)
    }

    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Self {
                let path = std::env::temp_dir()
                    .join(format!("skills-test-{}", uuid::Uuid::new_v4().simple()));
                std::fs::create_dir_all(&path).expect("temp dir");
                Self(path)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    const PDF: &[u8] = b"---\nname: pdf-tools\ndescription: Work with PDFs\n---\n# PDF\nUse it.\n";

    #[test]
    fn front_matter_is_split_and_parsed() {
        let (front, body) = split_front_matter("---\nname: x\ntags: [a, b]\n---\nbody\n");
        assert_eq!(front, Some("name: x\ntags: [a, b]\n"));
        assert_eq!(body, "body\n");
        let map = parse_front_matter(front.unwrap_or_default()).expect("mapping");
        assert_eq!(map["tags"], serde_json::json!(["a", "b"]));
        assert_eq!(split_front_matter("# no front\n"), (None, "# no front\n"));
        assert_eq!(
            split_front_matter("---\nunclosed\n"),
            (None, "---\nunclosed\n")
        );
        assert!(parse_front_matter("- a\n- b\n").is_err());
        assert!(parse_front_matter("key: [unclosed\n").is_err());
    }

    #[test]
    fn names_are_plain_directory_names() {
        for good in ["pdf", "pdf-tools", "a.b_c", "X1"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        let long = "a".repeat(65);
        for bad in ["", ".", "..", ".hidden", "a/b", "a b", "é", long.as_str()] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_archive_of_skills_is_registered_listed_read_and_removed() {
        let (_dir, skills) = store();
        let upload = zip_of(&[
            ("pdf/SKILL.md", PDF),
            ("pdf/scripts/run.sh", b"echo hi\n"),
            ("docx/SKILL.md", b"---\ndescription: Word\n---\nDocx body\n"),
        ]);
        let registered = skills.register(&upload, None).expect("registered");
        let names: Vec<_> = registered.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["docx", "pdf-tools"]);
        assert!(skills.root().join("pdf-tools/scripts/run.sh").is_file());
        let listed = skills.list(None).expect("list");
        assert_eq!(listed.len(), 2);
        let only = skills
            .list(Some(&["docx".to_string()]))
            .expect("filtered list");
        assert_eq!(only.len(), 1);
        let (skill, body) = skills.content("pdf-tools").expect("content");
        assert_eq!(body, "# PDF\nUse it.\n");
        assert_eq!(
            skill.metadata.as_ref().and_then(|m| m.get("description")),
            Some(&Value::String("Work with PDFs".into()))
        );
        skills.remove("docx").expect("removed");
        assert!(matches!(
            skills.content("docx"),
            Err(SkillError::NotFound(_))
        ));
        assert_eq!(skills.clear().expect("cleared"), ["pdf-tools"]);
        assert!(skills.list(None).expect("list").is_empty());
        // No staging directory is left behind.
        let left: Vec<_> = std::fs::read_dir(skills.root())
            .expect("root")
            .collect::<Result<_, _>>()
            .expect("entries");
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_lone_skill_file_takes_the_given_name() {
        let (_dir, skills) = store();
        let registered = skills.register(PDF, Some("mine")).expect("registered");
        assert_eq!(registered[0].name, "mine");
        assert!(skills.root().join("mine/SKILL.md").is_file());
        // Without a name, the front matter's.
        let registered = skills.register(PDF, None).expect("registered");
        assert_eq!(registered[0].name, "pdf-tools");
        // Neither: refused.
        assert!(matches!(
            skills.register(b"# just text\n", None),
            Err(SkillError::BadUpload(_))
        ));
    }

    #[test]
    fn escaping_entries_and_bad_archives_are_refused_and_leave_nothing() {
        let (_dir, skills) = store();
        for name in [
            "../evil/SKILL.md",
            "a/../../SKILL.md",
            "a/../../../x/SKILL.md",
        ] {
            let upload = zip_of(&[(name, PDF)]);
            let error = skills.register(&upload, None).expect_err(name);
            assert!(matches!(error, SkillError::BadUpload(_)), "{name}: {error}");
        }
        assert!(
            !skills
                .root()
                .parent()
                .expect("parent")
                .join("evil")
                .exists()
        );
        let error = skills
            .register(&zip_of(&[("readme.txt", b"no skill")]), None)
            .expect_err("no SKILL.md");
        assert!(error.to_string().contains("SKILL.md"), "{error}");
        assert!(matches!(
            skills.register(b"PK\x03\x04garbage", None),
            Err(SkillError::BadUpload(_))
        ));
        assert!(matches!(
            skills.register(&zip_of(&[("SKILL.md", b"---\n- a\n---\nx")]), Some("x")),
            Err(SkillError::FrontMatter { .. })
        ));
        assert!(matches!(
            skills.register(PDF, Some("../x")),
            Err(SkillError::InvalidName { .. })
        ));
        assert!(skills.list(None).expect("list").is_empty());
        let left = std::fs::read_dir(skills.root()).expect("root").count();
        assert_eq!(left, 0);
    }

    #[test]
    fn unpacked_size_is_bounded_whatever_the_archive_declares() {
        let dir = tempdir::Dir::new();
        let limits = Limits {
            max_unpacked_bytes: 1000,
            ..Limits::default()
        };
        let skills = Skills::new(dir.0.join("skills"), limits);
        let big = vec![b'a'; 5000];
        let upload = zip_of(&[("s/SKILL.md", PDF), ("s/big.txt", &big)]);
        assert!(matches!(
            skills.register(&upload, None),
            Err(SkillError::TooLarge(_))
        ));
        assert!(skills.list(None).expect("list").is_empty());
    }
}
