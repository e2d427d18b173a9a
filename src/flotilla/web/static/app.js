// Flotilla's dashboard: a page over the REST API (/v1) with the caller's own token, so it
// shows what the API would show them and nothing more. Plain ES module, no build step.
// Pages (hash routes): #/jobs, #/jobs/ID, #/queues, #/clusters, #/scheduler.
"use strict";

const Charts = window.FlotillaCharts;
const TOKEN_KEY = "flotilla-token";
const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
const WAITING = new Set(["queued", "preempted"]);
const STATES = ["queued", "leased", "pending", "running", "preempted", "succeeded", "failed",
  "cancelled"];
const PAGE_SIZE = 50;

const main = document.getElementById("main");
const status = document.getElementById("status");
let timers = [];
let me = null;
let routeId = 0;
/** A page's async work is stale once another route has started: it must not draw. */
function stale(id) { return id !== routeId; }

// --- small helpers -----------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "class") node.className = value;
    else if (key === "style") node.style.cssText = value;  // CSSOM: allowed by the page's CSP
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.appendChild(typeof child === "string" || typeof child === "number"
      ? document.createTextNode(String(child)) : child);
  }
  return node;
}

/** A long value shortened, the full value on hover and a button to copy it. */
function short(value, keep = 12, copy = false) {
  const text = String(value ?? "");
  const shown = text.length > keep ? text.slice(0, keep - 1) + "…" : text;
  const span = h("span", {class: "short", title: text, "data-full": text}, shown);
  if (!copy) return span;
  const button = h("button", {class: "copy", type: "button", "aria-label": "copy " + text,
    title: "copy " + text, onclick: () => navigator.clipboard?.writeText(text)}, "copy");
  return h("span", {class: "copyable"}, span, button);
}

function badge(state) { return h("span", {class: "badge state-" + state}, state); }

function when(iso) {
  if (!iso) return "–";
  const date = new Date(iso);
  return date.toLocaleString(undefined, {month: "short", day: "numeric", hour: "2-digit",
    minute: "2-digit", second: "2-digit"});
}

function amounts(map) {
  return Object.entries(map || {}).map(([k, v]) => k + " " + fmtAmount(k, v)).join(", ") || "–";
}

function fmtAmount(name, value) {
  if (value === null || value === undefined) return "–";
  if (name === "memory" || name.endsWith("memory")) {
    const gi = value / 2 ** 30;
    return gi >= 1 ? (+gi.toFixed(1)) + "Gi" : (+(value / 2 ** 20).toFixed(0)) + "Mi";
  }
  return Charts.formatNumber(value);
}

/** Run fn now and every ms while its page is current; never two runs at once. */
function clock(epochSeconds) {
  return new Date(epochSeconds * 1000).toLocaleTimeString(undefined, {hour: "2-digit",
    minute: "2-digit", second: "2-digit", hour12: false});
}

/** replaceChildren without the holes: conditional parts may be null or false. */
function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

function every(ms, fn) {
  const id = routeId;
  if (stale(id)) return;
  let busy = false;
  const tick = async () => {
    if (busy || stale(id)) return;
    busy = true;
    try { await fn(); } catch (error) { if (error.status !== 401) say(error.message, "error"); }
    finally { busy = false; }
  };
  tick();
  timers.push(setInterval(tick, ms));
}

function say(text, kind = "info") {
  status.textContent = text;
  status.className = "status " + kind;
}

// --- the API -----------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    super(body?.message || "HTTP " + status);
    this.status = status;
    this.problems = body?.problems || [];
  }
}

async function api(path, options = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = {"Accept": "application/json", ...(options.headers || {})};
  if (token) headers["Authorization"] = "Bearer " + token;
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {method: options.method || "GET", headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body)});
  let body = null;
  try { body = await response.json(); } catch (error) { body = null; }
  if (!response.ok) {
    if (response.status === 401) showSignIn(body?.message);
    throw new ApiError(response.status, body);
  }
  return body;
}

function can(permission, queue, owner) {
  if (!me) return false;
  if (me.admin) return true;
  const granted = new Set([...(me.queues[queue] || []), ...(me.queues["*"] || [])]);
  if (granted.has("admin") || granted.has(permission)) return true;
  return permission === "cancel" && granted.has("submit") && owner === me.name;
}

// --- sign in -----------------------------------------------------------------------------

