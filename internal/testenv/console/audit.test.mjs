// The audit log in the console: the hash chain verified in the browser (and a tampered export caught
// at the entry changed), filters, and another tenant's log holding only its own entries.
import { test } from "node:test";
import assert from "node:assert/strict";
import { base, key, otherKey, shots, newPage, signIn, apiCall } from "./helpers.mjs";

test("the audit log's chain is verified in the browser; a changed entry is caught; tenants see their own", async () => {
  // Some entries: a denied call and an allowed one.
  assert.equal((await apiCall("GET", "/v1/sessions/se_aaaaaaaaaaaaaaaaaaaaaaaaaa")).status, 404);
  assert.equal((await apiCall("GET", "/v1/sessions")).status, 200);

  const { ctx, page, problems } = await newPage();
  await signIn(page, key);
  await page.click('#nav a[data-page="audit"]');
  await page.locator('#audit-status[data-verified="intact"]').waitFor({ timeout: 60_000 });
  const n = Number((await page.textContent("#audit-count")).match(/^(\d+) entries/)[1]);
  assert.ok(n >= 3, `${n} entries`);
  assert.ok((await page.locator(".trow.audit").count()) > 0);
  await page.screenshot({ path: shots + "/audit.png" });

  // A filter, kept in the URL.
  await page.selectOption("#kind-filter", "api");
  await page.waitForURL(/kind=api/);
  await page.locator('#audit-status[data-verified="intact"]').waitFor();
  for (const k of await page.locator(".trow.audit span:nth-child(3)").allTextContents()) assert.equal(k, "api");

  // The same log with one entry's action changed: the page finds that entry.
  await page.route(/\/v1\/audit$/, async (route) => {
    const res = await route.fetch();
    const lines = (await res.text()).split("\n");
    const e = JSON.parse(lines[2]);
    e.action = e.action + " (edited)";
    lines[2] = JSON.stringify(e);
    await route.fulfill({ response: res, body: lines.join("\n") });
  });
  await page.goto(base + "/console/#/audit");
  await page.reload();
  await page.locator('#audit-status[data-verified="broken"]').waitFor({ timeout: 60_000 });
  assert.match(await page.textContent("#audit-status"), /entry 3: its hash does not match/);
  assert.deepEqual(problems, []);
  await ctx.close();

  // Another tenant's log: its own entries only.
  const other = await newPage();
  await signIn(other.page, otherKey);
  await other.page.goto(base + "/console/#/audit");
  await other.page.locator('#audit-status[data-verified="intact"], #audit-status[data-verified="empty"]').waitFor({ timeout: 60_000 });
  const res = await fetch(base + "/v1/audit", { headers: { Authorization: "Bearer " + otherKey } });
  const mine = (await fetch(base + "/v1/usage", { headers: { Authorization: "Bearer " + otherKey } }).then((r) => r.json())).tenant;
  for (const line of (await res.text()).split("\n").filter(Boolean)) assert.equal(JSON.parse(line).tenant, mine);
  assert.deepEqual(other.problems, []);
  await other.ctx.close();
});
