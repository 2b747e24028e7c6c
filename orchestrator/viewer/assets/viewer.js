// The a2rl viewer's pages: the sweep (filters, curves, tables), a cell (trajectory, transcript, code and diffs) and a
// group (seeds side by side). Plain DOM and plotly.js; data comes from the page (#page-data) or from script files
// that call A2RL.loaded, because a page opened from disk (file://) may not fetch JSON. Text from the records is only
// ever set as textContent, never parsed as HTML.
"use strict";

const A2RL = (window.A2RL = window.A2RL || {});
const waiting = {};
A2RL.loaded = (name, value) => {
  const w = waiting[name];
  delete waiting[name];
  if (w) w(value);
};
const scriptsAsked = {};
function loadScript(src, name) {
  if (!scriptsAsked[src]) {
    scriptsAsked[src] = new Promise((resolve, reject) => {
      waiting[name] = resolve;
      const s = document.createElement("script");
      s.src = src;
      s.onerror = () => { delete waiting[name]; delete scriptsAsked[src]; reject(new Error("could not load " + src)); };
      document.head.appendChild(s);
    });
  }
  return scriptsAsked[src];
}

// -- small helpers -----------------------------------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return node;
}
// Numbers are shown by the named formats the page's data brings (analysis/formats.py: FORMATS); tables come with
// their values already formatted, so only what the script reads from the records unparsed (a transcript's payloads,
// a plot's hover) is formatted here, by the same names.
let FORMATS = {};
function formatted(v, name) {
  const spec = FORMATS[name] || {};
  if (v === null || v === undefined || (typeof v === "number" && isNaN(v))) return "—";
  if (typeof v !== "number") return String(v);
  if (spec.duration) {
    const s = Math.round(v), h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
    return h ? `${h}h${String(m).padStart(2, "0")}m` : m ? `${m}m${String(s % 60).padStart(2, "0")}s` : `${s}s`;
  }
  if (spec.digits === undefined) return String(v);
  const text = v.toFixed(spec.digits);
  return spec.signed && v >= 0 ? "+" + text : text;
}
function unique(values) { return [...new Set(values)].sort((a, b) => String(a).localeCompare(String(b))); }
// plotly.js: its cartesian bundle (scatter and heatmap, all the pages draw; 1.5 MB where the whole of plotly.js is
// 4.8 MB) where scripts/setup fetched it, else the whole library (site.py: plotly_js chooses).
const PLOTLY = "assets/plotly.min.js";
// Its first parse still takes a while on a slow machine, so it is loaded after the page's tables and
// transcript are drawn (body[data-ready]); plots are queued until then and drawn when it arrives (body[data-plotted]).
let plotlyArrived;
const plotlyGate = new Promise((resolve) => { plotlyArrived = resolve; });
const plotsDrawn = [];
function plotly(div, traces, layout) {
  const drawn = plotlyGate.then(() => {
    if (!window.Plotly) { div.textContent = `plotly.js did not load (${PLOTLY})`; return div; }
    return Plotly.newPlot(div, traces, Object.assign({ margin: { l: 55, r: 15, t: 30, b: 45 }, height: 320,
      hovermode: "closest", legend: { font: { size: 10 } } }, layout), { displaylogo: false, responsive: true }).then(() => div);
  });
  plotsDrawn.push(drawn);
  return drawn;
}
function loadPlotly() {
  if (!plotsDrawn.length) return Promise.resolve();
  const s = document.createElement("script");
  s.src = PLOTLY;
  s.onload = s.onerror = () => {
    document.body.dataset.plotlyLoaded = String(Math.round(performance.now()));
    plotlyArrived();
  };
  document.head.appendChild(s);
  return Promise.all(plotsDrawn);
}
const pageData = () => JSON.parse(document.getElementById("page-data").textContent);

// A live page (served by `view`) asks which data the server has ready and reloads when it is newer than its own:
// the sweep's for the sweep and group pages, its own cell's for a cell page.
function followLedger(stillMoving, cellId) {
  const body = document.body;
  if (!body.dataset.live || !stillMoving) return;
  setInterval(async () => {
    try {
      const r = await fetch(cellId ? `version?cell=${cellId}` : "version", { cache: "no-store" });
      const v = await r.json();
      if ((cellId ? v.cell : v.sweep) !== body.dataset.version) location.reload();
    } catch (e) { /* the server stopped: keep what is shown */ }
  }, 5000);
}

