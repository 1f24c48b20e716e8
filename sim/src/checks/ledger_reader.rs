//! The checker's own reader of the ledger, written from the design (section 6) apart from the
//! server's (`warden::store::record`, `warden::store::ledger`), so that a bug in the server's
//! reader cannot blind the judge: every check reads the ledger both ways, and where the two
//! disagree (one refuses what the other reads, or they read other runs), that is a violation.
//!
//! The format: one record a line, `{"sum":"<16 hex>","rec":<JSON>}` and a newline, where the
//! sum is the first 8 bytes of the SHA-256 of the JSON, in lowercase hex. Only the last line,
//! unterminated, may be torn by a crash (dropped); any other bad line is damage. The records are
//! `reserve`, `settle` and `release` events: one reserve per run, then at most one settle or
//! release, each stamped no earlier than the run's reserve; and `forget`, an operator's release
//! of an ended run's `once` key, while no later run took the key.

use std::collections::BTreeMap;

use serde_json::Value;
use sha2::{Digest, Sha256};
use warden::store::ledger::{RunPhase, State};

/// How a run ended, as its settle or release says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    Settled { at_ms: u64, outcome: String },
    Released { at_ms: u64 },
}

/// One run as the checker reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadRun {
    pub tool: String,
    pub reserved_at_ms: u64,
    pub principal: Option<String>,
    pub once_key: Option<String>,
    pub ended: Option<Ended>,
    /// Its reserve's place among the reserves.
    pub order: u64,
}

/// The ledger as the checker reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadLedger {
    pub runs: BTreeMap<String, ReadRun>,
}

/// Reads ledger bytes: `Err` names the line and what is wrong with it.
pub fn read(bytes: &[u8]) -> Result<ReadLedger, String> {
    let mut ledger = ReadLedger::default();
    let mut lines = bytes.split(|&b| b == b'\n').enumerate().peekable();
    while let Some((index, line)) = lines.next() {
        // `split` yields what follows the last newline: empty when the file ends cleanly,
        // else the torn tail of an append a crash cut short.
        if lines.peek().is_none() {
            break;
        }
        let record = record_of(line).map_err(|problem| format!("line {}: {problem}", index + 1))?;
        ledger.apply(&record).map_err(|problem| format!("line {}: {problem}", index + 1))?;
    }
    Ok(ledger)
}

/// The latest stamp among the whole, sound lines of `bytes` (0 when none): a server that
/// read this ledger stamps nothing earlier, and decides nothing at an earlier time.
pub fn latest_stamp(bytes: &[u8]) -> u64 {
    let whole = &bytes[..bytes.iter().rposition(|&b| b == b'\n').map_or(0, |at| at + 1)];
    whole
        .split(|&b| b == b'\n')
        .filter_map(|line| record_of(line).ok())
        .filter_map(|r| r["at_ms"].as_u64())
        .max()
        .unwrap_or(0)
}

