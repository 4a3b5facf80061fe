// A session's time machine in the console: snapshots taken, the timeline scrubbed, a diff opened,
// a restore (its branch kept), a pin, a fork from a snapshot; another tenant's key sees none of it;
// and a timeline of 10,000 snapshots drawn as a virtual list.
import { test } from "node:test";
import assert from "node:assert/strict";
import { base, key, otherKey, shots, newPage, signIn, apiCall } from "./helpers.mjs";

async function sh(id, script) {
  const res = await apiCall("POST", `/v1/sessions/${id}/exec`, key, { cmd: ["sh", "-c", script] });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.equal(res.body.exit_code, 0, res.body.stderr);
  return res.body.stdout;
}

function snap(page, id) {
  return page.locator(`.snap[data-id="${id}"]`);
}

async function takeSnapshot(page, name) {
  await page.fill("#snapshot-name", name);
  await page.click("#take-snapshot");
  await page.locator("#snapshot-card .big").filter({ hasText: new RegExp(`^${name}$`) }).waitFor({ timeout: 120_000 });
  const tl = await apiCall("GET", page.sessionBase + "/timeline");
  return tl.body.snapshots.find((s) => s.name === name);
}

test("snapshots, scrubbing, a diff, restore, pin and fork from the timeline; another tenant sees none of it", async () => {
  const created = await apiCall("POST", "/v1/sessions", key, { metadata: { suite: "timeline" }, rolling_interval_seconds: 0 });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id = created.body.id;
  assert.equal(created.body.state, "running");
  await sh(id, "mkdir -p /home/user/work && echo one > /home/user/work/notes.txt");

  const { ctx, page, problems } = await newPage();
  page.sessionBase = "/v1/sessions/" + id;
  await signIn(page, key);
  await page.click(`a[href="#/sessions/${id}"]`);
  await page.locator("#no-snapshots").waitFor();

  // Bad input: a name used twice is the API's error, next to the field.
  const before = await takeSnapshot(page, "before");
  await page.fill("#snapshot-name", "before");
  await page.click("#take-snapshot");
  await page.locator("#snapshot-name-error").filter({ hasText: /\S/ }).waitFor({ timeout: 60_000 });

  await sh(id, "echo two >> /home/user/work/notes.txt && echo new > /home/user/work/added.txt");
  const after = await takeSnapshot(page, "after");
  assert.equal(after.parent_id, before.id);
  await snap(page, before.id).waitFor();
  await snap(page, after.id).waitFor();

  // Scrub: the oldest is "before", the newest "after"; scrubbing to a snapshot compares it with its parent.
  await page.focus("#scrub");
  await page.keyboard.press("Home");
  await page.locator("#snapshot-card .big").filter({ hasText: /^before$/ }).waitFor();
  assert.match(await page.getAttribute(`.snap[data-id="${before.id}"]`, "class"), /selected/);
  await page.keyboard.press("End");
  await page.locator("#snapshot-card .big").filter({ hasText: /^after$/ }).waitFor();
  assert.match(await page.textContent("#diff-from"), /before/);
  assert.match(await page.textContent("#diff-to"), /after/);

  // The diff: the files changed, then one file's unified diff.
  await page.click("#compare");
  await page.locator('#diff-files li[data-path="/home/user/work/notes.txt"]').waitFor({ timeout: 60_000 });
  assert.match(await page.textContent('#diff-files li[data-path="/home/user/work/notes.txt"]'), /changed/);
  assert.match(await page.textContent('#diff-files li[data-path="/home/user/work/added.txt"]'), /added/);
  await page.click('#diff-files li[data-path="/home/user/work/notes.txt"] a');
  await page.locator("#diff-text .add").filter({ hasText: /^\+two\s*$/ }).waitFor();
  await page.screenshot({ path: shots + "/timeline.png", fullPage: true });

  // Restore to "before": where the session was stays as a branch, and its files are as they were.
  await page.focus("#scrub");
  await page.keyboard.press("Home");
  await page.locator("#snapshot-card .big").filter({ hasText: /^before$/ }).waitFor();
  await page.click("#restore");
  await page.click("#confirm-yes");
  await page.locator("#notice").filter({ hasText: /Restored to/ }).waitFor({ timeout: 120_000 });
  assert.equal(await sh(id, "cat /home/user/work/notes.txt; test -e /home/user/work/added.txt || echo gone"), "one\ngone\n");
  await snap(page, before.id).locator(".badge.head").waitFor();
  const tl = (await apiCall("GET", `/v1/sessions/${id}/timeline`)).body;
  assert.equal(tl.head_snapshot_id, before.id);
  assert.ok(tl.snapshots.length >= 3, "the state before the restore is kept");

  // Pin or unpin it (a named snapshot may be pinned already), then fork from it.
  const pinned = async () => (await apiCall("GET", `/v1/sessions/${id}/snapshots/${before.id}`)).body.pinned;
  const was = await pinned();
  assert.equal(await page.textContent("#pin"), was ? "Unpin" : "Pin");
  await page.click("#pin");
  await page.locator("#pin").filter({ hasText: was ? /^Pin$/ : /^Unpin$/ }).waitFor();
  assert.equal(await pinned(), !was);
  assert.equal(await snap(page, before.id).locator(".badge").filter({ hasText: "pinned" }).count(), was ? 0 : 1);
  await page.click("#fork-from");
  await page.locator("#notice").filter({ hasText: /Forked into/ }).waitFor({ timeout: 120_000 });
  const forkID = (await page.textContent("#notice")).match(/se_[a-z0-9]+/)[0];
  assert.equal((await apiCall("GET", `/v1/sessions/${forkID}`)).body.forked_from_snapshot_id, before.id);

  // Another tenant: no such session.
  const other = await newPage();
  await signIn(other.page, otherKey);
  await other.page.goto(`${base}/console/#/sessions/${id}`);
  await other.page.locator(".banner").filter({ hasText: /not found|no session/i }).waitFor();
  assert.equal(await other.page.locator(".snap").count(), 0);
  await other.ctx.close();

  assert.deepEqual(problems, []);
  await ctx.close();
  for (const s of [forkID, id]) assert.equal((await apiCall("DELETE", `/v1/sessions/${s}`)).status, 204);
});

