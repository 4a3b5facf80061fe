// What the console's browser tests share: the server and keys the Go test gives (AIRLOCK_URL,
// AIRLOCK_API_KEY, OTHER_API_KEY, CHROMIUM, SCREENSHOTS), one browser a test file, pages that record
// the page's errors, signing in, and calls to the API from the test itself.
import { before, after } from "node:test";
import { mkdirSync } from "node:fs";
import { chromium } from "playwright-core";

export const base = process.env.AIRLOCK_URL;
export const key = process.env.AIRLOCK_API_KEY;
export const otherKey = process.env.OTHER_API_KEY;
export const shots = process.env.SCREENSHOTS;
mkdirSync(shots, { recursive: true });

let browser;
before(async () => {
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM, args: ["--no-sandbox"] });
});
after(async () => {
  await browser?.close();
});

export async function newPage() {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await ctx.newPage();
  const problems = [];
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
  page.on("console", (m) => {
    if (m.type() === "error" && !/status of 4\d\d/.test(m.text())) problems.push("console error: " + m.text());
  });
  return { ctx, page, problems };
}

export async function signIn(page, k) {
  await page.goto(base + "/console");
  await page.waitForURL(/#\/signin/);
  await page.fill("#apikey", k);
  await page.click("button[type=submit]");
  await page.waitForURL(/#\/sessions/);
}

// apiCall calls the API from the test (not the browser), as a check of what the console shows.
export async function apiCall(method, path, k = key, body) {
  const res = await fetch(base + path, {
    method,
    headers: { Authorization: "Bearer " + k, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

export function row(page, id) {
  return page.locator(`.trow[data-id="${id}"]`);
}

export async function waitState(page, id, state, timeout = 120_000) {
  try {
    await row(page, id).locator(`.state.${state}`).waitFor({ timeout });
  } catch (e) {
    const banner = await page.locator(".banner").allTextContents();
    throw new Error(`${id} is not ${state}: ${e.message}; the page says ${JSON.stringify(banner)}`);
  }
}
