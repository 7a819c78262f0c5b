//! Browser profiles with the real Docker Engine and the real sandbox: a login cookie a page set
//! in a task with a profile is there in the next sandbox that uses the profile, and absent from
//! one that does not; a profile is used by one sandbox at a time (409 naming the holder);
//! another key sees none of it; bad requests change nothing.

use anyhow::Context;
use reqwest::Method;
use serde_json::{Value, json};

use super::sandbox_calls::{cookies, eval, open_in_active_tab, post, post_as, shell, tab_urls};
use crate::common::{ADMIN_KEY, Options, Orchestrator};

fn message(answer: &Value) -> String {
    answer["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_made_with_a_profile_is_there_in_the_next_sandbox_that_uses_it()
-> anyhow::Result<()> {
    let orchestrator = Orchestrator::start(Options {
        ready_timeout_secs: 300,
        ..Options::default()
    })?;
    let (status, profile) = post(&orchestrator, "/v1/profiles", json!({"name": "github"})).await?;
    assert_eq!(status, 201, "{profile}");
    let profile_id = profile["id"].as_str().context("id")?.to_string();
    assert_eq!(profile["in_use_by"], Value::Null);
    assert_eq!(profile["saved_at"], Value::Null);
    for (body, status, named) in [
        (json!({"name": "github"}), 409, "named `github`"),
        (json!({"name": "no spaces"}), 422, "name"),
        (json!({"nam": "x"}), 422, "nam"),
    ] {
        let (got, answer) = post(&orchestrator, "/v1/profiles", body.clone()).await?;
        assert_eq!(got, status, "{body}: {answer}");
        assert!(message(&answer).contains(named), "{body}: {answer}");
    }

    // A task logs in: a page on loopback sets a lasting cookie.
    let first = orchestrator.create(json!({"profile": "github"})).await?;
    let first_id = first["id"].as_str().context("id")?.to_string();
    shell(
        &orchestrator,
        &first_id,
        "mkdir -p ~/site && \
         echo '<script>document.cookie=\"session=alice-42; max-age=86400; path=/\"</script>in' \
           > ~/site/login.html && \
         (setsid python3 -m http.server 8765 --bind 127.0.0.1 -d ~/site >/dev/null 2>&1 &) && \
         for i in $(seq 50); do curl -sf http://127.0.0.1:8765/login.html >/dev/null && break; \
           sleep 0.1; done; echo served",
    )
    .await?;
    open_in_active_tab(&orchestrator, &first_id, "http://127.0.0.1:8765/login.html").await?;
    assert_eq!(
        eval(&orchestrator, &first_id, "document.cookie").await?,
        "session=alice-42"
    );

    // Used by one sandbox at a time: a second is refused naming the first, which nothing
    // changes; the profile cannot be deleted meanwhile.
    let (status, refused) = post(
        &orchestrator,
        "/v1/sandboxes",
        json!({"profile": profile_id}),
    )
    .await?;
    assert_eq!(status, 409, "{refused}");
    assert!(message(&refused).contains(&first_id), "{refused}");
    let (_, described) = orchestrator
        .get(&format!("/v1/profiles/{profile_id}"))
        .await?;
    assert_eq!(described["in_use_by"], first_id.as_str(), "{described}");
    let (status, refused) = orchestrator
        .call(Method::DELETE, "/v1/profiles/github", Some(ADMIN_KEY), None)
        .await?;
    assert_eq!(status, 409, "{refused}");
    assert!(message(&refused).contains(&first_id), "{refused}");
    assert_eq!(orchestrator.containers().len(), 1);

    // The task ends: the profile is saved and free.
    assert_eq!(orchestrator.delete(&first_id).await?, 204);
    let (_, saved) = orchestrator
        .get(&format!("/v1/profiles/{profile_id}"))
        .await?;
    assert_eq!(saved["in_use_by"], Value::Null, "{saved}");
    assert!(saved["saved_at"].is_string(), "{saved}");
    assert!(saved["size_bytes"].as_i64() > Some(0), "{saved}");

    // The next sandbox with the profile is logged in, on a fresh page; one without is not.
    let next = orchestrator.create(json!({"profile": profile_id})).await?;
    let next_id = next["id"].as_str().context("id")?.to_string();
    let plain = orchestrator.create(json!({})).await?;
    let plain_id = plain["id"].as_str().context("id")?.to_string();
    let jar = cookies(&orchestrator, &next_id).await?;
    assert!(jar.contains("alice-42"), "the login is back: {jar}");
    let jar = cookies(&orchestrator, &plain_id).await?;
    assert!(
        !jar.contains("alice-42"),
        "a sandbox without the profile: {jar}"
    );
    let (_, tabs) = orchestrator
        .get(&format!("/v1/sandboxes/{next_id}/api/v1/browser/tabs"))
        .await?;
    assert!(
        !tab_urls(&tabs).iter().any(|url| url.contains(":8765")),
        "a profile brings logins, not the last task's tabs: {tabs}"
    );

    // Another key sees none of it and cannot use it.
    let (status, other) = post(&orchestrator, "/v1/keys", json!({"name": "someone-else"})).await?;
    assert_eq!(status, 201, "{other}");
    let other_key = other["key"].as_str().context("key")?.to_string();
    let (_, theirs) = orchestrator
        .call(Method::GET, "/v1/profiles", Some(&other_key), None)
        .await?;
    assert_eq!(theirs["profiles"], json!([]), "{theirs}");
    for method in [Method::GET, Method::DELETE] {
        let (status, answer) = orchestrator
            .call(
                method.clone(),
                &format!("/v1/profiles/{profile_id}"),
                Some(&other_key),
                None,
            )
            .await?;
        assert_eq!(status, 404, "{method}: {answer}");
    }
    for profile in [profile_id.as_str(), "github", "prf-nosuchprofile"] {
        let (status, answer) = post_as(
            &orchestrator,
            &other_key,
            "/v1/sandboxes",
            json!({"profile": profile}),
        )
        .await?;
        assert_eq!(status, 422, "{profile}: {answer}");
        assert!(message(&answer).contains("profile"), "{answer}");
    }
    assert_eq!(orchestrator.containers().len(), 2, "nothing new was made");

    // Free again once its sandbox ends, it is deleted with its saved state.
    for sandbox in [&next_id, &plain_id] {
        assert_eq!(orchestrator.delete(sandbox).await?, 204);
    }
    let (status, _) = orchestrator
        .call(
            Method::DELETE,
            &format!("/v1/profiles/{profile_id}"),
            Some(ADMIN_KEY),
            None,
        )
        .await?;
    assert_eq!(status, 204);
    assert!(
        !orchestrator
            .data_dir
            .join(format!("profiles/{profile_id}.tar"))
            .exists()
    );
    let (status, _) = orchestrator
        .get(&format!("/v1/profiles/{profile_id}"))
        .await?;
    assert_eq!(status, 404);
    assert!(orchestrator.containers().is_empty());
    Ok(())
}