// -- the sweep -----------------------------------------------------------------------------------------------------
const FILTERS = ["task", "agent", "driver", "mode", "status", "outcome_class"];

// A cell's row, on the sweep page and a group's: the columns and their formatted values come in the page's data.
function cellRow(c, columns, failureClasses) {
  return el("tr", { class: `status-${c.status}` }, columns.map(({ key, format }) => {
    const v = c[key], text = c.shown[key];
    if (key === "cell_id") return el("td", {}, el("a", { href: `cell-${v}.html` }, v), " ", el("a", { class: "muted", href: `group-${c.group}.html`, title: "this group's seeds side by side" }, "seeds"));
    if (key === "flags") return el("td", {}, v.map((f) => el("span", { class: "flag" }, f)));
    if (key === "outcome_class") return el("td", { title: failureClasses[v] || "" }, v || "");
    return el("td", { class: format === "text" ? null : "num" }, text);
  }));
}

function sweepPage(data) {
  const state = { filters: {}, flag: "", text: "", sort: null, desc: false, axis: "time" };
  const filters = document.getElementById("filters");
  for (const key of FILTERS) {
    const values = unique(data.cells.map((c) => c[key]));
    const select = el("select", { "data-filter": key, onchange: (e) => { state.filters[key] = e.target.value; update(); } },
      el("option", { value: "" }, `${key.replace("_class", "")}: all`), values.map((v) => el("option", { value: v }, String(v))));
    filters.appendChild(select);
  }
  const flags = unique(data.cells.flatMap((c) => c.flags));
  filters.appendChild(el("select", { "data-filter": "flags", onchange: (e) => { state.flag = e.target.value; update(); } },
    el("option", { value: "" }, "flags: any"), el("option", { value: "-" }, "flags: none"),
    flags.map((f) => el("option", { value: f }, f))));
  filters.appendChild(el("input", { type: "search", placeholder: "cell id", oninput: (e) => { state.text = e.target.value.trim(); update(); } }));

  const table = document.getElementById("cells");
  const head = el("tr", {}, data.columns.map(({ key, label }) => el("th", { "data-key": key, onclick: () => {
    state.desc = state.sort === key ? !state.desc : false;
    state.sort = key;
    update();
  } }, label)));
  table.appendChild(el("thead", {}, head));
  const body = el("tbody");
  table.appendChild(body);

  const shown = () => data.cells.filter((c) =>
    FILTERS.every((k) => !state.filters[k] || String(c[k]) === state.filters[k]) &&
    (!state.flag || (state.flag === "-" ? c.flags.length === 0 : c.flags.includes(state.flag))) &&
    (!state.text || c.cell_id.includes(state.text)));

  function update() {
    let cells = shown();
    if (state.sort) {
      const k = state.sort, sign = state.desc ? -1 : 1;
      cells = cells.slice().sort((a, b) => {
        const x = a[k], y = b[k];
        if (x === y) return 0;
        if (x === null || x === undefined) return 1;
        if (y === null || y === undefined) return -1;
        return (typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y))) * sign;
      });
    }
    body.replaceChildren(...cells.map((c) => cellRow(c, data.columns, data.failure_classes)));
    document.getElementById("cell-count").textContent = `${cells.length} of ${data.cells.length} cells`;
    drawCurves(cells);
  }

  // One task's curves at a time (a panel per task of a paper grid is a dozen plots of dozens of lines each).
  const tabs = document.getElementById("axis-tabs");
  const allTasks = unique(data.cells.map((c) => c.task));
  state.task = allTasks[0];
  const taskPick = el("select", { "data-plot-task": "", onchange: (e) => { state.task = e.target.value; update(); } },
    allTasks.map((t) => el("option", { value: t }, `task: ${t}`)));
  tabs.appendChild(taskPick);
  for (const axis of Object.keys(data.axis_labels)) {
    tabs.appendChild(el("button", { "data-axis": axis, class: axis === state.axis ? "on" : "", onclick: () => {
      state.axis = axis;
      for (const b of tabs.querySelectorAll("button")) b.className = b.dataset.axis === axis ? "on" : "";
      update();
    } }, data.axis_labels[axis]));
  }

  function drawCurves(cells) {
    const root = document.getElementById("curves");
    const band = data.bands[state.axis] || { columns: [], rows: [] };
    const rows = band.rows.map((r) => Object.fromEntries(band.columns.map((c, i) => [c, r[i]])));
    const points = data.cell_curves[state.axis] || {};
    const task = state.task;
    root.replaceChildren();
    if (!task) { root.appendChild(el("p", { class: "muted" }, "No cells.")); return; }
    const div = el("div", { class: "plot", "data-task": task });
    root.appendChild(div);
    const traces = [];
    const groups = {};
    for (const r of rows.filter((r) => r.task === task)) (groups[`${r.agent} / ${r.driver}${r.mode === "free" ? "" : " / " + r.mode}`] ||= []).push(r);
    for (const [name, g] of Object.entries(groups)) {
      const x = g.map((r) => r.x);
      traces.push({ x: x.concat(x.slice().reverse()), y: g.map((r) => r.hi).concat(g.map((r) => r.lo).reverse()),
        fill: "toself", line: { width: 0, shape: "hv" }, opacity: 0.2, hoverinfo: "skip", showlegend: false, legendgroup: name, type: "scatter" });
      traces.push({ x, y: g.map((r) => r.mean), name: `${name} (n=${g[0].n})`, legendgroup: name, line: { shape: "hv", width: 2.5 },
        type: "scatter", mode: "lines", hovertemplate: `${name}<br>x=%{x}<br>mean %{y:.3f}<extra></extra>` });
    }
    for (const c of cells.filter((c) => c.task === task && points[c.cell_id])) {
      const [x, y] = points[c.cell_id];
      traces.push({ x, y, type: "scatter", mode: "lines+markers", line: { shape: "hv", width: 1 }, marker: { size: 4 }, opacity: 0.45,
        showlegend: false, customdata: x.map(() => c.cell_id),
        hovertemplate: `cell ${c.cell_id}<br>${c.agent} / ${c.driver}, seed ${c.seed}<br>x=%{x}<br>best-so-far %{y:.3f}<extra></extra>` });
    }
    plotly(div, traces, { title: { text: task, font: { size: 14 } }, height: 420, xaxis: { title: { text: data.axis_labels[state.axis] } },
      yaxis: { title: { text: "best-so-far improvement" }, zeroline: true } }).then(clickOpensCell);
    drawBestOfK(data.tables.best_of_k, task);
  }

  update();
  drawHeatmap(data.tables.improvement);
  drawTables(data.shown_tables);
  followLedger(data.progress.missing > 0);
}

