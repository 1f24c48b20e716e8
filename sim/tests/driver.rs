//! The run driver over a second store. `Driver<S: RunStore>` is the server's own driver; here
//! it drives runs kept in memory (`MemoryStore`, no file anywhere) on the simulated `Env`: its
//! sandbox runs the programs, its services take the actions. A crash is a store that stops
//! taking records after the k-th; the run is then taken up again from what the store kept,
//! for every k. What the file store's tests show through the whole server holds for a store
//! that is not files: an idempotent action takes effect once, a plain POST in doubt waits for
//! a person and is never sent twice, every run settles once.

use std::cell::{Cell, RefCell};
use std::path::Path;
use std::rc::Rc;

use serde_json::{json, Map, Value};
use warden::base::sync::MutexGuard;
use warden::catalog::{Catalog, Tool};
use warden::env::{Env, LocalBoxFuture};
use warden::run::driver::{Driver, Entry};
use warden::run::input::Inputs;
use warden::run::notice::Listeners;
use warden::run::store::{Fatal, RunEnd, RunStore, Waiting};
use warden::store::journal::{EndRecord, Journal, JournalRecord, RunOutcome};
use warden::store::ledger::{Event, LedgerError};
use warden::store::record;
use warden_sim::env::world::World;

const MANIFEST: &str = r#"{
  "server": { "name": "memory", "journals": "journals" },
  "tools": [
    { "name": "refund_order", "program": "refund.star", "net": { "timeout_ms": 1000, "connect_timeout_ms": 1000 },
      "grants": { "pay": { "cap": "payments.stripe.refund", "each": { "amount": "50.00", "currency": "USD" },
        "needs": { "get": { "cap": "net.http.get", "only": ["https://payments.sim/v1/payment_intents/*"] },
                   "post": { "cap": "net.http.post", "only": ["https://payments.sim/v1/refunds"], "idempotency_key": true },
                   "key": { "env": "STRIPE_SECRET_KEY" } } } } },
    { "name": "add_note", "program": "note.star", "net": { "timeout_ms": 1000, "connect_timeout_ms": 1000 },
      "grants": { "notes": { "cap": "net.http.post", "only": ["https://notes.sim/notes"] } } }
  ]
}"#;

const REFUND: &str = r#"
def main(pay, order: str, amount: money) -> dict:
    """Refund part of an order.

    Args:
        order: The payment intent.
        amount: How much to refund.
    """
    intent = pay.get("https://payments.sim/v1/payment_intents/" + order)
    refund = pay.refund(order, amount)
    return {"refund": refund["json"]["id"], "status": intent["status"]}
"#;

const NOTE: &str = r#"
def main(notes, text: str) -> int:
    """Save a note.

    Args:
        text: The note.
    """
    return notes.post("https://notes.sim/notes", json = {"text": text})["status"]
"#;

/// A run's records in memory, as encoded lines read back by the journal's strict reader.
#[derive(Default)]
struct MemoryStore {
    lines: RefCell<Vec<u8>>,
    /// Records taken before the store "crashes" (refuses every later one); none: no crash.
    records_left: Cell<Option<usize>>,
    waiting: RefCell<Vec<(u64, String)>>,
    notified: Cell<u32>,
    settled: RefCell<Vec<EndRecord>>,
    log: RefCell<Vec<String>>,
    /// The server stops (drains) once the store holds this many records; none: it never does.
    drain_at: Cell<Option<usize>>,
}

impl MemoryStore {
    fn keep(&self, record: &JournalRecord) -> Result<(), Fatal> {
        match self.records_left.get() {
            Some(0) => return Err(Fatal::storage("the memory store crashed".into())),
            Some(left) => self.records_left.set(Some(left - 1)),
            None => {}
        }
        self.lines.borrow_mut().extend(record::encode(record));
        Ok(())
    }

    fn records(&self) -> usize {
        self.lines.borrow().iter().filter(|&&b| b == b'\n').count()
    }
}

impl RunStore for MemoryStore {
    fn reserve<'a>(&'a self, _held: MutexGuard<'a>, _event: Event) -> LocalBoxFuture<'a, Result<(), LedgerError>> {
        Box::pin(async { Ok(()) })
    }

