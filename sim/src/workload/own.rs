//! An operator's own world (`warden-sim explore --manifest`): their manifest, programs and the
//! files their grants name (and their input schemas), read from disk once and then served on the simulated `Env` as a
//! generated world is. The services are modelled from what the grants reach (`services.rs`
//! routes an own world's requests by path: a Stripe-shaped payments API, a model provider, and
//! a recording HTTP service for every other URL). The client's arguments come from each
//! program's docstring examples (`e.g. "pi_3Mtw..."`), else from its input schema; resources
//! and prompts are read with the values their `complete` lists offer, else their programs'
//! examples. Each secret the manifest names is given a made-up value, which the checker
//! searches every output for.

use std::collections::BTreeMap;
use std::path::{Component, Path};

use serde_json::{json, Map, Value};
use warden::manifest::{Manifest, ToolConfig};
use warden::program::Program;
use warden_faults::{OwnWorld, Template, ToolShape, Transport, WorldFile};

/// The largest file of an operator's world read (a manifest, a program, an `init` script).
pub const OWN_FILE_BYTES_MAX: u64 = 1 << 20;
/// How every made-up secret of an operator's world begins (the checker searches for each).
pub const OWN_SECRET_PREFIX: &str = "SimOwnSecret";
/// The most argument sets the client picks from for one tool.
const EXAMPLES_PER_TOOL: usize = 6;

/// The variation of a text example that names something not there (`vary`).
const MISSING_VARIANT: usize = EXAMPLES_PER_TOOL - 1;

/// Reads the operator's world from `manifest_path`: every problem names its file.
pub fn load(manifest_path: &Path) -> Result<WorldFile, String> {
    let text = read_bounded(manifest_path)?;
    let manifest = Manifest::parse(manifest_path, text.as_bytes()).map_err(|e| e.to_string())?;
    let raw: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", manifest_path.display()))?;
    let shown = manifest_path.display();
    if manifest.tools.is_empty() {
        return Err(format!("{shown}: serves no tool; explore --manifest calls a manifest's tools"));
    }
    if let Some(problem) = model_not_modelled(&raw) {
        return Err(format!("{shown}: {problem}"));
    }
    let folder = manifest_path.parent().unwrap_or(Path::new("."));
    let mut programs = BTreeMap::new();
    let mut tools = Vec::new();
    for tool in &manifest.tools {
        let source = read_program(folder, tool, &mut programs)?;
        let grant_names: Vec<String> = tool.grants.keys().cloned().collect();
        let program = Program::load(&tool.program, &source, &tool.entry, &grant_names)?;
        let examples = examples_of(&program.input_schema());
        tools.push(ToolShape { name: tool.name.clone(), template: Template::Own, resend: true, examples });
    }
    // Resources and prompts are served and read now and then; a program that does not load
    // would stop every start, so it is refused here, once.
    let (mut resource_uris, mut prompt_calls) = (Vec::new(), Vec::new());
    for resource in &manifest.resources {
        let tool = &resource.tool;
        let source = read_program(folder, tool, &mut programs)?;
        let grant_names: Vec<String> = tool.grants.keys().cloned().collect();
        let program = Program::load(&tool.program, &source, &tool.entry, &grant_names)?;
        let arguments = argument_sets(&resource.complete, &program.input_schema());
        resource_uris.extend(arguments.iter().map(|set| filled(&resource.uri_template, set)));
    }
    for prompt in &manifest.prompts {
        let source = read_bounded(&prompt.program)?;
        let program = Program::load(&prompt.program, &source, &prompt.entry, &[])?;
        programs.insert(relative_to(folder, &prompt.program)?, source);
        let arguments = argument_sets(&prompt.complete, &program.input_schema());
        prompt_calls.extend(arguments.into_iter().map(|set| (prompt.name.clone(), Value::Object(set))));
    }
    let mut files = BTreeMap::new();
    for init in strings_under(&raw, "init") {
        let path = folder.join(&init);
        let sql = read_bounded(&path)?;
        // SQL that does not run would stop every start: refused here, naming the file.
        let check = rusqlite::Connection::open_in_memory().and_then(|db| db.execute_batch(&sql));
        check.map_err(|e| format!("{}: the init SQL does not run: {e}", path.display()))?;
        files.insert(relative_to(folder, &path)?, sql);
    }
    // A tool's own input schema is read by the server at start: served as written.
    for path in manifest.tools.iter().filter_map(|tool| tool.input_schema.as_ref()) {
        files.insert(relative_to(folder, path)?, read_bounded(path)?);
    }
    let variables = variables_of(&raw);
    let own = Some(OwnWorld { files, variables, resource_uris, prompt_calls, services_ignore_keys: false });
    Ok(WorldFile {
        manifest: with_journals_here(text, raw),
        programs,
        tools,
        transport: Transport::Stdio,
        own,
        peers: 0,
    })
}

