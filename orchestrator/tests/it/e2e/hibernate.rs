//! Hibernate and wake, snapshots and forks with the real Docker Engine and the real sandbox: a
//! file, a cookie a page set and two open tabs survive hibernation (no container meanwhile);
//! a snapshot holds the home's files but no secret (the sandbox's key, its VNC passwords, a
//! shell history with a key in it); five forks of it each have the files and their own key;
//! another key sees none of it; bad requests are refused with the field or state named.

use std::time::Duration;

use agentbox_tests::docker;
use anyhow::Context;
use reqwest::Method;
use serde_json::{Value, json};

use super::sandbox_calls::{eval, open_in_active_tab, post, post_as, shell, tab_urls};
use crate::common::{ADMIN_KEY, Options, Orchestrator, container_exists, container_name};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hibernation_keeps_files_cookies_and_tabs_and_snapshots_fork_without_secrets()
-> anyhow::Result<()> {
    let orchestrator = Orchestrator::start(Options {
        ready_timeout_secs: 300,
        ..Options::default()
    })?;
    let sandbox = orchestrator.create(json!({})).await?;
    let id = sandbox["id"].as_str().context("id")?.to_string();
    let keyring =
        orchestrator::keyring::Keyring::load_or_create(&orchestrator.data_dir.join("master.key"))?;

    // A file, a page on loopback that sets a cookie, and two tabs.
    shell(
        &orchestrator,
        &id,
        "echo kept-across-hibernation > ~/workspace/notes.txt && mkdir -p ~/site && \
         echo '<script>document.cookie=\"login=alice-42; max-age=86400; path=/\"</script>one' \
           > ~/site/one.html && echo two > ~/site/two.html && \
         (setsid python3 -m http.server 8765 --bind 127.0.0.1 -d ~/site >/dev/null 2>&1 &) && \
         for i in $(seq 50); do curl -sf http://127.0.0.1:8765/two.html >/dev/null && break; \
           sleep 0.1; done; echo served",
    )
    .await?;
    open_in_active_tab(&orchestrator, &id, "http://127.0.0.1:8765/one.html").await?;
    assert_eq!(
        eval(&orchestrator, &id, "document.cookie").await?,
        "login=alice-42"
    );
    let (status, _) = post(
        &orchestrator,
        &format!("/v1/sandboxes/{id}/api/v1/browser/tabs"),
        json!({}),
    )
    .await?;
    assert_eq!(status, 200);
    open_in_active_tab(&orchestrator, &id, "http://127.0.0.1:8765/two.html").await?;
    let (_, tabs) = orchestrator
        .get(&format!("/v1/sandboxes/{id}/api/v1/browser/tabs"))
        .await?;
    let tabs_before = tab_urls(&tabs);
    assert_eq!(
        tabs_before,
        [
            "http://127.0.0.1:8765/one.html",
            "http://127.0.0.1:8765/two.html"
        ]
    );

    // Hibernate: no container, the proxies name the state, the other verbs refuse.
    let (status, hibernated) = post(
        &orchestrator,
        &format!("/v1/sandboxes/{id}/hibernate"),
        json!({}),
    )
    .await?;
    assert_eq!(status, 200, "{hibernated}");
    assert_eq!(hibernated["status"], "hibernated");
    assert!(hibernated["hibernated_at"].is_string(), "{hibernated}");
    assert!(!container_exists(&id), "the container is gone");
    assert!(orchestrator.containers().is_empty());
    let (status, refused) = orchestrator
        .get(&format!("/v1/sandboxes/{id}/api/readyz"))
        .await?;
    assert_eq!(status, 409, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("hibernated") && message.contains("/wake"),
        "{refused}"
    );
    for (verb, expected) in [
        ("hibernate", "already hibernated"),
        ("resume", "not paused"),
        ("pause", "hibernated"),
    ] {
        let (status, answer) = post(
            &orchestrator,
            &format!("/v1/sandboxes/{id}/{verb}"),
            json!({}),
        )
        .await?;
        assert_eq!(status, 409, "{verb}: {answer}");
        assert!(answer.to_string().contains(expected), "{verb}: {answer}");
    }
    let (status, snapshot_refused) = post(
        &orchestrator,
        &format!("/v1/sandboxes/{id}/snapshots"),
        json!({}),
    )
    .await?;
    assert_eq!(status, 409, "{snapshot_refused}");

    // Wake: the same id and URLs, its file, its cookie and its tabs.
    let (status, woken) = post(
        &orchestrator,
        &format!("/v1/sandboxes/{id}/wake"),
        json!({}),
    )
    .await?;
    assert_eq!(status, 200, "{woken}");
    assert_eq!(woken["status"], "ready");
    assert_eq!(woken["urls"], sandbox["urls"]);
    assert_eq!(
        shell(&orchestrator, &id, "cat ~/workspace/notes.txt").await?,
        "kept-across-hibernation"
    );
    let (_, cookies) = orchestrator
        .get(&format!("/v1/sandboxes/{id}/api/v1/browser/cookies"))
        .await?;
    assert!(cookies.to_string().contains("alice-42"), "{cookies}");
    orchestrator
        .wait_for("the tabs restored", Duration::from_secs(20), async || {
            let Ok((_, tabs)) = orchestrator
                .get(&format!("/v1/sandboxes/{id}/api/v1/browser/tabs"))
                .await
            else {
                return false;
            };
            tab_urls(&tabs) == tabs_before
        })
        .await?;
    let (status, again) = post(
        &orchestrator,
        &format!("/v1/sandboxes/{id}/wake"),
        json!({}),
    )
    .await?;
    assert_eq!(status, 409, "{again}");
    assert!(again.to_string().contains("not hibernated"), "{again}");

    // A snapshot holds the home but no secret.
    docker(&[
        "exec",
        "-u",
        "agent",
        &container_name(&id),
        "sh",
        "-c",
        "echo 'export OPENAI_API_KEY=sk-planted-3e1f' >> ~/.bash_history",
    ])?;
    let vnc_passwords = docker(&[
        "exec",
        "-u",
        "agent",
        &container_name(&id),
        "cat",
        "/run/sandboxd/vnc-passwords",
    ])?;
    let (status, snapshot) = post(
        &orchestrator,
        &format!("/v1/sandboxes/{id}/snapshots"),
        json!({}),
    )
    .await?;
    assert_eq!(status, 201, "{snapshot}");
    let snapshot_id = snapshot["id"].as_str().context("snapshot id")?.to_string();
    assert_eq!(snapshot["status"], "ready");
    assert_eq!(snapshot["parent_sandbox_id"], id.as_str());
    assert!(snapshot["size_bytes"].as_i64() > Some(0), "{snapshot}");
    // The sandbox goes on after the brief hold: its browser is back with its tabs.
    orchestrator
        .wait_for(
            "the browser back after the snapshot",
            Duration::from_secs(20),
            async || {
                let Ok((_, tabs)) = orchestrator
                    .get(&format!("/v1/sandboxes/{id}/api/v1/browser/tabs"))
                    .await
                else {
                    return false;
                };
                tab_urls(&tabs) == tabs_before
            },
        )
        .await?;
    let archive = std::fs::read(
        orchestrator
            .data_dir
            .join(format!("snapshots/{snapshot_id}.tar")),
    )?;
    assert_eq!(
        archive.len() as i64,
        snapshot["size_bytes"].as_i64().unwrap()
    );
    let contains = |needle: &str| {
        archive
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
    };
    assert!(contains("kept-across-hibernation"), "the file is in it");
    let sandbox_key = keyring.sandbox_key(&id);
    assert!(
        !contains(&sandbox_key),
        "the sandbox's key is in the snapshot"
    );
    assert!(
        !contains("sk-planted-3e1f"),
        "the shell history is in the snapshot"
    );
    for password in vnc_passwords.split_whitespace().filter(|p| p.len() >= 6) {
        assert!(!contains(password), "a VNC password is in the snapshot");
    }
    assert!(
        !contains("SingletonLock"),
        "Chromium's lock is in the snapshot"
    );
    let (_, listed) = orchestrator.get("/v1/snapshots").await?;
    assert_eq!(
        listed["snapshots"][0]["id"],
        snapshot_id.as_str(),
        "{listed}"
    );

    // Five forks: each has the files and its own key.
    let (status, forked) = post(
        &orchestrator,
        &format!("/v1/sandboxes/{id}/fork"),
        json!({"count": 5, "metadata": {"fork": "yes"}}),
    )
    .await?;
    assert_eq!(status, 201, "{forked}");
    let forks: Vec<String> = forked["sandboxes"]
        .as_array()
        .context("sandboxes")?
        .iter()
        .filter_map(|s| s["id"].as_str().map(str::to_string))
        .collect();
    assert_eq!(forks.len(), 5, "{forked}");
    assert_eq!(forked["snapshot"], Value::Null);
    for fork in &forks {
        assert_eq!(
            shell(&orchestrator, fork, "cat ~/workspace/notes.txt").await?,
            "kept-across-hibernation",
            "{fork}"
        );
    }
    let address = |sandbox: &str| -> anyhow::Result<String> {
        let inspected: Value =
            serde_json::from_str(&docker(&["inspect", &container_name(sandbox)])?)?;
        inspected[0]["NetworkSettings"]["Networks"]
            .as_object()
            .and_then(|networks| networks.values().next())
            .and_then(|n| n["IPAddress"].as_str())
            .map(str::to_string)
            .context("address")
    };
    let direct = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let (first, second) = (&forks[0], &forks[1]);
    let second_url = format!("http://{}:8080/v1/sandbox", address(second)?);
    let with_first_key = direct
        .get(&second_url)
        .bearer_auth(keyring.sandbox_key(first))
        .send()
        .await?;
    assert_eq!(with_first_key.status(), 401, "one fork's key opens another");
    let with_own_key = direct
        .get(&second_url)
        .bearer_auth(keyring.sandbox_key(second))
        .send()
        .await?;
    assert_eq!(with_own_key.status(), 200);
    let (_, listed) = orchestrator.get("/v1/snapshots").await?;
    assert_eq!(
        listed["snapshots"].as_array().map(Vec::len),
        Some(1),
        "the fork's own snapshot went: {listed}"
    );

    // Bad input: named, nothing changed.
    for (body, field) in [
        (json!({"count": 0}), "count"),
        (json!({"count": 1000}), "count"),
        (json!({"count": 2, "extra": 1}), "extra"),
    ] {
        let (status, answer) = post(
            &orchestrator,
            &format!("/v1/sandboxes/{id}/fork"),
            body.clone(),
        )
        .await?;
        assert_eq!(status, 422, "{body}: {answer}");
        assert!(answer.to_string().contains(field), "{body}: {answer}");
    }
    let (status, answer) = post(
        &orchestrator,
        "/v1/sandboxes",
        json!({"snapshot": "snp-nosuchsnapshot"}),
    )
    .await?;
    assert_eq!(status, 422, "{answer}");
    assert!(answer.to_string().contains("snapshot"), "{answer}");
    for path in [
        "/v1/sandboxes/sbx-nosuchsandbox/hibernate",
        "/v1/sandboxes/sbx-nosuchsandbox/wake",
        "/v1/sandboxes/sbx-nosuchsandbox/snapshots",
    ] {
        let (status, answer) = post(&orchestrator, path, json!({})).await?;
        assert_eq!(status, 404, "{path}: {answer}");
    }
    let (status, _) = orchestrator.get("/v1/snapshots/snp-nosuchsnapshot").await?;
    assert_eq!(status, 404);
    assert_eq!(orchestrator.containers().len(), 6, "nothing new was made");

    // Another key sees none of it.
    let (status, other) = post(&orchestrator, "/v1/keys", json!({"name": "someone-else"})).await?;
    assert_eq!(status, 201, "{other}");
    let other_key = other["key"].as_str().context("key")?.to_string();
    let (_, theirs) = orchestrator
        .call(Method::GET, "/v1/snapshots", Some(&other_key), None)
        .await?;
    assert_eq!(theirs["snapshots"], json!([]), "{theirs}");
    let (status, _) = orchestrator
        .call(
            Method::GET,
            &format!("/v1/snapshots/{snapshot_id}"),
            Some(&other_key),
            None,
        )
        .await?;
    assert_eq!(status, 404);
    for verb in ["hibernate", "snapshots", "fork"] {
        let (status, answer) = post_as(
            &orchestrator,
            &other_key,
            &format!("/v1/sandboxes/{id}/{verb}"),
            json!({"count": 1}),
        )
        .await?;
        assert!(status == 404 || status == 422, "{verb}: {status} {answer}");
    }
    let (status, answer) = post_as(
        &orchestrator,
        &other_key,
        "/v1/sandboxes",
        json!({"snapshot": snapshot_id}),
    )
    .await?;
    assert_eq!(status, 422, "another key starts from a snapshot: {answer}");

    // Deleting the snapshot removes its archive; the sandboxes go.
    let (status, _) = orchestrator
        .call(
            Method::DELETE,
            &format!("/v1/snapshots/{snapshot_id}"),
            Some(ADMIN_KEY),
            None,
        )
        .await?;
    assert_eq!(status, 204);
    assert!(
        !orchestrator
            .data_dir
            .join(format!("snapshots/{snapshot_id}.tar"))
            .exists()
    );
    for sandbox in forks.iter().chain([&id]) {
        assert_eq!(orchestrator.delete(sandbox).await?, 204);
    }
    assert!(orchestrator.containers().is_empty());
    Ok(())
}
