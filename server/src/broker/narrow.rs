//! Narrowing a capability inside a program (seed 000 section 10): `pay.narrow(only=[...],
//! each=, max=, uses=)` returns a handle whose limits are at most the parent's, typically to a
//! value the program computed (the refund of the one intent it read, for its amount). The
//! narrowing travels in every action taken through the handle, so the journal's begin record
//! holds it and a replay must narrow the same way (the action compares equal or the run stops
//! as not deterministic). Actions through a narrowed handle count against the grant as well.
//! Annotations stay derived from the manifest: narrowing never widens, so they stay true.

use serde::{Deserialize, Serialize};

use super::{urls, Action, Kind, Method, Usage};
use crate::base::money::Money;
use crate::limits::PAYMENT_INTENT_BYTES_MAX;
use crate::manifest::CapabilityGrant;

/// The most `only` entries a narrowing holds.
pub const NARROW_ONLY_MAX: usize = 64;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Narrowing {
    /// Exact URLs (HTTP kinds) or payment intent ids (refunds); empty: the grant's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub only: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub each: Option<Money>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<Money>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses: Option<u64>,
}

impl Narrowing {
    /// `wanted` as a narrowing of `grant` (through `current`, a handle already narrowed):
    /// every limit at most the one it narrows, unspecified ones kept; or why it is wider.
    pub fn within(
        wanted: Narrowing,
        grant: &CapabilityGrant,
        current: Option<&Narrowing>,
    ) -> Result<Narrowing, String> {
        let current = current.cloned().unwrap_or_default();
        let cap = &grant.cap;
        if wanted.only.len() > NARROW_ONLY_MAX {
            return Err(format!("narrow: `only` holds {} entries; the limit is {NARROW_ONLY_MAX}", wanted.only.len()));
        }
        let mut only = Vec::with_capacity(wanted.only.len());
        for entry in &wanted.only {
            let kept = only_entry_within(grant, entry)?;
            if !current.only.is_empty() && !current.only.contains(&kept) {
                return Err(format!("narrow: `{entry}` is not in the handle's `only`; a narrowing cannot widen it"));
            }
            only.push(kept);
        }
        let only = if only.is_empty() { current.only } else { only };
        let each = money_within("each", wanted.each, [grant.each.as_ref(), current.each.as_ref()], grant)?;
        let max = money_within("max", wanted.max, [grant.max.as_ref(), current.max.as_ref()], grant)?;
        let uses = match wanted.uses {
            None => current.uses,
            Some(uses) => {
                for (limit, of) in [(grant.uses, "the grant's"), (current.uses, "the handle's")] {
                    if limit.is_some_and(|limit| uses > limit) {
                        return Err(format!("narrow: uses={uses} is more than {of} {}; '{cap}'", limit.unwrap()));
                    }
                }
                Some(uses)
            }
        };
        Ok(Narrowing { only, each: each.or(current.each), max: max.or(current.max), uses })
    }

    /// The narrowed limits, for an action through the handle not yet performed; `used` is
    /// what actions through the same narrowing did so far.
    pub fn check(&self, grant: &CapabilityGrant, action: &Action, used: &Usage) -> Result<(), String> {
        let cap = &grant.cap;
        if !self.only.is_empty() && !self.allows(action) {
            return Err(format!(
                "the narrowed '{cap}' allows only {}; this action is outside it",
                self.only.join(", ")
            ));
        }
        let counts = grant.cap != Kind::StripeRefund || action.method == Method::Refund;
        if let (Some(uses), true) = (self.uses, counts) {
            if used.limited >= uses {
                return Err(format!(
                    "the narrowed '{cap}' allows {uses} action(s); this is action {}",
                    used.limited + 1
                ));
            }
        }
        if let Some(money) = action.money() {
            if let Some(each) = &self.each {
                if money.currency != each.currency || money.minor > each.minor {
                    return Err(format!(
                        "the narrowed '{cap}' allows at most {each} per action; this one needs {money}"
                    ));
                }
            }
            if let Some(max) = &self.max {
                let spent = used.charged.get(&max.currency).copied().unwrap_or(0);
                if money.currency != max.currency || spent.saturating_add(money.minor) > max.minor {
                    return Err(format!("the narrowed '{cap}' allows at most {max}; this action needs {money}"));
                }
            }
        }
        Ok(())
    }

    fn allows(&self, action: &Action) -> bool {
        match (action.kind, action.method) {
            (Kind::StripeRefund, Method::Refund) => self.only.contains(&action.body),
            // A read through a refund handle: the intent it reads.
            (Kind::StripeRefund, _) => {
                let id = action.target.rsplit('/').next().unwrap_or_default();
                action.target.contains("/payment_intents/") && self.only.iter().any(|only| only == id)
            }
            _ => urls::normalise(&action.target).is_ok_and(|normal| self.only.contains(&normal)),
        }
    }
}

