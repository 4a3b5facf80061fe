// Templates: the tenant's templates, and for the operator a Dockerfile build with its progress
// streamed (each step, RUN output, cached steps) until the template or the error.
import { api, fetchAPI, h, render } from "./lib.js";

const DRAFT = "airlock.draft.build";
const MAX_LOG = 200_000; // characters of build output kept on the page

// tar returns a ustar archive of files ({name: text}), as the build API takes its context.
function tar(files) {
  const enc = new TextEncoder();
  const blocks = [];
  const field = (buf, off, len, s) => buf.set(enc.encode(s).subarray(0, len), off);
  const octal = (n, len) => n.toString(8).padStart(len - 1, "0") + "\0";
  for (const [name, text] of Object.entries(files)) {
    const data = enc.encode(text);
    const hdr = new Uint8Array(512);
    field(hdr, 0, 100, name);
    field(hdr, 100, 8, octal(0o644, 8));
    field(hdr, 108, 8, octal(0, 8));
    field(hdr, 116, 8, octal(0, 8));
    field(hdr, 124, 12, octal(data.length, 12));
    field(hdr, 136, 12, octal(Math.floor(Date.now() / 1000), 12));
    field(hdr, 148, 8, "        ");
    field(hdr, 156, 1, "0");
    field(hdr, 257, 6, "ustar\0");
    field(hdr, 263, 2, "00");
    let sum = 0;
    for (const b of hdr) sum += b;
    field(hdr, 148, 8, sum.toString(8).padStart(6, "0") + "\0 ");
    blocks.push(hdr, data, new Uint8Array((512 - (data.length % 512)) % 512));
  }
  blocks.push(new Uint8Array(1024));
  const out = new Uint8Array(blocks.reduce((n, b) => n + b.length, 0));
  let off = 0;
  for (const b of blocks) {
    out.set(b, off);
    off += b.length;
  }
  return out;
}

export async function templatesPage() {
  const banner = h("div", { class: "banner", role: "alert", id: "templates-error" });
  const body = h("tbody", { id: "templates" });
  const draft = JSON.parse(sessionStorage.getItem(DRAFT) || "{}");
  const name = h("input", { id: "build-name", placeholder: "my-template", value: draft.name || "" });
  const dockerfile = h("textarea", { id: "dockerfile", rows: "8", placeholder: "FROM default\nRUN …" });
  dockerfile.value = draft.dockerfile || "";
  const allow = h("input", { id: "build-allow", placeholder: "pypi.org, *.pythonhosted.org", value: draft.allow || "" });
  const save = () => sessionStorage.setItem(DRAFT, JSON.stringify({ name: name.value, dockerfile: dockerfile.value, allow: allow.value }));
  for (const el of [name, dockerfile, allow]) el.addEventListener("input", save);
  const errs = { name: h("div", { class: "field-error", id: "build-name-error" }), dockerfile: h("div", { class: "field-error", id: "dockerfile-error" }) };
  const bar = h("div", { class: "bar" }, h("div", {}));
  bar.firstChild.style.width = "0";
  const step = h("div", { id: "build-step", class: "mono" });
  const log = h("pre", { id: "build-log", class: "diff" });
  const result = h("div", { id: "build-result", role: "status" });
  const build = h("button", { type: "button", class: "primary", id: "build" }, "Build");
  build.addEventListener("click", () => run());

  render(h("h1", {}, "Templates"), banner,
    h("div", { class: "table-scroll" }, h("table", { class: "flows" },
      h("thead", {}, h("tr", {}, ["Name", "Boots", "Runtimes", ""].map((t) => h("th", {}, t)))), body)),
    h("h2", {}, "Build from a Dockerfile ", h("span", { class: "muted" }, "(operator)")),
    h("div", { class: "form" },
      h("label", { for: "build-name" }, "Template name"), name, errs.name,
      h("label", { for: "dockerfile" }, "Dockerfile"), dockerfile, errs.dockerfile,
      h("label", { for: "build-allow" }, "Hosts RUN steps may reach ", h("span", { class: "hint" }, "(comma-separated; nothing else)")), allow,
      h("p", {}, build)),
    step, bar, log, result);

  async function load() {
    try {
      const ts = await api("GET", "/v1/templates");
      body.replaceChildren(...(ts.templates || []).map((t) => h("tr", { class: "template", "data-name": t.name },
        h("td", {}, t.name, t.builtin ? h("span", { class: "badge head" }, "built-in") : null),
        h("td", { class: "mono", title: t.ref }, t.ref),
        h("td", {}, (t.runtimes || []).join(", ") || "any"),
        h("td", {}, h("a", { class: "button", href: "#/sessions/new", onclick: () => {
          const d = JSON.parse(sessionStorage.getItem("airlock.draft.session") || "{}");
          d.template = t.name;
          sessionStorage.setItem("airlock.draft.session", JSON.stringify(d));
        } }, "New session")))));
    } catch (e) {
      banner.textContent = e.message;
    }
  }

  async function run() {
    for (const e of Object.values(errs)) e.textContent = "";
    result.textContent = "";
    log.textContent = "";
    step.textContent = "";
    bar.firstChild.style.width = "0";
    const q = new URLSearchParams();
    for (const a of allow.value.split(",").map((s) => s.trim()).filter(Boolean)) q.append("allow", a);
    build.disabled = true;
    const t0 = Date.now();
    const tick = setInterval(() => { build.textContent = "Building… " + Math.round((Date.now() - t0) / 1000) + " s"; }, 1000);
    try {
      let res;
      try {
        res = await fetchAPI("POST", "/v1/templates/" + encodeURIComponent(name.value.trim()) + "/build" + (q.toString() ? "?" + q : ""),
          tar({ Dockerfile: dockerfile.value }), "application/x-tar");
      } catch (e) {
        // A bad name is the name's; the rest (parse errors, FROM not found) the Dockerfile's.
        (/template name|name "/i.test(e.message) || e.status === 404 && !/line \d/.test(e.message) ? errs.name : errs.dockerfile).textContent = e.message;
        return;
      }
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        buf += value || "";
        const lines = buf.split("\n");
        buf = done ? "" : lines.pop();
        for (const line of lines.filter((l) => l.trim())) {
          const ev = JSON.parse(line);
          if (ev.template) {
            result.className = "banner info";
            result.textContent = "Built: " + ev.template.name + " now boots " + ev.template.ref;
            sessionStorage.removeItem(DRAFT);
          } else if (ev.error) {
            errs.dockerfile.textContent = ev.error.message;
          } else {
            if (ev.steps) bar.firstChild.style.width = Math.round((100 * (ev.step - (ev.image ? 0 : 1))) / ev.steps) + "%";
            if (ev.output) log.textContent = (log.textContent + ev.output).slice(-MAX_LOG);
            else step.textContent = `Step ${ev.step}/${ev.steps}: ${ev.instruction}` + (ev.image ? (ev.cached ? " (cached)" : " done") : "…");
          }
        }
        if (done) break;
      }
    } catch (e) {
      errs.dockerfile.textContent = e.message;
    } finally {
      clearInterval(tick);
      build.disabled = false;
      build.textContent = "Build";
      await load();
    }
  }

  await load();
}
