//! Response bodies the host holds in memory: bounded across connections, and given back as they
//! are written.
//!
//! When a guest answers, its whole body arrives at once (`HttpResponse::body`, one `Vec<u8>`)
//! and the instance that made it is freed. What the host then holds until the client has read
//! the last byte is that buffer. A [`ResponseBudget`] bounds the bytes of all such buffers at
//! once, across all connections (`server["max_buffered_response_bytes"]`):
//!
//! - a body larger than the whole budget can never be sent: [`ResponseError::TooLarge`] (the
//!   router answers 500 naming the setting);
//! - a body that does not fit beside the others is refused at once: [`ResponseError::Busy`]
//!   (503 with `Retry-After`). It does not wait for room: a waiting response holds its bytes
//!   outside the budget, and when slow readers hold the budget every new large response
//!   would wait, so memory would grow again with the number of requests;
//! - a body of at most [`CHUNK`] bytes is charged but never refused for lack of room (as much
//!   as one connection's own buffers hold already): slow readers filling the budget with large
//!   responses do not turn every small answer into a 503. The memory held is thus at most the
//!   bound plus [`CHUNK`] per open connection.
//!
//! A body that fits is a [`HeldBody`]: it hands hyper [`CHUNK`]-sized copies of the buffer, and
//! every [`RELEASE_STEP`] bytes gives the pages already sent back to the kernel
//! (`MADV_DONTNEED`) and their share back to the budget, so a client reading slowly holds only
//! what it has not read yet; dropping the body (the client went away, the connection was cut
//! off by the write timeout, `crate::write_timeout`) gives back the rest. Chunks are copies, not
//! slices of the buffer, so that no part of the buffer is still referenced when its pages are
//! dropped; a body of at most one chunk goes out whole, without a copy. (Pages are returned on
//! Linux; elsewhere a body stays charged in full until its last chunk is out.)
//!
//! This module neither routes nor runs a guest; the router calls [`ResponseBudget::hold`].

use std::{
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::Instant,
};

use bytes::Bytes;
use hyper::{
    Response, StatusCode,
    body::{Frame, SizeHint},
    header::{self, HeaderValue},
};

use crate::response::{Body, json};

/// The default of `server["max_buffered_response_bytes"]`: as much as request bodies.
pub const DEFAULT_MAX_BUFFERED_RESPONSE_BYTES: u64 = 256 * 1024 * 1024;

/// The bytes handed to hyper at a time (the same as a static file's reads).
pub const CHUNK: usize = 64 * 1024;

/// How many bytes are sent between two give-backs of sent pages (one `madvise` each).
pub const RELEASE_STEP: usize = 1024 * 1024;

/// How often a refusal for lack of budget is logged.
const LOG_EVERY_MS: u64 = 10_000;

/// The bytes of response bodies the server holds at once, across all connections. Cheap to
/// clone: clones share one account.
#[derive(Clone, Debug)]
pub struct ResponseBudget {
    inner: Arc<Account>,
}

#[derive(Debug)]
struct Account {
    /// The bound, in bytes.
    max: u64,
    /// The bytes held now.
    held: AtomicU64,
    /// When the budget was made.
    started: Instant,
    /// When a refusal was last logged: milliseconds since `started`, plus one (0: never).
    logged_ms: AtomicU64,
}

/// Why a response body was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    /// The body alone is larger than the whole budget.
    #[error(
        "the response body is {size} bytes, more than the server may hold at once (server['max_buffered_response_bytes'] is {max})"
    )]
    TooLarge { size: u64, max: u64 },
    /// The budget has no room for it now.
    #[error("the server holds as many response bytes as it may")]
    Busy,
}