/// The most files `--from-journals` reads from a journals directory.
pub const JOURNALS_FILES_MAX: usize = 10_000;
/// The most bytes, all files together, `--from-journals` reads.
pub const JOURNALS_BYTES_MAX: u64 = 64 << 20;

/// Adds a journals directory as a server left it (a ledger, run journals, kept arguments,
/// waiting records) to `world`: the first instance starts on it, so recovery, resolutions,
/// retention and further calls are explored from that state. The lock and the admin socket
/// are a live server's, not state, and are left out.
pub fn with_journals(world: &mut WorldFile, dir: &Path) -> Result<(), String> {
    let ledger = dir.join(warden::store::ledger::LEDGER_FILE);
    if !ledger.is_file() {
        return Err(format!(
            "{}: holds no {}; name the journals directory itself (the manifest's server.journals)",
            dir.display(),
            warden::store::ledger::LEDGER_FILE
        ));
    }
    let own = world.own.get_or_insert_with(OwnWorld::default);
    let mut files = Vec::new();
    files_under(dir, &mut files)?;
    files.sort();
    let mut bytes = 0u64;
    for path in files {
        let name = path.file_name().and_then(|name| name.to_str()).unwrap_or_default();
        if name == warden::base::layout::SERVER_LOCK_FILE || !path.is_file() {
            continue;
        }
        bytes = bytes.saturating_add(std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?.len());
        if bytes > JOURNALS_BYTES_MAX {
            return Err(format!(
                "{}: over the {JOURNALS_BYTES_MAX} bytes a journals directory may hold",
                dir.display()
            ));
        }
        let relative = relative_to(dir, &path)?;
        // A torn last line can end inside a character; recovery drops a torn tail whatever
        // its bytes, so an invalid sequence is carried as U+FFFD rather than refused.
        let text = String::from_utf8_lossy(&read_bytes_capped(&path, JOURNALS_BYTES_MAX)?).into_owned();
        if name == warden::store::ledger::LEDGER_FILE {
            numbers_are_possible(&path, &text)?;
        }
        own.files.insert(format!("journals/{relative}"), text);
    }
    Ok(())
}

/// The latest time a ledger line read by `--from-journals` may hold (the year 2200): a later
/// one, checksum and all, would move the simulated clock past what its arithmetic holds.
pub const LEDGER_TIME_MS_MAX: u64 = 7_258_118_400_000;
/// The largest count (calls, tokens, a sequence) a ledger line read by `--from-journals` may
/// hold: far above any real one, far below what sums of them overflow at.
pub const LEDGER_COUNT_MAX: u64 = 1 << 48;

/// Every number of the ledger's well-formed lines within what a real server writes: a line
/// over a limit is refused where it is read, naming its line, field and limit. (A line that
/// does not decode is left to the server's start, which tells a torn tail from damage.)
fn numbers_are_possible(path: &Path, text: &str) -> Result<(), String> {
    for (index, line) in text.lines().enumerate() {
        let Ok(record) = warden::store::record::decode::<Value>(line.as_bytes()) else { continue };
        for (field, value) in record.as_object().into_iter().flatten() {
            let Some(number) = value.as_u64() else { continue };
            let limit = if field == "at_ms" { LEDGER_TIME_MS_MAX } else { LEDGER_COUNT_MAX };
            if number > limit {
                return Err(format!(
                    "{}:{}: `{field}` is {number}, over the {limit} a server writes; the simulator will not start from it",
                    path.display(),
                    index + 1
                ));
            }
        }
    }
    Ok(())
}

fn files_under(dir: &Path, into: &mut Vec<std::path::PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = entry.path();
        // A server writes no links: one is not state, and following it could loop.
        if entry.file_type().map_err(|e| format!("{}: {e}", path.display()))?.is_symlink() {
            continue;
        }
        if path.is_dir() {
            files_under(&path, into)?;
        } else {
            into.push(path);
        }
        if into.len() > JOURNALS_FILES_MAX {
            return Err(format!(
                "{}: over the {JOURNALS_FILES_MAX} files a journals directory may hold",
                dir.display()
            ));
        }
    }
    Ok(())
}

