//! The web console's security properties, each written as the attack it stops, against the
//! real router and real SQLite (a backend without containers: nothing here needs Docker; the
//! browser end to end is `tests/python/console/`).

use crate::in_process;

use std::collections::BTreeMap;

use agentbox_tests::router::{Answer, Call, send};
use axum::http::StatusCode;
use orchestrator::db::{
    ConsoleSessionRecord, RunRecord, RunStatus, SandboxRecord, SandboxStatus, Store,
};
use serde_json::{Value, json};

const ADMIN_KEY: &str = "console-test-admin-key-0123456789";
const HOST: &str = "127.0.0.1:8090";
const ORIGIN: &str = "http://127.0.0.1:8090";

struct Console {
    app: axum::Router,
    store: Store,
    runs: std::sync::Arc<orchestrator::runs::Runs>,
    data: tempfile::TempDir,
}

async fn console() -> Console {
    let fixture = in_process::start(ADMIN_KEY, ORIGIN, "console-test").await;
    Console {
        app: fixture.app,
        store: fixture.store,
        runs: fixture.runs,
        data: fixture.data,
    }
}

/// A request as this server's own page sends it.
fn from_page(call: Call) -> Call {
    call.header("host", HOST).header("origin", ORIGIN)
}

fn set_cookie(answer: &Answer) -> String {
    answer
        .header("set-cookie")
        .unwrap_or_else(|| panic!("a Set-Cookie in {answer:?}"))
        .to_string()
}

/// The `name=value` part of a Set-Cookie, as a browser sends it back.
fn cookie_pair(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap_or_default().to_string()
}

impl Console {
    async fn sign_in(&self, key: &str) -> String {
        let answer = send(
            &self.app,
            from_page(Call::post("/console/session")).json(&json!({"key": key})),
        )
        .await;
        assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.json());
        cookie_pair(&set_cookie(&answer))
    }

    async fn send(&self, call: Call) -> Answer {
        send(&self.app, call).await
    }

    /// A ready sandbox row (no container: enough for tokens and pages).
    async fn ready_sandbox(&self, id: &str, owner: &str) {
        let now = orchestrator::secret::now_ms();
        self.store
            .insert_sandbox(&SandboxRecord {
                id: id.into(),
                owner_key_id: Some(owner.into()),
                image: "agentbox/sandbox:latest".into(),
                status: SandboxStatus::Ready,
                pooled: false,
                container_id: Some("c".into()),
                address: Some("192.0.2.1".into()),
                instance: Some("console-test".into()),
                legacy_key: None,
                resolution: None,
                env: BTreeMap::new(),
                metadata: BTreeMap::new(),
                idle_timeout_secs: 600,
                max_lifetime_secs: 3600,
                created_at: now,
                ready_at: Some(now),
                expires_at: now + 3_600_000,
                last_active_at: now,
                ended_at: None,
                error: None,
                paused_at: None,
                auto_resume: false,
                idle_pause_secs: None,
                hibernated_at: None,
                idle_hibernate_secs: None,
                replica: None,
                control_open: true,
                control_seq: 0,
            })
            .await
            .expect("a sandbox row");
    }

    /// A finished run of `sandbox` (no driver picks it up).
    async fn finished_run(&self, id: &str, sandbox: &str, owner: &str) {
        self.run_ended_at(id, sandbox, owner, orchestrator::secret::now_ms())
            .await;
    }

    /// A run of `sandbox` that ended at `ended` (ms since the epoch).
    async fn run_ended_at(&self, id: &str, sandbox: &str, owner: &str, ended: i64) {
        let now = ended;
        self.store
            .insert_run(&RunRecord {
                id: id.into(),
                owner_key_id: owner.into(),
                task: "draw a triangle".into(),
                model: "script:draw-red-triangle.json".into(),
                sandbox_id: Some(sandbox.into()),
                sandbox_taken: false,
                status: RunStatus::Completed,
                limits: agent::Limits::default(),
                metadata: BTreeMap::new(),
                idempotency_key: None,
                request_hash: None,
                answer: Some("done".into()),
                reason: None,
                lease_owner: None,
                lease_expires_at: None,
                last_seq: 0,
                created_at: now,
                updated_at: now,
                ended_at: Some(now),
                context_id: None,
                message_id: None,
            })
            .await
            .expect("a run row");
    }

    async fn admin_key_id(&self) -> String {
        let answer = self.send(Call::get("/v1/keys").bearer(ADMIN_KEY)).await;
        answer.json()["keys"][0]["id"]
            .as_str()
            .expect("the admin key's id")
            .to_string()
    }
}

