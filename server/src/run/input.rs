//! Runs waiting for their client's input (`ask`, multi round-trip requests of 2026-07-28):
//! the registry of awaited rounds, the `requestState` that lets a client's retry take one up,
//! and the expiry of rounds nobody answers.
//!
//! `requestState` is attacker-controlled. It is sealed with HMAC-SHA256 under a key the
//! server keeps in its journals (`request-state.key`, made at first start, never output), and
//! binds the run, the round, the tool, the principal, an expiry and a digest of the request
//! (tool name and arguments). A state is used once: the registry holds a round until a retry
//! or the expiry takes it, and the answers are journaled before anything depends on them, so
//! after a restart the journal says the round was answered. A tampered, expired, replayed or
//! foreign state is refused with -32602 and changes nothing.

use crate::limits::{AWAITING_RUNS_MAX, AWAITING_RUNS_PER_CALLER_MAX, INPUT_WAIT_MS, REQUEST_STATE_BYTES_MAX};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::hmac;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::env::Env;
use crate::run::runs::Runs;

/// The key's file under the journals.
pub const KEY_FILE: &str = "request-state.key";
const KEY_BYTES: usize = 32;

/// One awaited round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Awaited {
    pub tool: String,
    /// The principal the run is for (none over stdio or with a static token).
    pub principal: Option<String>,
    pub round: u64,
    /// By the wall clock, as its states say (they outlive a restart).
    pub expires_at_ms: u64,
    /// By this process's monotonic clock: what the wall clock says is left, never more than
    /// `INPUT_WAIT_MS`, so a wall clock stepped back cannot keep a round (and its
    /// reservation) waiting longer.
    pub ends_at_monotonic_ms: u64,
    /// The run's time toward its deadline when it asked, as this process measured it: the
    /// run continues from it, so a wall-clock step while it ran or waited is not counted.
    pub active_ms: u64,
}

/// The runs waiting for input in this process, and the key their states are sealed with.
#[derive(Default)]
pub struct Inputs {
    awaiting: RefCell<BTreeMap<String, Awaited>>,
    changed: crate::base::sync::Notify,
    key: RefCell<Option<hmac::Key>>,
}

/// What a `requestState` binds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claims {
    pub run: String,
    pub round: u64,
    pub tool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    pub expires_at_ms: u64,
    /// SHA-256 of the request: the tool's name and the arguments as the client sent them.
    pub request: String,
}

impl Inputs {
    /// `round`: its number and its expiry by the wall clock; `active_ms`: the run's time toward
    /// its deadline when it asked.
    pub fn register(&self, env: &Env, run: &str, who: (&str, Option<String>), round: (u64, u64), active_ms: u64) {
        let (round, expires_at_ms) = round;
        let left = expires_at_ms.saturating_sub(env.clock.now_ms()).min(INPUT_WAIT_MS);
        let ends_at_monotonic_ms = env.clock.monotonic_ms().saturating_add(left);
        let (tool, principal) = who;
        let awaited =
            Awaited { tool: tool.to_string(), principal, round, expires_at_ms, ends_at_monotonic_ms, active_ms };
        self.awaiting.borrow_mut().insert(run.to_string(), awaited);
        self.changed.notify_all();
    }

    /// Whether another run of `tool` for `principal` may wait: within the server's limit and
    /// the caller's.
    pub fn is_full(&self, tool: &str, principal: Option<&str>) -> bool {
        let awaiting = self.awaiting.borrow();
        let callers = awaiting.values().filter(|a| a.tool == tool && a.principal.as_deref() == principal).count();
        awaiting.len() >= AWAITING_RUNS_MAX || callers >= AWAITING_RUNS_PER_CALLER_MAX
    }

    /// Whether `run` awaits `round` now.
    pub fn awaits(&self, run: &str, round: u64) -> bool {
        self.awaiting.borrow().get(run).is_some_and(|awaited| awaited.round == round)
    }

    /// The round `run` awaits, if it awaits one.
    pub fn awaited(&self, run: &str) -> Option<Awaited> {
        self.awaiting.borrow().get(run).cloned()
    }

    /// Takes the awaited round of `run` if it is `round`: only one retry (or the expiry) can.
    pub fn take(&self, run: &str, round: u64) -> Option<Awaited> {
        let taken = {
            let mut awaiting = self.awaiting.borrow_mut();
            match awaiting.get(run) {
                Some(awaited) if awaited.round == round => awaiting.remove(run),
                _ => None,
            }
        };
        if taken.is_some() {
            self.changed.notify_all();
        }
        taken
    }

    /// Completes once `run` no longer awaits `round`: a retry took it (another call's, with
    /// its `requestState`), or it expired. A session call asking its client waits on this too,
    /// so it is not left waiting for answers its run can no longer take.
    pub async fn round_ended(&self, run: &str, round: u64) {
        loop {
            let changed = self.changed.changed();
            if !self.awaits(run, round) {
                return;
            }
            changed.await;
        }
    }

    /// How many runs wait for input.
    pub fn count(&self) -> usize {
        self.awaiting.borrow().len()
    }

    pub fn set_key(&self, key: hmac::Key) {
        *self.key.borrow_mut() = Some(key);
    }

