//! The RFB (VNC) handshakes on both sides of sandboxd (RFC 6143, sections 7.1 and 7.2).
//!
//! **Towards the VNC server** ([`authenticate_upstream`]): read the server's version, answer
//! 3.8, pick VNC authentication, answer the DES challenge with the session's password, and
//! check the SecurityResult. A view session answers with the view-only password, so the server
//! itself drops its input.
//!
//! **Towards the client** sandboxd plays the server's part of the handshake with fixed bytes:
//! [`SERVER_VERSION`] (3.8), one security type (None), SecurityResult OK. It accepts exactly
//! `RFB 003.008\n` back ([`check_client_version`]) and security type None
//! ([`check_security_choice`]); anything else ends the session with a reason
//! ([`failure_after_version`]). Servers of the libvncserver family apply 3.3 rules to every
//! minor version below 7; pinning one version leaves no room for a client and a filter to
//! disagree on where the handshake ends.

use std::time::Duration;

use des::Des;
use des::cipher::generic_array::GenericArray;
use des::cipher::{BlockEncrypt, KeyInit};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The only protocol version spoken on either side.
pub const SERVER_VERSION: &[u8; 12] = b"RFB 003.008\n";
/// Security types offered to the client: one, None (1).
pub const SECURITY_TYPES: [u8; 2] = [1, SECURITY_NONE];
/// SecurityResult: OK.
pub const SECURITY_OK: [u8; 4] = [0, 0, 0, 0];

const SECURITY_NONE: u8 = 1;
const SECURITY_VNC_AUTH: u8 = 2;
/// How long each step of the upstream handshake may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest failure reason read from the server.
const MAX_REASON: usize = 4096;

/// A handshake that did not complete.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("the VNC server sent {0:?} instead of an RFB 3.8 greeting")]
    ServerVersion(String),
    #[error("the VNC server refused the connection: {0}")]
    ServerRefused(String),
    #[error("the VNC server does not offer VNC authentication (offered {0:?})")]
    NoVncAuth(Vec<u8>),
    #[error("the VNC server refused the password: {0}")]
    AuthFailed(String),
    #[error("the VNC server did not answer within {} s", STEP_TIMEOUT.as_secs())]
    Timeout,
    #[error("talking to the VNC server: {0}")]
    Io(#[from] std::io::Error),
    #[error("only RFB 003.008 is spoken here; the client sent {0:?}")]
    ClientVersion(String),
    #[error("only security type 1 (None) is offered; the client chose {0}")]
    ClientSecurity(u8),
}

async fn step<T>(future: impl Future<Output = std::io::Result<T>>) -> Result<T, HandshakeError> {
    tokio::time::timeout(STEP_TIMEOUT, future)
        .await
        .map_err(|_| HandshakeError::Timeout)?
        .map_err(HandshakeError::from)
}

async fn read_reason(stream: &mut TcpStream) -> Result<String, HandshakeError> {
    let length = step(stream.read_u32()).await? as usize;
    let mut reason = vec![0u8; length.min(MAX_REASON)];
    step(stream.read_exact(&mut reason)).await?;
    Ok(String::from_utf8_lossy(&reason).into_owned())
}

/// Authenticates to the VNC server with `password` (VNC authentication, RFB 3.8) and returns
/// once the server said OK; the server then waits for the client's ClientInit.
pub async fn authenticate_upstream(
    stream: &mut TcpStream,
    password: &str,
) -> Result<(), HandshakeError> {
    let mut version = [0u8; 12];
    step(stream.read_exact(&mut version)).await?;
    if !version.starts_with(b"RFB 003.") || version[11] != b'\n' || version[8..11] < b"008"[..] {
        return Err(HandshakeError::ServerVersion(
            String::from_utf8_lossy(&version).into_owned(),
        ));
    }
    step(stream.write_all(SERVER_VERSION)).await?;
    let count = step(stream.read_u8()).await? as usize;
    if count == 0 {
        return Err(HandshakeError::ServerRefused(read_reason(stream).await?));
    }
    let mut types = vec![0u8; count];
    step(stream.read_exact(&mut types)).await?;
    if !types.contains(&SECURITY_VNC_AUTH) {
        return Err(HandshakeError::NoVncAuth(types));
    }
    step(stream.write_all(&[SECURITY_VNC_AUTH])).await?;
    let mut challenge = [0u8; 16];
    step(stream.read_exact(&mut challenge)).await?;
    step(stream.write_all(&vnc_auth_response(password, &challenge))).await?;
    match step(stream.read_u32()).await? {
        0 => Ok(()),
        _ => Err(HandshakeError::AuthFailed(read_reason(stream).await?)),
    }
}

