// Conclave's dashboard: one page per view, each drawn from the JSON API of the server it came from.
"use strict";

const main = document.getElementById("main");
const status = document.getElementById("status");
const TOKEN = "conclave.token";

// api fetches a JSON endpoint with the session's token; a 401 asks for the token once and tries again.
async function api(path) {
  for (let attempt = 0; attempt < 2; attempt++) {
    const headers = {};
    const token = sessionStorage.getItem(TOKEN);
    if (token) headers.Authorization = "Bearer " + token;
    const resp = await fetch(path, { headers });
    if (resp.status === 401 && attempt === 0) {
      await askToken();
      continue;
    }
    const body = await resp.json().catch(() => ({}));
    if (!resp.ok) {
      const e = body.error || {};
      throw new Error(`${resp.status} ${e.code || ""}: ${e.message || resp.statusText}`);
    }
    return body;
  }
}

function askToken() {
  const dialog = document.getElementById("login");
  const form = document.getElementById("login-form");
  return new Promise((resolve) => {
    form.onsubmit = () => {
      sessionStorage.setItem(TOKEN, document.getElementById("token").value);
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

function table(headers, rows, onRow) {
  const head = el("tr", {}, headers.map((h) => el("th", h.startsWith("#") ? { class: "num" } : {}, h.replace(/^#/, ""))));
  const body = rows.map((r, i) => {
    const tr = el("tr", onRow ? { class: "link", "data-row": i } : {},
      r.map((c, j) => el("td", headers[j].startsWith("#") ? { class: "num" } : {}, c)));
    if (onRow) tr.onclick = () => onRow(i);
    return tr;
  });
  return el("table", {}, el("thead", {}, head), el("tbody", {}, body));
}

const state = (s) => el("span", { class: "state " + s }, s);
const pct = (x) => (x === undefined || x === null ? "" : (100 * x).toFixed(1) + " %");
const num = (x, d = 0) => (x === undefined || x === null ? "" : Number(x).toFixed(d));
const meter = (x) => el("span", { class: "meter", title: pct(x) }, el("span", { style: `width:${Math.round(100 * Math.min(1, x || 0))}%` }));

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

function posteriorChart(arms) {
  const w = 560, h = 220, pad = 30, n = 200;
  const curves = arms.map((a) => {
    const ys = [];
    for (let i = 1; i < n; i++) ys.push(betaPdf(i / n, a.alpha, a.beta));
    return ys;
  });
  const top = Math.max(1, ...curves.flat().filter(Number.isFinite));
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("width", w); svg.setAttribute("height", h); svg.setAttribute("id", "posteriors");
  const add = (tag, attrs, text) => {
    const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    svg.append(e);
  };
  add("line", { x1: pad, y1: h - pad, x2: w - 10, y2: h - pad, stroke: "#999" });
  for (const t of [0, 0.25, 0.5, 0.75, 1]) add("text", { x: pad + t * (w - pad - 10) - 8, y: h - pad + 14 }, t.toFixed(2));
  curves.forEach((ys, k) => {
    const pts = ys.map((y, i) => `${(pad + ((i + 1) / n) * (w - pad - 10)).toFixed(1)},${(h - pad - (Number.isFinite(y) ? y : 0) / top * (h - 2 * pad)).toFixed(1)}`);
    add("polyline", { points: pts.join(" "), fill: "none", stroke: COLORS[k % COLORS.length], "stroke-width": 1.6, class: "curve" });
  });
  add("text", { x: pad, y: 14 }, "posterior of each arm's success rate (Beta(α, β))");
  return svg;
}

async function models() {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
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
  pick.onchange = () => { location.hash = "#/models?category=" + pick.value; };
  const legend = top.map((a, k) => el("div", {}, el("span", { class: "bar", style: `width:1.2rem;background:${COLORS[k % COLORS.length]}` }), " " + a.id));
  return [el("h2", {}, "Models: arms per category, ranked by mean"), el("p", {}, "category ", pick),
    el("div", { class: "grid" }, posteriorChart(top), el("div", {}, legend)),
    el("h3", {}, `${arms.length} models`),
    table(["#rank", "model", "provider", "#mean", "#alpha", "#beta", "#pulls"],
      arms.slice(0, 50).map((a, i) => [i + 1, a.id, a.provider, num(a.mean, 3), num(a.alpha, 1), num(a.beta, 1), a.pulls]))];
}

async function executions() {
  const { records } = await api("/executions?limit=50");
  return [el("h2", {}, "Executions (latest 50)"),
    records.length === 0 ? el("p", { class: "muted" }, "No execution yet: POST /route-thompson to make one.") :
      table(["received", "category", "blueprint", "outcome", "models", "#total ms", "#cost $"],
        records.map((r) => [new Date(r.received_at).toLocaleTimeString(), r.category, r.blueprint, state(r.outcome || String(r.status_code)),
          (r.models || []).length, num(r.total_ms, 1), num(r.cost, 5)]),
        (i) => { location.hash = "#/executions/" + records[i].request_id; })];
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
  return [el("h2", {}, "Execution " + rec.request_id),
    el("p", {}, `category ${rec.classification?.category || "?"} · blueprint ${rec.blueprint?.name || "?"} · ${d.strategy || ""} · status ${rec.status_code}` +
      ` · agreement ${agreed} of ${ok.length}` + (d.chosen_model ? ` · chosen ${d.chosen_model}` : "") + (rec.degraded ? " · degraded" : "")),
    el("h3", {}, "Waterfall"), waterfall(rec),
    el("h3", {}, "Answer"), el("div", { class: "answer", id: "answer" }, rec.answer || (rec.error ? rec.error.message : "")),
    el("h3", {}, "Task"), el("div", { class: "answer" }, rec.task)];
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

const pages = { fleet, providers, models, executions, eval: evaluation };

async function render() {
  const [path] = location.hash.replace(/^#\/?/, "").split("?");
  const [page, id] = path.split("/");
  const name = pages[page] ? page : "fleet";
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.page === name);
  status.textContent = "loading…";
  try {
    const nodes = page === "executions" && id ? await execution(id) : await pages[name]();
    main.replaceChildren(...nodes);
    main.setAttribute("data-page", page === "executions" && id ? "execution" : name);
    status.textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    main.replaceChildren(el("p", { class: "error" }, e.message));
    status.textContent = "";
  }
}

window.addEventListener("hashchange", render);
render();
