//! Browser profiles: a named profile is Chromium's profile folder (`~/.config/chromium`: its
//! cookies, logins, local storage, history and settings) kept as an archive in the data
//! directory ([`crate::homes`]), owned by the key that made it. A sandbox created with
//! `profile` starts with it in place of a fresh one and holds it while it lives; when the
//! sandbox ends (deleted, reaped, expired) the browser is closed in order, which writes its
//! cookie store, and the folder is saved back. Logins made in one task are there in the next.
//!
//! What a profile keeps: what Chromium keeps in its profile folder. Not in it: the rest of the
//! home, the open tabs (a profile brings logins, not the last task's pages: no session is
//! restored), caches, and anything secret of the sandbox (its key and VNC passwords are never in
//! the home). A snapshot or a fork of a sandbox that holds a profile carries the profile's
//! state as part of its home, but does not hold the profile.
//!
//! **Invariants:** one sandbox at a time holds a profile: the hold is taken by one guarded
//! write after the sandbox's row exists, and a profile whose holder's row is gone is free (so a
//! crash or any removal path frees it); a second sandbox asking for a held profile gets 409
//! naming the holder. Only the holder writes the profile's archive, whole or not at all, and a
//! save that fails keeps the previous one. A profile is deleted only while free.

use std::path::PathBuf;

use super::sandboxd::HomeArchiveRequest;
use super::{SandboxError, Sandboxes};
use crate::db::{ProfileRecord, ProfileTake, SandboxRecord, SandboxStatus};
use crate::homes::Kind;
use crate::secret::new_id;
use crate::validate::{Invalid, invalid};

/// The profile's folder in the home (`start-chromium`'s `--user-data-dir`).
pub const PROFILE_FOLDER: &str = ".config/chromium";

/// The id prefix of profiles (a name may not start with it).
const PROFILE_ID_PREFIX: &str = "prf-";

