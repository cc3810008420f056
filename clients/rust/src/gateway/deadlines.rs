//! The store calls' deadlines, with no timer armed per call.
//!
//! tokio wakes its own driver (a `write` to its eventfd, and one more event for `epoll_wait` to
//! read) whenever a timer is armed sooner than the driver's next wake. A store call's deadline,
//! milliseconds away, is sooner than every other timer a gateway keeps, so a timer per call
//! cost each decided request those two system calls. Here one sweeper task sleeps until the
//! soonest deadline it was told of, wakes the calls past theirs, and sleeps again until the
//! soonest of those still waiting. A call whose deadline is not sooner than the sweeper's
//! (every call of a steady stream while one sleep is pending: they all get the same timeout)
//! arms nothing; the sweeper is re-armed at most once per deadline's length. The deadlines are
//! kept in shards, one per CPU, each thread using its own, so that the calls of a runtime's
//! workers do not all take one lock.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use tokio::runtime::{Handle, Id as RuntimeId};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{Instant, Sleep};

/// One gateway's deadlines; dropped, its sweepers end.
pub(crate) struct Deadlines(Box<[Arc<Shared>]>);

/// Shards at most: beyond this many CPUs, threads share them.
const MAX_SHARDS: usize = 64;

/// Each thread's shard, in turn as threads first ask.
fn shard_of_this_thread() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: Cell<Option<usize>> = const { Cell::new(None) };
    }
    SHARD.with(|shard| {
        shard.get().unwrap_or_else(|| {
            let next = NEXT.fetch_add(1, Ordering::Relaxed);
            shard.set(Some(next));
            next
        })
    })
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    // Told when a deadline comes sooner than the one the sweeper sleeps for, or on close.
    sooner: Notify,
}

#[derive(Default)]
struct State {
    // The calls waiting, by deadline; an entry leaves when its call ends or its deadline passes,
    // so there are never more than the calls in flight.
    waiting: BTreeMap<(Instant, u64), Waker>,
    next_id: u64,
    // When the sweeper looks next: never later than the soonest deadline waiting.
    armed: Option<Instant>,
    // The sweeper, and the runtime it runs on.
    sweeper: Option<(JoinHandle<()>, RuntimeId)>,
    closed: bool,
    // How often a deadline came sooner than the sweeper's (what the tests bound).
    #[cfg(test)]
    told_sooner: u64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding it leaves the map whole (every change is one call).
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    /// Wakes the calls whose deadline has passed; the sweeper looks next at the soonest left.
    fn wake_past(&mut self, now: Instant) {
        while let Some(entry) = self.waiting.first_entry() {
            if entry.key().0 > now {
                break;
            }
            entry.remove().wake();
        }
        self.armed = self.waiting.first_key_value().map(|((at, _), _)| *at);
    }
}

impl Default for Deadlines {
    fn default() -> Deadlines {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        Deadlines::with_shards(cpus.clamp(1, MAX_SHARDS))
    }
}

impl Deadlines {
    fn with_shards(shards: usize) -> Deadlines {
        Deadlines((0..shards.max(1)).map(|_| Arc::default()).collect())
    }

    /// Resolves at `at` (or at once, if it has passed).
    pub(crate) fn at(&self, at: Instant) -> Expiry<'_> {
        let shard = shard_of_this_thread() % self.0.len().max(1);
        Expiry {
            shared: self.0.get(shard),
            at,
            id: None,
            timer: None,
        }
    }
}

impl Drop for Deadlines {
    fn drop(&mut self) {
        for shared in &self.0 {
            shared.lock().closed = true;
            shared.sooner.notify_one();
        }
    }
}

/// Sleeps until the soonest deadline waiting, wakes those past, again; ends on close.
async fn sweep(shared: Arc<Shared>) {
    let sleep = tokio::time::sleep_until(Instant::now());
    tokio::pin!(sleep);
    let mut set = None;
    loop {
        let sooner = shared.sooner.notified();
        let armed = {
            let mut state = shared.lock();
            if state.closed {
                return;
            }
            state.wake_past(Instant::now());
            state.armed
        };
        let Some(at) = armed else {
            sooner.await;
            continue;
        };
        if set != Some(at) {
            sleep.as_mut().reset(at);
            set = Some(at);
        }
        tokio::select! {
            () = sooner => {}
            () = &mut sleep => {}
        }
    }
}

/// A deadline being waited for; dropped (the call answered first), it is forgotten.
pub(crate) struct Expiry<'a> {
    // Always a shard (a gateway has at least one).
    shared: Option<&'a Arc<Shared>>,
    at: Instant,
    id: Option<u64>,
    // A timer of its own, for a call on another runtime than the sweeper's.
    timer: Option<Pin<Box<Sleep>>>,
}

impl Future for Expiry<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if let Some(timer) = this.timer.as_mut() {
            return timer.as_mut().poll(cx);
        }
        let Some(shared) = this.shared else {
            return Poll::Ready(());
        };
        if Instant::now() >= this.at {
            this.forget();
            return Poll::Ready(());
        }
        let mut state = shared.lock();
        if let Some(id) = this.id {
            if let Some(waker) = state.waiting.get_mut(&(this.at, id)) {
                waker.clone_from(cx.waker());
            }
            return Poll::Pending;
        }
        // Outside a runtime no call is sent either: nothing to wait for.
        let Ok(runtime) = Handle::try_current() else {
            return Poll::Ready(());
        };
        // Started on the first deadline, and again if its runtime has gone since.
        let swept_here = match &state.sweeper {
            Some((sweeper, on)) if !sweeper.is_finished() => *on == runtime.id(),
            _ => {
                let sweeper = runtime.spawn(sweep(Arc::clone(shared)));
                state.sweeper = Some((sweeper, runtime.id()));
                true
            }
        };
        if !swept_here {
            // A gateway shared by runtimes: the sweeper's may not be running now (a runtime
            // between two `block_on`s), so this call keeps a timer of its own.
            drop(state);
            let timer = this
                .timer
                .insert(Box::pin(tokio::time::sleep_until(this.at)));
            return timer.as_mut().poll(cx);
        }
        let id = state.next_id;
        state.next_id = id.wrapping_add(1);
        state.waiting.insert((this.at, id), cx.waker().clone());
        this.id = Some(id);
        if state.armed.is_none_or(|armed| this.at < armed) {
            state.armed = Some(this.at);
            #[cfg(test)]
            {
                state.told_sooner += 1;
            }
            shared.sooner.notify_one();
        }
        Poll::Pending
    }
}

