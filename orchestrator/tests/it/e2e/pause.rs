//! Pause and resume with the real Docker Engine and the real sandbox: a page's in-memory state
//! and a process survive a freeze longer than the sandbox's dead-man switch, the proxies answer
//! 409 naming the state (or resume it with `auto_resume`), a restarted orchestrator adopts a
//! paused sandbox, and bad requests change nothing.

use std::time::{Duration, Instant};

use agentbox_tests::docker;
use anyhow::Context;
use reqwest::Method;
use serde_json::{Value, json};

use super::sandbox_calls::{eval, post};
use crate::common::{Options, Orchestrator, container_name};

fn docker_state(id: &str) -> anyhow::Result<Value> {
    let inspected: Value = serde_json::from_str(&docker(&["inspect", &container_name(id)])?)?;
    Ok(inspected[0]["State"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_sandbox_keeps_its_page_and_processes_and_resumes_where_it_was()
-> anyhow::Result<()> {
    // Heartbeats every second: the sandbox's dead-man switch fires after 3 s without one, far
    // shorter than the freeze below.
    let mut orchestrator = Orchestrator::start(Options {
        heartbeat_secs: 1,
        ..Options::default()
    })?;
    let (plain, auto) = tokio::join!(
        orchestrator.create(json!({})),
        orchestrator.create(json!({"auto_resume": true}))
    );
    let (plain, auto) = (plain?, auto?);
    let id = plain["id"].as_str().context("id")?.to_string();
    let auto_id = auto["id"].as_str().context("id")?.to_string();
    assert_eq!(plain["auto_resume"], false);
    assert_eq!(auto["auto_resume"], true);

    // A counter in the page, a process in the shell.
    eval(
        &orchestrator,
        &id,
        "window.marker = 'kept-7f3a'; window.count = 0; \
         setInterval(() => { window.count += 1; }, 100); 'started'",
    )
    .await?;
    let sleeper = docker(&[
        "exec",
        "-u",
        "agent",
        &container_name(&id),
        "sh",
        "-c",
        "setsid sleep 900 >/dev/null 2>&1 & echo $!",
    ])?;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let before = eval(&orchestrator, &id, "window.count")
        .await?
        .as_i64()
        .context("count")?;
    let counted_at = Instant::now();

    let viewer = orchestrator.token(&id, "view").await?;
    let viewer = viewer["token"].as_str().context("token")?.to_string();
    let (status, paused) = post(
        &orchestrator,
        &format!("/v1/sandboxes/{id}/pause"),
        json!({}),
    )
    .await?;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused["status"], "paused");
    assert!(paused["paused_at"].is_string(), "{paused}");
    let state = docker_state(&id)?;
    assert_eq!(
        (state["Paused"].as_bool(), state["Running"].as_bool()),
        (Some(true), Some(true)),
        "{state}"
    );

    // The proxies name the state; pausing again is refused; the list filter finds it.
    let (status, refused) = orchestrator
        .get(&format!("/v1/sandboxes/{id}/api/readyz"))
        .await?;
    assert_eq!(status, 409, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("paused") && message.contains("/resume"),
        "{refused}"
    );
    let (status, again) = post(
        &orchestrator,
        &format!("/v1/sandboxes/{id}/pause"),
        json!({}),
    )
    .await?;
    assert_eq!(status, 409, "{again}");
    // A viewer sees the state: its page loads, its session says paused (the page shows it).
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let page = no_redirects
        .get(orchestrator.u(&format!("/v1/sandboxes/{id}/vnc/?token={viewer}")))
        .send()
        .await?;
    assert_eq!(page.status(), 303);
    let session = no_redirects
        .get(orchestrator.u(&format!("/v1/sandboxes/{id}/vnc/session?token={viewer}")))
        .send()
        .await?;
    assert_eq!(session.status(), 409);
    let said: Value = session.json().await?;
    assert!(
        said["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("paused"),
        "{said}"
    );
    let (_, listed) = orchestrator.get("/v1/sandboxes?status=paused").await?;
    let listed: Vec<&str> = listed["sandboxes"]
        .as_array()
        .context("sandboxes")?
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(listed, [id.as_str()]);

    // Frozen for longer than the dead-man switch, and across a restart of the orchestrator
    // (the other one too: unpaused, it would stop by itself while no heartbeat reaches it).
    let (status, _) = post(
        &orchestrator,
        &format!("/v1/sandboxes/{auto_id}/pause"),
        json!({}),
    )
    .await?;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_secs(5)).await;
    orchestrator.kill9();
    orchestrator.restart()?;
    let (_, after_restart) = orchestrator.get(&format!("/v1/sandboxes/{id}")).await?;
    assert_eq!(after_restart["status"], "paused", "{after_restart}");

    let (status, resumed) = post(
        &orchestrator,
        &format!("/v1/sandboxes/{id}/resume"),
        json!({}),
    )
    .await?;
    assert_eq!(status, 200, "{resumed}");
    assert_eq!(resumed["status"], "ready");
    assert_eq!(resumed["paused_at"], Value::Null);
    let frozen_for = counted_at.elapsed();
    let after = eval(&orchestrator, &id, "window.count")
        .await?
        .as_i64()
        .context("count")?;
    assert_eq!(
        eval(&orchestrator, &id, "window.marker").await?,
        "kept-7f3a"
    );
    // The page went on from where it was: its count is still there, and it did not tick while
    // frozen (10 ticks a second would be 50 and more).
    assert!(
        after >= before,
        "count {before} -> {after}: the page was reloaded"
    );
    let could_have_ticked = frozen_for.as_millis() as i64 / 100;
    assert!(
        after - before < could_have_ticked - 30,
        "count {before} -> {after} in {frozen_for:?}: it ticked while paused"
    );
    assert!(
        docker(&["exec", &container_name(&id), "kill", "-0", sleeper.trim()]).is_ok(),
        "the shell's process survived the pause"
    );
    // Still alive a while later: the dead-man switch did not count the freeze as idleness
    // (counted, it fires at the thaw, before any heartbeat, and the container is gone by now),
    // and sandboxd said why.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let logs = agentbox_tests::docker_output(&["logs", &container_name(&id)])?;
    let logs = format!(
        "{}{}",
        String::from_utf8_lossy(&logs.stdout),
        String::from_utf8_lossy(&logs.stderr)
    );
    assert!(
        logs.contains("woke up late"),
        "sandboxd did not notice the freeze"
    );
    let (status, ready) = orchestrator
        .get(&format!("/v1/sandboxes/{id}/api/readyz"))
        .await?;
    assert_eq!((status, &ready["ready"]), (200, &json!(true)), "{ready}");
    let (status, not_paused) = post(
        &orchestrator,
        &format!("/v1/sandboxes/{id}/resume"),
        json!({}),
    )
    .await?;
    assert_eq!(status, 409, "{not_paused}");

    // auto_resume: the first call through the proxy thaws it and goes through.
    let (status, ready) = orchestrator
        .get(&format!("/v1/sandboxes/{auto_id}/api/readyz"))
        .await?;
    assert_eq!((status, &ready["ready"]), (200, &json!(true)), "{ready}");
    let (_, auto_now) = orchestrator
        .get(&format!("/v1/sandboxes/{auto_id}"))
        .await?;
    assert_eq!(auto_now["status"], "ready");
    assert_eq!(docker_state(&auto_id)?["Paused"], false);

    // Bad requests change nothing; a paused sandbox is deleted like any other.
    let (status, missing) =
        post(&orchestrator, "/v1/sandboxes/sbx-missing/pause", json!({})).await?;
    assert_eq!(status, 404, "{missing}");
    let (status, _) = orchestrator
        .call(
            Method::POST,
            &format!("/v1/sandboxes/{id}/pause"),
            None,
            None,
        )
        .await?;
    assert_eq!(status, 401);
    assert_eq!(
        orchestrator.get(&format!("/v1/sandboxes/{id}")).await?.1["status"],
        "ready"
    );
    let (status, _) = post(
        &orchestrator,
        &format!("/v1/sandboxes/{id}/pause"),
        json!({}),
    )
    .await?;
    assert_eq!(status, 200);
    assert_eq!(orchestrator.delete(&id).await?, 204);
    assert_eq!(orchestrator.delete(&auto_id).await?, 204);
    assert!(orchestrator.containers().is_empty());
    Ok(())
}
