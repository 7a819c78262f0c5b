//! Browser profiles against the fake platform: one holder at a time (409 naming it), saved
//! when the holder ends however it ends (running, paused, hibernated), a failed save keeping
//! the previous state, another key seeing nothing, bad input changing nothing, and a crash
//! leaving no profile held or archive orphaned.

use super::*;
use crate::homes::Kind;
use crate::testing::harness::OWNER;
use crate::testing::{Harness, Step};

const OTHER: &str = "key-other";

fn with_profile(profile: &str) -> CreateSpec {
    CreateSpec {
        profile: Some(profile.to_string()),
        ..CreateSpec::default()
    }
}

/// A sandbox of [`OWNER`]'s created with `profile`.
async fn create_holding(h: &Harness, profile: &str) -> SandboxRecord {
    h.sandboxes
        .create(OWNER, with_profile(profile))
        .await
        .expect("a sandbox with the profile")
        .0
}

fn conflict<T: std::fmt::Debug>(result: Result<T, SandboxError>) -> String {
    match result {
        Err(SandboxError::Conflict(message)) => message,
        other => panic!("expected a conflict, got {other:?}"),
    }
}

fn invalid_field<T: std::fmt::Debug>(result: Result<T, SandboxError>) -> String {
    match result {
        Err(SandboxError::Invalid(invalid)) => invalid.field,
        other => panic!("expected an invalid field, got {other:?}"),
    }
}

fn saved(h: &Harness, profile_id: &str) -> Option<Vec<u8>> {
    std::fs::read(h.sandboxes.homes.path(Kind::Profile, profile_id).unwrap()).ok()
}

