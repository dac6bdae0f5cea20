// wenxin studio: the launch page: task files, the form, preparing data (loaded after studio.js, whose helpers it uses).

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
    let input, shown;  // the control, and what holds it on the page
    if (field.control === "select") {
      // a choice's words where the catalogue has them (graph mode: eager or static, not 1 or 0)
      input = el("select", {name: field.key}, field.choices.map(c => el("option", {value: JSON.stringify(c),
        selected: c === field.value}, MESSAGES[`choice.${field.key}.${c}`] || String(c))));
    } else if (field.control === "checkbox") {
      input = el("input", {type: "checkbox", name: field.key, checked: field.value});
      shown = el("label", {class: "check"}, input);  // the label: a finger-sized place to tap
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
      label ? el("div", {class: "key-path"}, field.key) : null), el("td", {}, shown || input,
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
    // each missing input once; what makes it: a script to run now (and the ones after it), or the
    // run of another task file (the pretraining example's model, which the ERNIE classifier continues)
    const after = state.after ? el("div", {class: "help after"}, t("launch.after_before"),
      el("a", {href: `/launch?task=${encodeURIComponent(state.after)}`}, state.after), t("launch.after_after")) : null;
    const then = (state.then || []).length ? el("div", {class: "help then"},
      t("launch.then", {scripts: state.then.join(", ")})) : null;
    const unmade = (state.unmade || []).length && !after ? el("div", {class: "help"}, t("launch.no_script_for",
      {paths: state.unmade.join(", ")})) : null;
    fill(box, state.description ? el("div", {class: "help"}, state.description) : null,
      state.ready ? el("span", {class: "status finished"}, t("launch.ready")) :
        el("div", {class: "cause"}, state.missing.map(m => el("div", {}, t("launch.missing", {path: m.path}))),
          (state.others || state.problems).map(p => el("div", {}, p))),
      state.ready ? null : [prepare, then, after, unmade]);
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

PAGES.launch = launchPage;
