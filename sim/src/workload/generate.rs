//! Generated worlds: each seed draws a manifest from the manifest grammar (what `warden check`
//! accepts) and programs from templates, so the simulator explores what operators can write,
//! not one hand-written configuration. The services are fixed (a payment API, a notes
//! endpoint, a ticket desk in SQLite and one in PostgreSQL, a model); the manifest decides which tools reach them and under what
//! limits. The checker takes every limit from the manifest this produces (`truth.rs`).

use crate::names::MODEL_KEY_ENV;
use std::collections::BTreeMap;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use serde_json::{json, Map, Value};
use warden::manifest::Manifest;
use warden_faults::{Template, ToolShape, Transport, WorldFile};

/// The most tools a generated world serves.
pub const TOOLS_MAX: u64 = 6;

struct Draw(ChaCha8Rng);

impl Draw {
    fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n
    }

    /// True `per_cent` times in a hundred.
    fn chance(&mut self, per_cent: u64) -> bool {
        self.below(100) < per_cent
    }

    fn one_of<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    fn money(&mut self, low_cents: u64, high_cents: u64, currency: &str) -> Value {
        let cents = low_cents + self.below(high_cents - low_cents + 1);
        json!({"amount": format!("{}.{:02}", cents / 100, cents % 100), "currency": currency})
    }
}

const TEMPLATES: &[Template] = &[
    Template::Echo,
    Template::Refund,
    Template::Notes,
    Template::Close,
    Template::Lookup,
    Template::Fetch,
    Template::Reflect,
];

/// Draws of a world a seed may take to find a manifest `warden check` accepts.
const ATTEMPTS: u64 = 32;

/// The world seed `seed` implies: the first draw whose manifest `warden check` accepts. The
/// draws cover the grammar, refused combinations too, so the check itself is what keeps an
/// unsafe manifest (money without a finite worst case, a tool allowed more runs than the
/// server) out of the simulation: remove a rule from it and the simulator serves such worlds.
pub fn world_for_seed(seed: u64) -> WorldFile {
    let mut world = draw_world(seed, 0);
    for attempt in 1..ATTEMPTS {
        let accepted =
            Manifest::parse(&crate::env::world::World::path("manifest.json"), world.manifest.as_bytes()).is_ok();
        if accepted {
            break;
        }
        world = draw_world(seed, attempt);
    }
    world
}

fn draw_world(seed: u64, attempt: u64) -> WorldFile {
    let mut draw = Draw(ChaCha8Rng::seed_from_u64(seed ^ 0x3041_d0c5 ^ attempt.rotate_left(40)));
    let count = 1 + draw.below(TOOLS_MAX);
    let server_runs = draw.chance(60).then(|| 1 + draw.below(8));
    let mut tools = Vec::new();
    let mut shapes = Vec::new();
    let mut programs = BTreeMap::new();
    for index in 0..count {
        let (shape, tool) = draw_tool(seed, index, server_runs, &mut draw, &mut programs);
        shapes.push(shape);
        tools.push(Value::Object(tool));
    }
    let server = server_section(server_runs, &mut draw);
    let mut manifest = json!({"server": server, "tools": tools});
    if (0..count).any(|index| calls_model(seed, index, shapes[index as usize].template)) {
        manifest["model"] = model_section(seed);
    }
    // Some worlds serve a resource too: its reads are runs of the same pipeline, under their
    // own quota, recovered after crashes like a tool's.
    if draw.chance(50) {
        manifest["resources"] = json!([resource(&mut draw, &mut programs)]);
    }
    // And a prompt: it only computes, and must answer whatever the faults do to the server.
    if draw.chance(40) {
        programs.insert("triage.star".into(), PROMPT_PROGRAM.into());
        manifest["prompts"] = json!([{"name": PROMPT_NAME, "program": "triage.star"}]);
    }
    tasked(&mut manifest, seed);
    if on_the_store(seed) {
        let url = json!({"env": crate::names::STORE_URL_ENV});
        manifest["server"]["store"] = json!({"postgres": {"url": url}});
    }
    let transport = transport_for_seed(seed);
    if transport == Transport::HttpOauth {
        per_principal(&mut manifest, seed);
        scoped(&mut manifest);
    }
    let manifest = serde_json::to_string_pretty(&manifest).expect("JSON");
    let peers = if on_the_store(seed) { peers_for_seed(seed) } else { 0 };
    WorldFile { manifest, programs, tools: shapes, transport, own: None, peers }
}

