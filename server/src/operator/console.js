// The console's page: reads /api/runs and /api/run and renders them with textContent only
// (whatever a run holds is shown as text, never as markup). Nothing here acts on a run: the
// command that decides a waiting run is shown for a person to run in a terminal.
"use strict";

const params = new URLSearchParams(location.search);

function element(tag, text, className) {
  const made = document.createElement(tag);
  if (text !== undefined && text !== null) made.textContent = String(text);
  if (className) made.className = className;
  return made;
}

function problem(text) {
  const shown = document.getElementById("problem");
  shown.textContent = text;
  shown.hidden = false;
}

async function fetched(path) {
  const answer = await fetch(path, { headers: { accept: "application/json" } });
  const body = await answer.json();
  if (!answer.ok) throw new Error(body.error || answer.statusText);
  return body;
}

function fields(pairs) {
  const list = element("dl", null, "fields");
  for (const [name, value] of pairs) {
    if (value === undefined || value === null || value === "") continue;
    list.append(element("dt", name), element("dd", typeof value === "string" ? value : JSON.stringify(value)));
  }
  return list;
}

function runLink(run) {
  const link = element("a", run.slice(0, 12));
  link.href = "/?run=" + encodeURIComponent(run);
  link.title = run;
  return link;
}

function inDoubtBlock(run) {
  const block = element("div", null, "waiting");
  block.dataset.run = run.run;
  const title = element("div");
  title.append(runLink(run.run), document.createTextNode(" of " + run.tool + ": " + run.state.replace(/_/g, " ")));
  block.append(title);
  const doubt = run.in_doubt;
  if (doubt) {
    const action = doubt.action || {};
    block.append(fields([
      ["in doubt", doubt.op !== undefined && !doubt.halted ? "action " + doubt.op : undefined],
      ["kind", action.kind], ["method", action.method], ["target", action.target],
      ["payment intent", action.payment_intent],
      ["amount", action.amount !== undefined ? action.amount + " " + (action.currency || "") : undefined],
      ["idempotency key", action.idempotency_key], ["begun", doubt.begun_at], ["why", doubt.why],
      ["the service last said", doubt.last_said],
    ]));
    if (doubt.arguments !== undefined) {
      block.append(element("div", "the run's arguments:", "muted"), element("pre", JSON.stringify(doubt.arguments, null, 2)));
    }
    block.append(element("div", "decide with:", "muted"), element("pre", doubt.resolve, "command"));
  }
  return block;
}

function duration(ms) {
  if (ms === null || ms === undefined) return "-";
  return ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(1) + " s";
}

function fillSelect(id, names, chosen) {
  const select = document.getElementById(id);
  for (const name of names) {
    const option = element("option", name);
    option.value = name;
    if (name === chosen) option.selected = true;
    select.append(option);
  }
}

async function showList() {
  for (const name of ["since", "text", "limit"]) {
    document.getElementById(name).value = params.get(name) || "";
  }
  const query = new URLSearchParams();
  for (const name of ["tool", "state", "since", "text", "limit"]) {
    if (params.get(name)) query.set(name, params.get(name));
  }
  const view = await fetched("/api/runs?" + query.toString());
  document.getElementById("server").textContent = view.server;
  fillSelect("tool", view.tools, params.get("tool"));
  fillSelect("state", view.states, params.get("state"));
  const waiting = document.getElementById("waiting");
  waiting.replaceChildren();
  if (view.waiting.length === 0) waiting.append(element("p", "none", "muted"));
  for (const run of view.waiting) waiting.append(inDoubtBlock(run));
  const body = document.querySelector("#runs tbody");
  body.replaceChildren();
  for (const run of view.runs) {
    const row = element("tr");
    row.dataset.run = run.run;
    const state = run.state === "failed" && run.outcome ? "failed (" + run.outcome + ")" : run.state;
    const first = element("td");
    first.append(runLink(run.run));
    row.append(first, element("td", run.tool), element("td", state, "state-" + run.state),
      element("td", run.reserved_at), element("td", duration(run.took_ms)), element("td", run.principal || ""));
    body.append(row);
  }
  let count = view.runs.length + " run(s) shown";
  if (view.more) count += ", " + view.more + " more (raise 'at most' or narrow the filters)";
  if (view.searched !== undefined) count += "; the text searched in the newest " + view.searched + " run(s)";
  document.getElementById("count").textContent = count;
}

async function showRun(id) {
  document.getElementById("list-view").hidden = true;
  const section = document.getElementById("run-view");
  section.hidden = false;
  const run = await fetched("/api/run?id=" + encodeURIComponent(id));
  section.append(element("h2", "run " + run.run + " of " + run.tool + ": " + run.state.replace(/_/g, " ")));
  section.append(fields([
    ["for", run.principal], ["reserved", run.reserved_at], ["started", run.started_at],
    ["settled", run.settled_at], ["outcome", run.outcome], ["took", run.took_ms !== null ? duration(run.took_ms) : ""],
    ["owned by", run.owner], ["journal", run.journal], ["message", run.message],
  ]));
  if (run.in_doubt) {
    section.append(element("h2", "Waiting for a person"), inDoubtBlock(run));
  }
  section.append(element("h2", "Actions"));
  const timeline = element("ol", null, "timeline");
  timeline.id = "timeline";
  for (const restart of run.restarts || []) {
    timeline.append(element("li", restart + ": resumed after a restart", "muted"));
  }
  for (const action of run.actions || []) {
    const item = element("li");
    item.dataset.op = action.op;
    item.append(element("div", "action " + action.op + ": " + action.kind + " " + (action.method || "") + " " + (action.target || "")));
    item.append(fields([
      ["begun", action.begun_at], ["done", action.done_at], ["took", duration(action.duration_ms)],
      ["status", action.status], ["decided by", action.decided_by],
    ]));
    if (action.result !== undefined && action.result !== null) item.append(element("pre", JSON.stringify(action.result, null, 2)));
    timeline.append(item);
  }
  if (!timeline.children.length) timeline.append(element("li", "no actions", "muted"));
  section.append(timeline);
  if ((run.prints || []).length) {
    section.append(element("h2", "Prints"), element("pre", run.prints.join("\n")));
  }
  section.append(element("h2", "Answer"), element("pre", run.answer === undefined || run.answer === null ? "(none yet)" : JSON.stringify(run.answer, null, 2)));
}

const chosenRun = params.get("run");
(chosenRun ? showRun(chosenRun) : showList()).then(
  () => document.body.setAttribute("data-ready", "yes"),
  (error) => { problem(error.message); document.body.setAttribute("data-ready", "error"); });
