//! The write timeout: a connection whose client stops reading is closed.
//!
//! hyper's HTTP/1 server bounds the time to read a request head, not the time to write a
//! response. [`WriteTimeout`] wraps a connection's socket: while a write cannot proceed (the
//! client's receive window and the kernel's send buffer are full), a deadline runs; a write
//! that makes progress, even of one byte, ends it. If no write makes progress for the whole
//! timeout, the write fails with `TimedOut`, hyper closes the connection, and the response body
//! it was sending is dropped, giving its memory back (`crate::response_body`).
//!
//! Only blocked writes start the clock: a connection that is idle, reading a request or waiting
//! for its handler is not timed here (the header and body timeouts and the sandbox's limits are
//! what bound those). A write that goes through at once costs one branch; the timer is touched
//! only when a write has to wait.

use std::{
    future::Future,
    io,
    pin::Pin,
    task::{Context, Poll, ready},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    time::{Instant, Sleep},
};

/// A socket whose writes fail with `TimedOut` after `timeout` without progress.
#[derive(Debug)]
pub struct WriteTimeout<T> {
    io: T,
    timeout: Duration,
    /// The deadline of the write now waiting; made on the first wait, reset on later ones.
    deadline: Option<Pin<Box<Sleep>>>,
    /// Whether a write is waiting now (the deadline runs).
    waiting: bool,
}

impl<T> WriteTimeout<T> {
    /// `io`, its writes bounded by `timeout` without progress.
    pub fn new(io: T, timeout: Duration) -> Self {
        WriteTimeout {
            io,
            timeout,
            deadline: None,
            waiting: false,
        }
    }

    /// A write could not proceed: start the clock if it is not running, and fail once it has
    /// run out. Registers the task to be woken at the deadline.
    fn stalled<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        if !self.waiting {
            self.waiting = true;
            let at = Instant::now() + self.timeout;
            match &mut self.deadline {
                Some(deadline) => deadline.as_mut().reset(at),
                None => self.deadline = Some(Box::pin(tokio::time::sleep_until(at))),
            }
        }
        let Some(deadline) = &mut self.deadline else {
            return Poll::Pending;
        };
        ready!(deadline.as_mut().poll(cx));
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the client read nothing for {:?}: the response was not written (server['write_timeout_s'])",
                self.timeout
            ),
        )))
    }

    /// What a write returned: progress stops the clock, a wait runs it.
    fn track<R>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        match polled {
            Poll::Pending => self.stalled(cx),
            ready => {
                self.waiting = false;
                ready
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteTimeout<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        this.track(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.track(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_flush(cx);
        this.track(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_shutdown(cx);
        this.track(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_reader_that_stops_is_cut_off_and_one_that_reads_is_not() {
        let (near, mut far) = tokio::io::duplex(1024);
        let mut near = WriteTimeout::new(near, Duration::from_millis(200));
        // The far end reads slowly but steadily: 64 KiB in 32 steps of 50 ms.
        let reader = tokio::spawn(async move {
            let mut got = 0;
            let mut buf = vec![0u8; 2048];
            while got < 64 * 1024 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                got += far.read(&mut buf).await.unwrap();
            }
            far
        });
        near.write_all(&vec![1u8; 64 * 1024]).await.unwrap();
        let far = reader.await.unwrap();
        // Now it stops reading: the write fails after about the timeout.
        let started = std::time::Instant::now();
        let error = near.write_all(&vec![1u8; 64 * 1024]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(200) && took < Duration::from_secs(2),
            "{took:?}"
        );
        drop(far);
    }
}
