// wenxin studio: one run's page: progress, outcome, charts, events, log (loaded after studio.js, whose helpers it uses).

const CHART_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

function tickText(value) {
  // an axis label as short as the value allows: 5e-4 and 1.5e-4, not 5.000e-4 cut to ".000e-4"
  if (typeof value !== "number" || value === 0) return String(value ?? "");
  const size = Math.abs(value);
  if (size >= 1e4 || size < 1e-3) return Number(value.toPrecision(3)).toExponential().replace("e+", "e");
  return String(Number(value.toPrecision(4)));
}

function axisValues(u, ticks) {
  return ticks.map(tickText);
}

function axisSize(u, values) {
  // wide enough for its longest label (uPlot cuts what does not fit)
  return values ? 16 + 7 * Math.max(1, ...values.map(v => String(v).length)) : 40;
}

function lineChart(target, title, seriesNames, width) {
  // as wide as its container (a phone's screen, a desktop's column), and resized with it
  const room = () => {  // the width inside the container's padding
    const box = target.parentNode;
    if (!box || !box.clientWidth) return target.clientWidth || width || 520;
    const style = getComputedStyle(box);
    return box.clientWidth - parseFloat(style.paddingLeft || 0) - parseFloat(style.paddingRight || 0);
  };
  const widthOf = () => Math.max(240, Math.min(width || 520, room() - 2));
  const opts = {title, width: widthOf(), height: 240, scales: {x: {time: false}},
    axes: [{}, {values: axisValues, size: axisSize}],
    series: [{label: t("chart.step")}].concat(seriesNames.map((n, i) => ({label: n, stroke: CHART_COLORS[i % 8], width: 1.5,
      // points where there are few: one record draws no line, and must still show
      points: {show: u => u.data[0].length <= 40, size: 6}, spanGaps: true})))};
  const chart = new uPlot(opts, [[]].concat(seriesNames.map(() => [])), target);
  // a turn of the phone, or a resized window: the chart follows its container's width (the box
  // itself is as wide as the chart drawn in it, so the container is what is watched)
  const resize = () => {
    const w = widthOf();
    if (Math.abs(w - chart.width) > 4) chart.setSize({width: w, height: 240});
  };
  if (window.ResizeObserver) new ResizeObserver(resize).observe(target.parentNode || target);
  window.addEventListener("resize", resize);
  window.addEventListener("orientationchange", resize);
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
  const smoothingRow = el("p", {class: "help", id: "smoothing-row"}, el("label", {}, t("chart.smoothing"), smoothing), " ",
    smoothingValue);
  main.append(head, use, actions, smoothingRow, charts, side, el("h2", {}, t("run.log")), log, tryBox);
  let offset = 0, logOffset = 0, lastStatus = null, lastHead = "", lastSide = "", lastUse = null;
  let settled = false;  // its records, log and outcome read after it ended: only its status is asked again
  async function refresh() {
    const run = await call("GET", `/api/runs/${runId}`);
    if (settled && run.status === lastStatus) return SETTLED_POLL_MS;
    const preparing = run.kind === "prepare";  // a data-preparation job: no charts' smoothing, checkpoints, resume
    document.body.dataset.kind = run.kind;
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
    smoothingRow.hidden = preparing;
    const p = run.process;
    if (p && lastUse && p.time > lastUse.time) {  // CPU: the seconds it used between two readings
      const cpu = Math.max(0, Math.round(100 * (p.cpu_seconds - lastUse.cpu_seconds) / (p.time - lastUse.time)));
      use.textContent = t("use.process", {cpu, memory: formatBytes(p.rss_bytes), threads: p.threads}) +
        (p.gpu_memory ? t("use.process_gpu", {memory: formatBytes(p.gpu_memory)}) : "");
    } else if (!p) use.textContent = "";
    lastUse = p;
    if (logData.text) {
      const following = !log.dataset.seen || log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
      log.textContent = (log.textContent + logData.text).split("\n").slice(-400).join("\n");
      if (following) log.scrollTop = log.scrollHeight;  // the tail stays in view unless the reader scrolled up
    }
    log.dataset.seen = "1";
    if (run.exported && !tryBox.dataset.ready) renderTry(tryBox, run);
    else if (tryBox.offerExports) tryBox.offerExports(run.exports);
    settled = SETTLED.includes(run.status) && !run.process;
    return settled ? SETTLED_POLL_MS : POLL_MS;
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
    run.cause ? el("p", {class: "cause"}, causeOf(run)) : null,
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
  if (run.kind === "prepare") {  // a data-preparation job: stop it while it runs; once done, back to the tasks
    fill(actions, active ? act(t("action.stop"), "stop", async () => {
      await call("POST", `/api/runs/${run.id}/stop`); message(t("action.stop_asked"), "ok"); })
      : el("a", {class: "button", id: "back-to-tasks", href: "/launch"},
        t(run.status === "finished" ? "prepare.back_ready" : "prepare.back")));
    return;
  }
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
  if (run.kind === "prepare") {  // no checkpoints: what it did is its log and events
    const events = run.events.map(e => el("li", {class: `event ${e.kind}`, "data-kind": e.kind},
      `${formatDate(e.time)} · ${e.notice ? say(e.notice) : (MESSAGES[`event.${e.kind}`] || e.kind)}`));
    fill(side, el("h2", {}, t("side.events")), el("ul", {id: "events"}, events));
    return;
  }
  const checkpoints = (run.checkpoints.checkpoints || []).map(c => el("tr", {}, el("td", {}, c.name),
    el("td", {}, c.kind), el("td", {}, String(c.step ?? "")), el("td", {}, formatNumber(c.metric))));
  // the event's kind and message in the page's language; a message that only repeats the kind is not said twice
  const events = run.events.map(e => {
    const kind = MESSAGES[`event.${e.kind}`] || e.kind, message = e.notice ? say(e.notice) : e.message;
    return el("li", {class: `event ${e.kind}`, "data-kind": e.kind},
      `${formatDate(e.time)} · ${message && message !== kind && message !== e.kind ? t("event.said", {kind, message}) : kind}`);
  });
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

PAGES.run = runPage;
