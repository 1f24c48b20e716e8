//! Per-run files under `server.journals` (seed 000 sections 6 and 7):
//! `<tool>/<id[0..2]>/<id>.journal` (checksummed records), `<id>.inputs.json` (the kept
//! arguments, while the run may need resuming), `<id>.log.jsonl` (the run's log), and
//! `waiting/<id>.json` for a run that waits for an operator.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::program::FailureKind;
use crate::store::record;

/// What binds a journal to the code that wrote it: an unfinished run whose binding changed
/// refuses to resume (seed 000 section 7, "Upgrades").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    pub program: String,
    pub config: String,
    pub version: String,
}

/// How a run ended (seed 000 section 5): done, or failed with a kind. Records hold its
/// name: "done", "budget", "deadline", ...
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    Done,
    Failed(FailureKind),
}

impl RunOutcome {
    pub fn name(self) -> &'static str {
        match self {
            RunOutcome::Done => "done",
            RunOutcome::Failed(kind) => kind.name(),
        }
    }

    pub fn parse(name: &str) -> Option<RunOutcome> {
        match name {
            "done" => Some(RunOutcome::Done),
            other => FailureKind::parse(other).map(RunOutcome::Failed),
        }
    }
}

impl std::fmt::Display for RunOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for RunOutcome {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for RunOutcome {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<RunOutcome, D::Error> {
        let name = String::deserialize(deserializer)?;
        RunOutcome::parse(&name).ok_or_else(|| serde::de::Error::custom(format!("`{name}` is not a run's outcome")))
    }
}

/// An optional JSON value that keeps `null`: absent is `None`, `null` is `Some(Null)` (a
/// program may return `None`, an operator may say an action's result was `null`). Plain
/// `Option<Value>` reads `null` back as `None`, so the reader would not see what was written.
fn some_value<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EndRecord {
    pub outcome: RunOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "some_value")]
    pub result: Option<Value>,
    pub message: Option<String>,
    /// Per capability parameter: actions attempted and money charged.
    pub usage: Value,
    pub at_ms: u64,
}

/// Who gave an operator's word, as the run's journal keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Word {
    /// The account the command ran as (`USER`, else `LOGNAME`; "unknown" when neither is set).
    pub account: String,
    /// What the operator said of it (`--note`), if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case", deny_unknown_fields)]
pub enum JournalRecord {
    Header {
        run: String,
        tool: String,
        binding: Binding,
        inputs: String,
        at_ms: u64,
        /// The principal the run is for, as its reserve records it; absent over stdio.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        principal: Option<String>,
    },
    /// A printed line; `index` counts prints across re-executions, so a replay that prints
    /// the same lines again adds none.
    Print {
        index: u64,
        text: String,
    },
    /// An action about to be performed (the broker's work). `at_ms`: when it was journaled
    /// (the driver stamps it; absent in journals made before it was kept, and in the pure
    /// machine's commands), for the operator's `warden runs show`.
    Begin {
        op: u64,
        action: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at_ms: Option<u64>,
    },
    /// The action's outcome.
    Done {
        op: u64,
        result: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at_ms: Option<u64>,
    },
    /// An operator's answer for an action in doubt (`warden resolve`): it happened, with
    /// this result, or it did not (and may be performed again).
    Resolved {
        op: u64,
        happened: bool,
        #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "some_value")]
        result: Option<Value>,
        at_ms: u64,
        /// Who gave the word: the account `warden resolve` ran as, and the note it gave
        /// (absent in journals written before it was kept).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<Word>,
    },
    End(EndRecord),
    /// The server restarted and resumed the run (recovery writes it before resuming).
    Resumed {
        at_ms: u64,
    },
    /// The operator asked for a halted run to be resumed again (`warden resolve --resume`).
    Retried {
        at_ms: u64,
    },
    /// The program asked its client for input (`ask`): its requests as the program gave them,
    /// and the keys of those sent (the client declared their kinds). The call answers
    /// `input_required` only once this is durable.
    Asked {
        round: u64,
        requests: Value,
        sent: Vec<String>,
        at_ms: u64,
    },
    /// The client's answers to round `round` (only the keys sent), durable before the program
    /// executes again.
    Answered {
        round: u64,
        answers: Value,
        at_ms: u64,
    },
}

