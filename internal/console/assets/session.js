// A session's page: its state and actions, and its time machine — the snapshot tree as a timeline
// with branches (one lane each), a slider that scrubs through time, restore-to and fork-from, pins and
// names, and the diff of any two snapshots (the files changed, and one file's unified diff), read
// from the snapshots without restoring them.
import { api, h, pageScope, ago, bytes, go, confirmDialog, virtualList, elapsed, busy } from "./lib.js";

const ROW = 34; // px, as .snap's height
const LANE = 14; // px between lanes
const MAX_LANES = 12; // lanes drawn; deeper branches share the last

export async function sessionPage(id) {
  const scope = pageScope();
  const base = "/v1/sessions/" + encodeURIComponent(id);
  let session = await api("GET", base);
  let timeline = { snapshots: [] };
  let order = []; // snapshots oldest first, with lane and depth
  let selected = -1; // index in order
  let diffFrom = "";
  let diffTo = "";

  const banner = h("div", { class: "banner", role: "alert", id: "session-error" });
  const notice = h("div", { class: "banner info", role: "status", id: "notice" });
  const head = h("div", { class: "toolbar" });
  const info = h("div", { class: "muted", id: "session-info" });

  // The slider and the selected snapshot's card.
  const slider = h("input", { type: "range", id: "scrub", min: "0", max: "0", value: "0", "aria-label": "scrub through the snapshots" });
  const when = h("span", { id: "scrub-time", class: "mono" });
  const card = h("div", { class: "card", id: "snapshot-card" });
  slider.addEventListener("input", () => select(Number(slider.value), true));

  // Taking a snapshot.
  const snapName = h("input", { id: "snapshot-name", placeholder: "name (optional)", "aria-label": "snapshot name" });
  const snapErr = h("div", { class: "field-error", id: "snapshot-name-error" });
  const snapBtn = h("button", { type: "button", id: "take-snapshot" }, "Take snapshot");
  snapBtn.addEventListener("click", async () => {
    snapErr.textContent = "";
    snapName.classList.remove("invalid");
    snapBtn.disabled = true;
    const stop = elapsed(snapBtn, "Snapshotting");
    try {
      const body = snapName.value.trim() ? { name: snapName.value.trim() } : undefined;
      const sn = await api("POST", base + "/snapshots", body);
      snapName.value = "";
      notice.textContent = "Snapshot " + sn.id + " taken (" + bytes(sn.logical_bytes) + ").";
      await reload();
      select(order.findIndex((s) => s.id === sn.id), true);
    } catch (e) {
      snapErr.textContent = e.message;
      snapName.classList.add("invalid");
    } finally {
      stop();
      snapBtn.disabled = false;
      snapBtn.textContent = "Take snapshot";
    }
  });

  // The tree.
  const viewport = h("div", { class: "viewport", id: "timeline" });
  viewport.style.height = "calc(100vh - 430px)";
  viewport.style.minHeight = "200px";
  const list = virtualList(viewport, ROW, (s, i) => snapRow(s, i), null, scope);

  // The diff.
  const diffHead = h("div", { id: "diff-head", class: "muted" });
  const diffFiles = h("div", { id: "diff-files" });
  const diffText = h("pre", { id: "diff-text", class: "diff" });
  const diffBtn = h("button", { type: "button", id: "compare" }, "Compare");
  diffBtn.addEventListener("click", () => compare());

  scope.render(
    head, info, banner, notice,
    h("h2", {}, "Timeline ", h("span", { class: "muted", id: "snapshot-count" })),
    h("div", { class: "toolbar" }, h("span", { class: "muted" }, "oldest"), slider, h("span", { class: "muted" }, "newest"), when),
    h("div", { class: "split" },
      h("div", { class: "table grow" }, viewport),
      h("div", { class: "side" }, card,
        h("div", { class: "card" }, h("div", { class: "big" }, "Snapshot now"), h("div", { class: "toolbar" }, snapName, snapBtn), snapErr))),
    h("h2", {}, "Diff"),
    h("div", { class: "toolbar" }, diffHead, diffBtn),
    diffFiles, diffText);

  function drawHead() {
    const s = session;
    const act = (label, method, suffix, doing, confirmText) => {
      const b = h("button", { type: "button", "data-action": label.toLowerCase(), class: confirmText ? "danger" : "" }, label);
      b.addEventListener("click", async () => {
        if (confirmText && !(await confirmDialog(confirmText))) return;
        b.disabled = true;
        const stop = elapsed(b, doing);
        try {
          await api(method, base + suffix);
          if (method === "DELETE") return go("#/sessions");
          await reload();
        } catch (e) {
          banner.textContent = label + ": " + e.message;
        } finally {
          stop();
          b.disabled = false;
          b.textContent = label;
        }
      });
      return b;
    };
    head.replaceChildren(...[
      h("h1", {}, h("a", { href: "#/sessions" }, "Sessions"), " / ", h("span", { class: "mono" }, s.id)),
      h("span", { class: "state " + s.state, id: "session-state", title: s.reason || "" }, s.state),
      h("span", { class: "grow" }),
      s.state === "running" ? h("a", { class: "button", href: "#/terminal/sessions/" + encodeURIComponent(s.id), id: "open-terminal" }, "Terminal") : null,
      s.state === "running" ? h("a", { class: "button", href: "#/files/sessions/" + encodeURIComponent(s.id), id: "open-files" }, "Files") : null,
      s.sandbox_id ? h("a", { class: "button", href: "#/egress/" + encodeURIComponent(s.sandbox_id), id: "open-egress" }, "Egress") : null,
      s.state === "running" ? act("Pause", "POST", "/pause", "Pausing") : null,
      s.state === "paused" ? act("Resume", "POST", "/resume", "Resuming") : null,
      act("Delete", "DELETE", "", "Deleting", "Delete " + s.id + "? Its snapshots go too."),
    ].filter(Boolean));
    info.textContent = [
      s.template, s.runtime, s.cpu / 1000 + " CPU", s.memory_mb + " MiB", s.disk_mb + " MiB disk",
      "created " + ago(s.created_at), s.head_snapshot_id ? "head " + s.head_snapshot_id : "",
    ].filter(Boolean).join(" · ");
  }

  // layout orders the snapshots oldest first and gives each a lane: a snapshot continues its
  // parent's lane if it is the parent's first child, and opens a lane otherwise (a branch: a restore
  // to an older snapshot, or a fork's source).
  function layout(snaps) {
    const byTime = [...snaps].sort((a, b) => Date.parse(a.created_at) - Date.parse(b.created_at) || (a.id < b.id ? -1 : 1));
    const ids = new Set(byTime.map((s) => s.id));
    const laneOf = new Map();
    const taken = new Set(); // parents whose lane a child continued
    let lanes = 0;
    return byTime.map((s) => {
      let lane;
      if (s.parent_id && ids.has(s.parent_id) && !taken.has(s.parent_id)) {
        lane = laneOf.get(s.parent_id);
        taken.add(s.parent_id);
      } else {
        lane = lanes++;
      }
      laneOf.set(s.id, lane);
      return Object.assign({}, s, { lane });
    });
  }

  function snapRow(s, i) {
    const isHead = s.id === timeline.head_snapshot_id;
    const gutter = h("span", { class: "lanes" });
    const dot = h("span", { class: "dot" + (isHead ? " head" : "") });
    dot.style.left = Math.min(s.lane, MAX_LANES) * LANE + "px";
    gutter.append(dot);
    gutter.style.width = (Math.min(lanesUsed(), MAX_LANES) + 1) * LANE + "px";
    const row = h("div", { class: "snap" + (i === selected ? " selected" : ""), "data-id": s.id, "data-index": String(i) },
      gutter,
      h("span", { class: "mono", title: s.created_at }, new Date(s.created_at).toLocaleString()),
      h("span", {}, s.name ? h("b", {}, s.name) : null, " ", h("span", { class: "muted" }, s.trigger)),
      h("span", { class: "state " + (s.state === "complete" ? "running" : s.state) }, s.state),
      h("span", { title: "logical size" }, bytes(s.logical_bytes)),
      h("span", { class: "muted", title: "what it added to the store" }, "+" + bytes(s.stored_bytes)),
      h("span", {}, s.pinned ? h("span", { class: "badge" }, "pinned") : null, isHead ? h("span", { class: "badge head" }, "head") : null),
      h("span", { class: "actions" },
        h("button", { type: "button", "data-action": "from", class: diffFrom === s.id ? "on" : "", title: "diff from this", onclick: (e) => { e.stopPropagation(); diffFrom = s.id; drawDiffHead(); list.draw(); } }, "A"),
        h("button", { type: "button", "data-action": "to", class: diffTo === s.id ? "on" : "", title: "diff to this", onclick: (e) => { e.stopPropagation(); diffTo = s.id; drawDiffHead(); list.draw(); } }, "B")));
    row.addEventListener("click", () => select(i, false));
    return row;
  }

  let lanesCache = 0;
  function lanesUsed() {
    return lanesCache;
  }

  function select(i, scroll) {
    if (i < 0 || i >= order.length) return;
    selected = i;
    slider.value = String(i);
    const s = order[i];
    when.textContent = new Date(s.created_at).toLocaleString() + " (" + ago(s.created_at) + ")";
    if (!diffTo || scroll) {
      // Scrubbing compares the snapshot with the one before it on its branch.
      diffTo = s.id;
      diffFrom = s.parent_id && order.some((x) => x.id === s.parent_id) ? s.parent_id : diffFrom;
      drawDiffHead();
    }
    drawCard(s);
    if (scroll) list.scrollTo(i);
    else list.draw();
  }

  function drawCard(s) {
    const restore = h("button", { type: "button", class: "primary", id: "restore" }, "Restore to this");
    restore.addEventListener("click", async () => {
      if (!(await confirmDialog("Move the session to " + (s.name || s.id) + " (" + ago(s.created_at) + ")? Where it is now is kept as a branch."))) return;
      restore.disabled = true;
      const stop = elapsed(restore, "Restoring");
      try {
        session = await api("POST", base + "/restore", { snapshot_id: s.id });
        notice.textContent = "Restored to " + s.id + "; the session runs from there.";
        await reload();
      } catch (e) {
        banner.textContent = "Restore: " + e.message;
      } finally {
        stop();
        restore.disabled = false;
        restore.textContent = "Restore to this";
      }
    });
    const fork = h("button", { type: "button", id: "fork-from" }, "Fork from this");
    fork.addEventListener("click", async () => {
      fork.disabled = true;
      const stop = elapsed(fork, "Forking");
      try {
        const res = await api("POST", base + "/fork", { count: 1, snapshot_id: s.id });
        const ids = (res.sessions || []).map((x) => x.id);
        notice.replaceChildren("Forked into ", ...ids.map((x) => h("a", { href: "#/sessions/" + x, class: "mono" }, x)));
      } catch (e) {
        banner.textContent = "Fork: " + e.message;
      } finally {
        stop();
        fork.disabled = false;
        fork.textContent = "Fork from this";
      }
    });
    const pin = h("button", { type: "button", id: "pin" }, s.pinned ? "Unpin" : "Pin");
    pin.addEventListener("click", async () => {
      try {
        await api("PATCH", base + "/snapshots/" + s.id, { pinned: !s.pinned });
        await reload();
      } catch (e) {
        banner.textContent = "Pin: " + e.message;
      }
    });
    card.replaceChildren(...[
      h("div", { class: "big" }, s.name || s.trigger + " snapshot"),
      h("div", { class: "mono muted" }, s.id),
      h("div", {}, new Date(s.created_at).toLocaleString(), " · ", ago(s.created_at)),
      h("div", {}, bytes(s.logical_bytes), " saved, ", bytes(s.stored_bytes), " new in the store"),
      s.reason ? h("div", { class: "field-error" }, s.reason) : null,
      h("div", { class: "toolbar" }, restore, fork, pin),
    ].filter(Boolean));
  }

  function drawDiffHead() {
    const name = (id) => {
      const s = order.find((x) => x.id === id);
      return s ? (s.name || s.trigger) + " " + new Date(s.created_at).toLocaleTimeString() : "—";
    };
    diffHead.replaceChildren("A: ", h("span", { class: "mono", id: "diff-from" }, name(diffFrom)), "  →  B: ", h("span", { class: "mono", id: "diff-to" }, name(diffTo)));
    diffBtn.disabled = !diffFrom || !diffTo || diffFrom === diffTo;
  }

  async function compare() {
    diffFiles.replaceChildren(h("p", { class: "muted" }, "Reading both snapshots…"));
    diffText.textContent = "";
    try {
      const q = "?from=" + diffFrom + "&to=" + diffTo;
      const d = await api("GET", base + "/diff" + q);
      const changes = d.changes || [];
      if (!changes.length) {
        diffFiles.replaceChildren(h("p", { class: "muted", id: "diff-empty" }, "No file changed."));
        return;
      }
      diffFiles.replaceChildren(
        h("div", { class: "muted" }, changes.length + " paths" + (d.truncated ? " (the first 10,000)" : "")),
        h("ul", { class: "changes" }, changes.map((c) => h("li", { "data-path": c.path },
          h("span", { class: "kind " + c.kind }, c.kind), " ",
          c.type === "file" && c.kind !== "removed"
            ? h("a", { href: "#", class: "mono", onclick: (e) => { e.preventDefault(); showFile(c.path); } }, c.path)
            : h("span", { class: "mono" }, c.path),
          " ", h("span", { class: "muted" }, c.kind === "changed" ? bytes(c.old_size) + " → " + bytes(c.new_size) : bytes(c.kind === "removed" ? c.old_size : c.new_size))))));
    } catch (e) {
      diffFiles.replaceChildren(h("div", { class: "banner" }, e.message));
    }
  }

  async function showFile(path) {
    diffText.textContent = "…";
    try {
      const d = await api("GET", base + "/diff?from=" + diffFrom + "&to=" + diffTo + "&path=" + encodeURIComponent(path));
      if (d.binary) {
        diffText.textContent = path + ": binary, or over 1 MiB; no text diff.";
        return;
      }
      diffText.replaceChildren(...(d.unified || "").split("\n").map((line) => {
        const cls = line.startsWith("+++") || line.startsWith("---") ? "meta" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : line.startsWith("@@") ? "hunk" : "";
        return h("span", { class: cls }, line + "\n");
      }));
    } catch (e) {
      diffText.textContent = e.message;
    }
  }

  async function reload() {
    try {
      [session, timeline] = await Promise.all([api("GET", base), api("GET", base + "/timeline")]);
      if (scope.stale) return;
      banner.textContent = "";
    } catch (e) {
      banner.textContent = e.message;
      return;
    }
    const keep = selected >= 0 && order[selected] ? order[selected].id : timeline.head_snapshot_id;
    order = layout(timeline.snapshots || []);
    lanesCache = order.reduce((m, s) => Math.max(m, s.lane), 0);
    slider.max = String(Math.max(0, order.length - 1));
    document.getElementById("snapshot-count").textContent = order.length + (order.length === 1 ? " snapshot" : " snapshots");
    drawHead();
    list.set(order);
    const i = order.findIndex((s) => s.id === keep);
    if (i >= 0) select(i, selected < 0);
    else if (order.length) select(order.length - 1, true);
    else card.replaceChildren(h("p", { class: "muted", id: "no-snapshots" }, "No snapshot yet: take one, or pause the session."));
    drawDiffHead();
  }

  const t0 = performance.now();
  await reload();
  document.getElementById("main").dataset.firstRender = String(Math.round(performance.now() - t0));
  const timer = setInterval(() => {
    if (!document.hidden && !busy()) reload();
  }, 10000);
  scope.onLeave(() => clearInterval(timer));
}
