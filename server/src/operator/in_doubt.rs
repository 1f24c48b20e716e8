//! An action in doubt shown whole, wherever a person decides about it (`warden mcp status`,
//! `warden runs show`, `warden resolve`, the notify command's input): what the run was asked
//! (its arguments, scrubbed when the server wrote them), what the action was (kind, method,
//! full target, amount and currency, idempotency key, when it was begun) and what the service
//! last said. A person answering "did it happen?" from less refunded an order twice.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::base::text::printable;
use crate::base::time::utc_timestamp;
use crate::broker::shown::described;
use crate::broker::Action;
use crate::catalog::Catalog;
use crate::env::{Env, PostgresTarget, RecordKind};
use crate::operator::kept::Kept;
use crate::run::runs::WaitingRecord;
use crate::store::journal::JournalRecord;
use crate::store::records::RunRecords;

/// What is shown of a request's body or a run's arguments in text (`--json` has them whole).
const SHOWN_CHARS_MAX: usize = 600;

/// A run waiting for a person, shown whole: its waiting record (written by the server, its
/// secrets scrubbed) and when its action was begun (from its journal).
pub struct InDoubt<'a> {
    pub record: &'a WaitingRecord,
    pub begun_at_ms: Option<u64>,
}

impl InDoubt<'_> {
    /// The action as `described` gives it: kept in the record, or (a record written before
    /// it was kept) described from the action alone.
    fn action(&self) -> Option<Value> {
        if let Some(described) = &self.record.described {
            return Some(described.clone());
        }
        let action = serde_json::from_value::<Action>(self.record.action.clone()).ok()?;
        Some(described(&action, None))
    }

    /// As JSON, every field whole.
    pub fn to_json(&self) -> Value {
        json!({
            "op": self.record.op,
            "halted": self.record.halted,
            "action": self.action(),
            "begun_at": self.begun_at_ms.map(utc_timestamp),
            "waiting_since": utc_timestamp(self.record.at_ms),
            "why": self.record.reason,
            "arguments": self.record.arguments,
            "resolve": self.record.resolve,
        })
    }

    /// As text, one field a line, each line starting with `indent`, control characters escaped
    /// (the command that decides it is the caller's to print).
    pub fn text(&self, indent: &str) -> String {
        let mut lines: Vec<(&str, String)> = Vec::new();
        if let Some(action) = self.action().filter(|_| !self.record.halted) {
            let field = |name: &str| action[name].as_str().map(str::to_string);
            let what = format!(
                "action {} ({} {})",
                self.record.op,
                action["kind"].as_str().unwrap_or("?"),
                action["method"].as_str().unwrap_or("?")
            );
            lines.push(("in doubt", what));
            lines.extend(field("target").map(|target| ("target", target)));
            if let (Some(amount), Some(currency)) = (field("amount"), field("currency")) {
                lines.push(("amount", format!("{amount} {currency}")));
            }
            lines.extend(field("idempotency_key").map(|key| ("idempotency key", key)));
            lines.extend(field("body").map(|body| ("request body", clipped(&body))));
            lines.extend(self.begun_at_ms.map(|at| ("begun", utc_timestamp(at))));
        }
        lines.push(("why", self.record.reason.clone()));
        if let Some(arguments) = &self.record.arguments {
            lines.push(("run's arguments", clipped(&arguments.to_string())));
        }
        lines.push(("journal", self.record.journal.clone()));
        let width = lines.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
        let mut out = String::new();
        for (name, value) in lines {
            out.push_str(&format!(
                "{indent}{:<width$}  {}\n",
                format!("{name}:"),
                printable(&value),
                width = width + 1
            ));
        }
        out
    }
}

/// At most `SHOWN_CHARS_MAX` characters, saying how many more there are.
fn clipped(text: &str) -> String {
    crate::base::text::clipped(text, SHOWN_CHARS_MAX, "--json has it whole")
}

/// The run `run` names (its id, or a prefix only it has), waiting for a person: its journal's
/// address (what `warden resolve --journal` takes, and the admin channel's way to the run) and
/// its action shown whole, for the person to confirm before deciding.
pub async fn find(
    env: &Env,
    catalog: &Catalog,
    store: Option<PostgresTarget>,
    run: &str,
) -> Result<(PathBuf, String), String> {
    let journals = &catalog.manifest.server.journals;
    let Kept { state, records, .. } = Kept::read(env, journals, store).await?;
    let entry = crate::operator::runs::find(&state, run)?;
    let (tool, run) = (&entry.tool, &entry.run);
    let journal = PathBuf::from(records.address(tool, run));
    let Some(record) = WaitingRecord::read(&records, tool, run).await? else {
        return Err(format!(
            "run {run} of `{tool}` is not waiting for an operator: there is nothing to decide (`warden runs show` \
             tells where it stands)"
        ));
    };
    let journal_records = journal_records(&records, tool, run).await;
    let begun_at_ms = journal_records.and_then(|records| begun_at(&records, record.op));
    Ok((journal, InDoubt { record: &record, begun_at_ms }.text("  ")))
}

/// What `warden resolve --journal <path>` shows before deciding: the run's action in doubt,
/// read from its waiting record beside the journal (files only; `None` when there is none).
pub async fn shown_from_journal(env: &Env, journal_path: &Path) -> Option<String> {
    let root = journal_path.parent()?.parent()?.parent()?;
    let root = if root.as_os_str().is_empty() { Path::new(".") } else { root };
    let run = journal_path.file_name()?.to_str()?.strip_suffix(".journal")?;
    let waiting = root.join(crate::base::layout::WAITING_DIR).join(format!("{run}.json"));
    let record = crate::run::runs::read_waiting(env, &waiting).await.ok()?;
    let bytes = env.disk.read(journal_path).await.ok()?;
    let records = crate::store::record::parse_file::<JournalRecord>(&bytes).ok()?.records;
    Some(InDoubt { record: &record, begun_at_ms: begun_at(&records, record.op) }.text("  "))
}

/// A run's journal records, if its journal can be read whole (a torn last line left out).
pub async fn journal_records(records: &RunRecords, tool: &str, run: &str) -> Option<Vec<JournalRecord>> {
    let bytes = records.read(tool, run, RecordKind::Journal).await.ok()??;
    Some(crate::store::record::parse_file::<JournalRecord>(&bytes).ok()?.records)
}

/// When action `op` was last begun, from a journal's records.
pub fn begun_at(records: &[JournalRecord], op: u64) -> Option<u64> {
    records.iter().rev().find_map(|record| match record {
        JournalRecord::Begin { op: begun, at_ms, .. } if *begun == op => Some(*at_ms),
        _ => None,
    })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::shown::tests::refund;

    /// What reaches a terminal is escaped: a client's argument cannot clear the screen.
    #[test]
    fn the_text_is_escaped_and_names_every_field() {
        let record = WaitingRecord {
            run: "r".into(),
            tool: "refund_order".into(),
            op: 1,
            action: serde_json::to_value(refund()).unwrap(),
            reason: "no answer".into(),
            journal: "j".into(),
            resolve: "warden resolve m r --op 1".into(),
            at_ms: 1,
            halted: false,
            arguments: Some(json!({"order": "pi_1001\u{1b}[2J"})),
            described: None,
        };
        let text = InDoubt { record: &record, begun_at_ms: Some(0) }.text("  ");
        assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text:?}");
        for field in
            ["in doubt:", "target:", "amount:", "12.50 USD", "idempotency key:", "begun:", "why:", "run's arguments:"]
        {
            assert!(text.contains(field), "{field} in {text}");
        }
    }
}