#[tokio::test]
async fn one_sandbox_holds_a_profile_and_the_next_starts_with_what_it_saved() {
    let h = Harness::new().await;
    let profile = h.sandboxes.create_profile(OWNER, "work").await.unwrap();
    assert_eq!(profile.saved_at, None);

    // The first sandbox starts with an empty profile and logs in.
    let first = h
        .sandboxes
        .create(OWNER, with_profile("work"))
        .await
        .unwrap();
    assert_eq!(first.1, Source::Cold, "never from the pool");
    let first = first.0;
    assert!(
        h.platform
            .container_of(&first.id)
            .unwrap()
            .profile
            .is_empty()
    );
    h.platform.set_profile(&first.id, b"cookie: login=alice");
    let held = h.sandboxes.profile("work", Some(OWNER)).await.unwrap();
    assert_eq!(held.holder_sandbox_id.as_deref(), Some(first.id.as_str()));

    // A second one is refused, naming the holder, and leaves nothing behind.
    let refused = conflict(h.sandboxes.create(OWNER, with_profile(&profile.id)).await);
    assert!(refused.contains(&first.id), "{refused}");
    assert_eq!(h.rows().await.len(), 1);
    let refused = conflict(
        h.sandboxes
            .delete_profile("work", Some(OWNER), Some(OWNER))
            .await,
    );
    assert!(refused.contains(&first.id), "{refused}");
    h.assert_nothing_leaks().await;

    // Its end saves the profile and frees it.
    h.sandboxes.delete(&first.id, Some(OWNER)).await.unwrap();
    let after = h.sandboxes.profile(&profile.id, Some(OWNER)).await.unwrap();
    assert_eq!(after.holder_sandbox_id, None);
    assert!(after.saved_at.is_some());
    assert_eq!(after.size_bytes, 19);
    assert_eq!(saved(&h, &profile.id).unwrap(), b"cookie: login=alice");

    // The next sandbox with it starts with the saved state; one without it does not.
    let next = create_holding(&h, "work").await;
    assert_eq!(
        h.platform.container_of(&next.id).unwrap().profile,
        b"cookie: login=alice"
    );
    let plain = h.create_cold().await;
    assert!(
        h.platform
            .container_of(&plain.id)
            .unwrap()
            .profile
            .is_empty()
    );

    // A paused holder is thawed to be saved.
    h.platform
        .set_profile(&next.id, b"cookie: login=alice; theme=dark");
    h.sandboxes.pause(&next.id, Some(OWNER)).await.unwrap();
    h.sandboxes.delete(&next.id, Some(OWNER)).await.unwrap();
    assert_eq!(
        saved(&h, &profile.id).unwrap(),
        b"cookie: login=alice; theme=dark"
    );

    // Free again, it is deleted with its archive.
    h.sandboxes
        .delete_profile("work", Some(OWNER), Some(OWNER))
        .await
        .unwrap();
    assert!(saved(&h, &profile.id).is_none());
    assert!(matches!(
        h.sandboxes.profile(&profile.id, Some(OWNER)).await,
        Err(SandboxError::ProfileNotFound(_))
    ));
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn a_hibernated_holder_saves_the_profile_from_its_kept_home() {
    let h = Harness::new().await;
    let profile = h.sandboxes.create_profile(OWNER, "work").await.unwrap();
    let sandbox = create_holding(&h, "work").await;
    let mut home = tar::Builder::new(Vec::new());
    for (path, data) in [
        (".config/chromium/Default/Cookies", &b"login=alice"[..]),
        ("workspace/notes.txt", &b"not in a profile"[..]),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o600);
        home.append_data(&mut header, path, data).unwrap();
    }
    h.platform
        .set_home(&sandbox.id, &home.into_inner().unwrap());
    h.sandboxes
        .hibernate(&sandbox.id, Some(OWNER))
        .await
        .unwrap();
    assert_eq!(
        h.sandboxes
            .profile("work", Some(OWNER))
            .await
            .unwrap()
            .holder_sandbox_id
            .as_deref(),
        Some(sandbox.id.as_str()),
        "a hibernated sandbox keeps its profile"
    );

    h.sandboxes.delete(&sandbox.id, Some(OWNER)).await.unwrap();
    let kept = saved(&h, &profile.id).expect("saved");
    let mut archive = tar::Archive::new(kept.as_slice());
    let names: Vec<String> = archive
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    assert_eq!(names, [".config/chromium/Default/Cookies"]);
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn a_save_or_a_start_that_fails_keeps_the_last_state_and_frees_the_profile() {
    let h = Harness::new().await;
    let profile = h.sandboxes.create_profile(OWNER, "work").await.unwrap();
    let first = create_holding(&h, "work").await;
    h.platform.set_profile(&first.id, b"v1");
    h.sandboxes.delete(&first.id, Some(OWNER)).await.unwrap();

    let second = create_holding(&h, "work").await;
    h.platform.set_profile(&second.id, b"v2, never saved");
    h.platform.fail_next(Step::Archive, "sandboxd went away");
    h.sandboxes.delete(&second.id, Some(OWNER)).await.unwrap();
    assert_eq!(saved(&h, &profile.id).unwrap(), b"v1");
    assert_eq!(h.sandboxes.homes.ids(Kind::Profile), [profile.id.as_str()]);

    // A start that fails frees it at once.
    h.platform.fail_next(Step::Start, "no room");
    assert!(
        h.sandboxes
            .create(OWNER, with_profile("work"))
            .await
            .is_err()
    );
    let free = h.sandboxes.profile("work", Some(OWNER)).await.unwrap();
    assert_eq!(free.holder_sandbox_id, None);
    let third = create_holding(&h, "work").await;
    assert_eq!(h.platform.container_of(&third.id).unwrap().profile, b"v1");
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn profiles_are_the_keys_own_and_bad_input_changes_nothing() {
    let h = Harness::with_flags(&["--max-profiles-per-key", "2"]).await;
    let profile = h.sandboxes.create_profile(OWNER, "work").await.unwrap();
    for name in ["", "a b", "../x", "prf-1", &"x".repeat(65)] {
        assert_eq!(
            invalid_field(h.sandboxes.create_profile(OWNER, name).await),
            "name"
        );
    }
    assert!(conflict(h.sandboxes.create_profile(OWNER, "work").await).contains("named `work`"));
    // The same name is another key's own.
    h.sandboxes.create_profile(OTHER, "work").await.unwrap();
    h.sandboxes.create_profile(OWNER, "home").await.unwrap();
    assert!(conflict(h.sandboxes.create_profile(OWNER, "third").await).contains("limit is 2"));

    // Another key sees none of ours, by id or name, and cannot mount it.
    for found in [
        h.sandboxes
            .profile(&profile.id, Some(OTHER))
            .await
            .map(|p| p.id),
        h.sandboxes
            .delete_profile(&profile.id, Some(OTHER), Some(OTHER))
            .await
            .map(|()| String::new()),
    ] {
        assert!(
            matches!(found, Err(SandboxError::ProfileNotFound(_))),
            "{found:?}"
        );
    }
    let others = h.sandboxes.profile("work", Some(OTHER)).await.unwrap();
    assert_ne!(others.id, profile.id);
    assert_eq!(
        invalid_field(h.sandboxes.create(OTHER, with_profile(&profile.id)).await),
        "profile"
    );
    assert_eq!(
        invalid_field(h.sandboxes.create(OWNER, with_profile("prf-unknown")).await),
        "profile"
    );
    // An admin (every key's profiles) names its own.
    let named = h
        .sandboxes
        .profile_as("work", None, Some(OWNER))
        .await
        .unwrap();
    assert_eq!(named.id, profile.id);
    assert_eq!(
        h.sandboxes.profile(&others.id, None).await.unwrap().id,
        others.id
    );
    assert_eq!(h.sandboxes.profiles(Some(OWNER)).await.unwrap().len(), 2);
    assert_eq!(h.sandboxes.profiles(None).await.unwrap().len(), 3);
    assert!(h.rows().await.is_empty());
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn after_a_crash_no_profile_stays_held_and_no_archive_is_orphaned() {
    let mut h = Harness::new().await;
    let profile = h.sandboxes.create_profile(OWNER, "work").await.unwrap();
    let sandbox = create_holding(&h, "work").await;
    // A crash between the holder's row going and the profile's release, and a half-removed
    // profile's archive.
    h.store.delete_sandbox(&sandbox.id).await.unwrap();
    std::fs::create_dir_all(h.dir.path().join("profiles")).unwrap();
    std::fs::write(h.dir.path().join("profiles/prf-stray.tar"), "x").unwrap();
    std::fs::write(h.dir.path().join("profiles/prf-half.tar.part"), "x").unwrap();

    h.restart();
    h.sandboxes.reconcile().await.unwrap();
    assert_eq!(h.store.profile_held_by(&sandbox.id).await.unwrap(), None);
    assert!(h.sandboxes.homes.ids(Kind::Profile).is_empty());
    assert!(!h.dir.path().join("profiles/prf-half.tar.part").exists());
    let next = h.sandboxes.create(OWNER, with_profile(&profile.id)).await;
    assert!(next.is_ok(), "{next:?}");
    h.assert_nothing_leaks().await;
}
