// Shared by the dashboard's pages: DOM helpers, the API client with the caller's token,
// the caller's permissions, and the current route (so a page left behind stops drawing).
"use strict";

const Charts = window.FlotillaCharts;
const TOKEN_KEY = "flotilla-token";

// `flotilla ui` prints /ui#token=…: take the token from the fragment (never sent to the
// server, so never in an access log), keep it for this tab, and drop it from the address bar.
(function tokenFromFragment() {
  const match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (!match) return;
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
  history.replaceState(null, "", location.pathname + location.search);
})();
// The job states come from the server (the lifecycle core, GET /ui/api/states): a state added
// there is listed, filtered and tested here without an edit.
const STATE_SETS = await fetch("/ui/api/states").then((answer) => answer.json());
const TERMINAL = new Set(STATE_SETS.terminal);
const WAITING = new Set(STATE_SETS.waiting);
const STATES = STATE_SETS.states;
const PAGE_SIZE = 50;

const main = document.getElementById("main");
const status = document.getElementById("status");
let timers = [];
let me = null;
let routeId = 0;
let onSignIn = () => {};
/** A page's async work is stale once another route has started: it must not draw. */
function stale(id) { return id !== routeId; }

// --- small helpers -----------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "class") node.className = value;
    else if (key === "style") node.style.cssText = value;  // CSSOM: allowed by the page's CSP
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.appendChild(typeof child === "string" || typeof child === "number"
      ? document.createTextNode(String(child)) : child);
  }
  return node;
}

/** A long value shortened, the full value on hover and a button to copy it. */
function short(value, keep = 12, copy = false) {
  const text = String(value ?? "");
  const shown = text.length > keep ? text.slice(0, keep - 1) + "…" : text;
  const span = h("span", {class: "short", title: text, "data-full": text}, shown);
  if (!copy) return span;
  const button = h("button", {class: "copy", type: "button", "aria-label": "copy " + text,
    title: "copy " + text, onclick: () => navigator.clipboard?.writeText(text)}, "copy");
  return h("span", {class: "copyable"}, span, button);
}

function badge(state) { return h("span", {class: "badge state-" + state}, state); }

function when(iso) {
  if (!iso) return "–";
  const date = new Date(iso);
  return date.toLocaleString(undefined, {month: "short", day: "numeric", hour: "2-digit",
    minute: "2-digit", second: "2-digit"});
}

function amounts(map) {
  return Object.entries(map || {}).map(([k, v]) => k + " " + fmtAmount(k, v)).join(", ") || "–";
}

function fmtAmount(name, value) {
  if (value === null || value === undefined) return "–";
  if (name === "memory" || name.endsWith("memory")) {
    const gi = value / 2 ** 30;
    return gi >= 1 ? (+gi.toFixed(1)) + "Gi" : (+(value / 2 ** 20).toFixed(0)) + "Mi";
  }
  return Charts.formatNumber(value);
}

/** Run fn now and every ms while its page is current; never two runs at once. */
function clock(epochSeconds) {
  return new Date(epochSeconds * 1000).toLocaleTimeString(undefined, {hour: "2-digit",
    minute: "2-digit", second: "2-digit", hour12: false});
}

/** replaceChildren without the holes: conditional parts may be null or false. */
function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

function every(ms, fn) {
  const id = routeId;
  if (stale(id)) return;
  let busy = false;
  const tick = async () => {
    if (busy || stale(id)) return;
    busy = true;
    try { await fn(); } catch (error) { if (error.status !== 401) say(error.message, "error"); }
    finally { busy = false; }
  };
  tick();
  timers.push(setInterval(tick, ms));
}

function say(text, kind = "info") {
  status.textContent = text;
  status.className = "status " + kind;
}

// --- the API -----------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    super(body?.message || "HTTP " + status);
    this.status = status;
    this.problems = body?.problems || [];
  }
}

async function api(path, options = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = {"Accept": "application/json", ...(options.headers || {})};
  if (token) headers["Authorization"] = "Bearer " + token;
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {method: options.method || "GET", headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body)});
  let body = null;
  try { body = await response.json(); } catch (error) { body = null; }
  if (!response.ok) {
    if (response.status === 401) showSignIn(body?.message);
    throw new ApiError(response.status, body);
  }
  return body;
}

function can(permission, queue, owner) {
  if (!me) return false;
  if (me.admin) return true;
  const granted = new Set([...(me.queues[queue] || []), ...(me.queues["*"] || [])]);
  if (granted.has("admin") || granted.has(permission)) return true;
  return permission === "cancel" && granted.has("submit") && owner === me.name;
}

// --- sign in -----------------------------------------------------------------------------

function showSignIn(message) {
  clearTimers();
  main.replaceChildren(h("section", {class: "signin"},
    h("h1", {}, "Sign in"),
    h("p", {}, message || "This server needs a token (the same one the CLI reads from FLOTILLA_TOKEN)."),
    h("form", {onsubmit: (event) => {
      event.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, event.target.token.value.trim());
      me = null;
      onSignIn();
    }},
    h("label", {for: "token"}, "Token"),
    h("input", {id: "token", name: "token", type: "password", autocomplete: "off", required: true}),
    h("button", {type: "submit"}, "Sign in"))));
  document.getElementById("token").focus();
}

async function loadMe() {
  if (me) return me;
  me = await api("/ui/api/me");
  document.getElementById("who").replaceChildren(authHeader(me));
  return me;
}

const AUTH_MODES = {
  "tokens": ["token required", "this server's token config names its users"],
  "local-token": ["token required (local token)", "no token config: the token `flotilla up` " +
    "wrote for the user it runs as, which `flotilla ui` puts in the address"],
  "off": ["no token required", "authentication is off (a server embedded in a program): " +
    "every caller is an admin"],
};

/** The header's words for how this server authenticates and who the caller is to it. */
function authHeader(caller) {
  const mode = caller.auth_mode || (caller.auth_enabled ? "tokens" : "off");
  const [words, explain] = AUTH_MODES[mode] || [mode, ""];
  const parts = [h("span", {class: "auth-mode", "data-auth-mode": mode, title: explain}, words)];
  if (mode !== "off") {
    parts.push(" · ", caller.identified === false ? h("span", {class: "identity"}, "signed in")
      : h("span", {class: "identity"}, "signed in as ", h("strong", {}, caller.name)), " ",
      h("button", {type: "button", class: "link", onclick: () => {
        sessionStorage.removeItem(TOKEN_KEY); me = null; showSignIn("Signed out.");
      }}, "sign out"));
  }
  return h("span", {}, parts);
}


function clearTimers() { timers.forEach(clearInterval); timers = []; }

/** A new route starts: stop the old page's timers; returns the new route's id. */
function nextRoute() { clearTimers(); routeId += 1; return routeId; }

function currentRoute() { return routeId; }

function whenSignedIn(callback) { onSignIn = callback; }

export {Charts, TERMINAL, WAITING, STATES, PAGE_SIZE, main, h, short, badge, when, amounts,
  fmtAmount, clock, fill, every, say, api, can, loadMe, stale, nextRoute, currentRoute, clearTimers,
  whenSignedIn};
