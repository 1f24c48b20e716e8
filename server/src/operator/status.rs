//! `warden mcp status`: whether a server runs, each unfinished run (its state, the action it
//! is in, its age, the one thing to do) and each tool's quota use, read from the ledger as it
//! is on disk (beside a running server, without its lock); as text or as JSON.

use std::path::Path;

use serde_json::{json, Value};

use crate::base::money::Money;
use crate::base::time::utc_timestamp;
use crate::catalog::Catalog;
use crate::env::Env;
use crate::env::{PostgresTarget, RecordKind};
use crate::store::ledger::{self, RunEntry, State};
use crate::store::records::RunRecords;

/// `warden mcp status <manifest>`: whether a server runs, each unfinished run (its state,
/// the action it is in, its age, the one thing to do) and each tool's quota use (per
/// principal where each has the quota), read from the ledger as it is on disk (beside a
/// running server, without its lock); as text, or as JSON with `as_json`.
pub async fn report(
    env: &Env,
    catalog: &Catalog,
    store: Option<PostgresTarget>,
    as_json: bool,
) -> Result<String, String> {
    let journals = &catalog.manifest.server.journals;
    let crate::operator::kept::Kept { state, ledger: file, records, instances } =
        crate::operator::kept::Kept::read(env, journals, store).await?;
    let now = env.clock.now_ms().max(state.last_at_ms);
    // On the store, instances hold the journals' lock only while they start: a server runs
    // while an instance holds its lease.
    let running = match &instances {
        Some(instances) => Some(instances.serving().next().is_some()),
        None => server_running(env, journals).await,
    };
    let here = Here { records: &records, manifest: &catalog.manifest.path, running: running == Some(true) };
    let owners = instances.as_ref().map(|instances| &instances.owners);
    let unfinished = unfinished(&here, &state, owners).await;
    let quotas: Vec<QuotaUse> = catalog.tools.iter().flat_map(|tool| quota_use(tool, &state, now)).collect();
    if as_json {
        let value = json!({
            "ledger": file.display().to_string(),
            "runs_recorded": state.runs.len(),
            "server": match running { Some(true) => "running", Some(false) => "not_running", None => "unknown" },
            "unfinished": unfinished.iter().map(|u| u.to_json(now)).collect::<Vec<_>>(),
            "quotas": quotas.iter().map(QuotaUse::to_json).collect::<Vec<_>>(),
            "instances": instances.as_ref().map(|instances| instances.leases.iter().map(|(name, lease)| json!({
                "name": name, "epoch": lease.epoch, "lease_left_ms": lease.remaining_ms,
            })).collect::<Vec<_>>()),
        });
        return Ok(serde_json::to_string_pretty(&value).expect("JSON values serialise") + "\n");
    }
    let mut out = format!("ledger {} ({} runs recorded)\n", file.display(), state.runs.len());
    match &instances {
        Some(instances) => out.push_str(&instances_text(instances)),
        None => out.push_str(match running {
            Some(true) => "server: running (it holds the journals' lock)\n",
            Some(false) => "server: not running\n",
            None => "server: unknown (the journals' lock cannot be probed)\n",
        }),
    }
    match unfinished.is_empty() {
        true => out.push_str("unfinished runs: none\n"),
        false => out.push_str(&format!("unfinished runs: {}\n", unfinished.len())),
    }
    for run in &unfinished {
        out.push_str(&run.text(now));
    }
    out.push_str("quota use:\n");
    for quota in &quotas {
        out.push_str(&quota.text());
    }
    Ok(out)
}

/// The instances serving the PostgreSQL store, and those whose lease ended (their runs are
/// taken over by a serving instance, or by the next start in their slot).
fn instances_text(instances: &crate::operator::kept::Instances) -> String {
    let serving: Vec<String> = instances
        .serving()
        .map(|(name, lease)| format!("{name} (epoch {}, lease {} ms left)", lease.epoch, lease.remaining_ms))
        .collect();
    let owning = |name: &str| instances.owners.values().filter(|owner| *owner == name).count();
    let ended: Vec<String> = (instances.leases.iter())
        .filter(|(name, lease)| lease.remaining_ms == 0 && owning(name) > 0)
        .map(|(name, lease)| format!("{name} (epoch {}, owning {} open run(s))", lease.epoch, owning(name)))
        .collect();
    let mut out = match serving.is_empty() {
        true => "server: not running (no instance holds a lease on the store)\n".to_string(),
        false => format!("server: running, {} instance(s) on the store: {}\n", serving.len(), serving.join(", ")),
    };
    if !ended.is_empty() {
        out.push_str(&format!(
            "leases ended: {} (their runs are taken over by an instance serving the store, or by the next start in \
             their slot)\n",
            ended.join(", ")
        ));
    }
    out
}

