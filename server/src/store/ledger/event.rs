//! The ledger's events as its lines hold them (`reserve`, `settle`, `release`, `forget`) and the records
//! inside them: pure data, folded by `state.rs` and written by `mod.rs`.

use serde::{Deserialize, Serialize};

use crate::base::money::Money;

/// Money as written in records: exact decimal text and currency.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoneyRecord {
    pub amount: String,
    pub currency: String,
}

impl From<&Money> for MoneyRecord {
    fn from(money: &Money) -> MoneyRecord {
        MoneyRecord { amount: money.amount_text(), currency: money.currency.clone() }
    }
}

impl MoneyRecord {
    /// The money of a record, an older Warden's too (`Money::parse_recorded`): a ledger
    /// written before currencies had their own units is still read.
    pub fn to_money(&self) -> Result<Money, String> {
        Money::parse_recorded(&self.amount, &self.currency)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OnceRecord {
    /// SHA-256 (hex) of the tool name and the `once.by` arguments, canonical JSON.
    pub key: String,
    /// SHA-256 (hex) of all normalised arguments: a repeated key with other arguments differs.
    pub arguments: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case", deny_unknown_fields)]
pub enum Event {
    Reserve {
        run: String,
        tool: String,
        at_ms: u64,
        calls: u64,
        /// Worst-case spend held until settled, one entry per currency.
        money: Vec<MoneyRecord>,
        once: Option<OnceRecord>,
        /// Who the run is for (an authenticated remote principal); absent over stdio.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        principal: Option<String>,
        /// Worst-case model tokens held until settled (its model grants' `max_tokens` x `uses`).
        #[serde(default, skip_serializing_if = "is_zero")]
        tokens: u64,
    },
    Settle {
        run: String,
        at_ms: u64,
        /// What the outside world actually charged, per currency.
        charged: Vec<MoneyRecord>,
        outcome: crate::store::journal::RunOutcome,
        /// Model tokens the run used.
        #[serde(default, skip_serializing_if = "is_zero")]
        tokens: u64,
    },
    Release {
        run: String,
        at_ms: u64,
    },
    /// An ended run's `once` key forgotten by an operator (`warden once release`): a call
    /// with the same key runs again. The run keeps its charges and its place in its quotas.
    Forget {
        run: String,
        at_ms: u64,
        /// The account that released it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
}

impl Event {
    pub fn run(&self) -> &str {
        match self {
            Event::Reserve { run, .. }
            | Event::Settle { run, .. }
            | Event::Release { run, .. }
            | Event::Forget { run, .. } => run,
        }
    }

    pub fn at_ms(&self) -> u64 {
        match self {
            Event::Reserve { at_ms, .. }
            | Event::Settle { at_ms, .. }
            | Event::Release { at_ms, .. }
            | Event::Forget { at_ms, .. } => *at_ms,
        }
    }
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// A plain reserve of run `run` of tool `t` at 1 ms, for the ledger's unit tests.
#[cfg(test)]
pub(crate) fn test_reserve(run: &str, tokens: u64) -> Event {
    Event::Reserve {
        run: run.into(),
        tool: "t".into(),
        at_ms: 1,
        calls: 1,
        money: vec![],
        once: None,
        principal: None,
        tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run with no model tokens writes no `tokens` field, the same line as before token
    /// quotas (a mutant cargo-mutants found missed wrote `"tokens":0` on every line); a run
    /// with tokens writes them.
    #[test]
    fn tokens_are_written_only_when_there_are_some() {
        let reserve = |tokens| test_reserve("a", tokens);
        assert!(!serde_json::to_string(&reserve(0)).unwrap().contains("tokens"));
        assert!(serde_json::to_string(&reserve(7)).unwrap().contains(r#""tokens":7"#));
        let settle = Event::Settle {
            run: "a".into(),
            at_ms: 2,
            charged: vec![],
            outcome: crate::store::journal::RunOutcome::Done,
            tokens: 0,
        };
        assert!(!serde_json::to_string(&settle).unwrap().contains("tokens"));
    }
}
