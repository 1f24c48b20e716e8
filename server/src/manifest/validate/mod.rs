//! From raw manifest to validated config: defaults filled, durations and money parsed,
//! grants checked against the capability registry. Problems are collected, not stopped at:
//! `parse` and the collector here, each section by its own concern (`server.rs`, `tool.rs`,
//! `grants.rs`, `surface.rs` for resources and prompts).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::raw::*;
use super::*;
use crate::base::money::{Money, MONEY_MINOR_MAX};
use crate::limits::ACTIONS_PER_RUN_MAX;
use crate::manifest::kinds::{self, GrantKey, Kind};

mod grants;
mod server;
mod surface;
mod tool;

use grants::*;
use server::*;
use surface::*;
use tool::*;

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
