// wenxin studio: fills the page shells from the studio's JSON API and keeps them current.
// Every value from the server is written as text (textContent), never parsed as HTML.
"use strict";

const POLL_MS = 2000;
// the page's messages in its language (static/messages.json's, put in the page by the server)
const MESSAGES = JSON.parse((document.getElementById("messages") || {}).textContent || "{}");

function t(key, values) {
  const template = MESSAGES[key] ?? key;
  return values ? template.replace(/\{(\w+)\}/g, (m, name) => name in values ? String(values[name]) : m) : template;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "text") node.textContent = String(value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function fill(node, ...children) {
  // replaceChildren would write a null or false child as the text "null"
  node.replaceChildren(...children.flat().filter(c => c !== null && c !== undefined && c !== false)
    .map(c => c instanceof Node ? c : document.createTextNode(String(c))));
}

function csrfToken() {
  const match = document.cookie.match(/(?:^|;\s*)wenxin_studio_csrf=([^;]+)/);
  return match ? match[1] : "";
}

async function call(method, url, body) {
  const options = {method, headers: {}, credentials: "same-origin"};
  if (method !== "GET") {
    options.headers["Content-Type"] = "application/json";
    options.headers["X-Studio-CSRF"] = csrfToken();
    options.body = JSON.stringify(body || {});
  }
  const response = await fetch(url, options);
  let data = null;
  try { data = await response.json(); } catch (e) { data = {error: await response.text().catch(() => "")}; }
  if (!response.ok) throw new Error((data && data.error) || `${response.status} ${response.statusText}`);
  return data;
}

function formatTime(seconds) {
  if (seconds === null || seconds === undefined) return "";
  const s = Math.round(seconds), h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
  return h ? t("time.h", {h, m}) : m ? t("time.m", {m, s: s % 60}) : t("time.s", {s: s % 60});
}

function formatDate(epoch) {
  return epoch ? new Date(epoch * 1000).toLocaleString(document.documentElement.lang || undefined) : "";
}

function formatBytes(bytes) {
  return bytes >= 1 << 30 ? `${(bytes / (1 << 30)).toFixed(1)} GB` : `${Math.round(bytes / (1 << 20))} MB`;
}

function formatNumber(value) {
  if (typeof value !== "number") return value === null || value === undefined ? "" : String(value);
  return Math.abs(value) >= 1e4 || (value !== 0 && Math.abs(value) < 1e-3) ? value.toExponential(3)
    : String(Math.round(value * 1e4) / 1e4);
}

function message(text, kind) {
  const box = document.getElementById("message") || document.getElementById("main").prepend(
    el("div", {id: "message"})) || document.getElementById("message");
  box.className = kind || "";
  box.textContent = text;
}

function showError(error) { message(String(error.message || error), "error"); }

function badge(status) { return el("span", {class: `status ${status}`, "data-status": status, text: t(`status.${status}`)}); }

function settingsText(overrides) {
  return Object.entries(overrides || {}).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join("  ");
}

// ---- runs ----
async function runsPage(main) {
  const selected = new Set();
  const compare = el("button", {id: "compare", onclick: () => {
    location.href = `/compare?ids=${[...selected].join(",")}`;
  }}, t("runs.compare"));
  const table = el("table", {id: "runs", class: "cards"});
  const machine = el("p", {id: "machine", class: "help"});
  main.append(el("h1", {}, t("runs.title")), machine, el("p", {}, el("a", {href: "/launch", class: "button"}, t("runs.launch")), " ",
    compare), table);
  async function refresh() {
    const data = await call("GET", "/api/runs");
    const use = await call("GET", "/api/machine");
    machine.textContent = t("use.machine", {cpu: Math.round(use.cpu_percent), cores: use.cores,
      used: formatBytes(use.memory_used), total: formatBytes(use.memory_total),
      load: use.load ? use.load.map(l => l.toFixed(2)).join(" ") : "-"});
    fill(table, el("tr", {}, ["", "run", "name", "status", "progress", "restarts", "settings", "best",
      "final", "started"].map(h => el("th", {}, h && t(`col.${h}`)))));
    for (const run of data.runs) {
      const box = el("input", {type: "checkbox", checked: selected.has(run.id), onchange: e => {
        e.target.checked ? selected.add(run.id) : selected.delete(run.id);
      }});
      const best = run.best ? `${run.best.metric} ${formatNumber(run.best.value)}` : "";
      table.append(el("tr", {"data-run": run.id, "data-status": run.status},
        el("td", {}, box), el("td", {}, el("a", {href: `/runs/${run.id}`}, `#${run.id}`)),
        el("td", {}, run.name), el("td", {}, badge(run.status), run.cause ? el("div", {class: "cause"}, run.cause) : null),
        el("td", {}, progressOf(run)),
        el("td", {"data-label": t("col.restarts")}, String(run.restarts)),
        el("td", {class: "settings"}, settingsText(run.overrides)),
        el("td", {"data-label": best ? t("col.best") : null}, best),
        el("td", {class: "outcome"}, outcomeText(run, true)),
        el("td", {"data-label": run.started ? t("col.started") : null}, formatDate(run.started))));
    }
  }
  await poll(refresh);
}

async function poll(refresh) {
  let failures = 0;
  async function tick() {
    // a hidden tab asks nothing until it is shown again
    if (document.hidden) { document.addEventListener("visibilitychange", tick, {once: true}); return; }
    try { await refresh(); failures = 0; } catch (e) { failures += 1; showError(e); }
    setTimeout(tick, POLL_MS * Math.min(1 + failures, 5));
  }
  await tick();
}

// ---- launch ----
async function launchPage(main, task) {
  if (!task) return chooseTask(main);
  const form = await call("GET", `/api/form?task=${encodeURIComponent(task)}`);
  const files = await call("GET", "/api/tasks");
  const cloneOf = new URLSearchParams(location.search).get("clone");
  const source = cloneOf ? await call("GET", `/api/runs/${cloneOf}`) : null;
  if (source) {  // the form starts from the cloned run's values
    for (const field of form.fields) {
      if (field.key in source.overrides) {
        const value = source.overrides[field.key];
        field.value = field.control === "hooks" ? value.map(h => h.type) : value;
      }
    }
  }
  const inputs = {};
  const rows = form.fields.map(field => {
    let input;
    if (field.control === "select") {
      input = el("select", {name: field.key}, field.choices.map(c =>
        el("option", {value: JSON.stringify(c), selected: c === field.value}, String(c))));
    } else if (field.control === "checkbox") {
      input = el("input", {type: "checkbox", name: field.key, checked: field.value});
    } else if (field.control === "number") {
      input = el("input", {type: "number", name: field.key, value: field.value, min: field.min, max: field.max,
        step: field.step});
    } else if (field.control === "hooks") {
      input = el("span", {class: "hooks", "data-key": field.key}, field.choices.map(name => el("label", {},
        el("input", {type: "checkbox", value: name, checked: field.value.includes(name)}), name)));
    } else {
      input = el("input", {type: "text", name: field.key, value: field.value || ""});
    }
    inputs[field.key] = [field, input];
    // a human label in the page's language, the key path beneath it; the help line in that language too
    const label = MESSAGES[`key.${field.key}`];
    const help = (document.body.dataset.lang === "en" ? field.help : null) || MESSAGES[`help.${field.key}`] || field.help;
    input.addEventListener("input", () => recheck());
    input.addEventListener("change", () => recheck());
    return el("tr", {"data-key": field.key}, el("th", {}, el("label", {}, label || field.key),
      label ? el("div", {class: "key-path"}, field.key) : null), el("td", {}, input,
        el("div", {class: "field-error", "data-error-for": field.key})),
      el("td", {class: "help"}, help || ""));
  });
  let pending = null, asked = 0;
  function recheck() {  // the command the edited values run, and each value's error beside its field
    clearTimeout(pending);
    pending = setTimeout(async () => {
      const mine = ++asked;
      try {
        const checked = await call("POST", "/api/command", {task, values: values()});
        if (mine !== asked) return;  // an older answer arriving late
        command.textContent = checked.command;
        showFieldErrors(checked.errors);
      } catch (e) { showError(e); }
    }, 300);
  }
  function showFieldErrors(errors) {
    for (const box of main.querySelectorAll(".field-error")) box.textContent = errors[box.dataset.errorFor] || "";
    const other = Object.entries(errors).filter(([k]) => !inputs[k]).map(([, v]) => v);
    if (other.length) message(other.join("\n"), "error");
    start.disabled = Object.keys(errors).some(k => inputs[k]);
  }
  const name = el("input", {type: "text", id: "run-name",
    value: source ? t("launch.clone_name", {name: source.name}) : task.split("/").pop().replace(/\.(json|ya?ml)$/, "")});
  const sweep = el("select", {id: "sweep"}, el("option", {value: ""}, t("launch.no_sweep")),
    files.sweeps.map(s => el("option", {value: s}, s)));
  const command = el("pre", {id: "command", text: form.command});
  const start = el("button", {id: "start", onclick: async () => {
    start.disabled = true;
    try {
      const run = source ? await call("POST", `/api/runs/${source.id}/clone`, {name: name.value, values: values()})
        : await call("POST", "/api/runs", {task, name: name.value, sweep: sweep.value, values: values()});
      location.href = `/runs/${run.id}`;
    } catch (e) {
      const key = String(e.message || "").split(":")[0];
      if (inputs[key]) showFieldErrors({[key]: e.message}); else showError(e);
      start.disabled = false;
    }
  }}, t("launch.start"));
  const previewBox = el("div", {id: "preview"});
  const previewButton = el("button", {id: "preview-data", onclick: async () => {
    previewButton.disabled = true;
    fill(previewBox, el("p", {class: "help"}, el("span", {class: "spinner"}), t("launch.checking")));
    try { fill(previewBox, previewOf(await call("GET", `/api/preview?task=${encodeURIComponent(task)}`))); }
    catch (e) { fill(previewBox, el("p", {class: "cause"}, String(e.message || e))); }
    previewButton.disabled = false;
  }}, t("launch.preview"));
  function values() {
    const out = {};
    for (const [key, [field, input]] of Object.entries(inputs)) {
      if (field.control === "select") out[key] = JSON.parse(input.value);
      else if (field.control === "checkbox") out[key] = input.checked;
      else if (field.control === "number") out[key] = input.value === "" ? null : Number(input.value);
      else if (field.control === "hooks") out[key] = [...input.querySelectorAll("input:checked")].map(i => i.value);
      else out[key] = input.value;
    }
    return out;
  }
  main.append(el("h1", {}, source ? t("launch.clone_title", {id: source.id, name: source.name}) : t("launch.title", {task})),
    el("table", {class: "form"}, rows),
    el("p", {}, el("label", {}, t("launch.name"), name), " ", el("label", {}, t("launch.sweep"), sweep)),
    el("p", {}, t("launch.runs_as")), command, el("p", {}, start, " ", previewButton), previewBox);
}

async function chooseTask(main) {
  const files = await call("GET", "/api/tasks");
  const list = el("ul", {id: "tasks"}, files.tasks.map(task => el("li", {"data-task": task},
    el("a", {href: `/launch?task=${encodeURIComponent(task)}`}, task), el("div", {class: "task-state"}, t("launch.checking")))));
  const copy = el("button", {id: "copy-examples", onclick: async () => {
    try {
      const result = await call("POST", "/api/examples", {});
      message(t("launch.copied", {n: result.written.length}), "ok");
      setTimeout(() => location.reload(), 800);
    } catch (e) { showError(e); }
  }}, t("launch.copy"));
  main.append(el("h1", {}, t("launch.pick")),
    files.tasks.length ? list : el("p", {}, t("launch.none")), el("p", {}, copy));
  if (!files.tasks.length) return;
  // whether each can run as it is, and if not, what makes its data (a job the studio runs and watches)
  const {status} = await call("GET", "/api/tasks/status");
  for (const item of list.children) {
    const state = status[item.dataset.task];
    if (!state) continue;
    item.dataset.ready = state.ready ? "yes" : "no";
    const box = item.querySelector(".task-state");
    const prepare = state.prepare ? el("button", {class: "prepare", onclick: async () => {
      try {
        const job = await call("POST", "/api/prepare", {script: state.prepare});
        location.href = `/runs/${job.id}`;
      } catch (e) { showError(e); }
    }}, t("launch.prepare", {script: state.prepare})) : null;
    fill(box, state.description ? el("div", {class: "help"}, state.description) : null,
      state.ready ? el("span", {class: "status finished"}, t("launch.ready")) :
        el("div", {class: "cause"}, state.missing.length ? state.missing.map(m => el("div", {}, t("launch.missing", {path: m.path})))
          : state.problems.map(p => el("div", {}, p))),
      state.ready ? null : (prepare || (state.missing.length ? el("div", {class: "help"}, t("launch.no_script")) : null)));
  }
}

function previewOf(report) {
  // what `wenxin inspect` computes: examples, label counts, token lengths, sample rows
  return report.readers.map(r => el("div", {class: "reader-preview", "data-reader": r.reader},
    el("h3", {}, t("preview.examples", {reader: r.reader, n: r.examples, path: r.data_path})),
    Object.entries(r.fields).map(([name, f]) => f.kind === "label"
      ? el("div", {class: "labels"}, el("div", {}, t("preview.labels", {field: name})),
        Object.entries(f.labels).slice(0, 20).map(([label, count]) => el("div", {class: "bar-row"},
          el("span", {class: "bar-label"}, label), el("span", {class: "bar", style: `width: ${Math.round(100 * (f.shares[label] || 0))}%`}),
          el("span", {}, ` ${count}`))))
      : el("div", {class: "lengths"}, t("preview.lengths", {field: name, mean: formatNumber(f.token_length.mean),
        p50: formatNumber(f.token_length.p50), p95: formatNumber(f.token_length.p95), max: f.token_length.max,
        truncated: formatNumber(100 * f.truncated)}))),
    r.samples.length ? el("details", {}, el("summary", {}, t("preview.samples")),
      el("pre", {}, r.samples.map(sample => Object.entries(sample).map(([k, v]) =>
        `${k}: ${typeof v === "object" ? v.text : v}`).join("\n")).join("\n\n"))) : null));
}

// ---- one run ----
const CHART_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

function axisValues(u, ticks) {
  return ticks.map(formatNumber);  // 1e-3, not "0.001, 0.001, 0, 0"
}

function lineChart(target, title, seriesNames, width) {
  // as wide as its container (a phone's screen, a desktop's column), and resized with it
  const widthOf = () => Math.max(240, Math.min(width || 520, (target.clientWidth || width || 520) - 2));
  const opts = {title, width: widthOf(), height: 240, scales: {x: {time: false}},
    axes: [{}, {values: axisValues, size: 60}],
    series: [{label: "step"}].concat(seriesNames.map((n, i) => ({label: n, stroke: CHART_COLORS[i % 8], width: 1.5,
      // points where there are few: one record draws no line, and must still show
      points: {show: u => u.data[0].length <= 40, size: 6}, spanGaps: true})))};
  const chart = new uPlot(opts, [[]].concat(seriesNames.map(() => [])), target);
  if (window.ResizeObserver) {
    new ResizeObserver(() => {
      const w = widthOf();
      if (Math.abs(w - chart.width) > 4) chart.setSize({width: w, height: 240});
    }).observe(target);
  }
  return chart;
}

function progressOf(run) {
  // step of total, percent, elapsed and ETA; the ETA is blank, not stale, while a run reloads
  const box = el("div", {class: "progress", "data-run": run.id});
  if (run.status === "restarting" && run.restart_at) {
    const wait = Math.max(0, Math.round(run.restart_at - Date.now() / 1000));
    box.append(el("span", {class: "wait"}, t("progress.restarting", {s: wait})));
    return box;
  }
  if (run.step === null || run.step === undefined) return box;
  const total = run.total_steps;
  const percent = total ? Math.min(100, Math.floor(100 * run.step / total)) : null;
  if (total) box.append(el("progress", {max: total, value: Math.min(run.step, total)}));
  const elapsed = run.started ? ((run.ended || Date.now() / 1000) - run.started) : null;
  const active = run.status === "running";
  box.append(el("span", {class: "numbers"},
    total ? t("progress.step_of", {step: run.step, total, percent}) : t("progress.step", {step: run.step}),
    elapsed !== null ? t("progress.elapsed", {t: formatTime(elapsed)}) : "",
    active ? (run.eta_sec !== null && run.eta_sec !== undefined ? t("progress.eta", {t: formatTime(run.eta_sec)})
      : t("progress.reloading")) : ""));
  return box;
}

class Curves {
  // Records of metrics.jsonl turned into chart series: train loss, learning rate, dev metrics.
  constructor(container) {
    this.container = container;
    this.train = {step: [], loss: [], lr: []};
    this.dev = {step: []};
    this.devNames = [];
    this.charts = {};
  }
  add(records) {
    for (const r of records) {
      if (r.tag === "train" && typeof r.loss === "number") {
        this.train.step.push(r.step); this.train.loss.push(r.loss); this.train.lr.push(r.lr ?? null);
      } else if (r.tag === "dev") {
        for (const [k, v] of Object.entries(r)) {
          if (typeof v === "number" && !["step", "time", "epoch"].includes(k) && !this.devNames.includes(k)) {
            this.devNames.push(k); this.dev[k] = this.dev.step.map(() => null);
          }
        }
        this.dev.step.push(r.step);
        for (const k of this.devNames) this.dev[k].push(typeof r[k] === "number" ? r[k] : null);
      }
    }
    this.draw();
  }
  draw() {
    const loss = smoothed(this.train.loss, this.smoothing || 0);
    const want = {loss: [this.train.step, [loss], ["loss"]], lr: [this.train.step, [this.train.lr], ["lr"]]};
    // the dev metrics together, one line each, told apart by the legend
    if (this.devNames.length) want.dev = [this.dev.step, this.devNames.map(n => this.dev[n]), this.devNames.slice()];
    for (const [title, [x, ys, names]] of Object.entries(want)) {
      if (!x.length && !this.charts[title]) continue;  // no records (yet, or a preparation job): no empty frame
      const chart = this.charts[title];
      if (chart && chart.series.length !== names.length + 1) {  // a metric the first records did not have
        chart.destroy();
        this.container.querySelector(`[data-chart="${title}"]`)?.remove();
        delete this.charts[title];
      }
      if (!this.charts[title]) {
        const box = el("div", {class: "chart", "data-chart": title});
        this.container.append(box);
        this.charts[title] = lineChart(box, t(`chart.${title}`), title === "dev" ? names : [t(`chart.${title}`)]);
      }
      this.charts[title].setData([x.slice(), ...ys.map(y => y.slice())]);
      this.charts[title].root.parentNode.dataset.points = String(x.length);  // what the browser test watches grow
    }
  }
}

async function runPage(main, runId) {
  const head = el("div", {id: "run-head"});
  const use = el("p", {id: "run-use", class: "help"});
  const actions = el("p", {id: "actions"});
  const charts = el("div", {id: "charts"});
  const side = el("div", {id: "run-side"});
  const log = el("pre", {id: "log"});
  const tryBox = el("div", {id: "try"});
  const curves = new Curves(charts);
  const smoothing = el("input", {type: "range", id: "smoothing", min: 0, max: 0.99, step: 0.01, value: 0,
    oninput: () => { curves.smoothing = Number(smoothing.value); smoothingValue.textContent = smoothing.value; curves.draw(); }});
  const smoothingValue = el("span", {}, "0");
  main.append(head, use, actions, el("p", {class: "help"}, el("label", {}, t("chart.smoothing"), smoothing), " ",
    smoothingValue), charts, side, el("h2", {}, t("run.log")), log, tryBox);
  let offset = 0, logOffset = 0, lastStatus = null, lastHead = "", lastSide = "", lastUse = null;
  async function refresh() {
    const run = await call("GET", `/api/runs/${runId}`);
    const metrics = await call("GET", `/api/runs/${runId}/metrics?since=${offset}`);
    offset = metrics.next;
    curves.add(metrics.records);
    // only the log's new lines (the page keeps its last 400)
    const logData = await call("GET", `/api/runs/${runId}/log?since=${logOffset}`);
    if (logData.next < logOffset) log.textContent = "";  // a new log
    logOffset = logData.next;
    // redrawn only when something changed: a redraw replaces the elements a reader may be selecting
    const headKey = JSON.stringify([run.status, run.cause, run.restarts, run.step, run.eta_sec, run.best, run.command,
      run.final, run.cpu_seconds,
      run.restart_at, run.total_steps, run.status === "restarting" || run.status === "running" ? Date.now() >> 10 : 0]);
    if (headKey !== lastHead) { renderHead(head, run); lastHead = headKey; }
    if (run.status !== lastStatus) { renderActions(actions, run); lastStatus = run.status; }
    const sideKey = JSON.stringify([run.checkpoints, run.events, run.trackers, run.sweep]);
    if (sideKey !== lastSide) { renderSide(side, run); lastSide = sideKey; }
    const p = run.process;
    if (p && lastUse && p.time > lastUse.time) {  // CPU: the seconds it used between two readings
      const cpu = Math.max(0, Math.round(100 * (p.cpu_seconds - lastUse.cpu_seconds) / (p.time - lastUse.time)));
      use.textContent = t("use.process", {cpu, memory: formatBytes(p.rss_bytes), threads: p.threads});
    } else if (!p) use.textContent = "";
    lastUse = p;
    if (logData.text) {
      const following = !log.dataset.seen || log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
      log.textContent = (log.textContent + logData.text).split("\n").slice(-400).join("\n");
      if (following) log.scrollTop = log.scrollHeight;  // the tail stays in view unless the reader scrolled up
    }
    log.dataset.seen = "1";
    if (run.exported && !tryBox.dataset.ready) renderTry(tryBox, run);
  }
  await poll(refresh);
}

function smoothed(values, weight) {
  // TensorBoard's smoothing: an exponential moving average, debiased at the start; gaps stay gaps
  if (!weight) return values.slice();
  let last = 0, count = 0;
  return values.map(v => {
    if (typeof v !== "number") return v;
    last = last * weight + (1 - weight) * v;
    count += 1;
    return last / (1 - Math.pow(weight, count));
  });
}

function outcomeText(run, short) {
  // the final dev and test scores (short: the metric that picks the best only), wall and CPU time, speed
  const metric = run.best ? run.best.metric : null;
  const scores = tag => {
    const values = (run.final || {})[tag];
    if (!values) return "";
    const shown = short && metric && metric in values ? {[metric]: values[metric]} : values;
    return `${t(`outcome.${tag}`)} ${Object.entries(shown).map(([k, v]) => `${k} ${formatNumber(v)}`).join(", ")}`;
  };
  const parts = [scores("dev"), scores("test")];
  if (!short) {
    const wall = run.started && run.ended ? run.ended - run.started : null;
    if (wall !== null) parts.push(t("outcome.wall", {t: formatTime(wall)}));
    if (run.cpu_seconds) parts.push(t("outcome.cpu", {t: formatTime(run.cpu_seconds)}));
    if (run.steps_per_sec) parts.push(t("outcome.speed", {n: formatNumber(run.steps_per_sec)}));
  }
  return parts.filter(Boolean).join(" · ");
}

function renderHead(head, run) {
  fill(head, el("h1", {}, `#${run.id} ${run.name} `, badge(run.status)),
    run.cause ? el("p", {class: "cause"}, run.cause) : null,
    el("p", {}, t("run.task", {task: run.task_path}), run.sweep_path ? t("run.sweep", {sweep: run.sweep_path}) : "",
      t("run.restarts", {n: run.restarts, budget: run.restart_budget}),
      run.best ? t("run.best", {metric: run.best.metric, value: formatNumber(run.best.value), step: run.best.step}) : ""),
    progressOf(run),
    outcomeText(run, false) ? el("p", {id: "run-outcome"}, outcomeText(run, false)) : null,
    el("pre", {class: "command", text: run.command}));
}

function renderActions(actions, run) {
  const act = (label, id, handler) => el("button", {id, onclick: async () => {
    try { await handler(); } catch (e) { showError(e); }
  }}, label);
  const active = ["running", "restarting", "queued"].includes(run.status);
  fill(actions,
    active ? act(t("action.stop"), "stop", async () => { await call("POST", `/api/runs/${run.id}/stop`); message(t("action.stop_asked"), "ok"); })
      : act(t("action.resume"), "resume", async () => { await call("POST", `/api/runs/${run.id}/resume`); message(t("action.queued"), "ok"); }),
    " ", el("a", {class: "button", id: "clone", href: `/launch?task=${encodeURIComponent(run.task_path)}&clone=${run.id}`},
      t("action.clone")),
    " ", active ? null : act(t("action.delete"), "delete", async () => {
      const typed = prompt(t("action.delete_prompt", {id: run.id, name: run.name}));
      if (typed === null) return;
      await call("POST", `/api/runs/${run.id}/delete`, {confirm: typed});
      location.href = "/";
    }));
}

function renderSide(side, run) {
  const checkpoints = (run.checkpoints.checkpoints || []).map(c => el("tr", {}, el("td", {}, c.name),
    el("td", {}, c.kind), el("td", {}, String(c.step ?? "")), el("td", {}, formatNumber(c.metric))));
  // the event's kind in the page's language; its message as the server wrote it (English, as in the log)
  const events = run.events.map(e => el("li", {class: `event ${e.kind}`, "data-kind": e.kind},
    `${formatDate(e.time)} · ${MESSAGES[`event.${e.kind}`] || e.kind}: ${e.message}`));
  const trackers = run.trackers.map(tracker => el("li", {class: "tracker"}, `${tracker.name}: `,
    tracker.url && /^(https?:\/\/|\/view\/)/.test(tracker.url)
      ? el("a", {href: tracker.url, target: "_blank", rel: "noopener"}, tracker.url.startsWith("/view/") ? t("side.open") : tracker.url)
      : el("code", {}, tracker.open),
    tracker.url && tracker.url.startsWith("/view/") ? el("code", {class: "command"}, ` ${tracker.open}`) : null));
  fill(side,
    el("h2", {}, t("side.checkpoints")), el("div", {class: "table-box"}, el("table", {id: "checkpoints"},
      el("tr", {}, [t("col.name"), t("col.kind"), t("col.step"), run.checkpoints.metric || t("col.metric")]
        .map(h => el("th", {}, h))), checkpoints)),
    el("h2", {}, t("side.events")), el("ul", {id: "events"}, events),
    trackers.length ? el("h2", {}, t("side.trackers")) : null, trackers.length ? el("ul", {}, trackers) : null,
    run.sweep ? sweepTable(run.sweep) : null);
}

function sweepTable(sweep) {
  const keys = Object.keys((sweep.trials[0] || {}).values || {});
  return el("div", {class: "table-box"}, el("h2", {}, t("sweep.title")), el("table", {id: "sweep-trials"},
    el("tr", {}, [t("col.trial"), t("col.status"), ...keys, t("col.metric")].map(h => el("th", {}, h))),
    sweep.trials.map(trial => el("tr", {}, el("td", {}, String(trial.trial)), el("td", {}, trial.status),
      keys.map(k => el("td", {}, formatNumber(trial.values[k]))), el("td", {}, formatNumber(trial.metric))))));
}

function renderTry(box, run) {
  box.dataset.ready = "1";
  const choice = el("select", {id: "try-checkpoint"}, run.exports.map(e => el("option", {value: e.name},
    t("try.checkpoint", {name: e.name, step: e.step ?? "?"}))));
  const picker = el("p", {}, el("label", {}, t("try.checkpoint_label"), choice));
  if (run.export_kind && run.export_kind.chat) return renderChat(box, run, choice, picker);
  const input = el("textarea", {id: "try-text", rows: 3, placeholder: t("try.placeholder")});
  const output = el("div", {id: "try-output"});
  const button = el("button", {id: "try-run", onclick: async () => {
    const texts = input.value.split("\n").filter(line => line.trim());
    button.disabled = true;
    // the first answer loads the model: a spinner says it works
    fill(output, el("p", {class: "help"}, el("span", {class: "spinner"}), t("try.loading")));
    try {
      const result = await call("POST", `/api/runs/${run.id}/predict`, {texts, checkpoint: choice.value});
      fill(output, el("p", {class: "help", id: "try-answered-by"},
        t("try.answered_by", {model: `${result.checkpoint.name} (${result.model_dir})`})),
        result.predictions.map((p, i) => predictionOf(texts[i], p, result.label_names)));
    } catch (e) { fill(output, el("p", {class: "cause"}, String(e.message || e))); }
    button.disabled = false;
  }}, t("try.predict"));
  box.append(el("h2", {}, t("try.title")), picker, input, el("p", {}, button), output);
}

function predictionOf(text, p, names) {
  // a classifier's answer as its label and a bar for every label's probability; anything else as text
  const head = el("div", {class: "prediction-text"}, text);
  if (p && Array.isArray(p.probs) && names && names.length === p.probs.length) {
    return el("div", {class: "prediction"}, head, el("div", {class: "prediction-label"}, String(p.label ?? (p.labels || []).join(", "))),
      p.probs.map((prob, i) => el("div", {class: "bar-row"}, el("span", {class: "bar-label"}, names[i]),
        el("span", {class: "bar", style: `width: ${Math.round(100 * prob)}%`}), el("span", {}, ` ${formatNumber(prob)}`))));
  }
  return el("div", {class: "prediction"}, head, el("pre", {}, typeof p === "object" && p && "text" in p ? p.text : JSON.stringify(p)));
}

function renderChat(box, run, choice, picker) {
  // a chat model: turns, a system prompt, sampling settings and a stop button; the answer streams in
  const turns = [];
  const system = el("textarea", {id: "chat-system", rows: 2, placeholder: t("chat.system")});
  const log = el("div", {id: "chat-log"});
  const input = el("textarea", {id: "chat-input", rows: 2, placeholder: t("chat.placeholder")});
  const number = (id, value, attrs) => el("input", {type: "number", id, value, ...attrs});
  const temperature = number("chat-temperature", "0", {min: 0, max: 2, step: 0.1});
  const topP = number("chat-top-p", "1", {min: 0.01, max: 1, step: 0.05});
  const maxTokens = number("chat-max-tokens", "128", {min: 1, max: 2048, step: 1});
  const stop = el("input", {type: "text", id: "chat-stop", placeholder: t("chat.stop_strings")});
  let controller = null;
  const send = el("button", {id: "chat-send", onclick: () => ask()}, t("chat.send"));
  const halt = el("button", {id: "chat-stop-answer", disabled: true, onclick: () => controller && controller.abort()},
    t("chat.stop"));
  const clear = el("button", {id: "chat-clear", onclick: () => { turns.length = 0; fill(log); }}, t("chat.clear"));
  function bubble(role, text) {
    const node = el("div", {class: `turn ${role}`, "data-role": role}, el("div", {class: "who"}, t(`chat.${role}`)),
      el("div", {class: "said"}, text));
    log.append(node);
    return node.querySelector(".said");
  }
  async function ask() {
    const text = input.value.trim();
    if (!text || controller) return;
    input.value = "";
    turns.push({role: "user", content: text});
    bubble("user", text);
    const answer = bubble("assistant", "");
    answer.append(el("span", {class: "spinner"}));
    const messages = (system.value.trim() ? [{role: "system", content: system.value.trim()}] : []).concat(turns);
    const body = {messages, checkpoint: choice.value, max_tokens: Number(maxTokens.value)};
    const temp = Number(temperature.value);
    if (temp > 0) Object.assign(body, {temperature: temp, top_p: Number(topP.value)}); else body.temperature = 0;
    if (stop.value) body.stop = stop.value.split("|").filter(Boolean).slice(0, 4);
    controller = new AbortController();
    send.disabled = true; halt.disabled = false;
    let said = "";
    try {
      const response = await fetch(`/api/runs/${run.id}/chat`, {method: "POST", credentials: "same-origin",
        signal: controller.signal, headers: {"Content-Type": "application/json", "X-Studio-CSRF": csrfToken()},
        body: JSON.stringify(body)});
      if (!response.ok) {
        let problem = `${response.status}`;
        try { problem = (await response.json()).error || problem; } catch (e) { /* not JSON */ }
        throw new Error(problem);
      }
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let pending = "";
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        pending += decoder.decode(value, {stream: true});
        const events = pending.split("\n\n");
        pending = events.pop();
        for (const raw of events) {
          if (!raw.startsWith("data: ")) continue;
          const event = JSON.parse(raw.slice(6));
          if (event.text) { said += event.text; answer.textContent = said; }
          if (event.error) throw new Error(event.error);
          if (event.done) answer.parentNode.dataset.done = "1";
        }
      }
      turns.push({role: "assistant", content: said});
    } catch (e) {
      if (e.name === "AbortError") { answer.textContent = said; answer.parentNode.dataset.done = "stopped";
        turns.push({role: "assistant", content: said}); }
      else { answer.textContent = said; answer.append(el("div", {class: "cause"}, String(e.message || e))); turns.pop(); }
    } finally {
      controller = null; send.disabled = false; halt.disabled = true;
    }
  }
  input.addEventListener("keydown", e => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); ask(); } });
  box.append(el("h2", {}, t("chat.title")), picker, system, log, input,
    el("p", {class: "chat-settings"}, el("label", {}, t("chat.temperature"), temperature), " ",
      el("label", {}, t("chat.top_p"), topP), " ", el("label", {}, t("chat.max_tokens"), maxTokens), " ",
      el("label", {}, t("chat.stop_label"), stop)),
    el("p", {}, send, " ", halt, " ", clear));
}

