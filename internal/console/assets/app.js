// Airlock's web console: one page that calls the API (/v1) with the API key the user signed in with.
// The key is kept in this tab's session storage only: never in a URL, a cookie or local storage.
// Pages are addressed by the URL's fragment (#/sessions?state=running), so a reload shows the same
// page with the same filters; a form's draft is kept in session storage until it is sent.

import { KEY, api, h, render, ago, bytes, go, onLeave, leave, confirmDialog, virtualList, pageScope } from "./lib.js";

const main = document.getElementById("main");

// ---- routing ----

function parseHash() {
  const raw = location.hash.replace(/^#/, "") || "/sessions";
  const [path, query] = raw.split("?");
  return { parts: path.split("/").filter(Boolean), query: new URLSearchParams(query || "") };
}

async function route() {
  leave();
  const { parts, query } = parseHash();
  const signedIn = !!sessionStorage.getItem(KEY);
  document.getElementById("nav").hidden = !signedIn;
  document.getElementById("signout").hidden = !signedIn;
  if (!signedIn && parts[0] !== "signin") {
    go("#/signin");
    return;
  }
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.page === parts[0]);
  const scope = pageScope();
  try {
    await page(parts, query, scope);
  } catch (e) {
    scope.render(h("div", { class: "banner", role: "alert" }, e.message));
  }
}

// page shows the page the fragment names; its errors are route's to show.
async function page(parts, query, scope) {
  // A page in a module of its own: loaded first, then shown unless the user went elsewhere meanwhile.
  const lazy = async (file) => {
    const m = await import(file);
    return scope.stale ? null : m;
  };
  switch (parts[0]) {
    case "signin": return signinPage(query);
    case "sessions":
      if (parts[1] === "new") return await createSessionPage();
      if (parts[1]) return await (await lazy("./session.js"))?.sessionPage(parts[1], query);
      return await listPage(sessionsKind, query);
    case "terminal":
      // #/terminal/sessions/ID or #/terminal/sandboxes/ID
      return await (await lazy("./terminal.js"))?.terminalPage(parts[1], parts[2], query);
    case "sandboxes": return await listPage(sandboxesKind, query);
    case "egress": return await (await lazy("./egress.js"))?.egressPage(parts[1], query);
    case "files": return await (await lazy("./files.js"))?.filesPage(parts[1], parts[2], query);
    case "usage": return await usagePage();
    case "templates": return await (await lazy("./templates.js"))?.templatesPage();
    case "audit": return await (await lazy("./audit.js"))?.auditPage(query);
    case "operator": return await (await lazy("./operator.js"))?.operatorPage();
    default: render(h("p", {}, "No such page. ", h("a", { href: "#/sessions" }, "Sessions")));
  }
}

// ---- sign in ----

function signinPage(query) {
  const input = h("input", { type: "password", id: "apikey", name: "apikey", autocomplete: "off", placeholder: "ak_…", required: true });
  const err = h("div", { class: "field-error", id: "apikey-error" });
  const form = h("form", { class: "signin" },
    h("h1", {}, "Sign in"),
    query.get("expired") ? h("div", { class: "banner info" }, "Your key was refused: sign in again.") : null,
    h("label", { for: "apikey" }, "API key ", h("span", { class: "hint" }, "(kept in this tab only, until you sign out or close it)")),
    input, err,
    h("p", {}, h("button", { class: "primary", type: "submit" }, "Sign in")));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    err.textContent = "";
    input.classList.remove("invalid");
    sessionStorage.setItem(KEY, input.value.trim());
    try {
      await api("GET", "/v1/usage");
      await whoami();
      go("#/sessions");
    } catch (e) {
      sessionStorage.removeItem(KEY);
      input.classList.add("invalid");
      err.textContent = e.message;
    }
  });
  render(form);
  input.focus();
}

async function whoami() {
  const who = document.getElementById("who");
  who.textContent = "";
  document.getElementById("nav-operator").hidden = true;
  if (!sessionStorage.getItem(KEY)) return;
  try {
    const u = await api("GET", "/v1/usage");
    who.textContent = "tenant " + (u.tenant || "") + (u.operator ? " (operator)" : "");
    document.getElementById("nav-operator").hidden = !u.operator;
  } catch {
    // The header is only a hint.
  }
}