    fn release<'a>(&'a self, _tool: &'a str, _run: &'a str) -> LocalBoxFuture<'a, Result<(), Fatal>> {
        Box::pin(async { Ok(()) })
    }

    fn start<'a>(
        &'a self,
        tool: &'a Tool,
        run: &'a str,
        inputs: &'a Map<String, Value>,
    ) -> LocalBoxFuture<'a, Result<(), Fatal>> {
        let header = JournalRecord::Header {
            run: run.to_string(),
            tool: tool.config.name.clone(),
            binding: warden::run::runs::binding(tool),
            inputs: warden::base::json::sha256_hex(serde_json::to_string(inputs).unwrap().as_bytes()),
            at_ms: 0,
            principal: None,
        };
        Box::pin(async move { self.keep(&header) })
    }

    fn journal<'a>(&'a self, _tool: &'a Tool, _run: &'a str) -> LocalBoxFuture<'a, Result<Journal, Fatal>> {
        Box::pin(async { Journal::parse(Path::new("memory"), &self.lines.borrow()).map_err(Fatal::storage) })
    }

    fn append<'a>(
        &'a self,
        _tool: &'a Tool,
        _run: &'a str,
        record: &'a JournalRecord,
    ) -> LocalBoxFuture<'a, Result<(), Fatal>> {
        Box::pin(async move { self.keep(record) })
    }

    fn wait<'a>(
        &'a self,
        _tool: &'a Tool,
        _run: &'a str,
        waiting: Waiting<'a>,
    ) -> LocalBoxFuture<'a, Result<(), Fatal>> {
        self.waiting.borrow_mut().push((waiting.op, waiting.reason.to_string()));
        Box::pin(async { Ok(()) })
    }

    fn settle<'a>(
        &'a self,
        _tool: &'a Tool,
        _run: &'a str,
        end: &'a EndRecord,
    ) -> LocalBoxFuture<'a, Result<(), Fatal>> {
        self.settled.borrow_mut().push(end.clone());
        Box::pin(async { Ok(()) })
    }

    type Running<'a> = ();

    fn running(&self, _run: &str) {}

    fn principal(&self, _run: &str) -> Option<String> {
        None
    }

    fn draining(&self) -> bool {
        self.drain_at.get().is_some_and(|at| self.records() >= at)
    }

    fn log<'a>(
        &'a self,
        _tool: &'a str,
        _run: &'a str,
        _action: Option<u64>,
        line: &'a str,
    ) -> LocalBoxFuture<'a, String> {
        self.log.borrow_mut().push(line.to_string());
        Box::pin(async move { line.to_string() })
    }

    fn notify(&self, _tool: &Tool, _run: &str) {
        self.notified.set(self.notified.get() + 1);
    }

    fn fitted_result(&self, _op: u64, result: Value) -> Value {
        result
    }

    fn fitted_end(&self, end: EndRecord) -> EndRecord {
        end
    }
}

fn world() -> World {
    let world = World::new(7);
    world.install("manifest.json", MANIFEST.as_bytes());
    world.install("refund.star", REFUND.as_bytes());
    world.install("note.star", NOTE.as_bytes());
    world.services.variables.borrow_mut().insert("STRIPE_SECRET_KEY".into(), "sk_test_MEMORY_1234".into());
    world
}

/// Drives one run of `tool` over `store` on `world`'s Env: started fresh, then (when the store
/// crashed) taken up again after each crash, as a restart would, until it ends or waits.
fn drive(world: &World, store: &Rc<MemoryStore>, tool: &str, arguments: Value) -> Vec<Result<RunEnd, Fatal>> {
    let (store, tool) = (Rc::clone(store), tool.to_string());
    let outcomes: Rc<RefCell<Vec<Result<RunEnd, Fatal>>>> = Rc::default();
    let kept = Rc::clone(&outcomes);
    world
        .start_command(move |env: Env| {
            Box::pin(async move {
                let manifest = warden::catalog::read_manifest(&env, &World::path("manifest.json")).await?;
                let catalog = Catalog::load(&env, manifest).await?;
                let tool = catalog.tool(&tool).expect("the tool is in the manifest");
                let inputs = arguments.as_object().expect("arguments are an object").clone();
                let (listeners, waiting_inputs) = (Listeners::default(), Inputs::default());
                let driver = Driver {
                    store: store.as_ref(),
                    env: &env,
                    catalog: &catalog,
                    listeners: &listeners,
                    inputs: &waiting_inputs,
                };
                store.start(tool, "ab0001", &inputs).await.map_err(|fatal| fatal.to_string())?;
                let mut entry = Entry::Fresh;
                for _ in 0..4 {
                    let outcome = driver.execute_to_end(tool, "ab0001", &inputs, entry, &[]).await;
                    let stopped = matches!(outcome, Err(_) | Ok(RunEnd::Drained));
                    kept.borrow_mut().push(outcome);
                    if !stopped {
                        break;
                    }
                    store.records_left.set(None);
                    store.drain_at.set(None);
                    entry = Entry::Resumed;
                }
                Ok(String::new())
            })
        })
        .expect("the driver runs to its end");
    outcomes.take()
}

