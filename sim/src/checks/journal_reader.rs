//! The checker's own reader of a run's journal, written from the design (sections 6 and 7)
//! apart from the server's (`warden::store::journal`), as `ledger_reader` is for the ledger:
//! every journal the checker judges is read both ways, and where the two disagree (one refuses
//! what the other reads, or they read other actions, rounds or ends), that is a violation.
//!
//! The lines are framed as the ledger's (`ledger_reader::record_of`). The records, by their
//! `record` field: the `header` first and only there; `begin` of action N once every earlier
//! action is done (or again, for the last action, after an operator said it did not happen);
//! `done`, or an operator's `resolved` (happened, with its result, or not), of the action
//! begun; `asked` rounds in order, no action begun; only `answered` (the awaited round) or the
//! `end` while a round is awaited; the `end` with no action begun, and nothing after it.
//! `print`, `resumed` and `retried` change nothing the checker judges.

use std::collections::BTreeMap;

use serde_json::Value;
use warden::store::journal::{Journal, OpState};

use crate::checks::ledger_reader::record_of;

/// Where one action stands.
#[derive(Clone, Debug, PartialEq)]
pub enum ReadAction {
    /// Begun and not done: in doubt after a crash.
    Begun(Value),
    Done {
        action: Value,
        result: Value,
        happened: bool,
    },
    NotHappened(Value),
}

/// A journal as the checker reads it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReadJournal {
    pub run: String,
    pub actions: BTreeMap<u64, ReadAction>,
    /// Each round asked, and whether it was answered.
    pub rounds: Vec<bool>,
    /// The end's outcome and result.
    pub end: Option<(String, Option<Value>)>,
}

/// Reads journal bytes: `Err` names the line and what is wrong with it.
pub fn read(bytes: &[u8]) -> Result<ReadJournal, String> {
    let mut journal = ReadJournal::default();
    let mut lines = bytes.split(|&b| b == b'\n').enumerate().peekable();
    while let Some((index, line)) = lines.next() {
        if lines.peek().is_none() {
            break; // empty, or the torn tail of an append a crash cut short
        }
        let at = |problem: String| format!("line {}: {problem}", index + 1);
        let record = record_of(line).map_err(at)?;
        journal.apply(index, &record).map_err(at)?;
    }
    Ok(journal) // no header (a new file a crash emptied) reads as an empty journal, as the server's
}

fn op_of(record: &Value) -> Result<u64, String> {
    record["op"].as_u64().ok_or_else(|| "no `op` number".to_string())
}

impl ReadJournal {
    fn apply(&mut self, index: usize, record: &Value) -> Result<(), String> {
        let kind = record["record"].as_str().unwrap_or_default();
        match (index, kind) {
            (0, "header") => {
                self.run = record["run"].as_str().ok_or("a header with no run")?.to_string();
                return Ok(());
            }
            (0, _) => return Err("the first record is not the header".into()),
            (_, "header") => return Err("a second header".into()),
            _ if self.end.is_some() => return Err("a record after the end".into()),
            _ if self.awaiting() && !matches!(kind, "answered" | "end") => {
                return Err(format!("a `{kind}` record while input is awaited"))
            }
            _ => {}
        }
        match kind {
            "print" | "resumed" | "retried" => Ok(()),
            "begin" => self.begin(op_of(record)?, record["action"].clone()),
            "done" => self.finish(op_of(record)?, record["result"].clone(), false),
            "resolved" => match (record["happened"].as_bool(), record.get("result")) {
                (Some(true), Some(result)) => self.finish(op_of(record)?, result.clone(), true),
                (Some(false), _) => self.not_happened(op_of(record)?),
                _ => Err("a resolution that happened without a result".into()),
            },
            "asked" => self.ask(record["round"].as_u64().ok_or("no `round` number")?),
            "answered" => match (self.awaiting(), record["round"].as_u64()) {
                (true, Some(round)) if round + 1 == self.rounds.len() as u64 => {
                    *self.rounds.last_mut().expect("awaiting") = true;
                    Ok(())
                }
                _ => Err("answers to a round not awaited".into()),
            },
            "end" if self.begun().is_some() => Err("an end while an action is begun".into()),
            "end" => {
                let outcome = record["outcome"].as_str().ok_or("an end with no outcome")?;
                self.end = Some((outcome.to_string(), record.get("result").cloned()));
                Ok(())
            }
            other => Err(format!("a record `{other}` a journal does not hold")),
        }
    }