function showSignIn(message) {
  clearTimers();
  main.replaceChildren(h("section", {class: "signin"},
    h("h1", {}, "Sign in"),
    h("p", {}, message || "This server needs a token (the same one the CLI reads from FLOTILLA_TOKEN)."),
    h("form", {onsubmit: (event) => {
      event.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, event.target.token.value.trim());
      me = null;
      route();
    }},
    h("label", {for: "token"}, "Token"),
    h("input", {id: "token", name: "token", type: "password", autocomplete: "off", required: true}),
    h("button", {type: "submit"}, "Sign in"))));
  document.getElementById("token").focus();
}

async function loadMe() {
  if (me) return me;
  me = await api("/ui/api/me");
  const who = document.getElementById("who");
  who.replaceChildren(me.auth_enabled
    ? h("span", {}, "signed in as ", h("strong", {}, me.name), " ",
        h("button", {type: "button", class: "link", onclick: () => {
          sessionStorage.removeItem(TOKEN_KEY); me = null; showSignIn("Signed out.");
        }}, "sign out"))
    : h("span", {title: "no token config: everyone on this host is an admin"}, "no authentication (loopback)"));
  return me;
}

// --- jobs --------------------------------------------------------------------------------

function hashParams() {
  const query = location.hash.split("?")[1] || "";
  return new URLSearchParams(query);
}

async function jobsPage() {
  const id = routeId;
  const params = hashParams();
  const queues = await api("/v1/queues");
  if (stale(id)) return;
  const field = (name) => params.get(name) || "";
  const form = h("form", {class: "filters", role: "search", "aria-label": "filter jobs",
    onsubmit: (event) => { event.preventDefault(); applyFilters(form); }},
    h("label", {}, "Queue ", h("select", {name: "queue", onchange: () => applyFilters(form)},
      h("option", {value: ""}, "any"),
      queues.map((q) => h("option", {value: q.name, selected: q.name === field("queue")}, q.name)))),
    h("label", {}, "State ", h("select", {name: "state", onchange: () => applyFilters(form)},
      h("option", {value: ""}, "any"),
      STATES.map((s) => h("option", {value: s, selected: s === field("state")}, s)))),
    h("label", {}, "Owner ", h("input", {name: "owner", value: field("owner"), size: 10})),
    h("label", {}, "Label ", h("input", {name: "label", value: field("label"), size: 14,
      placeholder: "key=value"})),
    h("label", {}, "Name ", h("input", {name: "name", type: "search", value: field("name"),
      size: 14, placeholder: "part of a name"})),
    h("button", {type: "submit"}, "Filter"));
  const body = h("tbody", {});
  const table = h("table", {class: "jobs", "aria-label": "jobs, newest first"},
    h("colgroup", {}, h("col", {class: "c-id"}), h("col", {class: "c-name"}), h("col", {class: "c-queue"}),
      h("col", {class: "c-state"}), h("col", {class: "c-owner"}), h("col", {class: "c-prio"}),
      h("col", {class: "c-time"}), h("col", {class: "c-reason"})),
    h("thead", {}, h("tr", {}, ["ID", "Name", "Queue", "State", "Owner", "Priority", "Submitted",
      "Reason"].map((t) => h("th", {scope: "col"}, t)))), body);
  const cursors = [null];
  let page = 0;
  const older = h("button", {type: "button", onclick: () => { page += 1; refresh(); }}, "Older →");
  const newer = h("button", {type: "button", onclick: () => { page -= 1; refresh(); }}, "← Newer");
  const pageLabel = h("span", {class: "page-label", "aria-live": "polite"}, "");
  main.replaceChildren(h("h1", {}, "Jobs"), form,
    h("div", {class: "table-wrap"}, table), h("nav", {class: "pager", "aria-label": "pages"},
      newer, pageLabel, older));

  async function refresh() {
    const query = new URLSearchParams({order: "newest", limit: String(PAGE_SIZE)});
    for (const name of ["queue", "state", "owner", "label", "name"]) {
      if (params.get(name)) query.set(name, params.get(name));
    }
    if (cursors[page] !== null) query.set("after", String(cursors[page]));
    let result;
    try { result = await api("/v1/jobs?" + query); } catch (error) { say(error.message, "error"); return; }
    cursors[page + 1] = result.next_cursor;
    body.replaceChildren(...(result.jobs.length ? result.jobs.map(jobRow)
      : [h("tr", {}, h("td", {colspan: 8, class: "empty"}, "No job matches."))]));
    newer.disabled = page === 0;
    older.disabled = result.next_cursor === null;
    pageLabel.textContent = "page " + (page + 1);
    say("updated " + new Date().toLocaleTimeString());
  }
  every(2000, refresh);
}

