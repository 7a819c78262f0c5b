//! Viewer tokens and share links of sandboxes: issued for a ready sandbox on behalf of a key
//! (signed claims plus a row, so a token can be listed and revoked), share links bound to one
//! run, A2A watch links reused while they have an hour left, and the checks a presented token
//! passes (signature, row, scope, issuer still valid, the sandbox or run it is for).

use super::{AccessError, SandboxError, Sandboxes};
use crate::db::TokenRecord;
use crate::secret::new_id;
use crate::tokens::{Claims, Scope};
use crate::validate::{self, invalid};

/// The id prefix of A2A watch links (share tokens made for a task's metadata).
const WATCH_LINK_PREFIX: &str = "wch-";
/// A watch link is made again when it has less than this left (an hour).
const WATCH_LINK_MIN_LEFT_MS: i64 = 3600 * 1000;

impl Sandboxes {
    /// Issues a token for a ready sandbox on behalf of key `issuer_key_id`; returns (token
    /// text, record). Revoking that key ends the token.
    pub async fn issue_token(
        &self,
        id: &str,
        owner: Option<&str>,
        issuer_key_id: &str,
        scope: Scope,
        ttl_secs: i64,
    ) -> Result<(String, TokenRecord), SandboxError> {
        if scope == Scope::Share {
            return Err(invalid(
                "scope",
                "a share link is made from its run (POST /v1/runs/{id}/shares)",
            )
            .into());
        }
        validate::token_ttl(ttl_secs)?;
        let sandbox = self.get_ready(id, owner).await?;
        self.mint("tok-", sandbox.id, None, issuer_key_id, scope, ttl_secs)
            .await
    }

    /// Writes a token's row and signs its claims: the one place both kinds of token are made.
    async fn mint(
        &self,
        id_prefix: &str,
        sandbox_id: String,
        run_id: Option<&str>,
        issuer_key_id: &str,
        scope: Scope,
        ttl_secs: i64,
    ) -> Result<(String, TokenRecord), SandboxError> {
        let now = self.clock.now_ms();
        let record = TokenRecord {
            id: new_id(id_prefix),
            sandbox_id,
            issuer_key_id: Some(issuer_key_id.to_string()),
            scope: scope.as_str().to_string(),
            created_at: now,
            expires_at: now + ttl_secs * 1000,
            revoked_at: None,
            run_id: run_id.map(str::to_owned),
        };
        self.store.insert_token(&record).await?;
        let token = self.signer.sign(&Claims {
            tid: record.id.clone(),
            sid: record.sandbox_id.clone(),
            scope,
            exp: record.expires_at,
            run: record.run_id.clone(),
        });
        Ok((token, record))
    }

    /// Issues a share link's token for run `run_id` (whose sandbox, if it has one yet, is
    /// `sandbox_id`) on behalf of key `issuer_key_id`. The caller has checked that the key may
    /// see the run. The token opens that run's share page only, and outlives the sandbox.
    pub async fn issue_share_token(
        &self,
        run_id: &str,
        sandbox_id: Option<&str>,
        issuer_key_id: &str,
        ttl_secs: i64,
    ) -> Result<(String, TokenRecord), SandboxError> {
        validate::token_ttl(ttl_secs)?;
        self.mint(
            "shr-",
            sandbox_id.unwrap_or_default().to_string(),
            Some(run_id),
            issuer_key_id,
            Scope::Share,
            ttl_secs,
        )
        .await
    }

    /// The watch link's token of run `run_id` for key `issuer_key_id`: a share link (watch-only
    /// desktop, timeline, artifacts) that A2A puts in a task's metadata. One per run and key,
    /// kept while it has [`WATCH_LINK_MIN_LEFT_MS`] to live: its token is signed again from
    /// its row (the token itself is never stored), so every read of the task shows the same
    /// link; revoking the run's share links revokes it too.
    pub async fn watch_link_token(
        &self,
        run_id: &str,
        sandbox_id: Option<&str>,
        issuer_key_id: &str,
    ) -> Result<String, SandboxError> {
        let now = self.clock.now_ms();
        let live = self.store.share_tokens(run_id, now).await?;
        if let Some(record) = live.iter().rev().find(|t| {
            t.id.starts_with(WATCH_LINK_PREFIX)
                && t.issuer_key_id.as_deref() == Some(issuer_key_id)
                && t.expires_at - now >= WATCH_LINK_MIN_LEFT_MS
        }) {
            return Ok(self.signer.sign(&Claims {
                tid: record.id.clone(),
                sid: record.sandbox_id.clone(),
                scope: Scope::Share,
                exp: record.expires_at,
                run: record.run_id.clone(),
            }));
        }
        let (token, _) = self
            .mint(
                WATCH_LINK_PREFIX,
                sandbox_id.unwrap_or_default().to_string(),
                Some(run_id),
                issuer_key_id,
                Scope::Share,
                validate::MAX_TOKEN_TTL_SECS,
            )
            .await?;
        Ok(token)
    }

    /// The run's share links that still open.
    pub async fn share_tokens(&self, run_id: &str) -> Result<Vec<TokenRecord>, SandboxError> {
        Ok(self.store.share_tokens(run_id, self.clock.now_ms()).await?)
    }

