//! The ledger's state: a pure fold of its events, with the one-reserve rule checked.

use std::collections::BTreeMap;

use crate::base::money::Money;
use crate::store::ledger::event::{Event, MoneyRecord, OnceRecord};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunPhase {
    /// Reserved, not yet settled or released: running, interrupted, or waiting for an operator.
    Open,
    Settled {
        at_ms: u64,
        charged: Vec<MoneyRecord>,
        outcome: crate::store::journal::RunOutcome,
    },
    /// Never started; holds nothing.
    Released {
        at_ms: u64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunEntry {
    pub run: String,
    pub tool: String,
    pub reserved_at_ms: u64,
    pub calls: u64,
    pub money: Vec<MoneyRecord>,
    pub once: Option<OnceRecord>,
    /// The principal the run is for, if any.
    pub principal: Option<String>,
    pub phase: RunPhase,
    /// Order of the reserve in the ledger.
    pub sequence: u64,
    /// Model tokens: the worst case while open, what was used once settled.
    pub tokens: u64,
}

impl RunEntry {
    pub fn is_open(&self) -> bool {
        self.phase == RunPhase::Open
    }

    /// When the run's `once` key stops holding, given its `keep`: counted from the run's end.
    /// An open run's key never expires.
    pub fn once_expires_at(&self, keep_ms: u64) -> Option<u64> {
        match &self.phase {
            RunPhase::Settled { at_ms, .. } => Some(at_ms.saturating_add(keep_ms)),
            RunPhase::Open => None,
            RunPhase::Released { at_ms } => Some(*at_ms),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    pub runs: BTreeMap<String, RunEntry>,
    /// once key -> the latest run reserved with it (released runs hold no key).
    once: BTreeMap<String, String>,
    pub last_at_ms: u64,
    next_sequence: u64,
}

/// The open run `run`, for its settle or release (the errors `State::check` gives).
fn open_entry<'a>(runs: &'a mut BTreeMap<String, RunEntry>, run: &str) -> Result<&'a mut RunEntry, String> {
    match runs.get_mut(run) {
        None => Err(format!("a settle or release for run {run}, which has no reserve")),
        Some(entry) if !entry.is_open() => Err(format!("a second settle or release for run {run}")),
        Some(entry) => Ok(entry),
    }
}

/// Whose runs a quota counts: every run of the tool, or one principal's (`None`: the runs
/// for no principal, as over stdio).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counting<'a> {
    AllRuns,
    Principal(Option<&'a str>),
}

impl Counting<'_> {
    fn counts(&self, entry: &RunEntry) -> bool {
        match self {
            Counting::AllRuns => true,
            Counting::Principal(principal) => entry.principal.as_deref() == *principal,
        }
    }
}

/// What a `once` key finds.
#[derive(Debug, PartialEq, Eq)]
pub enum OnceLookup<'a> {
    None,
    Found(&'a RunEntry),
}

/// A call the quota refuses: which of its limits, and the message that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaRefusal {
    pub limit: QuotaLimit,
    pub message: String,
}

/// The limit of a quota a call would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaLimit {
    Calls,
    Money,
    Tokens,
}

impl QuotaLimit {
    /// The name a refused call's `_meta` gives it (`dev.warden/refused`).
    pub fn name(self) -> &'static str {
        match self {
            QuotaLimit::Calls => "quota.calls",
            QuotaLimit::Money => "quota.money",
            QuotaLimit::Tokens => "quota.tokens",
        }
    }
}

impl State {
    /// Whether the state holds `event`'s run in the phase the event leaves it in: what an
    /// append asserts after applying it, so a state that drifted from its file stops the
    /// server before a decision is read from it.
    pub fn holds(&self, event: &Event) -> bool {
        let phase = self.run(event.run()).map(|entry| &entry.phase);
        match event {
            Event::Reserve { .. } => matches!(phase, Some(RunPhase::Open)),
            Event::Settle { at_ms, .. } => matches!(phase, Some(RunPhase::Settled { at_ms: at, .. }) if at == at_ms),
            Event::Release { at_ms, .. } => matches!(phase, Some(RunPhase::Released { at_ms: at }) if at == at_ms),
            Event::Forget { run, .. } => self.run(run).is_some_and(|entry| !entry.is_open() && entry.once.is_none()),
        }
    }