// ---- lists of sessions and sandboxes ----

const sessionsKind = {
  title: "Sessions",
  path: "/v1/sessions",
  hash: "#/sessions",
  field: "sessions",
  states: ["creating", "running", "pausing", "paused", "resuming", "failed", "deleting"],
  cols: "minmax(0,2.3fr) 6rem minmax(0,1.2fr) 5rem minmax(0,1.4fr) 6rem 20rem",
  header: ["ID", "State", "Template", "Runtime", "Metadata", "Created", ""],
  cells: (s) => [
    h("span", { title: s.id }, h("a", { class: "mono", href: "#/sessions/" + s.id }, s.id)),
    h("span", {}, h("span", { class: "state " + s.state, title: s.reason || "" }, s.state)),
    h("span", { title: s.template }, s.template),
    h("span", {}, s.runtime || ""),
    h("span", { class: "mono", title: meta(s.metadata) }, meta(s.metadata)),
    h("span", { title: s.created_at }, ago(s.created_at)),
  ],
  actions: (s, act) => [
    s.state === "running" ? act("Pause", "POST", "/pause", undefined, "pausing") : null,
    s.state === "paused" ? act("Resume", "POST", "/resume", undefined, "resuming") : null,
    s.state === "running" || s.state === "paused" ? act("Fork", "POST", "/fork", { count: 1 }, "forking") : null,
    s.state === "running" ? terminalLink("sessions", s.id) : null,
    act("Delete", "DELETE", "", undefined, "deleting", true),
  ],
  newLink: "#/sessions/new",
};

const sandboxesKind = {
  title: "Sandboxes",
  path: "/v1/sandboxes",
  hash: "#/sandboxes",
  field: "sandboxes",
  states: ["running", "paused", "stopped"],
  cols: "minmax(0,2.3fr) 6rem minmax(0,1.2fr) 5rem minmax(0,1.4fr) 6rem 17rem",
  header: ["ID", "State", "Template", "Runtime", "Metadata", "Created", ""],
  cells: (s) => [
    h("span", { class: "mono", title: s.id }, s.id),
    h("span", {}, h("span", { class: "state " + (s.state || "running") }, s.state || "running")),
    h("span", { title: s.template }, s.template),
    h("span", {}, s.runtime || ""),
    h("span", { class: "mono", title: meta(s.metadata) }, meta(s.metadata)),
    h("span", { title: s.created_at }, ago(s.created_at)),
  ],
  actions: (s, act) => [
    (s.state || "running") === "running" ? terminalLink("sandboxes", s.id) : null,
    h("a", { class: "button", href: "#/files/sandboxes/" + s.id, "data-action": "files" }, "Files"),
    h("a", { class: "button", href: "#/egress/" + s.id, "data-action": "egress" }, "Egress"),
    act("Delete", "DELETE", "", undefined, "deleting", true),
  ],
};

// terminalLink opens the terminal page (terminal.js) of a running session or sandbox.
function terminalLink(kind, id) {
  return h("a", { class: "button", href: `#/terminal/${kind}/${encodeURIComponent(id)}`, "data-action": "terminal" }, "Terminal");
}

// meta shows the user's metadata (Airlock's own keys, airlock.*, are not shown in lists).
function meta(m) {
  return Object.entries(m || {}).filter(([k]) => !k.startsWith("airlock.")).map(([k, v]) => k + "=" + v).join(" ");
}

const ROW = 38; // px, as .trow's height
const PAGE = 500;