// ---- compare ----
async function comparePage(main, ids) {
  const data = await call("GET", "/api/runs");
  const chosen = new Set(ids.split(",").filter(Boolean).map(Number));
  const picker = el("p", {}, data.runs.map(r => el("label", {}, el("input", {type: "checkbox", value: r.id,
    checked: chosen.has(r.id), onchange: e => {
      e.target.checked ? chosen.add(r.id) : chosen.delete(r.id);
      history.replaceState(null, "", `/compare?ids=${[...chosen].join(",")}`);
      draw();
    }}), `#${r.id} ${r.name}`)));
  const metricChoice = el("select", {id: "compare-metric", onchange: () => draw()});
  const chartBox = el("div", {id: "compare-chart"});
  const settings = el("table", {id: "compare-settings"});
  const summary = el("div", {class: "table-box"});
  const allKeys = el("input", {type: "checkbox", id: "compare-all-keys", onchange: () => draw()});
  main.append(el("h1", {}, t("compare.title")), picker, summary, el("p", {}, t("compare.curve"), metricChoice), chartBox,
    el("h2", {}, t("compare.settings")), el("p", {}, el("label", {}, allKeys, t("compare.all_keys"))),
    el("div", {class: "table-box"}, settings));
  const cache = {};
  async function recordsOf(id) {
    if (!cache[id]) cache[id] = (await call("GET", `/api/runs/${id}/metrics?since=0`)).records;
    return cache[id];
  }
  async function draw() {
    const runs = data.runs.filter(r => chosen.has(r.id));
    const all = await Promise.all(runs.map(r => recordsOf(r.id)));
    const names = new Set(["train loss"]);
    for (const records of all) for (const r of records) if (r.tag === "dev")
      for (const [k, v] of Object.entries(r)) if (typeof v === "number" && !["step", "time", "epoch"].includes(k)) names.add(`dev ${k}`);
    const current = metricChoice.value || "train loss";
    fill(metricChoice, ...[...names].map(n => el("option", {value: n, selected: n === current}, n)));
    const [tag, key] = (metricChoice.value || "train loss").split(" ");
    const steps = [...new Set(all.flatMap(records => records.filter(r => r.tag === tag && typeof r[key] === "number")
      .map(r => r.step)))].sort((a, b) => a - b);
    const series = all.map(records => {
      const byStep = new Map(records.filter(r => r.tag === tag && typeof r[key] === "number").map(r => [r.step, r[key]]));
      return steps.map(s => byStep.has(s) ? byStep.get(s) : null);
    });
    fill(chartBox);
    if (runs.length) lineChart(chartBox, `${tag} ${key}`, runs.map(r => `#${r.id} ${r.name}`), 900).setData([steps, ...series]);
    const details = await Promise.all(runs.map(r => call("GET", `/api/runs/${r.id}`)));
    fill(summary, runSummaryTable(details, all));
    const flat = details.map(d => flatten(d.config));
    const keys = [...new Set(flat.flatMap(f => Object.keys(f)))].filter(k => !k.startsWith("_")).sort();
    const rows = keys.map(k => {
      const values = flat.map(f => JSON.stringify(f[k]));
      return {k, values, differs: new Set(values).size > 1};
    });
    const shown = allKeys.checked ? rows : rows.filter(r => r.differs);
    fill(settings, el("tr", {}, el("th", {}, t("compare.setting")), runs.map(r => el("th", {}, `#${r.id} ${r.name}`))),
      ...shown.map(({k, values, differs}) => el("tr", {class: differs ? "differs" : null},
        el("td", {class: "key"}, k.split(".").flatMap((part, i) => i ? [el("wbr"), `.${part}`] : [part])),
        values.map(v => el("td", {class: "value"}, v ?? "")))),
      shown.length ? null : el("tr", {}, el("td", {colspan: runs.length + 1}, t("compare.none_differs"))));
  }
  await draw();
}

