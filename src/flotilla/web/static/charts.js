/* Flotilla's charts: small SVG line charts, box plots and a Gantt, with no dependency.
 *
 * One classic script shared by the dashboard (/ui/static/charts.js) and the simulation
 * report (inlined into the page, which must open with the network off). Each chart is plain
 * SVG: it scales with its container, has a fixed aspect ratio (no layout shift when data
 * arrives), an aria-label summary and a <title> on every mark for hover.
 * Exposes window.FlotillaCharts = {lineChart, boxPlot, gantt, formatSeconds, formatNumber,
 * color, preemptedColor}.
 */
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  // Okabe-Ito: distinguishable with the common colour-vision deficiencies. Its vermillion
  // marks preemptions (the Gantt's ▼, the line charts' marker lines; style.css uses the same
  // value), so the series and queue colours are the other seven: a queue never takes the
  // preemption marker's colour, however many queues there are.
  var PREEMPTED = "#D55E00";
  var PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#F0E442", "#000000"];

  function color(index) { return PALETTE[index % PALETTE.length]; }

  function el(name, attrs, parent) {
    var node = document.createElementNS(NS, name);
    for (var key in attrs) { if (attrs[key] !== undefined) node.setAttribute(key, attrs[key]); }
    if (parent) parent.appendChild(node);
    return node;
  }

  function titled(node, text) { el("title", {}, node).textContent = text; return node; }

  function formatSeconds(value) {
    if (value === null || value === undefined || isNaN(value)) return "–";
    var v = Math.abs(value);
    if (v === 0) return "0";
    if (v < 1) return (value * 1000).toFixed(v < 0.01 ? 2 : 0) + " ms";
    if (v < 120) return (+value.toFixed(1)) + " s";
    if (v < 7200) return (+(value / 60).toFixed(1)) + " min";
    return (+(value / 3600).toFixed(1)) + " h";
  }

  function formatNumber(value) {
    if (value === null || value === undefined || isNaN(value)) return "–";
    var v = Math.abs(value);
    if (v >= 1e9) return (+(value / 1e9).toFixed(1)) + "G";
    if (v >= 1e6) return (+(value / 1e6).toFixed(1)) + "M";
    if (v >= 1e4) return (+(value / 1e3).toFixed(1)) + "k";
    if (v >= 10 || v === 0) return String(+value.toFixed(0));
    return String(+value.toFixed(2));
  }

  /* About `count` round ticks from min to max; with `integer` (an axis of counts: jobs,
   * decisions) the step is at least 1, so no tick reads 0.25 of a job. */
  function niceTicks(min, max, count, integer) {
    if (!(max > min)) { max = min + 1; }
    var span = max - min, step = Math.pow(10, Math.floor(Math.log10(span / count)));
    var err = span / count / step;
    if (err >= 7.5) step *= 10; else if (err >= 3.5) step *= 5; else if (err >= 1.5) step *= 2;
    if (integer && step < 1) step = 1;
    var ticks = [], start = Math.ceil(min / step) * step;
    for (var t = start; t <= max + step * 1e-9; t += step) ticks.push(+t.toFixed(10));
    return ticks;
  }

  var TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
                    21600, 43200, 86400, 172800, 604800];

  /* Ticks on a seconds axis at round durations (every 5 min, not every 16.7 min). */
  function timeTicks(min, max, count) {
    var span = max - min, step = TIME_STEPS[TIME_STEPS.length - 1];
    for (var i = 0; i < TIME_STEPS.length; i++) {
      if (span / TIME_STEPS[i] <= count) { step = TIME_STEPS[i]; break; }
    }
    var ticks = [];
    for (var t = Math.ceil(min / step) * step; t <= max + 1e-9; t += step) ticks.push(t);
    return ticks;
  }

  function frame(container, options, height) {
    container.textContent = "";
    // Drawn at the container's own width, so text keeps its size on any screen.
    var width = options.width || Math.max(container.clientWidth || 0, 300) || 640;
    var svg = el("svg", {viewBox: "0 0 " + width + " " + height, role: "img",
      "class": "chart", preserveAspectRatio: "xMidYMid meet"}, container);
    svg.setAttribute("aria-label", options.label || options.title || "chart");
    return {svg: svg, width: width, height: height};
  }

  function legend(container, entries) {
    var list = document.createElement("ul");
    list.className = "chart-legend";
    entries.forEach(function (entry) {
      var item = document.createElement("li");
      var swatch = document.createElement("span");
      swatch.className = "swatch" + (entry.dashed ? " dashed" : "");
      swatch.style.borderColor = entry.color;
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(entry.name));
      list.appendChild(item);
    });
    container.appendChild(list);
  }

  /* Lines over x (time). options: series [{name, points [[x, y]], dashed, color}], yMax,
   * xFormat, yFormat, step (draw steps, for sampled state), markers [{x, label}], empty,
   * integer (y counts whole things: integer ticks only). */
  function lineChart(container, options) {
    var height = options.height || 220;
    var f = frame(container, options, height);
    var pad = {left: 52, right: 12, top: 10, bottom: 26};
    var all = [];
    options.series.forEach(function (s) { s.points.forEach(function (p) { all.push(p); }); });
    var plotW = f.width - pad.left - pad.right, plotH = height - pad.top - pad.bottom;
    if (!all.length) {
      el("text", {x: f.width / 2, y: height / 2, "text-anchor": "middle", "class": "empty"},
         f.svg).textContent = options.empty || "no data yet";
      return f.svg;
    }
    var xs = all.map(function (p) { return p[0]; }), ys = all.map(function (p) { return p[1]; });
    var x0 = options.xMin !== undefined ? options.xMin : Math.min.apply(null, xs);
    var x1 = Math.max.apply(null, xs);
    if (x1 <= x0) x1 = x0 + 1;
    var yMax = options.yMax !== undefined ? options.yMax : Math.max.apply(null, ys);
    if (!(yMax > 0)) yMax = 1;
    var yTicks = niceTicks(0, yMax, 4, options.integer);
    yMax = Math.max(yMax, yTicks[yTicks.length - 1]);
    function sx(x) { return pad.left + (x - x0) / (x1 - x0) * plotW; }
    function sy(y) { return pad.top + plotH - y / yMax * plotH; }
    var yFormat = options.yFormat || formatNumber, xFormat = options.xFormat || formatNumber;
    var axis = el("g", {"class": "axis"}, f.svg);
    var yAxis = el("g", {"class": "y-ticks"}, axis);
    yTicks.forEach(function (t) {
      el("line", {x1: pad.left, x2: f.width - pad.right, y1: sy(t), y2: sy(t), "class": "grid"}, axis);
      el("text", {x: pad.left - 6, y: sy(t) + 4, "text-anchor": "end"}, yAxis).textContent = yFormat(t);
    });
    var xCount = Math.max(2, Math.floor(plotW / 110));
    (options.timeAxis ? timeTicks : niceTicks)(x0, x1, xCount).forEach(function (t) {
      if (t < x0 || t > x1) return;
      el("text", {x: sx(t), y: height - 8, "text-anchor": "middle"}, axis).textContent = xFormat(t);
    });
    (options.markers || []).forEach(function (m) {
      titled(el("line", {x1: sx(m.x), x2: sx(m.x), y1: pad.top, y2: pad.top + plotH,
        "class": "marker"}, f.svg), m.label);
    });
    var entries = [];
    options.series.forEach(function (s, index) {
      var stroke = s.color || color(index);
      entries.push({name: s.name, color: stroke, dashed: s.dashed});
      if (!s.points.length) return;
      var d = "";
      s.points.forEach(function (p, i) {
        if (i === 0) d += "M" + sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1);
        else if (options.step) d += "H" + sx(p[0]).toFixed(1) + "V" + sy(p[1]).toFixed(1);
        else d += "L" + sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1);
      });
      if (options.step && options.xEnd !== undefined) d += "H" + sx(options.xEnd).toFixed(1);
      var path = el("path", {d: d, fill: "none", stroke: stroke, "stroke-width": 2,
        "stroke-dasharray": s.dashed ? "5 4" : undefined, "class": "series",
        "data-series": s.name, "data-points": String(s.points.length)}, f.svg);
      var last = s.points[s.points.length - 1];
      titled(path, s.name + ": " + yFormat(last[1]) + " at " + xFormat(last[0]));
    });
    legend(container, entries);
    return f.svg;
  }

  function quantile(sorted, q) {
    if (!sorted.length) return NaN;
    var pos = (sorted.length - 1) * q, lo = Math.floor(pos), hi = Math.ceil(pos);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
  }

  /* One horizontal box per row: min, p25, median, p75, p95 and max of row.values. */
  function boxPlot(container, options) {
    var rows = options.rows, rowH = 34, pad = {left: 120, right: 16, top: 8, bottom: 26};
    var height = pad.top + pad.bottom + Math.max(rows.length, 1) * rowH;
    var f = frame(container, options, height);
    var plotW = f.width - pad.left - pad.right;
    var max = 0;
    rows.forEach(function (r) { r.values.forEach(function (v) { if (v > max) max = v; }); });
    if (!(max > 0)) max = 1;
    var fmt = options.format || formatSeconds;
    var ticks = (fmt === formatSeconds ? timeTicks : niceTicks)(0, max,
      Math.max(2, Math.floor(plotW / 110)));
    max = Math.max(max, ticks[ticks.length - 1]);
    function sx(v) { return pad.left + v / max * plotW; }
    var axis = el("g", {"class": "axis"}, f.svg);
    ticks.forEach(function (t) {
      el("line", {x1: sx(t), x2: sx(t), y1: pad.top, y2: height - pad.bottom, "class": "grid"}, axis);
      el("text", {x: sx(t), y: height - 8, "text-anchor": "middle"}, axis).textContent = fmt(t);
    });
    rows.forEach(function (row, index) {
      var y = pad.top + index * rowH + rowH / 2;
      var name = row.name.length > 16 ? row.name.slice(0, 15) + "…" : row.name;
      titled(el("text", {x: pad.left - 8, y: y + 4, "text-anchor": "end", "class": "label"},
        f.svg), row.name).appendChild(document.createTextNode(name));
      var values = row.values.slice().sort(function (a, b) { return a - b; });
      if (!values.length) {
        el("text", {x: pad.left + 4, y: y + 4, "class": "empty"}, f.svg).textContent = "no job started";
        return;
      }
      var q = [values[0], quantile(values, 0.25), quantile(values, 0.5), quantile(values, 0.75),
               quantile(values, 0.95), values[values.length - 1]];
      var g = el("g", {"class": "box", "data-row": row.name, "data-count": String(values.length)}, f.svg);
      var c = color(index);
      el("line", {x1: sx(q[0]), x2: sx(q[5]), y1: y, y2: y, stroke: c}, g);
      el("rect", {x: sx(q[1]), y: y - 9, width: Math.max(sx(q[3]) - sx(q[1]), 1.5), height: 18,
        fill: c, "fill-opacity": 0.35, stroke: c}, g);
      el("line", {x1: sx(q[2]), x2: sx(q[2]), y1: y - 9, y2: y + 9, stroke: c, "stroke-width": 3}, g);
      el("line", {x1: sx(q[4]), x2: sx(q[4]), y1: y - 5, y2: y + 5, stroke: c}, g);
      titled(g, row.name + ": " + values.length + " jobs; min " + fmt(q[0]) + ", median " +
        fmt(q[2]) + ", p95 " + fmt(q[4]) + ", max " + fmt(q[5]));
    });
    return f.svg;
  }

  /* Give each bar of a row a lane: the first lane free by the bar's start (the bars sorted
   * by start), so runs that overlap in time on one node never share a lane. Returns the
   * number of lanes per row; sets bar.lane. */
  function assignLanes(bars) {
    var ends = {};
    bars.slice().sort(function (a, b) { return a.start - b.start || a.end - b.end; })
      .forEach(function (b) {
        var lanes = ends[b.row] || (ends[b.row] = []);
        var lane = 0;
        while (lane < lanes.length && lanes[lane] > b.start) lane++;
        lanes[lane] = b.end;
        b.lane = lane;
      });
    var counts = {};
    for (var row in ends) counts[row] = ends[row].length;
    return counts;
  }

  /* Jobs on nodes over time. options: rows [node names], bars [{row, start, end, label,
   * group, preempted}], xEnd. Bars of one group (queue) share a colour; runs that overlap on
   * one node (several jobs sharing it) are drawn in lanes of their own within its row. */
  function gantt(container, options) {
    // A lane is 18 px; a row grows to 4 lanes, past that its lanes get thinner (a node
    // running 30 small jobs at once stays one readable row, its bars still apart).
    var rows = options.rows, laneH = 18, maxRowH = 4 * laneH;
    var pad = {left: 150, right: 12, top: 6, bottom: 26};
    var x0 = options.xMin !== undefined ? options.xMin : 0;
    var x1 = options.xEnd || x0 + 1;
    options.bars.forEach(function (b) { if (b.end > x1) x1 = b.end; });
    if (x1 <= x0) x1 = x0 + 1;
    var known = {};
    rows.forEach(function (r) { known[r] = true; });
    var shown = options.bars.filter(function (b) { return known[b.row] && b.end >= x0; })
      .map(function (b) { return Object.assign({}, b); });
    var lanes = assignLanes(shown);
    var top = {}, rowH = {}, y = pad.top;
    rows.forEach(function (r) {
      top[r] = y;
      rowH[r] = Math.min((lanes[r] || 1) * laneH, maxRowH);
      y += rowH[r];
    });
    var height = pad.top + pad.bottom + Math.max(y - pad.top, laneH);
    var f = frame(container, options, height);
    var plotW = f.width - pad.left - pad.right;
    var fmt = options.xFormat || formatSeconds;
    function sx(x) { return pad.left + (Math.max(x, x0) - x0) / (x1 - x0) * plotW; }
    if (!options.bars.length) {
      el("text", {x: f.width / 2, y: height / 2 + 4, "text-anchor": "middle", "class": "empty"},
         f.svg).textContent = options.empty || "no job has run yet";
    }
    rows.forEach(function (r, i) {
      var name = r.length > 22 ? r.slice(0, 21) + "…" : r;
      if (i % 2 === 0) el("rect", {x: pad.left, y: top[r], width: plotW, height: rowH[r], "class": "band"}, f.svg);
      titled(el("text", {x: pad.left - 6, y: top[r] + rowH[r] / 2 + 4, "text-anchor": "end",
        "class": "label"}, f.svg), r).appendChild(document.createTextNode(name));
    });
    var axis = el("g", {"class": "axis"}, f.svg);
    timeTicks(x0, x1, Math.max(2, Math.floor(plotW / 110))).forEach(function (t) {
      el("text", {x: sx(t), y: height - 8, "text-anchor": "middle"}, axis).textContent = fmt(t);
    });
    var groups = options.groups || [];
    shown.forEach(function (b) {
      var laneHeight = rowH[b.row] / (lanes[b.row] || 1), gap = Math.min(2, laneHeight / 5);
      var y = top[b.row] + b.lane * laneHeight + gap;
      var c = color(Math.max(groups.indexOf(b.group), 0));
      var rect = el("rect", {x: sx(b.start), y: y, width: Math.max(sx(b.end) - sx(b.start), 1),
        height: laneHeight - 2 * gap, fill: c, "fill-opacity": 0.85, stroke: "#fff", "stroke-width": 0.5,
        "class": "bar", "data-row": b.row, "data-lane": String(b.lane), "data-label": b.label},
        f.svg);
      titled(rect, b.label + " (" + b.group + ") on " + b.row + ": " + fmt(b.start) +
        " → " + fmt(b.end) + (b.preempted ? ", preempted" : ""));
      if (b.preempted) {
        titled(el("path", {d: "M" + sx(b.end) + "," + y + "l4,-4h-8z", "class": "preemption"},
          f.svg), b.label + " preempted at " + fmt(b.end));
      }
    });
    legend(container, groups.map(function (g, i) { return {name: g, color: color(i)}; })
      .concat([{name: "▼ preempted", color: PREEMPTED}]));
    return f.svg;
  }

  window.FlotillaCharts = {lineChart: lineChart, boxPlot: boxPlot, gantt: gantt,
    formatSeconds: formatSeconds, formatNumber: formatNumber, color: color,
    preemptedColor: PREEMPTED};
})();
