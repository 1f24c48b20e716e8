//! From raw manifest to validated config: defaults filled, durations and money parsed,
//! grants checked against the capability registry. Problems are collected, not stopped at.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::raw::*;
use super::*;
use crate::base::money::{Money, MONEY_MINOR_MAX};
use crate::limits::ACTIONS_PER_RUN_MAX;
use crate::manifest::kinds::{self, GrantKey, Kind};

/// Which units a duration field takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DurationUnits {
    /// s, m, h, d (`deadline`, `quota.window`).
    SecondsUp,
    /// m, h, d (`once.keep`, seed 000 section 5).
    MinutesUp,
}

/// The longest duration any field takes: 100 years, far below u64 milliseconds overflow.
const DURATION_MS_MAX: u64 = 100 * 365 * 24 * 3600 * 1000;

/// Parses a whole number followed by one unit letter, e.g. "120s", "24h", "30d".
pub fn parse_duration_ms(text: &str, units: DurationUnits) -> Result<u64, String> {
    let (allowed, example) = match units {
        DurationUnits::SecondsUp => ("s, m, h or d", "30s"),
        DurationUnits::MinutesUp => ("m, h or d", "30d"),
    };
    let shape = || format!("`{text}` is not a duration: write a whole number and {allowed}, e.g. \"{example}\"");
    let unit = text.chars().last().ok_or_else(shape)?;
    let number = &text[..text.len() - unit.len_utf8()];
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return Err(shape());
    }
    let unit_ms: u64 = match (unit, units) {
        ('s', DurationUnits::SecondsUp) => 1000,
        ('m', _) => 60 * 1000,
        ('h', _) => 3600 * 1000,
        ('d', _) => 24 * 3600 * 1000,
        _ => return Err(shape()),
    };
    let value: u64 = number.parse().map_err(|_| shape())?;
    let ms = value.checked_mul(unit_ms).filter(|&ms| ms <= DURATION_MS_MAX);
    match ms {
        Some(0) => Err(format!("`{text}` is zero; a duration must be positive")),
        Some(ms) => Ok(ms),
        None => Err(format!("`{text}` is longer than 100 years")),
    }
}

/// serde's message in a manifest author's words: the types a number or a value must have,
/// and for an unknown key the known one it is closest to.
fn in_plain_words(message: &str) -> String {
    let mut plain = message.to_string();
    for (serde, words) in [
        ("expected u64", "expected a whole number from 0"),
        ("expected u32", "expected a whole number from 0"),
        ("expected u16", "expected a whole number from 0"),
        ("expected u8", "expected a whole number from 0"),
        ("expected usize", "expected a whole number from 0"),
        ("expected i64", "expected a whole number"),
        ("expected f64", "expected a number"),
        ("expected a sequence", "expected a list ([...])"),
        ("expected a map", "expected an object ({...})"),
        ("expected a boolean", "expected true or false"),
    ] {
        plain = plain.replace(serde, words);
    }
    if let Some(suggestion) = closest_known_key(message) {
        // Before serde's " at line ..." so the location stays last.
        match plain.find(" at line ") {
            Some(at) => plain.insert_str(at, &format!("; did you mean `{suggestion}`?")),
            None => plain.push_str(&format!("; did you mean `{suggestion}`?")),
        }
    }
    plain
}

/// For serde's "unknown field `x`, expected one of `a`, `b`": the known key `x` is a typo
/// of (at most a third of its letters off), if any.
fn closest_known_key(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (unknown, rest) = rest.split_once('`')?;
    let known: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    let (distance, best) = known.iter().map(|key| (edit_distance(unknown, key), *key)).min()?;
    (distance > 0 && distance <= unknown.len().max(3) / 3).then(|| best.to_string())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substituted = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substituted.min(row[j] + 1).min(previous + 1);
        }
    }
    row[b.len()]
}

struct Problems<'a> {
    file: &'a Path,
    list: Vec<String>,
}

impl Problems<'_> {
    fn add(&mut self, at: &str, message: impl AsRef<str>) {
        self.list.push(format!("{}: {at}: {}", self.file.display(), message.as_ref()));
    }
}

pub fn parse(path: &Path, text: &[u8]) -> Result<Manifest, ManifestError> {
    let mut problems = Problems { file: path, list: Vec::new() };
    if text.len() > MANIFEST_BYTES_MAX {
        problems.add("(file)", format!("is {} bytes; the limit is {MANIFEST_BYTES_MAX}", text.len()));
        return Err(ManifestError { problems: problems.list, partial: None });
    }
    let mut deserializer = serde_json::Deserializer::from_slice(text);
    let mut raw: RawManifest = match serde_path_to_error::deserialize(&mut deserializer) {
        Ok(raw) => raw,
        Err(error) => {
            // A syntax error has no meaningful path (serde's is where it stopped, `server.?`):
            // its line and column say where.
            let syntax = error.inner().is_syntax() || error.inner().is_eof();
            let at = error.path().to_string();
            let at = if syntax {
                "(JSON syntax)".to_string()
            } else if at == "." {
                "(top level)".to_string()
            } else {
                at
            };
            problems.add(&at, in_plain_words(&error.inner().to_string()));
            return Err(ManifestError { problems: problems.list, partial: None });
        }
    };
    let base = crate::base::layout::folder_of(path);
    let server = server_config(&raw.server, base, &mut problems);
    let model = raw.model.as_ref().map(|model| model_config(model, &mut problems));
    let mut tools = Vec::new();
    let mut tools_with_problems = BTreeSet::new();
    let mut names = BTreeSet::new();
    if raw.tools.len() > TOOLS_MAX {
        problems.add("tools", format!("has {} tools; the limit is {TOOLS_MAX}", raw.tools.len()));
    }
    for (index, tool) in raw.tools.iter().enumerate() {
        let at = format!("tools[{index}]");
        if !names.insert(tool.name.clone()) {
            problems.add(&format!("{at}.name"), format!("`{}` is used by an earlier tool", tool.name));
        }
        let before = problems.list.len();
        let config = tool_config(tool, &at, base, &server, &mut problems);
        for (param, grant) in &config.grants {
            if matches!(grant, Grant::Capability(g) if g.cap == Kind::Model) && model.is_none() {
                problems.add(&format!("{at}.grants.{param}"), "a `model` grant needs the manifest's `model` section");
            }
        }
        check_tokens_fit_quota(&config, model.as_ref(), &at, &mut problems);
        if problems.list.len() > before {
            tools_with_problems.insert(tools.len());
        }
        tools.push(config);
    }
    let before = problems.list.len();
    let resources = resource_configs(std::mem::take(&mut raw.resources), base, &server, &mut names, &mut problems);
    let prompts = prompt_configs(&raw.prompts, base, &mut problems);
    let surface_clean = problems.list.len() == before;
    let manifest = Manifest { path: path.to_path_buf(), server, model, tools, resources, prompts };
    if problems.list.is_empty() {
        return Ok(manifest);
    }
    let partial = without_problems(manifest, &tools_with_problems, surface_clean);
    Err(ManifestError { problems: problems.list, partial: Some(Box::new(partial)) })
}

/// What can still be checked: the tools (and resources and prompts) that had no problem of
/// their own, so `warden check` reports their programs' problems in the same round.
fn without_problems(mut manifest: Manifest, tools_with_problems: &BTreeSet<usize>, surface_clean: bool) -> Manifest {
    manifest.tools = (manifest.tools.into_iter().enumerate())
        .filter(|(index, _)| !tools_with_problems.contains(index))
        .map(|(_, tool)| tool)
        .collect();
    if !surface_clean {
        manifest.resources.clear();
        manifest.prompts.clear();
    }
    manifest
}

