// The fleet pages: queues (shares, quotas), clusters (nodes, GPUs), the scheduler.
"use strict";

import {Charts, main, h, short, badge, amounts, fmtAmount, clock, every, say, api}
  from "./common.js";

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
        "Fair share", "Decayed usage", "Allocated", "Quota"].map((t) => h("th", {scope: "col"}, t)))), table)),
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
      // With usage_half_life: the average held over the decay window, and the share DRF orders by.
      q.decayed_usage === null ? h("td", {class: "num", title: "no usage_half_life set"}, "–")
        : h("td", {title: "held now plus decayed usage: the share DRF orders this queue by"},
          (q.decayed_share * 100).toFixed(1) + "% (", amounts(q.decayed_usage), ")"),
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
    Charts.lineChart(countChart, {series: counts, step: true, integer: true, xFormat: clock, timeAxis: true,
      label: "jobs per queue over time"});
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
        c.reason ? h("p", {class: "meta reason"}, "unreachable: ", c.reason) : null,
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
      name: k, points: samples.map((s) => [s.time, s.cycle[k]])})), step: true, integer: true,
      xFormat: clock, timeAxis: true, label: "decisions over time",
      markers: samples.filter((s) => s.cycle.preempted).map((s) => ({x: s.time, label: s.cycle.preempted + " preempted"}))});
    say("updated " + new Date().toLocaleTimeString());
  }
  every(3000, () => refresh().catch((error) => say(error.message, "error")));
}

export {queuesPage, clustersPage, schedulerPage};
