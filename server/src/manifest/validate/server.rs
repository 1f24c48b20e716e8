//! The `server`, `limits` and `model` sections: journals, the store's lease, concurrency,
//! the model provider, and the environment variables secrets are named by.

use super::*;

/// `limits`: (max_steps, execution_ms), each range-checked, defaults filled in.
pub(super) fn limits_config(raw: Option<&RawLimits>, at: &str, problems: &mut Problems) -> (u64, u64) {
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
pub(super) fn store_lease_ms(lease: Option<&str>, problems: &mut Problems) -> u64 {
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

pub(super) fn server_config(raw: &RawServer, base: &Path, problems: &mut Problems) -> ServerConfig {
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

pub(super) fn concurrency(value: Option<u64>, default: u64, at: &str, problems: &mut Problems) -> u64 {
    match value {
        None => default,
        Some(n) if (1..=MAX_CONCURRENT_RUNS_LIMIT).contains(&n) => n,
        Some(n) => {
            problems.add(at, format!("{n} is outside 1..={MAX_CONCURRENT_RUNS_LIMIT}"));
            default
        }
    }
}

pub(super) fn model_config(raw: &RawModel, problems: &mut Problems) -> ModelConfig {
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
pub(super) fn model_url_problem(url: &str) -> Option<String> {
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

pub(super) fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

pub(super) fn check_env_name(name: &str, at: &str, problems: &mut Problems) {
    if !is_env_name(name) {
        problems.add(at, format!("`{name}` is not an environment variable name"));
    }
}

/// `db.postgres`'s `url`: `{ "env": NAME }`. Anything else is refused without being shown:
/// an operator who wrote the URL itself here wrote its password.
pub(super) fn url_variable(url: &serde_json::Value, at: &str, problems: &mut Problems) -> Option<String> {
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
