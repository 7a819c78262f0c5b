//! Requests without a valid key or token are refused: only health answers without a key, a user
//! key sees only its own sandboxes and no keys until it is revoked, viewer tokens are required,
//! scoped to one sandbox, traded for a cookie, open CDP only for control, and are revoked at once.

use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{ADMIN_KEY, Options, Orchestrator};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_a_valid_key_or_token_are_refused() -> anyhow::Result<()> {
    let orchestrator = Orchestrator::start(Options::default())?;
    without_a_valid_key_only_health_answers(&orchestrator).await?;
    let a = orchestrator.create(json!({})).await?;
    let b = orchestrator.create(json!({})).await?;
    let a_id = a["id"].as_str().unwrap();
    let b_id = b["id"].as_str().unwrap();
    a_user_key_sees_only_its_own_sandboxes_and_no_keys_until_revoked(&orchestrator, a_id).await?;
    let token_a = viewer_tokens_are_required_scoped_to_one_sandbox_and_traded_for_a_cookie(
        &orchestrator,
        a_id,
        b_id,
    )
    .await?;
    a_view_token_does_not_open_cdp_a_control_token_does(&orchestrator, a_id, &token_a).await?;
    a_revoked_token_is_refused_at_once(&orchestrator, a_id, &token_a).await?;
    bad_token_requests_are_refused(&orchestrator, a_id).await?;
    Ok(())
}

async fn without_a_valid_key_only_health_answers(
    orchestrator: &Orchestrator,
) -> anyhow::Result<()> {
    let (status, health) = orchestrator
        .call(Method::GET, "/healthz", None, None)
        .await?;
    assert_eq!((status, &health["status"]), (200, &json!("ok")));
    let (status, error) = orchestrator
        .call(Method::GET, "/v1/sandboxes", None, None)
        .await?;
    assert_eq!(
        (status, &error["error"]["code"]),
        (401, &json!("unauthorized"))
    );
    let (status, _) = orchestrator
        .call(Method::GET, "/v1/sandboxes", Some("abk_not-a-key"), None)
        .await?;
    assert_eq!(status, 401);
    let (status, _) = orchestrator
        .call(Method::GET, "/metrics", None, None)
        .await?;
    assert_eq!(status, 401);
    Ok(())
}

async fn a_user_key_sees_only_its_own_sandboxes_and_no_keys_until_revoked(
    orchestrator: &Orchestrator,
    a_id: &str,
) -> anyhow::Result<()> {
    // A user key sees only its own sandboxes; keys are admin business.
    let (status, created) = orchestrator
        .call(
            Method::POST,
            "/v1/keys",
            Some(ADMIN_KEY),
            Some(json!({"name": "alice"})),
        )
        .await?;
    assert_eq!(status, 201, "{created}");
    let alice = created["key"].as_str().unwrap().to_string();
    let alice_id = created["id"].as_str().unwrap().to_string();
    let (status, list) = orchestrator
        .call(Method::GET, "/v1/sandboxes", Some(&alice), None)
        .await?;
    assert_eq!(
        (status, list["sandboxes"].as_array().map(Vec::len)),
        (200, Some(0))
    );
    let (status, _) = orchestrator
        .call(
            Method::GET,
            &format!("/v1/sandboxes/{a_id}"),
            Some(&alice),
            None,
        )
        .await?;
    assert_eq!(status, 404);
    let (status, _) = orchestrator
        .call(
            Method::GET,
            &format!("/v1/sandboxes/{a_id}/api/readyz"),
            Some(&alice),
            None,
        )
        .await?;
    assert_eq!(status, 404);
    let (status, _) = orchestrator
        .call(
            Method::DELETE,
            &format!("/v1/sandboxes/{a_id}"),
            Some(&alice),
            None,
        )
        .await?;
    assert_eq!(status, 404);
    let (status, _) = orchestrator
        .call(Method::GET, "/v1/keys", Some(&alice), None)
        .await?;
    assert_eq!(status, 403);
    let (status, _) = orchestrator
        .call(Method::GET, "/metrics", Some(&alice), None)
        .await?;
    assert_eq!(status, 403);
    let (status, keys) = orchestrator.get("/v1/keys").await?;
    assert_eq!(status, 200);
    assert!(
        !keys.to_string().contains(&alice),
        "key text is never listed"
    );
    // Revoked: refused at once.
    let (status, _) = orchestrator
        .call(
            Method::DELETE,
            &format!("/v1/keys/{alice_id}"),
            Some(ADMIN_KEY),
            None,
        )
        .await?;
    assert_eq!(status, 204);
    let (status, error) = orchestrator
        .call(Method::GET, "/v1/sandboxes", Some(&alice), None)
        .await?;
    assert_eq!(status, 401, "{error}");
    Ok(())
}

