//! Single-threaded coordination without a runtime: the server runs on one thread (tokio's
//! current-thread runtime in production, the simulator's executor in tests), so these are
//! `Rc`/`RefCell` based and work under either.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// Counts tasks in progress; `wait` completes when none are left. One task waits at a time.
#[derive(Clone, Default)]
pub struct WaitGroup {
    inner: Rc<WaitGroupInner>,
}

#[derive(Default)]
struct WaitGroupInner {
    count: Cell<usize>,
    /// The one task waiting (the latest to poll): bounded, unlike a list of wakers.
    waiter: RefCell<Option<Waker>>,
}

/// Held by one task in progress; dropping it (also when the task is dropped) ends it.
pub struct WaitGroupGuard {
    inner: Rc<WaitGroupInner>,
}

impl WaitGroup {
    pub fn new() -> WaitGroup {
        WaitGroup::default()
    }

    pub fn enter(&self) -> WaitGroupGuard {
        self.inner.count.set(self.inner.count.get() + 1);
        WaitGroupGuard { inner: Rc::clone(&self.inner) }
    }

    pub fn count(&self) -> usize {
        self.inner.count.get()
    }

    pub fn wait(&self) -> WaitAll {
        WaitAll { inner: Rc::clone(&self.inner) }
    }
}

impl Drop for WaitGroupGuard {
    fn drop(&mut self) {
        let count = self.inner.count.get();
        assert!(count > 0, "wait group count underflow");
        self.inner.count.set(count - 1);
        if count == 1 {
            if let Some(waker) = self.inner.waiter.borrow_mut().take() {
                waker.wake();
            }
        }
    }
}

pub struct WaitAll {
    inner: Rc<WaitGroupInner>,
}

impl Future for WaitAll {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.inner.count.get() == 0 {
            return Poll::Ready(());
        }
        *self.inner.waiter.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// A one-way flag tasks can wait on (e.g. "the client is gone"): setting it wakes them all.
#[derive(Clone, Default)]
pub struct Signal {
    inner: Rc<SignalInner>,
}

#[derive(Default)]
struct SignalInner {
    set: Cell<bool>,
    next_ticket: Cell<u64>,
    /// Every task waiting, woken together: several calls of one connection wait for its end
    /// (the last to poll alone was woken, and the others waited out their rounds). Bounded by
    /// the waits alive, each removed when dropped.
    waiters: RefCell<std::collections::BTreeMap<u64, Waker>>,
}

impl Signal {
    pub fn new() -> Signal {
        Signal::default()
    }

    pub fn set(&self) {
        self.inner.set.set(true);
        let waiters = std::mem::take(&mut *self.inner.waiters.borrow_mut());
        for (_, waker) in waiters {
            waker.wake();
        }
    }

    pub fn is_set(&self) -> bool {
        self.inner.set.get()
    }

    pub fn wait(&self) -> SignalWait {
        let ticket = self.inner.next_ticket.get();
        self.inner.next_ticket.set(ticket + 1);
        SignalWait { inner: Rc::clone(&self.inner), ticket }
    }
}

pub struct SignalWait {
    inner: Rc<SignalInner>,
    ticket: u64,
}

impl Future for SignalWait {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.inner.set.get() {
            return Poll::Ready(());
        }
        self.inner.waiters.borrow_mut().insert(self.ticket, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for SignalWait {
    fn drop(&mut self) {
        self.inner.waiters.borrow_mut().remove(&self.ticket);
    }
}

pub enum Either<A, B> {
    Left(A),
    Right(B),
}

/// Polls both futures; the first to complete wins and the other is dropped.
pub async fn select<A: Future + Unpin, B: Future + Unpin>(mut a: A, mut b: B) -> Either<A::Output, B::Output> {
    std::future::poll_fn(move |cx| {
        if let Poll::Ready(value) = Pin::new(&mut a).poll(cx) {
            return Poll::Ready(Either::Left(value));
        }
        if let Poll::Ready(value) = Pin::new(&mut b).poll(cx) {
            return Poll::Ready(Either::Right(value));
        }
        Poll::Pending
    })
    .await
}

/// An async mutex for one thread: what is decided while it is held cannot be raced by
/// another task until the holder's writes are durable. Waiters are the tasks in progress,
/// which the call pipeline bounds; on release every waiter is woken and one wins.
#[derive(Default)]
pub struct Mutex {
    locked: Cell<bool>,
    next_ticket: Cell<u64>,
    waiters: RefCell<std::collections::BTreeMap<u64, Waker>>,
}

pub struct MutexGuard<'a> {
    mutex: &'a Mutex,
}

impl Mutex {
    pub fn new() -> Mutex {
        Mutex::default()
    }

    pub fn lock(&self) -> MutexLock<'_> {
        let ticket = self.next_ticket.get();
        self.next_ticket.set(ticket + 1);
        MutexLock { mutex: self, ticket }
    }
}

pub struct MutexLock<'a> {
    mutex: &'a Mutex,
    ticket: u64,
}

impl<'a> Future for MutexLock<'a> {
    type Output = MutexGuard<'a>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<MutexGuard<'a>> {
        let mutex = self.mutex;
        if !mutex.locked.get() {
            mutex.locked.set(true);
            mutex.waiters.borrow_mut().remove(&self.ticket);
            return Poll::Ready(MutexGuard { mutex });
        }
        mutex.waiters.borrow_mut().insert(self.ticket, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for MutexLock<'_> {
    fn drop(&mut self) {
        self.mutex.waiters.borrow_mut().remove(&self.ticket);
    }
}

impl Drop for MutexGuard<'_> {
    fn drop(&mut self) {
        assert!(self.mutex.locked.get(), "a held mutex is locked");
        self.mutex.locked.set(false);
        let waiters = std::mem::take(&mut *self.mutex.waiters.borrow_mut());
        for (_, waker) in waiters {
            waker.wake();
        }
    }
}

/// Wakes every task waiting when something they wait for changed (a group commit made more
/// events durable). Waiters are the tasks in progress, which the call pipeline bounds.
#[derive(Default)]
pub struct Notify {
    generation: Cell<u64>,
    next_ticket: Cell<u64>,
    waiters: RefCell<std::collections::BTreeMap<u64, Waker>>,
}

impl Notify {
    pub fn notify_all(&self) {
        self.generation.set(self.generation.get() + 1);
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for (_, waker) in waiters {
            waker.wake();
        }
    }

    /// Completes at the next `notify_all` after this call.
    pub fn changed(&self) -> NotifyWait<'_> {
        let ticket = self.next_ticket.get();
        self.next_ticket.set(ticket + 1);
        NotifyWait { notify: self, seen: self.generation.get(), ticket }
    }
}

pub struct NotifyWait<'a> {
    notify: &'a Notify,
    seen: u64,
    ticket: u64,
}

impl Future for NotifyWait<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.notify.generation.get() != self.seen {
            return Poll::Ready(());
        }
        self.notify.waiters.borrow_mut().insert(self.ticket, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for NotifyWait<'_> {
    fn drop(&mut self) {
        self.notify.waiters.borrow_mut().remove(&self.ticket);
    }
}