    /// Revokes one share link of a run (or all of them); returns how many. Pages and desktops
    /// open through them end at once. The caller has checked that the key may see the run.
    pub async fn revoke_share_tokens(
        &self,
        run_id: &str,
        share_id: Option<&str>,
    ) -> Result<u64, SandboxError> {
        let live = match share_id {
            Some(share_id) => vec![share_id.to_string()],
            None => self
                .share_tokens(run_id)
                .await?
                .into_iter()
                .map(|record| record.id)
                .collect(),
        };
        let revoked = self
            .store
            .revoke_share_tokens(run_id, share_id, self.clock.now_ms())
            .await?;
        if let Some(share_id) = share_id
            && revoked == 0
        {
            return Err(SandboxError::ShareLinkNotFound {
                run_id: run_id.to_string(),
                share_id: share_id.to_string(),
            });
        }
        for id in &live {
            self.sessions.end_token(id);
        }
        Ok(revoked)
    }

    /// Share-link verdict for run `run_id`: `Ok(Err(..))` says why the token does not open it.
    /// Checks the signature and expiry, that it is a share link (a sandbox token is refused)
    /// made for this run, its record (not revoked, same run) and that the key that issued it is
    /// not revoked.
    pub async fn verify_share_token(
        &self,
        token: &str,
        run_id: &str,
    ) -> Result<Result<(Claims, TokenRecord), AccessError>, SandboxError> {
        let claims = match self.signer.verify(token, self.clock.now_ms()) {
            Ok(claims) => claims,
            Err(error) => return Ok(Err(error.into())),
        };
        if claims.scope != Scope::Share {
            return Ok(Err(AccessError::NotAShareLink));
        }
        if claims.run.as_deref() != Some(run_id) {
            return Ok(Err(AccessError::OtherRun));
        }
        self.check_record(claims, |record| record.run_id.as_deref() == Some(run_id))
            .await
    }

    /// The checks of a token's row, for signed `claims`: it exists, is not revoked and
    /// `belongs` (to the sandbox or run it was presented for), its scope is the signed one, and
    /// the key that issued it still stands.
    async fn check_record(
        &self,
        claims: Claims,
        belongs: impl FnOnce(&TokenRecord) -> bool,
    ) -> Result<Result<(Claims, TokenRecord), AccessError>, SandboxError> {
        let Some(record) = self.store.token(&claims.tid).await? else {
            return Ok(Err(AccessError::Revoked));
        };
        if record.revoked_at.is_some() || !belongs(&record) {
            return Ok(Err(AccessError::Revoked));
        }
        if record.scope != claims.scope.as_str() {
            return Ok(Err(AccessError::ScopeMismatch));
        }
        if let Some(issuer) = &record.issuer_key_id {
            let revoked = self
                .store
                .key(issuer)
                .await?
                .is_none_or(|key| key.revoked_at.is_some());
            if revoked {
                return Ok(Err(AccessError::IssuerRevoked));
            }
        }
        Ok(Ok((claims, record)))
    }

    /// Revokes one token (or every token of the sandbox); returns how many were revoked. Open
    /// sessions using them end at once.
    pub async fn revoke_tokens(
        &self,
        id: &str,
        owner: Option<&str>,
        token_id: Option<&str>,
    ) -> Result<u64, SandboxError> {
        self.get(id, owner).await?;
        let revoked = self
            .store
            .revoke_tokens(id, token_id, self.clock.now_ms())
            .await?;
        if let Some(token_id) = token_id {
            if revoked == 0 {
                return Err(SandboxError::TokenNotFound {
                    sandbox_id: id.to_string(),
                    token_id: token_id.to_string(),
                });
            }
            self.sessions.end_token(token_id);
        } else {
            self.sessions.end_sandbox_tokens(id);
        }
        Ok(revoked)
    }

    /// Token verdict: `Ok(Err(..))` says why the token does not open sandbox `id`. Checks the
    /// signature and expiry, the sandbox, the record (not revoked, same sandbox and scope as the
    /// signed claims) and that the key that issued it is not revoked.
    pub async fn verify_token(
        &self,
        token: &str,
        id: &str,
    ) -> Result<Result<(Claims, TokenRecord), AccessError>, SandboxError> {
        let claims = match self.signer.verify(token, self.clock.now_ms()) {
            Ok(claims) => claims,
            Err(error) => return Ok(Err(error.into())),
        };
        if claims.scope == Scope::Share {
            return Ok(Err(AccessError::ShareOnly));
        }
        if claims.sid != id {
            return Ok(Err(AccessError::OtherSandbox));
        }
        self.check_record(claims, |record| {
            record.sandbox_id == id && record.run_id.is_none()
        })
        .await
    }

    /// [`Self::verify_token`] for the viewer and share pages, which a `cdp` token opens
    /// neither of.
    pub async fn verify_viewer_token(
        &self,
        token: &str,
        id: &str,
    ) -> Result<Result<(Claims, TokenRecord), AccessError>, SandboxError> {
        Ok(self
            .verify_token(token, id)
            .await?
            .and_then(|(claims, record)| match claims.scope {
                Scope::Cdp => Err(AccessError::CdpOnly),
                // `verify_token` refused it already.
                Scope::Share => Err(AccessError::ShareOnly),
                Scope::View | Scope::Control => Ok((claims, record)),
            }))
    }
}
