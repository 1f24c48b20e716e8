//! A call's listener: turns its run's notices into `notifications/progress` (for a client
//! that sent a progress token) and `notifications/message` (at or above the log level the
//! client asked for), until the call is cancelled.
//!
//! A run never waits on its client: notices go into a bounded queue that a task of the call
//! writes out (the oldest kept; past `NOTICES_QUEUED_MAX` new ones are dropped), so a client
//! that reads slowly cannot hold a run between an action's durable begin and its sending. The
//! call's answer is written after the queue has drained, and nothing after a cancellation.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

use serde_json::{json, Value};

use super::Connection;
use crate::base::sync::Notify;
use crate::call::CallControl;
use crate::env::LocalBoxFuture;
use crate::run::notice::{Listener, Notice, LOG_LEVELS};

/// Notifications a call may have waiting to be written; later ones are dropped.
pub const NOTICES_QUEUED_MAX: usize = 64;

/// A call's notifications waiting to be written, and the task writing them.
pub(crate) struct Outbox {
    connection: Rc<Connection>,
    control: Rc<CallControl>,
    queue: RefCell<VecDeque<Value>>,
    writing: Cell<bool>,
    dropped: Cell<u64>,
    drained: Notify,
}

impl Outbox {
    fn push(self: &Rc<Self>, messages: Vec<Value>) {
        for message in messages {
            if self.queue.borrow().len() >= NOTICES_QUEUED_MAX {
                self.dropped.set(self.dropped.get() + 1);
                continue;
            }
            self.queue.borrow_mut().push_back(message);
        }
        if !self.queue.borrow().is_empty() && !self.writing.replace(true) {
            let outbox = Rc::clone(self);
            self.connection.env.spawn.spawn(Box::pin(async move { outbox.write_out().await }));
        }
    }

    async fn write_out(self: Rc<Self>) {
        loop {
            // Nothing more is sent for a cancelled call.
            if self.control.is_cancelled() {
                self.queue.borrow_mut().clear();
            }
            let next = self.queue.borrow_mut().pop_front();
            let Some(message) = next else { break };
            self.connection.send(message).await;
        }
        self.writing.set(false);
        self.drained.notify_all();
    }

    /// Returns once every queued notification is written (before the call's answer).
    pub async fn drained(&self) {
        while self.writing.get() {
            self.drained.changed().await;
        }
        let dropped = self.dropped.get();
        if dropped > 0 {
            self.connection
                .env
                .log(&format!("{dropped} progress or log notification(s) dropped: the client read too slowly"));
        }
    }
}

pub(super) struct CallListener {
    outbox: Rc<Outbox>,
    pub token: Option<Value>,
    pub log_level: Option<usize>,
    /// The `progress` number of the next notification: it must increase with each one.
    next_progress: Cell<u64>,
    /// Reports of the program's `progress(...)` already sent (each execution repeats them).
    reports_sent: Cell<usize>,
}

impl CallListener {
    /// A listener for a call that asked for progress or log messages, and its outbox.
    pub fn wanted(
        connection: &Rc<Connection>,
        token: Option<Value>,
        log_level: Option<usize>,
        control: &Rc<CallControl>,
    ) -> Option<(Rc<dyn Listener>, Rc<Outbox>)> {
        if token.is_none() && log_level.is_none() {
            return None;
        }
        let outbox = Rc::new(Outbox {
            connection: Rc::clone(connection),
            control: Rc::clone(control),
            queue: RefCell::new(VecDeque::new()),
            writing: Cell::new(false),
            dropped: Cell::new(0),
            drained: Notify::default(),
        });
        let listener = CallListener {
            outbox: Rc::clone(&outbox),
            token,
            log_level,
            next_progress: Cell::new(0),
            reports_sent: Cell::new(0),
        };
        Some((Rc::new(listener), outbox))
    }

    fn progress(&self, message: String, total: Option<i64>) -> Option<Value> {
        let token = self.token.as_ref()?;
        let progress = self.next_progress.get();
        self.next_progress.set(progress + 1);
        let mut params = json!({"progressToken": token, "progress": progress, "message": message});
        if let Some(total) = total {
            params["total"] = json!(total.max(progress as i64));
        }
        Some(json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": params}))
    }

    fn messages(&self, run: &str, notice: Notice) -> Vec<Value> {
        match notice {
            Notice::Started => self.progress(format!("run {run} started"), None).into_iter().collect(),
            Notice::ActionBegun { op, what } => {
                self.progress(format!("action {op} ({what}) begun"), None).into_iter().collect()
            }
            Notice::ActionDone { op } => self.progress(format!("action {op} done"), None).into_iter().collect(),
            Notice::Progress(reports) => {
                let new = reports.iter().skip(self.reports_sent.get());
                let messages = new
                    .filter_map(|report| {
                        let of = report.total.map(|total| format!(" of {total}")).unwrap_or_default();
                        let text = report.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default();
                        self.progress(format!("{}{of}{text}", report.done), report.total)
                    })
                    .collect();
                self.reports_sent.set(reports.len().max(self.reports_sent.get()));
                messages
            }
            Notice::Log { level, text } => match self.log_level {
                Some(least) if level >= least => vec![json!({
                    "jsonrpc": "2.0",
                    "method": "notifications/message",
                    "params": {"level": LOG_LEVELS[level], "logger": "warden", "data": {"run": run, "text": text}}
                })],
                _ => Vec::new(),
            },
        }
    }
}

impl Listener for CallListener {
    fn hear(&self, run: &str, notice: Notice) -> LocalBoxFuture<'_, ()> {
        if !self.outbox.control.is_cancelled() {
            let messages = self.messages(run, notice);
            self.outbox.push(messages);
        }
        Box::pin(std::future::ready(()))
    }
}