#[test]
fn an_idempotent_refund_over_the_memory_store_takes_effect_once_whatever_record_it_crashes_after() {
    let arguments = json!({"order": "pi_1001", "amount": {"amount": "20.00", "currency": "USD"}});
    let whole = {
        let world = world();
        let store = Rc::new(MemoryStore::default());
        let outcomes = drive(&world, &store, "refund_order", arguments.clone());
        assert!(matches!(outcomes.as_slice(), [Ok(RunEnd::Ended(_))]), "{outcomes:?}");
        assert_eq!(world.services.refunded_minor(), 2000);
        store.records()
    };
    assert!(whole >= 6, "header, two actions begun and done, the end: {whole} records");
    for crash_after in 1..whole {
        let world = world();
        let store = Rc::new(MemoryStore { records_left: Cell::new(Some(crash_after)), ..Default::default() });
        let outcomes = drive(&world, &store, "refund_order", arguments.clone());
        let Some(Ok(RunEnd::Ended(end))) = outcomes.last() else { panic!("crash after {crash_after}: {outcomes:?}") };
        assert_eq!(end.outcome, RunOutcome::Done, "crash after {crash_after}: {end:?}");
        assert_eq!(world.services.refunded_minor(), 2000, "crash after {crash_after}: refunded once");
        assert_eq!(store.settled.borrow().len(), 1, "crash after {crash_after}: settled once");
        assert!(store.waiting.borrow().is_empty(), "crash after {crash_after}: nothing in doubt");
    }
}

#[test]
fn a_plain_post_in_doubt_over_the_memory_store_waits_for_a_person_and_is_not_sent_again() {
    let world = world();
    // The header, then the action's begin: the crash comes before its done record.
    let store = Rc::new(MemoryStore { records_left: Cell::new(Some(2)), ..Default::default() });
    let outcomes = drive(&world, &store, "add_note", json!({"text": "hello"}));
    assert!(matches!(outcomes.last(), Some(Ok(RunEnd::Stopped { op: 0 }))), "{outcomes:?}");
    let notes = world.services.effects.borrow().iter().filter(|effect| effect.kind == "note").count();
    assert_eq!(notes, 1, "sent once, before the crash; never again");
    assert_eq!(store.waiting.borrow().len(), 1, "one waiting record: {:?}", store.waiting.borrow());
    assert_eq!(store.notified.get(), 1, "the operator is told once");
    assert!(store.settled.borrow().is_empty(), "a run in doubt is not settled");
}

/// A stopping server (SIGTERM) stops a run between actions: whenever the drain comes, the run
/// begins no action after it, leaves nothing in doubt, and taken up at the next start it ends
/// with the refund made once.
#[test]
fn a_drained_run_stops_between_actions_and_its_resumption_refunds_once() {
    let arguments = json!({"order": "pi_1001", "amount": {"amount": "20.00", "currency": "USD"}});
    let mut drained = 0;
    for drain_at in 1..6 {
        let world = world();
        let store = Rc::new(MemoryStore { drain_at: Cell::new(Some(drain_at)), ..Default::default() });
        let outcomes = drive(&world, &store, "refund_order", arguments.clone());
        if matches!(outcomes.first(), Some(Ok(RunEnd::Drained))) {
            drained += 1;
            let log = store.log.borrow();
            assert!(log.iter().any(|line| line.contains("stopped between actions")), "drain at {drain_at}: {log:?}");
        }
        let Some(Ok(RunEnd::Ended(end))) = outcomes.last() else { panic!("drain at {drain_at}: {outcomes:?}") };
        assert_eq!(end.outcome, RunOutcome::Done, "drain at {drain_at}: {end:?}");
        assert_eq!(world.services.refunded_minor(), 2000, "drain at {drain_at}: refunded once");
        assert_eq!(store.settled.borrow().len(), 1, "drain at {drain_at}: settled once");
        assert!(store.waiting.borrow().is_empty(), "drain at {drain_at}: nothing in doubt");
    }
    assert!(drained >= 2, "a drain before each of the two actions stops the run there ({drained})");
}