/// The JSON a record line holds, its sum checked (journals are framed the same way).
pub(crate) fn record_of(line: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(line).map_err(|_| "not UTF-8")?;
    let rest = text.strip_prefix(r#"{"sum":""#).ok_or("not a record line")?;
    let (sum, rest) = rest.split_at_checked(16).ok_or("too short")?;
    let body = rest.strip_prefix(r#"","rec":"#).and_then(|r| r.strip_suffix('}')).ok_or("not a record line")?;
    let digest = Sha256::digest(body.as_bytes());
    let expected: String = digest[..8].iter().map(|byte| format!("{byte:02x}")).collect();
    if sum != expected {
        return Err(format!("its sum {sum} is not its record's ({expected})"));
    }
    serde_json::from_str(body).map_err(|e| format!("its record is not JSON: {e}"))
}

fn text(record: &Value, field: &str) -> Result<String, String> {
    record[field].as_str().map(str::to_string).ok_or_else(|| format!("no `{field}` text"))
}

fn number(record: &Value, field: &str) -> Result<u64, String> {
    record[field].as_u64().ok_or_else(|| format!("no `{field}` number"))
}

impl ReadLedger {
    fn apply(&mut self, record: &Value) -> Result<(), String> {
        let run = text(record, "run")?;
        let at_ms = number(record, "at_ms")?;
        let event = record["event"].as_str().unwrap_or_default();
        if event == "reserve" {
            if self.runs.contains_key(&run) {
                return Err(format!("a second reserve of run {run}"));
            }
            let order = self.runs.len() as u64;
            let entry = ReadRun {
                tool: text(record, "tool")?,
                reserved_at_ms: at_ms,
                principal: record["principal"].as_str().map(str::to_string),
                once_key: record["once"]["key"].as_str().map(str::to_string),
                ended: None,
                order,
            };
            self.runs.insert(run, entry);
            return Ok(());
        }
        if event == "forget" {
            return self.forget(&run, at_ms);
        }
        let ended = match event {
            "settle" => Ended::Settled { at_ms, outcome: text(record, "outcome")? },
            "release" => Ended::Released { at_ms },
            other => return Err(format!("an event `{other}` the ledger does not hold")),
        };
        let entry = self.runs.get_mut(&run).ok_or_else(|| format!("a {event} of run {run}, never reserved"))?;
        if entry.ended.is_some() {
            return Err(format!("a second end of run {run}"));
        }
        if at_ms < entry.reserved_at_ms {
            return Err(format!("run {run} ends at {at_ms} ms, before its reserve at {} ms", entry.reserved_at_ms));
        }
        entry.ended = Some(ended);
        Ok(())
    }

    /// An operator's `warden once release`: the key of an ended run that still holds it is
    /// forgotten (a later run with the same key took it over otherwise).
    fn forget(&mut self, run: &str, at_ms: u64) -> Result<(), String> {
        let entry = self.runs.get(run).ok_or_else(|| format!("a forget of run {run}, never reserved"))?;
        let Some(key) = entry.once_key.clone().filter(|_| entry.ended.is_some()) else {
            return Err(format!("a forget of run {run}, which has not ended or has no once key"));
        };
        let later = |other: &ReadRun| other.once_key.as_deref() == Some(key.as_str()) && other.order > entry.order;
        if self.runs.values().any(later) {
            return Err(format!("a forget of run {run}, whose key a later run took"));
        }
        if at_ms < entry.reserved_at_ms {
            return Err(format!("run {run}'s key is forgotten at {at_ms} ms, before its reserve"));
        }
        self.runs.get_mut(run).expect("found above").once_key = None;
        Ok(())
    }

    /// Where the server's reading of the same bytes differs from this one, if it does.
    pub fn disagreement(&self, state: &State) -> Option<String> {
        if let Some(run) = state.runs.keys().find(|run| !self.runs.contains_key(*run)) {
            return Some(format!("the server reads a run {run} the checker does not"));
        }
        let mut server_order: Vec<_> = state.runs.values().collect();
        server_order.sort_by_key(|entry| entry.sequence);
        let rank: BTreeMap<&str, u64> =
            server_order.iter().enumerate().map(|(rank, entry)| (entry.run.as_str(), rank as u64)).collect();
        for (run, read) in &self.runs {
            let Some(entry) = state.run(run) else { return Some(format!("the server does not read run {run}")) };
            let ended = match &entry.phase {
                RunPhase::Open => None,
                RunPhase::Settled { at_ms, outcome, .. } => {
                    Some(Ended::Settled { at_ms: *at_ms, outcome: outcome.to_string() })
                }
                RunPhase::Released { at_ms } => Some(Ended::Released { at_ms: *at_ms }),
            };
            let server = ReadRun {
                tool: entry.tool.clone(),
                reserved_at_ms: entry.reserved_at_ms,
                principal: entry.principal.clone(),
                once_key: entry.once.as_ref().map(|once| once.key.clone()),
                ended,
                order: rank[run.as_str()],
            };
            if &server != read {
                return Some(format!("run {run}: the server reads {server:?}, the checker {read:?}"));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(record: Value) -> Vec<u8> {
        warden::store::record::encode(&record)
    }

    #[test]
    fn a_reserve_and_its_settle_read_as_one_settled_run_and_a_torn_tail_is_dropped() {
        let mut bytes = line(json!({"event": "reserve", "run": "r1", "tool": "t", "at_ms": 5, "once": null}));
        bytes.extend(line(json!({"event": "settle", "run": "r1", "at_ms": 9, "outcome": "done"})));
        bytes.extend_from_slice(br#"{"sum":"00"#);
        let ledger = read(&bytes).unwrap();
        assert_eq!(ledger.runs["r1"].ended, Some(Ended::Settled { at_ms: 9, outcome: "done".into() }));
    }

    #[test]
    fn a_bad_sum_a_second_end_and_an_end_before_the_reserve_are_damage() {
        let reserve = line(json!({"event": "reserve", "run": "r1", "tool": "t", "at_ms": 5}));
        let mut flipped = reserve.clone();
        flipped[30] ^= 1;
        assert!(read(&flipped).unwrap_err().starts_with("line 1:"));
        let release = line(json!({"event": "release", "run": "r1", "at_ms": 6}));
        assert!(read(&[reserve.clone(), release.clone(), release].concat()).unwrap_err().contains("second end"));
        let early = line(json!({"event": "release", "run": "r1", "at_ms": 4}));
        assert!(read(&[reserve, early].concat()).unwrap_err().contains("before its reserve"));
    }

    /// A forget lets an ended run's key go, read alike by the checker and the server; one of
    /// an open run, or of a key a later run took, is damage.
    #[test]
    fn a_forget_of_an_ended_runs_key_reads_as_the_server_reads_it() {
        let keyed = |run: &str, at_ms: u64| {
            line(json!({"event": "reserve", "run": run, "tool": "t", "at_ms": at_ms, "calls": 1, "money": [],
                        "once": {"key": "k", "arguments": "a"}}))
        };
        let settle =
            |run: &str| line(json!({"event": "settle", "run": run, "at_ms": 9, "charged": [], "outcome": "done"}));
        let forget = |run: &str| line(json!({"event": "forget", "run": run, "at_ms": 10}));
        let bytes = [keyed("r1", 5), settle("r1"), forget("r1")].concat();
        let ledger = read(&bytes).unwrap();
        assert_eq!(ledger.runs["r1"].once_key, None);
        let (state, _) = warden::store::ledger::parse(std::path::Path::new("server.ledger"), &bytes).unwrap();
        assert_eq!(ledger.disagreement(&state), None);
        assert!(read(&[keyed("r1", 5), forget("r1")].concat()).unwrap_err().contains("has not ended"));
        let taken = [keyed("r1", 5), settle("r1"), keyed("r2", 11), forget("r1")].concat();
        assert!(read(&taken).unwrap_err().contains("a later run took"));
    }
}