/// Resources: each validated as the tool its reads run as (its name shares the tools' names:
/// it names its journals), with only grants that read, and a URI template.
fn resource_configs(
    raw: Vec<RawResource>,
    base: &Path,
    server: &ServerConfig,
    names: &mut BTreeSet<String>,
    problems: &mut Problems,
) -> Vec<ResourceConfig> {
    if raw.len() > TOOLS_MAX {
        problems.add("resources", format!("has {} resources; the limit is {TOOLS_MAX}", raw.len()));
    }
    let mut resources = Vec::new();
    for (index, resource) in raw.into_iter().enumerate() {
        let at = format!("resources[{index}]");
        let (tool, address) = resource.into_tool();
        let ResourceAddress { uri, mime_type, ttl, complete } = address;
        check_complete(&complete, &at, problems);
        if !names.insert(tool.name.clone()) {
            problems.add(&format!("{at}.name"), format!("`{}` is used by an earlier tool or resource", tool.name));
        }
        let config = tool_config(&tool, &at, base, server, problems);
        for (name, grant) in &config.grants {
            let Grant::Capability(grant) = grant else { continue };
            if !crate::manifest::kinds::grant_reads_only(grant) {
                problems.add(
                    &format!("{at}.grants.{name}"),
                    format!("`{}` can write; a resource is read-only, so its grants may only read", grant.cap.name()),
                );
            }
        }
        let variables = uri_variables(&uri).map_err(|e| problems.add(&format!("{at}.uri"), e)).unwrap_or_default();
        if mime_type.trim().is_empty() || !mime_type.contains('/') {
            problems.add(
                &format!("{at}.mime_type"),
                format!("`{mime_type}` is not a MIME type, e.g. \"application/json\""),
            );
        }
        let ttl_ms = ttl.as_ref().and_then(|text| {
            parse_duration_ms(text, DurationUnits::SecondsUp).map_err(|e| problems.add(&format!("{at}.ttl"), e)).ok()
        });
        for name in complete.keys().filter(|name| !variables.contains(name)) {
            problems.add(&format!("{at}.complete.{name}"), "is not a variable of the URI template");
        }
        resources.push(ResourceConfig { tool: config, uri_template: uri, variables, mime_type, ttl_ms, complete });
    }
    resources
}

/// The variables of an RFC 6570 level-1 template (`{name}`, no operators), in order; the
/// template needs a scheme.
pub fn uri_variables(template: &str) -> Result<Vec<String>, String> {
    if template.chars().count() > URI_TEMPLATE_CHARS_MAX {
        return Err(format!("is longer than {URI_TEMPLATE_CHARS_MAX} characters"));
    }
    let scheme_ok = template.split_once("://").is_some_and(|(scheme, _)| {
        !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    });
    if !scheme_ok {
        return Err(format!("`{template}` needs a scheme, e.g. \"ticket://{{ticket_id}}\""));
    }
    let mut variables = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        if rest.as_bytes()[open] == b'}' {
            return Err(format!("`{template}` has a `}}` without its `{{`"));
        }
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or_else(|| format!("`{template}` has a `{{` without its `}}`"))?;
        let name = &after[..close];
        let valid = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!("`{{{name}}}` is not a variable: write `{{name}}` with letters, digits and _"));
        }
        if variables.iter().any(|v| v == name) {
            return Err(format!("variable `{name}` appears twice"));
        }
        variables.push(name.to_string());
        rest = &after[close + 1..];
    }
    Ok(variables)
}

fn prompt_configs(raw: &[RawPrompt], base: &Path, problems: &mut Problems) -> Vec<PromptConfig> {
    if raw.len() > TOOLS_MAX {
        problems.add("prompts", format!("has {} prompts; the limit is {TOOLS_MAX}", raw.len()));
    }
    let mut names = BTreeSet::new();
    let mut prompts = Vec::new();
    for (index, prompt) in raw.iter().enumerate() {
        let at = format!("prompts[{index}]");
        check_tool_name(&prompt.name, &format!("{at}.name"), problems);
        if !names.insert(prompt.name.clone()) {
            problems.add(&format!("{at}.name"), format!("`{}` is used by an earlier prompt", prompt.name));
        }
        let (max_steps, execution_ms) = limits_config(prompt.limits.as_ref(), &at, problems);
        let complete = prompt.complete.clone().unwrap_or_default();
        check_complete(&complete, &at, problems);
        prompts.push(PromptConfig {
            name: prompt.name.clone(),
            title: prompt.title.clone(),
            description: prompt.description.clone(),
            program: base.join(&prompt.program),
            entry: prompt.entry.clone().unwrap_or_else(|| "main".to_string()),
            max_steps,
            execution_ms,
            complete,
        });
    }
    prompts
}

/// `complete`: bounded lists of bounded values.
fn check_complete(complete: &BTreeMap<String, Vec<String>>, at: &str, problems: &mut Problems) {
    for (name, values) in complete {
        if values.len() > COMPLETE_VALUES_MAX {
            problems.add(
                &format!("{at}.complete.{name}"),
                format!("has {} values; the limit is {COMPLETE_VALUES_MAX}", values.len()),
            );
        }
        if let Some(long) = values.iter().find(|v| v.chars().count() > COMPLETE_VALUE_CHARS_MAX) {
            problems.add(
                &format!("{at}.complete.{name}"),
                format!("`{long}` is longer than {COMPLETE_VALUE_CHARS_MAX} characters"),
            );
        }
    }
}

/// `limits`: (max_steps, execution_ms), each range-checked, defaults filled in.
fn limits_config(raw: Option<&RawLimits>, at: &str, problems: &mut Problems) -> (u64, u64) {
    let max_steps = match raw.and_then(|limits| limits.max_steps) {
        None => MAX_STEPS_DEFAULT,
        Some(steps) if (1..=MAX_STEPS_LIMIT).contains(&steps) => steps,
        Some(steps) => {
            problems.add(&format!("{at}.limits.max_steps"), format!("{steps} is outside 1..={MAX_STEPS_LIMIT}"));
            MAX_STEPS_DEFAULT
        }
    };
    let execution_ms = match raw.and_then(|limits| limits.execution_ms) {
        None => EXECUTION_MS_DEFAULT,
        Some(ms) if (EXECUTION_MS_MIN..=EXECUTION_MS_LIMIT).contains(&ms) => ms,
        Some(ms) => {
            let range = format!("{ms} is outside {EXECUTION_MS_MIN}..={EXECUTION_MS_LIMIT}");
            problems.add(&format!("{at}.limits.execution_ms"), range);
            EXECUTION_MS_DEFAULT
        }
    };
    (max_steps, execution_ms)
}

/// `server.store.postgres.lease`, in its range (`STORE_LEASE_MS_MIN` to `STORE_LEASE_MS_MAX`).
fn store_lease_ms(lease: Option<&str>, problems: &mut Problems) -> u64 {
    const FIELD: &str = "server.store.postgres.lease";
    let Some(lease) = lease else { return STORE_LEASE_MS_DEFAULT };
    match parse_duration_ms(lease, DurationUnits::SecondsUp) {
        Ok(ms) if (STORE_LEASE_MS_MIN..=STORE_LEASE_MS_MAX).contains(&ms) => ms,
        Ok(_) => {
            problems.add(FIELD, format!("`{lease}` is out of range: from 3s to 10m"));
            STORE_LEASE_MS_DEFAULT
        }
        Err(problem) => {
            problems.add(FIELD, problem);
            STORE_LEASE_MS_DEFAULT
        }
    }
}

