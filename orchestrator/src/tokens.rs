//! Viewer tokens: short-lived, signed, scoped to one sandbox, revocable.
//!
//! A token is `v1.<claims>.<signature>`: base64url JSON claims `{tid, sid, scope, exp}` and an
//! HMAC-SHA256 over them with the instance's signing key (kept in the database, so every
//! instance sharing it accepts the same tokens). The signature proves the claims; the token's
//! row (by `tid`) makes it revocable. Browsers send it as a query parameter or a cookie, since
//! they cannot set headers on WebSockets.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// What a token allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Watch only: the VNC proxy drops every input message.
    View,
    /// Watch and take over: input passes; CDP too.
    Control,
    /// Chromium's DevTools only (the CDP proxy): no viewer, no share page. Put in the CDP URL
    /// that `/v1/browser/info` reports through the orchestrator, for clients that cannot send
    /// an `Authorization` header on their CDP connection.
    Cdp,
    /// A share link: one run's share page (its record, events, artifacts and a watch-only
    /// desktop), named in the signed claims. Opens no sandbox route.
    Share,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::View => "view",
            Scope::Control => "control",
            Scope::Cdp => "cdp",
            Scope::Share => "share",
        }
    }
}

/// The signed content of a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// Token id (its database row).
    pub tid: String,
    /// Sandbox id.
    pub sid: String,
    pub scope: Scope,
    /// Expiry, milliseconds since the epoch.
    pub exp: i64,
    /// The run a share link shows (scope `share` only): signed, so a link made for one run
    /// cannot be pointed at another run of the same sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("malformed token")]
    Malformed,
    #[error("token signature does not verify")]
    BadSignature,
    #[error("token expired")]
    Expired,
}

/// Signs and verifies tokens with one key.
#[derive(Clone)]
pub struct TokenSigner {
    key: Vec<u8>,
}

impl std::fmt::Debug for TokenSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenSigner(..)")
    }
}

const PREFIX: &str = "v1.";

impl TokenSigner {
    pub fn new(key: &[u8]) -> Self {
        Self { key: key.to_vec() }
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC accepts keys of any length.
        Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes keys of any size")
    }

    pub fn sign(&self, claims: &Claims) -> String {
        // Claims are plain strings and numbers: serialisation cannot fail.
        let json = serde_json::to_vec(claims).unwrap_or_default();
        let body = URL_SAFE_NO_PAD.encode(json);
        let mut mac = self.mac();
        mac.update(PREFIX.as_bytes());
        mac.update(body.as_bytes());
        let signature = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        format!("{PREFIX}{body}.{signature}")
    }

    /// Checks the signature (in constant time) and the expiry against `now_ms`.
    pub fn verify(&self, token: &str, now_ms: i64) -> Result<Claims, TokenError> {
        let rest = token.strip_prefix(PREFIX).ok_or(TokenError::Malformed)?;
        let (body, signature) = rest.split_once('.').ok_or(TokenError::Malformed)?;
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| TokenError::Malformed)?;
        let mut mac = self.mac();
        mac.update(PREFIX.as_bytes());
        mac.update(body.as_bytes());
        mac.verify_slice(&signature)
            .map_err(|_| TokenError::BadSignature)?;
        let json = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| TokenError::Malformed)?;
        let claims: Claims = serde_json::from_slice(&json).map_err(|_| TokenError::Malformed)?;
        if claims.exp <= now_ms {
            return Err(TokenError::Expired);
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(exp: i64) -> Claims {
        Claims {
            tid: "tok-1".into(),
            sid: "sbx-1".into(),
            scope: Scope::View,
            exp,
            run: None,
        }
    }

    #[test]
    fn tokens_verify_and_expire() {
        let signer = TokenSigner::new(b"0123456789abcdef0123456789abcdef");
        let token = signer.sign(&claims(2_000));
        assert_eq!(signer.verify(&token, 1_000), Ok(claims(2_000)));
        assert_eq!(signer.verify(&token, 2_000), Err(TokenError::Expired));
    }

    #[test]
    fn tampering_and_other_keys_are_refused() {
        let signer = TokenSigner::new(b"key-one-key-one-key-one-key-one!");
        let other = TokenSigner::new(b"key-two-key-two-key-two-key-two!");
        let token = signer.sign(&claims(i64::MAX));
        assert_eq!(other.verify(&token, 0), Err(TokenError::BadSignature));
        // Swap in claims for another sandbox, keep the signature.
        let forged_body = URL_SAFE_NO_PAD.encode(
            serde_json::to_vec(&Claims {
                sid: "sbx-2".into(),
                ..claims(i64::MAX)
            })
            .unwrap(),
        );
        let signature = token.rsplit('.').next().unwrap();
        let forged = format!("v1.{forged_body}.{signature}");
        assert_eq!(signer.verify(&forged, 0), Err(TokenError::BadSignature));
        assert_eq!(signer.verify("garbage", 0), Err(TokenError::Malformed));
        assert_eq!(signer.verify("v1.abc", 0), Err(TokenError::Malformed));
        assert_eq!(signer.verify("v1.abc.!!", 0), Err(TokenError::Malformed));
    }
}