function clickOpensCell(div) {
  if (div.on) div.on("plotly_click", (ev) => { const cd = ev.points[0].customdata; if (cd) location.href = `cell-${cd}.html`; });
}

function records(t) { return t ? t.rows.map((r) => Object.fromEntries(t.columns.map((c, i) => [c, r[i]]))) : []; }

function drawHeatmap(table) {
  const div = document.getElementById("heatmap");
  const rows = records(table).filter((r) => r.infra_errors === "exclude" && r.n > 0);
  if (!rows.length) { div.appendChild(el("p", { class: "muted" }, "No finished cells yet.")); return; }
  const tasks = unique(rows.map((r) => r.task)), who = unique(rows.map((r) => `${r.agent} / ${r.driver}${r.mode === "free" ? "" : " / " + r.mode}`));
  const z = tasks.map((t) => who.map((w) => {
    const r = rows.find((r) => r.task === t && `${r.agent} / ${r.driver}${r.mode === "free" ? "" : " / " + r.mode}` === w);
    return r ? r.mean : null;
  }));
  const limit = Math.max(1e-9, ...z.flat().filter((v) => v !== null).map(Math.abs));
  plotly(div, [{ type: "heatmap", z, x: who, y: tasks, colorscale: "RdBu", zmin: -limit, zmax: limit, reversescale: true,
    text: z.map((r) => r.map((v) => formatted(v, "gain_short"))), texttemplate: "%{text}",
    hovertemplate: "%{y} · %{x}<br>mean improvement %{z:.3f}<extra></extra>" }],
  { height: 120 + 40 * tasks.length, margin: { l: 120, r: 15, t: 20, b: 90 } });
}