impl ResponseError {
    /// The 503 a client gets for [`ResponseError::Busy`]. (`TooLarge` is the route's fault: the
    /// router answers it as a failure of the route, with the setting named.)
    pub fn busy_response() -> Response<Body> {
        let mut response = json(
            StatusCode::SERVICE_UNAVAILABLE,
            r#"{"detail":"Server busy: too many responses in memory, retry shortly"}"#,
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        response
    }
}

impl Default for ResponseBudget {
    fn default() -> Self {
        ResponseBudget::new(DEFAULT_MAX_BUFFERED_RESPONSE_BYTES)
    }
}

impl ResponseBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: u64) -> ResponseBudget {
        ResponseBudget {
            inner: Arc::new(Account {
                max: bytes,
                held: AtomicU64::new(0),
                started: Instant::now(),
                logged_ms: AtomicU64::new(0),
            }),
        }
    }

    /// The bound, in bytes.
    pub fn max_bytes(&self) -> u64 {
        self.inner.max
    }

    /// The bytes held now, across all connections.
    pub fn held_bytes(&self) -> u64 {
        self.inner.held.load(Ordering::Relaxed)
    }

    /// Take `body` into the budget, to be sent as a [`HeldBody`]; or refuse it (and drop it).
    pub fn hold(&self, body: Vec<u8>) -> Result<HeldBody, ResponseError> {
        let size = body.len() as u64;
        if size > self.inner.max {
            return Err(ResponseError::TooLarge {
                size,
                max: self.inner.max,
            });
        }
        let account = &self.inner;
        if body.len() <= CHUNK {
            // Charged, never refused: a connection's own buffers are as large, and a slow
            // reader holding the budget must not turn every small answer into a 503.
            account.held.fetch_add(size, Ordering::AcqRel);
            return Ok(HeldBody::new(body, self.clone()));
        }
        let mut held = account.held.load(Ordering::Relaxed);
        loop {
            let Some(total) = held.checked_add(size).filter(|t| *t <= account.max) else {
                self.log_refusal(size, held);
                return Err(ResponseError::Busy);
            };
            match account.held.compare_exchange_weak(
                held,
                total,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => held = now,
            }
        }
        Ok(HeldBody::new(body, self.clone()))
    }

    fn release(&self, bytes: u64) {
        if bytes > 0 {
            self.inner.held.fetch_sub(bytes, Ordering::AcqRel);
        }
    }

    /// A warning once per [`LOG_EVERY_MS`]: the operator learns the bound is reached.
    fn log_refusal(&self, size: u64, held: u64) {
        let account = &self.inner;
        let now = u64::try_from(account.started.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        let last = account.logged_ms.load(Ordering::Relaxed);
        if (last == 0 || now.saturating_sub(last) >= LOG_EVERY_MS)
            && account
                .logged_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                "response refused with 503: {size} bytes do not fit beside the {held} bytes of responses clients have not read yet (server['max_buffered_response_bytes'] = {} in config.py)",
                account.max
            );
        }
    }
}

/// A response body in memory, charged to a [`ResponseBudget`] until it is sent or dropped.
///
/// It yields [`CHUNK`]-sized copies of its buffer; as the sent part grows past each
/// [`RELEASE_STEP`], the whole pages of it are returned to the kernel and their bytes to the
/// budget. Its size is exact, so hyper sends a `Content-Length`.
pub struct HeldBody {
    /// The guest's bytes. Emptied (and freed) once the last chunk is out.
    buffer: Vec<u8>,
    /// The body's length.
    len: usize,
    /// Bytes handed to hyper.
    sent: usize,
    /// Bytes at the start of `buffer` whose pages were returned (page-aligned inside it).
    released: usize,
    budget: ResponseBudget,
    /// The bytes still charged to the budget.
    charged: u64,
}

impl std::fmt::Debug for HeldBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldBody")
            .field("len", &self.len)
            .field("sent", &self.sent)
            .field("charged", &self.charged)
            .finish()
    }
}

impl HeldBody {
    /// `buffer`, already charged to `budget` in full.
    fn new(buffer: Vec<u8>, budget: ResponseBudget) -> HeldBody {
        let len = buffer.len();
        HeldBody {
            buffer,
            len,
            sent: 0,
            released: 0,
            budget,
            charged: len as u64,
        }
    }

    /// The bytes still charged to the budget.
    pub fn charged(&self) -> u64 {
        self.charged
    }

    /// Give the budget back everything but `keep` bytes.
    fn uncharge_to(&mut self, keep: u64) {
        if self.charged > keep {
            self.budget.release(self.charged - keep);
            self.charged = keep;
        }
    }

    /// Return the pages of the sent part to the kernel, and their bytes to the budget.
    fn release_sent(&mut self) {
        if self.sent == self.len {
            // Everything is out: free the buffer itself.
            self.buffer = Vec::new();
            self.uncharge_to(0);
            return;
        }
        if let Some(end) = drop_pages(&mut self.buffer, self.released, self.sent) {
            self.released = end;
            self.uncharge_to((self.len - end) as u64);
        }
    }
}

impl hyper::body::Body for HeldBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = self.get_mut();
        if this.sent == this.len {
            return Poll::Ready(None);
        }
        let chunk = if this.sent == 0 && this.len <= CHUNK {
            // One chunk: hand hyper the buffer itself.
            Bytes::from(std::mem::take(&mut this.buffer))
        } else {
            let end = this.len.min(this.sent + CHUNK);
            Bytes::copy_from_slice(&this.buffer[this.sent..end])
        };
        this.sent += chunk.len();
        if this.sent == this.len || this.sent - this.released >= RELEASE_STEP {
            this.release_sent();
        }
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.sent == self.len
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact((self.len - self.sent) as u64)
    }
}

impl Drop for HeldBody {
    fn drop(&mut self) {
        // The memory first, then its share of the budget.
        self.buffer = Vec::new();
        self.uncharge_to(0);
    }
}

