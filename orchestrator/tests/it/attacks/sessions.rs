//! Finding 4 of the attacker review (issue 7): sessions outlived their authority (expired and
//! revoked tokens, revoked keys, deleted sandboxes); and the attack review's memory finding, one
//! key pinning the orchestrator's memory with unfinished WebSocket messages.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::SinkExt;
use reqwest::Method;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use super::{cdp_call, closed_within, create_as, new_key, ws, ws_url};
use crate::common::{ADMIN_KEY, Options, Orchestrator};

/// Finding 4: sessions outlived their authority (expired and revoked tokens, revoked keys).
/// Then, on the same sandbox, the attack review's memory finding: one key pinned the
/// orchestrator's memory with unfinished WebSocket messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finding_4_sessions_end_when_their_token_or_key_does() -> anyhow::Result<()> {
    let orchestrator = Orchestrator::start(Options {
        extra_args: vec![
            "--relays-per-key".into(),
            RELAYS_PER_KEY.to_string(),
            "--relay-unfinished-secs".into(),
            "3".into(),
        ],
        ..Options::default()
    })?;
    let (alice, alice_id) = new_key(&orchestrator, "alice").await?;
    let sandbox = create_as(&orchestrator, &alice).await?;
    let id = sandbox["id"].as_str().context("id")?.to_string();
    let cdp_url = ws_url(&orchestrator, &format!("/v1/sandboxes/{id}/cdp"));
    a_session_on_a_short_token_ends_when_the_token_expires(&orchestrator, &id, &alice, &cdp_url)
        .await?;
    revoking_a_key_ends_its_sessions_and_its_tokens(
        &orchestrator,
        &id,
        &alice,
        &alice_id,
        &cdp_url,
    )
    .await?;
    one_key_cannot_pin_the_orchestrators_memory(&orchestrator, &cdp_url).await?;
    deleting_the_sandbox_ends_the_sessions_on_it(&orchestrator, &id, &cdp_url).await?;
    Ok(())
}

/// A control token for sandbox `id`, issued by `key`, valid for `ttl` seconds.
async fn control_token(
    orchestrator: &Orchestrator,
    id: &str,
    key: &str,
    ttl: i64,
) -> anyhow::Result<Value> {
    let (status, token) = orchestrator
        .call(
            Method::POST,
            &format!("/v1/sandboxes/{id}/tokens"),
            Some(key),
            Some(json!({"scope": "control", "ttl_secs": ttl})),
        )
        .await?;
    anyhow::ensure!(status == 201, "{token}");
    Ok(token)
}

async fn a_session_on_a_short_token_ends_when_the_token_expires(
    orchestrator: &Orchestrator,
    id: &str,
    alice: &str,
    cdp_url: &str,
) -> anyhow::Result<()> {
    // A CDP session on a 5-second token ends at 5 s (it still worked at 7 s before).
    let short = control_token(orchestrator, id, alice, 5).await?;
    let opened = Instant::now();
    let mut session = ws(
        &format!("{cdp_url}?token={}", short["token"].as_str().unwrap()),
        &[],
    )
    .await
    .unwrap();
    cdp_call(&mut session, 1, "Browser.getVersion").await?;
    let reason = closed_within(&mut session, Duration::from_secs(15)).await?;
    let lived = opened.elapsed();
    assert!(lived < Duration::from_secs(7), "lived {lived:?}");
    assert!(reason.contains("expired"), "{reason}");
    Ok(())
}