/// A profile's name: 1 to 64 letters, digits, `.`, `_` or `-`, starting with a letter or a
/// digit, and not with the id prefix.
pub fn profile_name(name: &str) -> Result<(), Invalid> {
    let fine = (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !fine {
        return Err(invalid(
            "name",
            "1 to 64 letters, digits, '.', '_' or '-', starting with a letter or a digit",
        ));
    }
    if name.starts_with(PROFILE_ID_PREFIX) {
        return Err(invalid(
            "name",
            format!("a name may not start with `{PROFILE_ID_PREFIX}` (profile ids do)"),
        ));
    }
    Ok(())
}

impl Sandboxes {
    /// Makes an empty profile named `name` for `owner`: 409 when the key has one of that name
    /// or has `--max-profiles-per-key`.
    pub async fn create_profile(
        &self,
        owner: &str,
        name: &str,
    ) -> Result<ProfileRecord, SandboxError> {
        profile_name(name)?;
        let _quota = self.quota.lock().await;
        let count = self.store.profile_count(owner).await?;
        let limit = self.settings.max_profiles_per_key;
        if count >= limit as i64 {
            return Err(SandboxError::Conflict(format!(
                "this API key already has {count} profiles (the limit is {limit}): delete one \
                 first"
            )));
        }
        let profile = ProfileRecord {
            id: new_id(PROFILE_ID_PREFIX),
            owner_key_id: owner.to_string(),
            name: name.to_string(),
            holder_sandbox_id: None,
            size_bytes: 0,
            instance: Some(self.instance.clone()),
            created_at: self.clock.now_ms(),
            saved_at: None,
        };
        if !self.store.insert_profile(&profile).await? {
            return Err(SandboxError::Conflict(format!(
                "this API key already has a profile named `{name}`"
            )));
        }
        tracing::info!(profile_id = %profile.id, "profile created");
        Ok(profile)
    }

    /// `owner`'s profiles (everyone's for an admin: `None`), oldest first.
    pub async fn profiles(&self, owner: Option<&str>) -> Result<Vec<ProfileRecord>, SandboxError> {
        Ok(self.store.profiles(owner).await?)
    }

    /// One profile, by id or by name among `owner`'s, as `owner` sees it (another key's is not
    /// found).
    pub async fn profile(
        &self,
        id_or_name: &str,
        owner: Option<&str>,
    ) -> Result<ProfileRecord, SandboxError> {
        self.profile_as(id_or_name, owner, owner).await
    }

    /// [`profile`](Self::profile), names looked up among `namer`'s profiles (an admin key,
    /// which sees every key's, names its own).
    pub async fn profile_as(
        &self,
        id_or_name: &str,
        owner: Option<&str>,
        namer: Option<&str>,
    ) -> Result<ProfileRecord, SandboxError> {
        let found = match self.store.profile(id_or_name).await? {
            Some(profile) => Some(profile),
            None => match namer {
                Some(namer) => self.store.profile_named(namer, id_or_name).await?,
                None => None,
            },
        };
        match found {
            Some(profile) if owner.is_none_or(|o| profile.owner_key_id == o) => Ok(profile),
            _ => Err(SandboxError::ProfileNotFound(id_or_name.to_string())),
        }
    }

    /// Deletes a profile that no sandbox holds, with its archive (names as in
    /// [`profile_as`](Self::profile_as)).
    pub async fn delete_profile(
        &self,
        id_or_name: &str,
        owner: Option<&str>,
        namer: Option<&str>,
    ) -> Result<(), SandboxError> {
        let profile = self.profile_as(id_or_name, owner, namer).await?;
        if let Some(holder) = &profile.holder_sandbox_id {
            return Err(SandboxError::Conflict(format!(
                "profile {} is in use by sandbox {holder}; delete that sandbox first",
                profile.id
            )));
        }
        if profile.instance.as_deref() != Some(self.instance.as_str()) {
            return Err(SandboxError::Conflict(format!(
                "profile {} is kept by another orchestrator instance; delete it there",
                profile.id
            )));
        }
        if !self.store.delete_free_profile(&profile.id).await? {
            return Err(SandboxError::Conflict(format!(
                "profile {} was taken by a sandbox meanwhile",
                profile.id
            )));
        }
        self.homes
            .remove(Kind::Profile, &profile.id)
            .await
            .map_err(|e| SandboxError::Task(e.to_string()))?;
        tracing::info!(profile_id = %profile.id, "profile deleted");
        Ok(())
    }

    /// The profile a create request names, checked: the caller's (422 naming `profile`
    /// otherwise) and kept here.
    pub(crate) async fn profile_to_mount(
        &self,
        id_or_name: &str,
        owner: &str,
    ) -> Result<ProfileRecord, SandboxError> {
        let profile = self
            .profile(id_or_name, Some(owner))
            .await
            .map_err(|error| match error {
                SandboxError::ProfileNotFound(id) => {
                    invalid("profile", format!("no profile {id}")).into()
                }
                other => other,
            })?;
        if profile.instance.as_deref() != Some(self.instance.as_str()) {
            return Err(SandboxError::Conflict(format!(
                "profile {} is kept by another orchestrator instance",
                profile.id
            )));
        }
        Ok(profile)
    }

    /// Makes the sandbox `sandbox_id` (its row written) the profile's holder and returns the
    /// archive to start it with (`None`: the profile was never saved, the browser starts
    /// empty). 409 naming the holder when another sandbox holds it.
    pub(crate) async fn hold_profile(
        &self,
        profile: &ProfileRecord,
        sandbox_id: &str,
    ) -> Result<Option<PathBuf>, SandboxError> {
        match self.store.take_profile(&profile.id, sandbox_id).await? {
            ProfileTake::Taken => {}
            ProfileTake::HeldBy(holder) => {
                return Err(SandboxError::Conflict(format!(
                    "profile {} ({}) is in use by sandbox {holder}: one sandbox at a time may \
                     use a profile",
                    profile.id, profile.name
                )));
            }
            ProfileTake::Gone => {
                return Err(invalid("profile", format!("no profile {}", profile.id)).into());
            }
        }
        let exists = self
            .homes
            .size(Kind::Profile, &profile.id)
            .await
            .map_err(|e| SandboxError::Task(e.to_string()))?
            .is_some();
        if !exists {
            return Ok(None);
        }
        self.homes
            .path(Kind::Profile, &profile.id)
            .map(Some)
            .map_err(|e| SandboxError::Task(e.to_string()))
    }

    /// Saves the profile a sandbox that is ending holds (if any), from its running container
    /// (the browser closed in order first) or from its kept home when it is hibernated. Never
    /// fails the removal: a save that fails keeps the previous archive and is logged. `current`
    /// is the sandbox as it was before its removal began.
    pub(crate) async fn save_held_profile(&self, current: &SandboxRecord) {
        let profile = match self.store.profile_held_by(&current.id).await {
            Ok(Some(profile)) => profile,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(sandbox_id = %current.id, %error, "cannot look up the sandbox's profile; it is not saved");
                return;
            }
        };
        let started = std::time::Instant::now();
        let saved = match current.status {
            SandboxStatus::Ready | SandboxStatus::Degraded | SandboxStatus::Paused => {
                self.save_profile_from_container(current, &profile).await
            }
            SandboxStatus::Hibernated => self
                .homes
                .copy_folder(
                    (Kind::Hibernated, &current.id),
                    PROFILE_FOLDER,
                    (Kind::Profile, &profile.id),
                )
                .await
                .map_err(|e| SandboxError::Task(e.to_string())),
            other => Err(SandboxError::Conflict(format!(
                "the sandbox is {}: its browser cannot be reached",
                other.as_str()
            ))),
        };
        match saved {
            Ok(bytes) => {
                let now = self.clock.now_ms();
                let _ = self
                    .store
                    .mark_profile_saved(&profile.id, &current.id, bytes as i64, now)
                    .await;
                tracing::info!(
                    sandbox_id = %current.id,
                    profile_id = %profile.id,
                    bytes,
                    took_ms = started.elapsed().as_millis() as u64,
                    "browser profile saved"
                );
            }
            Err(error) => {
                tracing::warn!(sandbox_id = %current.id, profile_id = %profile.id, %error, "the browser profile was not saved; it keeps its previous state");
            }
        }
    }

    /// Archives the profile folder of a running (or paused: thawed for it) sandbox into the
    /// profile's archive. The sandbox stays held: it is about to be removed.
    async fn save_profile_from_container(
        &self,
        current: &SandboxRecord,
        profile: &ProfileRecord,
    ) -> Result<u64, SandboxError> {
        let (Some(container_id), Some(address)) = (&current.container_id, &current.address) else {
            return Err(SandboxError::Conflict(
                "the sandbox has no container".into(),
            ));
        };
        let key = self.sandbox_key(current);
        self.thaw_to_archive(current, container_id, address, &key)
            .await?;
        let request = HomeArchiveRequest {
            path: Some(PROFILE_FOLDER.to_string()),
            keep_held: true,
        };
        let part = self
            .archive_into(
                &current.id,
                address,
                &key,
                &request,
                (Kind::Profile, &profile.id),
            )
            .await?;
        part.commit()
            .await
            .map_err(|e| SandboxError::Task(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_names_are_short_plain_and_never_an_id() {
        for fine in ["work", "a", "github.alice_2", &"x".repeat(64)] {
            assert!(profile_name(fine).is_ok(), "{fine}");
        }
        for bad in ["", "-x", ".x", "a b", "a/b", "ä", &"x".repeat(65), "prf-1"] {
            let error = profile_name(bad).unwrap_err();
            assert_eq!(error.field, "name", "{bad}");
        }
    }
}