function lastRecord(records, tag) {
  for (let i = records.length - 1; i >= 0; i--) if (records[i].tag === tag) return records[i];
  return null;
}

function metricsText(record) {
  if (!record) return "";
  return Object.entries(record).filter(([k, v]) => typeof v === "number" && !["step", "time", "epoch",
    "elapsed_sec"].includes(k)).map(([k, v]) => `${k} ${formatNumber(v)}`).join(", ");
}

function runSummaryTable(details, records) {
  // each run's outcome on top: best and final dev, test, wall time and speed
  const head = ["run", "status", "progress", "best", "final_dev", "test", "wall", "speed"];
  return el("table", {id: "compare-summary", class: "cards"}, el("tr", {}, head.map(h => el("th", {}, t(`col.${h}`)))),
    details.map((run, i) => {
      const train = lastRecord(records[i], "train");
      const wall = run.started ? (run.ended || Date.now() / 1000) - run.started : null;
      const cell = (key, ...content) => el("td", {"data-label": key ? t(`col.${key}`) : null}, ...content);
      return el("tr", {"data-run": run.id}, cell(null, `#${run.id} ${run.name}`), cell(null, badge(run.status)),
        cell(null, progressOf(run)),
        cell("best", run.best ? `${run.best.metric} ${formatNumber(run.best.value)} (${t("progress.step", {step: run.best.step})})` : ""),
        cell("final_dev", metricsText(lastRecord(records[i], "dev"))),
        cell("test", metricsText(lastRecord(records[i], "test"))), cell("wall", formatTime(wall)),
        cell("speed", train && train.steps_per_sec ? formatNumber(train.steps_per_sec) : ""));
    }));
}

function flatten(value, prefix, out) {
  out = out || {};
  if (value && typeof value === "object" && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value)) flatten(v, prefix ? `${prefix}.${k}` : k, out);
  } else if (prefix) out[prefix] = value;
  return out;
}

// ---- start ----
window.addEventListener("DOMContentLoaded", async () => {
  const main = document.getElementById("main");
  const {page, arg} = document.body.dataset;
  const switcher = document.getElementById("language");
  if (switcher) switcher.addEventListener("click", event => {  // the choice sticks: a cookie the server reads
    event.preventDefault();
    document.cookie = `wenxin_studio_lang=${switcher.dataset.lang}; Path=/; SameSite=Strict; Max-Age=31536000`;
    location.reload();
  });
  fill(main, el("div", {id: "message"}));
  try {
    if (page === "runs") await runsPage(main);
    else if (page === "launch") await launchPage(main, arg);
    else if (page === "run") await runPage(main, arg);
    else if (page === "compare") await comparePage(main, arg);
  } catch (e) { showError(e); }
});
