// A session's files in the console: browse, download, upload (read back from inside), make a
// directory, delete; the API's error for a bad path; another tenant's key sees none of it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { base, key, otherKey, shots, newPage, signIn, apiCall } from "./helpers.mjs";

async function sh(id, script) {
  const res = await apiCall("POST", `/v1/sessions/${id}/exec`, key, { cmd: ["sh", "-c", script] });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.stdout;
}

test("browse, download, upload, mkdir and delete a session's files", async () => {
  const created = await apiCall("POST", "/v1/sessions", key, { rolling_interval_seconds: 0 });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id = created.body.id;
  await sh(id, "mkdir -p /home/user/data/sub && printf 'hello from inside\\n' > /home/user/data/hello.txt");

  const { ctx, page, problems } = await newPage();
  await signIn(page, key);
  await page.goto(`${base}/console/#/sessions/${id}`);
  await page.click("#open-files");
  await page.waitForURL(/#\/files\/sessions\//);
  await page.click('#entries tr[data-name="data"] a');
  await page.locator('#entries tr[data-name="hello.txt"]').waitFor();
  await page.locator('#entries tr[data-name="sub"][data-type="dir"]').waitFor();

  // Download.
  const [dl] = await Promise.all([page.waitForEvent("download"), page.click('#entries tr[data-name="hello.txt"] button[data-action="download"]')]);
  assert.equal(dl.suggestedFilename(), "hello.txt");
  assert.equal(await readFile(await dl.path(), "utf8"), "hello from inside\n");

  // A file the sandbox made sparse and huge: the download stops at its bound and says so.
  await sh(id, "truncate -s 64G /home/user/data/huge");
  await page.reload();
  await page.locator('#entries tr[data-name="huge"]').waitFor();
  await page.click('#entries tr[data-name="huge"] button[data-action="download"]');
  await page.locator("#files-error").filter({ hasText: /Download huge: larger than 256\.0 MiB/ }).waitFor({ timeout: 120_000 });
  await sh(id, "rm /home/user/data/huge");

  // Upload, read back from inside.
  const payload = Buffer.from("uploaded through the browser\n".repeat(1000));
  await page.setInputFiles("#upload", { name: "up.txt", mimeType: "text/plain", buffer: payload });
  await page.locator('#entries tr[data-name="up.txt"]').waitFor({ timeout: 60_000 });
  assert.equal(await sh(id, "md5sum < /home/user/data/up.txt | cut -c1-32"), (await import("node:crypto")).createHash("md5").update(payload).digest("hex") + "\n");

  // A directory; a name the API refuses shows its message.
  await page.fill("#mkdir-name", "made");
  await page.click("#mkdir");
  await page.locator('#entries tr[data-name="made"][data-type="dir"]').waitFor();
  await page.fill("#mkdir-name", "bad\u0000name");
  await page.click("#mkdir");
  await page.locator("#mkdir-error").filter({ hasText: /\S/ }).waitFor();
  await page.screenshot({ path: shots + "/files.png" });

  // Delete, and the directory is kept across a reload.
  await page.click('#entries tr[data-name="up.txt"] button[data-action="delete"]');
  await page.click("#confirm-yes");
  await page.locator('#entries tr[data-name="up.txt"]').waitFor({ state: "detached" });
  await page.reload();
  await page.locator('#entries tr[data-name="hello.txt"]').waitFor();
  assert.match(await page.textContent("#crumbs"), /data/);
  assert.equal(await sh(id, "test -e /home/user/data/up.txt && echo there || echo gone"), "gone\n");
  assert.deepEqual(problems, []);
  await ctx.close();

  const other = await newPage();
  await signIn(other.page, otherKey);
  await other.page.goto(`${base}/console/#/files/sessions/${id}?path=/home/user/data`);
  await other.page.locator("#files-error").filter({ hasText: /not found|no session/i }).waitFor();
  assert.equal(await other.page.locator("#entries tr.entry").count(), 0);
  await other.ctx.close();
  assert.equal((await apiCall("DELETE", `/v1/sessions/${id}`)).status, 204);
});
