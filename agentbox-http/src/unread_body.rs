//! Request bodies a handler did not read: drained, or the connection's close announced, so
//! that a refusal never breaks a client's pooled connection.
//!
//! hyper 1 (HTTP/1.1 server) writes a response's head as soon as the service answers. When the
//! handler dropped the request body unread (a 401 from the key check, a 404 or 405 fallback,
//! an early validation error), hyper only notices on its next read pass, after the head went
//! out as keep-alive: it tries a single read of the rest (`poll_drain_or_close_read`) and,
//! unless the whole body happened to be buffered already, stops reading and disables
//! keep-alive. The connection then closes after a response that did not say
//! `Connection: close`, and a pooled client sends its next request into a closing socket
//! (httpx: `RemoteProtocolError`; hyper: `IncompleteMessage`; or a reset).
//!
//! [`UnreadBodyLayer`] wraps each request body in a watcher that records whether it was read
//! to its end. When the inner service has answered and it was not:
//! - the rest is read and discarded before the answer goes out, when it is at most the drain
//!   limit ([`DEFAULT_DRAIN_LIMIT`] unless set): the connection stays good for the next call;
//! - otherwise the answer carries `Connection: close`: hyper closes after writing it, and the
//!   client knows not to reuse the connection. This is also the answer when the body is still
//!   held elsewhere (a proxy still sending it upstream), when it failed, and when the client
//!   waits for `100 Continue` before sending it (the point of asking is not to send it).
//!
//! Requests without a body (GETs, WebSocket upgrades) and HTTP/2 requests (whose streams end
//! on their own) pass untouched.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::header::{CONNECTION, EXPECT};
use axum::http::{HeaderMap, HeaderValue, Request, Response, Version};
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::BodyExt;
use tower::{Layer, Service};

/// The most an unread body is drained by default before the connection is closed instead:
/// large enough for any JSON call, small enough that a refused upload is not read.
pub const DEFAULT_DRAIN_LIMIT: u64 = 1024 * 1024;

/// Drains or announces the close of request bodies the inner service left unread.
#[derive(Debug, Clone, Copy)]
pub struct UnreadBodyLayer {
    drain_limit: u64,
}

impl UnreadBodyLayer {
    /// Drains up to [`DEFAULT_DRAIN_LIMIT`] bytes.
    pub fn new() -> Self {
        Self {
            drain_limit: DEFAULT_DRAIN_LIMIT,
        }
    }

    /// Drains up to `bytes` bytes; a longer rest closes the connection instead.
    pub fn drain_limit(self, bytes: u64) -> Self {
        Self { drain_limit: bytes }
    }
}

impl Default for UnreadBodyLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Layer<S> for UnreadBodyLayer {
    type Service = UnreadBody<S>;

    fn layer(&self, inner: S) -> Self::Service {
        UnreadBody {
            inner,
            drain_limit: self.drain_limit,
        }
    }
}

/// The service [`UnreadBodyLayer`] makes.
#[derive(Debug, Clone)]
pub struct UnreadBody<S> {
    inner: S,
    drain_limit: u64,
}

impl<S, B> Service<Request<Body>> for UnreadBody<S>
where
    S: Service<Request<Body>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<B>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        // The service that was polled ready is the one to call; a clone stays for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        if request.version() >= Version::HTTP_2 || request.body().is_end_stream() {
            return Box::pin(inner.call(request));
        }
        let waits_for_continue = expects_continue(request.headers());
        let (parts, body) = request.into_parts();
        let (body, watch) = Watched::new(body);
        let answer = inner.call(Request::from_parts(parts, Body::new(body)));
        let drain_limit = self.drain_limit;
        Box::pin(async move {
            let mut response = answer.await?;
            if !watch.settle(waits_for_continue, drain_limit).await {
                response
                    .headers_mut()
                    .append(CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(response)
        })
    }
}

/// Whether the client waits for `100 Continue` before sending the body.
fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get(EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("100-continue"))
}

/// What the layer and the watched body share.
#[derive(Default)]
struct Shared {
    /// The body was polled at least once (so a `100 Continue` went out, if one was asked for).
    polled: AtomicBool,
    /// The body was read to its end: nothing is left on the connection.
    ended: AtomicBool,
    /// Reading failed: the connection is broken anyway.
    failed: AtomicBool,
    /// The rest of a body that was dropped before its end, handed back to be drained.
    returned: Mutex<Option<Body>>,
}

/// The request body as the inner service sees it: the real one, plus a record of how far it
/// was read, and on drop before its end the real body handed back.
struct Watched {
    /// `None` only once dropped.
    inner: Option<Body>,
    shared: Arc<Shared>,
}