/// The tool at `index`: a template drawn, its program (added to `programs`) and its
/// configuration, both with the variations drawn for it.
fn draw_tool(
    seed: u64,
    index: u64,
    server_runs: Option<u64>,
    draw: &mut Draw,
    programs: &mut BTreeMap<String, String>,
) -> (ToolShape, Map<String, Value>) {
    let template = *draw.one_of(TEMPLATES);
    let name = format!("{}_{index}", template_name(template));
    let program = format!("{name}.star");
    programs.insert(program.clone(), tool_program(seed, index, template, draw));
    let mut tool = tool_config(&name, &program, template, server_runs, draw);
    if uses_postgres(seed, index, template) {
        reach_postgres(&mut tool);
    }
    if calls_model(seed, index, template) {
        grant_model(&mut tool, seed, index);
    }
    let shape = ToolShape { name, template, resend: tool.get("once").is_some(), examples: Vec::new() };
    (shape, tool)
}

/// The program of the tool at `index`: its template's, drawn, with the variations drawn
/// apart from the world's other draws (asking first, a narrowed handle, PostgreSQL, a model
/// call).
fn tool_program(seed: u64, index: u64, template: Template, draw: &mut Draw) -> String {
    let mut text = program_text(template, draw);
    if asks_first(seed, index, template) {
        text = with_ask(&text);
    }
    if narrows(seed, index, template) {
        text = with_narrowing(&text);
    }
    if uses_postgres(seed, index, template) {
        // PostgreSQL numbers its parameters.
        text = text.replace("id = ?", "id = $1");
    }
    if calls_model(seed, index, template) {
        text = with_model_call(&text);
    }
    text
}

/// A ticket tool's `db` grant moved to the PostgreSQL desk, in the same mode.
fn reach_postgres(tool: &mut Map<String, Value>) {
    let mode = tool["grants"]["db"]["mode"].clone();
    let url = json!({"env": crate::names::PG_URL_ENV});
    tool["grants"]["db"] = json!({"cap": "db.postgres", "url": url, "mode": mode});
    // Its connect and statement timeouts (required: it reaches the network).
    tool.insert("net".into(), json!({"timeout_ms": 1000, "connect_timeout_ms": 1000}));
}

/// The `llm` grant of a notes tool that has the model word its notes.
fn grant_model(tool: &mut Map<String, Value>, seed: u64, index: u64) {
    let grants = tool.entry("grants").or_insert(json!({}));
    grants["llm"] = json!({"cap": "model", "max_tokens": MODEL_MAX_TOKENS});
    // Some under a token quota of a few runs' worst case (the grant then needs `uses`).
    if let Some(runs) = token_quota_runs(seed, index) {
        grants["llm"]["uses"] = json!(1);
        let quota = tool.entry("quota").or_insert(json!({"window": "1h"}));
        quota["tokens"] = json!(runs * run_worst_tokens(seed));
    }
}

/// The manifest's `server` section: its run limit, and (drawn) notifications and `keep`.
fn server_section(server_runs: Option<u64>, draw: &mut Draw) -> Value {
    let mut server = json!({"name": "sim", "journals": "journals"});
    if let Some(runs) = server_runs {
        server["max_concurrent_runs"] = json!(runs);
    }
    if draw.chance(70) {
        server["notify"] = json!(["notify"]);
    }
    if draw.chance(30) {
        // Mostly at least the longest `once.keep` drawn (7 days), which `warden check` wants.
        server["keep"] = match draw.below(10) {
            0 | 1 => json!("forever"),
            2 => json!(1 + draw.below(6)),
            _ => json!(7 + draw.below(24)),
        };
    }
    server
}