    /// The `requestState` for `claims`: the claims as base64url JSON, a dot, their HMAC.
    pub fn seal(&self, claims: &Claims) -> String {
        let key = self.key.borrow();
        let key = key.as_ref().expect("the request-state key is loaded before any call");
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).expect("claims serialise"));
        let tag = hmac::sign(key, payload.as_bytes());
        format!("{payload}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref()))
    }

    /// The claims of a `requestState` whose seal holds (checked in constant time before
    /// anything in it is read), or why not.
    pub fn open(&self, state: &str) -> Result<Claims, String> {
        const INVALID: &str = "requestState is not one this server issued (it fails its integrity check)";
        if state.len() > REQUEST_STATE_BYTES_MAX {
            return Err(format!("requestState is over {REQUEST_STATE_BYTES_MAX} bytes"));
        }
        let (payload, tag) = state.split_once('.').ok_or(INVALID)?;
        let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| INVALID)?;
        let key = self.key.borrow();
        let key = key.as_ref().expect("the request-state key is loaded before any call");
        hmac::verify(key, payload.as_bytes(), &tag).map_err(|_| INVALID)?;
        let bytes = URL_SAFE_NO_PAD.decode(payload).map_err(|_| INVALID)?;
        serde_json::from_slice(&bytes).map_err(|_| INVALID.to_string())
    }

    /// The earliest end among the awaited rounds (monotonic).
    fn earliest(&self) -> Option<u64> {
        self.awaiting.borrow().values().map(|awaited| awaited.ends_at_monotonic_ms).min()
    }

    /// Takes every round ended at `now_ms` (monotonic).
    fn take_expired(&self, now_ms: u64) -> Vec<(String, Awaited)> {
        let mut awaiting = self.awaiting.borrow_mut();
        let due: Vec<String> =
            awaiting.iter().filter(|(_, a)| a.ends_at_monotonic_ms <= now_ms).map(|(run, _)| run.clone()).collect();
        let taken: Vec<_> =
            due.into_iter().filter_map(|run| awaiting.remove(&run).map(|awaited| (run, awaited))).collect();
        drop(awaiting);
        if !taken.is_empty() {
            self.changed.notify_all();
        }
        taken
    }
}

/// Whether a round that expires at `expires_at_ms` is over at `now_ms`: its deadline is the
/// first moment it is, as for the expiry, which ends the round when its time has come.
pub fn round_is_over(now_ms: u64, expires_at_ms: u64) -> bool {
    now_ms >= expires_at_ms
}

/// SHA-256 of a request as a `requestState` binds it.
pub fn request_digest(tool: &str, arguments: &Map<String, Value>) -> String {
    crate::base::json::sha256_hex(crate::base::json::canonical_json(&json!([tool, arguments])).as_bytes())
}

/// The key `requestState`s are sealed with: read from the journals, or made there (durably)
/// at the first start. One that is damaged (a crash while it was first written) is replaced:
/// that only makes the states issued before unusable, which a restart may anyway.
pub async fn load_key(env: &Env, journals: &Path) -> Result<hmac::Key, String> {
    let path = journals.join(KEY_FILE);
    let read =
        crate::store::files::read_if_present(env, &path).await.map_err(|e| format!("{}: {e}", path.display()))?;
    let read_something = read.is_some();
    let held = read.and_then(|bytes| {
        let text = String::from_utf8(bytes).ok()?;
        let key = decode_hex(text.trim())?;
        (key.len() == KEY_BYTES).then_some(key)
    });
    let key = match held {
        Some(key) => key,
        None => {
            if read_something {
                env.log(&format!(
                    "{}: the request-state key was damaged; a new one is made (states issued before no longer open)",
                    path.display()
                ));
            }
            let mut key = vec![0u8; KEY_BYTES];
            env.rng.fill(&mut key);
            let text = format!("{}\n", crate::base::json::hex(&key));
            crate::store::files::replace_durably(env, &path, text.into_bytes())
                .await
                .map_err(|e| format!("{}: writing the request-state key failed: {e}", path.display()))?;
            key
        }
    };
    Ok(hmac::Key::new(hmac::HMAC_SHA256, &key))
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

/// Ends every run whose round expires, as its time comes: one task for the server.
pub fn spawn_expiry(runs: &Rc<Runs>) {
    let runs = Rc::clone(runs);
    let env = runs.env.clone();
    env.spawn.spawn(Box::pin(async move {
        loop {
            let changed = runs.inputs.changed.changed();
            match runs.inputs.earliest() {
                None => changed.await,
                Some(at) => {
                    let wait = at.saturating_sub(runs.env.clock.monotonic_ms());
                    if wait > 0 {
                        let sleep = runs.env.clock.sleep(wait);
                        crate::base::sync::select(sleep, Box::pin(changed)).await;
                        continue;
                    }
                }
            }
            for (run, awaited) in runs.inputs.take_expired(runs.env.clock.monotonic_ms()) {
                if let Err(fatal) = expire(&runs, &run, &awaited).await {
                    runs.stop(&fatal);
                    return;
                }
            }
        }
    }));
}

async fn expire(runs: &Runs, run: &str, awaited: &Awaited) -> Result<(), crate::run::store::Fatal> {
    let Some(tool) = runs.catalog.tool(&awaited.tool) else { return Ok(()) };
    let inputs =
        runs.read_inputs(&awaited.tool, run).await.map_err(crate::run::store::Fatal::storage)?.unwrap_or_default();
    runs.log_run(&awaited.tool, run, "its client did not answer its request for input in time; it ends").await;
    runs.execute_to_end(tool, run, &inputs, crate::run::driver::Entry::Expired, &[]).await.map(|_| ())
}
