// The console's shared parts: the API client, DOM helpers, formatting and navigation. The API key is
// kept in this tab's session storage only.

export const KEY = "airlock.key";

// ---- the API ----

export class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// fetchAPI makes a call with the signed-in key (body, if any, sent as type) and returns the Response
// of a success, or throws the API's error; a 401 signs the tab out, but for the sign-in's own check.
export async function fetchAPI(method, path, body, type) {
  const key = sessionStorage.getItem(KEY);
  const headers = { Accept: "application/json" };
  if (key) headers.Authorization = "Bearer " + key;
  if (body !== undefined) headers["Content-Type"] = type;
  let res;
  try {
    res = await fetch(path, { method, headers, body, credentials: "omit", cache: "no-store" });
  } catch (e) {
    throw new APIError(0, "unavailable", "Airlock does not answer: " + e.message);
  }
  if (!res.ok) {
    let err = {};
    try { err = (await res.json()).error || {}; } catch { /* not JSON */ }
    if (res.status === 401 && path !== "/v1/usage") {
      sessionStorage.removeItem(KEY);
      go("#/signin?expired=1");
    }
    throw new APIError(res.status, err.code || String(res.status), err.message || res.statusText || "request failed");
  }
  return res;
}

// api makes a call with a JSON body (if any) and returns its JSON answer (null if none).
export async function api(method, path, body) {
  const res = await fetchAPI(method, path, body === undefined ? undefined : JSON.stringify(body), "application/json");
  const text = await res.text();
  if (!text) return null;
  try { return JSON.parse(text); } catch { return null; }
}

// ---- small DOM helpers ----

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function render(...nodes) {
  document.getElementById("main").replaceChildren(...nodes.filter((n) => n !== null && n !== undefined && n !== false));
}

export function ago(iso) {
  if (!iso) return "";
  const s = Math.round((Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return s + " s ago";
  if (s < 3600) return Math.round(s / 60) + " min ago";
  if (s < 86400) return Math.round(s / 3600) + " h ago";
  return Math.round(s / 86400) + " d ago";
}

export function bytes(n) {
  if (n === undefined || n === null) return "";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}

export function go(hash) {
  // The same address again: shown anew (the router listens for hashchange).
  if (location.hash === hash) window.dispatchEvent(new HashChangeEvent("hashchange"));
  else location.hash = hash;
}


// The page's clean-up (timers, listeners, connections), run when the user leaves it.
let leaving = [];
let generation = 0; // one up each time a page is left

// pageScope, called by a page before its first await, ties what it does later to it: once the user
// has left it, its render does nothing and its clean-up runs at once (it would otherwise draw over
// the next page, or leave its timers to the next page's leaving).
export function pageScope() {
  const g = generation;
  return {
    get stale() {
      return g !== generation;
    },
    render(...nodes) {
      if (g === generation) render(...nodes);
    },
    onLeave(fn) {
      if (g === generation) onLeave(fn);
      else fn();
    },
  };
}

export function onLeave(fn) {
  leaving.push(fn);
}

export function leave() {
  generation++;
  const fns = leaving;
  leaving = [];
  for (const fn of fns) fn();
}

// confirmDialog asks a yes/no question in a modal dialog.
export function confirmDialog(text) {
  return new Promise((resolve) => {
    const d = h("dialog", { id: "confirm" }, h("p", {}, text),
      h("div", { class: "actions" },
        h("button", { type: "button", class: "danger", id: "confirm-yes", onclick: () => { d.close(); d.remove(); resolve(true); } }, "Yes"),
        h("button", { type: "button", onclick: () => { d.close(); d.remove(); resolve(false); } }, "Cancel")));
    d.addEventListener("cancel", () => { d.remove(); resolve(false); });
    document.body.append(d);
    d.showModal();
  });
}


// virtualList draws, in viewport (a scrolling element), only the rows in view of a list of items of
// fixed height, each made by renderRow(item, index). set(items) replaces the list; scrollTo(i)
// brings a row into view.
export function virtualList(viewport, rowHeight, renderRow, onScroll, scope) {
  const spacer = h("div", { class: "spacer" });
  viewport.replaceChildren(spacer);
  let items = [];
  const draw = () => {
    spacer.style.height = items.length * rowHeight + "px";
    const first = Math.max(0, Math.floor(viewport.scrollTop / rowHeight) - 10);
    const last = Math.min(items.length, first + Math.ceil(viewport.clientHeight / rowHeight) + 20);
    const rows = [];
    for (let i = first; i < last; i++) {
      const row = renderRow(items[i], i);
      row.style.position = "absolute";
      row.style.top = i * rowHeight + "px";
      row.style.left = "0";
      row.style.right = "0";
      rows.push(row);
    }
    spacer.replaceChildren(...rows);
  };
  viewport.addEventListener("scroll", () => {
    draw();
    if (onScroll) onScroll();
  });
  window.addEventListener("resize", draw);
  (scope || { onLeave }).onLeave(() => window.removeEventListener("resize", draw));
  return {
    set(next) {
      items = next;
      draw();
    },
    draw,
    get length() {
      return items.length;
    },
    scrollTo(i) {
      const top = i * rowHeight;
      if (top < viewport.scrollTop || top + rowHeight > viewport.scrollTop + viewport.clientHeight) {
        viewport.scrollTop = Math.max(0, top - viewport.clientHeight / 2);
      }
      draw();
    },
  };
}

// elapsed shows on el the text of doing, with the seconds it has taken, until the returned function
// is called: the progress of a long call.
let running = 0;

// busy reports whether a long call shown by elapsed is under way (a page holds its refresh then).
export function busy() {
  return running > 0;
}

export function elapsed(el, doing) {
  running++;
  const t0 = Date.now();
  const tick = () => {
    el.textContent = doing + "… " + Math.round((Date.now() - t0) / 1000) + " s";
  };
  tick();
  const timer = setInterval(tick, 1000);
  let stopped = false;
  return () => {
    if (!stopped) running--;
    stopped = true;
    clearInterval(timer);
  };
}