/// Signing in gives an HttpOnly, SameSite=Strict cookie holding a random secret, not the key;
/// the API answers to it.
#[tokio::test]
async fn sign_in_sets_a_strict_http_only_cookie_that_is_not_the_key() {
    let c = console().await;
    let answer = c
        .send(from_page(Call::post("/console/session")).json(&json!({"key": ADMIN_KEY})))
        .await;
    assert_eq!(answer.status, StatusCode::OK);
    let cookie = set_cookie(&answer);
    for part in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(part), "{part} in {cookie}");
    }
    assert!(
        !cookie.contains("Secure"),
        "plain HTTP: no Secure ({cookie})"
    );
    assert!(!cookie.contains(ADMIN_KEY), "the key is not the cookie");
    assert!(!String::from_utf8_lossy(&answer.body).contains(ADMIN_KEY));
    assert_eq!(answer.json()["is_admin"], true);
    let pair = cookie_pair(&cookie);
    let listed = c
        .send(Call::get("/v1/sandboxes").header("cookie", &pair))
        .await;
    assert_eq!(listed.status, StatusCode::OK, "{:?}", listed.json());
    // The row holds a hash: the secret itself is nowhere in the database file.
    let secret = pair.split_once('=').map(|(_, v)| v).unwrap_or_default();
    let db = std::fs::read(c.data.path().join("orchestrator.db")).expect("the database");
    assert!(
        !db.windows(secret.len()).any(|w| w == secret.as_bytes()),
        "the secret is not stored"
    );
}