fn server_config(raw: &RawServer, base: &Path, problems: &mut Problems) -> ServerConfig {
    if raw.name.trim().is_empty() {
        problems.add("server.name", "must not be empty");
    }
    if raw.journals.is_empty() {
        problems.add("server.journals", "must name a directory");
    }
    let keep = match &raw.keep {
        None => Keep::Days(KEEP_DAYS_DEFAULT),
        Some(serde_json::Value::String(text)) if text == "forever" => Keep::Forever,
        Some(value) => match value.as_u64() {
            Some(days) if (1..=KEEP_DAYS_LIMIT).contains(&days) => Keep::Days(days),
            _ => {
                problems.add(
                    "server.keep",
                    format!("`{value}` is not a number of days in 1..={KEEP_DAYS_LIMIT}, or \"forever\""),
                );
                Keep::Days(KEEP_DAYS_DEFAULT)
            }
        },
    };
    let max_concurrent_runs =
        concurrency(raw.max_concurrent_runs, MAX_CONCURRENT_RUNS_DEFAULT, "server.max_concurrent_runs", problems);
    let notify = raw.notify.clone().unwrap_or_default();
    if raw.notify.is_some() && notify.is_empty() {
        problems.add("server.notify", "must name a command, or be left out");
    }
    let notify_env = raw.notify_env.clone().unwrap_or_default();
    for (index, name) in notify_env.iter().enumerate() {
        check_env_name(name, &format!("server.notify_env[{index}]"), problems);
    }
    if raw.notify.is_none() && !notify_env.is_empty() {
        problems.add("server.notify_env", "is set but server.notify is not");
    }
    let shutdown_grace_ms = match raw.shutdown_grace.as_deref().map(|t| parse_duration_ms(t, DurationUnits::SecondsUp))
    {
        None => SHUTDOWN_GRACE_MS_DEFAULT,
        Some(Ok(ms)) if ms <= SHUTDOWN_GRACE_MS_LIMIT => ms,
        Some(Ok(ms)) => {
            problems.add("server.shutdown_grace", format!("{}s is over the limit of 1h", ms / 1000));
            SHUTDOWN_GRACE_MS_DEFAULT
        }
        Some(Err(problem)) => {
            problems.add("server.shutdown_grace", problem);
            SHUTDOWN_GRACE_MS_DEFAULT
        }
    };
    let store = match &raw.store {
        None => Store::Files,
        Some(store) => {
            check_env_name(&store.postgres.url.env, "server.store.postgres.url.env", problems);
            Store::Postgres { url_env: store.postgres.url.env.clone() }
        }
    };
    let store_lease_ms = store_lease_ms(raw.store.as_ref().and_then(|store| store.postgres.lease.as_deref()), problems);
    ServerConfig {
        name: raw.name.clone(),
        journals: base.join(&raw.journals),
        keep,
        max_concurrent_runs,
        notify,
        notify_env,
        shutdown_grace_ms,
        store_lease_ms,
        store,
    }
}

fn concurrency(value: Option<u64>, default: u64, at: &str, problems: &mut Problems) -> u64 {
    match value {
        None => default,
        Some(n) if (1..=MAX_CONCURRENT_RUNS_LIMIT).contains(&n) => n,
        Some(n) => {
            problems.add(at, format!("{n} is outside 1..={MAX_CONCURRENT_RUNS_LIMIT}"));
            default
        }
    }
}

fn model_config(raw: &RawModel, problems: &mut Problems) -> ModelConfig {
    check_env_name(&raw.api_key.env, "model.api_key.env", problems);
    // In a tool, the defaults of a script are not good enough: both are required.
    match raw.timeout_ms {
        None => problems.add("model.timeout_ms", "is required in a tool server"),
        Some(ms) if !(1..=MODEL_TIMEOUT_MS_LIMIT).contains(&ms) => {
            problems.add("model.timeout_ms", format!("{ms} is outside 1..={MODEL_TIMEOUT_MS_LIMIT}"))
        }
        Some(_) => {}
    }
    match raw.retries {
        None => problems.add("model.retries", "is required in a tool server"),
        Some(n) if n > MODEL_RETRIES_LIMIT => {
            problems.add("model.retries", format!("{n} is outside 0..={MODEL_RETRIES_LIMIT}"))
        }
        Some(_) => {}
    }
    let default_url = MODEL_PROVIDERS.iter().find(|(name, _)| *name == raw.provider).map(|(_, url)| *url);
    if default_url.is_none() {
        let known = MODEL_PROVIDERS.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(", ");
        problems.add("model.provider", format!("`{}` is not a provider; known: {known}", raw.provider));
    }
    if raw.model.is_empty() || raw.model.len() > 200 {
        problems.add("model.model", "must name a model (1 to 200 characters)");
    }
    let base_url = raw.base_url.clone().or(default_url.map(str::to_string)).unwrap_or_default();
    if let Some(problem) = model_url_problem(&base_url) {
        problems.add("model.base_url", problem);
    }
    ModelConfig {
        provider: raw.provider.clone(),
        model: raw.model.clone(),
        api_key_env: raw.api_key.env.clone(),
        timeout_ms: raw.timeout_ms.unwrap_or(0),
        retries: raw.retries.unwrap_or(0),
        base_url: base_url.trim_end_matches('/').to_string(),
    }
}

/// A model API root must be https, or http on loopback (a local gateway or test double): the
/// API key travels with every request.
fn model_url_problem(url: &str) -> Option<String> {
    let parsed = match url::Url::parse(url) {
        Ok(parsed) => parsed,
        Err(e) => return Some(format!("`{url}` is not a URL ({e})")),
    };
    let loopback = matches!(parsed.host_str(), Some("127.0.0.1" | "localhost" | "[::1]"));
    match parsed.scheme() {
        "https" => None,
        "http" if loopback => None,
        _ => Some(format!("`{url}` must be https (or http on loopback)")),
    }
    .or_else(|| {
        (!parsed.username().is_empty() || parsed.query().is_some())
            .then(|| format!("`{url}` must carry no user information and no query"))
    })
}

fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn check_env_name(name: &str, at: &str, problems: &mut Problems) {
    if !is_env_name(name) {
        problems.add(at, format!("`{name}` is not an environment variable name"));
    }
}

/// `db.postgres`'s `url`: `{ "env": NAME }`. Anything else is refused without being shown:
/// an operator who wrote the URL itself here wrote its password.
fn url_variable(url: &serde_json::Value, at: &str, problems: &mut Problems) -> Option<String> {
    let name = url.as_object().filter(|object| object.len() == 1).and_then(|object| object.get("env"));
    match name.and_then(serde_json::Value::as_str) {
        Some(name) if is_env_name(name) => Some(name.to_string()),
        _ => {
            problems.add(
                at,
                "must be { \"env\": NAME }, the environment variable that holds the connection URL; \
                 the URL itself holds a password and never goes in the manifest (what is written here is not shown)",
            );
            None
        }
    }
}

/// Validates one tool. Long on purpose: it reads as the manifest's `tools[]` keys in order,
/// each checked where it is read, with every problem collected (not stopped at).
fn tool_config(raw: &RawTool, at: &str, base: &Path, server: &ServerConfig, problems: &mut Problems) -> ToolConfig {
    check_tool_name(&raw.name, &format!("{at}.name"), problems);
    let entry = raw.entry.clone().unwrap_or_else(|| "main".to_string());
    let net = net_config(raw.net.as_ref(), at, problems);
    let mut grants = BTreeMap::new();
    let mut needs_network = false;
    for (name, grant) in &raw.grants {
        let grant_at = format!("{at}.grants.{name}");
        if let Some((grant, network)) = capability_grant(grant, &grant_at, base, problems) {
            needs_network |= network;
            grants.insert(name.clone(), Grant::Capability(grant));
        }
    }
    if needs_network {
        for (value, key) in [(net.connect_timeout_ms, "connect_timeout_ms"), (net.timeout_ms, "timeout_ms")] {
            if value.is_none() {
                problems.add(&format!("{at}.net.{key}"), "is required: a grant of this tool reaches the network")
            }
        }
    }
    let deadline_ms = raw.deadline.as_ref().and_then(|text| {
        parse_duration_ms(text, DurationUnits::SecondsUp).map_err(|e| problems.add(&format!("{at}.deadline"), e)).ok()
    });
    let max_concurrent_runs = concurrency(
        raw.max_concurrent_runs,
        server.max_concurrent_runs,
        &format!("{at}.max_concurrent_runs"),
        problems,
    );
    if max_concurrent_runs > server.max_concurrent_runs {
        problems.add(
            &format!("{at}.max_concurrent_runs"),
            format!("{max_concurrent_runs} is more than server.max_concurrent_runs ({})", server.max_concurrent_runs),
        );
    }
    let once = raw.once.as_ref().map(|once| once_config(once, &format!("{at}.once"), server, problems));
    let quota = raw.quota.as_ref().map(|quota| quota_config(quota, &format!("{at}.quota"), problems));
    check_grant_limits(&grants, quota.as_ref(), (&net, server), at, problems);
    let (max_steps, execution_ms) = limits_config(raw.limits.as_ref(), at, problems);
    if let Some(description) = &raw.description {
        if description.trim().is_empty() {
            problems
                .add(&format!("{at}.description"), "must not be empty (leave it out to use the program's docstring)");
        }
    }
    let config_json = canonical_tool_json(raw, &entry);
    let (scopes, requires, task, headers) = protocol_keys(raw, at, problems);
    ToolConfig {
        name: raw.name.clone(),
        title: raw.title.clone(),
        description: raw.description.clone(),
        program: base.join(&raw.program),
        entry,
        grants,
        net,
        deadline_ms,
        max_concurrent_runs,
        once,
        quota,
        scopes,
        requires,
        task,
        headers,
        input_schema: raw.input_schema.as_ref().map(|file| base.join(file)),
        max_steps,
        execution_ms,
        config_json,
    }
}

