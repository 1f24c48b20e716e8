//! Single-threaded coordination without a runtime: the server runs on one thread (tokio's
//! current-thread runtime in production, the simulator's executor in tests), so these are
//! `Rc`/`RefCell` based and work under either.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// Counts tasks in progress; `wait` completes when none are left.
#[derive(Clone, Default)]
pub struct WaitGroup {
    inner: Rc<WaitGroupInner>,
}

#[derive(Default)]
struct WaitGroupInner {
    count: Cell<usize>,
    waiters: RefCell<Vec<Waker>>,
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
            for waker in self.inner.waiters.borrow_mut().drain(..) {
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
        self.inner.waiters.borrow_mut().push(cx.waker().clone());
        Poll::Pending
    }
}
