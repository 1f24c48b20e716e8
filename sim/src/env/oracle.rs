//! The durability oracle: wherever the server lets something depend on a record, the record
//! must already be durable (data fsynced, directory entries too). The simulated disk knows
//! which bytes would survive a crash now, so a missing fsync is found on the first call that
//! depends on it, without a crash having to land in its window.
//!
//! Checked dependents: a write action reaching a service (its journal's begin record), an
//! answer to a call (the run's journal and every ledger line naming the run, or its waiting
//! record), a progress notification of an action begun (its begin record), and the notify
//! command (the waiting record it announces).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::Rc;

use serde_json::Value;
use warden::base::layout::WAITING_DIR;
use warden::env::HttpRequest;
use warden::store::ledger::LEDGER_FILE;

use crate::env::disk::SimDisk;
use crate::report::Violation;

/// A journal's latest begin line and its end offset, unless the journal has ended.
fn latest_begin_of_unended(bytes: &[u8]) -> Option<(usize, Vec<u8>)> {
    let mut end = bytes.len();
    for line in crate::env::oracle::lines_from_end(bytes) {
        match crate::env::oracle::record_tag(line) {
            Some("end") => return None,
            Some("begin") => return Some((end, line.to_vec())),
            _ => end -= line.len(),
        }
    }
    None
}

/// The latest action record (begin or done) of a journal whose run has not ended.
fn latest_action_record_of_unended(bytes: &[u8]) -> Option<Vec<u8>> {
    for line in crate::env::oracle::lines_from_end(bytes) {
        match crate::env::oracle::record_tag(line) {
            Some("end") => return None,
            Some("begin" | "done") => return Some(line.to_vec()),
            _ => {}
        }
    }
    None
}

/// The last line of `bytes` that holds `needle`: (its end offset, the line with its newline).
fn last_line_holding<'a>(bytes: &'a [u8], needle: &[u8]) -> Option<(usize, &'a [u8])> {
    let at = memchr::memmem::rfind(bytes, needle)?;
    let start = memchr::memrchr(b'\n', &bytes[..at]).map_or(0, |n| n + 1);
    let end = memchr::memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |n| at + n + 1);
    Some((end, &bytes[start..end]))
}

/// Answers that report no outcome of their run, so depend on its reserve alone (the run being
/// held by the ledger goes on, at the next start if need be), not on its journal's tail: a
/// `once` repeat told its earlier run is in progress or was interrupted (its server stopping
/// on a failed write); a round ended by the clock, the run ending with whatever is durable
/// (seed 49043); a session call whose client never answered, or a stop came first, told its
/// run waits for its round's end, which may come and settle the run as it is written (seed
/// 475159 of the sweep over new seeds).
const NO_OUTCOME: [&str; 5] = [
    "already in progress as run",
    "was interrupted and resumes when the server starts again",
    "request for input has just expired; the run ends without it",
    "it waits until its round expires",
    "the run waits for its input until its round expires",
];

/// The action number of a progress message `action N (...) begun`.
fn begun_op(text: &str) -> Option<u64> {
    let rest = text.strip_prefix("action ")?;
    text.ends_with(") begun").then_some(())?;
    rest.split_once(' ')?.0.parse().ok()
}

/// What a durability violation is reported as (DESIGN.md section 7: durable before dependent).
pub const INVARIANT: u8 = 11;

pub struct Oracle {
    disk: Rc<SimDisk>,
    journals: PathBuf,
    pub violations: RefCell<Vec<Violation>>,
    /// Progress token -> the run its notification named, to tie an answer to its run.
    runs_by_token: RefCell<BTreeMap<String, String>>,
    /// Dependents checked, for the report.
    pub checks: Cell<u64>,
}

impl Oracle {
    pub fn new(disk: Rc<SimDisk>, journals: PathBuf) -> Rc<Oracle> {
        Rc::new(Oracle {
            disk,
            journals,
            violations: RefCell::new(Vec::new()),
            runs_by_token: RefCell::new(BTreeMap::new()),
            checks: Cell::new(0),
        })
    }

    fn violation(&self, message: String) {
        self.violations.borrow_mut().push(Violation { invariant: INVARIANT, message });
    }

    /// The journal files on disk now: (path, run id).
    fn journal_files(&self) -> Vec<(PathBuf, String)> {
        self.disk
            .files()
            .into_iter()
            .filter(|p| p.starts_with(&self.journals))
            .filter_map(|p| {
                let run = p.file_name()?.to_str()?.strip_suffix(".journal")?.to_string();
                Some((p, run))
            })
            .collect()
    }