test("a timeline of 10,000 snapshots draws at once and scrubs", async () => {
  const { ctx, page, problems } = await newPage();
  const id = "se_" + "t".repeat(26);
  const t0 = Date.parse("2026-11-27T00:00:00Z");
  // A week of snapshots a minute apart, a branch every 1,000.
  const snaps = Array.from({ length: 10000 }, (_, i) => ({
    id: "sn_" + String(i).padStart(26, "a"), session_id: id, trigger: i % 500 ? "rolling" : "manual", state: "complete",
    pinned: i % 2000 === 0, logical_bytes: 300 << 20, stored_bytes: (i % 7) << 20,
    created_at: new Date(t0 + i * 60000).toISOString(), name: i % 500 ? undefined : "n" + i,
    parent_id: i === 0 ? undefined : "sn_" + String(i % 1000 === 0 ? i - 500 : i - 1).padStart(26, "a"),
  }));
  const session = { id, state: "paused", template: "default", runtime: "gvisor", cpu: 1, memory_mb: 512, disk_mb: 1024, metadata: {}, created_at: new Date(t0).toISOString(), head_snapshot_id: snaps[9999].id };
  await page.route(new RegExp(`/v1/sessions/${id}(/timeline)?$`), (route) => {
    const body = route.request().url().endsWith("/timeline") ? { head_snapshot_id: snaps[9999].id, snapshots: snaps } : session;
    route.fulfill({ contentType: "application/json", body: JSON.stringify(body) });
  });
  await signIn(page, key);
  const start = Date.now();
  await page.goto(`${base}/console/#/sessions/${id}`);
  await page.locator(".snap").first().waitFor();
  const firstRow = Date.now() - start;
  const render = Number(await page.getAttribute("#main", "data-first-render"));
  assert.match(await page.textContent("#snapshot-count"), /^10000 snapshots$/);
  const rows = await page.locator(".snap").count();
  assert.ok(rows > 5 && rows < 100, `${rows} rows in the DOM: the timeline is virtual`);
  // Scrub from end to start and back: each step's frame.
  const frames = await page.evaluate(async () => {
    const s = document.getElementById("scrub");
    const out = [];
    for (const v of [0, 2500, 5000, 7500, 9999]) {
      const t = performance.now();
      s.value = String(v);
      s.dispatchEvent(new Event("input"));
      await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
      out.push(performance.now() - t);
    }
    return out.sort((a, b) => a - b);
  });
  await page.locator(`.snap[data-id="${snaps[9999].id}"].selected`).waitFor();
  console.log(`console-bench: snapshots=10000 first_row_ms=${firstRow} load_and_layout_ms=${render} dom_rows=${rows} scrub_frame_median_ms=${frames[2].toFixed(1)}`);
  assert.deepEqual(problems, []);
  await ctx.close();
});
