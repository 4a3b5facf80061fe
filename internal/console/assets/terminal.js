// The terminal page (#/terminal/sessions/ID, #/terminal/sandboxes/ID): a login shell (bash -l, as
// `airlock shell` runs) on a terminal in a running session or sandbox, drawn by xterm.js (vendor/),
// over the API's exec stream (a WebSocket; see airlock.StreamMessage for its messages).
//
// A browser cannot set Authorization on a WebSocket, and the API key never goes in a URL: the socket
// offers the subprotocols airlock.v1 and airlock.bearer.<the key in base64url>, and the API selects
// the first. When the socket drops while the shell runs, the page attaches to the same process again
// (its attach stream) with backoff, resuming its output at the byte it had reached. The process's ID
// is kept in this tab's session storage, so a reload, or coming back to the page, attaches to it too;
// leaving the page leaves the shell running.

import { KEY, APIError, api, h, render, onLeave } from "./lib.js";
import { install as installStyleShim } from "./xterm-csp.js";

const KINDS = { sessions: "session", sandboxes: "sandbox" };
const SHELL = ["bash", "-l"];
const MAX_BACKOFF = 10_000; // ms between two attempts to attach again, at most

// ---- loading xterm.js ----

let vendor = null;

function loadScript(src) {
  return new Promise((resolve, reject) => {
    const s = document.createElement("script");
    s.src = src;
    s.onload = resolve;
    s.onerror = () => reject(new Error("could not load " + src));
    document.head.append(s);
  });
}

function loadStylesheet(href) {
  return new Promise((resolve, reject) => {
    const l = document.createElement("link");
    l.rel = "stylesheet";
    l.href = href;
    l.onload = resolve;
    l.onerror = () => reject(new Error("could not load " + href));
    document.head.append(l);
  });
}

// loadXterm loads xterm.js, its fit addon (UMD scripts that define globals) and its stylesheet, once.
function loadXterm() {
  if (!vendor) {
    vendor = Promise.all([
      loadScript("/console/vendor/xterm.js").then(() => loadScript("/console/vendor/addon-fit.js")),
      loadStylesheet("/console/vendor/xterm.css"),
    ]).then(() => ({ Terminal: globalThis.Terminal, FitAddon: globalThis.FitAddon.FitAddon }));
    vendor.catch(() => { vendor = null; });
  }
  return vendor;
}

// ---- the page ----