/// One `only` entry of a narrowing, as it is kept: a payment intent id for a refund grant;
/// an exact URL the grant allows (normalised) for an HTTP grant; nothing for a database.
fn only_entry_within(grant: &CapabilityGrant, entry: &str) -> Result<String, String> {
    match grant.cap {
        Kind::StripeRefund => {
            let well_formed = entry.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !(1..=PAYMENT_INTENT_BYTES_MAX).contains(&entry.len()) || !well_formed {
                return Err(format!("narrow: `{entry}` is not a payment intent id"));
            }
            Ok(entry.to_string())
        }
        Kind::Sqlite | Kind::Postgres => Err("narrow: a database grant has no `only` to narrow".to_string()),
        _ if entry.contains('*') => Err(format!("narrow: `{entry}` is a pattern; a narrowing names exact URLs")),
        _ => urls::allowed(&grant.only, entry)
            .map_err(|problem| format!("narrow: `{entry}` is outside the grant's `only`: {problem}")),
    }
}

/// A narrowed amount: at most each limit it narrows, in their currency.
fn money_within(
    what: &str,
    wanted: Option<Money>,
    limits: [Option<&Money>; 2],
    grant: &CapabilityGrant,
) -> Result<Option<Money>, String> {
    let Some(wanted) = wanted else { return Ok(None) };
    if wanted.minor < 0 {
        return Err(format!("narrow: {what}={wanted} is negative"));
    }
    let currency = grant.each.as_ref().or(grant.max.as_ref()).map(|m| m.currency.as_str());
    if currency.is_some_and(|currency| currency != wanted.currency) {
        return Err(format!("narrow: {what}={wanted} is not in the grant's currency"));
    }
    for limit in limits.into_iter().flatten() {
        if wanted.currency != limit.currency || wanted.minor > limit.minor {
            return Err(format!("narrow: {what}={wanted} is more than {limit}, which it narrows"));
        }
    }
    Ok(Some(wanted))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn grant(cap: Kind, only: &[&str], each: Option<&str>, uses: Option<u64>) -> CapabilityGrant {
        CapabilityGrant {
            cap,
            only: only.iter().map(|s| s.to_string()).collect(),
            each: each.map(|amount| Money::parse(amount, "USD").unwrap()),
            max: None,
            uses,
            needs: BTreeMap::new(),
            idempotency_key: false,
            headers: BTreeMap::new(),
            path: None,
            mode: None,
            init: None,
            max_tokens: None,
            url_env: None,
        }
    }

    fn usd(amount: &str) -> Option<Money> {
        Some(Money::parse(amount, "USD").unwrap())
    }

    #[test]
    fn a_narrowing_is_at_most_what_it_narrows_and_never_wider() {
        let refund = grant(Kind::StripeRefund, &[], Some("50"), Some(2));
        let narrowed = Narrowing { only: vec!["pi_1".into()], max: usd("10"), uses: Some(1), ..Default::default() };
        let kept = Narrowing::within(narrowed.clone(), &refund, None).unwrap();
        assert_eq!(kept, narrowed);
        let wider = [
            Narrowing { each: usd("60"), ..Default::default() },
            Narrowing { uses: Some(3), ..Default::default() },
            Narrowing { max: Some(Money::parse("5", "EUR").unwrap()), ..Default::default() },
            Narrowing { only: vec!["pi 1".into()], ..Default::default() },
        ];
        for wanted in wider {
            assert!(Narrowing::within(wanted.clone(), &refund, None).is_err(), "{wanted:?} is wider");
        }
        // Narrowing the narrowed handle again: what it kept bounds it; unspecified limits stay.
        let again = Narrowing { max: usd("20"), ..Default::default() };
        assert!(Narrowing::within(again, &refund, Some(&kept)).unwrap_err().contains("more than 10.00 USD"));
        let other = Narrowing { only: vec!["pi_2".into()], ..Default::default() };
        assert!(Narrowing::within(other, &refund, Some(&kept)).unwrap_err().contains("cannot widen"));
        let tighter = Narrowing::within(Narrowing { max: usd("5"), ..Default::default() }, &refund, Some(&kept));
        assert_eq!(tighter.unwrap(), Narrowing { max: usd("5"), ..kept });

        let post = grant(Kind::HttpPost, &["https://notes.test/*"], None, None);
        let exact = Narrowing { only: vec!["https://notes.test/a".into()], ..Default::default() };
        assert!(Narrowing::within(exact, &post, None).is_ok());
        for url in ["https://notes.test/*", "https://other.test/a", "https://notes.test/a/b"] {
            let wanted = Narrowing { only: vec![url.into()], ..Default::default() };
            assert!(Narrowing::within(wanted, &post, None).is_err(), "{url}");
        }
        let db = grant(Kind::Sqlite, &[], None, None);
        assert!(Narrowing::within(Narrowing { only: vec!["x".into()], ..Default::default() }, &db, None).is_err());
    }
}