function drawBestOfK(table, task) {
  const root = document.getElementById("best-of-k");
  const rows = records(table).filter((r) => r.infra_errors === "exclude" && r.expected_best !== null && r.task === task);
  if (!rows.length) { root.replaceChildren(el("p", { class: "muted" }, "No finished cells of this task yet.")); return; }
  const div = el("div", { class: "plot" });
  root.replaceChildren(div);
  const groups = {};
  for (const r of rows) (groups[`${r.agent} / ${r.driver}${r.mode === "free" ? "" : " / " + r.mode}`] ||= []).push(r);
  plotly(div, Object.entries(groups).map(([name, g]) => ({ x: g.map((r) => r.k), y: g.map((r) => r.expected_best), name,
    type: "scatter", mode: "lines+markers" })), { title: { text: task, font: { size: 14 } }, xaxis: { title: { text: "k runs" }, dtick: 1 },
    yaxis: { title: { text: "expected best improvement" } }, height: 300 });
}

function drawTables(tables) {
  const root = document.getElementById("tables");
  for (const [name, t] of Object.entries(tables)) {
    root.appendChild(el("details", { open: name === "improvement" || null, "data-table": name }, el("summary", {}, `${name} (${t.rows.length} rows)`),
      el("div", { class: "scroll" }, el("table", { class: "data" },
        el("thead", {}, el("tr", {}, t.columns.map((c) => el("th", {}, c)))),
        el("tbody", {}, t.rows.map((r) => el("tr", {}, r.map((text) => el("td", { class: /^[+-]?[0-9.]+$/.test(text) ? "num" : "" }, text)))))))));
  }
}

// -- a group -------------------------------------------------------------------------------------------------------
function groupPage(data) {
  const seeds = document.getElementById("seeds");
  seeds.appendChild(el("thead", {}, el("tr", {}, data.columns.map(({ label }) => el("th", {}, label)))));
  seeds.appendChild(el("tbody", {}, data.cells.slice().sort((a, b) => a.seed - b.seed).map((c) => cellRow(c, data.columns, data.failure_classes))));
  let axis = "time";
  const tabs = document.getElementById("axis-tabs");
  const draw = () => {
    const points = data.cell_curves[axis] || {};
    const traces = data.cells.filter((c) => points[c.cell_id]).map((c) => ({ x: points[c.cell_id][0], y: points[c.cell_id][1],
      name: `seed ${c.seed} (${c.cell_id})`, type: "scatter", mode: "lines+markers", line: { shape: "hv" }, customdata: points[c.cell_id][0].map(() => c.cell_id) }));
    const div = document.getElementById("group-curves");
    if (!traces.length) { div.replaceChildren(el("p", { class: "muted" }, "No finished seed has a curve yet.")); return; }
    plotly(div, traces, { xaxis: { title: { text: data.axis_labels[axis] } }, yaxis: { title: { text: "best-so-far improvement" } } })
      .then(clickOpensCell);
  };
  for (const a of Object.keys(data.axis_labels)) {
    tabs.appendChild(el("button", { "data-axis": a, class: a === axis ? "on" : "", onclick: () => {
      axis = a;
      for (const b of tabs.children) b.className = b.dataset.axis === a ? "on" : "";
      draw();
    } }, data.axis_labels[a]));
  }
  draw();
  followLedger(data.cells.some((c) => c.status === "pending" || c.status === "running"));
}

// -- a cell --------------------------------------------------------------------------------------------------------
async function cellPage(data) {
  drawTrajectory(data);
  const transcript = makeTranscript(data);
  for (const a of document.querySelectorAll("a.trace-link")) {
    a.addEventListener("click", (e) => { e.preventDefault(); transcript.goTo(parseFloat(a.getAttribute("href").slice(3))); });
  }
  if (data.has_code) makeCode(data);
  followLedger(data.cell.status === "pending" || data.cell.status === "running", data.cell.cell_id);
  if (location.hash.startsWith("#t=")) await transcript.goTo(parseFloat(location.hash.slice(3)));
  else await transcript.show(0);
}