// listPage shows a kind's list, filtered by the fragment's query (state, metadata.K=V), as a virtual
// list (only the rows in view are in the DOM), loading pages as the user scrolls and refreshing the
// loaded ones every few seconds.
async function listPage(kind, query) {
  const state = query.get("state") || "";
  const metaFilter = [...query.entries()].filter(([k]) => k.startsWith("metadata.")).map(([k, v]) => k.slice(9) + "=" + v).join(" ");
  const banner = h("div", { class: "banner", role: "alert" });
  const notice = h("div", { class: "banner info", role: "status", id: "notice" });
  const count = h("span", { class: "muted", id: "count" });
  const stateSel = h("select", { id: "state-filter", "aria-label": "state" }, h("option", { value: "" }, "any state"),
    kind.states.map((s) => h("option", { value: s, selected: s === state }, s)));
  const metaInput = h("input", { id: "metadata-filter", placeholder: "metadata: key=value …", value: metaFilter, "aria-label": "metadata" });
  const applyFilters = () => {
    const q = new URLSearchParams();
    if (stateSel.value) q.set("state", stateSel.value);
    for (const pair of metaInput.value.split(/\s+/).filter(Boolean)) {
      const i = pair.indexOf("=");
      if (i > 0) q.set("metadata." + pair.slice(0, i), pair.slice(i + 1));
    }
    const s = q.toString();
    go(kind.hash + (s ? "?" + s : ""));
  };
  stateSel.addEventListener("change", applyFilters);
  metaInput.addEventListener("keydown", (e) => { if (e.key === "Enter") applyFilters(); });

  const viewport = h("div", { class: "viewport", id: "rows" });
  const table = h("div", { class: "table" }, h("div", { class: "thead" }, kind.header.map((t) => h("span", {}, t))), viewport);
  table.style.setProperty("--cols", kind.cols);
  viewport.style.height = "calc(100vh - 220px)";
  viewport.style.minHeight = "200px";

  render(h("div", { class: "toolbar" }, h("h1", {}, kind.title), count, h("span", { class: "grow" }), stateSel, metaInput,
    kind.newLink ? h("a", { class: "button primary", href: kind.newLink, id: "new" }, "New session") : null), banner, notice, table);

  let items = [];
  let cursor = "";
  let done = false;
  let loading = false;
  const busy = new Map(); // id -> what is being done to it
  const base = new URLSearchParams(query);
  const nearEnd = () => viewport.scrollTop + viewport.clientHeight > items.length * ROW - 10 * ROW;

  const list = virtualList(viewport, ROW, (it) => {
    const act = (label, method, suffix, body, doing, confirmIt) => h("button", {
      type: "button", class: (confirmIt ? "danger " : "") + (busy.get(it.id) === doing ? "busy" : ""), disabled: busy.has(it.id),
      "data-action": label.toLowerCase(),
      onclick: () => doAction(it, label, method, suffix, body, doing, confirmIt),
    }, busy.get(it.id) === doing ? doing : label);
    return h("div", { class: "trow", "data-id": it.id }, kind.cells(it), h("span", { class: "actions" }, kind.actions(it, act)));
  }, () => {
    if (nearEnd()) more();
  });
  const empty = h("p", { class: "muted", id: "empty" }, "Nothing here yet.");
  const draw = () => {
    list.set(items);
    count.textContent = items.length + (done ? "" : "+") + (items.length === 1 ? " item" : " items");
    if (!items.length && done) viewport.append(empty);
    else empty.remove();
  };

  const fetchPage = async (after, limit) => {
    const q = new URLSearchParams(base);
    q.set("limit", String(limit));
    if (after) q.set("cursor", after);
    return api("GET", kind.path + "?" + q.toString());
  };

  // load runs one loading of the list (not two at once), shows its error or clears the last, and
  // draws; true if it loaded (false after an error, or if another loading was under way).
  const load = async (fn) => {
    if (loading) return false;
    loading = true;
    let ok = false;
    try {
      await fn();
      banner.textContent = "";
      ok = true;
    } catch (e) {
      banner.textContent = e.message;
    } finally {
      loading = false;
    }
    draw();
    return ok;
  };

  const more = async () => {
    if (done) return;
    const loaded = await load(async () => {
      const page = await fetchPage(cursor, PAGE);
      items = items.concat(page[kind.field] || []);
      cursor = page.next_cursor || "";
      done = !cursor;
    });
    if (loaded && !done && nearEnd()) more();
  };

  // refresh reloads what is loaded (live states): the same number of items, from the start.
  const refresh = () => load(async () => {
    let fresh = [];
    let c = "";
    const want = Math.max(items.length, 1);
    do {
      const page = await fetchPage(c, Math.min(1000, Math.max(PAGE, want - fresh.length)));
      fresh = fresh.concat(page[kind.field] || []);
      c = page.next_cursor || "";
    } while (c && fresh.length < want);
    items = fresh;
    cursor = c;
    done = !c;
  });

  async function doAction(it, label, method, suffix, body, doing, confirmIt) {
    if (confirmIt && !(await confirmDialog(label + " " + it.id + "? Everything in it is gone."))) return;
    busy.set(it.id, doing);
    draw();
    try {
      const res = await api(method, kind.path + "/" + encodeURIComponent(it.id) + suffix, body);
      notice.textContent = label === "Fork" && res && res.sessions ? "Forked into " + res.sessions.map((s) => s.id).join(", ") : "";
    } catch (e) {
      notice.textContent = "";
      banner.textContent = label + " " + it.id + ": " + e.message;
    } finally {
      busy.delete(it.id);
      await refresh();
    }
  }

  const timer = setInterval(refresh, 3000);
  onLeave(() => clearInterval(timer));
  const t0 = performance.now();
  await more();
  main.dataset.firstRender = String(Math.round(performance.now() - t0));
}

