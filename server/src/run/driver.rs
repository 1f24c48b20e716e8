//! The driver of a run's state machine (`machine.rs`): it carries out each command through
//! `Env` and the run store, in order, and feeds the machine the event the last one produced.
//! Fresh calls and runs resumed at start alike go through `Runs::execute_to_end`: resuming
//! is the normal path with a longer journal.

use serde_json::{json, Map, Value};

use crate::broker::{scrub, usage_json, Action, AskedRound, Broker, Completed, Performed};
use crate::catalog::{Catalog, Tool};
use crate::env::{Env, Point};
use crate::limits::ACTIONS_PER_RUN_MAX;
use crate::manifest::{CapabilityGrant, Grant};
use crate::program::job::{Executed, Job, Stopped};
use crate::program::{FailureKind, Outcome};
use crate::run::input::Inputs;
use crate::run::machine::{self, Command, Event, Next, State};
use crate::run::notice::Listeners;
use crate::run::notice::Notice;
use crate::run::perform;
use crate::run::runs::{LineOf, Runs};
use crate::run::store::RunStore;
use crate::run::store::{Fatal, RunEnd, Waiting};
use crate::store::journal::{EndRecord, Journal, JournalRecord, RunOutcome};

/// Transitions one run may take in one process: at most four per action (begin and
/// perform, done and execute, and a look-up or resend after a restart), two per input round,
/// plus its end.
const TRANSITIONS_MAX: u64 = 4 * (ACTIONS_PER_RUN_MAX + 2) + 2 * crate::program::ask::ASK_ROUNDS_MAX as u64;

/// What a run's commands need that does not change while it runs.
struct Context<'a> {
    tool: &'a Tool,
    run: &'a str,
    inputs: &'a Map<String, Value>,
    secrets: Vec<String>,
    /// (parameter, kind) of each capability grant.
    capabilities: Vec<(String, crate::broker::Kind)>,
    /// For the deadline: what the wall clock says had elapsed before this process took the
    /// run up (only for a run resumed after a restart: the wall clock is all that survives
    /// one; zero for a fresh run), and
    /// the monotonic clock when it did. A wall-clock step cannot expire a run in progress.
    elapsed_before_ms: u64,
    started_monotonic_ms: u64,
    /// The input kinds (`elicitation`, `sampling`, `roots`) the client the run answers now
    /// declared; none for a run no client waits on (resumed at start).
    client_kinds: &'a [String],
}

/// The end of a run cancelled while it awaited its client's input.
const CANCELLED_WHILE_ASKING: &str = "its client cancelled the run while it waited for input";

/// How a run is taken up by this call of `execute_to_end`.
#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    /// A fresh call's run: its header was just written.
    Fresh,
    /// Found unfinished at start.
    Resumed,
    /// The client's answers to the round the run awaits (the keys sent, checked), and the
    /// run's time toward its deadline when it asked (`Awaited::active_ms`).
    Answered { answers: Value, active_ms: u64 },
    /// Nobody answered the round the run awaits in time.
    Expired,
    /// The round the run awaits can never be answered (why): it ends so.
    Abandoned(String),
    /// Its client cancelled the run while it awaited a round (`tasks/cancel`).
    Cancelled,
    /// An operator cancelled it (`warden runs cancel`), saying this of who and why.
    CancelledByOperator(String),
}

/// Drives runs through their state machine over a store: every durable record goes through
/// `S`, every effect through `Env`. Nothing here knows where the store keeps its records.
pub struct Driver<'a, S: RunStore> {
    pub store: &'a S,
    pub env: &'a Env,
    pub catalog: &'a Catalog,
    pub listeners: &'a Listeners,
    pub inputs: &'a Inputs,
}

