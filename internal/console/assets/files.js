// A sandbox's or session's files: browse directories, download a file, upload files (with their
// progress), make a directory, delete. The directory is in the URL (?path=), so a reload keeps it.
import { KEY, api, fetchAPI, h, render, ago, bytes, go, confirmDialog } from "./lib.js";

const KINDS = { sessions: "/v1/sessions/", sandboxes: "/v1/sandboxes/" };

// MAX_DOWNLOAD bounds what a download holds in the browser while it reads: a sandbox's file can be any
// size (a sparse 64 GiB file costs it nothing) and grow while it is read. Past it, `airlock cp` streams
// the file to disk.
export const MAX_DOWNLOAD = 256 * 1024 * 1024;

export async function filesPage(kind, id, query) {
  if (!KINDS[kind]) throw new Error("no such page");
  const base = KINDS[kind] + encodeURIComponent(id) + "/files";
  const dir = query.get("path") || "/home/user";
  const here = (p) => "#/files/" + kind + "/" + encodeURIComponent(id) + "?path=" + encodeURIComponent(p);
  const join = (name) => (dir.endsWith("/") ? dir : dir + "/") + name;

  const banner = h("div", { class: "banner", role: "alert", id: "files-error" });
  const notice = h("div", { class: "banner info", role: "status", id: "notice" });
  const parts = dir.split("/").filter(Boolean);
  const crumbs = h("div", { class: "crumbs mono", id: "crumbs" },
    h("a", { href: here("/") }, "/"),
    parts.map((p, i) => [h("a", { href: here("/" + parts.slice(0, i + 1).join("/")) }, p), i < parts.length - 1 ? "/" : ""]));
  const body = h("tbody", { id: "entries" });

  const upload = h("input", { type: "file", id: "upload", multiple: true, "aria-label": "upload files" });
  const progress = h("span", { class: "muted", id: "upload-progress" });
  upload.addEventListener("change", async () => {
    for (const f of upload.files) {
      try {
        await put(join(f.name), f, (pct) => { progress.textContent = `Uploading ${f.name}: ${pct}%`; });
        notice.textContent = `Uploaded ${f.name} (${bytes(f.size)}).`;
      } catch (e) {
        banner.textContent = `Upload ${f.name}: ${e.message}`;
      }
    }
    progress.textContent = "";
    upload.value = "";
    await load();
  });
  const mkdirName = h("input", { id: "mkdir-name", placeholder: "new directory", "aria-label": "new directory" });
  const mkdirErr = h("div", { class: "field-error", id: "mkdir-error" });
  const mkdirBtn = h("button", { type: "button", id: "mkdir" }, "Make directory");
  mkdirBtn.addEventListener("click", async () => {
    mkdirErr.textContent = "";
    mkdirBtn.disabled = true;
    try {
      await api("POST", base + "/mkdir", { path: join(mkdirName.value.trim()) });
      mkdirName.value = "";
      await load();
    } catch (e) {
      mkdirErr.textContent = e.message;
    } finally {
      mkdirBtn.disabled = false;
    }
  });

  render(
    h("div", { class: "toolbar" }, h("h1", {}, "Files of ", h("span", { class: "mono" }, id)), h("span", { class: "grow" }),
      kind === "sessions" ? h("a", { class: "button", href: "#/sessions/" + encodeURIComponent(id) }, "Session") : null),
    crumbs, banner, notice,
    h("div", { class: "toolbar" }, h("label", { for: "upload", class: "button" }, "Upload files"), upload, progress, h("span", { class: "grow" }), mkdirName, mkdirBtn),
    mkdirErr,
    h("div", { class: "table-scroll" }, h("table", { class: "flows" },
      h("thead", {}, h("tr", {}, ["Name", "Size", "Mode", "Modified", ""].map((t) => h("th", {}, t)))), body)));

  async function load() {
    let list;
    try {
      list = await api("GET", base + "/list?path=" + encodeURIComponent(dir));
      banner.textContent = "";
    } catch (e) {
      banner.textContent = e.message;
      body.replaceChildren();
      return;
    }
    const entries = (list.entries || []).sort((a, b) => (a.type === "dir") !== (b.type === "dir") ? (a.type === "dir" ? -1 : 1) : a.name.localeCompare(b.name));
    body.replaceChildren(...entries.map((e) => {
      const path = e.path || join(e.name);
      const name = e.type === "dir"
        ? h("a", { href: here(path), class: "mono" }, e.name + "/")
        : h("span", { class: "mono" }, e.name + (e.type === "symlink" && e.target ? " → " + e.target : ""));
      const dl = e.type === "file" ? h("button", { type: "button", "data-action": "download", onclick: () => download(path, e.name) }, "Download") : null;
      const del = h("button", { type: "button", class: "danger", "data-action": "delete", onclick: () => remove(path, e.type === "dir") }, "Delete");
      return h("tr", { class: "entry", "data-name": e.name, "data-type": e.type },
        h("td", {}, name), h("td", {}, e.type === "file" ? bytes(e.size) : ""), h("td", { class: "mono" }, e.mode || ""),
        h("td", { title: e.mod_time || "" }, ago(e.mod_time)), h("td", { class: "actions" }, dl, del));
    }));
    if (!entries.length) body.replaceChildren(h("tr", {}, h("td", { colspan: "5", class: "muted", id: "empty-dir" }, "Empty directory.")));
  }

  async function download(path, name) {
    try {
      const res = await fetchAPI("GET", base + "?path=" + encodeURIComponent(path));
      const reader = res.body.getReader();
      const chunks = [];
      let n = 0;
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        n += value.byteLength;
        if (n > MAX_DOWNLOAD) {
          await reader.cancel().catch(() => {});
          throw new Error(`larger than ${bytes(MAX_DOWNLOAD)}, more than a browser download holds; use airlock cp ${id}:${path} .`);
        }
        chunks.push(value);
      }
      const url = URL.createObjectURL(new Blob(chunks));
      const a = h("a", { href: url, download: name });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (e) {
      banner.textContent = `Download ${name}: ${e.message}`;
    }
  }

  async function remove(path, isDir) {
    if (!(await confirmDialog("Delete " + path + (isDir ? " and everything in it" : "") + "?"))) return;
    try {
      await api("DELETE", base + "?path=" + encodeURIComponent(path) + (isDir ? "&recursive=true" : ""));
      await load();
    } catch (e) {
      banner.textContent = `Delete ${path}: ${e.message}`;
    }
  }

  // put uploads a file with its progress (XMLHttpRequest: fetch reports none for uploads).
  function put(path, file, onProgress) {
    return new Promise((resolve, reject) => {
      const x = new XMLHttpRequest();
      x.open("PUT", base + "?path=" + encodeURIComponent(path));
      x.setRequestHeader("Authorization", "Bearer " + sessionStorage.getItem(KEY));
      x.setRequestHeader("Content-Type", "application/octet-stream");
      x.upload.onprogress = (ev) => { if (ev.lengthComputable) onProgress(Math.round((100 * ev.loaded) / ev.total)); };
      x.onload = () => {
        if (x.status >= 200 && x.status < 300) return resolve();
        let msg = x.statusText;
        try { msg = JSON.parse(x.responseText).error.message; } catch { /* not JSON */ }
        if (x.status === 401) go("#/signin?expired=1");
        reject(new Error(msg));
      };
      x.onerror = () => reject(new Error("Airlock does not answer"));
      x.send(file);
    });
  }

  await load();
}