// ---- create a session ----

const DRAFT = "airlock.draft.session";

// fields maps the form's inputs to the API's names: an error whose message names a field (as the API's
// messages do) is shown next to it.
const sessionFields = [
  { id: "template", label: "Template", api: ["template"] },
  { id: "runtime", label: "Runtime", api: ["runtime"] },
  { id: "cpu", label: "CPU (millicores)", api: ["cpu"], type: "number" },
  { id: "memory_mb", label: "Memory (MiB)", api: ["memory_mb", "memory"], type: "number" },
  { id: "disk_mb", label: "Disk (MiB)", api: ["disk_mb", "disk"], type: "number" },
  { id: "idle_timeout_seconds", label: "Pause when idle for (s)", api: ["idle_timeout_seconds", "idle"], type: "number" },
  { id: "metadata", label: "Metadata", api: ["metadata"], hint: "one key=value a line" },
  { id: "egress", label: "Egress: hosts it may reach", api: ["network", "rule", "host", "egress"], hint: "one host a line (api.example.com, *.example.com); nothing else is reachable" },
];

async function createSessionPage() {
  const scope = pageScope();
  const draft = JSON.parse(sessionStorage.getItem(DRAFT) || "{}");
  const inputs = {};
  const errors = {};
  let templates = [];
  try {
    templates = ((await api("GET", "/v1/templates")).templates || []).map((t) => t.name);
  } catch {
    // Typed in by hand then.
  }
  const fieldEl = (f) => {
    let input;
    if (f.id === "template") {
      input = h("input", { id: f.id, name: f.id, list: "templates", placeholder: "default" });
    } else if (f.id === "runtime") {
      input = h("select", { id: f.id, name: f.id }, ["", "auto", "gvisor", "runc", "vm"].map((r) => h("option", { value: r }, r || "the default")));
    } else if (f.id === "metadata" || f.id === "egress") {
      input = h("textarea", { id: f.id, name: f.id });
    } else {
      input = h("input", { id: f.id, name: f.id, type: f.type || "text", inputmode: f.type === "number" ? "numeric" : undefined });
    }
    if (draft[f.id] !== undefined) input.value = draft[f.id];
    input.addEventListener("input", saveDraft);
    input.addEventListener("change", saveDraft);
    inputs[f.id] = input;
    errors[f.id] = h("div", { class: "field-error", id: f.id + "-error", role: "alert" });
    return h("div", {}, h("label", { for: f.id }, f.label, f.hint ? h("span", { class: "hint" }, " (" + f.hint + ")") : null), input, errors[f.id]);
  };
  function saveDraft() {
    const d = {};
    for (const [k, el] of Object.entries(inputs)) d[k] = el.value;
    sessionStorage.setItem(DRAFT, JSON.stringify(d));
  }
  const f = Object.fromEntries(sessionFields.map((x) => [x.id, fieldEl(x)]));
  const banner = h("div", { class: "banner", role: "alert", id: "form-error" });
  const submit = h("button", { class: "primary", type: "submit", id: "create" }, "Create");
  const form = h("form", { class: "form", novalidate: true },
    h("h1", {}, "New session"),
    h("datalist", { id: "templates" }, templates.map((t) => h("option", { value: t }))),
    f.template, f.runtime,
    h("div", { class: "row" }, f.cpu, f.memory_mb, f.disk_mb),
    f.idle_timeout_seconds, f.metadata, f.egress, banner,
    h("p", {}, submit, " ", h("a", { href: "#/sessions", class: "button" }, "Cancel")));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    for (const id of Object.keys(errors)) {
      errors[id].textContent = "";
      inputs[id].classList.remove("invalid");
    }
    banner.textContent = "";
    let body;
    try {
      body = sessionBody(inputs);
    } catch (e) {
      showFieldError(e.field, e.message);
      return;
    }
    submit.disabled = true;
    submit.textContent = "Creating (booting its sandbox)…";
    try {
      const s = await api("POST", "/v1/sessions", body);
      sessionStorage.removeItem(DRAFT);
      go("#/sessions");
      if (s.state === "failed") alert("The session failed: " + (s.reason || ""));
    } catch (e) {
      const field = sessionFields.find((x) => x.api.some((n) => new RegExp("\\b" + n + "\\b", "i").test(e.message)));
      if (field) showFieldError(field.id, e.message);
      else banner.textContent = e.message;
    } finally {
      submit.disabled = false;
      submit.textContent = "Create";
    }
  });
  function showFieldError(id, msg) {
    if (!errors[id]) {
      banner.textContent = msg;
      return;
    }
    errors[id].textContent = msg;
    inputs[id].classList.add("invalid");
    inputs[id].focus();
  }
  scope.render(form);
}

