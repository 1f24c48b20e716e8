//! One tool's settings: its name, protocol keys, `net`, `once`, `quota`, scopes, and the
//! limits its grants and model calls must fit (money, tokens, the store's lease).

use super::*;

/// Validates one tool. Long on purpose: it reads as the manifest's `tools[]` keys in order,
/// each checked where it is read, with every problem collected (not stopped at).
pub(super) fn tool_config(
    raw: &RawTool,
    at: &str,
    base: &Path,
    server: &ServerConfig,
    problems: &mut Problems,
) -> ToolConfig {
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
    let max_concurrent_runs = tool_concurrency(raw.max_concurrent_runs, server, at, problems);
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

/// A tool's `max_concurrent_runs`: the server's when left out, and never more than it.
fn tool_concurrency(raw: Option<u64>, server: &ServerConfig, at: &str, problems: &mut Problems) -> u64 {
    let most = concurrency(raw, server.max_concurrent_runs, &format!("{at}.max_concurrent_runs"), problems);
    if most > server.max_concurrent_runs {
        problems.add(
            &format!("{at}.max_concurrent_runs"),
            format!("{most} is more than server.max_concurrent_runs ({})", server.max_concurrent_runs),
        );
    }
    most
}

/// A tool's grants against its quota (money, tokens) and against the store's lease.
pub(super) fn check_grant_limits(
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
pub(super) fn check_sends_fit_the_lease(
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
pub(super) fn room_for_sends(lease_ms: u64) -> u64 {
    (lease_ms / 3 * 2).saturating_sub(lease_ms.div_ceil(1000) * crate::limits::LEASE_DRIFT_PER_MILLE)
}

/// The shortest lease, in whole seconds (as the manifest writes it), whose room holds `needed` ms.
pub(super) fn least_lease_seconds_for(needed: u64) -> u64 {
    let mut seconds = needed.saturating_mul(3) / 2 / 1000;
    while room_for_sends(seconds.saturating_mul(1000)) < needed && seconds < STORE_LEASE_MS_MAX {
        seconds += 1;
    }
    seconds
}

/// What a tool asks of its callers' protocol: `scopes`, `requires`, `task`, `headers`.
pub(super) fn protocol_keys(
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
pub(super) fn requires(raw: &[String], at: &str, problems: &mut Problems) -> Vec<String> {
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
pub(super) fn mirrored_headers(
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
pub(super) fn task_support(raw: Option<&str>, at: &str, problems: &mut Problems) -> crate::manifest::TaskSupport {
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

pub(super) fn check_tool_name(name: &str, at: &str, problems: &mut Problems) {
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

pub(super) fn net_config(raw: Option<&RawNet>, at: &str, problems: &mut Problems) -> NetConfig {
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
pub(super) fn check_tokens_fit_quota(
    config: &ToolConfig,
    model: Option<&ModelConfig>,
    at: &str,
    problems: &mut Problems,
) {
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
pub(super) fn check_token_limits(
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

pub(super) fn check_money_limits(
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

pub(super) fn money(raw: &RawMoney, at: &str, problems: &mut Problems) -> Option<Money> {
    Money::parse(&raw.amount, &raw.currency).map_err(|e| problems.add(at, e)).ok()
}

pub(super) fn once_config(raw: &RawOnce, at: &str, server: &ServerConfig, problems: &mut Problems) -> OnceConfig {
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

pub(super) fn quota_config(raw: &RawQuota, at: &str, problems: &mut Problems) -> QuotaConfig {
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
pub(super) fn per_principal(per: Option<&str>, at: &str, problems: &mut Problems) -> bool {
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
pub(super) fn scopes(raw: &[String], at: &str, problems: &mut Problems) -> Vec<String> {
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
