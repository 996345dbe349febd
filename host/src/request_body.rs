//! Reading a request body whole before the handler runs, within three bounds.
//!
//! Per request, the body may hold at most `max_body_bytes` (413). In time, it must arrive
//! within the body timeout (408), so a client trickling bytes cannot hold a connection and its
//! buffer forever. Across requests, a [`BodyBudget`] bounds the bytes of all bodies held in
//! memory at once, including those of requests waiting for a sandbox slot; a body that does not
//! fit is answered 503 at once, never queued. The same [`BodyBudget`] carries the bound on
//! response bodies ([`ResponseBudget`], `crate::response_body`) to the router. This module does
//! not route and runs no guest.

use std::{sync::Arc, time::Duration};

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::{
    Response, StatusCode,
    header::{self, HeaderValue},
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::{
    response::{Body, json},
    response_body::ResponseBudget,
};

/// The bytes of bodies the server holds at once: request bodies across all requests (here),
/// and response bodies across all connections ([`BodyBudget::responses`]), each with its own
/// bound.
#[derive(Clone)]
pub struct BodyBudget {
    /// One permit per KiB of request bodies.
    kib: Arc<Semaphore>,
    /// Response bodies, until their last byte is written.
    responses: ResponseBudget,
}

/// What one request holds of the budget; given back when dropped.
#[derive(Default)]
pub struct Held {
    bytes: u64,
    permit: Option<OwnedSemaphorePermit>,
}

/// Why a body was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    #[error("the request body is larger than max_body_bytes")]
    TooLarge,
    #[error("the server holds as many request bodies as it may")]
    Busy,
    #[error("the request body did not arrive within the body timeout")]
    TimedOut,
    #[error("the request body could not be read")]
    Unreadable,
}

impl BodyError {
    /// The answer the client gets.
    pub fn response(self) -> Response<Body> {
        match self {
            BodyError::TooLarge => json(
                StatusCode::PAYLOAD_TOO_LARGE,
                r#"{"detail":"Request body too large"}"#,
            ),
            BodyError::Busy => {
                let mut response = json(
                    StatusCode::SERVICE_UNAVAILABLE,
                    r#"{"detail":"Server busy: too many request bodies in memory, retry shortly"}"#,
                );
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                response
            }
            BodyError::TimedOut => {
                let mut response = json(
                    StatusCode::REQUEST_TIMEOUT,
                    r#"{"detail":"Request body not received in time"}"#,
                );
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                response
            }
            BodyError::Unreadable => json(
                StatusCode::BAD_REQUEST,
                r#"{"detail":"Could not read the request body"}"#,
            ),
        }
    }
}

impl BodyBudget {
    /// A budget of `bytes` of request bodies (rounded up to whole KiB), with the default
    /// response budget.
    pub fn new(bytes: u64) -> BodyBudget {
        let kib = usize::try_from(bytes.div_ceil(1024))
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        BodyBudget {
            kib: Arc::new(Semaphore::new(kib)),
            responses: ResponseBudget::default(),
        }
    }

    /// The same request budget, with `responses` bounding response bodies.
    pub fn with_responses(self, responses: ResponseBudget) -> BodyBudget {
        BodyBudget { responses, ..self }
    }

    /// The bound on response bodies held in memory.
    pub fn responses(&self) -> &ResponseBudget {
        &self.responses
    }

    /// Let `held` hold `bytes` more, or `Busy` if the budget has no room for them.
    pub fn grow(&self, held: &mut Held, bytes: u64) -> Result<(), BodyError> {
        let total = held.bytes.saturating_add(bytes);
        let have = held.permit.as_ref().map_or(0, |p| p.num_permits() as u64);
        let need = total.div_ceil(1024).saturating_sub(have);
        if need > 0 {
            let need = u32::try_from(need).map_err(|_| BodyError::Busy)?;
            let more = self
                .kib
                .clone()
                .try_acquire_many_owned(need)
                .map_err(|_| BodyError::Busy)?;
            match &mut held.permit {
                Some(permit) => permit.merge(more),
                None => held.permit = Some(more),
            }
        }
        held.bytes = total;
        Ok(())
    }
}

/// Read `body` whole: at most `max` bytes, within `timeout`, holding its bytes in `held`.
/// `declared` is its `Content-Length`, when sent: reserved before anything is read.
pub async fn read<B>(
    mut body: B,
    declared: Option<u64>,
    max: usize,
    timeout: Duration,
    budget: &BodyBudget,
    held: &mut Held,
) -> Result<Bytes, BodyError>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
{
    if let Some(length) = declared {
        if length > max as u64 {
            return Err(BodyError::TooLarge);
        }
        budget.grow(held, length)?;
    }
    let collect = async {
        let mut buffer = BytesMut::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|_| BodyError::Unreadable)?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let len = buffer.len() + data.len();
            if len > max {
                return Err(BodyError::TooLarge);
            }
            if len as u64 > held.bytes {
                budget.grow(held, len as u64 - held.bytes)?;
            }
            buffer.extend_from_slice(&data);
        }
        Ok(buffer.freeze())
    };
    tokio::time::timeout(timeout, collect)
        .await
        .map_err(|_| BodyError::TimedOut)?
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;

    #[tokio::test]
    async fn the_budget_is_shared_and_given_back() {
        let budget = BodyBudget::new(10 * 1024);
        let mut a = Held::default();
        let got = read(
            Full::new(Bytes::from(vec![1u8; 6000])),
            Some(6000),
            1 << 20,
            Duration::from_secs(5),
            &budget,
            &mut a,
        )
        .await;
        assert_eq!(got.map(|b| b.len()), Ok(6000));
        let mut b = Held::default();
        // Chunked (no length): refused as the bytes arrive.
        let refused = read(
            Full::new(Bytes::from(vec![1u8; 6000])),
            None,
            1 << 20,
            Duration::from_secs(5),
            &budget,
            &mut b,
        )
        .await;
        assert_eq!(refused, Err(BodyError::Busy));
        drop(a);
        drop(b);
        let mut c = Held::default();
        assert!(
            read(
                Full::new(Bytes::from(vec![1u8; 9000])),
                Some(9000),
                1 << 20,
                Duration::from_secs(5),
                &budget,
                &mut c,
            )
            .await
            .is_ok()
        );
    }

    #[tokio::test]
    async fn per_request_limit_holds_with_or_without_a_length() {
        let budget = BodyBudget::new(1 << 30);
        for declared in [Some(11), None] {
            let mut held = Held::default();
            let got = read(
                Full::new(Bytes::from(vec![1u8; 11])),
                declared,
                10,
                Duration::from_secs(5),
                &budget,
                &mut held,
            )
            .await;
            assert_eq!(got, Err(BodyError::TooLarge));
        }
    }
}
