//! The simulated protocol stream: the client model pushes bytes in and reads whole lines
//! out. Once the instance has crashed, nothing more is written.
//!
//! A slow reader (a fault): the client reads lines some ms apart, the pipe between them
//! holds `PIPE_LINES`, and a write waits while it is full, as a real pipe pushes back. The
//! writes waiting at once are counted: a server that keeps reading requests while its
//! answers cannot be written holds ever more of them.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;
use std::task::{Poll, Waker};

use warden::env::{Clock, LocalBoxFuture, Stdio};

use crate::env::clock::{SimClock, SimClockHandle};

/// Lines the pipe holds before a write waits for the client to read.
pub const PIPE_LINES: usize = 2;

/// The slow-reader fault, shared by every instance's pipe.
#[derive(Default)]
pub struct SlowReader {
    /// (ms between the lines the client reads, lines left to read slowly).
    pub armed: Cell<(u64, u32)>,
    /// Lines read slowly so far (all instances): the fault fired.
    pub lines_read: Cell<u64>,
    /// The most writes that waited at once in any instance's pipe.
    pub waiting_peak: Cell<usize>,
}

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
    pub slow_reader: Rc<SlowReader>,
    /// Lines written and not yet read by a slow reader.
    unread: RefCell<VecDeque<Vec<u8>>>,
    /// The reader task, waiting for a line.
    reader_task: RefCell<Option<Waker>>,
    /// Writes waiting for room in the pipe.
    writers: RefCell<Vec<Waker>>,
    waiting_writes: Cell<usize>,
    /// Whether the slow client's task runs (spawned at the first write it must read, so
    /// seeds without the fault schedule exactly as before it existed).
    reader_spawned: Cell<bool>,
    /// The most writes that waited at once.
    pub waiting_writes_peak: Cell<usize>,
}

impl Pipe {
    pub fn new(slow_reader: Rc<SlowReader>) -> Rc<Pipe> {
        Rc::new(Pipe { slow_reader, ..Pipe::default() })
    }

    /// Whether a write goes through the pipe's buffer rather than straight to the client.
    fn reading_slowly(&self) -> bool {
        self.slow_reader.armed.get().1 > 0 || !self.unread.borrow().is_empty()
    }

    /// The client reads, as a slow reader does, one line at a time until none is left.
    /// It ends with the instance's executor.
    pub async fn slow_client(self: Rc<Pipe>, clock: Rc<SimClock>) {
        loop {
            std::future::poll_fn(|cx| {
                if self.unread.borrow().is_empty() {
                    *self.reader_task.borrow_mut() = Some(cx.waker().clone());
                    return Poll::Pending;
                }
                Poll::Ready(())
            })
            .await;
            let (ms, left) = self.slow_reader.armed.get();
            if left > 0 {
                self.slow_reader.armed.set((ms, left - 1));
                self.slow_reader.lines_read.set(self.slow_reader.lines_read.get() + 1);
                SimClockHandle(Rc::clone(&clock)).sleep(ms).await;
            }
            let line = self.unread.borrow_mut().pop_front();
            self.output.borrow_mut().extend(line);
            for writer in self.writers.borrow_mut().drain(..) {
                writer.wake();
            }
        }
    }

    /// The server stopped: the client still reads what the pipe holds.
    pub fn deliver_unread(&self) {
        let unread: Vec<Vec<u8>> = self.unread.borrow_mut().drain(..).collect();
        self.output.borrow_mut().extend(unread);
    }

    /// Puts `line` in the pipe's buffer if there is room.
    fn offer(&self, line: &mut Option<Vec<u8>>) -> bool {
        if self.unread.borrow().len() >= PIPE_LINES {
            return false;
        }
        self.unread.borrow_mut().extend(line.take());
        if let Some(reader) = self.reader_task.borrow_mut().take() {
            reader.wake();
        }
        true
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
    pub oracle: Rc<crate::env::oracle::Oracle>,
    /// Stamps log lines with simulated time.
    pub clock: Rc<crate::env::clock::SimClock>,
    /// Starts the slow client's task.
    pub spawn: crate::env::executor::SimSpawn,
}

impl Stdio for SimStdio {
    fn read(&self, max: usize) -> LocalBoxFuture<'static, io::Result<Vec<u8>>> {
        Pipe::read_chunk(&self.pipe, &self.crashed, max)
    }

    fn write_line(&self, line: Vec<u8>) -> LocalBoxFuture<'static, io::Result<()>> {
        self.write_through(line)
    }

    fn log(&self, line: &warden::env::LogLine<'_>) {
        self.pipe.log.borrow_mut().push(line.text());
        self.pipe.log_at.borrow_mut().push(self.clock.now());
    }
}

impl Pipe {
    /// The next chunk the client sent (at most `max` bytes); empty at EOF; never once the
    /// instance has crashed.
    pub fn read_chunk(
        pipe: &Rc<Pipe>,
        crashed: &Rc<Cell<bool>>,
        max: usize,
    ) -> LocalBoxFuture<'static, io::Result<Vec<u8>>> {
        let pipe = Rc::clone(pipe);
        let crashed = Rc::clone(crashed);
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
}

impl SimStdio {
    /// A line to the client: checked by the oracle, then into the pipe (or waiting for a
    /// slow reader).
    pub fn write_through(&self, line: Vec<u8>) -> LocalBoxFuture<'static, io::Result<()>> {
        if self.crashed.get() {
            return Box::pin(std::future::pending());
        }
        if self.pipe.broken.get() {
            return Box::pin(std::future::ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "the client is gone"))));
        }
        self.oracle.before_answer(&line);
        if !self.pipe.reading_slowly() {
            self.pipe.output.borrow_mut().push(line);
            return Box::pin(std::future::ready(Ok(())));
        }
        if !self.pipe.reader_spawned.replace(true) {
            let client = Rc::clone(&self.pipe).slow_client(Rc::clone(&self.clock));
            warden::env::Spawn::spawn(&self.spawn, Box::pin(client));
        }
        Box::pin(WaitingWrite { pipe: Rc::clone(&self.pipe), line: Some(line), counted: false })
    }
}

/// A write into a slow reader's pipe: done once the line is in its buffer.
struct WaitingWrite {
    pipe: Rc<Pipe>,
    line: Option<Vec<u8>>,
    /// Whether this write is counted among those waiting.
    counted: bool,
}

impl std::future::Future for WaitingWrite {
    type Output = io::Result<()>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.pipe.broken.get() {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "the client is gone")));
        }
        if this.pipe.offer(&mut this.line) {
            return Poll::Ready(Ok(()));
        }
        if !this.counted {
            this.counted = true;
            let waiting = this.pipe.waiting_writes.get() + 1;
            this.pipe.waiting_writes.set(waiting);
            let peak = &this.pipe.slow_reader.waiting_peak;
            peak.set(peak.get().max(waiting));
        }
        this.pipe.writers.borrow_mut().push(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for WaitingWrite {
    fn drop(&mut self) {
        if self.counted {
            self.pipe.waiting_writes.set(self.pipe.waiting_writes.get() - 1);
        }
    }
}