    /// Whether `entry`'s `once` key still finds it (a later run with the same key, reserved
    /// once the key expired, takes it over; a released run's key went at its release).
    fn holds_its_key(&self, entry: &RunEntry) -> bool {
        entry.once.as_ref().is_some_and(|once| self.once.get(&once.key) == Some(&entry.run))
    }

    /// What a forget of `run` would forget: an ended run holding its key.
    fn forgettable(&self, run: &str) -> Result<&RunEntry, String> {
        match self.runs.get(run) {
            None => Err(format!("a forget for run {run}, which has no reserve")),
            Some(entry) if entry.is_open() => Err(format!("a forget for run {run}, which has not ended")),
            Some(entry) if !self.holds_its_key(entry) => {
                Err(format!("a forget for run {run}, which holds no once key"))
            }
            Some(entry) => Ok(entry),
        }
    }

    /// Checks that `event` may follow the events so far, without applying it.
    pub fn check(&self, event: &Event) -> Result<(), String> {
        match event {
            Event::Reserve { run, .. } => {
                if self.runs.contains_key(run) {
                    return Err(format!("a second reserve for run {run}"));
                }
            }
            Event::Settle { run, .. } | Event::Release { run, .. } => match self.runs.get(run) {
                None => return Err(format!("a settle or release for run {run}, which has no reserve")),
                Some(entry) if !entry.is_open() => return Err(format!("a second settle or release for run {run}")),
                Some(_) => {}
            },
            Event::Forget { run, .. } => {
                self.forgettable(run)?;
            }
        }
        for money in money_of(event) {
            money.to_money().map_err(|e| format!("bad money in run {}: {e}", event.run()))?;
        }
        Ok(())
    }

    /// Applies `event` after the checks of `check`, looking each run up once (a start reads
    /// every event of the ledger through here).
    pub fn apply(&mut self, event: &Event) -> Result<(), String> {
        for money in money_of(event) {
            money.to_money().map_err(|e| format!("bad money in run {}: {e}", event.run()))?;
        }
        match event {
            Event::Reserve { run, tool, at_ms, calls, money, once, principal, tokens } => {
                let std::collections::btree_map::Entry::Vacant(slot) = self.runs.entry(run.clone()) else {
                    return Err(format!("a second reserve for run {run}"));
                };
                slot.insert(RunEntry {
                    run: run.clone(),
                    tool: tool.clone(),
                    reserved_at_ms: *at_ms,
                    calls: *calls,
                    money: money.clone(),
                    once: once.clone(),
                    principal: principal.clone(),
                    phase: RunPhase::Open,
                    sequence: self.next_sequence,
                    tokens: *tokens,
                });
                self.next_sequence += 1;
                if let Some(once) = once {
                    self.once.insert(once.key.clone(), run.clone());
                }
            }
            Event::Settle { run, at_ms, charged, outcome, tokens } => {
                let entry = open_entry(&mut self.runs, run)?;
                entry.phase = RunPhase::Settled { at_ms: *at_ms, charged: charged.clone(), outcome: *outcome };
                // Settled, a run counts the tokens it used, no longer its worst case.
                entry.tokens = *tokens;
            }
            Event::Forget { run, .. } => {
                let key = self.forgettable(run)?.once.as_ref().map(|once| once.key.clone());
                self.once.remove(&key.expect("a forgettable run holds its key"));
                // Taken off the run too, so a compacted ledger does not hold the key again.
                self.runs.get_mut(run).expect("a forgettable run is in the ledger").once = None;
            }
            Event::Release { run, at_ms } => {
                let entry = open_entry(&mut self.runs, run)?;
                entry.phase = RunPhase::Released { at_ms: *at_ms };
                if let Some(once) = &entry.once {
                    if self.once.get(&once.key) == Some(run) {
                        self.once.remove(&once.key);
                    }
                }
            }
        }
        self.last_at_ms = self.last_at_ms.max(event.at_ms());
        Ok(())
    }

    pub fn run(&self, run: &str) -> Option<&RunEntry> {
        self.runs.get(run)
    }