/// A tool's grants against its quota (money, tokens) and against the store's lease.
fn check_grant_limits(
    grants: &BTreeMap<String, Grant>,
    quota: Option<&QuotaConfig>,
    (net, server): (&crate::manifest::NetConfig, &ServerConfig),
    at: &str,
    problems: &mut Problems,
) {
    check_money_limits(grants, quota, at, problems);
    check_token_limits(grants, quota, at, problems);
    check_sends_fit_the_lease(grants, net, server, at, problems);
}

/// On the PostgreSQL store, every action a tool's grants may send fits the action rule with
/// the lease healthy: its longest send and `LEASE_SEND_MARGIN_MS` within two thirds of
/// `server.store.postgres.lease` (a renewal is due every third), or it could never be sent.
fn check_sends_fit_the_lease(
    grants: &BTreeMap<String, Grant>,
    net: &crate::manifest::NetConfig,
    server: &ServerConfig,
    at: &str,
    problems: &mut Problems,
) {
    if server.store == Store::Files {
        return;
    }
    let room = room_for_sends(server.store_lease_ms);
    for (name, grant) in grants {
        let Grant::Capability(grant) = grant else { continue };
        let Some(send) = grant.cap.longest_send_ms(net) else { continue };
        let needed = send.saturating_add(crate::limits::LEASE_SEND_MARGIN_MS);
        if needed > room {
            problems.add(
                &format!("{at}.net.timeout_ms"),
                format!(
                    "an action of grant `{name}` ({}) may take {send} ms to send (net.connect_timeout_ms and \
                     net.timeout_ms{}), which with a margin of {} ms is more than two thirds of \
                     server.store.postgres.lease ({room} of {} ms): it could still be on its way after the lease \
                     ended; set the lease to at least {}s, or shorten the timeouts",
                    grant.cap.name(),
                    if grant.cap == kinds::Kind::StripeRefund { ", twice: the currency is read first" } else { "" },
                    crate::limits::LEASE_SEND_MARGIN_MS,
                    server.store_lease_ms,
                    least_lease_seconds_for(needed)
                ),
            );
        }
    }
}

/// What a lease of `lease_ms` leaves a send: two thirds of it (what is left just before a
/// renewal is due), less the drift bound.
fn room_for_sends(lease_ms: u64) -> u64 {
    (lease_ms / 3 * 2).saturating_sub(lease_ms.div_ceil(1000) * crate::limits::LEASE_DRIFT_PER_MILLE)
}

/// The shortest lease, in whole seconds (as the manifest writes it), whose room holds `needed` ms.
fn least_lease_seconds_for(needed: u64) -> u64 {
    let mut seconds = needed.saturating_mul(3) / 2 / 1000;
    while room_for_sends(seconds.saturating_mul(1000)) < needed && seconds < STORE_LEASE_MS_MAX {
        seconds += 1;
    }
    seconds
}

/// What a tool asks of its callers' protocol: `scopes`, `requires`, `task`, `headers`.
fn protocol_keys(
    raw: &RawTool,
    at: &str,
    problems: &mut Problems,
) -> (Vec<String>, Vec<String>, crate::manifest::TaskSupport, BTreeMap<String, String>) {
    (
        scopes(&raw.scopes, &format!("{at}.scopes"), problems),
        requires(&raw.requires, &format!("{at}.requires"), problems),
        task_support(raw.task.as_deref(), &format!("{at}.task"), problems),
        mirrored_headers(raw.headers.as_ref(), &format!("{at}.headers"), problems),
    )
}

/// A tool's `requires`: client capabilities, each once.
fn requires(raw: &[String], at: &str, problems: &mut Problems) -> Vec<String> {
    let kinds = crate::manifest::CLIENT_CAPABILITIES;
    for (index, kind) in raw.iter().enumerate() {
        if !kinds.contains(&kind.as_str()) {
            problems
                .add(&format!("{at}[{index}]"), format!("`{kind}` is not a client capability ({})", kinds.join(", ")));
        } else if raw[..index].contains(kind) {
            problems.add(&format!("{at}[{index}]"), format!("`{kind}` is named twice"));
        }
    }
    raw.to_vec()
}

/// Arguments one tool may mirror in headers, and the longest header name.
pub const MIRRORED_HEADERS_MAX: usize = 8;
pub const HEADER_NAME_BYTES_MAX: usize = 64;

