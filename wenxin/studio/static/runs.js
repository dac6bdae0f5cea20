// wenxin studio: the runs list (loaded after studio.js, whose helpers it uses).

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
    fill(machine, t("use.machine", {cpu: Math.round(use.cpu_percent), cores: use.cores,
      used: formatBytes(use.memory_used), total: formatBytes(use.memory_total),
      load: use.load ? use.load.map(l => l.toFixed(2)).join(" ") : "-"}),
      (use.gpus || []).map(g => el("span", {class: "gpu"}, el("br"), t("use.gpu", {index: g.index, name: g.name,
        percent: g.percent ?? "-", used: formatBytes(g.memory_used), total: formatBytes(g.memory_total)}))));
    fill(table, el("tr", {}, ["", "run", "name", "status", "progress", "restarts", "settings", "best",
      "final", "started"].map(h => el("th", {}, h && t(`col.${h}`)))));
    for (const run of data.runs) {
      const box = el("input", {type: "checkbox", checked: selected.has(run.id), onchange: e => {
        e.target.checked ? selected.add(run.id) : selected.delete(run.id);
      }});
      const best = run.best ? `${run.best.metric} ${formatNumber(run.best.value)}` : "";
      table.append(el("tr", {"data-run": run.id, "data-status": run.status},
        el("td", {}, el("label", {class: "check"}, box)), el("td", {}, el("a", {href: `/runs/${run.id}`}, `#${run.id}`)),
        el("td", {}, run.name), el("td", {}, badge(run.status), run.cause ? el("div", {class: "cause"}, causeOf(run)) : null),
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

PAGES.runs = runsPage;