/// Whether a server holds the journals' lock: probed by taking it for an instant (a server
/// starting meanwhile waits for it).
pub async fn server_running(env: &Env, journals: &Path) -> Option<bool> {
    let path = journals.join(crate::base::layout::SERVER_LOCK_FILE);
    if !env.disk.exists(&path).await.ok()? {
        return Some(false);
    }
    match env.disk.try_lock(&path).await {
        Ok(Some(lock)) => {
            drop(lock);
            Some(false)
        }
        Ok(None) => Some(true),
        Err(_) => None,
    }
}

/// One line of quota use: a tool's, or one principal's where each principal has the quota.
struct QuotaUse {
    tool: String,
    /// `None`: the tool has no quota. Else whose use this is (empty: every caller's).
    quota: Option<(String, Option<String>)>,
    calls: u64,
    calls_max: Option<u64>,
    money: Option<(Money, Money)>,
    tokens: (u64, Option<u64>),
    window_ms: u64,
}

/// A tool's quota use: one entry, or one per principal when each principal has the quota.
fn quota_use(tool: &crate::catalog::Tool, state: &State, now: u64) -> Vec<QuotaUse> {
    let name = &tool.config.name;
    let unlimited = QuotaUse {
        tool: name.clone(),
        quota: None,
        calls: 0,
        calls_max: None,
        money: None,
        tokens: (0, None),
        window_ms: 0,
    };
    let Some(quota) = &tool.config.quota else {
        return vec![unlimited];
    };
    let mut whose: Vec<(String, Option<String>, ledger::Counting)> =
        vec![(String::new(), None, ledger::Counting::AllRuns)];
    if quota.per_principal {
        let principals: std::collections::BTreeSet<Option<&str>> =
            state.runs.values().filter(|e| &e.tool == name).map(|e| e.principal.as_deref()).collect();
        whose = (principals.into_iter())
            .map(|principal| {
                let label = format!(" for {}", principal.unwrap_or("callers without a principal"));
                (label, principal.map(str::to_string), ledger::Counting::Principal(principal))
            })
            .collect();
        if whose.is_empty() {
            // Each principal has the quota, and none has used it yet.
            return vec![QuotaUse {
                quota: Some((": none used (each principal has the quota)".into(), None)),
                ..unlimited
            }];
        }
    }
    whose
        .into_iter()
        .map(|(label, principal, counting)| {
            let (calls, money, tokens) = state.quota_use(name, quota.window_ms, now, counting);
            let money = quota.money.as_ref().map(|max| {
                let used =
                    Money { minor: money.get(&max.currency).copied().unwrap_or(0), currency: max.currency.clone() };
                (used, max.clone())
            });
            QuotaUse {
                tool: name.clone(),
                quota: Some((label, principal)),
                calls,
                calls_max: quota.calls,
                money,
                tokens: (tokens, quota.tokens),
                window_ms: quota.window_ms,
            }
        })
        .collect()
}

impl QuotaUse {
    fn text(&self) -> String {
        let name = &self.tool;
        let Some((label, _)) = &self.quota else {
            return format!("  {name}: no quota\n");
        };
        if self.window_ms == 0 {
            return format!("  {name}{label}\n");
        }
        let mut line = format!("  {name}{label}: {}", self.calls);
        match self.calls_max {
            Some(max) => line.push_str(&format!(" of {max} calls")),
            None => line.push_str(" calls"),
        }
        if let Some((used, max)) = &self.money {
            line.push_str(&format!(", {used} of {max}"));
        }
        if let (tokens, Some(max)) = self.tokens {
            line.push_str(&format!(", {tokens} of {max} model tokens"));
        }
        line.push_str(&format!(" in the last {}\n", ledger::duration_text(self.window_ms)));
        line
    }

