//! What an admitted request holds in the store until its response ends, kept by the driver:
//! the engine's [`rl_engine::Holdings`] says which calls to make; this sends them. Semaphore
//! slots are renewed on a task of their own while the request runs, and released when this is
//! dropped (the response ended, or the request was cancelled or cut short); reservations are
//! settled by [`Leases::settle`], or, dropped unsettled, as the holdings say of a request that
//! ended without a response.

use std::sync::{Arc, Mutex, MutexGuard};

use rl_engine::Holdings;
use tokio::task::JoinHandle;

use super::{background, send_each, Tasks};
use crate::client::{Rl, RlConnection};

pub struct Leases<C: RlConnection + 'static> {
    rl: Rl<C>,
    lease: Arc<Mutex<Holdings>>,
    heartbeat: Option<JoinHandle<()>>,
    // Where the calls sent once this is dropped are counted.
    tasks: Tasks,
}

fn lock(lease: &Mutex<Holdings>) -> MutexGuard<'_, Holdings> {
    lease.lock().unwrap_or_else(|p| p.into_inner())
}

impl<C: RlConnection + 'static> Leases<C> {
    /// `started`: when the request was admitted, from which renewals are due.
    pub(crate) fn new(
        rl: Rl<C>,
        tasks: Tasks,
        lease: Holdings,
        started: rl_engine::Instant,
    ) -> Leases<C> {
        let every = lease.renew_every();
        let lease = Arc::new(Mutex::new(lease));
        let heartbeat = every.and_then(|every| {
            let runtime = tokio::runtime::Handle::try_current().ok()?;
            let (rl, lease) = (rl.clone(), Arc::clone(&lease));
            Some(runtime.spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    let calls = lock(&lease).tick(started, super::now());
                    // A failed renewal leaves the lease to run out; the request goes on.
                    send_each(&rl, calls).await;
                }
            }))
        });
        Leases {
            rl,
            lease,
            heartbeat,
            tasks,
        }
    }

    /// Settles the request's reservations with the units the backend reported in
    /// `X-Actual-Cost` (absent or invalid: the estimate stands); after a 2xx `status` they are
    /// forgotten, so a reused `Idempotency-Key` is charged anew. A settlement that fails
    /// leaves the estimate standing; a retried one changes nothing. The request's capacity
    /// slot, if its route draws on one, is given back now, with the response's latency and
    /// status for an adaptive limit to learn from.
    pub async fn settle(&mut self, status: u16, actual_cost: Option<&[u8]>) {
        let calls = {
            let mut lease = lock(&self.lease);
            lease.answered(Some(status), super::now());
            lease.settle(Some(status), actual_cost)
        };
        send_each(&self.rl, calls).await;
    }

    /// How many slots are held.
    pub fn len(&self) -> usize {
        lock(&self.lease).slots()
    }

    /// Whether nothing is held or reserved.
    pub fn is_empty(&self) -> bool {
        lock(&self.lease).is_empty()
    }

    /// Releases every slot now and waits for the store's answers.
    pub async fn release(mut self) {
        if let Some(beat) = self.heartbeat.take() {
            beat.abort();
        }
        let calls = lock(&self.lease).release();
        send_each(&self.rl, calls).await;
    }
}

impl<C: RlConnection + 'static> Drop for Leases<C> {
    fn drop(&mut self) {
        if let Some(beat) = self.heartbeat.take() {
            beat.abort();
        }
        // Settled already when the response came; otherwise there was none.
        let calls = lock(&self.lease).finish(None, None);
        background(&self.rl, &self.tasks, calls);
    }
}