/// One input round of a journal.
#[derive(Clone, Debug, PartialEq)]
pub struct Round {
    pub requests: Value,
    pub sent: Vec<String>,
    pub asked_at_ms: u64,
    /// The answers and when they were journaled; none while the run waits for them.
    pub answered: Option<(Value, u64)>,
}

/// Where one action stands in a journal.
#[derive(Clone, Debug, PartialEq)]
pub enum OpState {
    /// Begun, not done: in doubt after a crash.
    Begun(Value),
    Done {
        action: Value,
        result: Value,
        /// An operator said it happened: whatever the result's shape, it counts as done
        /// (its money is charged).
        happened: bool,
    },
    /// An operator said it did not happen: it may be performed again.
    NotHappened(Value),
}

/// A journal read back.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Journal {
    pub header: Option<(String, Binding, String)>,
    pub header_at_ms: u64,
    pub prints: u64,
    pub ops: std::collections::BTreeMap<u64, OpState>,
    pub end: Option<EndRecord>,
    /// The input rounds (`ask`), in order: every one answered but perhaps the last.
    pub rounds: Vec<Round>,
    /// `Resumed` records since the run last made progress (any record but a `Resumed`): how
    /// many restarts in a row found it unfinished and got it no further.
    pub resumes_without_progress: u32,
    /// `Resumed` records since the action in doubt began: for an action sent again when safe
    /// (a model call), how many of its sends a crash interrupted before this one.
    pub sends_interrupted: u32,
    pub torn_tail_bytes: usize,
    pub intact_len: usize,
    /// Intact records read (the header included).
    pub records: usize,
}

impl Journal {
    /// Parses a journal. Only the last line may be torn.
    pub fn parse(file: &Path, bytes: &[u8]) -> Result<Journal, String> {
        let parsed = record::parse_file::<JournalRecord>(bytes)
            .map_err(|d| format!("{}:{}: the journal is damaged: {}", file.display(), d.line, d.problem))?;
        let mut journal =
            Journal { torn_tail_bytes: parsed.torn_tail_bytes, intact_len: parsed.intact_len, ..Journal::default() };
        for record in parsed.records {
            journal
                .apply(record)
                .map_err(|(line, problem)| format!("{}:{line}: the journal is damaged: {problem}", file.display()))?;
        }
        Ok(journal)
    }

    /// Adds the next record, as strict as the reader of a whole journal; a refusal says the
    /// record's line number and why.
    pub fn apply(&mut self, record: JournalRecord) -> Result<(), (usize, String)> {
        let index = self.records;
        self.records += 1;
        let at = |problem: String| (index + 1, problem);
        self.check_position(index, &record).map_err(at)?;
        match record {
            JournalRecord::Header { run, binding, inputs, at_ms, .. } => {
                self.header = Some((run, binding, inputs));
                self.header_at_ms = at_ms;
            }
            JournalRecord::Resumed { .. } => {
                self.resumes_without_progress += 1;
                if self.begun_op().is_some() {
                    self.sends_interrupted += 1;
                }
                return Ok(());
            }
            record => self.apply_progress(record).map_err(at)?,
        }
        // Every record after the header but `Resumed` is progress.
        if index > 0 {
            self.resumes_without_progress = 0;
        }
        Ok(())
    }