class FieldError extends Error {
  constructor(field, message) {
    super(message);
    this.field = field;
  }
}

// sessionBody is the create request the form's inputs say. Numbers are sent as typed: the API checks
// them and its message is shown.
function sessionBody(inputs) {
  const body = {};
  const v = (id) => inputs[id].value.trim();
  if (v("template")) body.template = v("template");
  if (v("runtime")) body.runtime = v("runtime");
  for (const id of ["cpu", "memory_mb", "disk_mb", "idle_timeout_seconds"]) {
    if (!v(id)) continue;
    const n = Number(v(id));
    if (!Number.isInteger(n)) throw new FieldError(id, "a whole number, please");
    body[id] = n;
  }
  const md = {};
  for (const line of v("metadata").split("\n").map((l) => l.trim()).filter(Boolean)) {
    const i = line.indexOf("=");
    if (i <= 0) throw new FieldError("metadata", `"${line}": want key=value`);
    md[line.slice(0, i).trim()] = line.slice(i + 1).trim();
  }
  if (Object.keys(md).length) body.metadata = md;
  const hosts = v("egress").split("\n").map((l) => l.trim()).filter(Boolean);
  if (hosts.length) body.network = { default: "deny", rules: hosts.map((host) => ({ action: "allow", host })) };
  return body;
}

// ---- usage ----

async function usagePage() {
  const scope = pageScope();
  const u = await api("GET", "/v1/usage");
  const q = u.quotas || {};
  const n = u.usage || {};
  const cards = Object.keys(Object.assign({}, q, n)).sort().map((k) => {
    const used = n[k] || 0;
    const max = q[k] || 0;
    const isBytes = /bytes/.test(k);
    const bar = h("div", { class: "bar" }, h("div", {}));
    bar.firstChild.style.width = max ? Math.min(100, (100 * used) / max) + "%" : "0";
    return h("div", { class: "card", "data-quota": k }, h("div", { class: "muted" }, k.replaceAll("_", " ")),
      h("div", { class: "big" }, isBytes ? bytes(used) : used), h("div", { class: "muted" }, max ? "of " + (isBytes ? bytes(max) : max) : "no quota"), bar);
  });
  scope.render(h("h1", {}, "Usage and quotas"), h("div", { class: "cards" }, cards));
}

// ---- start ----

document.getElementById("signout").addEventListener("click", () => {
  sessionStorage.removeItem(KEY);
  sessionStorage.removeItem(DRAFT);
  document.getElementById("who").textContent = "";
  document.getElementById("nav-operator").hidden = true;
  go("#/signin");
});
window.addEventListener("hashchange", route);
whoami();
route();
