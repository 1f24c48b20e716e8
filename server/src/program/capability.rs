//! Capability handles as programs see them: one value per granted parameter, whose methods
//! ask the broker (in `Evaluator::extra`) to act. A method either returns the journaled
//! result of its action, or stops the program (suspended to perform it, or refused).

use crate::limits::PAYMENT_INTENT_BYTES_MAX;
use std::collections::BTreeMap;
use std::fmt;

use allocative::Allocative;
use serde_json::{json, Value};
use starlark::any::ProvidesStaticType;
use starlark::environment::{Methods, MethodsBuilder};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::none::NoneOr;
use starlark::values::starlark_value;
use starlark::values::{
    AllocValue, Heap, NoSerialize, StarlarkPagable, StarlarkValue, Value as StarlarkValue_, ValueLike,
};

use super::starlark_money::StarlarkMoney;
use crate::base::money::Money;
use crate::broker::narrow::{Narrowing, NARROW_ONLY_MAX};
use crate::broker::{Action, Broker, Kind, Method, HEADERS_BYTES_MAX, REQUEST_BODY_BYTES_MAX, TARGET_BYTES_MAX};

#[derive(Debug, Clone, ProvidesStaticType, NoSerialize, Allocative, StarlarkPagable)]
pub struct Capability {
    pub name: String,
    pub kind: String,
    /// The handle's narrowing (`narrow(...)`), as JSON; none for the grant's own handle.
    pub narrowed: Option<String>,
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let narrowed = if self.narrowed.is_some() { ", narrowed" } else { "" };
        write!(f, "<capability {} ({}{narrowed})>", self.name, self.kind)
    }
}

starlark::methods_static!(CAPABILITY_METHODS = capability_methods);

#[starlark_value(type = "capability")]
impl<'v> StarlarkValue<'v> for Capability {
    fn get_methods() -> Option<&'static Methods> {
        Some(CAPABILITY_METHODS.methods())
    }
}

impl<'v> AllocValue<'v> for Capability {
    fn alloc_value(self, heap: Heap<'v>) -> StarlarkValue_<'v> {
        heap.alloc_simple(self)
    }
}

fn broker<'a>(eval: &'a Evaluator<'_, '_, '_>) -> starlark::Result<&'a Broker> {
    eval.extra
        .and_then(|extra| extra.downcast_ref::<Broker>())
        .ok_or_else(|| starlark::Error::new_other(anyhow_free("capabilities work only inside a tool run")))
}

/// A plain error type, so the crate needs no `anyhow` of its own.
#[derive(Debug)]
struct Message(String);

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Message {}

fn anyhow_free(text: &str) -> Message {
    Message(text.to_string())
}

pub(crate) fn refused(text: String) -> starlark::Error {
    starlark::Error::new_other(Message(text))
}

fn this(value: StarlarkValue_) -> starlark::Result<Capability> {
    value.downcast_ref::<Capability>().cloned().ok_or_else(|| refused("not a capability".into()))
}

fn to_json(value: StarlarkValue_) -> starlark::Result<Value> {
    let text = value.to_json().map_err(|e| refused(format!("not JSON: {e}")))?;
    serde_json::from_str(&text).map_err(|e| refused(format!("not JSON: {e}")))
}

fn headers_of(value: Option<StarlarkValue_>) -> starlark::Result<BTreeMap<String, String>> {
    let Some(value) = value else { return Ok(BTreeMap::new()) };
    match to_json(value)? {
        Value::Object(map) => map
            .into_iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k, s)),
                _ => Err(refused(format!("header `{k}` must be a string"))),
            })
            .collect(),
        Value::Null => Ok(BTreeMap::new()),
        _ => Err(refused("headers must be a dict of strings".into())),
    }
}

/// Asks the broker; a stop becomes a Starlark error the program cannot catch.
fn act<'v>(eval: &mut Evaluator<'v, '_, '_>, action: Action) -> starlark::Result<StarlarkValue_<'v>> {
    let result = broker(eval)?.act(action).map_err(starlark::Error::new_other)?;
    Ok(eval.heap().alloc(result))
}

/// The handle's kind, if it is one of `kinds`.
fn expect_kind(cap: &Capability, kinds: &[Kind], method: &str) -> starlark::Result<Kind> {
    match kinds.iter().find(|kind| kind.name() == cap.kind) {
        Some(kind) => Ok(*kind),
        None => Err(refused(format!("`{}` ({}) has no method `{method}`", cap.name, cap.kind))),
    }
}