    /// Before a write request reaches a service: some journal holds its begin record, durably.
    pub fn before_request(&self, request: &HttpRequest) {
        // The provider's path on any host: an operator's world keeps its provider's URL.
        if request.url.starts_with(crate::names::MODEL_HOST) || request.url.ends_with("/v1/messages") {
            return self.before_model_request();
        }
        if request.method == "GET" || request.method == "HEAD" {
            return;
        }
        self.checks.set(self.checks.get() + 1);
        let key = request.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("idempotency-key")).map(|(_, v)| v);
        let body = String::from_utf8_lossy(&request.body).into_owned();
        let form: BTreeMap<String, String> = form_urlencoded::parse(&request.body).into_owned().collect();
        let matches = |record: &Value, run: &str| -> bool {
            let action = &record["action"];
            if record["record"] != "begin" {
                return false;
            }
            match key {
                Some(key) => *key == format!("warden-{run}-{}", record["op"]),
                None if action["method"] == "REFUND" => {
                    form.get("payment_intent").is_some_and(|intent| action["body"] == intent.as_str())
                }
                None => action["target"] == request.url.as_str() && action["body"] == body.as_str(),
            }
        };
        self.begun_durably(&matches, &format!("{} {} reached the service", request.method, request.url));
    }

    /// A model call changes nothing outside, so it may be sent again after a crash, like a
    /// read; but only while it is begun and not done: once its done record is written the
    /// run replays the recorded answer and never asks the provider again (it would cost
    /// tokens twice and could change what the run does). Some unended run's latest action
    /// record is the begin of a model call.
    fn before_model_request(&self) {
        self.checks.set(self.checks.get() + 1);
        for (path, _) in self.journal_files() {
            let latest = self.disk.with_bytes(&path, latest_action_record_of_unended).flatten();
            let Some(record) = latest.and_then(|line| serde_json::from_slice::<Value>(&line).ok()) else { continue };
            if record["rec"]["record"] == "begin" && record["rec"]["action"]["kind"] == "model" {
                return;
            }
        }
        self.violation("a model request reached the provider, but no run has a model call begun and not done".into());
    }

    /// Before an SQLite write commits: its journal's begin record is durable.
    pub fn before_sql_write(&self, run: &str, op: u64) {
        self.checks.set(self.checks.get() + 1);
        let wanted = |record: &Value, of: &str| of == run && record["record"] == "begin" && record["op"] == op;
        self.begun_durably(&wanted, &format!("the SQLite write of run {run} action {op} reached the service"));
    }

    /// Some journal's latest begin record matching the request is durable (an action begun
    /// again after an operator said it did not happen is begun by its latest record).
    fn begun_durably(&self, matches: &dyn Fn(&Value, &str) -> bool, what: &str) {
        let mut seen = false;
        for (path, run) in self.journal_files() {
            // An action being sent is its run's latest begin, and the run has not ended:
            // journals that ended are skipped (a settled run's begin of the same request
            // does not vouch for this one), and only the latest begin line is read.
            let latest = self.disk.with_bytes(&path, latest_begin_of_unended);
            let Some(Some((end, line))) = latest else { continue };
            let Ok(record) = serde_json::from_slice::<Value>(&line) else { continue };
            if matches(&record["rec"], &run) {
                if end <= self.disk.surviving_len(&path) && line.ends_with(b"\n") {
                    return;
                }
                seen = true;
            }
        }
        let why = if seen { "its begin record is not durable yet" } else { "no journal holds its begin record" };
        self.violation(format!("{what}, but {why}"));
    }

    /// A notification that `run` began action `op` is written after the record was durable
    /// (it is queued then, and may be written once the run has moved on, even ended): the
    /// run's journal holds that begin record within what would survive a crash.
    fn begin_of_run_durable(&self, run: &str, op: u64) {
        let Some((path, _)) = self.journal_files().into_iter().find(|(_, of)| of == run) else {
            self.violation(format!("the client heard that run {run} began action {op}, but it has no journal"));
            return;
        };
        let found = self.disk.with_bytes(&path, |bytes| {
            let mut end = bytes.len();
            for line in crate::env::oracle::lines_from_end(bytes) {
                if crate::env::oracle::record_tag(line) == Some("begin") {
                    let record = serde_json::from_slice::<Value>(line).ok();
                    if record.is_some_and(|r| r["rec"]["op"] == op) && line.ends_with(b"\n") {
                        return Some(end);
                    }
                }
                end -= line.len();
            }
            None
        });
        match found.flatten() {
            Some(end) if end <= self.disk.surviving_len(&path) => {}
            Some(_) => self.violation(format!(
                "the client heard that run {run} began action {op}, but its begin record is not durable yet"
            )),
            None => self.violation(format!(
                "the client heard that run {run} began action {op}, but its journal holds no begin record of it"
            )),
        }
    }

    /// Before a line reaches the client: an answer's run is durable (journal and ledger), or
    /// the waiting record it announces is.
    pub fn before_answer(&self, line: &[u8]) {
        let Ok(message) = serde_json::from_slice::<Value>(line) else { return };
        if message["method"] == "notifications/progress" {
            let token = message["params"]["progressToken"].to_string();
            let text = message["params"]["message"].as_str().unwrap_or("");
            if let Some(run) = text.strip_prefix("run ").and_then(|r| r.strip_suffix(" started")) {
                self.runs_by_token.borrow_mut().insert(token, run.to_string());
            } else if let Some(op) = begun_op(text) {
                // The client hears of an action only once its begin record is durable.
                let Some(run) = self.runs_by_token.borrow().get(&token).cloned() else { return };
                self.checks.set(self.checks.get() + 1);
                self.begin_of_run_durable(&run, op);
            }
            return;
        }
        let result = &message["result"];
        if result.is_null() || message["id"].is_null() {
            return;
        }
        let text = result["content"][0]["text"].as_str().unwrap_or("");
        if text.contains("could not record the call durably") || text.contains("could not be recorded durably") {
            return;
        }
        // A session's answers that the run could not take: the round's refusal, as a retry's
        // -32602 is, changes nothing and depends on nothing (seed 19771: another retry had
        // taken the round, and its record was not yet durable). The same words end a session
        // call still asking its client when another call takes its run's round (seed 6747).
        if text.starts_with("the run's request for input could not be answered") {
            return;
        }
        if result["_meta"]["dev.warden/run"]["status"] == "waiting_for_operator" {
            let run = result["_meta"]["dev.warden/run"]["run"].as_str().unwrap_or("").to_string();
            self.checks.set(self.checks.get() + 1);
            self.waiting_durable(&run, "the answer that it waits");
            return;
        }
        // The run the answer names (a `once` repeat's is an earlier run), else the one its
        // progress named.
        let named = result["_meta"][warden::call::answer::META_RUN]["run"].as_str().map(str::to_string);
        let Some(run) = named.or_else(|| self.runs_by_token.borrow().get(&message["id"].to_string()).cloned()) else {
            return;
        };
        self.checks.set(self.checks.get() + 1);
        // An answer that the run asks for input depends on the question, durable; another
        // retry may be taking the run further meanwhile (its records are its own answer's).
        if result["resultType"] == "input_required" {
            self.asked_durable(&run);
            return;
        }
        if result["isError"] == true && NO_OUTCOME.iter().any(|said| text.contains(said)) {
            // Its reserve only: the run may end between the answer's decision and its
            // writing, and its settle is the run's own, not this answer's (seed 29971).
            self.ledger_line_durable(&run, &format!("\"event\":\"reserve\",\"run\":\"{run}\""));
            return;
        }
        self.run_durable(&run);
    }

    /// The run's whole journal and every ledger line naming it would survive a crash now.
    /// (Not while a misdirected append is pending: the disk put bytes where none were
    /// written, which the next start must refuse; what survives is not the server's doing.)
    fn run_durable(&self, run: &str) {
        if self.disk.misdirected.borrow().is_some() {
            return;
        }
        let Some((journal, _)) = self.journal_files().into_iter().find(|(_, r)| r == run) else { return };
        let length = self.disk.with_bytes(&journal, |b| b.len()).unwrap_or(0);
        if self.disk.surviving_len(&journal) < length {
            self.violation(format!("run {run} was answered before its journal was durable"));
        }
        self.ledger_durable(run);
    }

    /// Every ledger line naming the run would survive a crash now.
    fn ledger_durable(&self, run: &str) {
        self.ledger_line_durable(run, &format!("\"run\":\"{run}\""));
    }

    /// Every ledger line holding `named` (about `run`) would survive a crash now.
    fn ledger_line_durable(&self, run: &str, named: &str) {
        if self.disk.misdirected.borrow().is_some() {
            return;
        }
        // What survives is a prefix: every line holding `named` survives when its last does.
        let ledger = self.journals.join(LEDGER_FILE);
        let last =
            self.disk.with_bytes(&ledger, |bytes| last_line_holding(bytes, named.as_bytes()).map(|(end, _)| end));
        if let Some(Some(end)) = last {
            if end > self.disk.surviving_len(&ledger) && !self.lines_survive_elsewhere(&ledger, named) {
                self.violation(format!("run {run} was answered before its ledger records were durable"));
            }
        }
    }

    /// Whether what a crash now would leave at the file's path holds as many whole lines
    /// holding `named` as its current bytes do: while a compaction's rename is not yet durable,
    /// the old ledger survives, and it holds the run's lines, made durable before the rewrite
    /// (which re-encodes them from the state, so they are counted, not compared byte for byte:
    /// seeds 469778 and 475159 of the sweep over new seeds, where the rename counted as the
    /// lines' loss).
    fn lines_survive_elsewhere(&self, path: &std::path::Path, named: &str) -> bool {
        let needle = named.as_bytes();
        let whole_lines_holding = |bytes: &[u8]| {
            let whole = &bytes[..memchr::memrchr(b'\n', bytes).map_or(0, |end| end + 1)];
            whole.split(|b| *b == b'\n').filter(|line| memchr::memmem::find(line, needle).is_some()).count()
        };
        let surviving = whole_lines_holding(&self.disk.surviving_bytes(path));
        self.disk.with_bytes(path, |bytes| surviving >= whole_lines_holding(bytes)).unwrap_or(true)
    }

    /// The run's latest `asked` record would survive a crash now.
    fn asked_durable(&self, run: &str) {
        if self.disk.misdirected.borrow().is_some() {
            return;
        }
        let Some((journal, _)) = self.journal_files().into_iter().find(|(_, r)| r == run) else { return };
        let found = self
            .disk
            .with_bytes(&journal, |bytes| last_line_holding(bytes, b"\"record\":\"asked\"").map(|(end, _)| end));
        match found.flatten() {
            Some(end) if end <= self.disk.surviving_len(&journal) => {}
            Some(_) => self.violation(format!("run {run} asked its client for input before the question was durable")),
            None => self.violation(format!("run {run} asked its client for input, but its journal holds no question")),
        }
    }

    fn waiting_durable(&self, run: &str, what: &str) {
        let record = self.journals.join(WAITING_DIR).join(format!("{run}.json"));
        let length = self.disk.with_bytes(&record, |b| b.len()).unwrap_or(0);
        if length == 0 || self.disk.surviving_len(&record) < length {
            self.violation(format!("{what} of run {run} came before its waiting record was durable"));
        }
    }

    /// Before the notify command runs: every waiting record it may announce is durable.
    pub fn before_notify(&self, input: &[u8]) {
        let line = input.strip_suffix(b"\n").unwrap_or(input);
        let Ok(record) = warden::store::record::decode::<Value>(line) else { return };
        if let Some(run) = record["run"].as_str() {
            self.checks.set(self.checks.get() + 1);
            self.waiting_durable(run, "the notify command");
        }
    }
}

/// A journal line's record tag (`begin`, `done`, `end`...), read at its fixed place in the
/// checksummed line (`{"sum":"<16 hex>","rec":{"record":"<tag>"`) without parsing the line:
/// an end record may hold a result of a megabyte.
pub fn record_tag(line: &[u8]) -> Option<&str> {
    const HEAD: usize = "{\"sum\":\"".len() + 16;
    let rest = line.get(HEAD..)?.strip_prefix(b"\",\"rec\":{\"record\":\"")?;
    let end = rest.iter().position(|&b| b == b'"')?;
    std::str::from_utf8(&rest[..end]).ok()
}

/// The lines of `bytes` from the last to the first, each with its newline (the last may
/// have none), found with `memrchr`: a journal's last line may be a megabyte long.
pub fn lines_from_end(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut end = bytes.len();
    std::iter::from_fn(move || {
        if end == 0 {
            return None;
        }
        let body_end = if bytes[end - 1] == b'\n' { end - 1 } else { end };
        let start = memchr::memrchr(b'\n', &bytes[..body_end]).map_or(0, |n| n + 1);
        let line = &bytes[start..end];
        end = start;
        Some(line)
    })
}
