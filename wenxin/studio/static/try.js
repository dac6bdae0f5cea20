// wenxin studio: trying a run's exported model: the predict box and the chat (loaded after studio.js, whose helpers it uses).

function renderTry(box, run) {
  box.dataset.ready = "1";
  const choice = el("select", {id: "try-checkpoint"});
  offerExports(choice, run.exports);
  box.offerExports = exports => offerExports(choice, exports);  // the page calls it as checkpoints come and go
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

function offerExports(choice, exports) {
  // the checkpoints with an export, as options. Until the reader picks one the first is chosen, the best when there is
  // one; a pick the run has since deleted (it keeps only its newest checkpoints) falls back to it too.
  const names = exports.map(e => e.name);
  if (JSON.stringify(names) === choice.dataset.names) return;
  if (!choice.dataset.names) choice.addEventListener("change", () => { choice.dataset.picked = "1"; });
  const kept = choice.dataset.picked && names.includes(choice.value) ? choice.value : names[0];
  fill(choice, exports.map(e => el("option", {value: e.name}, t("try.checkpoint", {name: e.name, step: e.step ?? "?"}))));
  if (kept !== undefined) choice.value = kept;
  choice.dataset.names = JSON.stringify(names);
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
  // the longest answer this model can give (its own limit), and no more
  const tokenLimit = (run.export_kind && run.export_kind.max_new_tokens) || 2048;
  const maxTokens = number("chat-max-tokens", String(Math.min(128, tokenLimit)), {min: 1, max: tokenLimit, step: 1});
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
    const wanted = Number(maxTokens.value);
    if (!Number.isInteger(wanted) || wanted < 1 || wanted > tokenLimit) {  // said in the page's language
      message(t("chat.max_tokens_range", {max: tokenLimit}), "error");
      maxTokens.focus();
      return;
    }
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
      if (e.name === "AbortError") {  // stopped by the reader: what it said so far, marked as cut short
        answer.textContent = said; answer.parentNode.dataset.done = "stopped";
        answer.append(el("div", {class: "stopped-mark"}, t("chat.stopped")));
        turns.push({role: "assistant", content: said});
      } else {
        answer.textContent = said;
        answer.append(el("div", {class: "cause"}, t("chat.failed", {error: String(e.message || e)})));
        turns.pop();
      }
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