impl Runs {
    /// Steps 4 to 6 of a run of this server's file store (`Driver::execute_to_end`).
    pub async fn execute_to_end(
        &self,
        tool: &Tool,
        run: &str,
        inputs: &Map<String, Value>,
        entry: Entry,
        client_kinds: &[String],
    ) -> Result<RunEnd, Fatal> {
        let driver = Driver {
            store: self,
            env: &self.env,
            catalog: &self.catalog,
            listeners: &self.listeners,
            inputs: &self.inputs,
        };
        let span = tracing::info_span!(target: "warden", "run", run, tool = %tool.config.name);
        tracing::Instrument::instrument(driver.execute_to_end(tool, run, inputs, entry, client_kinds), span).await
    }
}

impl<S: RunStore> Driver<'_, S> {
    /// Steps 4 to 6: drives the run's state machine from its journal to its end (settled)
    /// or to a stop in doubt (waiting for an operator).
    /// `client_kinds`: the input kinds the client waiting on the run declared.
    pub async fn execute_to_end(
        &self,
        tool: &Tool,
        run: &str,
        inputs: &Map<String, Value>,
        entry: Entry,
        client_kinds: &[String],
    ) -> Result<RunEnd, Fatal> {
        let _running = self.store.running(run);
        let journal = self.journal_of(tool, run).await?;
        let mut state = State::from_journal(&journal).map_err(|e| Fatal::storage(format!("run {run}: {e}")))?;
        let context = self.context(tool, run, inputs, &journal, &entry, client_kinds);
        let mut event = self.first_event(tool, run, &journal, entry)?;
        for _ in 0..TRANSITIONS_MAX {
            let (next, commands) = match machine::step(state, event) {
                Ok(stepped) => stepped,
                Err(invalid) => return Err(self.invalid_step(run, invalid).await),
            };
            state = next;
            // A stopping server lets a run finish the action it is in, never begin another:
            // stopped here, nothing is in doubt and the next start resumes the run.
            if self.store.draining() && commands.iter().any(begins_an_action) {
                self.store.log(&tool.config.name, run, None, "stopped between actions: the server is stopping").await;
                return Ok(RunEnd::Drained);
            }
            let mut produced = None;
            for command in commands {
                if let Some(yielded) = self.carry_out(&context, command).await? {
                    assert!(produced.is_none(), "run {run}: one transition's commands yielded two events");
                    produced = Some(yielded);
                }
            }
            event = match (&state, produced) {
                (State::Ended(end), None) => return Ok(RunEnd::Ended(end.clone())),
                (State::Waiting { op }, None) => return Ok(RunEnd::Stopped { op: *op }),
                (State::Awaiting { round, .. }, None) => {
                    return self.awaiting(tool, run, *round, self.active_ms(&context)).await
                }
                (_, Some(yielded)) => yielded,
                (state, None) => {
                    return Err(Fatal::bug(format!("run {run}: state {} is waiting for no event", state.name())))
                }
            };
        }
        Err(Fatal::bug(format!("run {run} did not end within {TRANSITIONS_MAX} transitions")))
    }

    /// A step the machine has no transition for is a bug, unless another instance took the run
    /// over (this one stalled past its lease) and wrote its records meanwhile: then this
    /// instance stops as one that lost its lease (its writes would be refused by their fence).
    async fn invalid_step(&self, run: &str, invalid: impl std::fmt::Display) -> Fatal {
        match self.store.taken_by_another(run).await {
            Some(owner) => Fatal::storage(format!(
                "run {run}: {invalid}: this instance's lease on the PostgreSQL store ended and the run is no longer \
                 its own ({owner}); this instance stops, and a start takes its runs up"
            )),
            None => Fatal::bug(format!("run {run}: {invalid}")),
        }
    }

    /// What every step of one run's drive needs.
    fn context<'c>(
        &self,
        tool: &'c Tool,
        run: &'c str,
        inputs: &'c Map<String, Value>,
        journal: &Journal,
        entry: &Entry,
        client_kinds: &'c [String],
    ) -> Context<'c> {
        let capabilities = (tool.config.grants.iter())
            .filter_map(|(param, grant)| match grant {
                Grant::Capability(grant) => Some((param.clone(), grant.cap)),
                Grant::Secret { .. } => None,
            })
            .collect();
        // Only a run taken up again was begun before: for a fresh one, a wall-clock step
        // since its header (another run's await in between) is not time that passed. A run
        // answered in the process that asked goes on from the time that process measured; one
        // taken up by another process (after a restart) can only go by the wall clock. Time
        // spent waiting for the client's input does not count.
        let elapsed_before_ms = match entry {
            Entry::Fresh => 0,
            Entry::Answered { active_ms, .. } => *active_ms,
            _ => {
                let now = self.env.clock.now_ms();
                now.saturating_sub(journal.header_at_ms).saturating_sub(journal.waited_ms(now))
            }
        };
        Context {
            tool,
            run,
            inputs,
            secrets: self.secrets_of(tool),
            capabilities,
            elapsed_before_ms,
            started_monotonic_ms: self.env.clock.monotonic_ms(),
            client_kinds,
        }
    }

    /// The event a drive begins with, from how the run was taken up.
    fn first_event(&self, tool: &Tool, run: &str, journal: &Journal, entry: Entry) -> Result<Event, Fatal> {
        let at_ms = self.env.clock.now_ms();
        Ok(match entry {
            Entry::Fresh => Event::Start,
            Entry::Resumed => Event::Resume { at_ms },
            Entry::Answered { answers, .. } => Event::Answered { answers, at_ms },
            Entry::Expired => {
                let wait = crate::store::ledger::duration_text(crate::limits::INPUT_WAIT_MS);
                let why = format!("the client did not answer the run's request for input within {wait}");
                Event::Expired(self.expired_end(tool, run, journal, at_ms, why)?)
            }
            Entry::Abandoned(why) => Event::Expired(self.expired_end(tool, run, journal, at_ms, why)?),
            Entry::Cancelled => {
                let mut end = self.expired_end(tool, run, journal, at_ms, CANCELLED_WHILE_ASKING.to_string())?;
                end.outcome = RunOutcome::Failed(FailureKind::Cancelled);
                Event::Expired(end)
            }
            Entry::CancelledByOperator(said) => {
                let mut end = self.expired_end(tool, run, journal, at_ms, said)?;
                end.outcome = RunOutcome::Failed(FailureKind::Cancelled);
                Event::Cancelled(end)
            }
        })
    }

    /// A run that waits for its client's input: registered, so the client's retry or the
    /// expiry takes it up; the requests sent, for the answer.
    async fn awaiting(&self, tool: &Tool, run: &str, round: u64, active_ms: u64) -> Result<RunEnd, Fatal> {
        let journal = self.journal_of(tool, run).await?;
        let asked = journal.rounds.get(round as usize).expect("an awaited round is in the journal");
        let expires_at_ms = asked.asked_at_ms.saturating_add(crate::limits::INPUT_WAIT_MS);
        let requests: Map<String, Value> =
            (asked.sent.iter()).filter_map(|key| Some((key.clone(), asked.requests.get(key)?.clone()))).collect();
        let principal = self.store.principal(run);
        self.inputs.register(self.env, run, (&tool.config.name, principal), (round, expires_at_ms), active_ms);
        Ok(RunEnd::Asking { round, requests: Value::Object(requests), expires_at_ms })
    }

    /// The end of a run whose round will not be answered (`why`).
    fn expired_end(
        &self,
        tool: &Tool,
        run: &str,
        journal: &Journal,
        at_ms: u64,
        why: String,
    ) -> Result<EndRecord, Fatal> {
        let usage = Broker::new(run, &tool.config.grants, completed_actions(journal, run)?).journaled_usage();
        let end = EndRecord {
            outcome: RunOutcome::Failed(FailureKind::Deadline),
            result: None,
            message: Some(why),
            usage: usage_json(&usage),
            at_ms,
        };
        Ok(self.store.fitted_end(end))
    }

    /// A debug line of the server's log for each action performed: what, where, how it went.
    fn log_performed(&self, cx: &Context<'_>, action: &Action, performed: &Performed, took_us: u64) {
        let how = match performed {
            Performed::Done(result) => match result.get("status").and_then(Value::as_u64) {
                Some(status) => format!("done (status {status})"),
                None => "done".to_string(),
            },
            Performed::InDoubt(_) => "in doubt".to_string(),
        };
        let to = match host_of(action) {
            "" => String::new(),
            host => format!(" {host}"),
        };
        let (op, kind, method) = (action.op, action.kind, action.method.name());
        let line = format!("action {op}: {kind} {method}{to}: {how} in {} ms", took_us / 1000);
        let line = scrub(&line, &cx.secrets);
        let principal = self.store.principal(cx.run);
        let op = op.to_string();
        let of = LineOf { tool: &cx.tool.config.name, run: cx.run, action: Some(action.op) };
        self.env.log_at(crate::env::Level::Debug, &line, &of.fields(principal.as_deref(), Some(&op)));
    }

    async fn journal_of(&self, tool: &Tool, run: &str) -> Result<Journal, Fatal> {
        self.store.journal(tool, run).await
    }

    /// The action rule (issue 28): an action whose longest send is `send_ms` is sent only while
    /// the lease surely outlasts it. Held back, a first send is not sent and the run hears why;
    /// one sent again after a crash may have happened, so the server stops, and the run's next
    /// owner decides it as recovery does (sent again when that is safe).
    async fn held_back_by_the_lease(&self, send_ms: Option<u64>, resend: u64) -> Result<Option<Event>, Fatal> {
        let Some(send_ms) = send_ms else { return Ok(None) };
        let Err(problem) = self.store.lease_allows(send_ms).await else { return Ok(None) };
        if resend > 0 {
            return Err(Fatal::storage(format!("{problem}; the action is left to the run's next owner")));
        }
        let not_sent = serde_json::json!({"error": problem, "may_have_been_sent": false});
        Ok(Some(Event::Performed(crate::broker::Performed::Done(not_sent))))
    }

    /// Carries out one command; returns the event it yields, if it yields one.
    async fn carry_out(&self, cx: &Context<'_>, command: Command) -> Result<Option<Event>, Fatal> {
        let (name, run) = (&cx.tool.config.name, cx.run);
        match command {
            Command::Execute => self.execute_once(cx).await.map(Some),
            Command::Journal(record) => {
                self.journal(cx, &stamped(record, self.env.clock.now_ms())).await?;
                Ok(None)
            }
            Command::Perform { action, resend } => {
                let grant = grant_of(cx, action.grant.as_str())?;
                let net = &cx.tool.config.net;
                let model = self.catalog.manifest.model.as_ref();
                // A send again after crashes: how many sends they interrupted (each may have
                // reached the service, which a model call's charge must count).
                let resend = match resend {
                    true => self.sends_interrupted(cx.tool, run).await?.max(1),
                    false => 0,
                };
                if let Some(held_back) = self.held_back_by_the_lease(grant.cap.longest_send_ms(net), resend).await? {
                    return Ok(Some(held_back));
                }
                let started_us = self.env.clock.monotonic_us();
                let span = action_span(&action);
                let lease_left = || self.store.lease_left_ms();
                let rules = perform::SendRules { lease_left: &lease_left, resend_for_ms: self.resend_for_ms(cx) };
                let performing =
                    perform::perform(self.env, (grant, net, model), (run, &action), &cx.secrets, resend, &rules);
                let performed = tracing::Instrument::instrument(performing, span.clone()).await;
                let performed = performed.map_err(|held_back| {
                    Fatal::storage(format!("run {run}: {}; the action is left to the run's next owner", held_back.0))
                })?;
                let took_us = self.env.clock.monotonic_us().saturating_sub(started_us);
                self.store.observe_action(&action.kind.to_string(), took_us);
                record_outcome(&span, &performed, took_us);
                self.log_performed(cx, &action, &performed, took_us);
                let performed = match performed {
                    crate::broker::Performed::Done(result) => {
                        crate::broker::Performed::Done(self.store.fitted_result(action.op, result))
                    }
                    in_doubt => in_doubt,
                };
                Ok(Some(Event::Performed(performed)))
            }
            Command::LookUp(action) => {
                let grant = grant_of(cx, action.grant.as_str())?;
                let net = &cx.tool.config.net;
                Ok(Some(match perform::sql_write_happened(self.env, grant, net, run, action.op).await {
                    Ok(committed) => Event::LookedUp { committed },
                    Err(problem) => Event::LookUpFailed(crate::broker::scrub(&problem, &cx.secrets)),
                }))
            }
            Command::Wait { op, action, reason, halted } => {
                let waiting = Waiting { op, action: action.as_ref(), reason: &reason, halted, arguments: cx.inputs };
                self.store.wait(cx.tool, run, waiting).await?;
                Ok(None)
            }
            Command::Notify => {
                self.store.notify(cx.tool, run);
                Ok(None)
            }
            Command::Settle(end) => {
                self.store.settle(cx.tool, run, &end).await?;
                Ok(Some(Event::Settled))
            }
            Command::Log { op, line } => {
                self.store.log(name, run, Some(op), &line).await;
                Ok(None)
            }
        }
    }

    /// Appends one journal record durably, with the probe point and log line it carries.
    /// How many sends of the run's action in doubt crashes interrupted (its journal's
    /// `Resumed` records since the action began).
    async fn sends_interrupted(&self, tool: &Tool, run: &str) -> Result<u64, Fatal> {
        Ok(u64::from(self.journal_of(tool, run).await?.sends_interrupted))
    }

    async fn journal(&self, cx: &Context<'_>, record: &JournalRecord) -> Result<(), Fatal> {
        let (name, run) = (&cx.tool.config.name, cx.run);
        match record {
            JournalRecord::Print { text, .. } => {
                let text = self.store.log(name, run, None, &format!("print: {text}")).await;
                let level = crate::run::notice::INFO;
                self.listeners.tell(run, Notice::Log { level, text }).await;
            }
            JournalRecord::End(end) if end.outcome == RunOutcome::Failed(FailureKind::Internal) => {
                let message = end.message.as_deref().unwrap_or("");
                self.store.log(name, run, None, &format!("internal error: {message}")).await;
            }
            _ => {}
        }
        self.store.append(cx.tool, run, record).await?;
        match record {
            JournalRecord::Begin { .. } => self.env.reached(Point::ActionBegun, run),
            JournalRecord::Resumed { .. } => self.env.reached(Point::Resumed, run),
            JournalRecord::End(_) => self.env.reached(Point::RunRecorded, run),
            _ => {}
        }
        // The caller hears of an action once its record is durable.
        let notice = match record {
            JournalRecord::Begin { op, action, .. } => {
                Some(Notice::ActionBegun { op: *op, what: action_summary(action) })
            }
            JournalRecord::Done { op, .. } => Some(Notice::ActionDone { op: *op }),
            _ => None,
        };
        if let Some(notice) = notice {
            self.listeners.tell(run, notice).await;
        }
        Ok(())
    }

    /// One execution of the program against the journal so far, in the sandbox. Only ever
    /// from Ready: no action is in doubt, so the deadline may refuse the next new one.
    async fn execute_once(&self, cx: &Context<'_>) -> Result<Event, Fatal> {
        let (tool, run) = (cx.tool, cx.run);
        let journal = self.journal_of(tool, run).await?;
        assert!(journal.begun_op().is_none(), "run {run}: executed with an action in doubt");
        let job = self.job(cx, &journal)?;
        let executed = self.env.sandbox.execute(job).await;
        let at_ms = self.env.clock.now_ms();
        let Executed { execution, usage } = match executed {
            Ok(executed) => executed,
            // Not the program's doing: the server stops, and the run resumes at the next start.
            Err(stopped @ Stopped::Unavailable(_)) => return Err(Fatal::unavailable(format!("run {run}: {stopped}"))),
            Err(stopped) => return self.stopped_execution(cx, &journal, &stopped, at_ms),
        };
        if !execution.progress.is_empty() {
            self.listeners.tell(run, Notice::Progress(execution.progress.clone())).await;
        }
        let prints = (execution.prints.iter().enumerate().skip(journal.prints as usize))
            .map(|(index, text)| (index as u64, scrub(text, &cx.secrets)))
            .collect();
        let next = match execution.outcome {
            // The execution may have computed past the deadline before asking: the deadline
            // is checked again when the action would begin.
            Outcome::Suspended(action) if self.deadline_passed(cx) => {
                let deadline = crate::store::ledger::duration_text(tool.config.deadline_ms.unwrap_or_default());
                let message = crate::broker::deadline_refusal(&deadline, action.op);
                let failure = crate::program::Failure { kind: FailureKind::Deadline, message };
                let mut end = end_record(&Outcome::Failed(failure), at_ms);
                end.usage = usage_json(&usage);
                Next::End(self.store.fitted_end(end))
            }
            // A cancellation is taken between actions: at the next one to begin, or the next
            // round to ask.
            Outcome::Suspended(_) | Outcome::Asking(_) if self.store.cancel_requested(run) => {
                let message = "its client cancelled the run; it ended between actions".to_string();
                let failure = crate::program::Failure { kind: FailureKind::Cancelled, message };
                let mut end = end_record(&Outcome::Failed(failure), at_ms);
                end.usage = usage_json(&usage);
                Next::End(self.store.fitted_end(end))
            }
            Outcome::Suspended(action) => Next::Act(action),
            Outcome::Asking(requests) => self.next_round(cx, &journal, requests, at_ms, &usage),
            outcome => {
                let mut end = end_record(&outcome, at_ms);
                end.usage = usage_json(&usage);
                Next::End(self.store.fitted_end(end))
            }
        };
        Ok(Event::Executed { prints, next })
    }
    /// The sandbox's job for one execution: the program, the run's inputs, and the broker
    /// seeded with the journal (actions done, input rounds, the deadline).
    fn job(&self, cx: &Context<'_>, journal: &Journal) -> Result<Job, Fatal> {
        let (tool, run) = (cx.tool, cx.run);
        let mut broker = Broker::new(run, &tool.config.grants, completed_actions(journal, run)?);
        broker.asked = (journal.rounds.iter())
            .map(|round| AskedRound {
                requests: round.requests.clone(),
                answers: round.answered.as_ref().map(|(answers, _)| answers.clone()),
            })
            .collect();
        if let Some(deadline) = tool.config.deadline_ms {
            broker.deadline_passed = self.deadline_passed(cx);
            broker.deadline_text = crate::store::ledger::duration_text(deadline);
        }
        Ok(Job {
            path: tool.program.path.clone(),
            source: tool.program.source.to_string(),
            entry: tool.program.entry.clone(),
            grant_names: tool.config.grants.keys().cloned().collect(),
            capabilities: cx.capabilities.clone(),
            inputs: cx.inputs.clone(),
            max_steps: tool.config.max_steps,
            time_ms: tool.config.execution_ms,
            broker: broker.seed(),
            load_only: false,
            compiled: Some(tool.program.clone()),
        })
    }

    /// A stopped execution reported nothing: it ends the run as `budget`, with the usage the
    /// journal shows.
    fn stopped_execution(
        &self,
        cx: &Context<'_>,
        journal: &Journal,
        stopped: &Stopped,
        at_ms: u64,
    ) -> Result<Event, Fatal> {
        let usage = Broker::new(cx.run, &cx.tool.config.grants, completed_actions(journal, cx.run)?).journaled_usage();
        let end = EndRecord {
            outcome: RunOutcome::Failed(FailureKind::Budget),
            result: None,
            message: Some(stopped.to_string()),
            usage: usage_json(&usage),
            at_ms,
        };
        Ok(Event::Executed { prints: vec![], next: Next::End(self.store.fitted_end(end)) })
    }
}