function applyFilters(form) {
  const params = new URLSearchParams();
  for (const name of ["queue", "state", "owner", "label", "name"]) {
    const value = form.elements[name].value.trim();
    if (value) params.set(name, value);
  }
  location.hash = "#/jobs" + (params.toString() ? "?" + params : "");
}

function jobRow(job) {
  return h("tr", {"data-job": job.id, "data-state": job.state},
    h("td", {}, h("a", {href: "#/jobs/" + job.id, title: job.id}, job.id.slice(0, 8))),
    h("td", {}, h("a", {href: "#/jobs/" + job.id}, short(job.name, 28))),
    h("td", {}, short(job.queue, 16)),
    h("td", {}, badge(job.state)),
    h("td", {}, short(job.owner || "–", 12)),
    h("td", {class: "num"}, String(job.priority)),
    h("td", {}, when(job.submitted_at)),
    h("td", {class: "reason"}, short(job.reason || "", 60)));
}

// --- one job -----------------------------------------------------------------------------

async function jobPage(jobId) {
  const id = routeId;
  await loadMe();
  if (stale(id)) return;
  const header = h("div", {class: "job-head"});
  const actions = h("div", {class: "actions"});
  const why = h("section", {class: "panel why", "aria-live": "polite"});
  const runs = h("section", {class: "panel runs"});
  const events = h("ol", {class: "events"});
  const logs = h("pre", {class: "logs", tabindex: "0", "aria-label": "log output", "aria-live": "off"});
  const logControls = h("div", {class: "log-controls"});
  const spec = h("pre", {class: "spec", tabindex: "0"});
  main.replaceChildren(h("p", {}, h("a", {href: "#/jobs"}, "← Jobs")), header, actions, why, runs,
    h("section", {class: "panel"}, h("h2", {}, "Logs"), logControls, logs),
    h("section", {class: "panel"}, h("h2", {}, "Events"), events),
    h("details", {class: "panel"}, h("summary", {}, "Spec"), spec));
  let job = null;
  let logState = {stream: "stdout", replica: "", offset: 0, run: null, done: false};
  let actionsFor = null;

  async function refresh() {
    try {
      job = await api("/v1/jobs/" + encodeURIComponent(jobId));
    } catch (error) {
      main.replaceChildren(h("h1", {}, "Job"), h("p", {class: "error"}, error.message));
      clearTimers();
      return;
    }
    fill(header, h("h1", {}, short(job.name, 48), " ", badge(job.state)),
      h("p", {class: "meta"}, "id ", short(job.id, 40, true), " · queue ", short(job.queue, 24),
        " · owner ", job.owner || "–", " · priority ", String(job.priority),
        " · submitted ", when(job.submitted_at)));
    const key = job.state + "/" + job.priority + "/" + job.cancel_requested;
    if (actionsFor !== key) { renderActions(); actionsFor = key; }
    const detail = await api("/v1/jobs/" + encodeURIComponent(jobId) + "/why");
    fill(why, h("h2", {}, WAITING.has(job.state) ? "Why it waits" : "State"),
      h("p", {class: "reason-text"}, detail.summary),
      detail.queue_position ? h("p", {}, "Place in queue: ",
        h("strong", {class: "position"}, detail.queue_position + " of " + detail.queued_in_queue)) : null,
      detail.quota.length ? h("p", {}, "Quota path: " + detail.quota.map((q) => q.name).join(" → ")) : null);
    renderRuns();
    const history = await api("/v1/jobs/" + encodeURIComponent(jobId) + "/events");
    events.replaceChildren(...history.map((e) => h("li", {"data-kind": e.kind},
      h("time", {datetime: e.time}, when(e.time)), " ",
      h("strong", {}, e.kind), e.to_state ? " → " + e.to_state : "", e.reason ? ": " + e.reason : "")));
    spec.textContent = JSON.stringify(job.spec, null, 2);
    await followLogs();
    say("updated " + new Date().toLocaleTimeString());
  }

  function renderRuns() {
    fill(runs, h("h2", {}, "Runs"), job.runs.length ? h("div", {class: "table-wrap"}, h("table", {class: "runs-table"},
      h("thead", {}, h("tr", {}, ["Attempt", "Cluster", "State", "Started", "Finished", "Exit",
        "Replicas (node, GPUs)"].map((t) => h("th", {scope: "col"}, t)))),
      h("tbody", {}, job.runs.map((run) => h("tr", {},
        h("td", {class: "num"}, String(run.attempt)), h("td", {}, short(run.cluster, 16)),
        h("td", {}, badge(run.state)), h("td", {}, when(run.started_at)),
        h("td", {}, when(run.finished_at)), h("td", {class: "num"}, run.exit_code ?? "–"),
        h("td", {}, h("ul", {class: "placements"}, (run.assignment.placements || []).map((p) =>
          h("li", {}, p.task + "[" + p.replica + "] on ", short(p.node, 20),
            (p.gpus && p.gpus.length) ? " · GPUs " + p.gpus.join(",") : "",
            (p.shares && p.shares.length) ? " · GPU share " + p.shares.map((s) => s[0] + ":" + s[1]).join(",") : "")))))))))
      : h("p", {}, "No run yet."));
  }

  function renderActions() {
    actions.replaceChildren();
    if (TERMINAL.has(job.state)) return;
    const mayCancel = can("cancel", job.queue, job.owner);
    const cancel = h("button", {type: "button", class: "danger", id: "cancel",
      disabled: !mayCancel || job.cancel_requested,
      title: mayCancel ? "cancel this job" : "you lack the cancel permission on queue " + job.queue,
      onclick: async () => {
        if (!confirm("Cancel job " + job.name + "?")) return;
        try {
          await api("/v1/jobs/" + encodeURIComponent(job.id) + "/cancel", {method: "POST", body: {}});
          say("cancel requested", "ok");
          await refresh();
        } catch (error) { say(error.message, "error"); }
      }}, job.cancel_requested ? "Cancel requested" : "Cancel");
    actions.appendChild(cancel);
    if (!mayCancel) actions.appendChild(h("span", {class: "hint", id: "cancel-hint"},
      "You cannot cancel this job: no cancel permission on queue " + job.queue + "."));
    if (WAITING.has(job.state) && can("admin", job.queue, job.owner)) {
      const input = h("input", {type: "number", id: "priority", value: String(job.priority),
        "aria-label": "new priority", style: "width: 6em"});
      actions.appendChild(h("form", {class: "inline", onsubmit: async (event) => {
        event.preventDefault();
        try {
          await api("/v1/jobs/" + encodeURIComponent(job.id) + "/priority",
            {method: "POST", body: {priority: Number(input.value)}});
          say("priority set", "ok");
          await refresh();
        } catch (error) { say(error.message, "error"); }
      }}, h("label", {for: "priority"}, "Priority "), input,
        h("button", {type: "submit"}, "Set priority")));
    }
  }

  let following = false;
  async function followLogs() {
    if (following) return;
    following = true;
    try { await readLogs(); } finally { following = false; }
  }

  async function readLogs() {
    const run = job.runs[job.runs.length - 1];
    if (!run) { logs.textContent = "(no run yet)"; return; }
    const replicas = (run.assignment.placements || []).map((p) => p.task + ":" + p.replica);
    if (logState.run !== run.id || !logControls.childElementCount) {
      logState = {...logState, run: run.id, offset: 0, done: false};
      logs.textContent = "";
      const replica = h("select", {id: "log-replica", "aria-label": "replica", onchange: () => {
        logState = {...logState, replica: replica.value, offset: 0, done: false};
        logs.textContent = ""; setTimeout(followLogs, 0);
      }}, replicas.map((r) => h("option", {value: r, selected: r === logState.replica}, r)));
      const stream = h("select", {id: "log-stream", "aria-label": "stream", onchange: () => {
        logState = {...logState, stream: stream.value, offset: 0, done: false};
        logs.textContent = ""; setTimeout(followLogs, 0);
      }}, h("option", {value: "stdout"}, "stdout"), h("option", {value: "stderr"}, "stderr"));
      stream.value = logState.stream;
      if (!logState.replica) logState.replica = replicas[0] || "";
      logControls.replaceChildren(h("label", {}, "Replica "), replica, " ", h("label", {}, "Stream "),
        stream, " ", h("span", {class: "hint"}, "attempt " + run.attempt + " (the latest)"));
    }
    if (logState.done) return;
    const [task, replica] = logState.replica.split(":");
    const query = new URLSearchParams({stream: logState.stream, offset: String(logState.offset)});
    if (task) { query.set("task", task); query.set("replica", replica); }
    try {
      for (let i = 0; i < 20; i++) {
        const chunk = await api("/v1/jobs/" + encodeURIComponent(job.id) + "/logs?" + query);
        const atBottom = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 4;
        if (chunk.data) logs.append(chunk.data);
        if (atBottom) logs.scrollTop = logs.scrollHeight;
        logState.offset = chunk.next_offset;
        query.set("offset", String(chunk.next_offset));
        if (chunk.complete) { logState.done = true; break; }
        if (!chunk.data) break;
      }
    } catch (error) {
      if (!logs.textContent) logs.textContent = "(" + error.message + ")";
    }
  }

  every(1500, refresh);
}

