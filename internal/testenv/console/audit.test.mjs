// The audit log in the console: the hash chain verified in the browser (and a tampered export caught
// at the entry changed), filters, and another tenant's log holding only its own entries.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
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

  // The log as a retention cut leaves it: its first two entries gone and, at its end, the record of the
  // cut (hashed as the server hashes it). The chain holds from the new first entry; without the record,
  // or with one naming another entry, it does not.
  const cut = (record) => async (route) => {
    const res = await route.fetch();
    const entries = (await res.text()).split("\n").filter(Boolean).map((l) => JSON.parse(l));
    const last = entries[entries.length - 1];
    const kept = entries.slice(2);
    if (record) {
      const through = entries[record === "right" ? 1 : 0];
      const e = { tenant: last.tenant, seq: last.seq + 1, time: last.time, kind: "audit", actor: "retention", action: "prune",
        target: "audit log", result: "ok", detail: JSON.stringify({ through_seq: through.seq, through_hash: through.hash, before: last.time }), prev: last.hash };
      const fields = ["airlock-audit-v1", e.tenant, e.seq, e.time, e.kind, e.actor, e.action, e.target, e.result, e.detail, e.prev];
      e.hash = createHash("sha256").update(JSON.stringify(fields)).digest("hex");
      kept.push(e);
    }
    await route.fulfill({ response: res, body: kept.map((e) => JSON.stringify(e)).join("\n") + "\n" });
  };
  for (const [record, want] of [["right", "intact"], [null, "broken"], ["wrong", "broken"]]) {
    await page.unrouteAll();
    await page.route(/\/v1\/audit$/, cut(record));
    await page.reload();
    await page.locator(`#audit-status[data-verified="${want}"]`).waitFor({ timeout: 60_000 });
    if (want === "broken") assert.match(await page.textContent("#audit-status"), /no record of a retention cut explains/);
  }
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