/// VNC authentication's answer: the challenge DES-encrypted (ECB, two blocks) with the first 8
/// bytes of the password, each key byte's bits mirrored (RFC 6143 section 7.2.2 and the
/// errata every implementation follows).
pub fn vnc_auth_response(password: &str, challenge: &[u8; 16]) -> [u8; 16] {
    let mut key = [0u8; 8];
    for (slot, byte) in key.iter_mut().zip(password.bytes()) {
        *slot = byte.reverse_bits();
    }
    let cipher = Des::new(GenericArray::from_slice(&key));
    let mut out = *challenge;
    for block in out.chunks_exact_mut(8) {
        cipher.encrypt_block(GenericArray::from_mut_slice(block));
    }
    out
}

/// Checks the client's version answer: exactly [`SERVER_VERSION`].
pub fn check_client_version(bytes: &[u8]) -> Result<(), HandshakeError> {
    if bytes == SERVER_VERSION {
        Ok(())
    } else {
        Err(HandshakeError::ClientVersion(
            String::from_utf8_lossy(bytes).into_owned(),
        ))
    }
}

/// Checks the client's security type: None.
pub fn check_security_choice(choice: u8) -> Result<(), HandshakeError> {
    if choice == SECURITY_NONE {
        Ok(())
    } else {
        Err(HandshakeError::ClientSecurity(choice))
    }
}

/// What to send a client whose version answer was refused: an empty security-type list and a
/// reason (RFB 3.8 lets a server fail the handshake here with a message the viewer shows).
pub fn failure_after_version(reason: &str) -> Vec<u8> {
    let reason = reason.as_bytes();
    let mut out = Vec::with_capacity(5 + reason.len());
    out.push(0);
    out.extend_from_slice(&(reason.len() as u32).to_be_bytes());
    out.extend_from_slice(reason);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vnc_auth_encrypts_each_block_with_the_first_eight_characters() {
        // The answer's correctness against a real server is tested with x11vnc
        // (sandboxd/tests/it/vnc.rs); here, the block and key rules.
        let challenge: [u8; 16] = core::array::from_fn(|i| i as u8);
        let response = vnc_auth_response("password", &challenge);
        // Each 8-byte block is encrypted independently with the same key.
        let first: [u8; 16] = {
            let mut c = [0u8; 16];
            c[..8].copy_from_slice(&challenge[..8]);
            c[8..].copy_from_slice(&challenge[..8]);
            c
        };
        let doubled = vnc_auth_response("password", &first);
        assert_eq!(doubled[..8], doubled[8..]);
        assert_eq!(response[..8], doubled[..8]);
        // Only the first 8 characters count; a shorter password is zero-padded.
        assert_eq!(vnc_auth_response("password-and-more", &challenge), response);
        assert_ne!(vnc_auth_response("passwor", &challenge), response);
    }

    #[test]
    fn only_version_3_8_and_security_none_are_accepted_from_clients() {
        assert!(check_client_version(b"RFB 003.008\n").is_ok());
        for minor in 0..=9 {
            let version = format!("RFB 003.00{minor}\n");
            if minor != 8 {
                assert!(
                    check_client_version(version.as_bytes()).is_err(),
                    "{version}"
                );
            }
        }
        assert!(check_client_version(b"RFB 004.001\n").is_err());
        assert!(check_client_version(b"GET / HTTP/1").is_err());
        assert!(check_security_choice(1).is_ok());
        for other in [0u8, 2, 16, 19, 255] {
            assert!(check_security_choice(other).is_err());
        }
        let failure = failure_after_version("no");
        assert_eq!(failure, [0, 0, 0, 0, 2, b'n', b'o']);
    }
}