fn http(
    cap: &Capability,
    kind: Kind,
    method: Method,
    url: &str,
    body: String,
    headers: BTreeMap<String, String>,
) -> starlark::Result<Action> {
    if body.len() > REQUEST_BODY_BYTES_MAX {
        return Err(refused(format!("the request body is over {REQUEST_BODY_BYTES_MAX} bytes")));
    }
    if url.len() > TARGET_BYTES_MAX {
        return Err(refused(format!("the URL or statement is over {TARGET_BYTES_MAX} bytes")));
    }
    let header_bytes: usize = headers.iter().map(|(k, v)| k.len() + v.len()).sum();
    if header_bytes > HEADERS_BYTES_MAX {
        return Err(refused(format!("the headers are over {HEADERS_BYTES_MAX} bytes")));
    }
    Ok(Action {
        op: 0,
        grant: cap.name.clone(),
        kind,
        method,
        target: url.to_string(),
        headers,
        body,
        amount: None,
        idempotency_key: None,
        narrowed: cap
            .narrowed
            .as_deref()
            .map(|text| serde_json::from_str(text).expect("a handle's narrowing reads back")),
    })
}

fn body_of(
    body: Option<&str>,
    json: Option<StarlarkValue_>,
    headers: &mut BTreeMap<String, String>,
) -> starlark::Result<String> {
    match (body, json) {
        (Some(_), Some(_)) => Err(refused("give `body` or `json`, not both".into())),
        (Some(body), None) => Ok(body.to_string()),
        (None, Some(json)) => {
            headers.entry("content-type".into()).or_insert_with(|| "application/json".into());
            Ok(serde_json::to_string(&to_json(json)?).expect("JSON values serialise"))
        }
        (None, None) => Ok(String::new()),
    }
}