/// Return to the kernel the whole pages of `buffer[from..to]` (bytes that will never be read
/// again), and say where the returned part now ends; `None` if there was no whole page to
/// return or the kernel refused (then the bytes stay charged until the buffer is freed).
#[cfg(target_os = "linux")]
fn drop_pages(buffer: &mut [u8], from: usize, to: usize) -> Option<usize> {
    let page = page_size();
    let base = buffer.as_mut_ptr() as usize;
    let start = (base + from).next_multiple_of(page);
    let end = (base + to.min(buffer.len())) / page * page;
    if end <= start {
        return None;
    }
    // SAFETY: `start..end` lies inside `buffer`, which the caller owns exclusively (`&mut`),
    // and whose bytes below `to` are never read again: later chunks start at `to` or after,
    // and freeing the buffer reads none of its contents. MADV_DONTNEED on these private
    // pages frees them; touched again they would read as zeros. Nothing outside the buffer
    // (an allocator's header before it, another allocation after it) is in a whole page
    // between `start` and `end`.
    let done =
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
    (done == 0).then_some(end - base)
}

/// Elsewhere the sent bytes stay in memory (and charged) until the whole body is sent.
#[cfg(not(target_os = "linux"))]
fn drop_pages(_buffer: &mut [u8], _from: usize, _to: usize) -> Option<usize> {
    None
}

#[cfg(target_os = "linux")]
fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf reads a constant of the system.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(size)
            .ok()
            .filter(|s| *s > 0)
            .unwrap_or(4096)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn the_budget_bounds_and_is_given_back_as_bytes_are_sent() {
        let budget = ResponseBudget::new(10 << 20);
        let pattern: Vec<u8> = (0..(6 << 20)).map(|i: u32| (i % 251) as u8).collect();
        let mut body = budget.hold(pattern.clone()).expect("fits");
        assert_eq!(budget.held_bytes(), 6 << 20);
        // 6 MiB held: another 6 MiB does not fit now, 4 MiB does.
        assert_eq!(
            budget.hold(vec![0; 6 << 20]).err(),
            Some(ResponseError::Busy)
        );
        let small = budget.hold(vec![1; 4 << 20]).expect("fits");
        // Full: larger bodies are refused, those of one chunk still go out (and count).
        assert_eq!(
            budget.hold(vec![0; CHUNK + 1]).err(),
            Some(ResponseError::Busy)
        );
        let tiny = budget
            .hold(vec![2; CHUNK])
            .expect("one chunk is never refused");
        assert_eq!(budget.held_bytes(), (10 << 20) + CHUNK as u64);
        drop((small, tiny));
        assert_eq!(budget.held_bytes(), 6 << 20);

        let mut got = Vec::new();
        let mut lowest = u64::MAX;
        while let Some(frame) = body.frame().await {
            let data = frame.unwrap().into_data().unwrap();
            assert!(data.len() <= CHUNK);
            got.extend_from_slice(&data);
            lowest = lowest.min(budget.held_bytes());
            // Never less charged than what is left to send (give or take a page).
            assert!(budget.held_bytes() + 4096 >= (pattern.len() - got.len()) as u64);
        }
        assert_eq!(got, pattern, "the bytes sent are the body's");
        assert_eq!(budget.held_bytes(), 0);
        drop(body);
        assert_eq!(budget.held_bytes(), 0);
        assert!(lowest < 1 << 20, "given back only at the end: {lowest}");
    }

    #[tokio::test]
    async fn a_body_dropped_half_sent_gives_everything_back() {
        let budget = ResponseBudget::new(8 << 20);
        let mut body = budget.hold(vec![7; 5 << 20]).unwrap();
        for _ in 0..40 {
            body.frame().await.unwrap().unwrap();
        }
        assert!(budget.held_bytes() < 5 << 20);
        drop(body);
        assert_eq!(budget.held_bytes(), 0);
    }

    #[test]
    fn larger_than_the_whole_budget_is_too_large() {
        let budget = ResponseBudget::new(1000);
        assert_eq!(
            budget.hold(vec![0; 1001]).err(),
            Some(ResponseError::TooLarge {
                size: 1001,
                max: 1000
            })
        );
        assert!(budget.hold(vec![0; 1000]).is_ok());
        assert_eq!(budget.held_bytes(), 0);
    }

    #[tokio::test]
    async fn small_bodies_go_out_whole_and_empty_ones_at_once() {
        let budget = ResponseBudget::new(1 << 20);
        let mut body = budget.hold(b"hello".to_vec()).unwrap();
        assert_eq!(hyper::body::Body::size_hint(&body).exact(), Some(5));
        let data = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&data[..], b"hello");
        assert!(hyper::body::Body::is_end_stream(&body));
        assert!(body.frame().await.is_none());
        assert_eq!(budget.held_bytes(), 0);
        let empty = budget.hold(Vec::new()).unwrap();
        assert!(hyper::body::Body::is_end_stream(&empty));
    }
}