impl<S: RunStore> Driver<'_, S> {
    /// Every secret a run of `tool` can attach: its grants', and the model's API key when it
    /// has a `model` grant.
    fn secrets_of(&self, tool: &Tool) -> Vec<String> {
        let mut secrets = perform::secret_values(self.env, &tool.config.grants);
        let calls_model = tool
            .config
            .grants
            .values()
            .any(|g| matches!(g, Grant::Capability(g) if g.cap == crate::broker::Kind::Model));
        if let (true, Some(model)) = (calls_model, &self.catalog.manifest.model) {
            secrets.extend(self.env.process.var(&model.api_key_env).filter(|key| !key.is_empty()));
        }
        secrets
    }

    /// What a program's `ask` leads to: the round, with the keys whose kinds the client
    /// declared (none: answered with nothing at once), or the run's end when too many runs
    /// already wait for input.
    fn next_round(
        &self,
        cx: &Context<'_>,
        journal: &Journal,
        requests: Value,
        at_ms: u64,
        usage: &std::collections::BTreeMap<String, crate::broker::Usage>,
    ) -> Next {
        let sent: Vec<String> = (requests.as_object().into_iter().flatten())
            .filter(|(_, request)| {
                let method = request.get("method").and_then(Value::as_str).unwrap_or_default();
                crate::program::ask::capability_of(method).is_some_and(|kind| cx.client_kinds.iter().any(|k| k == kind))
            })
            .map(|(key, _)| key.clone())
            .collect();
        let principal = self.store.principal(cx.run);
        if !sent.is_empty() && self.inputs.is_full(&cx.tool.config.name, principal.as_deref()) {
            let message = format!(
                "too many runs wait for their clients' input (at most {} on the server, {} of one tool for one \
                 caller); this run cannot ask for more",
                crate::limits::AWAITING_RUNS_MAX,
                crate::limits::AWAITING_RUNS_PER_CALLER_MAX
            );
            let failure = crate::program::Failure { kind: FailureKind::Capability, message };
            let mut end = end_record(&Outcome::Failed(failure), at_ms);
            end.usage = usage_json(usage);
            return Next::End(self.store.fitted_end(end));
        }
        Next::Ask { round: journal.rounds.len() as u64, requests, sent, at_ms }
    }

    /// Whether the run's deadline has passed: the monotonic clock since this process took the
    /// run up, plus what had elapsed before.
    fn deadline_passed(&self, cx: &Context<'_>) -> bool {
        let Some(deadline) = cx.tool.config.deadline_ms else { return false };
        self.active_ms(cx) > deadline
    }

    /// How long a keyed write whose answer was lost may be sent again: what is left of the
    /// run's deadline, or `KEYED_RESEND_FOR_MS_MAX` for a tool without one.
    fn resend_for_ms(&self, cx: &Context<'_>) -> u64 {
        let left = cx.tool.config.deadline_ms.map(|deadline| deadline.saturating_sub(self.active_ms(cx)));
        left.unwrap_or(crate::limits::KEYED_RESEND_FOR_MS_MAX)
    }

    /// The run's time toward its deadline so far.
    fn active_ms(&self, cx: &Context<'_>) -> u64 {
        let running = self.env.clock.monotonic_ms().saturating_sub(cx.started_monotonic_ms);
        cx.elapsed_before_ms.saturating_add(running)
    }
}