function drawTrajectory(data) {
  const div = document.getElementById("trajectory");
  const r = data.report || {};
  const subs = r.trajectory || [];
  if (!subs.length) { div.replaceChildren(el("p", { class: "muted" }, "No submissions to plot.")); div.classList.remove("plot"); return; }
  const base = r.baseline_score ?? 0;
  const valid = subs.filter((s) => s.valid);
  const color = (s) => (s.flags.includes("copy_of_base") || s.flags.includes("known_checkpoint") ? "#d62728" : s.flags.length ? "#ff7f0e" : "#1f77b4");
  const hover = (s) => `#${s.index} at ${formatted(s.t, "seconds")} s<br>score ${formatted(s.score, "score")} (${formatted(s.improvement, "gain")})` +
    (s.flags.length ? `<br>flags: ${s.flags.join(", ")}` : "") + (s.error ? `<br>error: ${String(s.error).slice(0, 120)}` : "") +
    (s.code_commit ? `<br>code ${s.code_commit.slice(0, 10)}` : "") +
    (data.final && data.final.submission_id === s.index ? `<br>held-out ${formatted(data.final.score, "score")}` : "");
  const end = Math.max(r.elapsed_s || 0, ...subs.map((s) => s.t));
  const traces = [
    { x: [0, end], y: [base, base], name: "baseline", mode: "lines", line: { dash: "dot", color: "grey" }, hoverinfo: "skip" },
    { x: [0, ...valid.map((s) => s.t), end], y: [base, ...valid.map((s) => base + (s.best_so_far ?? 0)), base + (valid.length ? valid[valid.length - 1].best_so_far ?? 0 : 0)],
      name: "best so far", mode: "lines", line: { shape: "hv", color: "#2ca02c" }, hoverinfo: "skip" },
    { x: valid.map((s) => s.t), y: valid.map((s) => s.score), name: "submissions", mode: "markers",
      marker: { size: 10, color: valid.map(color) }, text: valid.map(hover), hovertemplate: "%{text}<extra></extra>" },
  ];
  const failed = subs.filter((s) => !s.valid);
  if (failed.length) traces.push({ x: failed.map((s) => s.t), y: failed.map(() => base), name: "not scored", mode: "markers",
    marker: { symbol: "x", size: 10, color: "#7f7f7f" }, text: failed.map(hover), hovertemplate: "%{text}<extra></extra>" });
  if (data.final && data.final.score !== null && data.final.score !== undefined) {
    const at = subs.find((s) => s.index === data.final.submission_id);
    traces.push({ x: [at ? at.t : end], y: [data.final.score], name: "held-out final", mode: "markers",
      marker: { symbol: "diamond", size: 13, color: "#9467bd" }, hovertemplate: `held-out ${formatted(data.final.score, "score")} (n=${data.final.n})<extra></extra>` });
  }
  plotly(div, traces, { xaxis: { title: { text: "time since the attempt started (s)" } }, yaxis: { title: { text: "score" } } });
}

// The transcript: one page of entries at a time (a 12-hour trace is tens of thousands), long texts folded.
const FOLD = 1200;
const KIND_FILTERS = { message: "messages", tool_call: "tool calls", tool_result: "tool results", driver_usage: "driver calls",
  submission: "submissions", other: "other" };
