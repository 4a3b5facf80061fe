// The web console in a real browser: Debian's Chromium, driven by Playwright, against a real Airlock
// (internal/e2e/console_test.go starts it; helpers.mjs has what the tests share).
import { test } from "node:test";
import assert from "node:assert/strict";
import { base, key, otherKey, shots, newPage, signIn, apiCall, row, waitState } from "./helpers.mjs";

test("the console's headers: a strict CSP, no framing, no CORS", async () => {
  const res = await fetch(base + "/console/");
  assert.equal(res.status, 200);
  const csp = res.headers.get("content-security-policy");
  assert.match(csp, /frame-ancestors 'none'/);
  // Scripts and styles from the console's own files only, not from anywhere on the origin (a
  // sandbox's port is served under /v1/ on it).
  assert.match(csp, /script-src http:\/\/[^ ;]+\/console\/ https:\/\/[^ ;]+\/console\/;/);
  assert.match(csp, /style-src http:\/\/[^ ;]+\/console\/ https:\/\/[^ ;]+\/console\/;/);
  assert.doesNotMatch(csp, /unsafe/);
  assert.equal(res.headers.get("access-control-allow-origin"), null);
  const pre = await fetch(base + "/v1/sessions", {
    method: "OPTIONS",
    headers: { Origin: "https://evil.example", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization" },
  });
  assert.equal(pre.headers.get("access-control-allow-origin"), null, "a preflight is never allowed");
});

test("sign in, create a session with bad input then good, pause, resume, fork, filter, delete; another tenant sees none of it", async () => {
  const { ctx, page, problems } = await newPage();

  // A wrong key: the API's message next to the field, and nothing kept.
  await page.goto(base + "/console");
  await page.waitForURL(/#\/signin/);
  await page.screenshot({ path: shots + "/signin.png" });
  await page.fill("#apikey", "ak_wrong");
  await page.click("button[type=submit]");
  await page.locator("#apikey-error").filter({ hasText: /\S/ }).waitFor();
  assert.match(await page.textContent("#apikey-error"), /key|credential|unauthori/i);
  assert.equal(await page.evaluate(() => sessionStorage.getItem("airlock.key")), null);

  await page.fill("#apikey", key);
  await page.click("button[type=submit]");
  await page.waitForURL(/#\/sessions/);
  assert.equal(page.url().includes(key), false, "the key is in no URL");
  assert.equal(await page.evaluate(() => localStorage.length + document.cookie.length), 0, "the key is in no cookie or local storage");
  await page.locator("#empty").waitFor();

  // Bad input: the API's error next to the field; the draft survives a reload.
  await page.click("#new");
  await page.waitForURL(/#\/sessions\/new/);
  await page.fill("#memory_mb", "-5");
  await page.fill("#metadata", "suite=console");
  await page.click("#create");
  await page.locator("#memory_mb-error").filter({ hasText: /\S/ }).waitFor();
  const msg = await page.textContent("#memory_mb-error");
  assert.match(msg, /memory/i);
  const direct = await apiCall("POST", "/v1/sessions", key, { memory_mb: -5 });
  assert.equal(direct.status, 400);
  assert.equal(msg, direct.body.error.message, "the API's own message is shown");
  await page.reload();
  await page.locator("#memory_mb").waitFor();
  assert.equal(await page.inputValue("#memory_mb"), "-5", "the draft is kept across a reload");
  assert.equal(await page.inputValue("#metadata"), "suite=console");

  await page.fill("#memory_mb", "512");
  await page.fill("#egress", "example.com");
  await page.screenshot({ path: shots + "/new-session.png" });
  await page.click("#create");
  await page.waitForURL(/#\/sessions$/, { timeout: 120_000 });
  const list = await apiCall("GET", "/v1/sessions?metadata.suite=console");
  assert.equal(list.body.sessions.length, 1);
  const s = list.body.sessions[0];
  assert.equal(s.memory_mb, 512);
  assert.deepEqual(s.network.rules.map((r) => r.host), ["example.com"]);
  await waitState(page, s.id, "running");
  await page.screenshot({ path: shots + "/sessions.png" });

  // Filters live in the URL: a reload keeps them.
  await page.fill("#metadata-filter", "suite=other");
  await page.press("#metadata-filter", "Enter");
  await page.locator("#empty").waitFor();
  await page.fill("#metadata-filter", "suite=console");
  await page.press("#metadata-filter", "Enter");
  await page.reload();
  await waitState(page, s.id, "running");
  assert.equal(await page.inputValue("#metadata-filter"), "suite=console");

  // Pause and resume, the states updating by themselves.
  await row(page, s.id).locator("button[data-action=pause]").click();
  await waitState(page, s.id, "paused");
  assert.equal((await apiCall("GET", "/v1/sessions/" + s.id)).body.state, "paused");
  await row(page, s.id).locator("button[data-action=resume]").click();
  await waitState(page, s.id, "running");

  // Fork: the new session appears in the list.
  await row(page, s.id).locator("button[data-action=fork]").click();
  try {
    await page.locator("#notice").filter({ hasText: /Forked into/ }).waitFor({ timeout: 120_000 });
  } catch (e) {
    throw new Error(`no fork: ${e.message}; the page says ${JSON.stringify(await page.locator(".banner").allTextContents())}`);
  }
  const forkID = (await page.textContent("#notice")).match(/se_[a-z0-9]+/)[0];
  await row(page, forkID).waitFor();

  // Another tenant's key sees none of it, in the console or the API.
  const other = await newPage();
  await signIn(other.page, otherKey);
  await other.page.locator("#empty").waitFor();
  assert.equal(await other.page.locator(".trow").count(), 0);
  assert.equal((await apiCall("GET", "/v1/sessions/" + s.id, otherKey)).status, 404);
  assert.deepEqual(other.problems, []);
  await other.ctx.close();

  // Delete both, confirming.
  for (const id of [forkID, s.id]) {
    await row(page, id).locator("button[data-action=delete]").click();
    await page.click("#confirm-yes");
    await row(page, id).waitFor({ state: "detached", timeout: 120_000 });
  }
  assert.deepEqual(problems, []);
  await ctx.close();
});

test("a page of another origin cannot call the API with a key it holds", async () => {
  const { ctx, page } = await newPage();
  // The same server under another name is another origin.
  const otherOrigin = base.replace("127.0.0.1", "localhost");
  assert.notEqual(otherOrigin, base);
  await page.goto(otherOrigin + "/console/");
  const before = (await apiCall("GET", "/v1/sessions")).body.sessions.length;
  const outcome = await page.evaluate(async ([url, k]) => {
    const out = {};
    try {
      await fetch(url + "/v1/sessions", { method: "POST", headers: { Authorization: "Bearer " + k, "Content-Type": "application/json" }, body: "{}" });
      out.cors = "sent";
    } catch (e) {
      out.cors = "blocked";
    }
    // A "simple" request the browser sends without asking: the API refuses it by its Origin (the
    // page cannot read the answer, and the browser may turn it into a network error).
    try {
      await fetch(url + "/v1/sessions", { method: "POST", mode: "no-cors", headers: { "Content-Type": "text/plain" }, body: "{}" });
    } catch {
      // Either way, nothing may be created.
    }
    return out;
  }, [base, key]);
  assert.equal(outcome.cors, "blocked");
  assert.equal((await apiCall("GET", "/v1/sessions")).body.sessions.length, before);
  await ctx.close();
});

test("a list of 1,000 sessions renders at once and stays interactive", async () => {
  const { ctx, page, problems } = await newPage();
  const now = Date.now();
  const all = Array.from({ length: 1000 }, (_, i) => ({
    id: "se_" + String(i).padStart(26, "a"), state: i % 3 ? "running" : "paused", template: "default", runtime: "gvisor",
    cpu: 1, memory_mb: 512, disk_mb: 1024, metadata: { n: String(i) }, created_at: new Date(now - i * 1000).toISOString(),
  }));
  await page.route(/\/v1\/sessions\?/, (route) => {
    const q = new URL(route.request().url()).searchParams;
    const from = Number(q.get("cursor") || 0);
    const limit = Number(q.get("limit"));
    const next = from + limit < all.length ? String(from + limit) : undefined;
    route.fulfill({ contentType: "application/json", body: JSON.stringify({ sessions: all.slice(from, from + limit), next_cursor: next }) });
  });
  await signIn(page, key);
  const t0 = Date.now();
  await page.goto(base + "/console/#/sessions");
  await page.locator(".trow").first().waitFor();
  const firstRow = Date.now() - t0;
  // The first page is there; the next loads as the user scrolls towards its end. Each scroll's frame
  // takes little time.
  const frames = [];
  for (let i = 0; i < 40 && (await page.textContent("#count")) !== "1000 items"; i++) {
    frames.push(await page.evaluate(async () => {
      const v = document.getElementById("rows");
      const t = performance.now();
      v.scrollTop = v.scrollHeight;
      await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
      return performance.now() - t;
    }));
    await page.waitForTimeout(100);
  }
  assert.equal(await page.textContent("#count"), "1000 items");
  const loaded = Date.now() - t0;
  await page.evaluate(() => { const v = document.getElementById("rows"); v.scrollTop = v.scrollHeight; });
  await row(page, all[999].id).waitFor();
  const rows = await page.locator(".trow").count();
  assert.ok(rows > 10 && rows < 100, `${rows} rows in the DOM: the list is virtual`);
  frames.sort((a, b) => a - b);
  const frame = frames[Math.floor(frames.length / 2)];
  console.log(`console-bench: sessions=1000 first_row_ms=${firstRow} all_loaded_ms=${loaded} dom_rows=${rows} scroll_frame_ms=${frame.toFixed(1)}`);
  assert.deepEqual(problems, []);
  await ctx.close();
});