// --- queues ------------------------------------------------------------------------------

function meter(used, total, label) {
  const ratio = total > 0 ? Math.min(used / total, 1) : 0;
  return h("div", {class: "meter", role: "meter", "aria-valuemin": "0", "aria-valuemax": String(total),
    "aria-valuenow": String(used), "aria-label": label, title: label},
    h("div", {class: "fill" + (used > total ? " over" : ""), style: "width:" + (ratio * 100).toFixed(1) + "%"}));
}

async function queuesPage() {
  const table = h("tbody", {});
  const quotas = h("div", {});
  const shareChart = h("div", {class: "chart-box"});
  const countChart = h("div", {class: "chart-box"});
  const waitChart = h("div", {class: "chart-box short-box"});
  main.replaceChildren(h("h1", {}, "Queues"),
    h("div", {class: "table-wrap"}, h("table", {class: "queues"},
      h("thead", {}, h("tr", {}, ["Queue", "Weight", "Running", "Queued", "Dominant share",
        "Fair share", "Allocated", "Quota"].map((t) => h("th", {scope: "col"}, t)))), table)),
    h("section", {class: "panel"}, h("h2", {}, "Quotas: use against min and max"), quotas),
    h("section", {class: "panel"}, h("h2", {}, "Dominant share (solid) against fair share (dashed) over time"), shareChart),
    h("section", {class: "panel"}, h("h2", {}, "Running and queued jobs over time"), countChart),
    h("section", {class: "panel"}, h("h2", {}, "Wait time per queue (the newest 500 jobs, submission to first run)"), waitChart));
  async function refresh() {
    const fleet = await api("/ui/api/fleet");
    const recent = await api("/ui/api/recent");
    Charts.boxPlot(waitChart, {rows: Object.keys(recent.waits).map((q) => ({name: q, values: recent.waits[q]})),
      label: "wait time distributions per queue"});
    table.replaceChildren(...fleet.queues.map((q) => h("tr", {"data-queue": q.name},
      h("th", {scope: "row"}, short(q.name, 24)), h("td", {class: "num"}, String(q.weight)),
      h("td", {class: "num"}, String(q.running)), h("td", {class: "num"}, String(q.queued)),
      h("td", {}, meter(q.dominant_share, 1, "dominant share " + (q.dominant_share * 100).toFixed(1) + "%"),
        " " + (q.dominant_share * 100).toFixed(1) + "%"),
      h("td", {class: "num"}, (q.fair_share * 100).toFixed(1) + "%"),
      h("td", {}, amounts(q.allocated)), h("td", {}, q.quota || "–"))));
    quotas.replaceChildren(fleet.quotas.length ? h("div", {class: "table-wrap"}, h("table", {class: "quotas"},
      h("thead", {}, h("tr", {}, ["Quota", "Resource", "Use / min / max", "", "Borrowing", "Lending"]
        .map((t) => h("th", {scope: "col"}, t)))),
      h("tbody", {}, fleet.quotas.flatMap((q) => {
        const names = [...new Set([...Object.keys(q.min), ...Object.keys(q.max || {}), ...Object.keys(q.usage)])];
        return names.map((r) => {
          const used = q.usage[r] || 0, min = q.min[r] || 0, max = q.max ? q.max[r] : undefined;
          return h("tr", {}, h("th", {scope: "row", style: "padding-left:" + (q.depth + 0.5) + "em"}, q.name),
            h("td", {}, r), h("td", {}, fmtAmount(r, used) + " / " + fmtAmount(r, min) + " / " + (max === undefined ? "∞" : fmtAmount(r, max))),
            h("td", {}, meter(used, max ?? Math.max(min, used, 1), r + " use")),
            h("td", {}, q.borrowing[r] ? fmtAmount(r, q.borrowing[r]) : "–"),
            h("td", {}, q.lending[r] ? fmtAmount(r, q.lending[r]) : "–"));
        });
      })))) : h("p", {}, "No quotas configured."));
    const timeline = await api("/ui/api/timeline");
    const samples = timeline.samples;
    const names = fleet.queues.map((q) => q.name);
    const series = [];
    names.forEach((name, i) => {
      const pts = samples.filter((s) => s.queues[name]);
      series.push({name: name + " share", color: Charts.color(i), points: pts.map((s) => [s.time, s.queues[name].share])});
      series.push({name: name + " fair", color: Charts.color(i), dashed: true, points: pts.map((s) => [s.time, s.queues[name].fair])});
    });
    Charts.lineChart(shareChart, {series, yMax: 1, step: true, xFormat: clock, timeAxis: true,
      yFormat: (v) => (v * 100).toFixed(0) + "%", label: "queue shares over time"});
    const counts = [];
    names.forEach((name, i) => {
      const pts = samples.filter((s) => s.queues[name]);
      counts.push({name: name + " running", color: Charts.color(i), points: pts.map((s) => [s.time, s.queues[name].running])});
      counts.push({name: name + " queued", color: Charts.color(i), dashed: true, points: pts.map((s) => [s.time, s.queues[name].queued])});
    });
    Charts.lineChart(countChart, {series: counts, step: true, xFormat: clock, timeAxis: true, label: "jobs per queue over time"});
    say("updated " + new Date().toLocaleTimeString());
  }
  every(3000, () => refresh().catch((error) => say(error.message, "error")));
}

