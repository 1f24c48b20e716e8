//! A tool's grants checked against the capability registry: the kind, its keys, `only`,
//! money, `needs` (a composite kind's parts and secrets), a database's mode.

use super::*;

/// Validates one grant; returns it and whether it reaches the network. A grant's keys
/// depend on its kind and on each other (`each` and `max` in one currency, a composite
/// kind's `needs`): each helper below checks one family of keys, in the registry's order, so
/// the problems come out in the order of the keys they are about.
pub(super) fn capability_grant(
    raw: &RawGrant,
    at: &str,
    base: &Path,
    problems: &mut Problems,
) -> Option<(CapabilityGrant, bool)> {
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
pub(super) fn grant_kind<'r>(
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
pub(super) fn grant_keys_of_the_kind(
    raw: &RawGrant,
    kind: &kinds::KindSpec,
    cap: &str,
    at: &str,
    problems: &mut Problems,
) {
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
pub(super) fn grant_only(raw: &RawGrant, at: &str, problems: &mut Problems) -> Vec<String> {
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
pub(super) fn grant_money(raw: &RawGrant, at: &str, problems: &mut Problems) -> (Option<Money>, Option<Money>) {
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
pub(super) fn grant_needs(
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
pub(super) fn refund_grant_rules(raw: &RawGrant, needs: &BTreeMap<String, Grant>, at: &str, problems: &mut Problems) {
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
pub(super) fn grant_mode(raw: &RawGrant, at: &str, problems: &mut Problems) -> Option<DbMode> {
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