fn grant_of<'a>(cx: &Context<'a>, name: &str) -> Result<&'a CapabilityGrant, Fatal> {
    match cx.tool.config.grants.get(name) {
        Some(Grant::Capability(grant)) => Ok(grant),
        _ => Err(Fatal::bug(format!("run {}: an action names `{name}`, which is not a capability grant", cx.run))),
    }
}

/// The journal's completed actions, each read back strictly: an action that does not parse
/// is damage, never skipped (skipping would shift every later action's number).
fn completed_actions(journal: &Journal, run: &str) -> Result<Vec<Completed>, Fatal> {
    journal
        .completed()
        .into_iter()
        .enumerate()
        .map(|(op, (action, result, happened))| match serde_json::from_value(action) {
            Ok(action) => Ok(Completed { action, result, happened }),
            Err(e) => Err(Fatal::storage(format!("run {run}: the begin record of action {op} does not parse: {e}"))),
        })
        .collect()
}

fn end_record(outcome: &Outcome, at_ms: u64) -> EndRecord {
    match outcome {
        Outcome::Suspended(_) | Outcome::Asking(_) => unreachable!("a suspended execution has no end"),
        Outcome::Done(result) => EndRecord {
            outcome: RunOutcome::Done,
            result: Some(result.clone()),
            message: None,
            usage: json!({}),
            at_ms,
        },
        Outcome::Failed(failure) => EndRecord {
            outcome: RunOutcome::Failed(failure.kind),
            result: None,
            message: Some(failure.message.clone()),
            usage: json!({}),
            at_ms,
        },
    }
}

