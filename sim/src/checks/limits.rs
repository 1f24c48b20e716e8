//! The limits the checker holds the server to, read from the world's manifest by the
//! simulator itself: not through the server's manifest parser, so a bug there (a duration
//! unit read wrong, an amount's decimals dropped) moves the server's limits and not the
//! checker's. Only what the generator writes is read: durations of whole s, m, h or d, and
//! amounts with up to two decimals.

use std::collections::BTreeMap;

use serde_json::Value;

/// An amount in minor units, with its currency (upper case).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Amount {
    pub minor: i64,
    pub currency: String,
}

impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let money = warden::base::money::Money { minor: self.minor, currency: self.currency.clone() };
        write!(f, "{money}")
    }
}

#[derive(Clone, Debug, Default)]
pub struct GrantLimits {
    pub each: Option<Amount>,
    pub max: Option<Amount>,
    pub uses: Option<u64>,
}

#[derive(Clone, Debug)]
pub struct Quota {
    pub window_ms: u64,
    pub calls: Option<u64>,
    pub money: Option<Amount>,
    /// Model tokens per window.
    pub tokens: Option<u64>,
    /// Each principal has the quota to itself (`per: "principal"`).
    pub per_principal: bool,
}

#[derive(Clone, Debug, Default)]
pub struct ToolLimits {
    pub grants: BTreeMap<String, GrantLimits>,
    pub quota: Option<Quota>,
    /// How long a `once` key holds after its run ends; `None`: the tool has no `once`.
    pub once_keep_ms: Option<u64>,
    /// The tool's `deadline`, if it has one.
    pub deadline_ms: Option<u64>,
    /// Each principal has `once` keys of its own (`per: "principal"`).
    pub once_per_principal: bool,
}

/// `server.keep` when the manifest leaves it out, in days (seed 000: 90).
const KEEP_DAYS_DEFAULT: u64 = 90;

fn duration_ms(text: &str) -> Option<u64> {
    let (number, unit) = text.split_at(text.len().checked_sub(1)?);
    let unit_ms = match unit {
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    number.parse::<u64>().ok()?.checked_mul(unit_ms)
}

/// An amount as the manifest and a journaled action write it: `{"amount": "12.34", "currency": "usd"}`.
/// In the currency's own minor unit (ISO 4217: cents of a dollar, whole yen).
pub fn amount(value: &Value) -> Option<Amount> {
    let currency = value["currency"].as_str()?.to_ascii_uppercase();
    let money = warden::base::money::Money::parse(value["amount"].as_str()?, &currency).ok()?;
    Some(Amount { minor: money.minor, currency })
}

/// `server.max_concurrent_runs` when the manifest leaves it out (the server's default).
const SERVER_CONCURRENT_RUNS_DEFAULT: u64 = 8;

/// The most writes a server may leave waiting on a client that does not read: one per call
/// in progress (each answers once; seed 000 section 5 bounds them at four times
/// `server.max_concurrent_runs` plus 16) and one for the request being handled.
pub fn writes_waiting_max(world: &crate::env::world::World) -> usize {
    let text = world.disk.peek(&crate::env::world::World::path("manifest.json")).unwrap_or_default();
    let manifest = serde_json::from_slice::<Value>(&text).unwrap_or_default();
    let runs = manifest["server"]["max_concurrent_runs"].as_u64().unwrap_or(SERVER_CONCURRENT_RUNS_DEFAULT);
    (4 * runs + 16 + 1) as usize
}

/// Each tool's limits in the world's manifest, by name.
pub fn of_world(world: &crate::env::world::World) -> BTreeMap<String, ToolLimits> {
    let text = world.disk.peek(&crate::env::world::World::path("manifest.json")).unwrap_or_default();
    read(&String::from_utf8_lossy(&text))
}

/// Each tool's limits, by name.
pub fn read(manifest: &str) -> BTreeMap<String, ToolLimits> {
    let Ok(manifest) = serde_json::from_str::<Value>(manifest) else { return BTreeMap::new() };
    let server_keep_ms = match &manifest["server"]["keep"] {
        Value::String(forever) if forever == "forever" => u64::MAX,
        Value::Number(days) => days.as_u64().unwrap_or(KEEP_DAYS_DEFAULT) * 86_400_000,
        _ => KEEP_DAYS_DEFAULT * 86_400_000,
    };
    let mut tools = BTreeMap::new();
    for tool in manifest["tools"].as_array().into_iter().flatten() {
        let mut limits = ToolLimits::default();
        for (name, grant) in tool["grants"].as_object().into_iter().flatten() {
            let grant_limits =
                GrantLimits { each: amount(&grant["each"]), max: amount(&grant["max"]), uses: grant["uses"].as_u64() };
            limits.grants.insert(name.clone(), grant_limits);
        }
        if let Some(quota) = tool.get("quota") {
            limits.quota = Some(Quota {
                window_ms: quota["window"].as_str().and_then(duration_ms).unwrap_or(0),
                calls: quota["calls"].as_u64(),
                money: amount(&quota["money"]),
                tokens: quota["tokens"].as_u64(),
                per_principal: quota["per"] == "principal",
            });
        }
        if let Some(once) = tool.get("once") {
            limits.once_keep_ms = Some(once["keep"].as_str().and_then(duration_ms).unwrap_or(server_keep_ms));
            limits.once_per_principal = once["per"] == "principal";
        }
        limits.deadline_ms = tool["deadline"].as_str().and_then(duration_ms);
        tools.insert(tool["name"].as_str().unwrap_or_default().to_string(), limits);
    }
    tools
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_durations_amounts_and_defaults_as_the_seed_defines_them() {
        assert_eq!(duration_ms("5s"), Some(5_000));
        assert_eq!(duration_ms("10m"), Some(600_000));
        assert_eq!(duration_ms("24h"), Some(86_400_000));
        assert_eq!(duration_ms("7d"), Some(604_800_000));
        let money = |a: &str| amount(&serde_json::json!({"amount": a, "currency": "usd"})).unwrap().minor;
        assert_eq!((money("35"), money("35.5"), money("35.07")), (3500, 3550, 3507));
        let tools = read(
            r#"{"server": {"keep": 7}, "tools": [{"name": "t", "once": {"by": ["a"]}, "deadline": "2m",
                "quota": {"window": "1m", "calls": 3, "money": {"amount": "40.00", "currency": "EUR"}},
                "grants": {"pay": {"each": {"amount": "5", "currency": "EUR"}, "uses": 2}}}]}"#,
        );
        let t = &tools["t"];
        assert_eq!(t.once_keep_ms, Some(7 * 86_400_000));
        assert_eq!(t.deadline_ms, Some(120_000));
        let quota = t.quota.as_ref().unwrap();
        assert_eq!((quota.window_ms, quota.calls, quota.money.as_ref().unwrap().minor), (60_000, Some(3), 4000));
        assert_eq!(t.grants["pay"].each.as_ref().unwrap().minor, 500);
        assert_eq!(t.grants["pay"].uses, Some(2));
    }
}
