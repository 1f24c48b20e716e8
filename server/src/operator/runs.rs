//! `warden runs list` and `warden runs show`: what the ledger and the journals say of each run,
//! read beside a live server without its lock (its appends may be mid-line: a torn last line
//! is normal here and left out).

use std::path::Path;

use serde_json::{json, Value};

use crate::base::time::utc_timestamp;
use crate::catalog::Catalog;
use crate::env::Env;
use crate::env::{PostgresTarget, RecordKind};
use crate::operator::kept::Kept;
use crate::store::journal::{JournalRecord, RunOutcome};
use crate::store::ledger::{RunEntry, RunPhase, State};
use crate::store::records::RunRecords;

/// Runs `runs list` prints unless told otherwise, newest first.
pub const LIST_LIMIT_DEFAULT: usize = 50;
/// The most `--limit` may ask for: a ledger holds a window of history, not all of it.
pub const LIST_LIMIT_MAX: usize = 10_000;
/// What `runs show` prints of one result, argument or message in text (`--json` has it whole).
const SHOWN_CHARS_MAX: usize = 300;
/// The most runs, newest first, whose records a text search reads (`--text`, the console's
/// search): a search answers in a bounded time however long the ledger is, and says how many
/// it read.
pub const TEXT_SEARCH_RUNS_MAX: usize = 2_000;
/// The longest text a search looks for.
pub const SEARCH_TEXT_CHARS_MAX: usize = 200;
/// The most runs waiting for a person the console shows whole.
pub const WAITING_SHOWN_MAX: usize = 100;

/// Where a run stands, as an operator asks about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Executing in the live server.
    Running,
    /// An action may have happened: `warden resolve` says whether.
    WaitingForOperator,
    /// Found unfinished at starts in a row without getting further: `warden resolve --resume`.
    Halted,
    /// Its program asked its client for input.
    WaitingForInput,
    /// Unfinished, and no server runs it: the next start resumes it.
    Interrupted,
    Done,
    Failed,
    /// Recorded, never started (a crash before its journal): it held nothing.
    Released,
}

impl RunState {
    pub const ALL: [RunState; 8] = [
        RunState::Running,
        RunState::WaitingForOperator,
        RunState::Halted,
        RunState::WaitingForInput,
        RunState::Interrupted,
        RunState::Done,
        RunState::Failed,
        RunState::Released,
    ];

    pub fn name(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::WaitingForOperator => "waiting_for_operator",
            RunState::Halted => "halted",
            RunState::WaitingForInput => "waiting_for_input",
            RunState::Interrupted => "interrupted",
            RunState::Done => "done",
            RunState::Failed => "failed",
            RunState::Released => "released",
        }
    }

    /// Parses a `--state` value, naming every state when it is none of them.
    pub fn from_name(text: &str) -> Result<RunState, String> {
        RunState::ALL.into_iter().find(|state| state.name() == text).ok_or_else(|| {
            let names: Vec<&str> = RunState::ALL.iter().map(|state| state.name()).collect();
            format!("--state: `{text}` is not a run state (one of: {})", names.join(", "))
        })
    }
}

/// Which runs `runs list` prints.
#[derive(Clone, Debug)]
pub struct Filter {
    pub tool: Option<String>,
    pub state: Option<RunState>,
    /// Only runs reserved at most this long ago.
    pub since_ms: Option<u64>,
    /// Only runs whose records (journal, kept arguments, waiting record) hold this text,
    /// ignoring ASCII case, among the newest `TEXT_SEARCH_RUNS_MAX` the other filters pass.
    pub text: Option<String>,
    pub limit: usize,
}

impl Filter {
    /// A filter from what a person typed (`runs list`'s flags, the console's fields): a state
    /// by its name, `since` as a duration (`90s`, `15m`, `3h`, `2d`), each refused naming it.
    pub fn parse(
        tool: Option<String>,
        state: Option<&str>,
        since: Option<&str>,
        text: Option<String>,
        limit: usize,
    ) -> Result<Filter, String> {
        let state = state.map(RunState::from_name).transpose()?;
        let since_ms = since
            .map(|since| {
                crate::manifest::parse_duration_ms(since, crate::manifest::DurationUnits::SecondsUp)
                    .map_err(|problem| format!("--since: {problem}"))
            })
            .transpose()?;
        Ok(Filter { tool, state, since_ms, text, limit })
    }
}