/// A tool's `headers`: argument -> the header's name after `Mcp-Param-` (letters, digits and
/// `-`), each name once.
fn mirrored_headers(
    raw: Option<&BTreeMap<String, String>>,
    at: &str,
    problems: &mut Problems,
) -> BTreeMap<String, String> {
    let Some(raw) = raw else { return BTreeMap::new() };
    if raw.len() > MIRRORED_HEADERS_MAX {
        problems.add(at, format!("{} headers; at most {MIRRORED_HEADERS_MAX}", raw.len()));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (argument, name) in raw {
        let valid = (1..=HEADER_NAME_BYTES_MAX).contains(&name.len())
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !valid {
            problems.add(
                &format!("{at}.{argument}"),
                format!("`{name}` is not a header name (1 to {HEADER_NAME_BYTES_MAX} letters, digits or `-`)"),
            );
        } else if !seen.insert(name.to_ascii_lowercase()) {
            problems.add(&format!("{at}.{argument}"), format!("the header `Mcp-Param-{name}` mirrors two arguments"));
        }
    }
    raw.clone()
}

/// A tool's `task`: "optional" or "required".
fn task_support(raw: Option<&str>, at: &str, problems: &mut Problems) -> crate::manifest::TaskSupport {
    use crate::manifest::TaskSupport;
    match raw {
        None => TaskSupport::Forbidden,
        Some("optional") => TaskSupport::Optional,
        Some("required") => TaskSupport::Required,
        Some(other) => {
            problems
                .add(at, format!("`{other}` is not a task support: \"optional\" or \"required\" (or leave it out)"));
            TaskSupport::Forbidden
        }
    }
}

fn check_tool_name(name: &str, at: &str, problems: &mut Problems) {
    if name == crate::base::layout::WAITING_DIR || name.starts_with("server.") || name.starts_with('.') {
        problems.add(
            at,
            format!(
                "`{name}` is reserved: the journals directory uses it (`waiting`, `server.*`, names starting with `.`)"
            ),
        );
    }
    if name == RUN_STATUS_TOOL {
        problems.add(at, format!("`{RUN_STATUS_TOOL}` is reserved for the server's own status tool"));
    }
    let valid = !name.is_empty()
        && name.chars().count() <= TOOL_NAME_CHARS_MAX
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if !valid {
        problems.add(at, format!("`{name}` is not a tool name: 1 to {TOOL_NAME_CHARS_MAX} of A-Z a-z 0-9 _ . -"));
    }
}

/// Validates one grant; returns it and whether it reaches the network. A grant's keys
/// depend on its kind and on each other (`each` and `max` in one currency, a composite
/// kind's `needs`): each helper below checks one family of keys, in the registry's order, so
/// the problems come out in the order of the keys they are about.
fn capability_grant(raw: &RawGrant, at: &str, base: &Path, problems: &mut Problems) -> Option<(CapabilityGrant, bool)> {
    let (kind, cap) = grant_kind(raw, at, problems)?;
    grant_keys_of_the_kind(raw, kind, cap, at, problems);
    let only = grant_only(raw, at, problems);
    let (each, max) = grant_money(raw, at, problems);
    let (needs, network) = grant_needs(raw, kind, cap, at, base, problems);
    if kind.kind == Kind::StripeRefund {
        refund_grant_rules(raw, &needs, at, problems);
    }
    let mut headers = BTreeMap::new();
    for (header, secret) in raw.headers.iter().flatten() {
        check_env_name(&secret.env, &format!("{at}.headers.{header}.env"), problems);
        headers.insert(header.clone(), (secret.prefix.clone().unwrap_or_default(), secret.env.clone()));
    }
    let mode = grant_mode(raw, at, problems);
    if let Some(tokens) = raw.max_tokens.filter(|tokens| !(1..=MODEL_MAX_TOKENS_LIMIT).contains(tokens)) {
        problems.add(&format!("{at}.max_tokens"), format!("{tokens} is outside 1..={MODEL_MAX_TOKENS_LIMIT}"));
    }
    let url_env = raw.url.as_ref().and_then(|url| url_variable(url, &format!("{at}.url"), problems));
    let grant = CapabilityGrant {
        max_tokens: raw.max_tokens,
        url_env,
        cap: kind.kind,
        only,
        each,
        max,
        uses: raw.uses,
        needs,
        idempotency_key: raw.idempotency_key.unwrap_or(false),
        headers,
        path: raw.path.as_ref().map(|p| base.join(p)),
        mode,
        init: raw.init.as_ref().map(|p| base.join(p)),
    };
    Some((grant, network))
}

/// The grant's kind, from its `cap`; none (with the problem) when it cannot be known.
fn grant_kind<'r>(
    raw: &'r RawGrant,
    at: &str,
    problems: &mut Problems,
) -> Option<(&'static kinds::KindSpec, &'r String)> {
    if raw.env.is_some() {
        problems.add(&format!("{at}.env"), "a secret reference belongs inside a grant's `needs`, not in `grants`");
        return None;
    }
    let Some(cap) = &raw.cap else {
        problems.add(&format!("{at}.cap"), "is required");
        return None;
    };
    let Some(kind) = kinds::find(cap) else {
        problems
            .add(&format!("{at}.cap"), format!("`{cap}` is not a capability kind; known kinds: {}", kinds::names()));
        return None;
    };
    Some((kind, cap))
}

/// Every key the grant has is one its kind takes, and every key its kind requires is there.
fn grant_keys_of_the_kind(raw: &RawGrant, kind: &kinds::KindSpec, cap: &str, at: &str, problems: &mut Problems) {
    let present: Vec<(GrantKey, bool)> = vec![
        (GrantKey::Only, raw.only.is_some()),
        (GrantKey::Each, raw.each.is_some()),
        (GrantKey::Max, raw.max.is_some()),
        (GrantKey::Uses, raw.uses.is_some()),
        (GrantKey::Needs, raw.needs.is_some()),
        (GrantKey::IdempotencyKey, raw.idempotency_key.is_some()),
        (GrantKey::Headers, raw.headers.is_some()),
        (GrantKey::Path, raw.path.is_some()),
        (GrantKey::Mode, raw.mode.is_some()),
        (GrantKey::Init, raw.init.is_some()),
        (GrantKey::MaxTokens, raw.max_tokens.is_some()),
        (GrantKey::Url, raw.url.is_some()),
    ];
    for (key, is_present) in &present {
        if *is_present && !kind.keys.contains(key) {
            problems.add(&format!("{at}.{}", key.name()), format!("is not a key of `{cap}`"));
        }
        if !*is_present && kind.required.contains(key) {
            problems.add(&format!("{at}.{}", key.name()), format!("is required by `{cap}`"));
        }
    }
}

/// The grant's URL patterns (`only`): at least one when given, each an http(s) URL.
fn grant_only(raw: &RawGrant, at: &str, problems: &mut Problems) -> Vec<String> {
    let only = raw.only.clone().unwrap_or_default();
    if raw.only.is_some() && only.is_empty() {
        problems.add(&format!("{at}.only"), "must list at least one URL pattern");
    }
    for (index, pattern) in only.iter().enumerate() {
        if !(pattern.starts_with("https://") || pattern.starts_with("http://")) {
            problems
                .add(&format!("{at}.only[{index}]"), format!("`{pattern}` is not an http:// or https:// URL pattern"));
        }
    }
    only
}

/// The grant's money limits (`each`, `max`, in one currency) and its `uses` in range.
fn grant_money(raw: &RawGrant, at: &str, problems: &mut Problems) -> (Option<Money>, Option<Money>) {
    let each = raw.each.as_ref().and_then(|m| money(m, &format!("{at}.each"), problems));
    let max = raw.max.as_ref().and_then(|m| money(m, &format!("{at}.max"), problems));
    if let (Some(each), Some(max)) = (&each, &max) {
        if each.currency != max.currency {
            problems.add(&format!("{at}.max"), format!("is in {} but `each` is in {}", max.currency, each.currency));
        }
    }
    if let Some(uses) = raw.uses.filter(|uses| !(1..=ACTIONS_PER_RUN_MAX).contains(uses)) {
        problems
            .add(&format!("{at}.uses"), format!("{uses} is outside 1..={ACTIONS_PER_RUN_MAX} (a run's most actions)"));
    }
    (each, max)
}

