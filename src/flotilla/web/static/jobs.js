// The jobs page (filters, newest first, paged on the server) and one job's page.
"use strict";

import {TERMINAL, WAITING, STATES, PAGE_SIZE, main, h, short, badge, when, fill, every, say, api,
  can, loadMe, fmtAmount, stale, currentRoute, clearTimers} from "./common.js";

// --- jobs --------------------------------------------------------------------------------

function hashParams() {
  const query = location.hash.split("?")[1] || "";
  return new URLSearchParams(query);
}

async function jobsPage() {
  const id = currentRoute();
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

// An array's element reads ARRAY_INDEX (as the CLI and Slurm name it), its array a link.
function shownId(job) {
  if (job.array_id === null || job.array_id === undefined) {
    return h("a", {href: "#/jobs/" + job.id, title: job.id}, job.id.slice(0, 8));
  }
  return h("span", {class: "element-id"},
    h("a", {href: "#/arrays/" + job.array_id, title: "array " + job.array_id},
      job.array_id.slice(0, 8)),
    h("a", {href: "#/jobs/" + job.id, title: job.id}, "_" + job.array_index));
}

function jobRow(job) {
  return h("tr", {"data-job": job.id, "data-state": job.state},
    h("td", {}, shownId(job)),
    h("td", {}, h("a", {href: "#/jobs/" + job.id}, short(job.name, 28))),
    h("td", {}, short(job.queue, 16)),
    h("td", {}, badge(job.state)),
    h("td", {}, short(job.owner || "–", 12)),
    h("td", {class: "num"}, String(job.priority)),
    h("td", {}, when(job.submitted_at)),
    // The scheduler's live reason for a waiting job (the CLI's REASON), else the stored one
    // (a queued job's is "submitted"): whole, wrapped, never cut.
    h("td", {class: "reason"}, job.pending_reason || job.reason || ""));
}

// --- one array ---------------------------------------------------------------------------

async function arrayPage(arrayId) {
  const id = currentRoute();
  async function refresh() {
    let array;
    try {
      array = await api("/v1/arrays/" + encodeURIComponent(arrayId));
    } catch (error) {
      main.replaceChildren(h("h1", {}, "Array"), h("p", {class: "error"}, error.message));
      clearTimers();
      return;
    }
    if (stale(id)) return;
    const counts = Object.entries(array.counts).sort()
      .map(([state, count]) => state + " " + count).join(", ");
    const size = array.parallelism ? array.size + " (at most " + array.parallelism + " at once)"
      : String(array.size);
    main.replaceChildren(h("p", {}, h("a", {href: "#/jobs"}, "← Jobs")),
      h("div", {class: "job-head"}, h("h1", {}, short(array.name, 48)),
        h("p", {class: "meta"}, "array ", short(array.id, 40, true), " · queue ",
          short(array.queue, 24), " · size ", size, " · ", counts)),
      h("div", {class: "table-wrap"}, h("table", {class: "jobs", "aria-label": "elements"},
        h("thead", {}, h("tr", {}, ["ID", "Name", "Queue", "State", "Owner", "Priority",
          "Submitted", "Reason"].map((t) => h("th", {scope: "col"}, t)))),
        h("tbody", {}, ...array.jobs.map(jobRow)))));
    say("updated " + new Date().toLocaleTimeString());
  }
  every(2000, refresh);
}

// --- one job -----------------------------------------------------------------------------

async function jobPage(jobId) {
  const id = currentRoute();
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
      h("p", {class: "meta"}, "id ", short(job.id, 40, true),
        job.array_id ? h("span", {}, " · element " + job.array_index + " of ",
          h("a", {href: "#/arrays/" + job.array_id}, "array " + job.array_id.slice(0, 8))) : null,
        " · queue ", short(job.queue, 24),
        " · owner ", job.owner || "–", " · priority ", String(job.priority),
        " · submitted ", when(job.submitted_at)));
    const key = job.state + "/" + job.priority + "/" + job.cancel_requested;
    if (actionsFor !== key) { renderActions(); actionsFor = key; }
    const detail = await api("/v1/jobs/" + encodeURIComponent(jobId) + "/why");
    fill(why, h("h2", {}, WAITING.has(job.state) ? "Why it waits" : "State"),
      h("p", {class: "reason-text"}, detail.summary),
      detail.estimated_start ? h("p", {class: "estimated-start"}, "Start: ",
        h("strong", {}, detail.estimated_start.summary))
        : detail.start_unknown ? h("p", {class: "estimated-start"}, "Start: ",
          h("strong", {}, detail.start_unknown)) : null,
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
        "Replicas (node, GPUs)", "GPU use"].map((t) => h("th", {scope: "col"}, t)))),
      h("tbody", {}, job.runs.map((run) => h("tr", {},
        h("td", {class: "num"}, String(run.attempt)), h("td", {}, short(run.cluster, 16)),
        h("td", {}, badge(run.state)), h("td", {}, when(run.started_at)),
        h("td", {}, when(run.finished_at)), h("td", {class: "num"}, run.exit_code ?? "–"),
        h("td", {}, h("ul", {class: "placements"}, (run.assignment.placements || []).map((p) =>
          h("li", {}, p.task + "[" + p.replica + "] on ", short(p.node, 20),
            (p.gpus && p.gpus.length) ? " · GPUs " + p.gpus.join(",") : "",
            (p.shares && p.shares.length) ? " · GPU share " + p.shares.map((s) => s[0] + ":" + s[1]).join(",") : "")))),
        h("td", {class: "gpu-use"}, gpuUse(run.gpu)))))))
      : h("p", {}, "No run yet."));
  }

  /** A run's measured GPU use: memory now (peak), utilisation, GPU-hours used of held. */
  function gpuUse(gpu) {
    if (!gpu) return "–";
    const parts = ["memory " + fmtAmount("memory", gpu.memory_used) +
      " (peak " + fmtAmount("memory", gpu.memory_peak) + ")"];
    if (gpu.utilization !== null) parts.push("util " + gpu.utilization.toFixed(0) + "%");
    parts.push(gpu.gpu_hours_used.toFixed(3) + " of " + gpu.gpu_hours_held.toFixed(3) + " GPU-h");
    if (gpu.efficiency !== null) parts.push("efficiency " + (100 * gpu.efficiency).toFixed(0) + "%");
    return parts.join(" · ");
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
        if (chunk.complete) {
          logState.done = true;
          if (!logs.textContent) logs.textContent = "(no output on " + logState.stream + ")";
          break;
        }
        if (!chunk.data) break;
      }
    } catch (error) {
      if (!logs.textContent) logs.textContent = "(" + error.message + ")";
    }
  }

  every(1500, refresh);
}

export {jobsPage, jobPage, arrayPage};
