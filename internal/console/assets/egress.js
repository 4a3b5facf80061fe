// A sandbox's egress: its flow log as a live table (decision, rule, bytes) with a chart of its
// traffic over time, and its policy's editor.
import { api, h, pageScope, ago, bytes } from "./lib.js";

const SVG = "http://www.w3.org/2000/svg";
const WINDOWS = { "15m": 15 * 60e3, "1h": 3600e3, "24h": 86400e3 };
const BUCKETS = 60;

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  el.append(...children);
  return el;
}

// egressPage shows sandbox id's flows and policy. A session's page links here with its current
// sandbox.
export async function egressPage(id, query) {
  const scope = pageScope();
  const base = "/v1/sandboxes/" + encodeURIComponent(id);
  const decision = query.get("decision") || "";
  const hostContains = query.get("host") || "";
  const win = WINDOWS[query.get("window")] ? query.get("window") : "1h";

  const banner = h("div", { class: "banner", role: "alert", id: "egress-error" });
  const decisionSel = h("select", { id: "decision-filter", "aria-label": "decision" },
    ["", "allow", "deny"].map((d) => h("option", { value: d, selected: d === decision }, d || "any decision")));
  const hostInput = h("input", { id: "host-filter", placeholder: "host contains…", value: hostContains, "aria-label": "host" });
  const winSel = h("select", { id: "window", "aria-label": "window" }, Object.keys(WINDOWS).map((w) => h("option", { value: w, selected: w === win }, "last " + w)));
  const apply = () => {
    const q = new URLSearchParams();
    if (decisionSel.value) q.set("decision", decisionSel.value);
    if (hostInput.value.trim()) q.set("host", hostInput.value.trim());
    q.set("window", winSel.value);
    location.hash = "#/egress/" + encodeURIComponent(id) + "?" + q.toString();
  };
  decisionSel.addEventListener("change", apply);
  winSel.addEventListener("change", apply);
  hostInput.addEventListener("keydown", (e) => { if (e.key === "Enter") apply(); });

  const chart = h("div", { class: "chart", id: "traffic" });
  const rows = h("tbody", { id: "flows" });
  const table = h("table", { class: "flows" },
    h("thead", {}, h("tr", {}, ["Ended", "Decision", "Rule", "Protocol", "Destination", "Sent", "Received", "Took"].map((t) => h("th", {}, t)))),
    rows);
  const summary = h("span", { class: "muted", id: "flow-count" });
  const policy = h("div", { id: "policy" });

  scope.render(
    h("div", { class: "toolbar" }, h("h1", {}, "Egress of ", h("span", { class: "mono" }, id)), summary, h("span", { class: "grow" }), decisionSel, hostInput, winSel),
    banner, chart, h("div", { class: "table-scroll" }, table),
    h("h2", {}, "Policy"), policy);

  async function load() {
    const q = new URLSearchParams({ limit: "1000", since: new Date(Date.now() - WINDOWS[win]).toISOString() });
    if (decision) q.set("decision", decision);
    if (hostContains) q.set("host_contains", hostContains);
    try {
      const res = await api("GET", base + "/egress?" + q.toString());
      banner.textContent = "";
      draw(res.flows || []);
    } catch (e) {
      banner.textContent = e.message;
    }
  }

  function draw(flows) {
    const denied = flows.filter((f) => f.decision === "deny").length;
    summary.textContent = flows.length + " flows, " + denied + " denied" + (flows.length === 1000 ? " (the newest 1,000)" : "");
    rows.replaceChildren(...flows.slice(0, 300).map((f) => h("tr", { class: "flow " + f.decision, "data-decision": f.decision, "data-host": f.host || f.dst_ip },
      h("td", { title: f.end }, ago(f.end)),
      h("td", {}, h("span", { class: "state " + (f.decision === "allow" ? "running" : "failed") }, f.decision)),
      h("td", { class: "mono" }, f.rule || ""),
      h("td", {}, f.protocol),
      h("td", { class: "mono", title: f.dst_ip + ":" + f.dst_port }, (f.host || f.dst_ip) + ":" + f.dst_port),
      h("td", {}, bytes(f.bytes_sent)),
      h("td", {}, bytes(f.bytes_received)),
      h("td", {}, f.duration_ms + " ms"))));
    if (!flows.length) rows.replaceChildren(h("tr", {}, h("td", { colspan: "8", class: "muted", id: "no-flows" }, "No connection in this window.")));
    drawChart(flows);
  }

  // drawChart: the window in BUCKETS bars of bytes (sent and received, by when flows ended), with the
  // denied flows of each bucket as red marks.
  function drawChart(flows) {
    const end = Date.now();
    const span = WINDOWS[win];
    const start = end - span;
    const by = Array.from({ length: BUCKETS }, () => ({ bytes: 0, denied: 0, flows: 0 }));
    for (const f of flows) {
      const t = Date.parse(f.end);
      if (t < start) continue;
      const b = by[Math.min(BUCKETS - 1, Math.floor(((t - start) / span) * BUCKETS))];
      b.bytes += (f.bytes_sent || 0) + (f.bytes_received || 0);
      b.flows++;
      if (f.decision === "deny") b.denied++;
    }
    const W = 900;
    const H = 120;
    const bw = W / BUCKETS;
    const max = Math.max(1, ...by.map((b) => b.bytes));
    const maxDenied = Math.max(1, ...by.map((b) => b.denied));
    const bars = by.flatMap((b, i) => {
      const out = [];
      const hgt = b.bytes ? Math.max(2, (b.bytes / max) * (H - 20)) : 0;
      if (hgt) out.push(svg("rect", { x: i * bw + 1, y: H - hgt, width: bw - 2, height: hgt, class: "bytes" }, svg("title", {}, bytes(b.bytes) + ", " + b.flows + " flows")));
      if (b.denied) {
        const dh = Math.max(3, (b.denied / maxDenied) * 16);
        out.push(svg("rect", { x: i * bw + 1, y: 0, width: bw - 2, height: dh, class: "denied", "data-denied": b.denied }, svg("title", {}, b.denied + " denied")));
      }
      return out;
    });
    chart.replaceChildren(
      h("div", { class: "muted" }, "Traffic, last " + win + " (red: denied connections)"),
      svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": "traffic over time" },
        svg("line", { x1: 0, y1: H - 0.5, x2: W, y2: H - 0.5, class: "axis" }), ...bars));
  }

  // ---- the policy editor ----

  let current = null; // the policy as loaded: fields the editor does not show are kept as they are

  async function loadPolicy() {
    try {
      current = await api("GET", base + "/network");
      drawPolicy();
    } catch (e) {
      policy.replaceChildren(h("div", { class: "banner" }, e.message));
    }
  }

  function drawPolicy() {
    const rulesBody = h("tbody", { id: "rules" });
    const addRow = (r) => {
      const action = h("select", { class: "rule-action", "aria-label": "action" }, ["allow", "deny"].map((a) => h("option", { value: a, selected: a === r.action }, a)));
      const host = h("input", { class: "rule-host", value: r.host || "", placeholder: "api.example.com, *.example.com", "aria-label": "host" });
      const ports = h("input", { class: "rule-ports", value: (r.ports || []).join(","), placeholder: "443, 8000-8100", "aria-label": "ports" });
      const cidrs = h("input", { class: "rule-cidrs", value: (r.cidrs || []).join(","), placeholder: "203.0.113.0/24", "aria-label": "cidrs" });
      const tr = h("tr", { class: "rule" }, h("td", {}, action), h("td", {}, host), h("td", {}, ports), h("td", {}, cidrs),
        h("td", {}, h("button", { type: "button", class: "danger", onclick: () => tr.remove() }, "Remove")));
      tr.rule = r;
      rulesBody.append(tr);
    };
    for (const r of current.rules || []) addRow(r);
    const def = h("select", { id: "policy-default", "aria-label": "default" }, ["deny", "allow"].map((d) => h("option", { value: d, selected: (current.default || "deny") === d }, d)));
    const err = h("div", { class: "field-error", id: "policy-error", role: "alert" });
    const ok = h("span", { class: "muted", id: "policy-saved" });
    const save = h("button", { type: "button", class: "primary", id: "save-policy" }, "Save policy");
    save.addEventListener("click", async () => {
      err.textContent = "";
      ok.textContent = "";
      const rules = [...rulesBody.querySelectorAll("tr.rule")].map((tr) => {
        const r = Object.assign({}, tr.rule, { action: tr.querySelector(".rule-action").value });
        const host = tr.querySelector(".rule-host").value.trim();
        const ports = tr.querySelector(".rule-ports").value.split(",").map((p) => p.trim()).filter(Boolean).map((p) => (/^\d+$/.test(p) ? Number(p) : p));
        const cidrs = tr.querySelector(".rule-cidrs").value.split(",").map((c) => c.trim()).filter(Boolean);
        if (host) r.host = host; else delete r.host;
        if (ports.length) r.ports = ports; else delete r.ports;
        if (cidrs.length) r.cidrs = cidrs; else delete r.cidrs;
        return r;
      });
      const next = Object.assign({}, current, { default: def.value, rules });
      save.disabled = true;
      try {
        current = await api("PUT", base + "/network", next);
        ok.textContent = "Saved: new connections follow it now.";
        const note = ok.textContent;
        drawPolicy();
        document.getElementById("policy-saved").textContent = note;
      } catch (e) {
        err.textContent = e.message;
      } finally {
        save.disabled = false;
      }
    });
    policy.replaceChildren(
      h("div", { class: "toolbar" }, h("label", { for: "policy-default" }, "When no rule matches"), def),
      h("table", { class: "flows rules" }, h("thead", {}, h("tr", {}, ["Action", "Host", "Ports", "CIDRs", ""].map((t) => h("th", {}, t)))), rulesBody),
      h("p", {}, h("button", { type: "button", id: "add-rule", onclick: () => addRow({ action: "allow" }) }, "Add a rule")),
      err, h("p", {}, save, " ", ok),
      h("p", { class: "muted" }, "Loopback, private and metadata addresses stay unreachable whatever the rules say, unless the operator opened a range."));
  }

  await Promise.all([load(), loadPolicy()]);
  const timer = setInterval(() => {
    if (!document.hidden) load();
  }, 2000);
  scope.onLeave(() => clearInterval(timer));
}