/// The manifest with its journals in `journals` beside it, where the checker reads them.
fn with_journals_here(text: String, mut raw: Value) -> String {
    if raw["server"]["journals"] == json!("journals") {
        return text;
    }
    raw["server"]["journals"] = json!("journals");
    serde_json::to_string_pretty(&raw).expect("JSON values serialise")
}

/// Why the manifest's model provider is not one the simulator models, if it is not: an
/// Anthropic-shaped API (`POST .../v1/messages`).
fn model_not_modelled(raw: &Value) -> Option<String> {
    let provider = raw["model"]["provider"].as_str()?;
    (provider != "anthropic").then(|| {
        format!(
            "model.provider is {provider:?}; the simulator models Anthropic's API only: test with \"anthropic\", or \
             without the model section"
        )
    })
}

fn read_program(folder: &Path, tool: &ToolConfig, programs: &mut BTreeMap<String, String>) -> Result<String, String> {
    let source = read_bounded(&tool.program)?;
    programs.insert(relative_to(folder, &tool.program)?, source.clone());
    Ok(source)
}

/// A file's text, refused past `OWN_FILE_BYTES_MAX` or when it is not UTF-8.
fn read_bounded(path: &Path) -> Result<String, String> {
    String::from_utf8(read_bytes_bounded(path)?).map_err(|_| format!("{}: is not UTF-8 text", path.display()))
}

/// A file's bytes, at most `OWN_FILE_BYTES_MAX` (the read itself is capped: a device or a file
/// growing meanwhile reports a size it does not keep to).
fn read_bytes_bounded(path: &Path) -> Result<Vec<u8>, String> {
    read_bytes_capped(path, OWN_FILE_BYTES_MAX)
}

