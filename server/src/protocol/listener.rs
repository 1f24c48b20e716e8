//! A call's listener: turns its run's notices into `notifications/progress` (for a client
//! that sent a progress token) and `notifications/message` (at or above the log level the
//! client asked for), until the call is cancelled.

use std::cell::Cell;
use std::rc::Rc;

use serde_json::{json, Value};

use super::Connection;
use crate::call::CallControl;
use crate::env::LocalBoxFuture;
use crate::notice::{Listener, Notice, LOG_LEVELS};

pub(super) struct CallListener {
    pub connection: Rc<Connection>,
    pub token: Option<Value>,
    pub log_level: Option<usize>,
    pub control: Rc<CallControl>,
    /// The `progress` number of the next notification: it must increase with each one.
    next_progress: Cell<u64>,
    /// Reports of the program's `progress(...)` already sent (each execution repeats them).
    reports_sent: Cell<usize>,
}

impl CallListener {
    pub fn wanted(
        connection: &Rc<Connection>,
        token: Option<Value>,
        log_level: Option<usize>,
        control: &Rc<CallControl>,
    ) -> Option<Rc<dyn Listener>> {
        if token.is_none() && log_level.is_none() {
            return None;
        }
        Some(Rc::new(CallListener {
            connection: Rc::clone(connection),
            token,
            log_level,
            control: Rc::clone(control),
            next_progress: Cell::new(0),
            reports_sent: Cell::new(0),
        }))
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
        // Nothing more is sent for a cancelled call.
        let messages = if self.control.is_cancelled() { Vec::new() } else { self.messages(run, notice) };
        Box::pin(async move {
            for message in messages {
                self.connection.send(message).await;
            }
        })
    }
}