/// An action as a caller's progress names it: its method and kind (never its URL, headers
/// or body, which may carry what the caller should not see).
fn action_summary(action: &Value) -> String {
    let field = |name: &str| action[name].as_str().unwrap_or("?").to_string();
    format!("{} {}", field("method"), field("kind"))
}

/// Whether a command journals an action's begin record.
fn begins_an_action(command: &Command) -> bool {
    matches!(command, Command::Journal(JournalRecord::Begin { .. }))
}

/// An action's begin or done record with the time it is journaled (the pure machine cannot
/// read the clock): what `warden runs show` tells an action's duration from.
fn stamped(record: JournalRecord, now_ms: u64) -> JournalRecord {
    match record {
        JournalRecord::Begin { op, action, at_ms: None } => JournalRecord::Begin { op, action, at_ms: Some(now_ms) },
        JournalRecord::Done { op, result, at_ms: None } => JournalRecord::Done { op, result, at_ms: Some(now_ms) },
        record => record,
    }
}

/// An action's span: its number, kind, method and the host it goes to (never its path or
/// query, which may carry what a program was given).
/// The host an action is sent to (none for a model call: the provider is the manifest's).
fn host_of(action: &Action) -> &str {
    match action.kind {
        crate::broker::Kind::Model => "",
        _ => action.target.split_once("://").map_or("", |(_, rest)| rest.split(['/', '?']).next().unwrap_or("")),
    }
}

