// wenxin studio: comparing runs: outcomes, differing settings, curves (loaded after studio.js, whose helpers it uses).

async function comparePage(main, ids) {
  const data = await call("GET", "/api/runs");
  data.runs = data.runs.filter(r => r.kind !== "prepare");  // a data-preparation job has no curves to compare
  const chosen = new Set(ids.split(",").filter(Boolean).map(Number));
  const picker = el("p", {class: "run-picker"}, data.runs.map(r => el("label", {}, el("input", {type: "checkbox", value: r.id,
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
    // a curve's name in the page's language (the metric's own name, acc or f1, stays as the run logs it)
    const curveName = name => name === "train loss" ? t("compare.metric_train_loss")
      : t("compare.metric_dev", {metric: name.slice(4)});
    const current = metricChoice.value || "train loss";
    fill(metricChoice, ...[...names].map(n => el("option", {value: n, selected: n === current}, curveName(n))));
    const [tag, key] = (metricChoice.value || "train loss").split(" ");
    const steps = [...new Set(all.flatMap(records => records.filter(r => r.tag === tag && typeof r[key] === "number")
      .map(r => r.step)))].sort((a, b) => a - b);
    const series = all.map(records => {
      const byStep = new Map(records.filter(r => r.tag === tag && typeof r[key] === "number").map(r => [r.step, r[key]]));
      return steps.map(s => byStep.has(s) ? byStep.get(s) : null);
    });
    fill(chartBox);
    if (runs.length) lineChart(chartBox, curveName(`${tag} ${key}`), runs.map(r => `#${r.id} ${r.name}`), 900)
      .setData([steps, ...series]);
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
      const wall = run.started ? (run.ended || Date.now() / 1000) - run.started : null;
      const cell = (key, ...content) => el("td", {"data-label": key ? t(`col.${key}`) : null}, ...content);
      return el("tr", {"data-run": run.id}, cell(null, `#${run.id} ${run.name}`), cell(null, badge(run.status)),
        cell(null, progressOf(run)),
        cell("best", run.best ? `${run.best.metric} ${formatNumber(run.best.value)} (${t("progress.step", {step: run.best.step})})` : ""),
        cell("final_dev", metricsText(lastRecord(records[i], "dev"))),
        cell("test", metricsText(lastRecord(records[i], "test"))), cell("wall", formatTime(wall)),
        cell("speed", run.steps_per_sec ? formatNumber(run.steps_per_sec) : ""));
    }));
}

function flatten(value, prefix, out) {
  out = out || {};
  if (value && typeof value === "object" && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value)) flatten(v, prefix ? `${prefix}.${k}` : k, out);
  } else if (prefix) out[prefix] = value;
  return out;
}

PAGES.compare = comparePage;
