//! Shrinking a failing scenario to what still fails the same way: the faults that fire, fewer
//! calls, fewer faults, then only the tools the calls use.

use warden_faults::Scenario;

use crate::sweep::simulate;

/// Drops the faults that never fired, until every fault left fires (each drop changes the run).
pub fn without_unfired_faults(mut scenario: Scenario) -> Scenario {
    for _ in 0..10 {
        let never = simulate(&scenario).never_fired;
        if never.is_empty() {
            break;
        }
        let positions: Vec<usize> = never.iter().map(|(position, _)| *position).collect();
        scenario.faults = scenario
            .faults
            .into_iter()
            .enumerate()
            .filter(|(position, _)| !positions.contains(position))
            .map(|(_, fault)| fault)
            .collect();
    }
    scenario
}

/// Shrinks a failing scenario: fewer calls, then fewer faults, while it still fails the same way.
pub fn shrink(scenario: Scenario, invariant: u8) -> Scenario {
    shrink_while(scenario, &|s: &Scenario| simulate(s).violations.iter().any(|v| v.invariant == invariant))
}

/// Shrinks a scenario of an operator's world while it still raises a finding of `kind` about
/// `tool` (`checks/own.rs`), as `shrink` does a violation.
pub fn shrink_finding(scenario: Scenario, kind: &str, tool: &str) -> Scenario {
    let found = |s: &Scenario| simulate(s).findings.iter().any(|f| f.kind == kind && f.tool == tool);
    shrink_while(scenario, &found)
}

/// Fewer calls, then fewer faults, then only the tools the calls use, while `fails` holds.
fn shrink_while(mut scenario: Scenario, fails: &dyn Fn(&Scenario) -> bool) -> Scenario {
    while scenario.calls > 1 {
        let mut fewer = scenario.clone();
        fewer.calls = scenario.calls / 2;
        fewer.faults.retain(|f| f.before_call < fewer.calls);
        if !fails(&fewer) {
            break;
        }
        scenario = fewer;
    }
    let mut index = 0;
    while index < scenario.faults.len() {
        let mut without = scenario.clone();
        without.faults.remove(index);
        if fails(&without) {
            scenario = without;
        } else {
            index += 1;
        }
    }
    shrink_world(scenario, fails)
}

/// Shrinks a generated world: pins each call's tool (so the workload no longer depends on
/// how many tools there are), then drops every tool no call uses, while it still fails.
fn shrink_world(scenario: Scenario, fails: &dyn Fn(&Scenario) -> bool) -> Scenario {
    let Some(world) = &scenario.world else { return scenario };
    let mut pinned = scenario.clone();
    let sent = simulate(&scenario).sent_tools;
    pinned.tools = Some(sent.clone());
    if !fails(&pinned) {
        return scenario;
    }
    let mut shrunk = pinned;
    for shape in &world.tools {
        if sent.contains(&shape.name) {
            continue;
        }
        let mut without = shrunk.clone();
        let Some(file) = without.world.as_mut() else { break };
        let Ok(mut manifest) = serde_json::from_str::<serde_json::Value>(&file.manifest) else { break };
        if let Some(tools) = manifest["tools"].as_array_mut() {
            tools.retain(|tool| tool["name"] != shape.name.as_str());
        }
        file.manifest = serde_json::to_string_pretty(&manifest).expect("JSON serialises");
        file.tools.retain(|t| t.name != shape.name);
        file.programs.remove(&format!("{}.star", shape.name));
        if fails(&without) {
            shrunk = without;
        }
    }
    shrunk
}