/// What is read once for every run described: the ledger, the journals, whether a server runs.
struct Seen {
    records: RunRecords,
    state: State,
    server_running: bool,
    now_ms: u64,
    /// On the PostgreSQL store, each open run's owner.
    owners: std::collections::BTreeMap<String, String>,
}

impl Seen {
    async fn read(env: &Env, catalog: &Catalog, store: Option<PostgresTarget>) -> Result<Seen, String> {
        let journals = &catalog.manifest.server.journals;
        let Kept { state, records, instances, .. } = Kept::read(env, journals, store).await?;
        // On the store, a server runs while an instance holds its lease.
        let server_running = match &instances {
            Some(instances) => instances.serving().next().is_some(),
            None => crate::operator::status::server_running(env, journals).await == Some(true),
        };
        let now_ms = env.clock.now_ms().max(state.last_at_ms);
        let owners = instances.map(|instances| instances.owners).unwrap_or_default();
        Ok(Seen { records, state, server_running, now_ms, owners })
    }

    /// Whether `entry`'s records hold `text` (lowercase), ignoring ASCII case.
    async fn mentions(&self, entry: &RunEntry, text: &str) -> bool {
        for kind in [RecordKind::Journal, RecordKind::Inputs, RecordKind::Waiting] {
            let Ok(Some(bytes)) = self.records.read(&entry.tool, &entry.run, kind).await else { continue };
            if String::from_utf8_lossy(&bytes).to_ascii_lowercase().contains(text) {
                return true;
            }
        }
        false
    }

    /// Where `entry` stands: the ledger says it for a finished run; an unfinished one's
    /// waiting record and journal say the rest.
    async fn run_state(&self, entry: &RunEntry) -> RunState {
        match &entry.phase {
            RunPhase::Released { .. } => return RunState::Released,
            RunPhase::Settled { outcome: RunOutcome::Done, .. } => return RunState::Done,
            RunPhase::Settled { .. } => return RunState::Failed,
            RunPhase::Open => {}
        }
        let waiting = crate::run::runs::WaitingRecord::read(&self.records, &entry.tool, &entry.run).await;
        if let Ok(Some(waiting)) = waiting {
            return if waiting.halted { RunState::Halted } else { RunState::WaitingForOperator };
        }
        let journal = read_records(&self.records, entry).await.ok().flatten();
        let awaiting = journal.is_some_and(|(records, _)| {
            let asked = records.iter().filter(|r| matches!(r, JournalRecord::Asked { .. })).count();
            let answered = records.iter().filter(|r| matches!(r, JournalRecord::Answered { .. })).count();
            asked > answered && !records.iter().any(|r| matches!(r, JournalRecord::End(_)))
        });
        match (awaiting, self.server_running) {
            (true, _) => RunState::WaitingForInput,
            (false, true) => RunState::Running,
            (false, false) => RunState::Interrupted,
        }
    }
}

/// A run's records as its journal holds them (a torn last line left out), and the torn
/// bytes; `None` when it has no journal (never started, or no longer kept).
async fn read_records(records: &RunRecords, entry: &RunEntry) -> Result<Option<(Vec<JournalRecord>, usize)>, String> {
    let Some(bytes) = records.read(&entry.tool, &entry.run, RecordKind::Journal).await? else {
        return Ok(None);
    };
    let name = records.name(&entry.tool, &entry.run, RecordKind::Journal);
    let parsed = crate::store::record::parse_file::<JournalRecord>(&bytes)
        .map_err(|d| format!("{name}:{}: the journal is damaged: {}", d.line, d.problem))?;
    Ok(Some((parsed.records, parsed.torn_tail_bytes)))
}

