// The console's terminal (terminal.js) in a real browser against a real session: a shell over the
// exec stream, resize, reconnecting to the same process when the socket drops or the page reloads, no
// CSP violation, and another tenant's key refused.
import { test } from "node:test";
import assert from "node:assert/strict";
import { base, key, otherKey, shots, newPage, signIn, apiCall } from "./helpers.mjs";

async function waitRunning(id, timeout = 180_000) {
  const end = Date.now() + timeout;
  for (;;) {
    const s = (await apiCall("GET", "/v1/sessions/" + id)).body;
    if (s.state === "running") return;
    if (s.state === "failed" || Date.now() > end) throw new Error(`session ${id} is ${s.state}: ${s.reason || ""}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

// terminalText is what the terminal shows, from xterm's buffer.
function terminalText(page) {
  return page.evaluate(() => window.__airlockTerminal.text());
}

async function waitText(page, re, what) {
  try {
    await page.waitForFunction((src) => new RegExp(src, "m").test(window.__airlockTerminal?.text() || ""), re.source, { timeout: 60_000 });
  } catch (e) {
    throw new Error(`${what}: no ${re} in the terminal: ${e.message}\n${await terminalText(page).catch(() => "")}`);
  }
}

async function waitConnected(page) {
  try {
    await page.locator("#term-status[data-state=connected]").waitFor({ timeout: 120_000 });
  } catch (e) {
    throw new Error(`not connected: ${e.message}; the page says ${JSON.stringify(await page.locator("#term-status, #term-error").allTextContents())}`);
  }
  await page.waitForFunction(() => !!window.__airlockTerminal?.pid);
}

async function run(page, line) {
  await page.click("#terminal");
  await page.keyboard.type(line);
  await page.keyboard.press("Enter");
}

test("a terminal into a session: a shell, resize, reconnect to the same process, no CSP violation; another tenant's key refused", async () => {
  const created = await apiCall("POST", "/v1/sessions", key, { metadata: { suite: "terminal" } });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id = created.body.id;
  await waitRunning(id);

  const { ctx, page, problems } = await newPage();
  await ctx.addInitScript(() => {
    window.__violations = [];
    document.addEventListener("securitypolicyviolation", (e) => window.__violations.push(`${e.violatedDirective} ${e.blockedURI} ${e.sample}`));
  });
  const sockets = [];
  page.on("websocket", (ws) => sockets.push(ws.url()));
  await signIn(page, key);

  // The running session's row links to its terminal.
  await page.locator(`.trow[data-id="${id}"] a[data-action=terminal]`).click();
  await page.waitForURL(new RegExp("#/terminal/sessions/" + id));
  // No shell until asked for.
  await page.locator("#start-shell").waitFor();
  assert.equal(sockets.length, 0, "no socket before the click");
  await page.click("#start-shell");
  await waitConnected(page);
  const pid = await page.evaluate(() => window.__airlockTerminal.pid);

  await run(page, "echo hello-$((6*7))");
  await waitText(page, /^hello-42$/, "echo");

  // Resize: the shell's terminal takes the page's new size.
  const before = await page.evaluate(() => window.__airlockTerminal.size);
  await page.setViewportSize({ width: 900, height: 560 });
  await page.waitForFunction((b) => {
    const s = window.__airlockTerminal.size;
    return s.cols < b.cols && s.rows < b.rows;
  }, before);
  const size = await page.evaluate(() => window.__airlockTerminal.size);
  await run(page, "stty size");
  await waitText(page, new RegExp(`^${size.rows} ${size.cols}$`), "stty size after a resize");

  // The socket drops: the page attaches to the same shell again, whose variables are still set.
  await run(page, "MARK=kept-$((1+1)); echo set-$((2+3))");
  await waitText(page, /^set-5$/, "the variable set");
  await page.evaluate(() => window.__airlockTerminal.socket.close());
  await page.locator("#term-status[data-state=reconnecting]").waitFor();
  await waitConnected(page);
  assert.equal(await page.evaluate(() => window.__airlockTerminal.pid), pid, "the same process");
  await run(page, 'echo "$MARK"');
  await waitText(page, /^kept-2$/, "the variable after reconnecting");

  // A reload attaches to it too, replaying the output still kept.
  await page.reload();
  await waitConnected(page);
  assert.equal(await page.evaluate(() => window.__airlockTerminal.pid), pid, "the same process after a reload");
  await waitText(page, /^hello-42$/, "the replayed output");
  await run(page, 'echo "$MARK-again"');
  await waitText(page, /^kept-2-again$/, "the variable after a reload");
  await run(page, "ls --color=always /");
  await waitText(page, /\busr\b/, "ls");
  await page.screenshot({ path: shots + "/terminal.png" });

  // One shell ran, through exec stream and attach, and the key was in no URL.
  const procs = (await apiCall("GET", `/v1/sessions/${id}/processes`)).body.processes.filter((p) => p.pty);
  assert.deepEqual(procs.map((p) => p.id), [pid]);
  assert.ok(sockets.length >= 3, `sockets ${JSON.stringify(sockets)}`);
  for (const u of sockets) assert.equal(u.includes(key), false, "the key is in no URL");

  // The shell exits: the page says so.
  await run(page, "exit 3");
  await page.locator("#term-status[data-state=exited]").waitFor({ timeout: 60_000 });
  assert.match(await page.textContent("#term-status"), /code 3/);

  assert.deepEqual(await page.evaluate(() => window.__violations), [], "no CSP violation");
  assert.deepEqual(problems, []);
  await ctx.close();

  // Another tenant's key: the API's not found, and no socket.
  const other = await newPage();
  const otherSockets = [];
  other.page.on("websocket", (ws) => otherSockets.push(ws.url()));
  await signIn(other.page, otherKey);
  await other.page.goto(base + "/console/#/terminal/sessions/" + id);
  await other.page.locator("#term-error").filter({ hasText: /\S/ }).waitFor();
  const direct = await apiCall("GET", "/v1/sessions/" + id, otherKey);
  assert.equal(direct.status, 404);
  assert.equal(await other.page.textContent("#term-error"), direct.body.error.message);
  assert.deepEqual(otherSockets, []);
  assert.deepEqual(other.problems, []);
  await other.ctx.close();

  assert.equal((await apiCall("DELETE", "/v1/sessions/" + id)).status, 204);
});