    /// The run holding `key`, if its key has not expired at `now_ms`.
    pub fn once_lookup(&self, key: &str, keep_ms: u64, now_ms: u64) -> OnceLookup<'_> {
        let Some(entry) = self.once.get(key).and_then(|run| self.runs.get(run)) else {
            return OnceLookup::None;
        };
        match entry.once_expires_at(keep_ms) {
            Some(expires) if expires <= now_ms => OnceLookup::None,
            _ => OnceLookup::Found(entry),
        }
    }

    /// Runs that count against `tool`'s quota at `now_ms`: every open run (it may still
    /// spend), and every settled run reserved within the window, of the principal counted.
    /// Released runs never started.
    fn counted<'a>(
        &'a self,
        tool: &'a str,
        window_ms: u64,
        now_ms: u64,
        counting: Counting<'a>,
    ) -> impl Iterator<Item = &'a RunEntry> + 'a {
        let since = now_ms.saturating_sub(window_ms);
        self.runs.values().filter(move |entry| {
            entry.tool == tool
                && counting.counts(entry)
                && match entry.phase {
                    RunPhase::Open => true,
                    RunPhase::Settled { .. } => entry.reserved_at_ms > since,
                    RunPhase::Released { .. } => false,
                }
        })
    }

    /// Calls and money counted against the quota now: open runs at their worst case,
    /// settled runs at what they were charged.
    pub fn quota_use(
        &self,
        tool: &str,
        window_ms: u64,
        now_ms: u64,
        counting: Counting<'_>,
    ) -> (u64, BTreeMap<String, i64>, u64) {
        let mut calls = 0;
        let mut tokens: u64 = 0;
        let mut money: BTreeMap<String, i64> = BTreeMap::new();
        for entry in self.counted(tool, window_ms, now_ms, counting) {
            calls += entry.calls;
            tokens = tokens.saturating_add(entry.tokens);
            let held = match &entry.phase {
                RunPhase::Settled { charged, .. } => charged,
                _ => &entry.money,
            };
            for record in held {
                let amount = record.to_money().expect("checked when applied");
                *money.entry(amount.currency).or_insert(0) += amount.minor;
            }
        }
        (calls, money, tokens)
    }

    /// Whether one more call holding `worst_case` fits `tool`'s quota at `now_ms`.
    #[allow(clippy::too_many_arguments)] // each limit of a quota, side by side as the manifest has them
    pub fn quota_admits(
        &self,
        tool: &str,
        window_ms: u64,
        calls_max: Option<u64>,
        money_max: Option<&Money>,
        worst_case: &[Money],
        tokens: (Option<u64>, u64),
        now_ms: u64,
        counting: Counting<'_>,
    ) -> Result<(), QuotaRefusal> {
        let (calls, money, tokens_used) = self.quota_use(tool, window_ms, now_ms, counting);
        let (tokens_max, tokens_asked) = tokens;
        let frees = self.frees_up_at(tool, window_ms, now_ms, counting);
        let when = match frees {
            Some(at) => {
                format!("the oldest counted call leaves the window in {}", duration_text(at.saturating_sub(now_ms)))
            }
            None => "it frees up only when runs in progress or waiting for an operator settle".to_string(),
        };
        if let Some(max) = calls_max {
            if calls + 1 > max {
                return Err(QuotaRefusal {
                    limit: QuotaLimit::Calls,
                    message: format!(
                        "over the quota of `{tool}`: {max} calls per {} are used; nothing was run; {when}",
                        duration_text(window_ms)
                    ),
                });
            }
        }
        if let Some(max) = money_max {
            let used = money.get(&max.currency).copied().unwrap_or(0);
            let asked: i64 = worst_case.iter().filter(|m| m.currency == max.currency).map(|m| m.minor).sum();
            // Checked: an overflow is over the quota. A call that may spend nothing is still
            // refused once the quota is used up.
            let over =
                used.checked_add(asked).is_none_or(|total| total > max.minor) || (asked == 0 && used >= max.minor);
            if over {
                let used_text = Money { minor: used, currency: max.currency.clone() };
                let asked_text = Money { minor: asked, currency: max.currency.clone() };
                return Err(QuotaRefusal {
                    limit: QuotaLimit::Money,
                    message: format!(
                        "over the quota of `{tool}`: {max} per {} allowed, {used_text} held or spent, this call may spend \
                         {asked_text}; nothing was run; {when}",
                        duration_text(window_ms)
                    ),
                });
            }
        }
        if let Some(max) = tokens_max {
            // Checked like money: an overflow is over, and a full quota refuses any call.
            let over = tokens_used.checked_add(tokens_asked).is_none_or(|total| total > max)
                || (tokens_asked == 0 && tokens_used >= max);
            if over {
                return Err(QuotaRefusal {
                    limit: QuotaLimit::Tokens,
                    message: format!(
                        "over the quota of `{tool}`: {max} model tokens per {} allowed, {tokens_used} held or used, this \
                         call may use {tokens_asked}; nothing was run; {when}",
                        duration_text(window_ms)
                    ),
                });
            }
        }
        Ok(())
    }

    /// When the earliest settled run counted now leaves the window.
    fn frees_up_at(&self, tool: &str, window_ms: u64, now_ms: u64, counting: Counting<'_>) -> Option<u64> {
        self.counted(tool, window_ms, now_ms, counting)
            .filter(|entry| !entry.is_open())
            .map(|entry| entry.reserved_at_ms.saturating_add(window_ms))
            .min()
    }

    /// The events of the runs `keep` selects, in ledger order, and how many runs were dropped.
    pub fn compacted_events(&self, keep: &impl Fn(&RunEntry) -> bool) -> (Vec<Event>, usize) {
        let mut kept: Vec<&RunEntry> = self.runs.values().filter(|entry| keep(entry)).collect();
        kept.sort_by_key(|entry| entry.sequence);
        let dropped = self.runs.len() - kept.len();
        let mut events = Vec::new();
        for entry in kept {
            events.push(Event::Reserve {
                run: entry.run.clone(),
                tool: entry.tool.clone(),
                at_ms: entry.reserved_at_ms,
                calls: entry.calls,
                money: entry.money.clone(),
                once: entry.once.clone(),
                principal: entry.principal.clone(),
                tokens: entry.tokens,
            });
            match &entry.phase {
                RunPhase::Open => {}
                RunPhase::Settled { at_ms, charged, outcome } => events.push(Event::Settle {
                    run: entry.run.clone(),
                    at_ms: *at_ms,
                    charged: charged.clone(),
                    outcome: *outcome,
                    tokens: entry.tokens,
                }),
                RunPhase::Released { at_ms } => events.push(Event::Release { run: entry.run.clone(), at_ms: *at_ms }),
            }
        }
        (events, dropped)
    }
}

