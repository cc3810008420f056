//! What a request holds in the store until its response ends.

use std::time::Duration;

use tokio::task::JoinHandle;

use crate::client::{Rl, RlConnection};

/// A slot of a semaphore rule held for one request.
pub(crate) struct Held {
    pub(crate) key: Vec<u8>,
    pub(crate) holder: Vec<u8>,
    pub(crate) lease: Duration,
}

/// A reservation (`RESERVE id`) of a `settle` rule, settled after the response.
pub(crate) struct Reserved {
    pub(crate) key: Vec<u8>,
    pub(crate) id: Vec<u8>,
}

/// What a request holds in the store. Semaphore slots are renewed at a third of their lease
/// while the request runs and released when this is dropped (the response ended or the
/// request was cancelled); reservations are settled by [`Leases::settle`], or their estimate
/// stands.
pub struct Leases<C: RlConnection + 'static> {
    rl: Rl<C>,
    held: Vec<Held>,
    reserved: Vec<Reserved>,
    heartbeat: Option<JoinHandle<()>>,
}

/// A holder id for a slot this process acquires: 64 random bits in hex, so that the caller
/// knows it before the reply (and can release a slot whose reply was lost).
pub(crate) fn new_holder() -> Vec<u8> {
    format!("{:016x}", fastrand::u64(..)).into_bytes()
}

/// A release that cannot be sent in this long is abandoned: the lease expires on its own.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(1);

impl<C: RlConnection + 'static> Leases<C> {
    pub(crate) fn new(rl: Rl<C>, held: Vec<Held>, reserved: Vec<Reserved>) -> Leases<C> {
        let heartbeat = held.iter().map(|h| h.lease / 3).min().and_then(|every| {
            if every.is_zero() {
                return None;
            }
            let rl = rl.clone();
            let renew: Vec<_> = held
                .iter()
                .map(|h| (h.key.clone(), h.holder.clone(), h.lease))
                .collect();
            Some(tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    for (key, holder, lease) in &renew {
                        // A failed renewal leaves the lease to run out; the request goes on.
                        let _ = tokio::time::timeout(every, rl.renew(key, holder, *lease)).await;
                    }
                }
            }))
        });
        Leases {
            rl,
            held,
            reserved,
            heartbeat,
        }
    }

    /// Settles the request's reservations with the units the backend reported. A settlement
    /// that fails leaves the estimate standing; a retried one changes nothing (the module
    /// settles an id once).
    pub async fn settle(&mut self, actual: u64) {
        for r in std::mem::take(&mut self.reserved) {
            let _ =
                tokio::time::timeout(RELEASE_TIMEOUT, self.rl.settle(&r.key, &r.id, actual)).await;
        }
    }

    /// How many slots are held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Releases every slot now and waits for the store's answers.
    pub async fn release(mut self) {
        let held = std::mem::take(&mut self.held);
        release_all(&self.rl, held).await;
    }
}

async fn release_all<C: RlConnection>(rl: &Rl<C>, held: Vec<Held>) {
    for h in held {
        // An unreleased slot frees itself when its lease runs out.
        let _ = tokio::time::timeout(RELEASE_TIMEOUT, rl.release(&h.key, &h.holder)).await;
    }
}

impl<C: RlConnection + 'static> Drop for Leases<C> {
    fn drop(&mut self) {
        if let Some(beat) = self.heartbeat.take() {
            beat.abort();
        }
        let held = std::mem::take(&mut self.held);
        if held.is_empty() {
            return;
        }
        // Outside a runtime nothing can be sent; the leases then run out on their own.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let rl = self.rl.clone();
            runtime.spawn(async move { release_all(&rl, held).await });
        }
    }
}