/// Behind TLS the cookie is also Secure.
#[tokio::test]
async fn behind_tls_the_cookie_is_secure() {
    // Kept whole: its data directory holds the database.
    let fixture = in_process::start(ADMIN_KEY, "https://agentbox.example", "console-test").await;
    let app = fixture.app.clone();
    let answer = send(
        &app,
        Call::post("/console/session")
            .header("host", "agentbox.example")
            .header("origin", "https://agentbox.example")
            .json(&json!({"key": ADMIN_KEY})),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert!(set_cookie(&answer).contains("; Secure"), "{answer:?}");
}

/// A wrong key is a 401 that says so and names the field; an empty one a 422; no cookie.
#[tokio::test]
async fn a_wrong_key_is_refused_clearly_and_gets_no_cookie() {
    let c = console().await;
    let wrong = c
        .send(from_page(Call::post("/console/session")).json(&json!({"key": "abk_wrong"})))
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(wrong.header("set-cookie").is_none());
    let body = wrong.json();
    assert_eq!(body["error"]["message"], "unknown or revoked API key");
    assert_eq!(body["error"]["loc"], json!(["body", "key"]));
    let empty = c
        .send(from_page(Call::post("/console/session")).json(&json!({"key": "  "})))
        .await;
    assert_eq!(empty.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(empty.json()["error"]["loc"], json!(["body", "key"]));
    let missing = c
        .send(from_page(Call::post("/console/session")).json(&json!({})))
        .await;
    assert_eq!(missing.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        missing.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("key"),
        "{:?}",
        missing.json()
    );
}

/// Login CSRF: another site's form or script cannot sign a browser in (or out).
#[tokio::test]
async fn another_site_cannot_sign_a_browser_in_or_out() {
    let c = console().await;
    for (origin, site) in [
        (Some("http://evil.example"), None),
        (None, None),
        (Some("null"), None),
        (Some(ORIGIN), Some("cross-site")),
    ] {
        let mut call = Call::post("/console/session").header("host", HOST);
        if let Some(origin) = origin {
            call = call.header("origin", origin);
        }
        if let Some(site) = site {
            call = call.header("sec-fetch-site", site);
        }
        let answer = c.send(call.json(&json!({"key": ADMIN_KEY}))).await;
        assert_eq!(
            answer.status,
            StatusCode::FORBIDDEN,
            "origin {origin:?} site {site:?}"
        );
        assert!(answer.header("set-cookie").is_none());
    }
    let cookie = c.sign_in(ADMIN_KEY).await;
    let out = c
        .send(
            Call::delete("/console/session")
                .header("host", HOST)
                .header("origin", "http://evil.example")
                .header("cookie", &cookie),
        )
        .await;
    assert_eq!(out.status, StatusCode::FORBIDDEN);
    let still = c
        .send(Call::get("/console/session").header("cookie", &cookie))
        .await;
    assert_eq!(still.status, StatusCode::OK, "still signed in");
}

/// CSRF: with the console's cookie, a request that changes state must come from this server's
/// own origin; reads pass (SameSite=Strict keeps the cookie off other sites' requests anyway).
#[tokio::test]
async fn state_changes_riding_on_the_cookie_need_this_origin() {
    let c = console().await;
    let cookie = c.sign_in(ADMIN_KEY).await;
    let attacks = [
        Call::post("/v1/keys")
            .header("origin", "http://evil.example")
            .json(&json!({"name": "stolen"})),
        Call::post("/v1/keys").json(&json!({"name": "stolen"})),
        Call::post("/v1/keys")
            .header("origin", ORIGIN)
            .header("sec-fetch-site", "same-site")
            .json(&json!({"name": "stolen"})),
        Call::delete("/v1/sandboxes/sbx-x").header("origin", "http://evil.example"),
        Call::post("/v1/runs")
            .header("origin", "http://evil.example")
            .json(&json!({"task": "t", "model": "script:x.json"})),
    ];
    for attack in attacks {
        let answer = c
            .send(attack.header("host", HOST).header("cookie", &cookie))
            .await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{:?}", answer.json());
    }
    let keys = c.send(Call::get("/v1/keys").bearer(ADMIN_KEY)).await;
    assert_eq!(
        keys.json()["keys"].as_array().map(Vec::len),
        Some(1),
        "no key was made"
    );
    // The same request from the console's own page goes through.
    let made = c
        .send(
            from_page(Call::post("/v1/keys"))
                .header("cookie", &cookie)
                .json(&json!({"name": "ci"})),
        )
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{:?}", made.json());
}

/// Issue 28: a JSON body labelled `text/plain` (or as a form) was accepted. That is what a form on
/// any site can send without asking first; each such call is refused with 415 before anything
/// changes, whether it rides on the console's cookie or carries the key.
#[tokio::test]
async fn a_json_body_labelled_as_a_form_changes_nothing() {
    let c = console().await;
    let cookie = c.sign_in(ADMIN_KEY).await;
    let body = json!({"name": "forged"}).to_string();
    for content_type in [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "TEXT/PLAIN",
    ] {
        for call in [
            from_page(Call::post("/v1/keys")).header("cookie", &cookie),
            Call::post("/v1/keys").bearer(ADMIN_KEY),
        ] {
            let answer = c.send(call.bytes(content_type, body.clone())).await;
            assert_eq!(
                answer.status,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "{content_type}: {:?}",
                answer.json()
            );
            let message = answer.json()["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert!(message.contains("application/json"), "{message}");
        }
    }
    let keys = c.send(Call::get("/v1/keys").bearer(ADMIN_KEY)).await;
    assert_eq!(
        keys.json()["keys"].as_array().map(Vec::len),
        Some(1),
        "no key was made"
    );
    let made = c
        .send(
            Call::post("/v1/keys")
                .bearer(ADMIN_KEY)
                .bytes("application/json; charset=utf-8", body),
        )
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{:?}", made.json());
}

/// Sign-out ends the session on the server: a copy of the cookie kept by an attacker (or
/// replayed from a log) no longer opens anything, and the browser is told to drop it.
#[tokio::test]
async fn sign_out_ends_the_session_server_side() {
    let c = console().await;
    let cookie = c.sign_in(ADMIN_KEY).await;
    let out = c
        .send(from_page(Call::delete("/console/session")).header("cookie", &cookie))
        .await;
    assert_eq!(out.status, StatusCode::NO_CONTENT);
    assert!(set_cookie(&out).contains("Max-Age=0"), "{out:?}");
    for call in [
        Call::get("/v1/sandboxes"),
        Call::get("/console/session"),
        Call::get("/v1/runs"),
    ] {
        let answer = c.send(call.header("cookie", &cookie)).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    }
    let page = c.send(Call::get("/runs").header("cookie", &cookie)).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
}

/// Revoking the key ends the console sessions opened with it.
#[tokio::test]
async fn revoking_the_key_ends_its_console_sessions() {
    let c = console().await;
    let made = c
        .send(
            Call::post("/v1/keys")
                .bearer(ADMIN_KEY)
                .json(&json!({"name": "person"})),
        )
        .await;
    let key = made.json()["key"].as_str().expect("key").to_string();
    let id = made.json()["id"].as_str().expect("id").to_string();
    let cookie = c.sign_in(&key).await;
    assert_eq!(
        c.send(Call::get("/v1/runs").header("cookie", &cookie))
            .await
            .status,
        StatusCode::OK
    );
    c.send(Call::delete(format!("/v1/keys/{id}")).bearer(ADMIN_KEY))
        .await;
    assert_eq!(
        c.send(Call::get("/v1/runs").header("cookie", &cookie))
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
}

/// Forged, expired and ended sessions open nothing.
#[tokio::test]
async fn forged_and_expired_cookies_open_nothing() {
    let c = console().await;
    let key_id = c.admin_key_id().await;
    let now = orchestrator::secret::now_ms();
    let secret = "acs_expired-session-secret-0123456789";
    c.store
        .insert_console_session(&ConsoleSessionRecord {
            id: "con-expired".into(),
            secret_hash: orchestrator::secret::sha256_hex(secret),
            key_id,
            created_at: now - 100_000,
            expires_at: now - 1,
            ended_at: None,
        })
        .await
        .expect("a session row");
    for cookie in [
        format!("agentbox_console={secret}"),
        "agentbox_console=acs_made-up".to_string(),
        "agentbox_console=".to_string(),
        format!("agentbox_console={ADMIN_KEY}"),
    ] {
        let answer = c
            .send(Call::get("/v1/sandboxes").header("cookie", &cookie))
            .await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{cookie}");
    }
}

/// The cookie does not open the sandbox API proxy (a shell in the sandbox): that takes the key
/// in a header, from programs.
#[tokio::test]
async fn the_cookie_does_not_open_the_sandbox_api() {
    let c = console().await;
    let cookie = c.sign_in(ADMIN_KEY).await;
    let key_id = c.admin_key_id().await;
    c.ready_sandbox("sbx-api", &key_id).await;
    for path in [
        "/v1/sandboxes/sbx-api/api/v1/shell/exec",
        "/v1/sandboxes/sbx-api/api",
    ] {
        let answer = c
            .send(
                from_page(Call::post(path))
                    .header("cookie", &cookie)
                    .json(&json!({"command": "id"})),
            )
            .await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{path}");
        assert!(
            answer.json()["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("not the console"),
            "{:?}",
            answer.json()
        );
    }
}

/// Pages: signed out, a console page sends to the sign-in (coming back afterwards); every page
/// has the strict policy; a run or sandbox that does not exist is a clear 404 page.
#[tokio::test]
async fn pages_redirect_signed_out_people_and_say_what_is_missing() {
    let c = console().await;
    let page = c.send(Call::get("/runs/run-1?x=1")).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(
        page.header("location"),
        Some("/sign-in?next=%2Fruns%2Frun-1%3Fx%3D1")
    );
    let sign_in = c.send(Call::get("/sign-in")).await;
    assert_eq!(sign_in.status, StatusCode::OK);
    let csp = sign_in.header("content-security-policy").expect("a policy");
    assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"));
    assert!(csp.contains("frame-ancestors 'none'"));
    let cookie = c.sign_in(ADMIN_KEY).await;
    for (path, title) in [
        ("/runs/run-deleted", "No such run"),
        ("/sandboxes/sbx-gone", "No such sandbox"),
    ] {
        let answer = c.send(Call::get(path).header("cookie", &cookie)).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{path}");
        let html = String::from_utf8_lossy(&answer.body);
        assert!(html.contains(title), "{html}");
        assert!(answer.header("content-security-policy").is_some());
    }
    // What an error page repeats from the address is escaped.
    let answer = c
        .send(Call::get("/runs/%3Cscript%3Ealert(1)%3C%2Fscript%3E").header("cookie", &cookie))
        .await;
    let html = String::from_utf8_lossy(&answer.body);
    assert!(!html.contains("<script>alert(1)"), "{html}");
    assert!(html.contains("&lt;script&gt;"), "{html}");
    for path in ["/runs", "/runs/new", "/sandboxes"] {
        let answer = c.send(Call::get(path).header("cookie", &cookie)).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}");
    }
}

async fn share_link(c: &Console, run: &str, ttl_secs: i64) -> Value {
    let answer = c
        .send(
            Call::post(format!("/v1/runs/{run}/shares"))
                .bearer(ADMIN_KEY)
                .json(&json!({"ttl_secs": ttl_secs})),
        )
        .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{:?}", answer.json());
    answer.json()
}

/// The token in a share link's URL.
fn token_of(share: &Value) -> String {
    let url = share["url"].as_str().expect("a url");
    url.split_once("?token=")
        .map(|(_, token)| token.to_string())
        .expect("a token in the url")
}

async fn shared_run(c: &Console, run: &str, token: &str) -> Answer {
    let answer = c
        .send(Call::get(format!("/share/runs/{run}?token={token}")))
        .await;
    if answer.status != StatusCode::SEE_OTHER {
        return answer;
    }
    let pair = cookie_pair(&set_cookie(&answer));
    c.send(Call::get(format!("/share/runs/{run}/run")).header("cookie", &pair))
        .await
}

/// Share links (the attack review's finding: a link made for run 1 opened run 2 of the same
/// sandbox, runs started after it, and any watch-only token worked as one). A link is made from
/// its run, names that run in its signed claims and opens only it; a plain viewer token is
/// refused on `/share`; a link is no sandbox credential; it is listed and revoked from the run;
/// it outlives the run's sandbox and goes with the run. Expired, revoked, foreign and missing
/// links are pages that say which.
#[tokio::test]
async fn share_links_open_one_run_and_say_why_when_they_do_not() {
    let c = console().await;
    let key_id = c.admin_key_id().await;
    c.ready_sandbox("sbx-a", &key_id).await;
    c.finished_run("run-a", "sbx-a", &key_id).await;
    let share = share_link(&c, "run-a", 600).await;
    let text = token_of(&share);
    let pair = a_link_opens_its_run_by_cookie_and_is_no_api_credential(&c, &share, &text).await;
    a_link_opens_no_other_run_and_a_viewer_token_is_no_link(&c, &key_id, &text).await;
    a_link_is_no_sandbox_credential_and_outlives_the_sandboxs_tokens(&c, &text).await;
    let second = links_are_listed_and_revoked_from_their_run_and_outlive_its_sandbox(
        &c, &share, &text, &pair,
    )
    .await;
    an_expired_link_says_so_and_bad_lifetimes_are_refused(&c).await;
    a_deleted_runs_link_says_so_and_its_rows_are_gone(&c, &second).await;
}

async fn a_link_opens_its_run_by_cookie_and_is_no_api_credential(
    c: &Console,
    share: &Value,
    text: &str,
) -> String {
    assert!(
        share["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("shr-"))
    );
    let answer = c
        .send(Call::get(format!("/share/runs/run-a?token={text}")))
        .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(answer.header("location"), Some("/share/runs/run-a"));
    let cookie = set_cookie(&answer);
    for part in ["Path=/share/runs/run-a", "HttpOnly", "SameSite=Strict"] {
        assert!(cookie.contains(part), "{part} in {cookie}");
    }
    let pair = cookie_pair(&cookie);
    let run = c
        .send(Call::get("/share/runs/run-a/run").header("cookie", &pair))
        .await;
    assert_eq!(run.status, StatusCode::OK, "{:?}", run.json());
    assert_eq!(run.json()["status"], "completed");
    assert!(run.json().get("metadata").is_none());
    // The share cookie is not an API credential.
    for path in ["/v1/runs/run-a", "/v1/sandboxes", "/console/session"] {
        let answer = c.send(Call::get(path).header("cookie", &pair)).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{path}");
    }
    pair
}

async fn a_link_opens_no_other_run_and_a_viewer_token_is_no_link(
    c: &Console,
    key_id: &str,
    text: &str,
) {
    // The attack: another run of the same sandbox, started after the link was made. The link
    // (as a query and as the cookie a browser would send there) does not open it.
    c.finished_run("run-b", "sbx-a", key_id).await;
    let answer = shared_run(c, "run-b", text).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert!(String::from_utf8_lossy(&answer.body).contains("made for another run"));
    for path in [
        "/share/runs/run-b/run",
        "/share/runs/run-b/events",
        "/share/runs/run-b/artifacts/screenshots/1.png",
    ] {
        let answer = c
            .send(Call::get(path).header("cookie", format!("agentbox_share={text}")))
            .await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{path}");
    }
    // A watch-only viewer token of the run's sandbox is no share link.
    let view = c
        .send(
            Call::post("/v1/sandboxes/sbx-a/tokens")
                .bearer(ADMIN_KEY)
                .json(&json!({"scope": "view", "ttl_secs": 600})),
        )
        .await;
    assert_eq!(view.status, StatusCode::CREATED);
    let view_token = view.json()["token"].as_str().expect("token").to_string();
    let answer = shared_run(c, "run-a", &view_token).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert!(String::from_utf8_lossy(&answer.body).contains("not a share link"));
}

async fn a_link_is_no_sandbox_credential_and_outlives_the_sandboxs_tokens(c: &Console, text: &str) {
    // Nor is a share link a sandbox credential, and none is made through the sandbox's tokens.
    let answer = c
        .send(Call::get(format!("/v1/sandboxes/sbx-a/vnc/?token={text}")))
        .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN, "{:?}", answer.json());
    let answer = c
        .send(
            Call::post("/v1/sandboxes/sbx-a/tokens")
                .bearer(ADMIN_KEY)
                .json(&json!({"scope": "share"})),
        )
        .await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        answer.json()["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("/v1/runs/{id}/shares"))
    );
    // Revoking every sandbox token leaves the run's links alone.
    let answer = c
        .send(Call::delete("/v1/sandboxes/sbx-a/tokens").bearer(ADMIN_KEY))
        .await;
    assert_eq!(answer.json()["revoked"], 1, "the view token only");
}

async fn links_are_listed_and_revoked_from_their_run_and_outlive_its_sandbox(
    c: &Console,
    share: &Value,
    text: &str,
    pair: &str,
) -> Value {
    // Listed from the run (without their URL), revoked from the run.
    let second = share_link(c, "run-a", 600).await;
    let list = c
        .send(Call::get("/v1/runs/run-a/shares").bearer(ADMIN_KEY))
        .await;
    assert_eq!(list.status, StatusCode::OK);
    let listed = list.json()["shares"].clone();
    let listed = listed.as_array().expect("shares");
    assert!(
        listed.iter().all(|s| s.get("url").is_none()),
        "the list repeats no link"
    );
    let mut ids: Vec<&str> = listed.iter().filter_map(|s| s["id"].as_str()).collect();
    ids.sort_unstable();
    let mut made = [&share["id"], &second["id"]].map(|id| id.as_str().unwrap_or_default());
    made.sort_unstable();
    assert_eq!(ids, made);
    let no_run = c
        .send(Call::get("/v1/runs/run-nope/shares").bearer(ADMIN_KEY))
        .await;
    assert_eq!(no_run.status, StatusCode::NOT_FOUND);
    let answer = c
        .send(
            Call::delete(format!(
                "/v1/runs/run-a/shares/{}",
                share["id"].as_str().expect("id")
            ))
            .bearer(ADMIN_KEY),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK);
    let again = c
        .send(
            Call::delete(format!(
                "/v1/runs/run-a/shares/{}",
                share["id"].as_str().expect("id")
            ))
            .bearer(ADMIN_KEY),
        )
        .await;
    assert_eq!(again.status, StatusCode::NOT_FOUND, "revoked once");
    let answer = c
        .send(Call::get("/share/runs/run-a/run").header("cookie", pair))
        .await;
    assert_eq!(answer.status, StatusCode::GONE);
    let answer = c
        .send(Call::get(format!("/share/runs/run-a?token={text}")))
        .await;
    assert_eq!(answer.status, StatusCode::GONE);
    assert!(String::from_utf8_lossy(&answer.body).contains("no longer works"));
    // The other link still opens, also once the run's sandbox is gone.
    c.store.delete_sandbox("sbx-a").await.expect("sandbox gone");
    let answer = shared_run(c, "run-a", &token_of(&second)).await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.json());
    assert_eq!(answer.json()["sandbox_live"], false);
    second
}

async fn an_expired_link_says_so_and_bad_lifetimes_are_refused(c: &Console) {
    // Expired.
    let short = share_link(c, "run-a", 1).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let answer = c
        .send(Call::get(format!(
            "/share/runs/run-a?token={}",
            token_of(&short)
        )))
        .await;
    assert_eq!(answer.status, StatusCode::GONE);
    assert!(String::from_utf8_lossy(&answer.body).contains("has expired"));
    // Bad lifetimes are refused, naming the field.
    for ttl in [0, 86_401] {
        let answer = c
            .send(
                Call::post("/v1/runs/run-a/shares")
                    .bearer(ADMIN_KEY)
                    .json(&json!({"ttl_secs": ttl})),
            )
            .await;
        assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY, "{ttl}");
        assert!(
            answer.json()["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("ttl_secs"))
        );
    }
}

async fn a_deleted_runs_link_says_so_and_its_rows_are_gone(c: &Console, second: &Value) {
    // A deleted run: the page says so, and its links' rows went with it.
    let answer = c
        .send(Call::delete("/v1/runs/run-a").bearer(ADMIN_KEY))
        .await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT);
    let answer = c
        .send(Call::get(format!(
            "/share/runs/run-a?token={}",
            token_of(second)
        )))
        .await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert!(String::from_utf8_lossy(&answer.body).contains("no longer exists"));
    assert!(
        c.store
            .share_tokens("run-a", 0)
            .await
            .expect("a list")
            .is_empty()
    );
}

/// Retention (the attack review's finding: outputs piled up with no retention): ended runs
/// older than `--run-retention-days` (30 by default) go with their events, artifact rows and
/// files; newer ones and runs still going stay.
#[tokio::test]
async fn ended_runs_past_retention_are_deleted_with_their_artifacts() {
    let c = console().await;
    let key_id = c.admin_key_id().await;
    let now = orchestrator::secret::now_ms();
    let day = 86_400_000;
    c.run_ended_at("run-old", "sbx-gone", &key_id, now - 31 * day)
        .await;
    c.run_ended_at("run-recent", "sbx-gone", &key_id, now - 29 * day)
        .await;
    let folder = c.data.path().join("artifacts/run-old/outputs");
    std::fs::create_dir_all(&folder).expect("a folder");
    std::fs::write(folder.join("report.txt"), b"old").expect("a file");
    c.store
        .upsert_artifact(&orchestrator::db::ArtifactRecord {
            run_id: "run-old".into(),
            name: "outputs/report.txt".into(),
            kind: "output".into(),
            size: 3,
            content_type: "text/plain".into(),
            sha256: String::new(),
            created_at: now - 31 * day,
        })
        .await
        .expect("an artifact row");
    assert_eq!(c.runs.purge_expired(now).await.expect("a purge"), 1);
    let old = c
        .send(Call::get("/v1/runs/run-old").bearer(ADMIN_KEY))
        .await;
    assert_eq!(old.status, StatusCode::NOT_FOUND);
    assert!(!c.data.path().join("artifacts/run-old").exists());
    assert!(
        c.store
            .artifacts("run-old")
            .await
            .expect("a list")
            .is_empty()
    );
    let recent = c
        .send(Call::get("/v1/runs/run-recent").bearer(ADMIN_KEY))
        .await;
    assert_eq!(recent.status, StatusCode::OK);
    assert_eq!(c.runs.purge_expired(now).await.expect("a purge"), 0);
}

/// Every console file is plain static HTML, CSS and JavaScript modules: no inline script, no
/// inline event handler, no inline style (the policy would refuse them, so the page would break
/// rather than be attackable), and no script from another origin.
#[test]
fn console_files_have_no_inline_script_or_style() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../novnc/console");
    let mut checked = 0;
    for entry in std::fs::read_dir(&root).expect("novnc/console") {
        let path = entry.expect("an entry").path();
        let text = std::fs::read_to_string(&path).expect("a text file");
        let name = path.display().to_string();
        if name.ends_with(".html") {
            checked += 1;
            let lower = text.to_ascii_lowercase();
            for (at, _) in lower.match_indices("<script") {
                let tag = &lower[at..lower[at..].find('>').map_or(lower.len(), |e| at + e)];
                assert!(
                    tag.contains("src=\"/assets/"),
                    "{name}: inline or foreign script {tag}"
                );
            }
            assert!(!lower.contains(" style="), "{name}: inline style");
            assert!(!lower.contains("<style"), "{name}: inline style");
            for handler in [
                " onclick=",
                " onload=",
                " onerror=",
                " onsubmit=",
                "javascript:",
            ] {
                assert!(!lower.contains(handler), "{name}: {handler}");
            }
        }
        if name.ends_with(".js") {
            assert!(
                !text.contains("innerHTML = `"),
                "{name}: HTML built from text"
            );
            assert!(!text.contains("eval("), "{name}: eval");
        }
    }
    assert!(checked >= 8, "the console's pages are there");
}

/// The desktop WebSocket takes the console's cookie only from this origin and only for the
/// sandboxes of the key that signed in: another tenant's sign-in, or another site's page, is
/// refused before anything is relayed.
#[tokio::test]
async fn the_desktop_socket_opens_only_the_signed_in_keys_sandboxes() {
    let c = console().await;
    let admin = c.admin_key_id().await;
    c.ready_sandbox("sbx-admins", &admin).await;
    let made = c
        .send(
            Call::post("/v1/keys")
                .bearer(ADMIN_KEY)
                .json(&json!({"name": "tenant"})),
        )
        .await;
    let tenant = c
        .sign_in(made.json()["key"].as_str().expect("the tenant's key"))
        .await;
    let upgrade = |cookie: &str, origin: &str| {
        Call::get("/v1/sandboxes/sbx-admins/vnc/websockify")
            .header("host", HOST)
            .header("origin", origin)
            .header("cookie", cookie)
            .header("connection", "upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
    };
    let other_tenant = c.send(upgrade(&tenant, ORIGIN)).await;
    assert_eq!(other_tenant.status, StatusCode::NOT_FOUND);
    let admin_cookie = c.sign_in(ADMIN_KEY).await;
    let other_site = c.send(upgrade(&admin_cookie, "http://evil.example")).await;
    assert_eq!(other_site.status, StatusCode::FORBIDDEN);
    let signed_out = "agentbox_console=acs_not-a-session";
    assert_eq!(
        c.send(upgrade(signed_out, ORIGIN)).await.status,
        StatusCode::UNAUTHORIZED
    );
}
