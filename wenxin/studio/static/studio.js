// wenxin studio: fills the page shells from the studio's JSON API and keeps them current.
// Every value from the server is written as text (textContent), never parsed as HTML.
"use strict";

const POLL_MS = 2000;
const SETTLED_POLL_MS = 30000;  // a finished, failed or stopped run: only its status, this often
const SETTLED = ["finished", "failed", "stopped"];
// the page's messages in its language (static/messages.json's, put in the page by the server)
const MESSAGES = JSON.parse((document.getElementById("messages") || {}).textContent || "{}");

function t(key, values) {
  const template = MESSAGES[key] ?? key;
  return values ? template.replace(/\{(\w+)\}/g, (m, name) => name in values ? String(values[name]) : m) : template;
}

// a sentence the server kept as a message key and values (i18n.Notice), said in the page's language
function say(notice) {
  const values = {};
  for (const [name, value] of Object.entries(notice.values || {}))
    values[name] = value && typeof value === "object" && value.key ? say(value) : value;
  return t(notice.key, values);
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
  if (!response.ok)
    throw new Error((data && data.notice ? say(data.notice) : data && data.error) || `${response.status} ${response.statusText}`);
  return data;
}

function causeOf(run) { return run.cause_notice ? say(run.cause_notice) : run.cause; }

function formatTime(seconds) {
  if (seconds === null || seconds === undefined) return "";
  const s = Math.round(seconds), h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
  return h ? t("time.h", {h, m}) : m ? t("time.m", {m, s: s % 60}) : t("time.s", {s: s % 60});
}

function formatDate(epoch) {
  return epoch ? new Date(epoch * 1000).toLocaleString(document.documentElement.lang || undefined) : "";
}

function formatBytes(bytes) {
  if (bytes === null || bytes === undefined) return "-";
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

async function poll(refresh) {
  // refresh() may answer how long to wait before it is called again (ms): a page of something that
  // cannot change any more asks rarely
  let failures = 0;
  async function tick() {
    // a hidden tab asks nothing until it is shown again
    if (document.hidden) { document.addEventListener("visibilitychange", tick, {once: true}); return; }
    let wait = POLL_MS;
    try { wait = (await refresh()) || POLL_MS; failures = 0; } catch (e) { failures += 1; showError(e); }
    document.body.dataset.pollMs = String(wait);  // what the page chose (its tests read it)
    setTimeout(tick, wait * Math.min(1 + failures, 5));
  }
  await tick();
}

// ---- start: each page's script adds its function to PAGES under the shell's data-page ----
const PAGES = {};

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
    if (!(page in PAGES)) throw new Error(`no page ${page}`);
    await PAGES[page](main, arg);
  } catch (e) { showError(e); }
});