function kindOf(e) {
  if (e.kind === "agent_trace") return KIND_FILTERS[e.payload.type] ? e.payload.type : "other";
  return KIND_FILTERS[e.kind] ? e.kind : "other";
}
function textBlock(text, cls) {
  text = typeof text === "string" ? text : JSON.stringify(text, null, 2);
  if (text === undefined || text === null) text = "";
  if (text.length <= FOLD) return el("pre", { class: cls }, text);
  return el("details", { class: "fold" }, el("summary", {}, el("pre", { class: cls }, text.slice(0, 300) + " …"),
    el("span", { class: "muted" }, ` (${text.length} characters: open to read all)`)), el("pre", { class: cls }, text));
}
function entryView(e) {
  const p = e.payload, kind = kindOf(e);
  const head = el("a", { class: "t", href: `#t=${e.t.toFixed(1)}`, title: "link to this moment" }, `t=${formatted(e.t, "seconds")}s`);
  const box = (cls, ...children) => el("div", { class: `entry ${cls}`, id: `e-${e.n}`, "data-t": e.t.toFixed(1), "data-kind": kind }, head, ...children);
  if (e.kind === "agent_trace") {
    switch (p.type) {
      case "message": return box(`message role-${p.role}`, el("span", { class: "who" }, p.role || "model"), textBlock(p.text, "text"));
      case "tool_call": return box("tool-call", el("span", { class: "who" }, `tool call · ${p.tool}`), p.id ? el("span", { class: "muted" }, ` ${p.id}`) : null, textBlock(p.input, "code"));
      case "tool_result": return box(`tool-result ${p.ok === false ? "failed" : ""}`, el("span", { class: "who" }, p.ok === false ? "tool result · failed" : "tool result"), p.id ? el("span", { class: "muted" }, ` ${p.id}`) : null, textBlock(p.output, "code"));
      case "usage": return box("small", `usage (as the CLI reports it${p.scope ? ", " + p.scope : ""}): ${p.input_tokens ?? "—"} in, ${p.output_tokens ?? "—"} out, ${p.cached_tokens ?? 0} cached` + (p.cost_usd ? `, $${formatted(p.cost_usd, "usd")}` : ""));
      case "session": return box("small", `session started: model ${p.model || "—"}`);
      case "result": return box("small", `the CLI's verdict: ${p.ok ? "ok" : "not ok"}${p.turns ? `, ${p.turns} turns` : ""}`, p.text ? textBlock(p.text, "text") : null);
      case "error": return box("failed", el("span", { class: "who" }, "error"), textBlock(p.message, "text"));
      case "notice": return box("small", el("span", { class: "who" }, "notice"), textBlock(p.message, "text"));
      default: return box("small", `${p.type || "event"}: `, textBlock(Object.fromEntries(Object.entries(p).filter(([k]) => k !== "type")), "code"));
    }
  }
  if (e.kind === "driver_usage") {
    return box("driver", el("span", { class: "who" }, "driver call"),
      ` ${p.model || ""}${p.requested_model && p.requested_model !== p.model ? ` (asked ${p.requested_model})` : ""} · ${p.input_tokens ?? 0} in / ${p.output_tokens ?? 0} out` +
      `${p.cached_tokens ? ` / ${p.cached_tokens} cached` : ""} tokens · $${formatted(p.cost_usd || 0, "usd")}` +
      `${p.latency_s !== undefined ? ` · ${formatted(p.latency_s, "seconds")} s` : ""}${p.status && p.status !== 200 ? ` · status ${p.status}` : ""}${p.estimated ? " · estimated" : ""}`,
      p.error ? el("div", { class: "error" }, String(p.error)) : null);
  }
  if (e.kind === "submission") {
    return box("submission", el("span", { class: "who" }, `submission #${p.submission_id}`),
      ` score ${formatted(p.score, "score")}${p.improvement !== null && p.improvement !== undefined ? ` (${formatted(p.improvement, "gain")})` : ""} `,
      (p.flags || []).map((f) => el("span", { class: "flag" }, f)), p.error ? el("div", { class: "error" }, String(p.error)) : null);
  }
  if (e.kind === "outcome") return box("status", el("span", { class: "who" }, "outcome"), ` ${p.status}${p.limit_hit ? ", limit " + p.limit_hit : ""}${p.error ? ": " + p.error : ""}`);
  if (e.kind === "reprompt") return box("status", el("span", { class: "who" }, "re-prompted"), ` ${formatted(p.time_left_s, "duration")} left`);
  return box("status", el("span", { class: "who" }, e.kind), ` ${p.status || JSON.stringify(p)}`);
}

function makeTranscript(data) {
  const pages = data.trace_pages, root = document.getElementById("trace"), controls = document.getElementById("trace-controls");
  const cellId = data.cell.cell_id;
  const hidden = new Set();
  let current = -1;
  const pager = el("select", { "aria-label": "transcript page", onchange: (e) => show(parseInt(e.target.value, 10)) },
    pages.map((p, i) => el("option", { value: i }, `page ${i + 1} of ${pages.length}: t=${formatted(p.t0, "duration")}–${formatted(p.t1, "duration")}`)));
  const prev = el("button", { onclick: () => show(current - 1) }, "◀ earlier");
  const next = el("button", { onclick: () => show(current + 1) }, "later ▶");
  controls.append(prev, pager, next, ...Object.entries(KIND_FILTERS).map(([k, label]) => el("label", {},
    el("input", { type: "checkbox", checked: "", "data-kind": k, onchange: (e) => { e.target.checked ? hidden.delete(k) : hidden.add(k); applyFilter(); } }), ` ${label}`)));
  if (!pages.length) { root.appendChild(el("p", { class: "muted" }, "No trace or events recorded for the final attempt.")); controls.replaceChildren(); }

  function applyFilter() { for (const node of root.children) node.hidden = hidden.has(node.dataset.kind); }
  async function show(i, then) {
    if (i < 0 || i >= pages.length) return;
    current = i;
    pager.value = String(i);
    prev.disabled = i === 0;
    next.disabled = i === pages.length - 1;
    root.replaceChildren(el("p", { class: "muted" }, "loading…"));
    const entries = await loadScript(`data/cell-${cellId}-trace-${i}.js`, `trace-${i}`);
    if (current !== i) return;
    const frag = document.createDocumentFragment();
    for (const e of entries) frag.appendChild(entryView(e));
    root.replaceChildren(frag);
    applyFilter();
    if (then) then();
  }
  function goTo(t) {
    const found = pages.findIndex((p) => p.t1 >= t - 0.05);
    return show(found < 0 ? pages.length - 1 : found, () => {
      const nodes = [...root.querySelectorAll(".entry")];
      const hit = nodes.find((n) => Math.abs(parseFloat(n.dataset.t) - t) < 0.051) || nodes.find((n) => parseFloat(n.dataset.t) >= t);
      if (hit) {
        hit.classList.add("highlight");
        for (const d of hit.querySelectorAll("details")) d.open = true;
        hit.scrollIntoView({ block: "center" });
      }
    });
  }
  return { show, goTo };
}