impl Expiry<'_> {
    fn forget(&mut self) {
        if let (Some(id), Some(shared)) = (self.id.take(), self.shared) {
            shared.lock().waiting.remove(&(self.at, id));
        }
    }
}

impl Drop for Expiry<'_> {
    fn drop(&mut self) {
        self.forget();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn state(deadlines: &Deadlines) -> MutexGuard<'_, State> {
        match deadlines.0.first() {
            Some(shared) => shared.lock(),
            None => panic!("no shard"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn each_deadline_resolves_at_its_time_in_any_order() {
        let deadlines = Deadlines::with_shards(1);
        let start = Instant::now();
        let mut ends = Vec::new();
        // Registered later-first and sooner-first: each sooner one re-arms the sweeper.
        for ms in [30u64, 10, 20, 10, 50] {
            let deadlines = &deadlines;
            ends.push(async move {
                deadlines.at(start + Duration::from_millis(ms)).await;
                (ms, start.elapsed())
            });
        }
        let ended = futures_util::future::join_all(ends).await;
        for (ms, elapsed) in ended {
            assert_eq!(elapsed, Duration::from_millis(ms), "deadline {ms} ms");
        }
        assert!(state(&deadlines).waiting.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_past_resolves_at_once_and_holds_no_entry() {
        let deadlines = Deadlines::with_shards(1);
        let start = Instant::now();
        tokio::time::advance(Duration::from_millis(5)).await;
        deadlines.at(start).await;
        assert_eq!(start.elapsed(), Duration::from_millis(5));
        assert!(state(&deadlines).waiting.is_empty());
        assert!(state(&deadlines).sweeper.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_answered_first_leaves_nothing_waiting() {
        let deadlines = Deadlines::with_shards(1);
        let start = Instant::now();
        for _ in 0..100 {
            let answered = tokio::time::sleep(Duration::from_millis(1));
            tokio::select! {
                biased;
                () = answered => {}
                () = deadlines.at(Instant::now() + Duration::from_millis(10)) => panic!("timed out"),
            }
        }
        assert_eq!(start.elapsed(), Duration::from_millis(100));
        let swept = state(&deadlines);
        assert!(swept.waiting.is_empty());
        // A hundred calls 1 ms apart, each with 10 ms to go: the sweeper was told of a sooner
        // deadline at most once per 10 ms, not once per call (here once: each time it woke, a
        // call was waiting, and it slept again until that one's deadline).
        assert!(
            (1..=10).contains(&swept.told_sooner),
            "{}",
            swept.told_sooner
        );
    }

    #[tokio::test(start_paused = true)]
    async fn dropped_the_sweeper_ends() {
        let deadlines = Deadlines::with_shards(1);
        deadlines
            .at(Instant::now() + Duration::from_millis(1))
            .await;
        let sweeper = state(&deadlines).sweeper.take();
        let Some((sweeper, _)) = sweeper else {
            panic!("no sweeper was started");
        };
        drop(deadlines);
        let ended = tokio::time::timeout(Duration::from_secs(1), sweeper).await;
        assert!(matches!(ended, Ok(Ok(()))), "{ended:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn on_many_workers_every_deadline_resolves_once_past() {
        let deadlines = Arc::new(Deadlines::default());
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..200u64 {
            let deadlines = Arc::clone(&deadlines);
            tasks.spawn(async move {
                let at = Instant::now() + Duration::from_millis(1 + i % 20);
                // Polled after the deadline, it resolves: only its own wake-up counts here.
                tokio::select! {
                    biased;
                    () = tokio::time::sleep(Duration::from_secs(5)) => false,
                    () = deadlines.at(at) => Instant::now() >= at,
                }
            });
        }
        let past = tasks.join_all().await;
        assert_eq!(past.len(), 200);
        assert!(past.iter().all(|&p| p));
        for shared in deadlines.0.iter() {
            assert!(shared.lock().waiting.is_empty());
        }
    }

    #[test]
    fn a_call_on_another_runtime_than_the_sweepers_is_still_timed() {
        let deadlines = Deadlines::with_shards(1);
        let runtime = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
        };
        let (Ok(first), Ok(second)) = (runtime(), runtime()) else {
            panic!("no runtime");
        };
        // The sweeper starts on the first runtime, which then runs nothing.
        first.block_on(deadlines.at(Instant::now() + Duration::from_millis(1)));
        let timed = second.block_on(async {
            let at = Instant::now() + Duration::from_millis(5);
            // Polled after the deadline, it resolves: only its own wake-up counts here.
            tokio::select! {
                biased;
                () = tokio::time::sleep(Duration::from_secs(2)) => false,
                () = deadlines.at(at) => Instant::now() >= at,
            }
        });
        assert!(timed);
        assert!(state(&deadlines).waiting.is_empty());
    }
}
