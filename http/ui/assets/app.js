// Conclave's dashboard: one page per view, each drawn from the JSON API of the server it came from.
"use strict";

const main = document.getElementById("main");
const status = document.getElementById("status");

// token is the admin token (or a key) this tab signed in with: in its memory only, never in storage, so
// a reload or another tab asks again. It travels in the Authorization header, which no other site's
// page can make a browser send: a forged request from elsewhere carries no credential (and no cookie
// is one), so the dashboard's changes need no other guard against cross-site requests.
let token = "";

// api calls a JSON endpoint with the tab's token (opts: method, and a body sent as JSON); a 401 asks
// for the token once and tries again.
async function api(path, opts = {}) {
  for (let attempt = 0; attempt < 2; attempt++) {
    const headers = {};
    if (token) headers.Authorization = "Bearer " + token;
    const init = { method: opts.method || "GET", headers };
    if (opts.body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(opts.body);
    }
    const resp = await fetch(path, init);
    if (resp.status === 401 && attempt === 0) {
      await askToken();
      continue;
    }
    const body = await resp.text().then((text) => JSON.parse(text, keepMoney)).catch(() => ({}));
    if (!resp.ok) {
      const e = body.error || {};
      const err = new Error(`${resp.status} ${e.code || ""}: ${e.message || resp.statusText}`);
      err.status = resp.status;
      err.details = e.details || [];
      throw err;
    }
    return body;
  }
}

// Amounts of money (cost, cost_usd, budget_usd, spend_usd, total_usd, ...) come as exact decimals:
// keepMoney keeps each as the text the server wrote, so that none is shown rounded through a float.
const MONEY = /(^|_)(cost|usd)(_|$)/;
function keepMoney(key, value, context) {
  return typeof value === "number" && MONEY.test(key) && context && context.source ? context.source : value;
}

function askToken() {
  const dialog = document.getElementById("login");
  const form = document.getElementById("login-form");
  return new Promise((resolve) => {
    form.onsubmit = () => {
      token = document.getElementById("token").value;
      dialog.close();
      resolve();
    };
    dialog.showModal();
  });
}

// el builds an element: el("td", {class: "num"}, "3", child...).
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "style") node.style.cssText = v; // through the CSSOM: the policy forbids inline style attributes
    else node.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// table lays out rows under headers; a header starting with # is a number's column. onRow, when given,