    fn awaiting(&self) -> bool {
        self.rounds.last() == Some(&false)
    }

    fn begun(&self) -> Option<u64> {
        self.actions.iter().find(|(_, action)| matches!(action, ReadAction::Begun(_))).map(|(op, _)| *op)
    }

    fn begin(&mut self, op: u64, action: Value) -> Result<(), String> {
        let next = self.actions.len() as u64;
        let all_done = self.actions.values().all(|a| matches!(a, ReadAction::Done { .. }));
        let again = op + 1 == next && matches!(self.actions.get(&op), Some(ReadAction::NotHappened(_)));
        if !(op == next && all_done || again) {
            return Err(format!("action {op} begun out of order"));
        }
        self.actions.insert(op, ReadAction::Begun(action));
        Ok(())
    }

    fn finish(&mut self, op: u64, result: Value, happened: bool) -> Result<(), String> {
        match self.actions.get(&op) {
            Some(ReadAction::Begun(action)) => {
                let action = action.clone();
                self.actions.insert(op, ReadAction::Done { action, result, happened });
                Ok(())
            }
            _ => Err(format!("action {op} done, not begun")),
        }
    }

    fn not_happened(&mut self, op: u64) -> Result<(), String> {
        match self.actions.get(&op) {
            Some(ReadAction::Begun(action)) => {
                let action = action.clone();
                self.actions.insert(op, ReadAction::NotHappened(action));
                Ok(())
            }
            _ => Err(format!("action {op} resolved, not in doubt")),
        }
    }

    fn ask(&mut self, round: u64) -> Result<(), String> {
        if round != self.rounds.len() as u64 || self.begun().is_some() {
            return Err(format!("input round {round} asked out of order or during an action"));
        }
        self.rounds.push(false);
        Ok(())
    }

    /// Where the server's reading of the same bytes differs from this one, if it does.
    pub fn disagreement(&self, journal: &Journal) -> Option<String> {
        let actions: BTreeMap<u64, ReadAction> = (journal.ops.iter())
            .map(|(op, state)| {
                let read = match state {
                    OpState::Begun(action) => ReadAction::Begun(action.clone()),
                    OpState::Done { action, result, happened } => {
                        ReadAction::Done { action: action.clone(), result: result.clone(), happened: *happened }
                    }
                    OpState::NotHappened(action) => ReadAction::NotHappened(action.clone()),
                };
                (*op, read)
            })
            .collect();
        let server = ReadJournal {
            run: journal.header.as_ref().map(|(run, ..)| run.clone()).unwrap_or_default(),
            actions,
            rounds: journal.rounds.iter().map(|round| round.answered.is_some()).collect(),
            end: journal.end.as_ref().map(|end| (end.outcome.to_string(), end.result.clone())),
        };
        server.first_difference(self)
    }

    /// The first field in which `self` (the server's reading) and `checker` differ, in words.
    fn first_difference(&self, checker: &ReadJournal) -> Option<String> {
        if self.run != checker.run {
            return Some(format!("the server reads the header's run as {:?}, the checker {:?}", self.run, checker.run));
        }
        let ops = self.actions.keys().chain(checker.actions.keys());
        if let Some(op) = ops.copied().find(|op| self.actions.get(op) != checker.actions.get(op)) {
            let (server, read) = (self.actions.get(&op), checker.actions.get(&op));
            return Some(format!("action {op}: the server reads {}, the checker {}", state(server), state(read)));
        }
        if self.rounds != checker.rounds {
            return Some(format!(
                "the server reads rounds {:?}, the checker {:?} (answered or not)",
                self.rounds, checker.rounds
            ));
        }
        (self.end != checker.end)
            .then(|| format!("the server reads the end {:?}, the checker {:?}", self.end, checker.end))
    }
}

