/* The simulation report page: draws the inlined data with FlotillaCharts. No network. */
(function () {
  "use strict";
  var Charts = window.FlotillaCharts;
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var pictures = data.pictures;
  var main = document.getElementById("main");

  function h(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    (children || []).forEach(function (c) {
      node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return node;
  }

  function section(id, title, note) {
    var box = h("div", {"class": "chart-box", id: id});
    main.appendChild(h("section", {"class": "panel"},
      [h("h2", {}, [title])].concat(note ? [h("p", {"class": "hint"}, [note])] : []).concat([box])));
    return box;
  }

  function percent(v) { return (v * 100).toFixed(0) + "%"; }
  var end = pictures.end_time;
  var markers = pictures.preemptions.map(function (p) {
    return {x: p.time, label: p.job + " (" + p.queue + ") preempted at " + Charts.formatSeconds(p.time)};
  });

  var s = data.summary;
  var facts = [["Jobs", s.jobs], ["Scheduled", s.scheduled], ["Cycles", s.cycles],
    ["Mean wait", Charts.formatSeconds(s.mean_wait)], ["Preemptions", s.preemptions],
    ["Virtual time", Charts.formatSeconds(data.pictures.end_time)], ["Ended because", s.end_reason]];
  Object.keys(s.utilization || {}).forEach(function (r) {
    facts.push(["Mean " + r + " utilisation", percent(s.utilization[r])]);
  });
  var dl = h("dl", {"class": "facts"}, []);
  facts.forEach(function (f) { dl.appendChild(h("dt", {}, [f[0]])); dl.appendChild(h("dd", {}, [String(f[1])])); });
  main.appendChild(h("section", {"class": "panel"}, [h("h2", {}, ["Summary"]), dl]));

  var rows = data.queues.map(function (q) {
    return h("tr", {}, [h("th", {scope: "row"}, [q.name]), h("td", {"class": "num"}, [String(q.weight)]),
      h("td", {"class": "num"}, [String(q.running)]), h("td", {"class": "num"}, [String(q.queued)]),
      h("td", {"class": "num"}, [percent(q.dominant_share)]),
      h("td", {"class": "num"}, [q.mean_wait === null ? "–" : Charts.formatSeconds(q.mean_wait)])]);
  });
  main.appendChild(h("section", {"class": "panel"}, [h("h2", {}, ["Queues at the end"]),
    h("div", {"class": "table-wrap"}, [h("table", {}, [h("thead", {}, [h("tr", {},
      ["Queue", "Weight", "Running", "Queued", "Dominant share", "Mean wait"].map(function (t) {
        return h("th", {scope: "col"}, [t]); }))]), h("tbody", {}, rows)])])]));

  var util = [];
  Object.keys(pictures.utilisation).forEach(function (cluster) {
    Object.keys(pictures.utilisation[cluster]).forEach(function (r) {
      util.push({name: cluster + " " + r, points: pictures.utilisation[cluster][r]});
    });
  });
  Charts.lineChart(section("utilisation", "Utilisation per cluster and resource"),
    {series: util, yMax: 1, step: true, xEnd: end, xMin: 0, xFormat: Charts.formatSeconds, timeAxis: true,
     yFormat: percent, markers: markers, label: "utilisation per cluster and resource over time"});

  var shares = [];
  Object.keys(pictures.shares).forEach(function (queue, i) {
    shares.push({name: queue + " share", color: Charts.color(i), points: pictures.shares[queue]});
    shares.push({name: queue + " fair share", color: Charts.color(i), dashed: true, points: pictures.fair[queue]});
  });
  Charts.lineChart(section("shares", "Dominant share (solid) against fair share (dashed) per queue",
    "Fair share: the queue's weight over the weights of the queues wanting resources at that moment. Red lines: preemptions."),
    {series: shares, yMax: 1, step: true, xEnd: end, xMin: 0, xFormat: Charts.formatSeconds, timeAxis: true,
     yFormat: percent, markers: markers, label: "queue shares over time"});

  Charts.boxPlot(section("waits", "Wait time per queue (submission to first scheduling)",
    "Box: 25th to 75th percentile; thick line: median; tick: 95th percentile; whiskers: min and max."),
    {rows: Object.keys(pictures.waits).map(function (q) { return {name: q, values: pictures.waits[q]}; }),
     label: "wait time distributions per queue"});

  if (pictures.gantt) {
    Charts.gantt(section("gantt", "Jobs on nodes"), {rows: pictures.gantt.rows, bars: pictures.gantt.bars,
      groups: pictures.gantt.groups, xEnd: end, label: "jobs on nodes over time"});
  } else {
    main.appendChild(h("section", {"class": "panel"}, [h("h2", {}, ["Jobs on nodes"]),
      h("p", {"class": "hint"}, ["Not drawn: " + pictures.gantt_skipped + "."])]));
  }
})();