// makes each row a link; opts.id names the table and opts.row(i) gives each row's attributes.
function table(headers, rows, onRow, opts = {}) {
  const head = el("tr", {}, headers.map((h) => el("th", h.startsWith("#") ? { class: "num" } : {}, h.replace(/^#/, ""))));
  const body = rows.map((r, i) => {
    const attrs = { ...(onRow ? { class: "link", "data-row": i } : {}), ...(opts.row ? opts.row(i) : {}) };
    const tr = el("tr", attrs, r.map((c, j) => el("td", headers[j].startsWith("#") ? { class: "num" } : {}, c)));
    if (onRow) tr.onclick = () => onRow(i);
    return tr;
  });
  return el("table", opts.id ? { id: opts.id } : {}, el("thead", {}, head), el("tbody", {}, body));
}

const state = (s) => el("span", { class: "state " + s }, s);
const pct = (x) => (x === undefined || x === null ? "" : (100 * x).toFixed(1) + " %");
const num = (x, d = 0) => (x === undefined || x === null ? "" : Number(x).toFixed(d));
const meter = (x) => el("span", { class: "meter", title: pct(x) }, el("span", { style: `width:${Math.round(100 * Math.min(1, x || 0))}%` }));
// usd writes an amount exactly as the server gave it, with cents at least: $0.075, $12.00, $0.00000015.
function usd(x) {
  let s = String(x === null || x === undefined ? 0 : x);
  if (/e/i.test(s)) s = Number(s).toFixed(9).replace(/0+$/, ""); // a number whose text the browser did not keep
  const neg = s.startsWith("-");
  const [whole, frac = ""] = (neg ? s.slice(1) : s).split(".");
  return (neg ? "-$" : "$") + whole + "." + frac.padEnd(2, "0");
}

// when writes a moment in local time, with its date unless it is today.
function when(ts) {
  const d = new Date(ts);
  return d.toDateString() === new Date().toDateString() ? d.toLocaleTimeString() : d.toLocaleString();
}

// ago writes how long ago a moment was, roughly.
function ago(ts) {
  const s = Math.max(0, (Date.now() - new Date(ts).getTime()) / 1000);
  if (s < 60) return Math.round(s) + " s ago";
  if (s < 3600) return Math.round(s / 60) + " min ago";
  if (s < 86400) return Math.round(s / 3600) + " h ago";
  return Math.round(s / 86400) + " d ago";
}

// hashQuery is the page's parameters: what follows "?" in the hash, so that a reload or a link keeps them.
const hashQuery = () => new URLSearchParams(location.hash.split("?")[1] || "");

// go shows a page with parameters (empty ones left out); the same hash again draws the page again.
function go(page, params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  const hash = "#/" + page + (q.toString() ? "?" + q : "");
  if (location.hash === hash) render();
  else location.hash = hash;
}

// Pages.

async function fleet() {
  const { workers } = await api("/workers");
  return [el("h2", {}, `Fleet: ${workers.length} workers`),
    table(["worker", "tier", "breaker", "#slots", "slots in use", "#queued", "#completed", "#failed", "transport"],
      workers.map((w) => [w.name, "tier " + w.tier, state(w.breaker.state), w.slots,
        el("span", {}, meter(w.in_flight / Math.max(1, w.slots)), " " + w.in_flight), w.queued, w.completed, w.failed,
        w.transport ? el("span", { title: w.transport_error || "" }, w.transport) : el("span", { class: "muted" }, "in process")]))];
}

async function providers() {
  const { providers } = await api("/providers");
  return [el("h2", {}, `Providers: ${providers.length}`),
    table(["provider", "breaker", "requests/min", "tokens/min", "concurrency", "#in flight", "reliability", "#calls 24 h", "#faults 24 h", "models out"],
      providers.map((p) => [p.name, state(p.breaker.state),
        el("span", {}, meter(p.limit_use.requests), ` ${p.requests_last_minute}/${p.limits.requests_per_minute || "∞"}`),
        el("span", {}, meter(p.limit_use.tokens), ` ${p.tokens_last_minute}`),
        el("span", {}, meter(p.limit_use.concurrency), ` ${p.in_flight}`),
        p.in_flight, pct(p.reliability), p.calls_24h, p.faults_24h,
        Object.keys(p.models || {}).length + (p.disabled ? " (disabled: " + p.disabled + ")" : "")]))];
}

// betaPdf is the Beta(a, b) density, through log-gamma so large counts stay finite.
function logGamma(x) {
  const g = [676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
    12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7];
  if (x < 0.5) return Math.log(Math.PI / Math.sin(Math.PI * x)) - logGamma(1 - x);
  x -= 1;
  let a = 0.99999999999980993;
  const t = x + 7.5;
  for (let i = 0; i < 8; i++) a += g[i] / (x + i + 1);
  return 0.5 * Math.log(2 * Math.PI) + (x + 0.5) * Math.log(t) - t + Math.log(a);
}
function betaPdf(x, a, b) {
  if (x <= 0 || x >= 1) return 0;
  return Math.exp((a - 1) * Math.log(x) + (b - 1) * Math.log(1 - x) + logGamma(a + b) - logGamma(a) - logGamma(b));
}

const COLORS = ["#3b5bdb", "#e8590c", "#2f9e44", "#ae3ec9", "#1098ad", "#f08c00", "#c92a2a", "#5c940d"];
const SVG = "http://www.w3.org/2000/svg";

// svgEl builds an SVG element under a parent.
function svgEl(parent, tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  parent.append(e);
  return e;
}

// posterior samples an arm's Beta density on a grid, with its mean and 90 % interval (from the grid's
// cumulative sum: close enough to read, and no special functions).
function posterior(a, n) {
  const ys = [];
  for (let i = 1; i < n; i++) {
    const y = betaPdf(i / n, a.alpha, a.beta);
    ys.push(Number.isFinite(y) ? y : 0);
  }
  const total = ys.reduce((s, y) => s + y, 0) || 1;
  let acc = 0, lo = 0, hi = 1;
  ys.forEach((y, i) => {
    const before = acc;
    acc += y / total;
    if (before < 0.05 && acc >= 0.05) lo = (i + 1) / n;
    if (before < 0.95 && acc >= 0.95) hi = (i + 1) / n;
  });
  return { ys, peak: Math.max(...ys, 1e-12), mean: a.alpha / (a.alpha + a.beta), lo, hi };
}

// posteriorChart draws each arm's posterior in a row of its own over one shared axis (small
// multiples): arms with alike records, every new arm among them, would lie on top of each other in
// one chart. Each row is scaled to its own peak; the band is its 90 % interval, the tick its mean.
function posteriorChart(arms) {
  const labelW = 290, plotW = 420, statsW = 250, rowH = 34, top = 26, axis = 22, n = 200;
  const w = labelW + plotW + statsW, h = top + arms.length * rowH + axis;
  const x = (p) => labelW + p * plotW;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", w); svg.setAttribute("height", h); svg.setAttribute("id", "posteriors");
  svgEl(svg, "text", { x: 0, y: 14 }, "posterior of each arm's success rate, Beta(α, β): one row per arm, scaled to its peak; band: 90 % interval, tick: mean");
  for (const t of [0, 0.25, 0.5, 0.75, 1]) {
    svgEl(svg, "line", { x1: x(t), y1: top, x2: x(t), y2: h - axis, stroke: "#e3e6ec" });
    svgEl(svg, "text", { x: x(t) - 10, y: h - 6 }, t.toFixed(2));
  }
  arms.forEach((a, k) => {
    const p = posterior(a, n);
    const color = COLORS[k % COLORS.length];
    const y0 = top + k * rowH, base = y0 + rowH - 4, height = rowH - 8;
    const g = svgEl(svg, "g", { class: "arm", "data-model": a.id });
    svgEl(g, "rect", { x: x(p.lo), y: base - height, width: Math.max(1, x(p.hi) - x(p.lo)), height, fill: color, "fill-opacity": 0.1 });
    svgEl(g, "line", { x1: x(0), y1: base, x2: x(1), y2: base, stroke: "#adb5bd" });
    const pts = p.ys.map((y, i) => `${x((i + 1) / n).toFixed(1)},${(base - (y / p.peak) * height).toFixed(1)}`);
    svgEl(g, "polyline", { points: pts.join(" "), fill: "none", stroke: color, "stroke-width": 1.6, class: "curve" });
    svgEl(g, "line", { x1: x(p.mean), y1: base - height, x2: x(p.mean), y2: base, stroke: color, "stroke-dasharray": "3 2" });
    svgEl(g, "text", { x: labelW - 8, y: base - height / 2 + 4, "text-anchor": "end" }, `${k + 1}. ${a.id}`);
    svgEl(g, "text", { x: x(1) + 10, y: base - height / 2 + 4, class: "stats" },
      `mean ${num(p.mean, 3)} · 90 % ${num(p.lo, 2)}–${num(p.hi, 2)} · ${a.pulls || 0} ${a.pulls === 1 ? "pull" : "pulls"}`);
  });
  return svg;
}

async function models() {
  const params = hashQuery();
  const { blueprints } = await api("/blueprints");
  const category = params.get("category") || "general";
  const { models } = await api(`/models?sort=mean&category=${encodeURIComponent(category)}`);
  const arms = models.map((m) => ({ id: m.id, provider: m.provider, ...m.arms[category] }));
  const top = arms.slice(0, 8);
  const pick = el("select", { id: "category" }, blueprints.map((b) => {
    const o = el("option", { value: b.name }, b.name);
    if (b.name === category) o.selected = true;
    return o;
  }));
  pick.onchange = () => go("models", { category: pick.value });
  return [el("h2", {}, "Models: arms per category, ranked by mean"), el("p", {}, "category ", pick),
    posteriorChart(top),
    el("h3", {}, `${arms.length} models`),
    table(["#rank", "model", "provider", "#mean", "#alpha", "#beta", "#pulls"],
      arms.slice(0, 50).map((a, i) => [i + 1, a.id, a.provider, num(a.mean, 3), num(a.alpha, 1), num(a.beta, 1), a.pulls]))];
}

// The listing's filters, as GET /executions names them; the page keeps them in its hash.
const FILTERS = ["category", "model", "outcome", "key", "since", "until"];
const PAGE_SIZES = ["10", "50", "200"];

// keysOrNone lists the API keys, or null where this server keeps none (501) or the session is a
// key's, not the admin's (403).
async function keysOrNone() {
  try {
    return (await api("/admin/keys")).keys;
  } catch (e) {
    if (e.status === 501 || e.status === 403) return null;
    throw e;
  }
}

// localInput writes an RFC 3339 moment as a datetime-local input shows it (local time), and isoOf
// reads it back.
function localInput(iso) {
  const d = new Date(iso);
  if (!iso || Number.isNaN(d.getTime())) return "";
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}
const isoOf = (local) => (local ? new Date(local).toISOString() : "");

// choice is a select of options ([value, label]) with "any" first, showing the current value even
// when it is none of them (a key since deleted, say).
function choice(name, current, options) {
  if (current && !options.some(([v]) => v === current)) options = [...options, [current, current]];
  const s = el("select", { id: "f-" + name, name }, el("option", { value: "" }, "any"), options.map(([v, label]) => el("option", { value: v }, label)));
  s.value = current || "";
  return s;
}

// executionFilters is the form of the listing's filters; applying it starts again from the newest page.
function executionFilters(params, blueprints, keyList) {
  const category = choice("category", params.get("category"), blueprints.map((b) => [b.name, b.name]));
  const outcome = choice("outcome", params.get("outcome"), ["ok", "degraded", "failed"].map((o) => [o, o]));
  const key = keyList ? choice("key", params.get("key"), keyList.map((k) => [k.id, `${k.name} (${k.id})`]))
    : el("input", { id: "f-key", name: "key", placeholder: "key id", size: 24 });
  if (!keyList) key.value = params.get("key") || "";
  const model = el("input", { id: "f-model", name: "model", placeholder: "model id", size: 28 });
  model.value = params.get("model") || "";
  const since = el("input", { id: "f-since", name: "since", type: "datetime-local", step: 1 });
  const until = el("input", { id: "f-until", name: "until", type: "datetime-local", step: 1 });
  since.value = localInput(params.get("since"));
  until.value = localInput(params.get("until"));
  const limit = choice("limit", params.get("limit") || "50", PAGE_SIZES.map((n) => [n, n + " a page"]));
  limit.firstChild.remove(); // a page has a size: no "any"
  const form = el("form", { id: "filters", class: "filters" },
    el("label", {}, "category ", category), el("label", {}, "model ", model), el("label", {}, "outcome ", outcome),
    el("label", {}, "key ", key), el("label", {}, "since ", since), el("label", {}, "until ", until), limit,
    el("button", { type: "submit", id: "apply" }, "Apply"), el("a", { href: "#/executions", id: "clear" }, "clear"));
  form.onsubmit = (ev) => {
    ev.preventDefault();
    go("executions", { category: category.value, model: model.value.trim(), outcome: outcome.value, key: key.value.trim(),
      since: isoOf(since.value), until: isoOf(until.value), limit: limit.value });
  };
  return form;
}

async function executions() {
  const params = hashQuery();
  const query = new URLSearchParams();
  for (const k of [...FILTERS, "limit", "after", "before"]) if (params.get(k)) query.set(k, params.get(k));
  if (!query.has("limit")) query.set("limit", "50");
  let page, failure;
  try {
    page = await api("/executions?" + query);
  } catch (e) {
    if (e.status !== 400) throw e;
    failure = el("p", { class: "error" }, e.message + ": " + e.details.map((d) => `${d.field} ${d.message}`).join("; "));
  }
  const { blueprints } = await api("/blueprints");
  const keyList = await keysOrNone();
  const form = executionFilters(params, blueprints, keyList);
  const head = [el("h2", {}, "Executions"), form];
  if (failure) return [...head, failure];
  const names = Object.fromEntries((keyList || []).map((k) => [k.id, k.name]));
  const filters = Object.fromEntries(FILTERS.map((k) => [k, params.get(k)]));
  const limit = query.get("limit");
  const pager = el("p", { class: "pager" },
    pageButton("newer", "← newer", page.prev, () => go("executions", { ...filters, limit, before: page.prev })),
    pageButton("older", "older →", page.next, () => go("executions", { ...filters, limit, after: page.next })),
    params.get("after") || params.get("before") ? el("a", { href: "#/executions?" + new URLSearchParams({ ...clean(filters), limit }), id: "newest" }, "newest") : null);
  const records = page.records;
  if (records.length === 0) return [...head, el("p", { class: "muted" }, "No execution matches. POST /route-thompson makes one."), pager];
  const keyCell = (id) => (id ? el("span", { title: id }, names[id] || id) : el("span", { class: "muted", title: "the admin token" }, "admin"));
  const taskCell = (r) => {
    const task = r.task + (r.task_clipped ? "…" : ""); // the listing holds 200 characters; the record, all of it
    return el("span", { class: "task", title: task }, task);
  };
  return [...head,
    table(["received", "task", "key", "category", "blueprint", "outcome", "#models", "#total ms", "#cost"],
      records.map((r) => [when(r.received_at), taskCell(r), keyCell(r.key_id), r.category, r.blueprint,
        state(r.outcome || String(r.status_code)), (r.models || []).length, num(r.total_ms, 1), usd(r.cost)]),
      (i) => { location.hash = "#/executions/" + records[i].request_id; },
      { id: "executions", row: (i) => ({ "data-id": records[i].request_id, "data-key": records[i].key_id || "" }) }),
    pager];
}

// clean leaves out an object's empty values.
const clean = (o) => Object.fromEntries(Object.entries(o).filter(([, v]) => v));

function pageButton(id, label, cursor, onClick) {
  const b = el("button", { id, type: "button" }, label);
  b.disabled = !cursor;
  b.onclick = onClick;
  return b;
}

const PHASES = ["classify", "blueprint", "select", "assign", "dispatch", "collect", "consensus", "feedback"];

// waterfall lays the phases end to end and each call from the start of dispatch, a retry after the
// attempt before it.
function waterfall(rec) {
  const ph = rec.phases || {};
  const rows = [];
  let t = 0;
  for (const p of PHASES) {
    const d = ph[p + "_ms"] || 0;
    rows.push({ label: p, start: t, len: d, kind: "phase" });
    t += d;
  }
  const callsFrom = PHASES.slice(0, 4).reduce((s, p) => s + (ph[p + "_ms"] || 0), 0);
  const ends = {};
  for (const r of rec.results || []) {
    const start = ends[r.model] !== undefined ? ends[r.model] : callsFrom;
    rows.push({ label: `${r.model} (${r.worker || "?"}${r.attempt ? ", attempt " + (r.attempt + 1) : ""})`, start, len: r.latency_ms || 0, kind: r.status });
    ends[r.model] = start + (r.latency_ms || 0);
  }
  const total = Math.max(ph.total_ms || 0, ...rows.map((r) => r.start + r.len), 0.001);
  const scale = 560 / total;
  return el("table", { id: "waterfall" }, rows.map((r) => el("tr", {},
    el("td", {}, r.label),
    el("td", {}, r.kind === "phase" ? "" : state(r.kind)),
    el("td", { style: "width:600px" }, el("span", { class: "bar", style: `margin-left:${(r.start * scale).toFixed(1)}px;width:${Math.max(1, r.len * scale).toFixed(1)}px;${r.kind === "phase" ? "background:#adb5bd" : ""}` })),
    el("td", { class: "num" }, num(r.len, 1) + " ms"))));
}

async function execution(id) {
  const rec = await api("/executions/" + encodeURIComponent(id));
  const d = rec.decision || {};
  const ok = (rec.results || []).filter((r) => r.status === "ok");
  const agreed = ok.filter((r) => r.contributed).length;
  const deciders = ok.filter((r) => r.decider).map((r) => r.model); // a majority vote's deciders; the others broke ties
  return [el("h2", {}, "Execution " + rec.request_id),
    el("p", {}, `category ${rec.classification?.category || "?"} · blueprint ${rec.blueprint?.name || "?"} · ${d.strategy || ""} · status ${rec.status_code}` +
      ` · key ${rec.key_id || "admin"}` +
      ` · agreement ${agreed} of ${ok.length}` + (deciders.length ? ` · decided by ${deciders.join(", ")}` : "") +
      (d.chosen_model ? ` · chosen ${d.chosen_model}` : "") + (rec.degraded ? " · degraded" : "")),
    el("h3", {}, "Waterfall"), waterfall(rec),
    el("h3", {}, "Answer"), el("p", { id: "why" }, why(rec)),
    el("div", { class: "answer", id: "answer" }, rec.answer || (rec.error ? rec.error.message : "")),
    el("h3", {}, "Calls"), calls(rec),
    el("h3", {}, "Task"), el("div", { class: "answer" }, rec.task)];
}

// nanos writes an amount of nano-dollars (a record's integer, which JSON gives as a string) in dollars.
function nanos(n) {
  const s = String(n || 0).replace("-", "").padStart(10, "0");
  const dollars = (s.slice(0, -9) + "." + s.slice(-9)).replace(/\.?0+$/, "");
  return usd((String(n || 0).startsWith("-") ? "-" : "") + dollars);
}

// tokens writes a call's usage: input (and what of it the provider's cache held) and output.
function tokens(u) {
  if (!u) return "";
  const cached = (u.cache_read_tokens || 0) + (u.cache_write_tokens || 0);
  return `${u.input_tokens || 0} in${cached ? ` (${cached} cached)` : ""} · ${u.output_tokens || 0} out${u.estimated ? " (estimated)" : ""}`;
}

// vote says how a call's answer took part in the decision.
function vote(r, d) {
  if (r.status !== "ok") return "";
  const parts = [r.contributed ? "agreed" : "dissented"];
  if (r.decider) parts.push("decided");
  if (r.model === d.chosen_model) parts.push("chosen");
  if (d.strategy === "weighted" && r.weighted_score) parts.push("score " + num(r.weighted_score, 3));
  return parts.join(" · ");
}

// calls lists each call of the request: its model and worker, status, latency, tokens, cost, vote, and
// its answer (collapsed).
function calls(rec) {
  const d = rec.decision || {};
  const results = rec.results || [];
  if (!results.length) return el("p", { class: "muted" }, rec.cached_from ? "No call: the answer came from the cache." : "No call.");
  return table(["model", "worker", "status", "latency", "tokens", "cost", "vote", "answer"], results.map((r) => [
    r.model + (r.attempt ? ` (attempt ${r.attempt + 1})` : ""), r.worker || "", state(r.status), num(r.latency_ms, 1) + " ms", tokens(r.usage),
    nanos(r.cost_nanos), vote(r, d),
    r.status === "ok" ? el("details", {}, el("summary", {}, (r.text || "(tool calls)").slice(0, 40)), el("div", { class: "answer" }, r.text || JSON.stringify(r.tool_calls)))
      : el("span", { class: "muted" }, r.error_message || ""),
  ]), null, { id: "calls" });
}

// why says why the chosen answer won, from the decision.
function why(rec) {
  const d = rec.decision || {};
  const ok = (rec.results || []).filter((r) => r.status === "ok");
  if (rec.cached_from) return `Answered from the cache: the answer to ${rec.cached_from}.`;
  if (!d.chosen_model && !d.synthesis) return "";
  if (ok.length <= 1) return `${d.chosen_model} was the only model that answered.`;
  const agreed = ok.filter((r) => r.contributed).length;
  switch (d.strategy) {
    case "majority":
      return `Majority: ${agreed} of ${ok.length} answers agreed with ${d.chosen_model}'s.` + (d.agreement?.length ? " " + d.agreement.join("; ") : "");
    case "weighted": {
      const top = ok.find((r) => r.model === d.chosen_model);
      return `Weighted: ${d.chosen_model}'s answer had the highest weighted score` + (top ? ` (${num(top.weighted_score, 3)})` : "") +
        `; ${agreed} of ${ok.length} answers agreed with it.`;
    }
  }
  const arbiter = d.arbiter_model || d.arbiter || "the local arbiter";
  return (d.synthesis ? `The arbiter ${arbiter} wrote one answer from the ${ok.length} answers.` : `The arbiter ${arbiter} chose ${d.chosen_model}'s answer.`) +
    (d.arbiter_error ? ` (Its verdict was not used: ${d.arbiter_error}; the local arbiter decided.)` : "");
}

// budgetText says a key's budget and its period.
function budgetText(k) {
  if (k.budget_usd === null || k.budget_usd === undefined) return "none";
  return usd(k.budget_usd) + (k.budget_period ? " per " + k.budget_period : " in all");
}

// spendCell shows a key's spend in its current period against its budget.
function spendCell(k) {
  const spent = k.spend.spend_usd;
  if (k.budget_usd === null || k.budget_usd === undefined) return el("span", { class: "spend" }, usd(spent));
  const share = k.budget_usd > 0 ? spent / k.budget_usd : 1;
  const part = share > 0 && share < 0.001 ? "< 0.1 %" : pct(share); // a spend that rounds to 0.0 % is not none
  return el("span", { class: "stack spend" + (share >= 1 ? " over" : "") }, meter(share),
    `${usd(spent)} of ${usd(k.budget_usd)} (${part.replace(/ /g, "\u00a0")})`);
}

const compact = new Intl.NumberFormat("en", { notation: "compact" });

// limitCell shows a limit and what of it is in use now; a zero limit is none.
function limitCell(used, limit) {
  if (!limit) return el("span", { class: "muted" }, `${compact.format(used)} (no limit)`);
  return el("span", { class: "stack", title: `${used.toLocaleString()} of ${limit.toLocaleString()}` }, meter(used / limit),
    `${compact.format(used)}/${compact.format(limit)}`);
}

function lastUse(k) {
  return k.last_used_at ? el("span", { title: new Date(k.last_used_at).toLocaleString() }, ago(k.last_used_at)) : el("span", { class: "muted" }, "never");
}

async function keysPage() {
  const list = await keysOrNone();
  if (list === null) {
    return [el("h2", {}, "Keys"), el("p", { class: "muted" }, "This server keeps no API keys, or this session signed in with a key rather than the admin token.")];
  }
  const create = [el("h3", {}, "New key"), keyForm("new-key", {}, "Create", createKey), el("div", { id: "key-made" })];
  if (list.length === 0) return [el("h2", {}, "Keys"), el("p", { class: "muted" }, "No key yet."), ...create];
  return [el("h2", {}, `Keys: ${list.length}`), ...create,
    el("p", { class: "muted" }, "Spend counts the current budget period; requests and tokens in use count the last minute."),
    table(["name", "id", "team", "status", "budget", "spend this period", "#spent in all", "requests/min", "tokens/min", "concurrency", "last use"],
      list.map((k) => [k.name, el("code", {}, k.id), teamLink(k.team_id), state(k.status), budgetText(k), spendCell(k), usd(k.spend.total_usd),
        limitCell(k.usage.requests, k.rpm), limitCell(k.usage.tokens, k.tpm), limitCell(k.usage.in_flight, k.max_concurrency), lastUse(k)]),
      (i) => { location.hash = "#/keys/" + encodeURIComponent(list[i].id); },
      { id: "keys", row: (i) => ({ "data-key": list[i].id }) })];
}

// teamLink links a key's team's page, or says it has none.
function teamLink(id) {
  return id ? el("a", { href: "#/teams/" + encodeURIComponent(id) }, el("code", {}, id)) : el("span", { class: "muted" }, "none");
}

// teamFields are the fields of a team's form: its name for the admin API, its label, its input's type;
// keyFields are a key's, which are a team's and its team, expiry and answer cache.
const teamFields = [
  ["name", "name", "text"], ["budget_usd", "budget (US dollars)", "text"], ["budget_period", "budget period", "period"],
  ["rpm", "requests/min", "number"], ["tpm", "tokens/min", "number"], ["max_concurrency", "concurrency", "number"],
  ["models", "models (globs, comma-separated)", "text"],
];
const keyFields = [...teamFields.slice(0, 1), ["team_id", "team (id)", "text"], ...teamFields.slice(1),
  ["expires_at", "expires at (RFC 3339)", "text"], ["cache_ttl_seconds", "answer cache (seconds)", "number"]];

// keyForm is a form over a key's fields (or a team's), filled from k; onSubmit gets the body to send.
function keyForm(id, k, label, onSubmit, fields = keyFields) {
  const inputs = fields.map(([name, text, type]) => {
    let input;
    if (type === "period") {
      input = el("select", { name }, ["", "1d", "7d", "30d"].map((p) => el("option", { value: p }, p || "a whole life")));
    } else {
      input = el("input", { name, type: type === "number" ? "number" : "text", min: "0" });
    }
    const v = k[name];
    input.value = v === undefined || v === null ? "" : Array.isArray(v) ? v.join(",") : String(v);
    return el("label", {}, text, input);
  });
  const form = el("form", { id, class: "key-form" }, ...inputs, el("button", { type: "submit" }, label), el("p", { class: "error", id: id + "-error" }));
  form.onsubmit = async (ev) => {
    ev.preventDefault();
    const body = {};
    for (const [name, , type] of fields) {
      const v = form.elements[name].value.trim();
      if (type === "number") body[name] = v === "" ? 0 : Number(v);
      else if (name === "models") body[name] = v === "" ? [] : v.split(",").map((g) => g.trim()).filter(Boolean);
      else if (name === "budget_usd" || name === "expires_at" || name === "team_id") body[name] = v === "" ? null : v;
      else body[name] = v;
    }
    try {
      await onSubmit(body);
    } catch (e) {
      document.getElementById(id + "-error").textContent = e.message + (e.details || []).map((d) => ` · ${d.field}: ${d.message}`).join("");
    }
  };
  return form;
}

// createKey makes a key and shows its secret, this once: the server keeps only its hash.
async function createKey(body) {
  for (const name of ["budget_usd", "expires_at", "team_id"]) if (body[name] === null) delete body[name];
  const k = await api("/admin/keys", { method: "POST", body });
  await render();
  document.getElementById("key-made").replaceChildren(el("p", {}, `Key ${k.name} made. Its secret is shown this once; copy it now:`),
    el("code", { id: "secret" }, k.key));
}

// keyActions are a key's forms: change its fields, or revoke it (a second click confirms).
function keyActions(k) {
  if (k.status === "revoked") return [];
  const path = "/admin/keys/" + encodeURIComponent(k.id);
  const revoke = el("button", { id: "revoke", type: "button" }, "Revoke");
  revoke.onclick = async () => {
    if (revoke.dataset.armed !== "yes") {
      revoke.dataset.armed = "yes";
      revoke.textContent = "Click again to revoke: the key stops working at once";
      return;
    }
    await api(path, { method: "DELETE" });
    await render();
  };
  const change = keyForm("change-key", k, "Save", async (body) => {
    await api(path, { method: "PATCH", body });
    await render();
  });
  return [el("h3", {}, "Change"), change, el("h3", {}, "Revoke"), revoke];
}

// spendTable lists a key's or team's spend by model or by day, each with a bar against the largest.
function spendTable(id, label, groups) {
  if (groups.length === 0) return el("p", { class: "muted", id }, "Nothing spent in the window.");
  const top = Math.max(...groups.map((g) => g.cost_usd), 1e-12);
  return table([label, "#requests", "#cost", ""], groups.map((g) => [g.model || g.day, g.requests, usd(g.cost_usd),
    el("span", { class: "bar", style: `width:${Math.max(1, Math.round(160 * g.cost_usd / top))}px` })]), null, { id });
}

async function teamsPage() {
  let list;
  try {
    list = (await api("/admin/teams")).teams;
  } catch (e) {
    if (e.status !== 501 && e.status !== 403) throw e;
    return [el("h2", {}, "Teams"), el("p", { class: "muted" }, "This server keeps no teams, or this session signed in with a key rather than the admin token.")];
  }
  const create = [el("h3", {}, "New team"), keyForm("new-team", {}, "Create", async (body) => {
    if (body.budget_usd === null) delete body.budget_usd;
    const t = await api("/admin/teams", { method: "POST", body });
    location.hash = "#/teams/" + encodeURIComponent(t.id);
  }, teamFields)];
  if (list.length === 0) return [el("h2", {}, "Teams"), el("p", { class: "muted" }, "No team yet."), ...create];
  return [el("h2", {}, `Teams: ${list.length}`), ...create,
    el("p", { class: "muted" }, "A team's keys are held to its limits and budget together, each also to its own."),
    table(["name", "id", "status", "budget", "spend this period", "#spent in all", "requests/min", "tokens/min", "concurrency", "models"],
      list.map((t) => [t.name, el("code", {}, t.id), state(t.status), budgetText(t), spendCell(t), usd(t.spend.total_usd),
        limitCell(t.usage.requests, t.rpm), limitCell(t.usage.tokens, t.tpm), limitCell(t.usage.in_flight, t.max_concurrency),
        t.models.length ? t.models.join(", ") : "any"]),
      (i) => { location.hash = "#/teams/" + encodeURIComponent(list[i].id); },
      { id: "teams", row: (i) => ({ "data-team": list[i].id }) })];
}

async function teamPage(id) {
  const path = "/admin/teams/" + encodeURIComponent(id);
  const t = await api(path);
  const byModel = await api(path + "/spend?group_by=model");
  const byDay = await api(path + "/spend?group_by=day");
  const members = ((await keysOrNone()) || []).filter((k) => k.team_id === t.id);
  const period = t.spend.period_end ? `${when(t.spend.period_start)} to ${when(t.spend.period_end)}` : `since ${when(t.spend.period_start)}`;
  const remove = el("button", { id: "delete-team", type: "button" }, "Delete");
  remove.onclick = async () => {
    if (remove.dataset.armed !== "yes") {
      remove.dataset.armed = "yes";
      remove.textContent = "Click again to delete the team";
      return;
    }
    try {
      await api(path, { method: "DELETE" });
      location.hash = "#/teams";
    } catch (e) {
      document.getElementById("delete-team-error").textContent = e.message;
    }
  };
  const change = keyForm("change-team", t, "Save", async (body) => {
    await api(path, { method: "PATCH", body });
    await render();
  }, teamFields);
  return [el("h2", {}, `Team ${t.name} `, state(t.status)),
    el("p", {}, el("code", {}, t.id), ` · created ${when(t.created_at)}`),
    table(["budget", "spend this period", "period", "#spent in all", "requests/min", "tokens/min", "concurrency", "models"],
      [[budgetText(t), spendCell(t), period, usd(t.spend.total_usd), limitCell(t.usage.requests, t.rpm), limitCell(t.usage.tokens, t.tpm),
        limitCell(t.usage.in_flight, t.max_concurrency), t.models.length ? t.models.join(", ") : "any"]], null, { id: "team" }),
    el("h3", {}, `Keys: ${members.length}`),
    members.length ? table(["name", "id", "status", "spend this period"], members.map((k) => [el("a", { href: "#/keys/" + encodeURIComponent(k.id) }, k.name),
      el("code", {}, k.id), state(k.status), spendCell(k)]), null, { id: "team-keys" }) : el("p", { class: "muted" }, "No key belongs to the team."),
    el("h3", {}, `Spend by model, last 30 days: `, el("span", { id: "spend-total" }, usd(byModel.total_usd))),
    spendTable("spend-by-model", "model", byModel.groups),
    el("h3", {}, "Spend by day (UTC)"),
    spendTable("spend-by-day", "day", byDay.groups),
    el("h3", {}, "Change"), change, el("h3", {}, "Delete"), remove, el("p", { class: "error", id: "delete-team-error" })];
}

async function keyPage(id) {
  const path = "/admin/keys/" + encodeURIComponent(id);
  const k = await api(path);
  const byModel = await api(path + "/spend?group_by=model");
  const byDay = await api(path + "/spend?group_by=day");
  const period = k.spend.period_end ? `${when(k.spend.period_start)} to ${when(k.spend.period_end)}` : `since ${when(k.spend.period_start)}`;
  return [el("h2", {}, `Key ${k.name} `, state(k.status)),
    el("p", {}, el("code", {}, k.id), " · team ", teamLink(k.team_id), ` · created ${when(k.created_at)} · last use `, lastUse(k),
      k.expires_at ? ` · expires ${when(k.expires_at)}` : "", " · ", el("a", { href: "#/executions?key=" + encodeURIComponent(k.id) }, "its executions")),
    table(["budget", "spend this period", "period", "#spent in all", "requests/min", "tokens/min", "concurrency", "models"],
      [[budgetText(k), spendCell(k), period, usd(k.spend.total_usd), limitCell(k.usage.requests, k.rpm), limitCell(k.usage.tokens, k.tpm),
        limitCell(k.usage.in_flight, k.max_concurrency), k.models.length ? k.models.join(", ") : "any"]], null, { id: "key" }),
    el("h3", {}, `Spend by model, last 30 days: `, el("span", { id: "spend-total" }, usd(byModel.total_usd))),
    spendTable("spend-by-model", "model", byModel.groups),
    el("h3", {}, "Spend by day (UTC)"),
    spendTable("spend-by-day", "day", byDay.groups), ...keyActions(k)];
}

async function evaluation() {
  let rep;
  try {
    rep = await api("/eval/report");
  } catch (e) {
    return [el("h2", {}, "Evaluation"), el("p", { class: "muted" }, e.message + ". Run make eval to write one.")];
  }
  const datasets = Object.keys(rep.datasets || {});
  const cell = (v) => (v && typeof v === "object" ? `${pct(v.mean)} (${pct(v.min)}–${pct(v.max)})` : pct(v));
  const rows = [["best single model in hindsight", ...datasets.map((d) => pct((rep.best_single || {})[d]))]];
  for (const run of rep.runs || []) {
    rows.push([run, ...datasets.map((d) => cell(((rep.datasets[d] || {})[run] || {}).accuracy))]);
  }
  return [el("h2", {}, "Latest evaluation" + (rep.seeds ? `: seeds ${rep.seeds.join(", ")}` : "")),
    table(["run", ...datasets], rows)];
}

const pages = { fleet, providers, models, executions, keys: keysPage, teams: teamsPage, eval: evaluation };
// detailPages are the pages of one thing, under their list's page: #/executions/<id>, #/keys/<id>, #/teams/<id>.
const detailPages = { executions: ["execution", execution], keys: ["key", keyPage], teams: ["team", teamPage] };

// rendering counts renders: only the latest one draws, should an earlier one end after it.
let rendering = 0;

async function render() {
  const turn = ++rendering;
  const hash = location.hash;
  const [path] = hash.replace(/^#\/?/, "").split("?");
  const [page, id] = path.split("/").map(decodeURIComponent);
  const name = pages[page] ? page : "fleet";
  const [drawn, draw] = id && detailPages[name] ? detailPages[name] : [name, pages[name]];
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.page === name);
  status.textContent = "loading…";
  try {
    const nodes = await draw(id);
    if (turn !== rendering) return;
    main.replaceChildren(...nodes);
    main.setAttribute("data-page", drawn);
    status.textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    if (turn !== rendering) return;
    main.replaceChildren(el("p", { class: "error" }, e.message));
    main.setAttribute("data-page", "error");
    status.textContent = "";
  }
  main.dataset.drawn = hash; // what the page shows, for whoever waits for it
}

window.addEventListener("hashchange", render);
render();