    fn to_json(&self) -> Value {
        let Some((_, principal)) = &self.quota else {
            return json!({"tool": self.tool, "quota": null});
        };
        json!({
            "tool": self.tool,
            "principal": principal,
            "calls": self.calls,
            "calls_max": self.calls_max,
            "money": self.money.as_ref().map(|(used, _)| used.to_string()),
            "money_max": self.money.as_ref().map(|(_, max)| max.to_string()),
            "tokens": self.tokens.0,
            "tokens_max": self.tokens.1,
            "window_ms": self.window_ms,
        })
    }
}

/// What the report of unfinished runs reads from.
struct Here<'a> {
    records: &'a RunRecords,
    manifest: &'a Path,
    running: bool,
}

/// What a waiting run needs: its action in doubt and the command that resolves it, from
/// its waiting record, and the action shown whole (text and JSON) when the record reads.
async fn waiting_line(records: &RunRecords, entry: &RunEntry) -> (String, Option<(String, Value)>) {
    let (tool, run) = (&entry.tool, &entry.run);
    let read = crate::run::runs::WaitingRecord::read(records, tool, run).await;
    match read.and_then(|record| record.ok_or_else(|| "it is gone".to_string())) {
        Ok(record) => {
            let line = format!(
                "waiting for an operator at action {}: {}; resolve with: {}",
                record.op, record.reason, record.resolve
            );
            let journal = crate::operator::in_doubt::journal_records(records, tool, run).await;
            let begun_at_ms = journal.and_then(|journal| crate::operator::in_doubt::begun_at(&journal, record.op));
            let shown = crate::operator::in_doubt::InDoubt { record: &record, begun_at_ms };
            (line, Some((shown.text("      "), shown.to_json())))
        }
        // The problem names the record (its file, or its place in the store).
        Err(problem) => (format!("waiting for an operator, but its waiting record cannot be read: {problem}"), None),
    }
}

/// One unfinished run as the report tells it.
struct Unfinished {
    entry: RunEntry,
    /// The instance that owns it, on the PostgreSQL store.
    owner: Option<String>,
    /// Waiting for an operator (its waiting record exists).
    waiting: bool,
    /// What it is doing and the one thing to do, in words.
    detail: String,
    /// A waiting run's action in doubt shown whole: as text lines, and as JSON.
    in_doubt: Option<(String, Value)>,
}

impl Unfinished {
    fn text(&self, now_ms: u64) -> String {
        let entry = &self.entry;
        // Whom the run is for, when a remote principal called it.
        let run = match &entry.principal {
            Some(principal) => format!("{} (for {principal})", entry.run),
            None => entry.run.clone(),
        };
        let age = ledger::duration_text(now_ms.saturating_sub(entry.reserved_at_ms).max(1000));
        let owner = self.owner.as_ref().map(|owner| format!(", owned by {owner}")).unwrap_or_default();
        let shown = self.in_doubt.as_ref().map(|(text, _)| text.as_str()).unwrap_or_default();
        format!(
            "  {} {run}, reserved {age} ago{owner}: {}\n{shown}",
            entry.tool,
            crate::base::text::printable(&self.detail)
        )
    }

    fn to_json(&self, now_ms: u64) -> Value {
        let entry = &self.entry;
        let resolve = self.detail.split_once("resolve with: ").map(|(_, command)| command);
        json!({
            "run": entry.run,
            "tool": entry.tool,
            "principal": entry.principal,
            "reserved_at": utc_timestamp(entry.reserved_at_ms),
            "age_ms": now_ms.saturating_sub(entry.reserved_at_ms),
            "waiting_for_operator": self.waiting,
            "owner": self.owner,
            "detail": self.detail,
            "resolve": resolve,
            "in_doubt": self.in_doubt.as_ref().map(|(_, value)| value),
        })
    }
}