// --- clusters ----------------------------------------------------------------------------

async function clustersPage() {
  const list = h("div", {});
  const chart = h("div", {class: "chart-box"});
  const gantt = h("div", {class: "chart-box short-box"});
  main.replaceChildren(h("h1", {}, "Clusters"), list,
    h("section", {class: "panel"}, h("h2", {}, "Utilisation per cluster and resource over time"), chart),
    h("section", {class: "panel"}, h("h2", {}, "Jobs on nodes (the newest 500 jobs, last 30 minutes)"), gantt));
  async function refresh() {
    const fleet = await api("/ui/api/fleet");
    list.replaceChildren(...fleet.clusters.map((c) => {
      const age = c.heartbeat_at ? Math.round((Date.now() - new Date(c.heartbeat_at)) / 1000) : null;
      const resources = Object.keys(c.capacity);
      return h("section", {class: "panel cluster", "data-cluster": c.name},
        h("h2", {}, short(c.name, 32), " ", badge(c.state)),
        h("p", {class: "meta"}, "backend ", h("strong", {}, c.backend), " · heartbeat ",
          age === null ? "never" : h("span", {title: c.heartbeat_at}, age + " s ago"),
          " · ", amounts(c.allocated), " of ", amounts(c.capacity)),
        h("div", {class: "table-wrap"}, h("table", {class: "nodes"},
          h("thead", {}, h("tr", {}, h("th", {scope: "col"}, "Node"), h("th", {scope: "col"}, "State"),
            resources.map((r) => h("th", {scope: "col"}, r)), h("th", {scope: "col"}, "GPU devices"))),
          h("tbody", {}, c.nodes.map((n) => h("tr", {"data-node": n.name},
            h("th", {scope: "row"}, short(n.name, 24)), h("td", {}, badge(n.state)),
            resources.map((r) => h("td", {}, meter(n.allocated[r] || 0, n.capacity[r] || 0, r + " on " + n.name),
              h("span", {class: "small"}, fmtAmount(r, n.allocated[r] || 0) + " / " + fmtAmount(r, n.capacity[r] || 0)))),
            h("td", {}, n.gpu_devices ? h("span", {class: "gpus"}, Array.from({length: n.gpu_devices}, (_, i) => {
              const users = n.gpus_in_use[String(i)];
              return h("span", {class: "gpu" + (users ? " used" : ""), title: "GPU " + i + (users ? ": " + users.join(", ") : ": free")}, String(i));
            })) : "–")))))));
    }));
    const timeline = await api("/ui/api/timeline");
    const samples = timeline.samples;
    const series = [];
    fleet.clusters.forEach((c) => Object.keys(c.capacity).forEach((r) => {
      series.push({name: c.name + " " + r, points: samples.filter((s) => s.clusters[c.name] && r in s.clusters[c.name])
        .map((s) => [s.time, s.clusters[c.name][r]])});
    }));
    Charts.lineChart(chart, {series, yMax: 1, step: true, xFormat: clock, timeAxis: true,
      yFormat: (v) => (v * 100).toFixed(0) + "%", label: "utilisation over time"});
    const recent = await api("/ui/api/recent");
    if (recent.gantt) {
      const starts = recent.gantt.bars.map((b) => b.start);
      const xMin = Math.max(Math.min(recent.now - 60, ...starts), recent.now - 1800);
      Charts.gantt(gantt, {...recent.gantt, xMin, xEnd: recent.now, xFormat: clock, label: "jobs on nodes"});
    } else {
      gantt.replaceChildren(h("p", {class: "hint"}, "Too many nodes to draw one by one."));
    }
    say("updated " + new Date().toLocaleTimeString());
  }
  every(3000, () => refresh().catch((error) => say(error.message, "error")));
}

