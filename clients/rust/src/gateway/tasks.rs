//! The calls a gateway sends in the background (releases, refunds, settlements, undos),
//! counted, so that a process about to exit can wait for them: what its requests held is then
//! given back before it goes, not left to expire with its lease.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// Shared by a gateway's requests; cloning shares the count.
#[derive(Clone, Default)]
pub(crate) struct Tasks(Arc<Count>);

#[derive(Default)]
struct Count {
    running: AtomicUsize,
    idle: Notify,
}

/// One task counted until it ends, or until it is dropped unrun (a runtime shutting down).
struct Running(Arc<Count>);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Tasks {
    /// Runs `work` on the current runtime, counted; outside a runtime nothing can be sent, and
    /// nothing is run (leases then run out on their own).
    pub(crate) fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.0.running.fetch_add(1, Ordering::AcqRel);
        let running = Running(Arc::clone(&self.0));
        runtime.spawn(async move {
            let _running = running;
            work.await;
        });
    }

    /// Resolves once no task is running.
    pub(crate) async fn idle(&self) {
        loop {
            let idle = self.0.idle.notified();
            tokio::pin!(idle);
            // Registered before the count is read, so a last task ending in between wakes it.
            idle.as_mut().enable();
            if self.0.running.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }
}