/// `warden runs list`: the runs the ledger holds, newest first, as a table or as JSON.
pub async fn list(
    env: &Env,
    catalog: &Catalog,
    store: Option<PostgresTarget>,
    filter: &Filter,
    as_json: bool,
) -> Result<String, String> {
    let seen = Seen::read(env, catalog, store).await?;
    let listed = listed(&seen, catalog, filter).await?;
    Ok(match as_json {
        true => serde_json::to_string_pretty(&listed).expect("JSON values serialise") + "\n",
        false => {
            let rows = listed["runs"].as_array().cloned().unwrap_or_default();
            table(&rows, listed["more"].as_u64().unwrap_or(0) as usize, listed.get("searched"))
        }
    })
}

/// The runs `filter` selects, newest first: `{"runs": [...], "more": n}`, and with a text
/// search `"searched"`, how many runs' records it read.
async fn listed(seen: &Seen, catalog: &Catalog, filter: &Filter) -> Result<Value, String> {
    check_filter(seen, catalog, filter)?;
    let mut entries: Vec<&RunEntry> = seen.state.runs.values().collect();
    entries.sort_by_key(|entry| std::cmp::Reverse(entry.sequence));
    let since = filter.since_ms.map(|ms| seen.now_ms.saturating_sub(ms));
    let text = filter.text.as_ref().map(|text| text.to_ascii_lowercase());
    let (mut rows, mut more, mut searched) = (Vec::new(), 0usize, 0usize);
    for entry in entries {
        let wanted_tool = filter.tool.as_ref().is_none_or(|tool| tool == &entry.tool);
        if !wanted_tool || since.is_some_and(|since| entry.reserved_at_ms < since) {
            continue;
        }
        let state = seen.run_state(entry).await;
        if filter.state.is_some_and(|wanted| wanted != state) {
            continue;
        }
        if let Some(text) = &text {
            if searched == TEXT_SEARCH_RUNS_MAX {
                break;
            }
            searched += 1;
            if !seen.mentions(entry, text).await {
                continue;
            }
        }
        match rows.len() < filter.limit {
            true => rows.push(row(entry, state)),
            false => more += 1,
        }
    }
    let mut listed = json!({"runs": rows, "more": more});
    if text.is_some() {
        listed["searched"] = json!(searched);
    }
    Ok(listed)
}

/// A filter's limit in range, its text within its bound, and its tool one the manifest or
/// the ledger knows.
fn check_filter(seen: &Seen, catalog: &Catalog, filter: &Filter) -> Result<(), String> {
    if filter.limit == 0 || filter.limit > LIST_LIMIT_MAX {
        return Err(format!("--limit: {} is out of range (1 to {LIST_LIMIT_MAX})", filter.limit));
    }
    if filter.text.as_ref().is_some_and(|text| text.is_empty() || text.chars().count() > SEARCH_TEXT_CHARS_MAX) {
        return Err(format!("--text: from 1 to {SEARCH_TEXT_CHARS_MAX} characters"));
    }
    if let Some(tool) = &filter.tool {
        // A tool no longer in the manifest may still have runs in the ledger.
        if catalog.tool(tool).is_none() && !seen.state.runs.values().any(|entry| &entry.tool == tool) {
            let names: Vec<&str> = catalog.tools.iter().map(|t| t.config.name.as_str()).collect();
            return Err(format!(
                "--tool: no tool named `{tool}` in the manifest or the ledger (its tools: {})",
                names.join(", ")
            ));
        }
    }
    Ok(())
}

/// What the console shows: the runs waiting for a person first (at most `WAITING_SHOWN_MAX`,
/// each with its action in doubt shown whole and the command that decides it), then the runs
/// `filter` selects, and the manifest's tools and the states, for its filters.
pub async fn console_view(
    env: &Env,
    catalog: &Catalog,
    store: Option<PostgresTarget>,
    filter: &Filter,
) -> Result<Value, String> {
    let seen = Seen::read(env, catalog, store).await?;
    let mut view = listed(&seen, catalog, filter).await?;
    let mut open: Vec<&RunEntry> = seen.state.runs.values().filter(|entry| entry.is_open()).collect();
    open.sort_by_key(|entry| std::cmp::Reverse(entry.sequence));
    let mut waiting = Vec::new();
    for entry in open {
        let state = seen.run_state(entry).await;
        if !matches!(state, RunState::WaitingForOperator | RunState::Halted) || waiting.len() == WAITING_SHOWN_MAX {
            continue;
        }
        let mut shown = row(entry, state);
        let records = read_records(&seen.records, entry).await.ok().flatten();
        if let Some(in_doubt) = in_doubt_of(&seen, entry, state, records.as_ref().map(|(records, _)| records)).await {
            shown["in_doubt"] = in_doubt;
        }
        waiting.push(shown);
    }
    view["waiting"] = json!(waiting);
    view["server"] = json!(catalog.manifest.server.name);
    view["tools"] = json!(catalog.tools.iter().map(|tool| tool.config.name.clone()).collect::<Vec<_>>());
    view["states"] = json!(RunState::ALL.iter().map(|state| state.name()).collect::<Vec<_>>());
    Ok(view)
}

