//! What a run tells the client whose call started it, while it runs (seed 004's progress and
//! logging): its run id at start, each action begun and done, what the program reports with
//! `progress(...)`, and its prints and lifecycle lines as log messages. Nothing here is
//! durable or journaled: a run resumed after a restart has no caller to tell. The protocol
//! layer decides what reaches the client (a progress token, a log level, a cancellation).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use crate::broker::ProgressReport;
use crate::env::LocalBoxFuture;

/// The log levels of MCP (RFC 5424), least severe first.
pub const LOG_LEVELS: &[&str] = &["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];

/// The index of a level in `LOG_LEVELS`.
pub fn log_level(name: &str) -> Option<usize> {
    LOG_LEVELS.iter().position(|level| *level == name)
}

pub const DEBUG: usize = 0;
pub const INFO: usize = 1;

#[derive(Clone, Debug, PartialEq)]
pub enum Notice {
    /// The run was reserved and is starting.
    Started,
    /// An action's begin record is durable: it is about to be sent.
    ActionBegun { op: u64, what: String },
    /// An action's done record is durable.
    ActionDone { op: u64 },
    /// Every report the program made in its latest execution, from its start (an execution
    /// replays the program from the beginning; the listener sends only those it has not).
    Progress(Vec<ProgressReport>),
    /// A line for the client's log, at a level of `LOG_LEVELS`.
    Log { level: usize, text: String },
}

/// Hears a run's notices; the protocol layer's listener turns them into notifications.
pub trait Listener {
    fn hear(&self, run: &str, notice: Notice) -> LocalBoxFuture<'_, ()>;
}

/// The listener of each run in progress whose caller is listening.
#[derive(Default)]
pub struct Listeners {
    by_run: RefCell<BTreeMap<String, Rc<dyn Listener>>>,
}

/// Removes a run's listener when its call ends.
pub struct Listening<'a> {
    listeners: &'a Listeners,
    run: String,
}

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        self.listeners.by_run.borrow_mut().remove(&self.run);
    }
}

impl Listeners {
    pub fn listen(&self, run: &str, listener: Rc<dyn Listener>) -> Listening<'_> {
        self.by_run.borrow_mut().insert(run.to_string(), listener);
        Listening { listeners: self, run: run.to_string() }
    }

    /// Tells `run`'s listener, if it has one, and waits until it has heard (a client that
    /// reads slowly slows its own run down, never the others').
    pub async fn tell(&self, run: &str, notice: Notice) {
        let listener = self.by_run.borrow().get(run).cloned();
        if let Some(listener) = listener {
            listener.hear(run, notice).await;
        }
    }
}
