//! The caller's request body as the proxy forwards it, watched: when it last moved, whether the
//! upstream is waiting for the caller's next bytes, and whether it has ended. The upstream's
//! time to answer counts from the body's end, so a slow upload is not cut while the upstream
//! still reads it; before the end, the body may pause that long at most.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http_body::Frame;
use tokio::time::Instant;

/// What the proxy reads of the body it forwards.
pub struct Upload {
    progress: Arc<Progress>,
}

struct Progress {
    started: Instant,
    /// When the body last moved (a frame, its end), in microseconds since `started`.
    moved_us: AtomicU64,
    ended: AtomicBool,
    /// The upstream asked for the next bytes and the caller has not sent them yet.
    awaited: AtomicBool,
}

/// Why the upstream's answer did not come in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Late {
    /// The body ended (or the upstream stopped reading it) and no answer followed.
    Upstream,
    /// The upstream waits for the rest of a body the caller stopped sending.
    Caller,
}

/// `body`, watched.
pub fn watch(body: Body) -> (Body, Upload) {
    let progress = Arc::new(Progress {
        started: Instant::now(),
        moved_us: AtomicU64::new(0),
        // A request without a body (a GET) has sent it all already.
        ended: AtomicBool::new(http_body::Body::is_end_stream(&body)),
        awaited: AtomicBool::new(false),
    });
    let watched = Watched {
        body,
        progress: Arc::clone(&progress),
    };
    (Body::new(watched), Upload { progress })
}

impl Progress {
    fn moved(&self) {
        let since = u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.moved_us.store(since, Ordering::Release);
    }
}

impl Upload {
    /// When the upstream's time runs out: `timeout` after the body last moved.
    pub fn deadline(&self, timeout: Duration) -> Instant {
        let moved = Duration::from_micros(self.progress.moved_us.load(Ordering::Acquire));
        self.progress.started + moved + timeout
    }

    /// Whose the delay is, once the deadline has passed.
    pub fn late(&self) -> Late {
        let p = &self.progress;
        if !p.ended.load(Ordering::Acquire) && p.awaited.load(Ordering::Acquire) {
            Late::Caller
        } else {
            Late::Upstream
        }
    }
}

struct Watched {
    body: Body,
    progress: Arc<Progress>,
}

impl http_body::Body for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        let p = &this.progress;
        match &polled {
            Poll::Pending => p.awaited.store(true, Ordering::Release),
            Poll::Ready(Some(Ok(_))) => {
                p.awaited.store(false, Ordering::Release);
                // A body of known length ends with its last frame; the client polls no further.
                if this.body.is_end_stream() {
                    p.ended.store(true, Ordering::Release);
                }
                p.moved();
            }
            // Its end, or the caller broke it off (then the upstream's request fails at once).
            Poll::Ready(None | Some(Err(_))) => {
                p.awaited.store(false, Ordering::Release);
                p.ended.store(true, Ordering::Release);
                p.moved();
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