function base64url(s) {
  let bin = "";
  for (const b of new TextEncoder().encode(s)) bin += String.fromCharCode(b);
  return btoa(bin).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

export async function terminalPage(kind, id) {
  if (!KINDS[kind] || !id) {
    render(h("div", { class: "banner" }, "No such terminal: want #/terminal/sessions/ID or #/terminal/sandboxes/ID."));
    return;
  }
  const what = KINDS[kind];
  const base = `/v1/${kind}/${encodeURIComponent(id)}`;
  const pidKey = `airlock.terminal.${kind}.${id}`;

  const status = h("span", { class: "term-status", id: "term-status", role: "status", "data-state": "connecting" }, "connecting…");
  const reconnectBtn = h("button", { type: "button", id: "reconnect", hidden: true }, "Reconnect");
  const newShellBtn = h("button", { type: "button", id: "new-shell", hidden: true }, "New shell");
  // A shell starts on a click only: a page that sends this tab here does not start one by itself.
  const startBtn = h("button", { type: "button", id: "start-shell", class: "primary", hidden: true }, "Start a shell");
  const banner = h("div", { class: "banner", role: "alert", id: "term-error" });
  const screen = h("div", { class: "screen" });
  const frame = h("div", { class: "term-frame", id: "terminal" }, screen);
  const main = document.getElementById("main");
  main.classList.add("wide");
  render(
    h("div", { class: "toolbar" },
      h("h1", {}, "Terminal"),
      h("a", { href: "#/" + kind, class: "mono", title: what + " " + id }, id),
      status, h("span", { class: "grow" }), startBtn, reconnectBtn, newShellBtn),
    banner, frame);

  let disposed = false;
  onLeave(() => {
    disposed = true;
    main.classList.remove("wide");
  });

  // The session or sandbox first, over HTTP: a refusal of the WebSocket's upgrade (another tenant's
  // key, an unknown ID) cannot be read by the page, the API's answer here can.
  try {
    const it = await api("GET", base);
    const state = it.state || "running";
    if (state !== "running" && !(kind === "sessions" && state === "paused")) {
      throw new Error(`The ${what} is ${state}: a terminal needs it running.`);
    }
  } catch (e) {
    if (!disposed) fail(e.message);
    return;
  }

  let xterm;
  try {
    xterm = await loadXterm();
  } catch (e) {
    if (!disposed) fail(e.message);
    return;
  }
  if (disposed) return;

  const removeShim = installStyleShim();
  // Removed when the page is left, even if the terminal's set-up below throws.
  let shimOn = true;
  const uninstallShim = () => {
    if (shimOn) removeShim();
    shimOn = false;
  };
  onLeave(uninstallShim);
  const term = new xterm.Terminal({
    cursorBlink: true,
    fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace",
    fontSize: 14,
    scrollback: 5000,
    theme: { background: "#1b1f24", foreground: "#e6edf3", cursor: "#e6edf3" },
    // Links the shell prints (OSC 8) open only as http(s), in a window with no access to this one.
    linkHandler: {
      allowNonHttpProtocols: false,
      activate: (_event, uri) => {
        if (/^https?:\/\//i.test(uri)) window.open(uri, "_blank", "noopener,noreferrer");
      },
    },
  });
  const fit = new xterm.FitAddon();
  term.loadAddon(fit);
  term.open(screen);
  fit.fit();
  term.focus();

  let ws = null; // the current socket
  let pid = sessionStorage.getItem(pidKey) || ""; // the shell's process, once started
  let offset = 0; // the stdout bytes received (or reported dropped): where an attach resumes
  let exited = false;
  let attempt = 0; // failed attempts to attach since the last success
  let timer = 0;
  let lastError = "";

  const encoder = new TextEncoder();

  function setStatus(state, text) {
    status.dataset.state = state;
    status.textContent = text;
    reconnectBtn.hidden = state !== "reconnecting" && state !== "disconnected";
    newShellBtn.hidden = state !== "exited" && state !== "failed";
  }

  // fail shows why there is no terminal; nothing tries again but the user's buttons.
  function fail(message) {
    banner.textContent = message;
    status.dataset.state = "failed";
    status.textContent = "not connected";
    newShellBtn.hidden = true;
  }

  function send(data) {
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(data);
  }

  function sendStdin(bytes) {
    const msg = new Uint8Array(bytes.length + 1);
    msg[0] = 0; // the stdin stream
    msg.set(bytes, 1);
    send(msg);
  }

  function sendResize() {
    send(JSON.stringify({ type: "resize", rows: term.rows, cols: term.cols }));
  }

  function open(path) {
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const sock = new WebSocket(proto + "//" + location.host + path, ["airlock.v1", "airlock.bearer." + base64url(sessionStorage.getItem(KEY) || "")]);
    sock.binaryType = "arraybuffer";
    ws = sock;
    lastError = "";
    sock.onmessage = (ev) => {
      if (sock !== ws) return;
      if (typeof ev.data !== "string") {
        const b = new Uint8Array(ev.data);
        if (b.length < 2 || (b[0] !== 1 && b[0] !== 2)) return;
        if (b[0] === 1) offset += b.length - 1;
        term.write(b.subarray(1));
        return;
      }
      let m;
      try { m = JSON.parse(ev.data); } catch { return; }
      switch (m.type) {
        case "started":
          pid = m.process_id;
          sessionStorage.setItem(pidKey, pid);
          break;
        case "dropped":
          if (m.stream === "stdout") offset += m.bytes;
          term.write(`\r\n\x1b[2m[${m.bytes} bytes of output were no longer kept]\x1b[0m\r\n`);
          break;
        case "exit":
          exited = true;
          sessionStorage.removeItem(pidKey);
          term.write(`\r\n\x1b[2m[the shell exited${m.signal ? " on signal " + m.signal : " with code " + m.exit_code}]\x1b[0m\r\n`);
          setStatus("exited", m.signal ? `exited (signal ${m.signal})` : `exited (code ${m.exit_code})`);
          break;
        case "error":
          lastError = (m.error && m.error.message) || "the stream failed";
          banner.textContent = lastError;
          break;
      }
    };
    sock.onclose = () => {
      if (sock !== ws || disposed || exited) return;
      ws = null;
      if (!pid) {
        startFailed();
        return;
      }
      scheduleReattach();
    };
    return sock;
  }

  // start runs a new shell.
  function start() {
    clearTimeout(timer);
    pid = "";
    offset = 0;
    exited = false;
    attempt = 0;
    banner.textContent = "";
    sessionStorage.removeItem(pidKey);
    setStatus("connecting", "starting a shell…");
    const sock = open(base + "/exec/stream");
    sock.onopen = () => {
      sock.send(JSON.stringify({ cmd: SHELL, env: { TERM: "xterm-256color" }, pty: { rows: term.rows, cols: term.cols } }));
      setStatus("connected", "connected");
    };
  }

  // startFailed says why the shell did not start: the stream's error, or else the API's answer to a
  // plain request to the same routes (the page cannot read why an upgrade was refused).
  async function startFailed() {
    let why = lastError;
    if (!why) {
      try {
        await api("GET", base + "/processes");
        why = "the connection was refused or lost.";
      } catch (e) {
        why = e.message;
      }
    }
    if (disposed) return;
    fail("The shell did not start: " + why);
    newShellBtn.hidden = false;
  }

  // attach connects to the shell pid again, resuming its output at offset.
  function attach() {
    clearTimeout(timer);
    setStatus("reconnecting", attempt ? `reconnecting… (attempt ${attempt + 1})` : "reconnecting…");
    const sock = open(`${base}/processes/${encodeURIComponent(pid)}/attach?stdout_offset=${offset}`);
    sock.onopen = () => {
      attempt = 0;
      banner.textContent = "";
      setStatus("connected", "connected");
      sendResize(); // the page may have changed size meanwhile
    };
  }

  // scheduleReattach tries again after a delay that doubles with each failure. It first asks the API
  // whether the process is still there, so that a shell that is gone (or a session deleted) stops the
  // attempts with the API's reason.
  async function scheduleReattach() {
    const delay = Math.min(MAX_BACKOFF, 500 * 2 ** attempt);
    attempt++;
    setStatus("reconnecting", `reconnecting in ${Math.round(delay / 1000)} s…`);
    clearTimeout(timer);
    timer = setTimeout(reattachIfThere, delay);
  }

  async function reattachIfThere() {
    if (disposed || ws) return;
    try {
      const procs = (await api("GET", base + "/processes")).processes || [];
      if (disposed || ws) return;
      if (!procs.some((p) => p.id === pid)) {
        sessionStorage.removeItem(pidKey);
        fail(`The shell's process ${pid} is no longer in the ${what}.`);
        newShellBtn.hidden = false;
        return;
      }
    } catch (e) {
      if (disposed || ws) return;
      if (e instanceof APIError && e.status >= 400 && e.status < 500 && e.status !== 408 && e.status !== 429) {
        fail(e.message);
        return;
      }
      banner.textContent = e.message;
      scheduleReattach();
      return;
    }
    attach();
  }

  reconnectBtn.addEventListener("click", () => {
    if (ws) ws.close();
    ws = null;
    attempt = 0;
    reattachIfThere();
  });
  newShellBtn.addEventListener("click", () => {
    if (ws) ws.close();
    ws = null;
    term.write("\r\n");
    start();
  });

  term.onData((d) => sendStdin(encoder.encode(d)));
  term.onBinary((d) => sendStdin(Uint8Array.from(d, (c) => c.charCodeAt(0) & 0xff)));
  term.onResize(sendResize);
  let raf = 0;
  const refit = () => {
    cancelAnimationFrame(raf);
    raf = requestAnimationFrame(() => fit.fit());
  };
  const observer = new ResizeObserver(refit);
  observer.observe(screen);
  window.addEventListener("resize", refit);
  const online = () => { if (!ws && pid && !exited) { attempt = 0; reattachIfThere(); } };
  window.addEventListener("online", online);

  // A hook for the browser tests: the socket (to break it) and the terminal's text.
  window.__airlockTerminal = {
    get socket() { return ws; },
    get pid() { return pid; },
    get size() { return { rows: term.rows, cols: term.cols }; },
    text() {
      const b = term.buffer.active;
      const lines = [];
      for (let i = 0; i < b.length; i++) lines.push(b.getLine(i).translateToString(true));
      return lines.join("\n");
    },
  };

  onLeave(() => {
    disposed = true;
    clearTimeout(timer);
    cancelAnimationFrame(raf);
    observer.disconnect();
    window.removeEventListener("resize", refit);
    window.removeEventListener("online", online);
    if (ws) ws.close(1000); // the shell keeps running: coming back attaches to it
    ws = null;
    delete window.__airlockTerminal;
    term.dispose();
    uninstallShim();
  });

  if (pid) {
    // A shell this tab started before (a reload, or back on the page): attach to it if it still runs,
    // replaying the output still kept to redraw its screen.
    try {
      const procs = (await api("GET", base + "/processes")).processes || [];
      if (!procs.some((p) => p.id === pid && p.running)) pid = "";
    } catch {
      pid = "";
    }
    if (disposed) return;
  }
  if (pid) attach();
  else {
    setStatus("idle", "no shell running");
    startBtn.hidden = false;
  }
  startBtn.addEventListener("click", () => {
    startBtn.hidden = true;
    start();
  });
}