// Code at each submission and the diff between any two, from the snapshots' file lists and texts.
function makeCode(data) {
  const controls = document.getElementById("code-controls"), view = document.getElementById("code-view");
  let code = null;
  const load = async () => {
    if (!code) code = await loadScript(`data/cell-${data.cell.cell_id}-code.js`, "code");
    return code;
  };
  const open = el("button", { onclick: async () => { await load(); build(); } }, "show the code");
  controls.appendChild(open);
  for (const a of document.querySelectorAll("a.code-link")) {
    a.addEventListener("click", async (e) => { e.preventDefault(); await load(); build(a.dataset.commit); document.getElementById("code").scrollIntoView(); });
  }
  function label(s, i) { return `${i + 1}. ${s.submissions.length ? "submission #" + s.submissions.join(", #") : "snapshot"} · ${s.sha.slice(0, 10)}`; }
  function build(commit) {
    const shots = code.snapshots;
    if (!shots.length) { view.replaceChildren(el("p", { class: "muted" }, "The snapshot repository holds no commit.")); return; }
    const a = el("select", { "data-side": "a" }, el("option", { value: "" }, "(none: read one snapshot)"), shots.map((s, i) => el("option", { value: i }, label(s, i))));
    const b = el("select", { "data-side": "b" }, shots.map((s, i) => el("option", { value: i }, label(s, i))));
    const at = commit ? shots.findIndex((s) => s.sha === commit) : shots.length - 1;
    b.value = String(at < 0 ? shots.length - 1 : at);
    const redraw = () => (a.value === "" ? showSnapshot(shots[+b.value]) : showDiff(shots[+a.value], shots[+b.value]));
    a.onchange = redraw;
    b.onchange = redraw;
    controls.replaceChildren(el("label", {}, "compare ", a), el("label", {}, " with ", b));
    redraw();
  }
  function fileText(f) {
    const t = code.blobs[f.blob];
    return t === null || t === undefined ? null : t;
  }
  function showSnapshot(s) {
    const list = el("ul", { class: "files" });
    const shown = el("div", { class: "file" });
    for (const f of s.files) {
      list.appendChild(el("li", {}, el("a", { href: "#code", onclick: (e) => {
        e.preventDefault();
        const text = fileText(f);
        shown.replaceChildren(el("h3", {}, f.path), text === null ? el("p", { class: "muted" }, `not shown: ${code.skipped[f.blob] || "no text"}`) : el("pre", { class: "code" }, text));
      } }, f.path), el("span", { class: "muted" }, ` ${f.size} B`)));
    }
    view.replaceChildren(el("p", { class: "muted" }, s.message), el("div", { class: "code-grid" }, list, shown));
    const first = list.querySelector("a");
    if (first) first.click();
  }
  function showDiff(x, y) {
    const before = Object.fromEntries(x.files.map((f) => [f.path, f])), after = Object.fromEntries(y.files.map((f) => [f.path, f]));
    const paths = unique([...Object.keys(before), ...Object.keys(after)]);
    const out = [];
    let changed = 0;
    for (const p of paths) {
      const f0 = before[p], f1 = after[p];
      if (f0 && f1 && f0.blob === f1.blob) continue;
      changed++;
      const t0 = f0 ? fileText(f0) : "", t1 = f1 ? fileText(f1) : "";
      const title = `${p}${!f0 ? " (added)" : !f1 ? " (removed)" : ""}`;
      if (t0 === null || t1 === null) { out.push(el("div", { class: "diff" }, el("h3", {}, title), el("p", { class: "muted" }, "not shown: binary or too large"))); continue; }
      out.push(el("div", { class: "diff" }, el("h3", {}, title), diffView(t0, t1)));
    }
    view.replaceChildren(el("p", { class: "muted" }, `${changed} file${changed === 1 ? "" : "s"} changed between ${x.sha.slice(0, 10)} and ${y.sha.slice(0, 10)}.`), ...out);
  }
}