/// A waiting run's action in doubt shown whole (`InDoubt::to_json`), with the command that
/// decides it; none for a run not waiting for a person.
async fn in_doubt_of(
    seen: &Seen,
    entry: &RunEntry,
    state: RunState,
    records: Option<&Vec<JournalRecord>>,
) -> Option<Value> {
    if !matches!(state, RunState::WaitingForOperator | RunState::Halted) {
        return None;
    }
    let record = crate::run::runs::WaitingRecord::read(&seen.records, &entry.tool, &entry.run).await.ok().flatten()?;
    let begun_at_ms = records.and_then(|records| crate::operator::in_doubt::begun_at(records, record.op));
    let mut shown = crate::operator::in_doubt::InDoubt { record: &record, begun_at_ms }.to_json();
    shown["resolve"] = json!(record.resolve);
    Some(shown)
}

/// One run as `runs list --json` gives it.
fn row(entry: &RunEntry, state: RunState) -> Value {
    let (settled_at, outcome) = match &entry.phase {
        RunPhase::Settled { at_ms, outcome, .. } => (Some(*at_ms), Some(outcome.to_string())),
        RunPhase::Released { at_ms } => (Some(*at_ms), None),
        RunPhase::Open => (None, None),
    };
    json!({
        "run": entry.run,
        "tool": entry.tool,
        "principal": entry.principal,
        "state": state.name(),
        "outcome": outcome,
        "reserved_at": utc_timestamp(entry.reserved_at_ms),
        "settled_at": settled_at.map(utc_timestamp),
        "took_ms": settled_at.map(|at| at.saturating_sub(entry.reserved_at_ms)),
    })
}