/// Whether the tool at `index` asks its client to go ahead before it acts (`ask`): a quarter
/// of the tools that write. Drawn from the seed apart from the world's other draws, so adding
/// it changed no other world.
fn asks_first(seed: u64, index: u64, template: Template) -> bool {
    let writes = matches!(template, Template::Refund | Template::Notes | Template::Close);
    writes && (seed ^ 0x6173_6b73 ^ index.rotate_left(23)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 62 == 0
}

/// Whether the ticket tool at `index` reaches the PostgreSQL desk instead of the SQLite one:
/// a third of them. Drawn apart from the world's other draws, like `asks_first`.
fn uses_postgres(seed: u64, index: u64, template: Template) -> bool {
    matches!(template, Template::Close | Template::Lookup)
        && (seed ^ 0x7067_7371 ^ index.rotate_left(41)).wrapping_mul(0x9e37_79b9_7f4a_7c15) % 3 == 0
}

/// Whether the refund tool at `index` narrows its handle before refunding: a third of them.
/// Drawn apart from the world's other draws, like `asks_first`.
fn narrows(seed: u64, index: u64, template: Template) -> bool {
    template == Template::Refund
        && (seed ^ 0x6e61_7277 ^ index.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15) % 3 == 0
}

/// A refund program that refunds through a handle narrowed to the order and at most the
/// call's amount in all, twice at most (so a call of several parts is refused after its first).
fn with_narrowing(program: &str) -> String {
    program
        .replace(
            "    statuses = []\n",
            "    narrowed = pay.narrow(only = [order], max = amount, uses = 2)\n    statuses = []\n",
        )
        .replace("r = pay.refund(order, amount)", "r = narrowed.refund(order, amount)")
}

/// Whether the notes tool at `index` asks the model to word its note first: a third of them.
/// Drawn apart from the world's other draws, like `asks_first`.
fn calls_model(seed: u64, index: u64, template: Template) -> bool {
    template == Template::Notes
        && (seed ^ 0x6d6f_646c ^ index.rotate_left(31)).wrapping_mul(0x9e37_79b9_7f4a_7c15) % 3 == 0
}

/// How many runs' worst case the token quota of the model-calling tool at `index` holds, if
/// it has one: half of them do, of 1 to 3 runs.
fn token_quota_runs(seed: u64, index: u64) -> Option<u64> {
    let bits = (seed ^ 0x746f_6b6e ^ index.rotate_left(37)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60;
    (bits & 1 == 0).then_some(1 + (bits >> 1) % 3)
}

/// The tokens a generated model grant allows a call.
pub const MODEL_MAX_TOKENS: u64 = 256;

/// One run's worst case under a token quota (one call): `max_tokens` for each attempt of the
/// first send and of the one after a crash.
fn run_worst_tokens(seed: u64) -> u64 {
    MODEL_MAX_TOKENS * (model_retries(seed) + 1) * u64::from(warden::run::machine::CRASHES_BEFORE_HALT)
}

fn model_retries(seed: u64) -> u64 {
    ((seed ^ 0x7265_7472).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) % 3
}

/// The world's `model` section: the simulated provider, with 0 to 2 retries.
fn model_section(seed: u64) -> Value {
    let retries = model_retries(seed);
    json!({"provider": "anthropic", "model": "sim-model", "api_key": {"env": MODEL_KEY_ENV},
           "timeout_ms": 1000, "retries": retries, "base_url": crate::names::MODEL_HOST})
}

/// A notes program that has the model word each note first (what the model says goes into
/// the note's text).
fn with_model_call(program: &str) -> String {
    program.replace("def main(notes, ", "def main(notes, llm, ").replace(
        "    statuses = []\n",
        "    worded = llm.complete([{\"role\": \"user\", \"content\": \"Word a note: \" + text}])\n    text = text + \"/\" + str(worded.get(\"text\", worded.get(\"error\", \"\"))[:24])\n    statuses = []\n",
    )
}

/// The question a tool that asks first puts to its client, and what it does with the answer:
/// a decline ends the run without acting; no answer (the client declared no elicitation)
/// goes ahead.
pub const ASK_KEY: &str = "go";
const ASK_PRELUDE: &str =
    "    answers = ask({\"go\": {\"method\": \"elicitation/create\", \"params\": {\"message\": \"Go ahead?\",
        \"requestedSchema\": {\"type\": \"object\", \"properties\": {\"go\": {\"type\": \"boolean\"}}}}}})
    if answers.get(\"go\", {}).get(\"action\") == \"decline\":
        return {\"declined\": True}
";

/// `program` with the ask prelude after its docstring.
fn with_ask(program: &str) -> String {
    let docstring_end = program.match_indices("    \"\"\"\n").next().map(|(at, _)| at + 8).expect("a docstring");
    format!("{}{ASK_PRELUDE}{}", &program[..docstring_end], &program[docstring_end..])
}

/// A quarter of the worlds are served over Streamable HTTP, half of those with OAuth
/// principals. Drawn from the seed apart from the world's other draws, so adding it changed
/// no other world.
/// Whether the world keeps its ledger and records in the PostgreSQL store (a quarter of them):
/// drawn from the seed apart from the world's other draws, so it changed no other world.
fn on_the_store(seed: u64) -> bool {
    (seed ^ 0x0073_746f_7265).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 62 == 0
}

/// How many instances serve beside the first in a world on the store: none in a third of
/// them, one in a third, two in the rest. Drawn apart from the world's other draws.
fn peers_for_seed(seed: u64) -> u32 {
    ((seed ^ 0x7065_6572).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as u32 % (warden_faults::PEERS_MAX + 1)
}

fn transport_for_seed(seed: u64) -> Transport {
    match (seed ^ 0x4877_7470).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 61 {
        0 => Transport::Http,
        1 => Transport::HttpOauth,
        _ => Transport::Stdio,
    }
}

/// In an OAuth world, each tool's quota and `once` are per principal or shared, by a draw of
/// their own (the world's other draws stay as they were).
fn per_principal(manifest: &mut Value, seed: u64) {
    let Some(tools) = manifest["tools"].as_array_mut() else { return };
    for (index, tool) in tools.iter_mut().enumerate() {
        let bits = (seed ^ 0x7072_696e ^ (index as u64).rotate_left(17)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60;
        for (key, bit) in [("quota", 1), ("once", 2)] {
            if bits & bit != 0 {
                if let Some(limit) = tool.get_mut(key).and_then(Value::as_object_mut) {
                    limit.insert("per".into(), json!("principal"));
                }
            }
        }
    }
}

/// A third of the tools let a call become a task (a 2026-07-28 client that declares the
/// extension follows it with `tasks/get`), by a draw of their own.
fn tasked(manifest: &mut Value, seed: u64) {
    let Some(tools) = manifest["tools"].as_array_mut() else { return };
    for (index, tool) in tools.iter_mut().enumerate() {
        let draw = (seed ^ 0x7461_736b ^ (index as u64).rotate_left(23)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 62;
        if draw == 0 {
            tool["task"] = json!("optional");
        }
    }
}

/// In an OAuth world, every tool asks for the scope its principals' tokens grant (a third
/// principal's does not: `refusable.rs`).
fn scoped(manifest: &mut Value) {
    for tool in manifest["tools"].as_array_mut().into_iter().flatten() {
        tool["scopes"] = json!([crate::names::TOOL_SCOPE]);
    }
}

/// A read-only resource: a ticket looked up in SQLite, or a payment intent fetched.
fn resource(draw: &mut Draw, programs: &mut BTreeMap<String, String>) -> Value {
    let template = *draw.one_of(&[Template::Lookup, Template::Fetch]);
    let (name, uri) = match template {
        Template::Lookup => ("ticket_resource", RESOURCE_TICKETS),
        _ => ("intent_resource", RESOURCE_INTENTS),
    };
    let program = format!("{name}.star");
    programs.insert(program.clone(), program_text(template, draw));
    let mut resource = json!({"name": name, "uri": uri, "mime_type": "application/json", "program": program,
        "grants": Value::Object(grants(template, draw))});
    if template == Template::Fetch {
        resource["net"] = json!({"timeout_ms": 1000, "connect_timeout_ms": 1000});
    }
    if draw.chance(30) {
        resource["quota"] = json!({"window": "1m", "calls": 1 + draw.below(3)});
    }
    resource
}

/// The prompt generated worlds may serve, and its program.
pub const PROMPT_NAME: &str = "triage";
const PROMPT_PROGRAM: &str = "def main(ticket: str, tone: None | str = None) -> list:
    \"\"\"Triage a ticket.

    Args:
        ticket: The ticket.
        tone: How to phrase it.
    \"\"\"
    return [\"Triage ticket \" + ticket, {\"role\": \"assistant\", \"content\": \"In a %s tone.\" % (tone or \"plain\")}]
";

/// The URI templates of generated resources (the client model fills them in).
pub const RESOURCE_TICKETS: &str = "ticket://{ticket}";
pub const RESOURCE_INTENTS: &str = "intent://{order}";

/// A URI the client model reads from a world serving `template`.
pub fn resource_uri(template: &str, rng: &mut ChaCha8Rng) -> String {
    match template {
        RESOURCE_TICKETS => format!("ticket://{}", 1 + rng.next_u64() % 25),
        _ => format!("intent://pi_{}", 2000 + rng.next_u64() % 22),
    }
}

fn template_name(template: Template) -> &'static str {
    match template {
        Template::Echo => "echo",
        Template::Refund => "refund",
        Template::Notes => "notes",
        Template::Close => "close",
        Template::Lookup => "lookup",
        Template::Fetch => "fetch",
        Template::Reflect => "reflect",
        Template::Own => "own",
    }
}

/// The arguments a template's program takes: `once.by` draws from them.
pub fn arguments(template: Template) -> &'static [&'static str] {
    match template {
        Template::Echo => &["text"],
        Template::Refund => &["order", "amount", "parts"],
        Template::Notes => &["text", "count"],
        Template::Close | Template::Lookup => &["ticket"],
        Template::Fetch => &["order"],
        Template::Reflect => &["style"],
        Template::Own => &[],
    }
}

fn tool_config(
    name: &str,
    program: &str,
    template: Template,
    server_runs: Option<u64>,
    draw: &mut Draw,
) -> Map<String, Value> {
    let mut tool = Map::new();
    tool.insert("name".into(), json!(name));
    tool.insert("program".into(), json!(program));
    let grants = grants(template, draw);
    let refunds = grants.values().any(|g| g["cap"] == json!("payments.stripe.refund"));
    if !grants.is_empty() {
        tool.insert("grants".into(), Value::Object(grants.clone()));
    }
    if matches!(template, Template::Refund | Template::Notes | Template::Fetch | Template::Reflect) {
        tool.insert("net".into(), json!({"timeout_ms": 1000, "connect_timeout_ms": 1000}));
    }
    if draw.chance(25) {
        // Some shorter than the actions they cover: a deadline of a second or two.
        tool.insert("deadline".into(), json!(draw.one_of(&["1s", "2s", "30s", "5m", "1h"])));
    }
    if draw.chance(30) {
        let runs = 1 + draw.below(3);
        // Mostly within the server's limit (`warden check` refuses a tool allowed more).
        let runs = if draw.chance(80) { runs.min(server_runs.unwrap_or(runs)) } else { runs };
        tool.insert("max_concurrent_runs".into(), json!(runs));
    }
    if draw.chance(55) {
        let names = arguments(template);
        let mut by: Vec<&str> = names.iter().copied().filter(|_| draw.chance(60)).collect();
        if by.is_empty() {
            by.push(names[0]);
        }
        let mut once = json!({"by": by});
        if draw.chance(70) {
            once["keep"] = json!(draw.one_of(&["1m", "10m", "1h", "1d", "7d"]));
        }
        tool.insert("once".into(), once);
    }
    if let Some(quota) = quota_config(&grants, refunds, draw) {
        tool.insert("quota".into(), quota);
    }
    tool
}

/// A tool's `quota`, if one is drawn with a limit in it: a window, and calls, money (for a
/// tool that refunds) or both.
fn quota_config(grants: &Map<String, Value>, refunds: bool, draw: &mut Draw) -> Option<Value> {
    if !draw.chance(if refunds { 70 } else { 45 }) {
        return None;
    }
    let mut quota = json!({"window": draw.one_of(&["5s", "1m", "10m", "1h", "24h", "7d"])});
    if draw.chance(if refunds { 35 } else { 70 }) {
        quota["calls"] = json!(1 + draw.below(12));
    }
    // `warden check` wants a finite worst case under a money quota: every refund grant
    // with `max` or `uses`. Drawn either way; the check decides.
    if refunds && draw.chance(70) {
        quota["money"] = money_quota(grants, draw);
    }
    (quota.get("calls").is_some() || quota.get("money").is_some()).then_some(quota)
}

/// A quota's `money`: mostly in the refund grant's currency, and often a small multiple of
/// a run's worst case.
fn money_quota(grants: &Map<String, Value>, draw: &mut Draw) -> Value {
    // The grant's currency, mostly (`warden check` refuses a quota in another).
    let granted = grants
        .get("pay")
        .and_then(|g| g.get("each").or(g.get("max")))
        .and_then(|m| m["currency"].as_str())
        .unwrap_or("USD")
        .to_string();
    let currency = if draw.chance(90) { granted.as_str() } else { "EUR" };
    // Often a small multiple of a run's worst case: a few runs at once can contend
    // for it, and a miscount of open runs overspends it.
    match (worst_case_cents(grants), draw.chance(60)) {
        (Some(worst), true) if worst < u64::MAX / 4 => {
            let cents = worst * (1 + draw.below(3));
            json!({"amount": format!("{}.{:02}", cents / 100, cents % 100), "currency": currency})
        }
        _ => draw.money(2000, 30000, currency),
    }
}

/// A refund grant's most a run can move, in cents: `max`, or `each` times `uses`.
fn worst_case_cents(grants: &Map<String, Value>) -> Option<u64> {
    let cents = |money: &Value| -> Option<u64> {
        let (units, fraction) = money["amount"].as_str()?.split_once('.')?;
        Some(units.parse::<u64>().ok()? * 100 + fraction.parse::<u64>().ok()?)
    };
    let pay = grants.get("pay")?;
    match (pay.get("max"), pay.get("each"), pay.get("uses").and_then(Value::as_u64)) {
        (Some(max), _, _) => cents(max),
        (None, Some(each), Some(uses)) => cents(each)?.checked_mul(uses),
        _ => None,
    }
}

fn grants(template: Template, draw: &mut Draw) -> Map<String, Value> {
    let mut grants = Map::new();
    match template {
        Template::Echo | Template::Own => {}
        Template::Refund => {
            // Mostly dollars; some grants in euros (the services hold one intent in EUR).
            let currency = if draw.chance(15) { "EUR" } else { "USD" };
            let mut pay = json!({"cap": "payments.stripe.refund", "needs": {
                "get": {"cap": "net.http.get", "only": ["https://payments.sim/v1/payment_intents/*"]},
                "post": {"cap": "net.http.post", "only": ["https://payments.sim/v1/refunds"],
                         "idempotency_key": draw.chance(70)},
                "key": {"env": "STRIPE_SECRET_KEY"}}});
            // `warden check` wants `each`, `max` or both; drawn either way.
            match draw.below(7) {
                0 => {}
                1 | 2 => pay["each"] = draw.money(1000, 6000, currency),
                3 | 4 => pay["max"] = draw.money(2000, 15000, currency),
                _ => {
                    pay["each"] = draw.money(1000, 6000, currency);
                    pay["max"] = draw.money(2000, 15000, currency);
                }
            }
            if draw.chance(50) {
                // Rarely a count past what `warden check` accepts (2^63 wraps negative as i64).
                let huge = [1u64 << 63, u64::MAX, 1 << 40];
                pay["uses"] = if draw.chance(4) { json!(*draw.one_of(&huge)) } else { json!(1 + draw.below(3)) };
            }
            grants.insert("pay".into(), pay);
        }
        Template::Notes => {
            let only = draw.one_of(&["https://notes.sim/notes", "https://notes.sim/*"]);
            let mut notes = json!({"cap": "net.http.post", "only": [only], "idempotency_key": draw.chance(50)});
            if draw.chance(50) {
                notes["headers"] = json!({"Authorization": {"env": "NOTES_TOKEN", "prefix": "Bearer "}});
            }
            grants.insert("notes".into(), notes);
        }
        Template::Close => {
            grants.insert("db".into(), json!({"cap": "db.sqlite", "path": "desk.db", "mode": "write"}));
        }
        Template::Lookup => {
            grants.insert("db".into(), json!({"cap": "db.sqlite", "path": "desk.db", "mode": "read"}));
        }
        Template::Fetch => {
            grants.insert(
                "web".into(),
                json!({"cap": "net.http.get", "only": ["https://payments.sim/v1/payment_intents/*"]}),
            );
        }
        Template::Reflect => {
            grants.insert(
                "web".into(),
                json!({"cap": "net.http.get", "only": ["https://echo.sim/echo/*"],
                       "headers": {"Authorization": {"env": "NOTES_TOKEN", "prefix": "Bearer "}}}),
            );
        }
    }
    grants
}

fn docstring(summary: &str, args: &[(&str, &str)]) -> String {
    let mut text = format!("    \"\"\"{summary}\n\n    Args:\n");
    for (name, what) in args {
        text.push_str(&format!("        {name}: {what}\n"));
    }
    text.push_str("    \"\"\"\n");
    text
}

/// A program from `template`, with the variations a seed draws: prints, `fail()` on a
/// condition, reads before writes, results of some size.
fn program_text(template: Template, draw: &mut Draw) -> String {
    let prints = draw.chance(50);
    let fails = draw.chance(30);
    let (head, body) = template_source(template, draw);
    let first = arguments(template)[0];
    let mut prelude = String::new();
    if prints {
        prelude.push_str(&format!("    print(\"called with\", {first})\n"));
    }
    if fails {
        prelude
            .push_str(&format!("    if str({first}).endswith(\"7\"):\n        fail(\"refusing \" + str({first}))\n"));
    }
    format!("{head}{prelude}{body}")
}

/// A template's program in two parts: its head (signature and docstring) and its body (the
/// statements after the prelude `program_text` adds).
fn template_source(template: Template, draw: &mut Draw) -> (String, String) {
    match template {
        Template::Echo | Template::Own => echo_source(draw),
        Template::Refund => refund_source(draw),
        Template::Notes => notes_source(draw),
        Template::Close => {
            let head = format!(
                "def main(db, ticket: int) -> dict:\n{}",
                docstring("Close a ticket.", &[("ticket", "The ticket.")])
            );
            let body = concat!(
                "    r = db.execute(\"UPDATE tickets SET open = 0 WHERE id = ? AND open = 1\", [ticket])\n",
                "    return {\"changes\": r[\"changes\"]}\n",
            );
            (head, body.to_string())
        }
        Template::Lookup => {
            let head = format!(
                "def main(db, ticket: int) -> dict:\n{}",
                docstring("Look a ticket up.", &[("ticket", "The ticket.")])
            );
            let body = concat!(
                "    r = db.query(\"SELECT id, open FROM tickets WHERE id = ?\", [ticket])\n",
                "    return {\"rows\": r[\"rows\"]}\n",
            );
            (head, body.to_string())
        }
        Template::Reflect => {
            let head = format!(
                "def main(web, style: str) -> dict:\n{}",
                docstring("Read what the service reflects.", &[("style", "How it escapes.")])
            );
            let body = concat!(
                "    r = web.get(\"https://echo.sim/echo/\" + style)\n",
                "    print(\"reflected\", r.get(\"body\"))\n",
                "    return {\"json\": r.get(\"json\"), \"body\": r.get(\"body\")}\n",
            );
            (head, body.to_string())
        }
        Template::Fetch => {
            let head = format!(
                "def main(web, order: str) -> dict:\n{}",
                docstring("Fetch an intent.", &[("order", "The intent.")])
            );
            let body = concat!(
                "    r = web.get(\"https://payments.sim/v1/payment_intents/\" + order)\n",
                "    return {\"status\": r.get(\"status\")}\n",
            );
            (head, body.to_string())
        }
    }
}

/// The echo program: results of a few bytes, some kilobytes, and (rarely: they cost real
/// time) near and over the 1 MiB a result may take (`RESULT_BYTES_MAX`; texts are 2 to 3
/// bytes), and over the 8 MiB a journal line holds (`RECORD_LINE_BYTES_MAX`).
fn echo_source(draw: &mut Draw) -> (String, String) {
    let big = draw.chance(5);
    let sizes = [340_000u64, 600_000, 340_000, 600_000, 4_500_000];
    let repeat = if big { *draw.one_of(&sizes) } else { *draw.one_of(&[1u64, 1, 10, 1000]) };
    let mut body = format!("    out = text * {repeat}\n");
    body.push_str("    return {\"echo\": out}\n");
    let head = format!("def main(text: str) -> dict:\n{}", docstring("Echo.", &[("text", "The text.")]));
    (head, body)
}

/// The refund program: mostly looking the intent up first, then refunding in parts.
fn refund_source(draw: &mut Draw) -> (String, String) {
    let mut body = String::new();
    if draw.chance(70) {
        body.push_str("    intent = pay.get(\"https://payments.sim/v1/payment_intents/\" + order)\n");
        body.push_str("    if intent.get(\"status\") != 200:\n        fail(\"no such order\")\n");
    }
    body.push_str("    statuses = []\n    for i in range(parts):\n");
    body.push_str("        r = pay.refund(order, amount)\n        statuses.append(r.get(\"status\"))\n");
    body.push_str("    return {\"statuses\": statuses, \"amount\": amount.amount}\n");
    let head = format!(
        "def main(pay, order: str, amount: money, parts: int) -> dict:\n{}",
        docstring(
            "Refund.",
            &[("order", "The intent."), ("amount", "How much each time."), ("parts", "How many refunds.")]
        )
    );
    (head, body)
}

/// The notes program: posts a note `count` times; some try to set a header only Warden may
/// set, which the broker must refuse.
fn notes_source(draw: &mut Draw) -> (String, String) {
    let headers = match draw.chance(12) {
        true => ", headers = {\"Idempotency-Key\": \"mine-\" + text}",
        false => "",
    };
    let mut body = String::from("    statuses = []\n    for i in range(count):\n");
    body.push_str(&format!(
        "        r = notes.post(\"https://notes.sim/notes\", json = {{\"text\": text + \"-\" + str(i)}}{headers})\n",
    ));
    body.push_str("        statuses.append(r.get(\"status\"))\n");
    body.push_str("    return {\"statuses\": statuses}\n");
    let head = format!(
        "def main(notes, text: str, count: int) -> dict:\n{}",
        docstring("Save notes.", &[("text", "The note."), ("count", "How many.")])
    );
    (head, body)
}

/// The arguments of the workload's call number `index` to a tool of `template`: `once` keys
/// repeat sometimes, amounts are sometimes over the grant's limits, some orders do not exist.
pub fn call_arguments(shape: &ToolShape, rng: &mut ChaCha8Rng, index: u32) -> Value {
    let mut below = |n: u64| rng.next_u64() % n;
    let repeat = index > 0 && below(4) == 0;
    let label = if repeat { below(index as u64) } else { index as u64 };
    match shape.template {
        Template::Echo => json!({"text": format!("e{label}")}),
        Template::Refund => {
            // Some orders do not exist; pi_2001 is in EUR (the refund must be refused).
            let order = match below(12) {
                0 => "pi_missing".to_string(),
                1 => "pi_2001".to_string(),
                _ => format!("pi_{}", 2000 + below(20)),
            };
            // Mostly amounts most grants allow; some over any `each`.
            let cents = if below(2) == 0 { 500 + below(2000) } else { 100 + below(7000) };
            let currency = if below(8) == 0 { "EUR" } else { "USD" };
            json!({"order": order, "amount": {"amount": format!("{}.{:02}", cents / 100, cents % 100), "currency": currency},
                   "parts": 1 + below(3)})
        }
        Template::Notes => json!({"text": format!("n{label}"), "count": below(4)}),
        Template::Close | Template::Lookup => json!({"ticket": 1 + below(20)}),
        Template::Fetch => json!({"order": format!("pi_{}", 2000 + below(22))}),
        Template::Reflect => {
            let style = ["php", "go", "unicode", "xssi", "plain"][below(5) as usize];
            json!({"style": style})
        }
        Template::Own => match shape.examples.len() as u64 {
            0 => json!({}),
            count => shape.examples[below(count) as usize].clone(),
        },
    }
}