/// A composite kind's `needs` (secrets and inner grants, validated as grants themselves), and
/// whether the grant reaches the network through its kind or any inner grant.
fn grant_needs(
    raw: &RawGrant,
    kind: &kinds::KindSpec,
    cap: &str,
    at: &str,
    base: &Path,
    problems: &mut Problems,
) -> (BTreeMap<String, Grant>, bool) {
    let mut needs = BTreeMap::new();
    let mut network = kind.network;
    let Some(raw_needs) = &raw.needs else { return (needs, network) };
    for (name, need) in raw_needs {
        let need_at = format!("{at}.needs.{name}");
        match kind.needs.iter().find(|(n, _)| n == name) {
            None => problems.add(
                &need_at,
                format!("`{cap}` needs only: {}", kind.needs.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")),
            ),
            Some((_, None)) => match (&need.env, need.cap.is_some()) {
                (Some(env), false) => {
                    check_env_name(env, &format!("{need_at}.env"), problems);
                    needs.insert(name.clone(), Grant::Secret { env: env.clone() });
                }
                _ => problems.add(&need_at, "must be a secret reference { \"env\": NAME }"),
            },
            Some((_, Some(expected))) => {
                if need.cap.as_deref() != Some(expected.name()) {
                    problems.add(&format!("{need_at}.cap"), format!("must be `{expected}`"));
                }
                if let Some((grant, need_network)) = capability_grant(need, &need_at, base, problems) {
                    network |= need_network;
                    needs.insert(name.clone(), Grant::Capability(grant));
                }
            }
        }
    }
    for (name, _) in kind.needs {
        if !raw_needs.contains_key(*name) {
            problems.add(&format!("{at}.needs.{name}"), format!("is required by `{cap}`"));
        }
    }
    (needs, network)
}

/// A payments grant limits its money, and posts to exactly one refunds URL.
fn refund_grant_rules(raw: &RawGrant, needs: &BTreeMap<String, Grant>, at: &str, problems: &mut Problems) {
    if raw.each.is_none() && raw.max.is_none() {
        problems.add(at, "a payments grant must limit its money with `each`, `max` or both");
    }
    if let Some(Grant::Capability(post)) = needs.get("post") {
        if post.only.len() != 1 || post.only[0].contains('*') {
            problems.add(&format!("{at}.needs.post.only"), "must name exactly one refunds URL, without `*`");
        }
    }
}

/// A database grant's `mode`: "read" or "write".
fn grant_mode(raw: &RawGrant, at: &str, problems: &mut Problems) -> Option<DbMode> {
    match raw.mode.as_deref() {
        None => None,
        Some("read") => Some(DbMode::Read),
        Some("write") => Some(DbMode::Write),
        Some(other) => {
            problems.add(&format!("{at}.mode"), format!("`{other}` is neither \"read\" nor \"write\""));
            None
        }
    }
}

fn net_config(raw: Option<&RawNet>, at: &str, problems: &mut Problems) -> NetConfig {
    let timeout = |value: Option<u64>, key: &str, problems: &mut Problems| match value {
        Some(ms) if !(1..=NET_TIMEOUT_MS_LIMIT).contains(&ms) => {
            problems.add(&format!("{at}.net.{key}"), format!("{ms} is outside 1..={NET_TIMEOUT_MS_LIMIT}"));
            None
        }
        value => value,
    };
    let response_bytes_max = match raw.and_then(|net| net.response_bytes_max) {
        None => RESPONSE_BYTES_DEFAULT,
        Some(bytes) if (1..=RESPONSE_BYTES_LIMIT as u64).contains(&bytes) => bytes as usize,
        Some(bytes) => {
            problems
                .add(&format!("{at}.net.response_bytes_max"), format!("{bytes} is outside 1..={RESPONSE_BYTES_LIMIT}"));
            RESPONSE_BYTES_DEFAULT
        }
    };
    NetConfig {
        timeout_ms: timeout(raw.and_then(|net| net.timeout_ms), "timeout_ms", problems),
        connect_timeout_ms: timeout(raw.and_then(|net| net.connect_timeout_ms), "connect_timeout_ms", problems),
        response_bytes_max,
    }
}

/// Seed 000 section 6: a run's worst case per currency must be finite and held exactly, and
/// a money quota must bound every grant that moves money, in its own currency. Otherwise a
/// reservation holds less than a run can spend, and the quota is overspent.
/// A run is admitted only when its worst case fits the token quota: a quota smaller than one
/// run's worst case would refuse every call.
fn check_tokens_fit_quota(config: &ToolConfig, model: Option<&ModelConfig>, at: &str, problems: &mut Problems) {
    let Some(quota) = config.quota.as_ref().and_then(|quota| quota.tokens) else { return };
    let uses_set =
        config.grants.values().all(|g| !matches!(g, Grant::Capability(g) if g.cap == Kind::Model && g.uses.is_none()));
    let worst = super::worst_tokens(&config.grants, model);
    if uses_set && worst > quota {
        problems.add(
            &format!("{at}.quota.tokens"),
            format!(
                "{quota} is less than one run's worst case, {worst} (each model grant's max_tokens x uses x \
                 model.retries + 1 attempts x {} sends): every call would be refused; raise it, or lower max_tokens, \
                 uses or retries",
                super::MODEL_SENDS_MAX
            ),
        );
    }
}

/// A token quota counts open runs at their worst case: every model grant needs `uses`, and
/// the tool needs a model grant at all.
fn check_token_limits(
    grants: &BTreeMap<String, Grant>,
    quota: Option<&QuotaConfig>,
    at: &str,
    problems: &mut Problems,
) {
    if quota.and_then(|quota| quota.tokens).is_none() {
        return;
    }
    let models: Vec<(&String, &CapabilityGrant)> = (grants.iter())
        .filter_map(|(name, grant)| match grant {
            Grant::Capability(g) if g.cap == Kind::Model => Some((name, g)),
            _ => None,
        })
        .collect();
    if models.is_empty() {
        problems.add(&format!("{at}.quota.tokens"), "the tool has no `model` grant whose tokens it could count");
    }
    for (name, grant) in models {
        if grant.uses.is_none() {
            problems.add(
                &format!("{at}.quota.tokens"),
                format!("cannot bound `{at}.grants.{name}`: a model grant under a token quota needs `uses`"),
            );
        }
    }
}

fn check_money_limits(
    grants: &BTreeMap<String, Grant>,
    quota: Option<&QuotaConfig>,
    at: &str,
    problems: &mut Problems,
) {
    let mut worst: BTreeMap<String, i64> = BTreeMap::new();
    let mut currencies: BTreeSet<String> = BTreeSet::new();
    let quota_money = quota.and_then(|quota| quota.money.as_ref());
    for (name, grant) in grants {
        let Grant::Capability(grant) = grant else { continue };
        let grant_at = format!("{at}.grants.{name}");
        let Some(currency) = grant.each.as_ref().or(grant.max.as_ref()).map(|m| m.currency.clone()) else {
            continue;
        };
        currencies.insert(currency.clone());
        let limit = match (&grant.max, &grant.each, grant.uses) {
            (Some(max), _, _) => Some(max.minor),
            (None, Some(each), Some(uses)) => each.minor.checked_mul(uses as i64),
            (None, Some(each), None) => {
                if quota_money.is_some() {
                    problems.add(
                        &format!("{at}.quota.money"),
                        format!(
                            "cannot bound `{grant_at}`: it has `each` without `uses` or `max`, so a run may spend \
                             without limit; give the grant `uses` or `max`"
                        ),
                    );
                }
                // Without `uses`, a run's most actions bound what it can spend (and what a
                // settle can charge, which must stay exact).
                each.minor.checked_mul(ACTIONS_PER_RUN_MAX as i64)
            }
            (None, None, _) => continue,
        };
        let total = limit.and_then(|limit| worst.get(&currency).copied().unwrap_or(0).checked_add(limit));
        match total.filter(|&total| total <= MONEY_MINOR_MAX) {
            Some(total) => {
                worst.insert(currency.clone(), total);
            }
            None => problems.add(
                &format!("{grant_at}.uses"),
                format!("a run's worst case in {currency} is larger than Warden holds exactly; lower `each`, `uses` or `max`"),
            ),
        }
        if let Some(quota_money) = quota_money.filter(|m| m.currency != currency) {
            problems.add(
                &format!("{at}.quota.money"),
                format!(
                    "is in {} but `{grant_at}` moves {currency}: the quota would never limit it; use one currency",
                    quota_money.currency
                ),
            );
        }
    }
    if let Some(quota_money) = quota_money.filter(|m| !currencies.contains(&m.currency)) {
        problems.add(
            &format!("{at}.quota.money"),
            format!("no grant of this tool moves {}: the quota would never limit anything", quota_money.currency),
        );
    }
}

fn money(raw: &RawMoney, at: &str, problems: &mut Problems) -> Option<Money> {
    Money::parse(&raw.amount, &raw.currency).map_err(|e| problems.add(at, e)).ok()
}

fn once_config(raw: &RawOnce, at: &str, server: &ServerConfig, problems: &mut Problems) -> OnceConfig {
    if raw.by.is_empty() {
        problems.add(&format!("{at}.by"), "must name at least one argument");
    }
    let server_keep_ms = match server.keep {
        Keep::Days(days) => Some(days * 24 * 3600 * 1000),
        Keep::Forever => None,
    };
    let keep_ms = match &raw.keep {
        None => server_keep_ms.unwrap_or(DURATION_MS_MAX),
        Some(text) => match parse_duration_ms(text, DurationUnits::MinutesUp) {
            Ok(ms) => {
                if server_keep_ms.is_some_and(|max| ms > max) {
                    problems.add(&format!("{at}.keep"), format!("`{text}` is longer than server.keep"));
                }
                ms
            }
            Err(e) => {
                problems.add(&format!("{at}.keep"), e);
                0
            }
        },
    };
    let per_principal = per_principal(raw.per.as_deref(), &format!("{at}.per"), problems);
    OnceConfig { by: raw.by.clone(), keep_ms, per_principal }
}

fn quota_config(raw: &RawQuota, at: &str, problems: &mut Problems) -> QuotaConfig {
    let window_ms = parse_duration_ms(&raw.window, DurationUnits::SecondsUp)
        .map_err(|e| problems.add(&format!("{at}.window"), e))
        .unwrap_or(0);
    if let Some(calls) = raw.calls.filter(|calls| !(1..=QUOTA_CALLS_LIMIT).contains(calls)) {
        problems.add(&format!("{at}.calls"), format!("{calls} is outside 1..={QUOTA_CALLS_LIMIT}"));
    }
    if raw.calls.is_none() && raw.money.is_none() && raw.tokens.is_none() {
        problems.add(at, "must limit `calls`, `money` or `tokens`");
    }
    if let Some(tokens) = raw.tokens.filter(|tokens| !(1..=QUOTA_TOKENS_LIMIT).contains(tokens)) {
        problems.add(&format!("{at}.tokens"), format!("{tokens} is outside 1..={QUOTA_TOKENS_LIMIT}"));
    }
    let money = raw.money.as_ref().and_then(|m| money(m, &format!("{at}.money"), problems));
    if money.as_ref().is_some_and(|m| m.minor == 0) {
        problems.add(&format!("{at}.money"), "must be more than zero");
    }
    let per_principal = per_principal(raw.per.as_deref(), &format!("{at}.per"), problems);
    QuotaConfig { window_ms, calls: raw.calls, money, tokens: raw.tokens, per_principal }
}

/// `per`: absent (shared by every caller) or `"principal"` (each principal its own).
fn per_principal(per: Option<&str>, at: &str, problems: &mut Problems) -> bool {
    match per {
        None => false,
        Some("principal") => true,
        Some(other) => {
            problems.add(at, format!("`{other}` is not `\"principal\"` (leave it out to share among all callers)"));
            false
        }
    }
}

/// A tool's `scopes`: OAuth scope tokens (RFC 6749: printable, no space or quote).
fn scopes(raw: &[String], at: &str, problems: &mut Problems) -> Vec<String> {
    if raw.len() > SCOPES_PER_TOOL_MAX {
        problems.add(at, format!("{} scopes; at most {SCOPES_PER_TOOL_MAX}", raw.len()));
    }
    for (index, scope) in raw.iter().enumerate() {
        let valid = (1..=SCOPE_BYTES_MAX).contains(&scope.len())
            && scope.bytes().all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\');
        if !valid {
            problems.add(
                &format!("{at}[{index}]"),
                format!("`{scope}` is not a scope (1 to {SCOPE_BYTES_MAX} printable characters, no space, quote or backslash)"),
            );
        }
    }
    raw.to_vec()
}

/// Scopes one tool may require, and the longest scope.
pub const SCOPES_PER_TOOL_MAX: usize = 16;
pub const SCOPE_BYTES_MAX: usize = 128;

/// The tool's config, re-serialised canonically (sorted keys) for hashing into journals.
/// How the keys added to a tool after its binding was first defined read in its debug text
/// when none is written (they are `RawTool`'s last fields).
const LATER_KEYS_UNWRITTEN: &str = ", requires: [], task: None, headers: None, input_schema: None }";

fn canonical_tool_json(raw: &RawTool, entry: &str) -> String {
    // Debug output of the raw structs is stable (field order is declaration order, maps
    // are BTreeMaps), deterministic and covers every key the operator wrote. The keys added
    // last are left out when not written, so a tool without them keeps its binding (runs in
    // progress across an upgrade resume, and `warden.lock` digests hold).
    let text = format!("{raw:?}");
    let text = text.strip_suffix(LATER_KEYS_UNWRITTEN).map(|kept| format!("{kept} }}")).unwrap_or(text);
    format!("{text}|entry={entry}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An operator who writes the connection URL itself where its variable belongs is told
    /// so, and the URL (with its password) is not echoed back.
    #[test]
    fn a_postgres_url_written_into_the_manifest_is_refused_without_being_shown() {
        let tool = |url: &str| {
            format!(
                r#"{{"server":{{"name":"s","journals":"j"}},"tools":[{{"name":"t","program":"t.star",
                "net":{{"timeout_ms":1000,"connect_timeout_ms":1000}},
                "grants":{{"db":{{"cap":"db.postgres","mode":"write","url":{url}}}}}}}]}}"#
            )
        };
        for url in [r#""postgres://app:SECRETPW@db/desk""#, r#"{"env":"postgres://app:SECRETPW@db/desk"}"#] {
            let found = problems(&tool(url));
            assert!(found.iter().any(|p| p.contains("tools[0].grants.db.url")), "{found:?}");
            assert!(!found.concat().contains("SECRETPW"), "the password was echoed: {found:?}");
        }
        let found = problems(
            &tool(r#"{"env":"DESK_URL"}"#).replace(r#""net":{"timeout_ms":1000,"connect_timeout_ms":1000},"#, ""),
        );
        assert!(found.concat().contains("net.timeout_ms"), "{found:?}");
    }

    /// `server.store.postgres.lease` defaults to 30 s and is refused outside 3 s to 10 min,
    /// naming the field.
    #[test]
    fn the_store_lease_is_range_checked() {
        let manifest = |lease: &str| {
            format!(
                r#"{{"server":{{"name":"s","journals":"j","store":{{"postgres":{{"url":{{"env":"STORE_URL"}}{lease}}}}}}},
                "tools":[{{"name":"t","program":"t.star"}}]}}"#
            )
        };
        let lease_of = |lease: &str| {
            Manifest::parse(Path::new("m.json"), manifest(lease).as_bytes())
                .expect("a valid manifest")
                .server
                .store_lease_ms
        };
        assert_eq!(lease_of(""), STORE_LEASE_MS_DEFAULT);
        assert_eq!(lease_of(r#","lease":"3s""#), 3_000);
        assert_eq!(lease_of(r#","lease":"10m""#), 600_000);
        for wrong in [r#","lease":"2s""#, r#","lease":"11m""#, r#","lease":"soon""#] {
            let found = problems(&manifest(wrong));
            assert!(found.iter().any(|p| p.contains("server.store.postgres.lease")), "{wrong}: {found:?}");
        }
    }

    /// The action rule's bound at `warden check`: on the store, a grant's longest send (twice
    /// for a refund, a session's grace more for `db.postgres`) and the margin must fit two
    /// thirds of the lease less the drift; the refusal names the grant and a lease that fits,
    /// and that lease is accepted. On files nothing bounds a send.
    #[test]
    fn every_send_must_fit_two_thirds_of_the_store_s_lease() {
        let manifest = |store: &str, cap: &str, timeout: u64| {
            let grant = match cap {
                "db.postgres" => r#"{"cap":"db.postgres","mode":"write","url":{"env":"DB_URL"}}"#.to_string(),
                _ => format!(r#"{{"cap":"{cap}","only":["https://example.com/*"]}}"#),
            };
            format!(
                r#"{{"server":{{"name":"s","journals":"j"{store}}},
                "tools":[{{"name":"t","program":"t.star","net":{{"timeout_ms":{timeout},"connect_timeout_ms":1000}},
                "grants":{{"g":{grant}}}}}]}}"#
            )
        };
        let store =
            |lease: &str| format!(r#","store":{{"postgres":{{"url":{{"env":"STORE_URL"}},"lease":"{lease}"}}}}"#);
        let fits = |store: &str, cap: &str, timeout: u64| {
            let found = problems(&manifest(store, cap, timeout));
            found.iter().all(|p| !p.contains("net.timeout_ms")).then_some(()).ok_or(found)
        };
        // 3s: 2 s less 3 ms of drift holds 1000 + 497 ms and the 500 ms margin, not a ms more.
        assert!(fits(&store("3s"), "net.http.post", 497).is_ok());
        let refused = fits(&store("3s"), "net.http.post", 498).unwrap_err();
        assert!(refused.iter().any(|p| p.contains("grant `g`") && p.contains("at least")), "{refused:?}");
        assert!(fits("", "net.http.post", 60_000).is_ok(), "files bound no send");
        // The lease the refusal names is one that fits.
        for (cap, timeout) in [("net.http.post", 20_000), ("db.postgres", 20_000)] {
            let found = fits(&store("30s"), cap, timeout).unwrap_err();
            let named = found.concat().split("at least ").nth(1).unwrap().split('s').next().unwrap().to_string();
            let seconds: u64 = named.parse().unwrap();
            assert!(fits(&store(&format!("{seconds}s")), cap, timeout).is_ok(), "{cap}: {found:?}");
            let shorter = format!("{}s", seconds - 1);
            assert!(fits(&store(&shorter), cap, timeout).is_err(), "{cap}: {seconds}s is not the least");
        }
    }

    /// A tool that writes neither `requires` nor `task` keeps the binding it had before they
    /// existed: runs in progress across an upgrade resume, and `warden.lock` digests hold.
    #[test]
    fn keys_added_later_leave_an_unwritten_tool_s_binding_alone() {
        let parse = |extra: &str| {
            let text = format!(
                r#"{{"server":{{"name":"s","journals":"j"}},"tools":[{{"name":"t","program":"t.star"{extra}}}]}}"#
            );
            Manifest::parse(Path::new("m.json"), text.as_bytes()).expect("a valid manifest").tools[0]
                .config_json
                .clone()
        };
        let plain = parse("");
        assert!(plain.ends_with(r#"scopes: [] }|entry=main"#), "{plain}");
        assert!(!plain.contains("requires"), "{plain}");
        assert_ne!(parse(r#","task":"optional""#), plain);
        assert_ne!(parse(r#","requires":["sampling"]"#), plain);
        assert_ne!(parse(r#","headers":{"a":"A"}"#), plain);
        assert_ne!(parse(r#","input_schema":"s.json""#), plain);
        assert!(problems(r#"{"server":{"name":"s","journals":"j"},"tools":[{"name":"t","program":"t.star","task":"maybe","requires":["roots","roots","files"]}]}"#)
            .len() == 3);
    }

    fn problems(text: &str) -> Vec<String> {
        match Manifest::parse(Path::new("m.json"), text.as_bytes()) {
            Ok(_) => vec![],
            Err(error) => error.problems,
        }
    }

    #[test]
    fn model_settings_are_checked_with_their_paths() {
        let found = problems(
            r#"{"server":{"name":"s","journals":"j"},
                "model":{"provider":"other","model":"","api_key":{"env":"K"},"timeout_ms":0,"retries":11,
                         "base_url":"http://models.example.com"},
                "tools":[{"name":"a","program":"a.star","grants":{"llm":{"cap":"model","max_tokens":0,"only":["https://x/*"]}}}]}"#,
        );
        let text = found.join("\n");
        for expected in [
            "model.provider: `other` is not a provider",
            "model.model",
            "model.timeout_ms: 0 is outside",
            "model.retries: 11 is outside",
            "model.base_url: `http://models.example.com` must be https (or http on loopback)",
            "tools[0].grants.llm.max_tokens: 0 is outside",
            "tools[0].grants.llm.only: is not a key of `model`",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
        let without_model = problems(
            r#"{"server":{"name":"s","journals":"j"},
                "tools":[{"name":"a","program":"a.star","grants":{"llm":{"cap":"model","max_tokens":10}}}]}"#,
        );
        assert!(without_model.iter().any(|p| p.contains("needs the manifest's `model` section")), "{without_model:?}");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("120s", DurationUnits::SecondsUp), Ok(120_000));
        assert_eq!(parse_duration_ms("30d", DurationUnits::MinutesUp), Ok(30 * 24 * 3600 * 1000));
        assert!(parse_duration_ms("10s", DurationUnits::MinutesUp).is_err());
        assert!(parse_duration_ms("0h", DurationUnits::SecondsUp).is_err());
        assert!(parse_duration_ms("1.5h", DurationUnits::SecondsUp).is_err());
        assert!(parse_duration_ms("h", DurationUnits::SecondsUp).is_err());
        // The example a refusal gives is one the field takes.
        assert!(parse_duration_ms("abc", DurationUnits::SecondsUp).unwrap_err().contains(r#"e.g. "30s""#));
        assert!(parse_duration_ms("30s", DurationUnits::MinutesUp).unwrap_err().contains(r#"e.g. "30d""#));
    }

    #[test]
    fn unknown_keys_are_refused_with_their_path() {
        let found = problems(
            r#"{"server":{"name":"s","journals":"j"},"tools":[{"name":"a","program":"a.star","quota":{"window":"1h","calls":1,"extra":1}}]}"#,
        );
        assert_eq!(found.len(), 1);
        assert!(found[0].starts_with("m.json: tools[0].quota.extra: unknown field `extra`"), "{found:?}");
        assert!(found[0].contains("at line 1 column"), "{found:?}");
    }

    #[test]
    fn every_semantic_problem_is_reported() {
        let found = problems(
            r#"{"server":{"name":"s","journals":"j","keep":0},
                "tools":[{"name":"warden_run_status","program":"a.star","quota":{"window":"1y"},
                          "grants":{"pay":{"cap":"net.http.post","only":["ftp://x"]}}}]}"#,
        );
        let text = found.join("\n");
        for expected in [
            "server.keep",
            "tools[0].name: `warden_run_status` is reserved",
            "tools[0].quota.window",
            "tools[0].quota: must limit",
            "tools[0].grants.pay.only[0]",
            "tools[0].net.connect_timeout_ms: is required",
            "tools[0].net.timeout_ms: is required",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
    }

    #[test]
    fn names_the_journals_directory_uses_and_unlimited_payments_are_refused() {
        for name in ["waiting", "server.refunds", ".hidden"] {
            let found = problems(&format!(
                r#"{{"server":{{"name":"s","journals":"j"}},"tools":[{{"name":"{name}","program":"a.star"}}]}}"#
            ));
            assert!(
                found.iter().any(|p| p.contains("is reserved: the journals directory uses it")),
                "{name}: {found:?}"
            );
        }
        let found = problems(
            r#"{"server":{"name":"s","journals":"j"},
                "tools":[{"name":"refund","program":"r.star","net":{"timeout_ms":1,"connect_timeout_ms":1},
                  "grants":{"pay":{"cap":"payments.stripe.refund",
                    "needs":{"get":{"cap":"net.http.get","only":["https://x/v1/payment_intents/*"]},
                             "post":{"cap":"net.http.post","only":["https://x/v1/refunds"]},
                             "key":{"env":"K"}}}}}]}"#,
        );
        assert!(found.iter().any(|p| p.contains("must limit its money with `each`, `max` or both")), "{found:?}");
    }

    #[test]
    fn composite_grants_check_their_needs() {
        let found = problems(
            r#"{"server":{"name":"s","journals":"j"},
                "tools":[{"name":"refund","program":"r.star","net":{"timeout_ms":1,"connect_timeout_ms":1},
                  "grants":{"pay":{"cap":"payments.stripe.refund","each":{"amount":"50.00","currency":"USD"},"uses":1,
                    "needs":{"get":{"cap":"net.http.get","only":["https://api.stripe.com/v1/payment_intents/*"]},
                             "post":{"cap":"net.http.post","only":["https://api.stripe.com/v1/refunds"],"idempotency_key":true},
                             "key":{"env":"STRIPE_SECRET_KEY"}}}}}]}"#,
        );
        assert!(found.is_empty(), "{found:?}");
        let found = problems(
            r#"{"server":{"name":"s","journals":"j"},
                "tools":[{"name":"refund","program":"r.star","net":{"timeout_ms":1,"connect_timeout_ms":1},
                  "grants":{"pay":{"cap":"payments.stripe.refund","needs":{"get":{"cap":"net.http.post","only":["https://x/*"]}}}}}]}"#,
        );
        let text = found.join("\n");
        assert!(text.contains("needs.get.cap: must be `net.http.get`"), "{text}");
        assert!(text.contains("needs.post: is required"), "{text}");
        assert!(text.contains("needs.key: is required"), "{text}");
    }
}