fn table(rows: &[Value], more: usize, searched: Option<&Value>) -> String {
    let searched = searched.and_then(Value::as_u64).map(|n| format!("(the text searched in the newest {n} run(s))\n"));
    if rows.is_empty() {
        return format!("no runs match\n{}", searched.unwrap_or_default());
    }
    let text = |row: &Value, key: &str| row[key].as_str().unwrap_or("-").to_string();
    let lines: Vec<[String; 6]> = rows
        .iter()
        .map(|row| {
            let took = row["took_ms"].as_u64().map_or("-".to_string(), |ms| format!("{ms} ms"));
            let state = match row["outcome"].as_str() {
                Some(outcome) if row["state"] == "failed" => format!("failed ({outcome})"),
                _ => text(row, "state"),
            };
            let principal = crate::base::text::printable(&text(row, "principal"));
            [text(row, "run"), text(row, "tool"), state, text(row, "reserved_at"), took, principal]
        })
        .collect();
    let heading = ["RUN", "TOOL", "STATE", "RESERVED (UTC)", "TOOK", "FOR"].map(String::from);
    let mut widths = heading.each_ref().map(String::len);
    for line in &lines {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for line in std::iter::once(&heading).chain(&lines) {
        let cells: Vec<String> = line.iter().zip(widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    if more > 0 {
        out.push_str(&format!("... and {more} more (raise --limit, or narrow with --tool, --state, --since)\n"));
    }
    out.push_str(&searched.unwrap_or_default());
    out
}

/// `warden runs show <run>`: the run's journal rendered (each action with its kind, target,
/// result or error and duration; the answer its client got), or as JSON.
pub async fn show(
    env: &Env,
    catalog: &Catalog,
    store: Option<PostgresTarget>,
    run: &str,
    as_json: bool,
) -> Result<String, String> {
    let seen = Seen::read(env, catalog, store).await?;
    let entry = find(&seen.state, run)?;
    let state = seen.run_state(entry).await;
    let journal = seen.records.name(&entry.tool, &entry.run, RecordKind::Journal);
    let records = read_records(&seen.records, entry).await?;
    let returns_content = catalog.tool(&entry.tool).is_some_and(|tool| tool.program.returns_content());
    let shown = Shown::of(entry, state, records.as_ref().map(|(records, _)| records.as_slice()), returns_content);
    let mut value = shown.to_json(entry, state);
    value["journal"] = json!(journal);
    let owner = seen.owners.get(&entry.run);
    if let Some(owner) = owner {
        value["owner"] = json!(owner);
    }
    if let Some((_, torn)) = records.as_ref().filter(|(_, torn)| *torn > 0) {
        value["torn_tail_bytes"] = json!(torn);
    }
    let waiting = match state {
        RunState::WaitingForOperator | RunState::Halted => {
            crate::run::runs::WaitingRecord::read(&seen.records, &entry.tool, &entry.run).await.ok().flatten()
        }
        _ => None,
    };
    let in_doubt = waiting.as_ref().map(|record| {
        let begun_at_ms =
            records.as_ref().and_then(|(records, _)| crate::operator::in_doubt::begun_at(records, record.op));
        crate::operator::in_doubt::InDoubt { record, begun_at_ms }
    });
    if let Some(in_doubt) = &in_doubt {
        value["in_doubt"] = in_doubt.to_json();
    }
    Ok(match as_json {
        true => serde_json::to_string_pretty(&value).expect("JSON values serialise") + "\n",
        false => {
            let mut text = shown.text(entry, state, Path::new(&journal), records.is_some());
            if let Some(in_doubt) = &in_doubt {
                text.push_str("  waiting for a person to decide:\n");
                text.push_str(&in_doubt.text("    "));
                let command = crate::base::text::printable(&in_doubt.record.resolve);
                text.push_str(&format!("    decide with: {command}\n"));
            }
            match owner {
                Some(owner) => format!("{text}owned by instance {owner} (PostgreSQL store)\n"),
                None => text,
            }
        }
    })
}

/// The run `run` names: its whole id, or a prefix of at least 6 characters only it has.
pub fn find<'s>(state: &'s State, run: &str) -> Result<&'s RunEntry, String> {
    let run = &run.to_ascii_lowercase();
    if let Some(entry) = state.run(run) {
        return Ok(entry);
    }
    let valid = run.len() >= 6 && run.len() <= 32 && run.bytes().all(|b| b.is_ascii_hexdigit());
    if !valid {
        return Err(format!(
            "`{run}` is not a run id (32 hexadecimal characters, or the first 6 or more of one; `warden runs list` \
             names them)"
        ));
    }
    let mut matching = state.runs.values().filter(|entry| entry.run.starts_with(run));
    match (matching.next(), matching.next()) {
        (Some(entry), None) => Ok(entry),
        (Some(_), Some(_)) => Err(format!("`{run}` begins more than one run id: give more of it")),
        (None, _) => Err(format!(
            "run {run} is not in the ledger: it never was, or retention has dropped it (`warden runs list` names \
             the runs it keeps)"
        )),
    }
}

/// One action as `runs show` renders it.
struct ShownAction {
    op: u64,
    action: Value,
    begun_at_ms: Option<u64>,
    done_at_ms: Option<u64>,
    /// done, in_doubt, happened (an operator said so), did_not_happen (likewise).
    status: &'static str,
    result: Option<Value>,
    /// Who decided it, for an action an operator decided.
    by: Option<crate::store::journal::Word>,
}

/// A journal read for `runs show`.
#[derive(Default)]
struct Shown {
    started_at_ms: Option<u64>,
    actions: Vec<ShownAction>,
    prints: Vec<String>,
    restarts: Vec<u64>,
    rounds: usize,
    end: Option<crate::store::journal::EndRecord>,
    answer: Option<Value>,
}

impl Shown {
    fn of(entry: &RunEntry, state: RunState, records: Option<&[JournalRecord]>, returns_content: bool) -> Shown {
        let mut shown = Shown::default();
        for record in records.unwrap_or_default() {
            shown.add(record);
        }
        // An action begun and not done is in doubt only if nothing is running it now.
        if state == RunState::Running {
            for action in shown.actions.iter_mut().filter(|a| a.status == "in_doubt") {
                action.status = "in_flight";
            }
        }
        shown.answer = shown.end.as_ref().map(|end| crate::call::answer::answer(&entry.run, end, returns_content));
        shown
    }

    fn add(&mut self, record: &JournalRecord) {
        match record {
            JournalRecord::Header { at_ms, .. } => self.started_at_ms = Some(*at_ms),
            JournalRecord::Print { text, .. } => self.prints.push(text.clone()),
            JournalRecord::Begin { op, action, at_ms } => self.actions.push(ShownAction {
                op: *op,
                action: action.clone(),
                begun_at_ms: *at_ms,
                done_at_ms: None,
                status: "in_doubt",
                result: None,
                by: None,
            }),
            JournalRecord::Done { op, result, at_ms } => self.finish(*op, ("done", None), Some(result.clone()), *at_ms),
            JournalRecord::Resolved { op, happened: true, result, at_ms, by } => {
                self.finish(*op, ("happened", by.clone()), result.clone(), Some(*at_ms))
            }
            JournalRecord::Resolved { op, happened: false, at_ms, by, .. } => {
                self.finish(*op, ("did_not_happen", by.clone()), None, Some(*at_ms))
            }
            JournalRecord::Resumed { at_ms } => self.restarts.push(*at_ms),
            JournalRecord::Asked { .. } => self.rounds += 1,
            JournalRecord::End(end) => self.end = Some(end.clone()),
            JournalRecord::Retried { .. } | JournalRecord::Answered { .. } => {}
        }
    }

    /// The latest begin of action `op` gets its outcome (an action an operator said did not
    /// happen is begun again).
    fn finish(
        &mut self,
        op: u64,
        (status, by): (&'static str, Option<crate::store::journal::Word>),
        result: Option<Value>,
        at_ms: Option<u64>,
    ) {
        if let Some(action) = self.actions.iter_mut().rev().find(|action| action.op == op) {
            action.status = status;
            action.by = by;
            action.result = result;
            action.done_at_ms = at_ms;
        }
    }

    fn to_json(&self, entry: &RunEntry, state: RunState) -> Value {
        let actions: Vec<Value> = self
            .actions
            .iter()
            .map(|a| {
                json!({
                    "op": a.op,
                    "kind": a.action["kind"],
                    "method": a.action["method"],
                    "target": target_of(&a.action),
                    "status": a.status,
                    "begun_at": a.begun_at_ms.map(utc_timestamp),
                    "done_at": a.done_at_ms.map(utc_timestamp),
                    "duration_ms": duration_ms(a),
                    "result": a.result,
                    "decided_by": a.by,
                })
            })
            .collect();
        let mut value = row(entry, state);
        value["started_at"] = json!(self.started_at_ms.map(utc_timestamp));
        value["actions"] = json!(actions);
        value["prints"] = json!(self.prints);
        value["restarts"] = json!(self.restarts.iter().map(|at| utc_timestamp(*at)).collect::<Vec<_>>());
        value["input_rounds"] = json!(self.rounds);
        value["answer"] = json!(self.answer);
        value["message"] = json!(self.end.as_ref().and_then(|end| end.message.as_ref()));
        value
    }

    fn text(&self, entry: &RunEntry, state: RunState, journal: &Path, has_journal: bool) -> String {
        let whom =
            entry.principal.as_ref().map(|p| format!(" for {}", crate::base::text::printable(p))).unwrap_or_default();
        let mut out = format!("run {} of tool `{}`{whom}: {}\n", entry.run, entry.tool, state.name());
        out.push_str(&format!("  reserved  {}\n", utc_timestamp(entry.reserved_at_ms)));
        if let Some(at) = self.started_at_ms {
            out.push_str(&format!("  started   {}\n", utc_timestamp(at)));
        }
        for at in &self.restarts {
            out.push_str(&format!("  resumed   {}\n", utc_timestamp(*at)));
        }
        match &entry.phase {
            RunPhase::Settled { at_ms, outcome, .. } => {
                out.push_str(&format!("  settled   {} ({outcome})\n", utc_timestamp(*at_ms)))
            }
            RunPhase::Released { at_ms } => {
                out.push_str(&format!("  released  {} (it never started)\n", utc_timestamp(*at_ms)))
            }
            RunPhase::Open => {}
        }
        // Why a run that failed ended so (an operator's cancel names who and why).
        if let Some(message) =
            self.end.as_ref().filter(|end| end.outcome != RunOutcome::Done).and_then(|end| end.message.as_ref())
        {
            out.push_str(&format!("  why       {}\n", clipped(message)));
        }
        match has_journal {
            true => out.push_str(&format!("  journal   {}\n", journal.display())),
            false => out.push_str("  journal   none (never started, or no longer kept)\n"),
        }
        out.push_str(&self.actions_text());
        for print in &self.prints {
            out.push_str(&format!("  print: {}\n", clipped(print)));
        }
        if self.rounds > 0 {
            out.push_str(&format!("  asked its client for input {} time(s)\n", self.rounds));
        }
        if let Some(answer) = &self.answer {
            let text = serde_json::to_string(answer).expect("JSON values serialise");
            out.push_str(&format!("  answer: {}\n", clipped(&text)));
        }
        out
    }

    fn actions_text(&self) -> String {
        if self.actions.is_empty() {
            return "  no actions\n".to_string();
        }
        let mut out = format!("  actions ({}):\n", self.actions.len());
        for a in &self.actions {
            let (kind, method) = (a.action["kind"].as_str().unwrap_or("?"), a.action["method"].as_str().unwrap_or(""));
            let target: String = target_of(&a.action).chars().take(120).collect();
            let target = crate::base::text::printable(&target);
            let took = duration_ms(a).map(|ms| format!(" in {ms} ms")).unwrap_or_default();
            let outcome = match a.status {
                "done" => format!("done{took}: {}", clipped(&compact(a.result.as_ref()))),
                "happened" => {
                    format!("happened, {} said: {}", whom(a.by.as_ref()), clipped(&compact(a.result.as_ref())))
                }
                "did_not_happen" => format!("did not happen, {} said", whom(a.by.as_ref())),
                "in_flight" => "in flight".to_string(),
                _ => "in doubt: begun, no outcome journaled".to_string(),
            };
            out.push_str(&format!("    #{} {kind} {method} {target}: {outcome}\n", a.op));
        }
        out
    }
}

/// Where an action went, as `operator::in_doubt` describes it (a refund's endpoint and
/// payment intent, which its `target` leaves empty).
fn target_of(action: &Value) -> String {
    match serde_json::from_value::<crate::broker::Action>(action.clone()) {
        Ok(action) if action.target.is_empty() || action.method == crate::broker::Method::Refund => {
            crate::broker::shown::described(&action, None)["target"].as_str().unwrap_or_default().to_string()
        }
        _ => action["target"].as_str().unwrap_or_default().to_string(),
    }
}

/// Who decided an action: the account and its note, or "an operator" (a journal written
/// before who was kept), escaped for a terminal.
fn whom(by: Option<&crate::store::journal::Word>) -> String {
    match by {
        Some(crate::store::journal::Word { account, note: Some(note) }) => {
            format!("{} (\"{}\")", crate::base::text::printable(account), clipped(note))
        }
        Some(word) => crate::base::text::printable(&word.account),
        None => "an operator".to_string(),
    }
}

/// From its begin to its done record; none for an action an operator settled (that would be
/// the operator's own delay).
fn duration_ms(action: &ShownAction) -> Option<u64> {
    if action.status != "done" {
        return None;
    }
    Some(action.done_at_ms?.saturating_sub(action.begun_at_ms?))
}

fn compact(value: Option<&Value>) -> String {
    value.map_or("-".to_string(), |value| serde_json::to_string(value).expect("JSON values serialise"))
}

/// At most `SHOWN_CHARS_MAX` characters, saying how much was left out, control characters
/// escaped (what a client, a program or a service wrote reaches a terminal here).
fn clipped(text: &str) -> String {
    crate::base::text::printable(&crate::base::text::clipped(text, SHOWN_CHARS_MAX, "--json has it whole"))
}
