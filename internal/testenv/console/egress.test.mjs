// A sandbox's egress in the console: a request from inside that the policy denies appears in the
// live flow log and its chart without a reload; the policy editor shows the API's error for a bad
// rule and saves a good one; another tenant's key sees none of it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { base, key, otherKey, shots, newPage, signIn, apiCall } from "./helpers.mjs";

test("a denied request from inside shows up live; the policy editor saves, and shows the API's errors", async () => {
  const created = await apiCall("POST", "/v1/sessions", key, {
    rolling_interval_seconds: 0,
    network: { default: "deny", rules: [{ name: "only-this", action: "allow", host: "allowed.test" }] },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id = created.body.id;
  const sb = created.body.sandbox_id;
  assert.match(sb, /^sb_/);

  const { ctx, page, problems } = await newPage();
  await signIn(page, key);
  await page.goto(`${base}/console/#/sessions/${id}`);
  await page.click("#open-egress");
  await page.waitForURL(new RegExp(`#/egress/${sb}`));
  await page.locator("#no-flows").waitFor();

  // From inside: a connection the policy denies (to a documentation address: the gateway refuses it
  // without dialing anything).
  const res = await apiCall("POST", `/v1/sessions/${id}/exec`, key, { cmd: ["sh", "-c", "curl -sS -m 5 http://198.51.100.7/ 2>&1; true"] });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  const denied = page.locator('#flows tr[data-decision="deny"][data-host="198.51.100.7"]');
  await denied.waitFor({ timeout: 30_000 });
  assert.match(await denied.textContent(), /deny/);
  await page.locator("#traffic rect.denied").first().waitFor();
  await page.screenshot({ path: shots + "/egress.png", fullPage: true });

  // The filter lives in the URL.
  await page.selectOption("#decision-filter", "deny");
  await page.waitForURL(/decision=deny/);
  await page.reload();
  await denied.waitFor();
  assert.equal(await page.inputValue("#decision-filter"), "deny");

  // The policy editor: a bad rule gets the API's message; a good one is saved and in force.
  await page.click("#add-rule");
  const last = page.locator("#rules tr.rule").last();
  await last.locator(".rule-host").fill("not a host!");
  await page.click("#save-policy");
  await page.locator("#policy-error").filter({ hasText: /\S/ }).waitFor();
  const direct = await apiCall("PUT", `/v1/sandboxes/${sb}/network`, key, { rules: [{ name: "only-this", action: "allow", host: "allowed.test" }, { action: "allow", host: "not a host!" }] });
  assert.equal(direct.status, 400);
  assert.equal(await page.textContent("#policy-error"), direct.body.error.message);
  await last.locator(".rule-host").fill("api.example.org");
  await last.locator(".rule-ports").fill("443");
  await page.click("#save-policy");
  await page.locator("#policy-saved").filter({ hasText: /Saved/ }).waitFor();
  const pol = (await apiCall("GET", `/v1/sandboxes/${sb}/network`)).body;
  assert.deepEqual(pol.rules.map((r) => [r.name || "", r.host, r.ports || []]), [["only-this", "allowed.test", []], ["", "api.example.org", [443]]]);
  assert.deepEqual(problems, []);

  // Another tenant: not found.
  const other = await newPage();
  await signIn(other.page, otherKey);
  await other.page.goto(`${base}/console/#/egress/${sb}`);
  await other.page.locator("#egress-error, .banner").filter({ hasText: /not found|no sandbox/i }).first().waitFor();
  assert.equal(await other.page.locator("#flows tr.flow").count(), 0);
  await other.ctx.close();

  await ctx.close();
  assert.equal((await apiCall("DELETE", `/v1/sessions/${id}`)).status, 204);
});