/// The capability handle's methods. Long because the Starlark macro needs every method in
/// one function; each method is a few lines that delegate to the helpers above.
#[starlark_module]
fn capability_methods(builder: &mut MethodsBuilder) {
    /// GET `url`. Returns {"status", "headers", "body", "json"} (json is None unless the
    /// body is JSON), or {"error", "may_have_been_sent"} when the request failed.
    fn get<'v>(
        this: StarlarkValue_<'v>,
        #[starlark(require = pos)] url: &str,
        #[starlark(require = named)] headers: Option<StarlarkValue_<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<StarlarkValue_<'v>> {
        let cap = this_cap(this)?;
        let kind = expect_kind(&cap, &[Kind::HttpGet, Kind::StripeRefund], "get")?;
        let action = http(&cap, kind, Method::Get, url, String::new(), headers_of(headers)?)?;
        act(eval, action)
    }

    /// POST to `url` with a text `body` or a `json` value.
    fn post<'v>(
        this: StarlarkValue_<'v>,
        #[starlark(require = pos)] url: &str,
        #[starlark(require = named)] body: Option<&str>,
        #[starlark(require = named)] json: Option<StarlarkValue_<'v>>,
        #[starlark(require = named)] headers: Option<StarlarkValue_<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<StarlarkValue_<'v>> {
        write_method(this, Method::Post, url, body, json, headers, eval)
    }

    /// PUT to `url` with a text `body` or a `json` value.
    fn put<'v>(
        this: StarlarkValue_<'v>,
        #[starlark(require = pos)] url: &str,
        #[starlark(require = named)] body: Option<&str>,
        #[starlark(require = named)] json: Option<StarlarkValue_<'v>>,
        #[starlark(require = named)] headers: Option<StarlarkValue_<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<StarlarkValue_<'v>> {
        write_method(this, Method::Put, url, body, json, headers, eval)
    }

    /// PATCH `url` with a text `body` or a `json` value.
    fn patch<'v>(
        this: StarlarkValue_<'v>,
        #[starlark(require = pos)] url: &str,
        #[starlark(require = named)] body: Option<&str>,
        #[starlark(require = named)] json: Option<StarlarkValue_<'v>>,
        #[starlark(require = named)] headers: Option<StarlarkValue_<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<StarlarkValue_<'v>> {
        write_method(this, Method::Patch, url, body, json, headers, eval)
    }

    /// DELETE `url`.
    fn delete<'v>(
        this: StarlarkValue_<'v>,
        #[starlark(require = pos)] url: &str,
        #[starlark(require = named)] headers: Option<StarlarkValue_<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<StarlarkValue_<'v>> {
        write_method(this, Method::Delete, url, None, None, headers, eval)
    }

    /// A handle whose limits are at most this one's: `only` (exact URLs, or payment intent
    /// ids for a refund grant), `each`, `max` (money) and `uses`. A wider value fails the run
    /// as a capability error. Actions through it count against this handle too.
    fn narrow<'v>(
        this: StarlarkValue_<'v>,
        #[starlark(require = named)] only: Option<StarlarkValue_<'v>>,
        #[starlark(require = named)] each: Option<StarlarkValue_<'v>>,
        #[starlark(require = named)] max: Option<StarlarkValue_<'v>>,
        #[starlark(require = named)] uses: Option<i32>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<StarlarkValue_<'v>> {
        let cap = this_cap(this)?;
        let only = match only.map(to_json).transpose()? {
            None => Vec::new(),
            Some(Value::Array(items)) if items.len() <= NARROW_ONLY_MAX => (items.into_iter())
                .map(|item| item.as_str().map(str::to_string).ok_or_else(|| refused("`only` holds strings".into())))
                .collect::<starlark::Result<Vec<String>>>()?,
            Some(_) => return Err(refused(format!("`only` must be a list of at most {NARROW_ONLY_MAX} strings"))),
        };
        // Money, or its JSON form {"amount": "12.50", "currency": "USD"} (a program computes it).
        let money = |value: Option<StarlarkValue_>, what: &str| -> starlark::Result<Option<Money>> {
            let Some(value) = value else { return Ok(None) };
            if let Some(money) = value.downcast_ref::<StarlarkMoney>() {
                return Money::parse(&money.amount, &money.currency).map(Some).map_err(refused);
            }
            let json = to_json(value)?;
            match (json.get("amount").and_then(Value::as_str), json.get("currency").and_then(Value::as_str)) {
                (Some(amount), Some(currency)) => Money::parse(amount, currency).map(Some).map_err(refused),
                _ => {
                    Err(refused(format!("`{what}` must be money, or {{\"amount\": \"12.50\", \"currency\": \"USD\"}}")))
                }
            }
        };
        let uses = match uses {
            Some(uses) if uses < 0 => return Err(refused("`uses` must not be negative".into())),
            uses => uses.map(|u| u as u64),
        };
        let wanted = Narrowing { only, each: money(each, "each")?, max: money(max, "max")?, uses };
        let broker = broker(eval)?;
        let Some(grant) = broker.grants.get(&cap.name) else {
            return Err(refused(format!("`{}` is not a grant of this tool", cap.name)));
        };
        let current: Option<Narrowing> =
            cap.narrowed.as_deref().map(|text| serde_json::from_str(text).expect("a handle's narrowing reads back"));
        match Narrowing::within(wanted, grant, current.as_ref()) {
            Ok(narrowed) => {
                let narrowed = Some(serde_json::to_string(&narrowed).expect("narrowings serialise"));
                Ok(eval.heap().alloc(Capability { narrowed, ..cap }))
            }
            Err(problem) => Err(starlark::Error::new_other(broker.refuse_capability(problem))),
        }
    }

    /// Asks the manifest's model: `messages` is a list of {"role": "user" | "assistant",
    /// "content": str}; `max_tokens` at most the grant's (its default), `system` a text,
    /// `temperature` a number from 0 to 2. Returns {"status", "text", "usage": {"input_tokens",
    /// "output_tokens"}}, or {"error"} when the provider did not answer after its retries.
    fn complete<'v>(
        this: StarlarkValue_<'v>,
        #[starlark(require = pos)] messages: StarlarkValue_<'v>,
        #[starlark(require = named)] max_tokens: Option<i32>,
        #[starlark(require = named)] system: Option<&str>,
        #[starlark(require = named)] temperature: Option<StarlarkValue_<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<StarlarkValue_<'v>> {
        let cap = this_cap(this)?;
        let kind = expect_kind(&cap, &[Kind::Model], "complete")?;
        let messages = match to_json(messages)? {
            Value::Array(messages) if !messages.is_empty() => messages,
            _ => return Err(refused("`messages` must be a non-empty list of {\"role\", \"content\"}".into())),
        };
        for message in &messages {
            let role_ok = matches!(message["role"].as_str(), Some("user" | "assistant"));
            if !role_ok || !message["content"].is_string() || message.as_object().is_some_and(|m| m.len() != 2) {
                return Err(refused("each message is {\"role\": \"user\" | \"assistant\", \"content\": str}".into()));
            }
        }
        let temperature = match temperature.map(to_json).transpose()? {
            None => Value::Null,
            Some(Value::Number(t)) if t.as_f64().is_some_and(|t| (0.0..=2.0).contains(&t)) => Value::Number(t),
            Some(_) => return Err(refused("`temperature` must be a number from 0 to 2".into())),
        };
        let max_tokens = match max_tokens {
            Some(tokens) => Value::from(tokens),
            None => broker(eval)?.grants.get(&cap.name).and_then(|g| g.max_tokens).map_or(Value::Null, Value::from),
        };
        let request =
            json!({"messages": messages, "max_tokens": max_tokens, "system": system, "temperature": temperature});
        let body = serde_json::to_string(&request).expect("JSON values serialise");
        let action = http(&cap, kind, Method::Complete, "", body, BTreeMap::new())?;
        act(eval, action)
    }

    /// Refund `amount` of a payment intent. The broker builds the request itself, so the
    /// amount refunded is the amount checked against the grant.
    fn refund<'v>(
        this: StarlarkValue_<'v>,
        #[starlark(require = pos)] payment_intent: &str,
        #[starlark(require = pos)] amount: StarlarkValue_<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<StarlarkValue_<'v>> {
        let cap = this_cap(this)?;
        let kind = expect_kind(&cap, &[Kind::StripeRefund], "refund")?;
        let Some(money) = amount.downcast_ref::<StarlarkMoney>() else {
            return Err(refused("`amount` must be money".into()));
        };
        let well_formed = payment_intent.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !(1..=PAYMENT_INTENT_BYTES_MAX).contains(&payment_intent.len()) || !well_formed {
            let shown: String = payment_intent.chars().take(80).collect();
            return Err(refused(format!(
                "`{shown}` is not a payment intent id (letters, digits and `_`, at most {PAYMENT_INTENT_BYTES_MAX} bytes)"
            )));
        }
        let mut action = http(&cap, kind, Method::Refund, "", String::new(), BTreeMap::new())?;
        action.body = payment_intent.to_string();
        action.amount = Some(json!({"amount": money.amount, "currency": money.currency}));
        act(eval, action)
    }

    /// The money a Stripe object (a payment intent, a refund: a dict with `amount` in Stripe's
    /// unit and `currency`) holds, as money a program compares and narrows with: 5000 of `jpy`
    /// is 5000 yen, 5000 of `usd` is 50.00 dollars. Sends nothing.
    fn money_of<'v>(
        this: StarlarkValue_<'v>,
        #[starlark(require = pos)] object: StarlarkValue_<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<StarlarkValue_<'v>> {
        let cap = this_cap(this)?;
        expect_kind(&cap, &[Kind::StripeRefund], "money_of")?;
        let object = to_json(object)?;
        let (Some(amount), Some(currency)) = (object["amount"].as_i64(), object["currency"].as_str()) else {
            return Err(refused("`money_of` takes a Stripe object with an integer `amount` and a `currency`".into()));
        };
        let money = crate::broker::stripe::money_of(amount, currency).map_err(refused)?;
        Ok(eval.heap().alloc(StarlarkMoney { amount: money.amount_text(), currency: money.currency }))
    }

    /// Run a read-only SQL statement with `params`; returns a list of rows (dicts).
    fn query<'v>(
        this: StarlarkValue_<'v>,
        #[starlark(require = pos)] sql: &str,
        #[starlark(require = pos, default = NoneOr::None)] params: NoneOr<StarlarkValue_<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<StarlarkValue_<'v>> {
        sql_method(this, Method::Query, sql, params, eval)
    }

    /// Run a writing SQL statement with `params`, exactly once per run; returns
    /// {"changes": n, "rows": [...]}.
    fn execute<'v>(
        this: StarlarkValue_<'v>,
        #[starlark(require = pos)] sql: &str,
        #[starlark(require = pos, default = NoneOr::None)] params: NoneOr<StarlarkValue_<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<StarlarkValue_<'v>> {
        sql_method(this, Method::Execute, sql, params, eval)
    }
}