async fn revoking_a_key_ends_its_sessions_and_its_tokens(
    orchestrator: &Orchestrator,
    id: &str,
    alice: &str,
    alice_id: &str,
    cdp_url: &str,
) -> anyhow::Result<()> {
    // Alice's open sessions: CDP with her key, a terminal through the API, CDP and VNC with a
    // token she issued. Revoking her key ends all of them, and her tokens open nothing more.
    let bearer = format!("Bearer {alice}");
    let mut by_key = ws(cdp_url, &[("authorization", &bearer)]).await.unwrap();
    cdp_call(&mut by_key, 1, "Browser.getVersion").await?;
    let mut terminal = ws(
        &ws_url(orchestrator, &format!("/v1/sandboxes/{id}/api/v1/shell/ws")),
        &[("authorization", &bearer)],
    )
    .await
    .unwrap();
    let long = control_token(orchestrator, id, alice, 3600).await?;
    let long_token = long["token"].as_str().unwrap().to_string();
    let mut by_token = ws(&format!("{cdp_url}?token={long_token}"), &[])
        .await
        .unwrap();
    cdp_call(&mut by_token, 1, "Browser.getVersion").await?;
    let vnc_url = ws_url(
        orchestrator,
        &format!("/v1/sandboxes/{id}/vnc/websockify?token={long_token}"),
    );
    let mut vnc = ws(&vnc_url, &[]).await.unwrap();
    // Plain HTTP answers that stream: a file watch's event stream through the API (it went on
    // delivering after the key was revoked).
    let mut events = a_file_watch_event_stream(orchestrator, id, alice).await?;

    let revoked = Instant::now();
    let (status, _) = orchestrator
        .call(
            Method::DELETE,
            &format!("/v1/keys/{alice_id}"),
            Some(ADMIN_KEY),
            None,
        )
        .await?;
    assert_eq!(status, 204);
    for (name, socket) in [
        ("CDP by key", &mut by_key),
        ("terminal", &mut terminal),
        ("CDP by token", &mut by_token),
        ("VNC by token", &mut vnc),
    ] {
        closed_within(socket, Duration::from_secs(5))
            .await
            .with_context(|| format!("{name} after the key was revoked"))?;
    }
    // The event stream is cut off (an error, not a clean end), whatever it still had to send.
    let cut = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match events.chunk().await {
                Ok(Some(_)) => continue,
                Ok(None) => return "ended cleanly",
                Err(_) => return "cut off",
            }
        }
    })
    .await
    .context("the event stream outlived the key")?;
    assert_eq!(cut, "cut off");
    assert!(revoked.elapsed() < Duration::from_secs(5));
    assert!(
        ws(&format!("{cdp_url}?token={long_token}"), &[])
            .await
            .is_err(),
        "a token issued by a revoked key opens nothing"
    );
    assert!(ws(&vnc_url, &[]).await.is_err());
    Ok(())
}

/// A file watch's event stream through the API, as `alice`, once its first event arrived.
async fn a_file_watch_event_stream(
    orchestrator: &Orchestrator,
    id: &str,
    alice: &str,
) -> anyhow::Result<reqwest::Response> {
    let (status, watch) = orchestrator
        .call(
            Method::POST,
            &format!("/v1/sandboxes/{id}/api/v1/file/watch"),
            Some(alice),
            Some(json!({"path": "."})),
        )
        .await?;
    assert_eq!(status, 200, "{watch}");
    let watcher = watch["watcher_id"].as_str().context("watcher_id")?;
    let mut events = orchestrator
        .http
        .get(orchestrator.u(&format!(
            "/v1/sandboxes/{id}/api/v1/file/watch/{watcher}/events"
        )))
        .bearer_auth(alice)
        .header("accept", "text/event-stream")
        .send()
        .await?;
    assert_eq!(events.status(), 200);
    let first = events.chunk().await?.context("the stream's first event")?;
    assert!(
        String::from_utf8_lossy(&first).contains("watch_started"),
        "{first:?}"
    );
    Ok(events)
}

async fn deleting_the_sandbox_ends_the_sessions_on_it(
    orchestrator: &Orchestrator,
    id: &str,
    cdp_url: &str,
) -> anyhow::Result<()> {
    // Deleting the sandbox ends the sessions on it too.
    let mut admin = ws(
        cdp_url,
        &[("authorization", &format!("Bearer {ADMIN_KEY}"))],
    )
    .await
    .unwrap();
    assert_eq!(orchestrator.delete(id).await?, 204);
    closed_within(&mut admin, Duration::from_secs(5)).await?;
    Ok(())
}

