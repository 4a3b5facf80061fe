// The operator's page: nodes with their runtimes and capacity, drained and undrained with progress,
// and tenants; a tenant's key has no such page.
import { test } from "node:test";
import assert from "node:assert/strict";
import { base, key, otherKey, shots, newPage, signIn } from "./helpers.mjs";

test("the operator sees nodes and tenants, drains and undrains a node; another tenant sees no operator page", async () => {
  const { ctx, page, problems } = await newPage();
  await signIn(page, key);
  await page.locator("#nav-operator:not([hidden])").waitFor();
  await page.click("#nav-operator");
  const node = page.locator('#nodes tr.node[data-state="up"]').first();
  try {
    await node.waitFor();
  } catch (e) {
    throw new Error(`no node up: ${e.message}; the page says ${JSON.stringify(await page.locator("main").textContent())}`);
  }
  assert.match(await node.textContent(), /gvisor/);
  await page.locator('#tenants tr.tenant[data-name="console-other"]').waitFor();
  await page.screenshot({ path: shots + "/operator.png" });

  await node.locator('button[data-action="drain"]').click();
  await page.click("#confirm-yes");
  await page.locator("#notice").filter({ hasText: /^Drained/ }).waitFor({ timeout: 120_000 });
  await page.locator('#nodes button[data-action="undrain"]').click();
  await page.locator("#notice").filter({ hasText: /takes sandboxes again/ }).waitFor({ timeout: 60_000 });
  await page.locator('#nodes tr.node[data-state="up"] button[data-action="drain"]').waitFor();
  assert.deepEqual(problems, []);
  await ctx.close();

  const other = await newPage();
  await signIn(other.page, otherKey);
  assert.equal(await other.page.locator("#nav-operator").isHidden(), true);
  await other.page.goto(base + "/console/#/operator");
  await other.page.locator("#operator-error").filter({ hasText: /\S/ }).waitFor();
  assert.equal(await other.page.locator("#tenants tr").count(), 0);
  await other.ctx.close();
});