fn money_of(event: &Event) -> &[MoneyRecord] {
    match event {
        Event::Reserve { money, .. } => money,
        Event::Settle { charged, .. } => charged,
        Event::Release { .. } | Event::Forget { .. } => &[],
    }
}

/// `90s`, `15m`, `3h`, `2d`: the largest unit that divides, rounded up to a minute when over one.
pub fn duration_text(ms: u64) -> String {
    let seconds = ms.div_ceil(1000);
    if seconds < 60 {
        return format!("{seconds}s");
    }
    let minutes = seconds.div_ceil(60);
    if minutes % (24 * 60) == 0 {
        format!("{}d", minutes / (24 * 60))
    } else if minutes % 60 == 0 {
        format!("{}h", minutes / 60)
    } else {
        format!("{minutes}m")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reserve(run: &str, at_ms: u64, money: &[(&str, &str)]) -> Event {
        Event::Reserve {
            run: run.into(),
            tool: "t".into(),
            at_ms,
            calls: 1,
            money: money.iter().map(|(a, c)| MoneyRecord { amount: a.to_string(), currency: c.to_string() }).collect(),
            once: None,
            principal: None,
            tokens: 0,
        }
    }

    #[test]
    fn the_state_holds_each_event_in_the_phase_it_leaves_its_run() {
        let mut state = State::default();
        let reserved = reserve("a", 1, &[]);
        assert!(!state.holds(&reserved));
        state.apply(&reserved).unwrap();
        assert!(state.holds(&reserved));
        let outcome = crate::store::journal::RunOutcome::Done;
        let settle = Event::Settle { run: "a".into(), at_ms: 5, charged: vec![], outcome, tokens: 0 };
        assert!(!state.holds(&settle));
        state.apply(&settle).unwrap();
        assert!(state.holds(&settle) && !state.holds(&reserved));
        assert!(!state.holds(&Event::Release { run: "a".into(), at_ms: 5 }));
    }

    #[test]
    fn one_reserve_and_at_most_one_settle_or_release() {
        let mut state = State::default();
        state.apply(&reserve("a", 1, &[])).unwrap();
        assert!(state.apply(&reserve("a", 2, &[])).is_err());
        state.apply(&Event::Release { run: "a".into(), at_ms: 3 }).unwrap();
        assert!(state
            .apply(&Event::Settle {
                run: "a".into(),
                at_ms: 4,
                charged: vec![],
                outcome: crate::store::journal::RunOutcome::Done,
                tokens: 0,
            })
            .is_err());
        assert!(state.apply(&Event::Release { run: "b".into(), at_ms: 4 }).is_err());
    }

    #[test]
    fn quota_counts_open_runs_at_worst_case_and_settled_ones_at_their_charge() {
        let usd = |a: &str| Money::parse(a, "USD").unwrap();
        let mut state = State::default();
        state.apply(&reserve("a", 1000, &[("50.00", "USD")])).unwrap();
        state.apply(&reserve("b", 2000, &[("50.00", "USD")])).unwrap();
        state
            .apply(&Event::Settle {
                run: "b".into(),
                at_ms: 2500,
                charged: vec![MoneyRecord { amount: "10.00".into(), currency: "USD".into() }],
                outcome: crate::store::journal::RunOutcome::Done,
                tokens: 0,
            })
            .unwrap();
        let (calls, money, _) = state.quota_use("t", 10_000, 3000, Counting::AllRuns);
        assert_eq!((calls, money.get("USD").copied()), (2, Some(6000)));
        let max = usd("100.00");
        assert!(state
            .quota_admits("t", 10_000, Some(3), Some(&max), &[usd("40.00")], (None, 0), 3000, Counting::AllRuns)
            .is_ok());
        let refused = state
            .quota_admits("t", 10_000, Some(3), Some(&max), &[usd("40.01")], (None, 0), 3000, Counting::AllRuns)
            .unwrap_err();
        assert_eq!(refused.limit, QuotaLimit::Money);
        assert!(refused.message.contains("100.00 USD"), "{}", refused.message);
        let refused =
            state.quota_admits("t", 10_000, Some(2), None, &[], (None, 0), 3000, Counting::AllRuns).unwrap_err();
        assert_eq!(refused.limit, QuotaLimit::Calls);
        assert!(refused.message.contains("2 calls per 10s"), "{}", refused.message);
        assert!(refused.message.contains("in 9s"), "{}", refused.message);
        // A window is (now - window, now]: a whole window after its reserve, the settled run
        // has left it and only the open run counts.
        assert_eq!(state.quota_use("t", 10_000, 11_999, Counting::AllRuns).0, 2);
        assert_eq!(state.quota_use("t", 10_000, 12_000, Counting::AllRuns).0, 1);
    }

    #[test]
    fn a_token_quota_counts_open_runs_at_worst_case_and_settled_ones_at_what_they_used() {
        let mut state = State::default();
        let Event::Reserve { run, tool, at_ms, calls, money, once, principal, .. } = reserve("a", 1000, &[]) else {
            unreachable!()
        };
        state.apply(&Event::Reserve { run, tool, at_ms, calls, money, once, principal, tokens: 300 }).unwrap();
        let admits = |state: &State, asked: u64| {
            state.quota_admits("t", 10_000, None, None, &[], (Some(500), asked), 2000, Counting::AllRuns)
        };
        assert!(admits(&state, 200).is_ok());
        let refused = admits(&state, 201).unwrap_err();
        assert_eq!(refused.limit, QuotaLimit::Tokens);
        assert!(refused.message.contains("500 model tokens per 10s allowed, 300 held or used"), "{}", refused.message);
        let outcome = crate::store::journal::RunOutcome::Done;
        state.apply(&Event::Settle { run: "a".into(), at_ms: 1500, charged: vec![], outcome, tokens: 40 }).unwrap();
        assert!(admits(&state, 460).is_ok(), "settled, the run counts the 40 it used");
        assert!(admits(&state, u64::MAX).is_err(), "overflow is over");
        // As with money, a full quota refuses even a call that asks for nothing, and one
        // that is not full admits it.
        assert!(admits(&state, 0).is_ok());
        let full = reserve("b", 1600, &[]);
        let Event::Reserve { run, tool, at_ms, calls, money, once, principal, .. } = full else { unreachable!() };
        state.apply(&Event::Reserve { run, tool, at_ms, calls, money, once, principal, tokens: 460 }).unwrap();
        assert!(admits(&state, 0).is_err(), "full: 0 more is refused");
    }

    /// What an append asks before it writes: `check` refuses what `apply` would (a writer never
    /// writes what its reader refuses), and applies nothing.
    #[test]
    fn check_refuses_an_event_out_of_order_or_with_bad_money_and_applies_nothing() {
        let mut state = State::default();
        let release = Event::Release { run: "a".into(), at_ms: 3 };
        assert!(state.check(&release).unwrap_err().contains("has no reserve"));
        let bad_money = reserve("a", 1, &[("ten", "USD")]);
        assert!(state.check(&bad_money).unwrap_err().contains("bad money"));
        assert!(state.apply(&bad_money).unwrap_err().contains("bad money"));
        state.apply(&reserve("a", 1, &[])).unwrap();
        assert!(state.check(&reserve("a", 2, &[])).unwrap_err().contains("a second reserve"));
        state.check(&release).unwrap();
        assert!(state.run("a").unwrap().is_open(), "checked, not applied");
        state.apply(&release).unwrap();
        assert!(state.check(&release).unwrap_err().contains("a second settle or release"));
    }

    /// A released run never ran: its key goes at once, which admission relies on (a run
    /// found by its key is never a released one). A settled run holds its key for `keep`.
    #[test]
    fn a_released_run_lets_its_once_key_go_and_a_settled_one_holds_it_for_keep() {
        let mut state = State::default();
        let keyed = |run: &str, at_ms: u64| {
            let Event::Reserve { run, tool, calls, money, principal, tokens, .. } = reserve(run, at_ms, &[]) else {
                unreachable!()
            };
            let once = Some(OnceRecord { key: "k".into(), arguments: "x".into() });
            Event::Reserve { run, tool, at_ms, calls, money, once, principal, tokens }
        };
        state.apply(&keyed("a", 1)).unwrap();
        assert!(matches!(state.once_lookup("k", 100, 2), OnceLookup::Found(entry) if entry.run == "a"));
        state.apply(&Event::Release { run: "a".into(), at_ms: 3 }).unwrap();
        assert!(!state.once.contains_key("k"));
        assert!(matches!(state.once_lookup("k", 100, 3), OnceLookup::None));
        state.apply(&keyed("b", 4)).unwrap();
        let outcome = crate::store::journal::RunOutcome::Done;
        state.apply(&Event::Settle { run: "b".into(), at_ms: 10, charged: vec![], outcome, tokens: 0 }).unwrap();
        assert!(matches!(state.once_lookup("k", 100, 109), OnceLookup::Found(entry) if entry.run == "b"));
        assert!(matches!(state.once_lookup("k", 100, 110), OnceLookup::None));
    }

    /// `warden once release`: an ended run's key is forgotten, so a call with it runs again;
    /// an open run's, a run's without a key and a key a later run took are refused (by
    /// `check` and by the fold alike), and a compacted ledger does not hold the key again.
    #[test]
    fn a_forget_lets_an_ended_runs_key_go_and_is_refused_for_anything_else() {
        let keyed = |run: &str, at_ms: u64| {
            let Event::Reserve { run, tool, calls, money, principal, tokens, .. } = reserve(run, at_ms, &[]) else {
                unreachable!()
            };
            let once = Some(OnceRecord { key: "k".into(), arguments: "x".into() });
            Event::Reserve { run, tool, at_ms, calls, money, once, principal, tokens }
        };
        let settle = |run: &str, at_ms| {
            let outcome = crate::store::journal::RunOutcome::Failed(crate::program::FailureKind::Value);
            Event::Settle { run: run.into(), at_ms, charged: vec![], outcome, tokens: 0 }
        };
        let forget = |run: &str| Event::Forget { run: run.into(), at_ms: 20, by: Some("ops".into()) };
        let refused = |state: &State, event: &Event, why: &str| {
            assert!(state.check(event).unwrap_err().contains(why), "{event:?}");
            assert!(state.clone().apply(event).unwrap_err().contains(why), "{event:?}");
        };
        let mut state = State::default();
        state.apply(&keyed("a", 1)).unwrap();
        refused(&state, &forget("a"), "has not ended");
        refused(&state, &forget("nobody"), "has no reserve");
        state.apply(&reserve("plain", 2, &[])).unwrap();
        state.apply(&settle("plain", 3)).unwrap();
        refused(&state, &forget("plain"), "holds no once key");
        state.apply(&settle("a", 10)).unwrap();
        assert!(matches!(state.once_lookup("k", 1_000, 11), OnceLookup::Found(entry) if entry.run == "a"));
        state.check(&forget("a")).unwrap();
        state.apply(&forget("a")).unwrap();
        assert!(state.holds(&forget("a")));
        assert!(matches!(state.once_lookup("k", 1_000, 21), OnceLookup::None));
        refused(&state, &forget("a"), "holds no once key");
        let (events, _) = state.compacted_events(&|_| true);
        let mut compacted = State::default();
        events.iter().for_each(|event| compacted.apply(event).unwrap());
        assert!(matches!(compacted.once_lookup("k", 1_000, 21), OnceLookup::None), "{events:?}");
        // The corrected call takes the key; the first run's key, taken over, is not forgotten.
        state.apply(&keyed("b", 22)).unwrap();
        assert!(matches!(state.once_lookup("k", 1_000, 23), OnceLookup::Found(entry) if entry.run == "b"));
        state.apply(&settle("b", 30)).unwrap();
        state.apply(&forget("b")).unwrap();
        state.apply(&keyed("c", 40)).unwrap();
        state.apply(&settle("c", 50)).unwrap();
        refused(&state, &forget("b"), "holds no once key");
    }

    #[test]
    fn compaction_keeps_the_runs_selected_in_ledger_order_and_counts_those_dropped() {
        let mut state = State::default();
        for (run, at_ms) in [("c", 1), ("a", 2), ("b", 3)] {
            state.apply(&reserve(run, at_ms, &[])).unwrap();
        }
        state.apply(&Event::Release { run: "a".into(), at_ms: 4 }).unwrap();
        let (events, dropped) = state.compacted_events(&|entry| entry.is_open());
        assert_eq!(dropped, 1);
        assert_eq!(events.iter().map(Event::run).collect::<Vec<_>>(), ["c", "b"]);
    }

    #[test]
    fn a_duration_reads_in_its_largest_whole_unit_rounded_up_to_a_minute_past_one() {
        let cases = [
            (0, "0s"),
            (1, "1s"),
            (59_000, "59s"),
            (59_001, "1m"),
            (60_000, "1m"),
            (90_000, "2m"),
            (3_600_000, "1h"),
            (5_400_000, "90m"),
            (86_400_000, "1d"),
            (90_000_000, "25h"),
            (172_800_000, "2d"),
        ];
        for (ms, text) in cases {
            assert_eq!(duration_text(ms), text, "{ms} ms");
        }
    }

    #[test]
    fn a_full_money_quota_refuses_even_a_call_that_asks_for_nothing() {
        let usd = |a: &str| Money::parse(a, "USD").unwrap();
        let mut state = State::default();
        state.apply(&reserve("a", 1000, &[("100.00", "USD")])).unwrap();
        let max = usd("100.00");
        assert!(
            state.quota_admits("t", 10_000, None, Some(&max), &[], (None, 0), 2000, Counting::AllRuns).is_err(),
            "full: 0 more is refused"
        );
        assert!(state
            .quota_admits("t", 10_000, None, Some(&usd("100.01")), &[], (None, 0), 2000, Counting::AllRuns)
            .is_ok());
        let huge = Money { minor: i64::MAX, currency: "USD".into() };
        assert!(
            state.quota_admits("t", 10_000, None, Some(&max), &[huge], (None, 0), 2000, Counting::AllRuns).is_err(),
            "overflow is over"
        );
    }

    /// A quota per principal counts only that principal's runs; a shared one counts all.
    #[test]
    fn a_principal_quota_counts_that_principal_alone() {
        let mut state = State::default();
        let of = |run: &str, principal: Option<&str>| {
            let Event::Reserve { run, tool, at_ms, calls, money, once, tokens, .. } = reserve(run, 1000, &[]) else {
                unreachable!()
            };
            Event::Reserve { run, tool, at_ms, calls, money, once, principal: principal.map(str::to_string), tokens }
        };
        state.apply(&of("a", Some("alice"))).unwrap();
        state.apply(&of("b", Some("alice"))).unwrap();
        state.apply(&of("c", None)).unwrap();
        let used = |counting| state.quota_use("t", 10_000, 2000, counting).0;
        assert_eq!(used(Counting::Principal(Some("alice"))), 2);
        assert_eq!(used(Counting::Principal(Some("bob"))), 0);
        assert_eq!(used(Counting::Principal(None)), 1);
        assert_eq!(used(Counting::AllRuns), 3);
        assert!(state
            .quota_admits("t", 10_000, Some(2), None, &[], (None, 0), 2000, Counting::Principal(Some("alice")))
            .is_err());
        assert!(state
            .quota_admits("t", 10_000, Some(2), None, &[], (None, 0), 2000, Counting::Principal(Some("bob")))
            .is_ok());
    }
}