impl Watched {
    fn new(body: Body) -> (Self, Watch) {
        let shared = Arc::new(Shared::default());
        let watched = Self {
            inner: Some(body),
            shared: shared.clone(),
        };
        (watched, Watch { shared })
    }
}

impl http_body::Body for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        this.shared.polled.store(true, Ordering::Release);
        let polled = Pin::new(&mut *inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => this.shared.ended.store(true, Ordering::Release),
            // A body of known length ends with its last byte; its reader may stop there.
            Poll::Ready(Some(Ok(_))) if inner.is_end_stream() => {
                this.shared.ended.store(true, Ordering::Release);
            }
            Poll::Ready(Some(Err(_))) => this.shared.failed.store(true, Ordering::Release),
            Poll::Ready(Some(Ok(_))) | Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if self.shared.ended.load(Ordering::Acquire) || self.shared.failed.load(Ordering::Acquire) {
            return;
        }
        if let Some(body) = self.inner.take() {
            *self
                .shared
                .returned
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(body);
        }
    }
}

/// The layer's side of a watched body.
struct Watch {
    shared: Arc<Shared>,
}

impl Watch {
    /// After the answer: whether the connection can stay open, draining what is left of the
    /// body when that is allowed and small enough.
    async fn settle(self, waits_for_continue: bool, drain_limit: u64) -> bool {
        if self.shared.ended.load(Ordering::Acquire) {
            return true;
        }
        if self.shared.failed.load(Ordering::Acquire) {
            return false;
        }
        let returned = self
            .shared
            .returned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        // Still held by someone (a proxy's upstream connection, a streaming answer): whether
        // it will be read to its end is unknown.
        let Some(body) = returned else {
            return false;
        };
        if waits_for_continue && !self.shared.polled.load(Ordering::Acquire) {
            return false;
        }
        drain(body, drain_limit).await
    }
}

/// Reads `body` to its end and discards it, unless more than `limit` bytes are left. Whether it
/// ended.
async fn drain(mut body: Body, limit: u64) -> bool {
    if body.size_hint().lower() > limit {
        return false;
    }
    let mut read: u64 = 0;
    while !body.is_end_stream() {
        match body.frame().await {
            None => return true,
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    read = read.saturating_add(data.len() as u64);
                    if read > limit {
                        return false;
                    }
                }
            }
            Some(Err(_)) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    use futures_util::stream;

    fn chunked(chunks: &[&'static [u8]]) -> Body {
        let frames: Vec<Result<Bytes, std::io::Error>> = chunks
            .iter()
            .map(|chunk| Ok(Bytes::from_static(chunk)))
            .collect();
        Body::from_stream(stream::iter(frames))
    }

    #[tokio::test]
    async fn a_body_read_to_its_end_needs_nothing() {
        let (body, watch) = Watched::new(Body::from("hello"));
        let bytes = Body::new(body).collect().await.map(|c| c.to_bytes());
        assert_eq!(bytes.ok().as_deref(), Some(&b"hello"[..]));
        assert!(watch.shared.ended.load(Ordering::Acquire));
        assert!(watch.settle(false, 0).await);
    }

    #[tokio::test]
    async fn a_dropped_body_is_handed_back_and_drained() {
        let (body, watch) = Watched::new(chunked(&[b"abc", b"def"]));
        drop(body);
        assert!(
            watch
                .shared
                .returned
                .lock()
                .map(|r| r.is_some())
                .unwrap_or(false)
        );
        assert!(watch.settle(false, 6).await);
    }

    #[tokio::test]
    async fn a_rest_over_the_limit_is_not_drained() {
        let (body, watch) = Watched::new(chunked(&[b"abc", b"def"]));
        drop(body);
        assert!(!watch.settle(false, 5).await);
        let (body, watch) = Watched::new(Body::from(vec![0u8; 100]));
        drop(body);
        assert!(
            !watch.settle(false, 99).await,
            "known length over the limit"
        );
    }

    #[tokio::test]
    async fn a_body_still_held_elsewhere_means_close() {
        let (body, watch) = Watched::new(chunked(&[b"abc"]));
        assert!(!watch.settle(false, 1024).await);
        drop(body);
    }

    #[tokio::test]
    async fn a_client_waiting_for_continue_is_not_asked_for_its_body() {
        let (body, watch) = Watched::new(Body::from("hello"));
        drop(body);
        assert!(!watch.settle(true, 1024).await);
    }

    #[test]
    fn expect_continue_is_recognised() {
        let mut headers = HeaderMap::new();
        assert!(!expects_continue(&headers));
        headers.insert(EXPECT, HeaderValue::from_static("100-Continue"));
        assert!(expects_continue(&headers));
    }
}
