// Templates in the console: a Dockerfile built in the browser with its progress streamed to the end;
// a Dockerfile the API refuses shows its message next to the field; another tenant cannot build.
import { test } from "node:test";
import assert from "node:assert/strict";
import { key, otherKey, shots, newPage, signIn, apiCall } from "./helpers.mjs";

test("build a template from a Dockerfile, with progress; errors next to the field", async () => {
  const { ctx, page, problems } = await newPage();
  await signIn(page, key);
  await page.click('#nav a[data-page="templates"]');
  await page.locator('#templates tr[data-name="consolebase"]').waitFor();

  // A Dockerfile the API refuses before any step: its message under the Dockerfile.
  await page.fill("#build-name", "fromconsole");
  await page.fill("#dockerfile", "FROM consolebase\nHEALTHCHECK CMD true\n");
  await page.click("#build");
  await page.locator("#dockerfile-error").filter({ hasText: /line 2: HEALTHCHECK is not supported/ }).waitFor({ timeout: 60_000 });

  // A good one: every step shown, RUN output, then the template. The draft survived a reload first.
  await page.fill("#dockerfile", "FROM consolebase\nRUN echo built-in-a-sandbox; echo ok > /srv/built\nENV MADE=console\nLABEL from=console\n");
  await page.reload();
  assert.match(await page.inputValue("#dockerfile"), /built-in-a-sandbox/);
  await page.click("#build");
  await page.locator("#build-result").filter({ hasText: /^Built: fromconsole now boots fromconsole@sha256:/ }).waitFor({ timeout: 180_000 });
  assert.match(await page.textContent("#build-log"), /built-in-a-sandbox/);
  assert.match(await page.textContent("#build-step"), /^Step 4\/4: LABEL from=console/);
  await page.locator('#templates tr[data-name="fromconsole"]').waitFor();
  await page.screenshot({ path: shots + "/templates.png", fullPage: true });
  const t = await apiCall("GET", "/v1/templates/fromconsole");
  assert.equal(t.status, 200);
  assert.deepEqual(problems, []);
  await ctx.close();

  // Another tenant: builds are the operator's.
  const other = await newPage();
  await signIn(other.page, otherKey);
  await other.page.goto(other.page.url().replace(/#.*/, "#/templates"));
  await other.page.fill("#build-name", "mine");
  await other.page.fill("#dockerfile", "FROM consolebase\n");
  await other.page.click("#build");
  await other.page.locator("#build-name-error, #dockerfile-error").filter({ hasText: /\S/ }).first().waitFor();
  assert.equal((await apiCall("GET", "/v1/templates/mine", otherKey)).status, 404);
  await other.ctx.close();
});