fn this_cap(value: StarlarkValue_) -> starlark::Result<Capability> {
    this(value)
}

fn write_method<'v>(
    this: StarlarkValue_<'v>,
    method: Method,
    url: &str,
    body: Option<&str>,
    json: Option<StarlarkValue_<'v>>,
    headers: Option<StarlarkValue_<'v>>,
    eval: &mut Evaluator<'v, '_, '_>,
) -> starlark::Result<StarlarkValue_<'v>> {
    let cap = this_cap(this)?;
    let http_kind = Kind::http(method).expect("write methods are HTTP methods");
    let kind = expect_kind(&cap, &[http_kind], &method.name().to_ascii_lowercase())?;
    let mut headers = headers_of(headers)?;
    let body = body_of(body, json, &mut headers)?;
    let action = http(&cap, kind, method, url, body, headers)?;
    act(eval, action)
}

fn sql_method<'v>(
    this: StarlarkValue_<'v>,
    method: Method,
    sql: &str,
    params: NoneOr<StarlarkValue_<'v>>,
    eval: &mut Evaluator<'v, '_, '_>,
) -> starlark::Result<StarlarkValue_<'v>> {
    let cap = this_cap(this)?;
    let kind = expect_kind(&cap, &[Kind::Sqlite, Kind::Postgres], &method.name().to_ascii_lowercase())?;
    let params = match params.into_option() {
        None => Value::Array(vec![]),
        Some(value) => match to_json(value)? {
            Value::Array(items) => Value::Array(items),
            _ => return Err(refused("`params` must be a list".into())),
        },
    };
    let mut action =
        http(&cap, kind, method, sql, serde_json::to_string(&params).expect("JSON values serialise"), BTreeMap::new())?;
    action.target = sql.to_string();
    act(eval, action)
}