/// An action's state in words, its result shown in full (shortened past 200 characters).
fn state(action: Option<&ReadAction>) -> String {
    let text = match action {
        None => "nothing".to_string(),
        Some(ReadAction::Begun(_)) => "begun".to_string(),
        Some(ReadAction::NotHappened(_)) => "resolved as not happened".to_string(),
        Some(ReadAction::Done { result, happened: false, .. }) => format!("done with {result}"),
        Some(ReadAction::Done { result, happened: true, .. }) => format!("resolved as happened with {result}"),
    };
    text.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lines(records: &[Value]) -> Vec<u8> {
        records.iter().flat_map(warden::store::record::encode).collect()
    }

    fn header() -> Value {
        json!({"record": "header", "run": "r1", "tool": "t", "binding": {"program": "p", "config": "c", "version": "v"}, "inputs": "x", "at_ms": 1})
    }

    #[test]
    fn actions_rounds_and_the_end_read_in_order_and_a_torn_tail_is_dropped() {
        let mut bytes = lines(&[
            header(),
            json!({"record": "begin", "op": 0, "action": {"a": 1}}),
            json!({"record": "resolved", "op": 0, "happened": false, "at_ms": 2}),
            json!({"record": "begin", "op": 0, "action": {"a": 1}}),
            json!({"record": "done", "op": 0, "result": 7}),
            json!({"record": "asked", "round": 0, "requests": {}, "sent": [], "at_ms": 3}),
            json!({"record": "answered", "round": 0, "answers": {}, "at_ms": 4}),
            json!({"record": "end", "outcome": "done", "result": null, "message": null, "usage": {}, "at_ms": 5}),
        ]);
        bytes.extend_from_slice(br#"{"sum":"ab"#);
        let journal = read(&bytes).unwrap();
        assert_eq!(
            journal.actions[&0],
            ReadAction::Done { action: json!({"a": 1}), result: json!(7), happened: false }
        );
        assert_eq!((journal.rounds, journal.end), (vec![true], Some(("done".into(), Some(Value::Null)))));
    }

    #[test]
    fn a_difference_names_the_first_field_in_words() {
        let begin = json!({"record": "begin", "op": 0, "action": {}});
        let resolved = json!({"record": "resolved", "op": 0, "happened": true, "result": 1, "at_ms": 2});
        let bytes = lines(&[header(), begin, resolved]);
        let read = read(&bytes).unwrap();
        let mut server = Journal::parse(std::path::Path::new("j"), &bytes).unwrap();
        assert_eq!(read.disagreement(&server), None);
        server.ops.insert(0, OpState::Done { action: json!({}), result: json!(1), happened: false });
        let said = read.disagreement(&server).unwrap();
        assert_eq!(said, "action 0: the server reads done with 1, the checker resolved as happened with 1");
    }

    #[test]
    fn out_of_order_records_are_damage() {
        let begin = |op: u64| json!({"record": "begin", "op": op, "action": {}});
        let end = json!({"record": "end", "outcome": "done", "message": null, "usage": {}, "at_ms": 5});
        let asked = json!({"record": "asked", "round": 0, "requests": {}, "sent": [], "at_ms": 3});
        for (records, problem) in [
            (vec![begin(0)], "line 1: the first record is not the header"),
            (vec![header(), begin(1)], "line 2: action 1 begun out of order"),
            (vec![header(), begin(0), end.clone()], "line 3: an end while an action is begun"),
            (vec![header(), asked, begin(0)], "line 3: a `begin` record while input is awaited"),
            (vec![header(), end.clone(), end], "line 3: a record after the end"),
        ] {
            assert_eq!(read(&lines(&records)).unwrap_err(), problem);
        }
    }
}