async fn viewer_tokens_are_required_scoped_to_one_sandbox_and_traded_for_a_cookie(
    orchestrator: &Orchestrator,
    a_id: &str,
    b_id: &str,
) -> anyhow::Result<Value> {
    // Viewer tokens: required, scoped to one sandbox, revocable.
    let (status, _) = orchestrator
        .call(
            Method::GET,
            &format!("/v1/sandboxes/{a_id}/vnc/"),
            None,
            None,
        )
        .await?;
    assert_eq!(status, 401);
    let token_a = orchestrator.token(a_id, "control").await?;
    let token_a_text = token_a["token"].as_str().unwrap();
    let viewer_url = token_a["viewer_url"].as_str().unwrap();
    assert!(
        viewer_url.ends_with(&format!("/v1/sandboxes/{a_id}/vnc/?token={token_a_text}")),
        "{viewer_url}"
    );
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let response = no_redirects.get(viewer_url).send().await?;
    assert_eq!(response.status(), 303, "the token is traded for a cookie");
    assert_eq!(
        response.headers()["location"],
        format!("/v1/sandboxes/{a_id}/vnc/").as_str(),
        "and taken out of the address"
    );
    let cookie = response.headers()["set-cookie"].to_str()?.to_string();
    for attribute in [
        "HttpOnly",
        "SameSite=Strict",
        &format!("Path=/v1/sandboxes/{a_id}/vnc"),
    ] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    let session = cookie.split(';').next().unwrap().to_string();
    let page = no_redirects
        .get(orchestrator.u(&format!("/v1/sandboxes/{a_id}/vnc/")))
        .header("cookie", &session)
        .send()
        .await?;
    assert_eq!(page.status(), 200);
    assert!(
        page.headers()["content-security-policy"]
            .to_str()?
            .contains("script-src 'self'")
    );
    assert!(page.text().await?.contains("Agentbox · live desktop"));
    let (status, error) = orchestrator
        .call(
            Method::GET,
            &format!("/v1/sandboxes/{b_id}/vnc/?token={token_a_text}"),
            None,
            None,
        )
        .await?;
    assert_eq!(status, 403, "a token for another sandbox: {error}");
    let tampered = format!("{}x", &token_a_text[..token_a_text.len() - 1]);
    let (status, _) = orchestrator
        .call(
            Method::GET,
            &format!("/v1/sandboxes/{a_id}/vnc/?token={tampered}"),
            None,
            None,
        )
        .await?;
    assert_eq!(status, 401);
    Ok(token_a)
}

async fn a_view_token_does_not_open_cdp_a_control_token_does(
    orchestrator: &Orchestrator,
    a_id: &str,
    token_a: &Value,
) -> anyhow::Result<()> {
    let token_a_text = token_a["token"].as_str().unwrap();
    // A view token does not open CDP; a control token does.
    let view_a = orchestrator.token(a_id, "view").await?;
    let (status, _) = orchestrator
        .call(
            Method::GET,
            &format!(
                "/v1/sandboxes/{a_id}/cdp/json/version?token={}",
                view_a["token"].as_str().unwrap()
            ),
            None,
            None,
        )
        .await?;
    assert_eq!(status, 403);
    let (status, version) = orchestrator
        .call(
            Method::GET,
            &format!("/v1/sandboxes/{a_id}/cdp/json/version?token={token_a_text}"),
            None,
            None,
        )
        .await?;
    assert_eq!(status, 200, "{version}");
    let (status, _) = orchestrator
        .call(
            Method::GET,
            &format!("/v1/sandboxes/{a_id}/cdp/json/version"),
            None,
            None,
        )
        .await?;
    assert_eq!(status, 401);
    Ok(())
}

async fn a_revoked_token_is_refused_at_once(
    orchestrator: &Orchestrator,
    a_id: &str,
    token_a: &Value,
) -> anyhow::Result<()> {
    let token_a_text = token_a["token"].as_str().unwrap();
    // Revocation.
    let (status, revoked) = orchestrator
        .call(
            Method::DELETE,
            &format!(
                "/v1/sandboxes/{a_id}/tokens/{}",
                token_a["id"].as_str().unwrap()
            ),
            Some(ADMIN_KEY),
            None,
        )
        .await?;
    assert_eq!((status, &revoked["revoked"]), (200, &json!(1)));
    let (status, _) = orchestrator
        .call(
            Method::GET,
            &format!("/v1/sandboxes/{a_id}/vnc/?token={token_a_text}"),
            None,
            None,
        )
        .await?;
    assert_eq!(status, 401);
    Ok(())
}

async fn bad_token_requests_are_refused(
    orchestrator: &Orchestrator,
    a_id: &str,
) -> anyhow::Result<()> {
    // Bad token requests.
    let (status, error) = orchestrator
        .call(
            Method::POST,
            &format!("/v1/sandboxes/{a_id}/tokens"),
            Some(ADMIN_KEY),
            Some(json!({"scope": "admin"})),
        )
        .await?;
    assert_eq!(status, 422, "{error}");
    let (status, _) = orchestrator
        .call(
            Method::POST,
            &format!("/v1/sandboxes/{a_id}/tokens"),
            Some(ADMIN_KEY),
            Some(json!({"scope": "view", "ttl_secs": 0})),
        )
        .await?;
    assert_eq!(status, 422);
    Ok(())
}