fn read_bytes_capped(path: &Path, cap: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(cap + 1).read_to_end(&mut bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() as u64 > cap {
        return Err(format!("{}: over the {cap} bytes the simulator reads of one file", path.display()));
    }
    Ok(bytes)
}

/// `path` relative to the manifest's folder, as the simulated disk holds it; a file outside
/// that folder is refused (the world is the folder).
fn relative_to(folder: &Path, path: &Path) -> Result<String, String> {
    let relative = path.strip_prefix(folder).unwrap_or(path);
    // `./refund.star` beside a manifest named from its own folder is inside it.
    let parts: Vec<Component> = relative.components().filter(|part| *part != Component::CurDir).collect();
    match parts.iter().all(|part| matches!(part, Component::Normal(_))) {
        true => Ok(parts.iter().collect::<std::path::PathBuf>().display().to_string()),
        false => Err(format!(
            "{}: outside the manifest's folder {}; the simulator serves the folder alone, so move the file into it",
            path.display(),
            folder.display()
        )),
    }
}

/// Every string value under a key named `key`, anywhere in `value`.
fn strings_under(value: &Value, key: &str) -> Vec<String> {
    let mut found = Vec::new();
    match value {
        Value::Object(object) => {
            for (name, inner) in object {
                match (name == key, inner) {
                    (true, Value::String(text)) => found.push(text.clone()),
                    _ => found.extend(strings_under(inner, key)),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| found.extend(strings_under(item, key))),
        _ => {}
    }
    found
}

/// A value for every `{"env": NAME}` of the manifest: a PostgreSQL grant's URL reaches the
/// simulated server, the model's key is the one the simulated provider takes, and any other
/// is a made-up secret.
fn variables_of(raw: &Value) -> BTreeMap<String, String> {
    let mut variables = BTreeMap::new();
    for name in env_names(raw) {
        // One run of letters and digits: the checker also searches for each such run of a
        // secret, so a word like `secret` must not be one.
        let letters: String = name.chars().filter(char::is_ascii_alphanumeric).collect();
        variables.insert(name.clone(), format!("{OWN_SECRET_PREFIX}{letters}7f3a91c2"));
    }
    for grant in grants_of(raw).filter(|grant| grant["cap"] == json!("db.postgres")) {
        if let Some(name) = grant["url"]["env"].as_str() {
            variables.insert(name.to_string(), crate::names::PG_URL.to_string());
        }
    }
    if let Some(name) = raw["model"]["api_key"]["env"].as_str() {
        variables.insert(name.to_string(), crate::names::MODEL_KEY.to_string());
    }
    variables
}

fn env_names(value: &Value) -> Vec<String> {
    match value {
        Value::Object(object) => match (object.get("env"), object.len()) {
            (Some(Value::String(name)), _) => vec![name.clone()],
            _ => object.values().flat_map(env_names).collect(),
        },
        Value::Array(items) => items.iter().flat_map(env_names).collect(),
        _ => Vec::new(),
    }
}

fn grants_of(raw: &Value) -> impl Iterator<Item = &Value> {
    let tools = ["tools", "resources"].into_iter().flat_map(|key| raw[key].as_array().into_iter().flatten());
    tools.flat_map(|tool| tool["grants"].as_object().into_iter().flat_map(Map::values))
}

/// Argument sets for a resource or a prompt, every value a string (as a URI or a prompt takes
/// it): the values the manifest offers as completions where it offers them, else the program's
/// examples (`examples_of`).
fn argument_sets(complete: &BTreeMap<String, Vec<String>>, input_schema: &Value) -> Vec<Map<String, Value>> {
    let examples = examples_of(input_schema);
    (0..EXAMPLES_PER_TOOL)
        .map(|variant| {
            let example = examples.get(variant).and_then(Value::as_object).cloned().unwrap_or_default();
            let mut set: Map<String, Value> = (example.into_iter())
                .map(|(name, value)| match value {
                    Value::String(text) => (name, Value::String(text)),
                    other => (name, Value::String(other.to_string())),
                })
                .collect();
            for (name, offered) in complete.iter().filter(|(_, offered)| !offered.is_empty()) {
                set.insert(name.clone(), json!(offered[variant % offered.len()]));
            }
            set
        })
        .collect()
}

/// `template` with each `{name}` replaced by that argument's value.
fn filled(template: &str, arguments: &Map<String, Value>) -> String {
    (arguments.iter()).fold(template.to_string(), |uri, (name, value)| {
        uri.replace(&format!("{{{name}}}"), value.as_str().unwrap_or_default())
    })
}

/// Argument sets for a tool: its docstring's examples where it gives them (`e.g. <JSON>` in a
/// parameter's description), else values drawn from each parameter's schema; a few sets, so
/// the workload repeats some (a `once` key met again).
pub fn examples_of(input_schema: &Value) -> Vec<Value> {
    let Some(properties) = input_schema["properties"].as_object() else { return vec![json!({})] };
    (0..EXAMPLES_PER_TOOL)
        .map(|variant| {
            let arguments: Map<String, Value> =
                properties.iter().map(|(name, schema)| (name.clone(), value_for(schema, variant))).collect();
            Value::Object(arguments)
        })
        .collect()
}

/// The `variant`th value for a parameter: its example first (then small variations of it),
/// else one its type allows.
fn value_for(schema: &Value, variant: usize) -> Value {
    if let Some(example) = schema["description"].as_str().and_then(example_in) {
        return vary(example, variant);
    }
    drawn(schema, variant)
}

/// The JSON value after `e.g. ` in a description, if one parses there.
fn example_in(description: &str) -> Option<Value> {
    let (_, after) = description.split_once("e.g. ")?;
    let mut values = serde_json::Deserializer::from_str(after).into_iter::<Value>();
    values.next()?.ok()
}

/// An example, or a variation of it: the same shape, with another number or suffix. The last
/// variation of a text names something that is not there (the payment API knows no intent
/// whose id says `missing`), as a model's guess at an id can.
fn vary(example: Value, variant: usize) -> Value {
    match (example, variant) {
        (example, 0) => example,
        (Value::String(text), MISSING_VARIANT) => json!(format!("{text}_missing")),
        (Value::String(text), n) => json!(format!("{text}{n}")),
        (Value::Number(number), n) => json!(number.as_i64().unwrap_or(1).saturating_add(n as i64)),
        (Value::Object(mut object), n) => {
            // A money amount varies within the cents, so it stays within what grants allow.
            // A currency without a minor unit (yen) keeps its whole amount.
            let whole_only = object.get("currency").and_then(Value::as_str).map(str::to_ascii_uppercase);
            let whole_only = whole_only.and_then(|currency| warden::base::money::exponent(&currency)) == Some(0);
            if let (Some(Value::String(amount)), false) = (object.get("amount"), whole_only) {
                let cents = format!("{}.{:02}", amount.split('.').next().unwrap_or("1"), n * 7 % 100);
                object.insert("amount".into(), json!(cents));
            }
            Value::Object(object)
        }
        (example, _) => example,
    }
}

fn drawn(schema: &Value, variant: usize) -> Value {
    let money = schema["properties"]["amount"].is_object() && schema["properties"]["currency"].is_object();
    match schema["type"].as_str() {
        _ if money => json!({"amount": format!("{}.00", 1 + variant * 3), "currency": "USD"}),
        Some("string") => json!(format!("sample text {variant}")),
        Some("integer") => json!(1 + variant),
        Some("number") => json!(1.5 + variant as f64),
        Some("boolean") => json!(variant % 2 == 0),
        Some("array") => json!([]),
        Some("object") => json!({}),
        _ => match schema["anyOf"].get(0) {
            Some(inner) => drawn(inner, variant),
            None => Value::Null,
        },
    }
}

/// What the simulator takes the services an operator's manifest writes to with an
/// idempotency key to do. Warden sends such a write again when its answer is lost, so a
/// service that ignores the key makes it twice. The payments API documents that it honours
/// keys, and is simulated so; for any other service half the seeds take it to honour keys and
/// half to ignore them (`plan::plan_in`), and what holds only with keys honoured is told as
/// its own finding (`checks::own::RELIES_ON_KEYS`). One line a grant.
pub fn assumptions(world: &WorldFile) -> Vec<String> {
    let Ok(manifest) = serde_json::from_str::<Value>(&world.manifest) else { return Vec::new() };
    let mut lines = Vec::new();
    for tool in manifest["tools"].as_array().into_iter().flatten() {
        let grants = tool["grants"].as_object().into_iter().flatten();
        // A grant's own keyed writes, and those of the parts it `needs` (a refund's `post`).
        let keyed = grants.flat_map(|(name, grant)| {
            let needs = grant["needs"]
                .as_object()
                .into_iter()
                .flatten()
                .map(move |(need, part)| (format!("{name}.needs.{need}"), part));
            std::iter::once((name.clone(), grant)).chain(needs)
        });
        for (at, grant) in keyed.filter(|(_, grant)| grant["idempotency_key"] == true) {
            let only: Vec<&str> = grant["only"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            let tool = tool["name"].as_str().unwrap_or("?");
            let urls = only.join(", ");
            lines.push(match only.iter().all(|url| url.ends_with("/v1/refunds")) {
                true => format!(
                    "assumed: `{tool}` grant `{at}` writes to the payments API ({urls}), which makes a write once \
                     per Idempotency-Key, as Stripe documents; a write Warden sends again after a lost answer is \
                     made once"
                ),
                false => format!(
                    "explored both: `{tool}` grant `{at}` writes with an Idempotency-Key to {urls}; half the seeds \
                     took that service to honour the key and half to ignore it (a write Warden sends again after \
                     a lost answer is then made twice): what holds only if it honours keys is told above as \
                     `{}`",
                    crate::checks::own::RELIES_ON_KEYS
                ),
            });
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_docstring_example_comes_first_then_variations_of_it() {
        let schema = json!({"properties": {
            "order": {"type": "string", "description": "The intent, e.g. \"pi_3Mtw\"."},
            "amount": {"type": "object", "properties": {"amount": {}, "currency": {}},
                       "description": "How much, e.g. {\"amount\": \"12.50\", \"currency\": \"USD\"}."},
            "count": {"type": "integer", "description": "How many."}}});
        let examples = examples_of(&schema);
        assert_eq!(
            examples[0],
            json!({"order": "pi_3Mtw", "amount": {"amount": "12.50", "currency": "USD"}, "count": 1})
        );
        assert_eq!(
            examples[2],
            json!({"order": "pi_3Mtw2", "amount": {"amount": "12.14", "currency": "USD"}, "count": 3})
        );
        assert_eq!(examples[MISSING_VARIANT]["order"], json!("pi_3Mtw_missing"), "the last names no intent");
    }

    #[test]
    fn a_file_beside_a_manifest_named_from_its_own_folder_is_inside_it() {
        assert_eq!(relative_to(Path::new(""), Path::new("./refund.star")).as_deref(), Ok("refund.star"));
        assert_eq!(relative_to(Path::new("shop"), Path::new("shop/lib/a.star")).as_deref(), Ok("lib/a.star"));
        assert!(relative_to(Path::new("shop"), Path::new("shop/../x.star")).is_err());
    }

    #[test]
    fn every_env_name_gets_a_value_and_a_database_url_reaches_the_simulated_server() {
        let raw = json!({"tools": [{"grants": {
            "pay": {"cap": "payments.stripe.refund", "needs": {"key": {"env": "STRIPE_SECRET_KEY"}}},
            "db": {"cap": "db.postgres", "url": {"env": "DESK_URL"}}}}]});
        let variables = variables_of(&raw);
        assert_eq!(variables["DESK_URL"], crate::names::PG_URL);
        assert!(variables["STRIPE_SECRET_KEY"].starts_with(OWN_SECRET_PREFIX));
    }
}