// A line diff (Myers' O(ND) algorithm), shown as unified hunks with 3 lines of context. Each round keeps only the
// diagonals it reached (2d+1 numbers), so a diff of d edits holds about 4d^2 bytes; past MAX_EDITS it gives up.
const MAX_EDITS = 2000;
function diffLines(a, b) {
  const n = a.length, m = b.length, max = n + m, v = new Int32Array(2 * max + 2), trace = [];
  if (max === 0) return [];
  const before = (vv, d, k) => vv[k + d]; // vv: v's diagonals -d..d as they were when round d began
  let done = false;
  for (let d = 0; d <= max && !done; d++) {
    if (d > MAX_EDITS) return null; // too different to be worth a line diff
    trace.push(v.slice(max - d, max + d + 1));
    for (let k = -d; k <= d; k += 2) {
      let x = k === -d || (k !== d && v[max + k - 1] < v[max + k + 1]) ? v[max + k + 1] : v[max + k - 1] + 1;
      let y = x - k;
      while (x < n && y < m && a[x] === b[y]) { x++; y++; }
      v[max + k] = x;
      if (x >= n && y >= m) { done = true; break; }
    }
  }
  const ops = [];
  let x = n, y = m;
  for (let d = trace.length - 1; d >= 0 && (x > 0 || y > 0); d--) {
    const vv = trace[d], k = x - y;
    const prevK = k === -d || (k !== d && before(vv, d, k - 1) < before(vv, d, k + 1)) ? k + 1 : k - 1;
    const px = d === 0 ? 0 : before(vv, d, prevK), py = px - prevK;
    while (x > px && y > py) { ops.push([" ", a[x - 1]]); x--; y--; }
    if (d > 0) { if (x === px) { ops.push(["+", b[y - 1]]); y--; } else { ops.push(["-", a[x - 1]]); x--; } }
  }
  return ops.reverse();
}
function diffView(t0, t1) {
  const ops = diffLines(t0 ? t0.split("\n") : [], t1 ? t1.split("\n") : []);
  if (ops === null) return el("p", { class: "muted" }, "Too different for a line diff: read each snapshot.");
  const keep = new Array(ops.length).fill(false);
  ops.forEach((o, i) => { if (o[0] !== " ") for (let j = Math.max(0, i - 3); j <= Math.min(ops.length - 1, i + 3); j++) keep[j] = true; });
  const pre = el("pre", { class: "code diff-body" });
  let skipped = false;
  ops.forEach((o, i) => {
    if (!keep[i]) { if (!skipped) pre.appendChild(el("span", { class: "hunk" }, "…\n")); skipped = true; return; }
    skipped = false;
    pre.appendChild(el("span", { class: o[0] === "+" ? "add" : o[0] === "-" ? "del" : "" }, `${o[0]} ${o[1]}\n`));
  });
  return pre;
}

// -- start ---------------------------------------------------------------------------------------------------------
// body[data-ready] says when the page's text is drawn and body[data-plotted] when its plots are (ms since navigation):
// what the tests and the benchmark wait for.
document.addEventListener("DOMContentLoaded", async () => {
  const data = pageData();
  FORMATS = data.formats || {};
  const page = document.body.dataset.page;
  if (page === "sweep") sweepPage(data);
  else if (page === "cell") await cellPage(data);
  else if (page === "group") groupPage(data);
  document.body.dataset.ready = String(Math.round(performance.now()));
  await loadPlotly();
  document.body.dataset.plotted = String(Math.round(performance.now()));
});
