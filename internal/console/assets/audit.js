// The tenant's audit log: every entry of the hash chain, read as the API exports it (JSON lines),
// and the chain verified here in the browser, entry by entry, as `airlock audit verify` does: each
// entry's sequence number follows the one before, it carries that entry's hash, and its own hash is
// the SHA-256 of its content. Needs an admin key.
import { fetchAPI, h, render, onLeave, virtualList } from "./lib.js";

const ROW = 32;

// goJSON encodes a string or number as Go's encoding/json does (what the server hashed): as
// JSON.stringify, with <, >, &, U+2028 and U+2029 escaped.
function goJSON(v) {
  if (typeof v === "number") return String(v);
  return JSON.stringify(v ?? "").replace(/[<>&\u2028\u2029]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
}

async function sha256hex(bytes) {
  const sum = await crypto.subtle.digest("SHA-256", bytes);
  return [...new Uint8Array(sum)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

// entryHash is the hash the entry must carry. A sealed entry (its payload sealed under the tenant's key)
// is hashed with its sealed payload in place of the payload.
async function entryHash(e) {
  const fields = e.sealed
    ? ["airlock-audit-v2", e.tenant, e.seq, e.time, e.kind, e.sealed, e.prev]
    : ["airlock-audit-v1", e.tenant, e.seq, e.time, e.kind, e.actor, e.action, e.target, e.result, e.detail, e.prev];
  return sha256hex(new TextEncoder().encode("[" + fields.map(goJSON).join(",") + "]"));
}

// committed reports whether a sealed entry shown opened (with its salt) shows the payload it sealed:
// the SHA-256 of the salt, then the payload as a JSON array, is its commitment.
async function committed(e) {
  if (!e.sealed || e.sealed === "-" || !e.salt) return true;
  const salt = new Uint8Array((e.salt.match(/../g) || []).map((x) => parseInt(x, 16)));
  const payload = new TextEncoder().encode("[" + [e.actor, e.action, e.target, e.result, e.detail].map(goJSON).join(",") + "]");
  const both = new Uint8Array(salt.length + payload.length);
  both.set(salt);
  both.set(payload, salt.length);
  return (await sha256hex(both)) === e.sealed.split(".")[0];
}

export async function auditPage(query) {
  const kind = query.get("kind") || "";
  const text = query.get("q") || "";
  const status = h("div", { class: "banner info", id: "audit-status", role: "status" }, "Reading the log…");
  const kindSel = h("select", { id: "kind-filter", "aria-label": "kind" }, ["", "api", "daemon", "egress"].map((k) => h("option", { value: k, selected: k === kind }, k || "every kind")));
  const textInput = h("input", { id: "audit-filter", placeholder: "contains…", value: text, "aria-label": "contains" });
  const apply = () => {
    const q = new URLSearchParams();
    if (kindSel.value) q.set("kind", kindSel.value);
    if (textInput.value.trim()) q.set("q", textInput.value.trim());
    location.hash = "#/audit" + (q.toString() ? "?" + q.toString() : "");
  };
  kindSel.addEventListener("change", apply);
  textInput.addEventListener("keydown", (e) => { if (e.key === "Enter") apply(); });
  const count = h("span", { class: "muted", id: "audit-count" });
  const viewport = h("div", { class: "viewport", id: "audit-rows" });
  viewport.style.height = "calc(100vh - 260px)";
  viewport.style.minHeight = "200px";
  const table = h("div", { class: "table" },
    h("div", { class: "thead" }, ["Seq", "Time", "Kind", "Actor", "Action", "Target", "Result"].map((t) => h("span", {}, t))), viewport);
  table.style.setProperty("--cols", "5rem 12rem 4.5rem minmax(0,1fr) minmax(0,1.3fr) minmax(0,1.3fr) 6rem");
  render(h("div", { class: "toolbar" }, h("h1", {}, "Audit log"), count, h("span", { class: "grow" }), kindSel, textInput), status, table);

  const list = virtualList(viewport, ROW, (e) => h("div", { class: "trow audit", "data-seq": String(e.seq), title: e.detail || "" },
    h("span", { class: "mono" }, e.seq),
    h("span", { class: "mono", title: e.time }, new Date(e.time).toLocaleString()),
    h("span", {}, e.kind),
    h("span", { class: "mono", title: e.actor }, e.actor || ""),
    h("span", { title: e.action }, e.action || (e.sealed ? "(sealed: the tenant's key is needed)" : "")),
    h("span", { class: "mono", title: e.target }, e.target || ""),
    h("span", { class: e.result && /^(2|ok|allow)/.test(e.result) ? "" : "muted" }, e.result || "")));

  let cancelled = false;
  onLeave(() => { cancelled = true; });
  const entries = [];
  const needle = text.toLowerCase();
  const shown = () => entries.filter((e) => (!kind || e.kind === kind) &&
    (!needle || [e.actor, e.action, e.target, e.result, e.detail].some((v) => (v || "").toLowerCase().includes(needle)))).reverse();

  const res = await fetchAPI("GET", "/v1/audit");
  const canVerify = !!(globalThis.crypto && crypto.subtle);
  let prev = "";
  let seq = 0;
  let broken = null;
  let cutStart = null; // the first entry, when it is not the log's first
  let cutExplained = false; // a record of a retention cut names the entry it follows
  let last = Date.now();
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (cancelled) {
      reader.cancel();
      return;
    }
    buf += value || "";
    const lines = buf.split("\n");
    buf = done ? "" : lines.pop();
    for (const line of lines) {
      if (!line.trim()) continue;
      let e;
      try {
        e = JSON.parse(line);
      } catch {
        broken = broken || { seq: "?", why: "a line is not an audit entry" };
        continue;
      }
      entries.push(e);
      if (broken || !canVerify) continue;
      if (entries.length === 1 && (e.seq !== 1 || e.prev)) {
        // A retention cut deleted the entries before: a later record of the cut must say so (checked at the end).
        cutStart = e;
        seq = e.seq - 1;
        prev = e.prev || "";
      }
      if (cutStart && !cutExplained && e.kind === "audit" && e.action === "prune" && !e.sealed) {
        try {
          const d = JSON.parse(e.detail || "{}");
          cutExplained = d.through_seq === cutStart.seq - 1 && d.through_hash === (cutStart.prev || "");
        } catch {
          // not a record of a cut
        }
      }
      if (e.seq !== seq + 1) broken = { seq: e.seq, why: `sequence number ${e.seq} follows ${seq}` };
      else if ((e.prev || "") !== prev) broken = { seq: e.seq, why: "it does not carry the previous entry's hash" };
      else if ((await entryHash(e)) !== e.hash) broken = { seq: e.seq, why: "its hash does not match its content" };
      else if (!(await committed(e))) broken = { seq: e.seq, why: "its hash does not match its content (the payload shown is not the one sealed)" };
      prev = e.hash;
      seq = e.seq;
    }
    if (Date.now() - last > 250 || done) {
      last = Date.now();
      count.textContent = entries.length + " entries";
      status.textContent = "Read and verified " + entries.length + " entries…";
      list.set(shown());
    }
    if (done) break;
  }
  if (cutStart && !cutExplained && !broken && canVerify) {
    broken = { seq: cutStart.seq, why: "the log starts after its first entry and no record of a retention cut explains the entries before it" };
  }
  list.set(shown());
  count.textContent = entries.length + " entries" + (kind || text ? ", " + list.length + " shown" : "");
  if (broken) {
    status.className = "banner";
    status.dataset.verified = "broken";
    status.textContent = `The chain does not hold at entry ${broken.seq}: ${broken.why}. Entries were changed, removed or reordered.`;
  } else if (!canVerify) {
    status.dataset.verified = "unknown";
    status.textContent = "This browser cannot verify the chain here (SHA-256 needs HTTPS or localhost): run `airlock audit verify` on an export.";
  } else if (!entries.length) {
    status.dataset.verified = "empty";
    status.textContent = "The log is empty.";
  } else {
    status.dataset.verified = "intact";
    status.textContent = `Chain intact up to entry ${seq}, the newest the server sent: ${entries.length} entries verified in this browser; last hash ${prev.slice(0, 16)}… (compare it with one you kept to see that no newer entry was cut off).`;
  }
}