// --- the scheduler -----------------------------------------------------------------------

async function schedulerPage() {
  const facts = h("dl", {class: "facts"});
  const times = h("div", {class: "chart-box"});
  const decisions = h("div", {class: "chart-box"});
  main.replaceChildren(h("h1", {}, "Scheduler"), h("section", {class: "panel"}, facts),
    h("section", {class: "panel"}, h("h2", {}, "Cycle time"), times),
    h("section", {class: "panel"}, h("h2", {}, "Decisions per cycle: considered, scheduled, preempted"), decisions));
  async function refresh() {
    const report = await api("/v1/scheduling/report");
    const c = report.scheduler;
    const rows = c ? [["Cycle", c.number], ["Leader (this replica)", c.leader ? "yes" : "no"],
      ["Last cycle", Charts.formatSeconds(c.seconds)], ["Algorithm", Charts.formatSeconds(c.algorithm_seconds)],
      ["Considered", c.considered], ["Scheduled", c.scheduled], ["Preempted", c.preempted],
      ["Async runner", c.runner_state || "– (sync mode)"],
      ["Finished", c.finished_at ? new Date(c.finished_at * 1000).toLocaleTimeString() : "–"]]
      : [["Scheduler", "none in this server process (flotilla serve)"]];
    facts.replaceChildren(...rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, String(v))]));
    const samples = (await api("/ui/api/timeline")).samples.filter((s) => s.cycle);
    Charts.lineChart(times, {series: [
      {name: "cycle", points: samples.map((s) => [s.time, s.cycle.seconds])},
      {name: "algorithm", points: samples.map((s) => [s.time, s.cycle.algorithm_seconds || 0])}],
      xFormat: clock, timeAxis: true, yFormat: Charts.formatSeconds, label: "cycle time over time"});
    Charts.lineChart(decisions, {series: ["considered", "scheduled", "preempted"].map((k) => ({
      name: k, points: samples.map((s) => [s.time, s.cycle[k]])})), step: true,
      xFormat: clock, timeAxis: true, label: "decisions over time",
      markers: samples.filter((s) => s.cycle.preempted).map((s) => ({x: s.time, label: s.cycle.preempted + " preempted"}))});
    say("updated " + new Date().toLocaleTimeString());
  }
  every(3000, () => refresh().catch((error) => say(error.message, "error")));
}

// --- routing -----------------------------------------------------------------------------

function clearTimers() { timers.forEach(clearInterval); timers = []; }

async function route() {
  clearTimers();
  const id = ++routeId;
  const path = (location.hash || "#/jobs").slice(1).split("?")[0];
  for (const link of document.querySelectorAll("nav.top a")) {
    const current = path.startsWith(link.getAttribute("href").slice(1));
    if (current) link.setAttribute("aria-current", "page"); else link.removeAttribute("aria-current");
  }
  try {
    await loadMe();
    if (stale(id)) return;
    const parts = path.split("/").filter(Boolean);
    if (parts[0] === "jobs" && parts[1]) await jobPage(decodeURIComponent(parts[1]));
    else if (parts[0] === "queues") await queuesPage();
    else if (parts[0] === "clusters") await clustersPage();
    else if (parts[0] === "scheduler") await schedulerPage();
    else await jobsPage();
    if (!stale(id)) main.focus({preventScroll: true});
  } catch (error) {
    if (error.status !== 401) say(error.message, "error");
  }
}

window.addEventListener("hashchange", route);
route();
