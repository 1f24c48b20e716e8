//! Virtual time. Timers run on the simulator's monotonic time; the wall clock the server
//! reads is that time plus a skew that faults can step in either direction.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use warden::env::{Clock, LocalBoxFuture};

/// Where simulated wall time starts: 2026-12-01T00:00:00Z.
pub const EPOCH_MS: u64 = 1_796_083_200_000;

#[derive(Default)]
pub struct SimClock {
    /// Virtual monotonic time, ms since the simulation began.
    now: Cell<u64>,
    /// Wall-clock skew, ms (negative: the clock is behind).
    skew: Cell<i64>,
    /// Wall-clock drift, in millionths of elapsed virtual time (negative: it runs slow).
    drift_ppm: Cell<i64>,
    /// (deadline, sequence) -> waker of a pending sleep.
    timers: RefCell<BTreeMap<(u64, u64), Option<Waker>>>,
    next_timer: Cell<u64>,
}

impl SimClock {
    pub fn new() -> Rc<SimClock> {
        Rc::new(SimClock::default())
    }

    pub fn now(&self) -> u64 {
        self.now.get()
    }

    pub fn advance(&self, ms: u64) {
        self.now.set(self.now.get() + ms);
    }

    pub fn step_wall(&self, delta_ms: i64) {
        self.skew.set(self.skew.get() + delta_ms);
    }

    pub fn skew(&self) -> i64 {
        self.skew.get()
    }

    /// Makes the wall clock run fast or slow against virtual time from now on: the drift so
    /// far is kept (folded into the skew), so the wall clock does not jump at the change. (It
    /// did: a drift set an hour in moved the wall clock minutes at once, which expired a round
    /// resumed after a restart minutes early: seed 448503 of the sweep over new seeds.)
    pub fn set_drift_ppm(&self, ppm: i64) {
        let now = self.now.get() as i64;
        let so_far = now.saturating_mul(self.drift_ppm.get()) / 1_000_000;
        let restated = now.saturating_mul(ppm) / 1_000_000;
        self.skew.set(self.skew.get() + so_far - restated);
        self.drift_ppm.set(ppm);
    }

    /// Forgets timers of a crashed instance.
    pub fn clear_timers(&self) {
        self.timers.borrow_mut().clear();
    }

    /// Fires the earliest timer due at or before `until`, jumping time to it.
    pub fn fire_next_timer(&self, until: u64) -> bool {
        let first = self.timers.borrow().keys().next().copied();
        let Some(key) = first.filter(|(deadline, _)| *deadline <= until) else { return false };
        let waker = self.timers.borrow_mut().remove(&key).flatten();
        self.now.set(self.now.get().max(key.0));
        if let Some(waker) = waker {
            waker.wake();
        }
        true
    }

    pub fn next_timer_at(&self) -> Option<u64> {
        self.timers.borrow().keys().next().map(|(deadline, _)| *deadline)
    }
}

pub struct SimClockHandle(pub Rc<SimClock>);

impl Clock for SimClockHandle {
    fn now_ms(&self) -> u64 {
        let now = self.0.now.get() as i64;
        let drift = now.saturating_mul(self.0.drift_ppm.get()) / 1_000_000;
        (EPOCH_MS as i64 + now + self.0.skew.get() + drift).max(0) as u64
    }

    fn monotonic_ms(&self) -> u64 {
        self.0.now.get()
    }

    fn sleep(&self, ms: u64) -> LocalBoxFuture<'static, ()> {
        let clock = Rc::clone(&self.0);
        let deadline = clock.now.get().saturating_add(ms);
        let sequence = clock.next_timer.get();
        clock.next_timer.set(sequence + 1);
        clock.timers.borrow_mut().insert((deadline, sequence), None);
        Box::pin(Sleep { clock, key: (deadline, sequence) })
    }
}

struct Sleep {
    clock: Rc<SimClock>,
    key: (u64, u64),
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut timers = self.clock.timers.borrow_mut();
        match timers.get_mut(&self.key) {
            Some(slot) => {
                *slot = Some(cx.waker().clone());
                Poll::Pending
            }
            None => Poll::Ready(()),
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        self.clock.timers.borrow_mut().remove(&self.key);
    }
}

/// The clock of an instance beside the first on another machine: the same time, its wall
/// clock off by `skew_ms` more (clock skew between instances; the database's time is not).
pub struct PeerClockHandle {
    pub clock: SimClockHandle,
    pub skew_ms: i64,
}

impl Clock for PeerClockHandle {
    fn now_ms(&self) -> u64 {
        (self.clock.now_ms() as i64).saturating_add(self.skew_ms).max(0) as u64
    }

    fn monotonic_ms(&self) -> u64 {
        self.clock.monotonic_ms()
    }

    fn sleep(&self, ms: u64) -> LocalBoxFuture<'static, ()> {
        self.clock.sleep(ms)
    }
}
