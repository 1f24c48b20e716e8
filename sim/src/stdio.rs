//! The simulated protocol stream: the client model pushes bytes in and reads whole lines
//! out. Once the instance has crashed, nothing more is written.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;
use std::task::{Poll, Waker};

use warden::env::{LocalBoxFuture, Stdio};

#[derive(Default)]
pub struct Pipe {
    input: RefCell<VecDeque<u8>>,
    eof: Cell<bool>,
    reader: RefCell<Option<Waker>>,
    pub output: RefCell<Vec<Vec<u8>>>,
    pub log: RefCell<Vec<String>>,
    /// The simulated ms at which each log line was written.
    pub log_at: RefCell<Vec<u64>>,
    /// When set, writes fail: the client has gone away.
    pub broken: Cell<bool>,
}

impl Pipe {
    pub fn new() -> Rc<Pipe> {
        Rc::new(Pipe::default())
    }

    pub fn push(&self, bytes: &[u8]) {
        self.input.borrow_mut().extend(bytes.iter().copied());
        if let Some(waker) = self.reader.borrow_mut().take() {
            waker.wake();
        }
    }

    pub fn close(&self) {
        self.eof.set(true);
        if let Some(waker) = self.reader.borrow_mut().take() {
            waker.wake();
        }
    }

    pub fn take_output(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut *self.output.borrow_mut())
    }
}

pub struct SimStdio {
    pub pipe: Rc<Pipe>,
    pub crashed: Rc<Cell<bool>>,
    /// Checks that what each answer depends on is durable when it is written.
    pub oracle: Rc<crate::oracle::Oracle>,
    /// Stamps log lines with simulated time.
    pub clock: Rc<crate::clock::SimClock>,
}

impl Stdio for SimStdio {
    fn read(&self, max: usize) -> LocalBoxFuture<'static, io::Result<Vec<u8>>> {
        let pipe = Rc::clone(&self.pipe);
        let crashed = Rc::clone(&self.crashed);
        Box::pin(std::future::poll_fn(move |cx| {
            if crashed.get() {
                return Poll::Pending;
            }
            let mut input = pipe.input.borrow_mut();
            if !input.is_empty() {
                let n = input.len().min(max);
                // Copied slice by slice (a byte-wise drain cost a twentieth of the sweep).
                let (front, back) = input.as_slices();
                let mut chunk = Vec::with_capacity(n);
                chunk.extend_from_slice(&front[..n.min(front.len())]);
                chunk.extend_from_slice(&back[..n - n.min(front.len())]);
                input.drain(..n);
                return Poll::Ready(Ok(chunk));
            }
            if pipe.eof.get() {
                return Poll::Ready(Ok(Vec::new()));
            }
            *pipe.reader.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        }))
    }

    fn write_line(&self, line: Vec<u8>) -> LocalBoxFuture<'static, io::Result<()>> {
        if self.crashed.get() {
            return Box::pin(std::future::pending());
        }
        if self.pipe.broken.get() {
            return Box::pin(std::future::ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "the client is gone"))));
        }
        self.oracle.before_answer(&line);
        self.pipe.output.borrow_mut().push(line);
        Box::pin(std::future::ready(Ok(())))
    }

    fn log(&self, line: &str) {
        self.pipe.log.borrow_mut().push(line.to_string());
        self.pipe.log_at.borrow_mut().push(self.clock.now());
    }
}