async fn unfinished(
    here: &Here<'_>,
    state: &State,
    owners: Option<&std::collections::BTreeMap<String, String>>,
) -> Vec<Unfinished> {
    let mut out = Vec::new();
    for entry in state.runs.values().filter(|e| e.is_open()) {
        let waiting = here.records.exists(&entry.tool, &entry.run, RecordKind::Waiting).await.unwrap_or(false);
        let (detail, in_doubt) = match waiting {
            true => waiting_line(here.records, entry).await,
            false => (run_line(here, entry).await, None),
        };
        let owner = owners.and_then(|owners| owners.get(&entry.run)).cloned();
        out.push(Unfinished { entry: entry.clone(), owner, waiting, detail, in_doubt });
    }
    out
}

/// An unfinished run without a waiting record: what its journal says it is doing, and what
/// applies (nothing while a server runs it; a start when none does).
async fn run_line(here: &Here<'_>, entry: &RunEntry) -> String {
    let start = format!("start the server: warden mcp {} (or warden serve-http)", here.manifest.display());
    let (tool, run) = (&entry.tool, &entry.run);
    let name = here.records.name(tool, run, RecordKind::Journal);
    let journal = match here.records.read(tool, run, RecordKind::Journal).await {
        Ok(Some(bytes)) => crate::store::journal::Journal::parse(Path::new(&name), &bytes),
        Ok(None) => Err("it has no journal yet".to_string()),
        Err(problem) => Err(problem),
    };
    let path = here.records.address(tool, run);
    let journal = match journal {
        Ok(journal) => journal,
        Err(problem) if here.running => return format!("starting ({problem})"),
        Err(problem) => return format!("not started ({problem}); the next start releases it; {start}"),
    };
    let halts_next =
        matches!(crate::run::machine::State::from_journal(&journal), Ok(crate::run::machine::State::Halted { .. }));
    if halts_next && !here.running {
        return format!(
            "interrupted at {} starts in a row without getting further: the next start halts it (it may be what \
             stops the server), and it then waits for: warden resolve --journal {} --resume",
            crate::run::machine::CRASHES_BEFORE_HALT,
            path
        );
    }
    if let Some(round) = journal.awaiting_round() {
        return format!(
            "waiting for its client's input (round {round}); it ends as `deadline` when the wait expires; nothing to do"
        );
    }
    let begun = journal.begun_op().and_then(|op| match journal.ops.get(&op) {
        Some(crate::store::journal::OpState::Begun(action)) => {
            serde_json::from_value::<crate::broker::Action>(action.clone()).ok()
        }
        _ => None,
    });
    match (begun, here.running) {
        (Some(action), true) => format!("{} in flight; nothing to do while it runs", action_text(&action)),
        (Some(action), false) => {
            let next = if crate::broker::resend_is_safe(&action) {
                "the next start sends it again (safe to resend)"
            } else if action.kind.is_database() && !action.is_read() {
                "the next start looks it up in warden_actions"
            } else {
                "the next start asks an operator whether it happened"
            };
            format!("{} begun, interrupted when the server stopped; {next}; {start}", action_text(&action))
        }
        (None, true) => "executing its program; nothing to do while it runs".to_string(),
        (None, false) => format!("interrupted when the server stopped; the next start resumes it; {start}"),
    }
}

fn action_text(action: &crate::broker::Action) -> String {
    let target: String = action.target.chars().take(120).collect();
    let target = if target.is_empty() || action.kind == crate::broker::Kind::Model {
        String::new()
    } else {
        format!(" {target}")
    };
    let target = crate::base::text::printable(&target);
    format!("action {} ({} {}{target})", action.op, action.kind, action.method.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An action's target comes from a client's arguments or a program: what `mcp status`
    /// prints of it reaches an operator's terminal, so an escape sequence there (a title, a
    /// screen clear, a carriage return that hides what came before) is shown, never obeyed.
    #[test]
    fn an_actions_target_reaches_the_terminal_escaped() {
        let action: crate::broker::Action = serde_json::from_value(serde_json::json!({
            "op": 0, "grant": "notes", "kind": "net.http.post", "method": "POST",
            "target": "https://example.test/\u{1b}]0;owned\u{7}\u{1b}[2J\rnothing to see", "body": "",
            "headers": {}, "amount": null, "idempotency_key": null
        }))
        .unwrap();
        let shown = action_text(&action);
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(shown.contains("\\u{1b}]0;owned") && shown.contains("\\r"), "{shown}");
    }
}