    /// Whether a record may come at line `index + 1`: the header first and only there;
    /// nothing after the end; only answers or the end while input is awaited.
    fn check_position(&self, index: usize, record: &JournalRecord) -> Result<(), String> {
        let is_header = matches!(record, JournalRecord::Header { .. });
        let problem = match () {
            _ if index == 0 && is_header => return Ok(()),
            _ if index == 0 => "the first record is not the header",
            _ if is_header => "a second header",
            _ if self.end.is_some() => "a record after the end",
            _ if self.awaiting_round().is_some()
                && !matches!(record, JournalRecord::Answered { .. } | JournalRecord::End(_)) =>
            {
                "a record other than the answers or the end while input is awaited"
            }
            _ => return Ok(()),
        };
        Err(problem.to_string())
    }

    /// Applies a record past the header that is progress (not `Resumed`).
    fn apply_progress(&mut self, record: JournalRecord) -> Result<(), String> {
        let resolved = matches!(record, JournalRecord::Resolved { happened: true, .. });
        match record {
            JournalRecord::Header { .. } | JournalRecord::Resumed { .. } => unreachable!("applied by `apply`"),
            JournalRecord::Print { .. } => self.prints += 1,
            JournalRecord::Begin { op, action, .. } => self.begin(op, action)?,
            JournalRecord::Done { op, result, .. }
            | JournalRecord::Resolved { op, happened: true, result: Some(result), .. } => match self.ops.get(&op) {
                Some(OpState::Begun(action)) => {
                    let action = action.clone();
                    self.ops.insert(op, OpState::Done { action, result, happened: resolved });
                }
                _ => return Err(format!("a done record for action {op}, which is not begun")),
            },
            JournalRecord::Resolved { op, happened: false, .. } => match self.ops.get(&op) {
                Some(OpState::Begun(action)) => {
                    let action = action.clone();
                    self.ops.insert(op, OpState::NotHappened(action));
                }
                _ => return Err(format!("a resolution for action {op}, which is not in doubt")),
            },
            JournalRecord::Resolved { op, .. } => {
                return Err(format!("a resolution of action {op} that happened without a result"))
            }
            JournalRecord::End(_) if self.begun_op().is_some() => {
                return Err("an end record while an action is begun and not done".to_string())
            }
            JournalRecord::End(end) => self.end = Some(end),
            JournalRecord::Retried { .. } => {}
            JournalRecord::Asked { round, .. } if round != self.rounds.len() as u64 => {
                return Err(format!("input round {round} asked out of order"))
            }
            JournalRecord::Asked { .. } if self.begun_op().is_some() => {
                return Err("input asked while an action is begun and not done".to_string())
            }
            JournalRecord::Asked { requests, sent, at_ms, .. } => {
                self.rounds.push(Round { requests, sent, asked_at_ms: at_ms, answered: None })
            }
            JournalRecord::Answered { round, answers, at_ms } => match self.awaiting_round() {
                Some(awaited) if awaited == round => {
                    self.rounds.last_mut().expect("an awaited round").answered = Some((answers, at_ms))
                }
                _ => return Err(format!("answers to input round {round}, which is not awaited")),
            },
        }
        Ok(())
    }

    /// A begin record, as strict as the writer: one action at a time, in order. A new action
    /// begins only when every earlier one is done; an action the operator said did not happen
    /// may begin again, and only if it is the last one.
    fn begin(&mut self, op: u64, action: Value) -> Result<(), String> {
        let all_done = self.ops.values().all(|state| matches!(state, OpState::Done { .. }));
        let last = self.ops.len() as u64;
        let fresh = !self.ops.contains_key(&op) && op == last && all_done;
        let again = matches!(self.ops.get(&op), Some(OpState::NotHappened(_))) && op + 1 == last;
        if !(fresh || again) {
            return Err(format!("a begin record for action {op} out of order"));
        }
        self.ops.insert(op, OpState::Begun(action));
        self.sends_interrupted = 0;
        Ok(())
    }

    /// The input round asked and not answered, if any (the last one).
    pub fn awaiting_round(&self) -> Option<u64> {
        match self.rounds.last() {
            Some(round) if round.answered.is_none() => Some(self.rounds.len() as u64 - 1),
            _ => None,
        }
    }