/// An action's span: a database statement is a CLIENT span of its own (`db.system` names the
/// database, as OpenTelemetry's conventions do); an HTTP action or a model call is internal,
/// with a CLIENT span for each request it sends below it (`io::trace::request_span`: a
/// refund reads its intent's currency, then posts).
fn action_span(action: &Action) -> tracing::Span {
    let host = host_of(action);
    let (kind, db_system, gen_ai_system) = match action.kind {
        crate::broker::Kind::Sqlite => ("client", Some("sqlite"), None),
        crate::broker::Kind::Postgres => ("client", Some("postgresql"), None),
        crate::broker::Kind::Model => ("internal", None, Some("anthropic")),
        _ => ("internal", None, None),
    };
    tracing::info_span!(target: "warden", "action", otel.kind = kind, otel.status_code = tracing::field::Empty,
        otel.status_message = tracing::field::Empty, db.system = db_system, gen_ai.system = gen_ai_system,
        op = action.op, kind = %action.kind, method = action.method.name(), host, status = tracing::field::Empty,
        in_doubt = tracing::field::Empty, duration_ms = tracing::field::Empty, output_tokens = tracing::field::Empty)
}

/// What an action's span says of its outcome: the HTTP status, in doubt or not, its duration,
/// a model call's output tokens.
fn record_outcome(span: &tracing::Span, performed: &crate::broker::Performed, took_us: u64) {
    span.record("duration_ms", took_us / 1000);
    match performed {
        crate::broker::Performed::Done(result) => {
            span.record("in_doubt", false);
            if let Some(status) = result.get("status").and_then(Value::as_u64) {
                span.record("status", status);
                if status >= 400 {
                    span.record("otel.status_code", "ERROR");
                }
            }
            if result.get("error").is_some() {
                span.record("otel.status_code", "ERROR");
            }
            if let Some(tokens) = result.pointer("/usage/output_tokens").and_then(Value::as_u64) {
                span.record("output_tokens", tokens);
            }
        }
        crate::broker::Performed::InDoubt(_) => {
            span.record("in_doubt", true);
            span.record("otel.status_code", "ERROR");
            span.record("otel.status_message", "in doubt: the action may have happened; it waits for an operator");
        }
    }
}
