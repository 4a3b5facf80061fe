// The operator's page (the operator tenant's admin keys only; the API answers others 404): tenants,
// and nodes with their runtimes, capacity and use; a node can be drained (its sessions moved) and
// undrained.
import { api, h, pageScope, ago, confirmDialog, elapsed } from "./lib.js";

export async function operatorPage() {
  const scope = pageScope();
  const banner = h("div", { class: "banner", role: "alert", id: "operator-error" });
  const notice = h("div", { class: "banner info", role: "status", id: "notice" });
  const tenants = h("tbody", { id: "tenants" });
  const nodes = h("tbody", { id: "nodes" });
  scope.render(h("h1", {}, "Operator"), banner, notice,
    h("h2", {}, "Nodes"),
    h("div", { class: "table-scroll" }, h("table", { class: "flows" },
      h("thead", {}, h("tr", {}, ["Node", "State", "Runtimes", "Sandboxes", "CPU", "Memory", "Last seen", "Version", ""].map((t) => h("th", {}, t)))), nodes)),
    h("h2", {}, "Tenants"),
    h("div", { class: "table-scroll" }, h("table", { class: "flows" },
      h("thead", {}, h("tr", {}, ["Tenant", "Name", "State", "Key", "Runtimes", "Quotas", "Created"].map((t) => h("th", {}, t)))), tenants)));

  const quota = (q) => Object.entries(q || {}).filter(([, v]) => v).map(([k, v]) => k.replaceAll("_", " ") + " " + v).join(", ") || "none";
  let acting = false;

  async function load() {
    if (acting) return;
    let ns, ts;
    try {
      [ns, ts] = await Promise.all([api("GET", "/v1/nodes"), api("GET", "/v1/tenants")]);
      banner.textContent = "";
    } catch (e) {
      banner.textContent = e.message;
      return;
    }
    nodes.replaceChildren(...(ns.nodes || []).map((n) => {
      const cap = n.capacity || {};
      const action = n.draining ? "undrain" : "drain";
      const btn = h("button", { type: "button", "data-action": action, class: n.draining ? "" : "danger" }, n.draining ? "Undrain" : "Drain");
      btn.addEventListener("click", async () => {
        if (action === "drain" && !(await confirmDialog("Drain " + n.id + "? Its sessions move to other nodes, and nothing new is placed on it."))) return;
        acting = true;
        btn.disabled = true;
        const stop = elapsed(btn, action === "drain" ? "Draining" : "Undraining");
        try {
          const res = await api("POST", "/v1/nodes/" + encodeURIComponent(n.id) + "/" + action);
          notice.textContent = action === "drain"
            ? `Drained ${n.id}: ${(res.moved || []).length} sessions moved, ${(res.not_moved || []).length} not moved, ${(res.sandboxes || []).length} sandboxes left to end.`
            : `${n.id} takes sandboxes again.`;
        } catch (e) {
          banner.textContent = action + " " + n.id + ": " + e.message;
        } finally {
          stop();
          acting = false;
          await load();
        }
      });
      return h("tr", { class: "node", "data-id": n.id, "data-state": n.state },
        h("td", { class: "mono", title: (n.hosts || []).join(", ") }, n.id),
        h("td", {}, h("span", { class: "state " + (n.state === "up" ? "running" : n.state === "down" ? "failed" : "paused") }, n.state), n.draining && n.state !== "draining" ? " draining" : ""),
        h("td", {}, (n.runtimes || []).map((r) => r.name + (r.accel ? " (" + r.accel + ")" : "")).join(", ")),
        h("td", {}, (n.sandboxes ?? 0) + (cap.max_sandboxes ? " / " + cap.max_sandboxes : "")),
        h("td", {}, cap.cpu_millicores ? cap.cpu_millicores / 1000 + " CPU" : ""),
        h("td", {}, cap.memory_mb ? cap.memory_mb + " MiB" : ""),
        h("td", { title: n.last_seen_at || "" }, ago(n.last_seen_at)),
        h("td", { class: "mono" }, n.version || ""),
        h("td", {}, btn, (n.warnings || []).length ? h("div", { class: "field-error" }, n.warnings.join("; ")) : null));
    }));
    if (!(ns.nodes || []).length) {
      nodes.replaceChildren(h("tr", {}, h("td", { colspan: "9", class: "muted", id: "no-nodes" },
        "No node has joined: this server runs sandboxes on its own host. Nodes that join (airlock node join) appear here.")));
    }
    tenants.replaceChildren(...(ts.tenants || []).map((t) => h("tr", { class: "tenant", "data-id": t.id, "data-name": t.name },
      h("td", { class: "mono" }, t.id),
      h("td", {}, t.name, t.operator ? h("span", { class: "badge head" }, "operator") : null),
      h("td", {}, t.disabled ? h("span", { class: "state failed" }, "disabled") : h("span", { class: "state running" }, "active")),
      h("td", {}, t.key_provider || ""),
      h("td", {}, (t.runtimes || []).join(", ") || "any"),
      h("td", { class: "muted" }, quota(t.quotas)),
      h("td", { title: t.created_at }, ago(t.created_at)))));
  }

  await load();
  const timer = setInterval(() => {
    if (!document.hidden) load();
  }, 5000);
  scope.onLeave(() => clearInterval(timer));
}