    /// How long the run has waited for its client's answers, up to `now_ms` (wall clock):
    /// time the deadline does not count.
    pub fn waited_ms(&self, now_ms: u64) -> u64 {
        self.rounds
            .iter()
            .map(|round| round.answered.as_ref().map_or(now_ms, |(_, at)| *at).saturating_sub(round.asked_at_ms))
            .fold(0, u64::saturating_add)
    }

    /// The action begun and not done, if any (at most one: the reader refuses more).
    pub fn begun_op(&self) -> Option<u64> {
        self.ops.iter().find_map(|(op, state)| matches!(state, OpState::Begun(_)).then_some(*op))
    }

    /// The completed actions from action 0 on, in order, up to the first one not done.
    /// (action, result, an operator said it happened) of each.
    pub fn completed(&self) -> Vec<(Value, Value, bool)> {
        let mut completed = Vec::new();
        for (op, state) in &self.ops {
            match state {
                OpState::Done { action, result, happened } if *op == completed.len() as u64 => {
                    completed.push((action.clone(), result.clone(), *happened))
                }
                _ => break,
            }
        }
        completed
    }
}

/// The kept arguments of a run, one checksummed record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputsRecord {
    pub run: String,
    pub inputs: Map<String, Value>,
}

/// The header of run `r` of tool `t`, for tests of what follows it.
#[cfg(test)]
pub(crate) fn test_header() -> JournalRecord {
    let binding = Binding { program: "p".into(), config: "c".into(), version: "v".into() };
    JournalRecord::Header { run: "r".into(), tool: "t".into(), binding, inputs: "i".into(), at_ms: 1, principal: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_must_start_with_its_header_and_stop_at_its_end() {
        let header = crate::store::journal::test_header();
        let end = JournalRecord::End(EndRecord {
            outcome: RunOutcome::Done,
            result: None,
            message: None,
            usage: Value::Null,
            at_ms: 2,
        });
        let print = JournalRecord::Print { index: 0, text: "x".into() };
        let good: Vec<u8> = [&header, &print, &end].iter().flat_map(|r| record::encode(*r)).collect();
        let journal = Journal::parse(Path::new("j"), &good).unwrap();
        assert_eq!(journal.prints, 1);
        assert!(journal.end.is_some());
        let headless: Vec<u8> = [&print, &end].iter().flat_map(|r| record::encode(*r)).collect();
        assert!(Journal::parse(Path::new("j"), &headless).unwrap_err().contains("j:1: the journal is damaged"));
        let after_end: Vec<u8> = [&header, &end, &print, &print].iter().flat_map(|r| record::encode(*r)).collect();
        assert!(Journal::parse(Path::new("j"), &after_end).unwrap_err().contains("a record after the end"));
    }

    fn folded(records: &[JournalRecord]) -> Result<Journal, String> {
        let bytes: Vec<u8> = records.iter().flat_map(record::encode).collect();
        Journal::parse(Path::new("j"), &bytes)
    }

    fn asked(round: u64, at_ms: u64) -> JournalRecord {
        JournalRecord::Asked { round, requests: serde_json::json!({"k": {}}), sent: vec!["k".into()], at_ms }
    }

    fn answered(round: u64, at_ms: u64) -> JournalRecord {
        JournalRecord::Answered { round, answers: serde_json::json!({"k": {}}), at_ms }
    }

    /// Each restart that finds an action begun and not done counts one interrupted send (a
    /// model call's reservation allows one more send each); the next begin starts over.
    #[test]
    fn sends_interrupted_are_counted_per_restart_until_the_next_begin() {
        let begin = |op| JournalRecord::Begin { op, action: serde_json::json!({}), at_ms: None };
        let resumed = JournalRecord::Resumed { at_ms: 2 };
        let journal = folded(&[test_header(), begin(0), resumed.clone(), resumed.clone()]).unwrap();
        assert_eq!((journal.sends_interrupted, journal.resumes_without_progress), (2, 2));
        let done = JournalRecord::Done { op: 0, result: Value::Null, at_ms: None };
        let journal = folded(&[test_header(), begin(0), resumed.clone(), done, begin(1)]).unwrap();
        assert_eq!((journal.sends_interrupted, journal.resumes_without_progress), (0, 0));
    }

    #[test]
    fn a_second_header_and_answers_to_a_round_not_awaited_are_refused() {
        let twice = folded(&[test_header(), test_header()]).unwrap_err();
        assert!(twice.contains("j:2: the journal is damaged") && twice.contains("a second header"), "{twice}");
        let wrong_round = folded(&[test_header(), asked(0, 10), answered(1, 20)]).unwrap_err();
        assert!(wrong_round.contains("answers to input round 1, which is not awaited"), "{wrong_round}");
    }

    /// The time a run waited for its client is each round's wait, the last one up to now.
    #[test]
    fn the_wait_for_input_sums_every_rounds_wait() {
        let journal = folded(&[test_header(), asked(0, 10), answered(0, 50), asked(1, 100)]).unwrap();
        assert_eq!(journal.waited_ms(130), 40 + 30);
        assert_eq!(journal.awaiting_round(), Some(1));
    }

    /// The driver keeps an executing run's journal in memory, grown record by record: it must
    /// equal the file read back at every length.
    #[test]
    fn a_journal_grown_record_by_record_equals_the_file_read_back() {
        let records = [
            test_header(),
            JournalRecord::Resumed { at_ms: 2 },
            JournalRecord::Print { index: 0, text: "x".into() },
            JournalRecord::Begin { op: 0, action: serde_json::json!({"a": 1}), at_ms: Some(5) },
            JournalRecord::Done { op: 0, result: serde_json::json!([1, 2]), at_ms: None },
            JournalRecord::End(EndRecord {
                outcome: RunOutcome::Done,
                result: Some(Value::Bool(true)),
                message: None,
                usage: Value::Null,
                at_ms: 3,
            }),
        ];
        let mut bytes = Vec::new();
        let mut grown = Journal::default();
        for record in records {
            let line = record::encode(&record);
            bytes.extend_from_slice(&line);
            grown.apply(record).unwrap();
            grown.intact_len += line.len();
            assert_eq!(grown, Journal::parse(Path::new("j"), &bytes).unwrap());
        }
    }

    /// The reader is as strict as the writer: one action at a time, in order.
    #[test]
    fn a_begin_while_another_action_is_begun_is_damage() {
        let header = crate::store::journal::test_header();
        let begin = |op| JournalRecord::Begin { op, action: Value::Null, at_ms: None };
        let done = |op| JournalRecord::Done { op, result: Value::Null, at_ms: None };
        let not_happened = |op| JournalRecord::Resolved { op, happened: false, result: None, at_ms: 2, by: None };
        let end = JournalRecord::End(EndRecord {
            outcome: RunOutcome::Done,
            result: None,
            message: None,
            usage: Value::Null,
            at_ms: 3,
        });
        let parse = |records: &[&JournalRecord]| {
            let bytes: Vec<u8> = records.iter().flat_map(|r| record::encode(*r)).collect();
            Journal::parse(Path::new("j"), &bytes)
        };
        let (b0, b1, d0, d1, n0) = (begin(0), begin(1), done(0), done(1), not_happened(0));
        assert!(parse(&[&header, &b0, &d0, &b1, &d1, &end]).is_ok());
        assert!(parse(&[&header, &b0, &n0, &b0, &d0]).is_ok());
        let damaged = [
            vec![&header, &b0, &b1],
            vec![&header, &b1],
            vec![&header, &b0, &d0, &b0],
            vec![&header, &b0, &n0, &b1],
            vec![&header, &b0, &end],
        ];
        for records in damaged {
            let error = parse(&records).unwrap_err();
            assert!(error.contains("the journal is damaged"), "{error}");
        }
    }
}