/// The relay sessions one key may hold in [`finding_4_sessions_end_when_their_token_or_key_does`].
const RELAYS_PER_KEY: usize = 8;

/// The attack review's finding (three sockets, each with a half-sent 200 MiB message, took the
/// orchestrator from 29 to 629 MiB, one held for 90 s): with the admin key, as many CDP
/// sockets as the key may hold, each sending the first 30 MiB of a message it never finishes.
/// The key's budget (64 MiB) refuses the sockets that would pass it, the others are cut off once
/// their message stays unfinished (3 s here), one socket more is a 429, and the orchestrator's
/// memory grows by what the budget allows, not by what was sent (240 MiB; the code before grew
/// by all of it).
async fn one_key_cannot_pin_the_orchestrators_memory(
    orchestrator: &Orchestrator,
    cdp_url: &str,
) -> anyhow::Result<()> {
    use tokio_tungstenite::tungstenite::protocol::frame::Frame;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
    const FRAGMENT: usize = 30 * 1024 * 1024;
    let bearer = format!("Bearer {ADMIN_KEY}");
    let before = orchestrator.rss_mib()?;
    let mut sockets = Vec::new();
    for _ in 0..RELAYS_PER_KEY {
        sockets.push(ws(cdp_url, &[("authorization", &bearer)]).await.unwrap());
    }
    assert_eq!(
        ws(cdp_url, &[("authorization", &bearer)]).await.err(),
        Some("HTTP 429".to_string()),
        "one socket more than the key may hold"
    );
    let began = Instant::now();
    let mut peak = before;
    for socket in &mut sockets {
        let frame = Frame::message(vec![b'x'; FRAGMENT], OpCode::Data(Data::Text), false);
        // A socket the budget refused may be closed while its fragment is still being sent.
        let _ = socket.send(Message::Frame(frame)).await;
        peak = peak.max(orchestrator.rss_mib()?);
    }
    let mut reasons = Vec::new();
    for socket in &mut sockets {
        reasons.push(closed_within(socket, Duration::from_secs(20)).await?);
        peak = peak.max(orchestrator.rss_mib()?);
    }
    let held = began.elapsed();
    let over_budget = reasons
        .iter()
        .filter(|r| r.contains("over the limit"))
        .count();
    let timed_out = reasons
        .iter()
        .filter(|r| r.contains("stayed unfinished"))
        .count();
    eprintln!(
        "relay memory: {before:.0} MiB before, {peak:.0} MiB at the peak; closes: {reasons:?} \
         after {held:?}"
    );
    // How many are refused by the budget and how many time out depends on how fast the
    // fragments travel (a socket cut off frees its share); both happen, and nothing else.
    assert!(over_budget >= 1, "{reasons:?}");
    assert!(timed_out >= 1, "{reasons:?}");
    assert_eq!(over_budget + timed_out, RELAYS_PER_KEY, "{reasons:?}");
    assert!(held < Duration::from_secs(20), "held {held:?}");
    // What the key's budget lets it hold (64 MiB), with the copies a growing read buffer
    // leaves behind until the allocator reuses them: measured 22 -> 152 MiB here, for 240 MiB
    // sent; the code before held all of it (the review: 29 -> 629 MiB with three sockets).
    assert!(
        peak - before < 3.0 * 64.0,
        "the orchestrator grew from {before:.0} to {peak:.0} MiB"
    );
    // The key's places came back: a new socket opens and works.
    let mut again = ws(cdp_url, &[("authorization", &bearer)]).await.unwrap();
    cdp_call(&mut again, 1, "Browser.getVersion").await?;
    Ok(())
}
