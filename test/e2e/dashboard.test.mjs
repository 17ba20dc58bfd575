// End-to-end tests of the skiplock dashboard in a real browser: playwright-core
// driving Debian's chromium, headless. .ci/e2e.sh prepares the database, starts
// `skiplock serve` and sets:
//   SKIPLOCK_E2E_URL       the dashboard's URL (ends with /)
//   SKIPLOCK_E2E_USER/PASS basic-auth credentials the server was started with
//   SKIPLOCK_E2E_MARKER    a string present in every seeded payload
//   SKIPLOCK_E2E_ARTIFACTS directory for one screenshot per page
//   SKIPLOCK_E2E_SCREENSHOT where the overview screenshot goes (docs/dashboard.png)
//   SKIPLOCK_E2E_REVEALED  file to write the id of the job whose payload was revealed
//                          (.ci/e2e.sh checks the server logged that reveal)
//   SKIPLOCK_E2E_MULTI_URL a second dashboard over three databases (the same credentials; the second
//                          database's label ends with _b and has a "mail" queue); its test is
//                          skipped when unset
//   SKIPLOCK_E2E_MULTI_SCREENSHOT where its overview screenshot goes (docs/dashboard-databases.png)
//   CHROMIUM               browser binary (default /usr/bin/chromium)
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";

const base = process.env.SKIPLOCK_E2E_URL ?? "http://127.0.0.1:8080/";
const user = process.env.SKIPLOCK_E2E_USER ?? "admin";
const pass = process.env.SKIPLOCK_E2E_PASS ?? "admin";
const marker = process.env.SKIPLOCK_E2E_MARKER ?? "e2e-pii-marker";
const artifacts = process.env.SKIPLOCK_E2E_ARTIFACTS ?? "artifacts";
const screenshot = process.env.SKIPLOCK_E2E_SCREENSHOT ?? join(artifacts, "dashboard.png");
const url = (p) => new URL(p.replace(/^\//, ""), base).toString();

// launch() gives the browser a fresh temporary profile and removes it on close.
let browser, context, page;
const problems = []; // console errors, page errors, failed requests

before(async () => {
  mkdirSync(artifacts, { recursive: true });
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: [
      "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
    ],
  });
  context = await browser.newContext({
    httpCredentials: { username: user, password: pass },
    viewport: { width: 1440, height: 1000 },
    deviceScaleFactor: 1,
  });
  page = await context.newPage();
  page.on("console", (m) => { if (m.type() === "error") problems.push(`console: ${m.text()}`); });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  // net::ERR_ABORTED is the browser cancelling a request itself, typically the
  // favicon or an htmx poll still in flight when the test navigates away; a
  // server that fails shows as another error (reset, empty response) or a 4xx/5xx.
  page.on("requestfailed", (r) => {
    const why = r.failure()?.errorText ?? "";
    if (why !== "net::ERR_ABORTED") problems.push(`request failed: ${r.url()} ${why}`);
  });
  page.on("response", (r) => { if (r.status() >= 400) problems.push(`HTTP ${r.status()}: ${r.url()}`); });
});

after(async () => {
  await browser?.close();
});

async function shot(name) {
  await page.screenshot({ path: join(artifacts, `${name}.png`), fullPage: true });
}

test("the overview shows the five panels and the charts, and refreshes", async () => {
  await page.goto(url("/"));
  for (const id of ["panel-lag", "panel-claims", "panel-running", "panel-dead", "panel-vacuum"]) {
    await page.locator(`#${id}`).waitFor({ state: "visible" });
  }
  await page.locator("#chart-throughput canvas").waitFor({ state: "attached" });
  await page.locator("#chart-lag canvas").waitFor({ state: "attached" });
  assert.match(await page.locator("#panel-lag").innerText(), /default/);
  // htmx polls the panels every 5 s.
  const refreshed = await page.waitForResponse((r) => r.url().includes("/overview/panels") && r.status() === 200,
    { timeout: 15000 });
  assert.ok(refreshed);
  await page.locator("#panel-vacuum").waitFor({ state: "visible" });
  // Let the charts gather a few samples, then keep the picture for the README.
  await page.waitForFunction(() => {
    const els = document.querySelectorAll(".chart canvas");
    return els.length === 2;
  });
  await page.waitForTimeout(Number(process.env.SKIPLOCK_E2E_CHART_WAIT_MS ?? 12000));
  const body = await page.content();
  assert.ok(!body.includes(marker), "a payload appears on the overview");
  await page.screenshot({ path: screenshot, fullPage: true });
  await shot("overview");
});

test("an unauthenticated client is refused; health probes stay open", async () => {
  const anon = await browser.newContext();
  for (const p of ["/", "/jobs", "/dead", "/metrics", "/static/app.js"]) {
    const r = await anon.request.get(url(p), { failOnStatusCode: false });
    assert.equal(r.status(), 401, p);
  }
  const post = await anon.request.post(url("/queues/pause"), { form: { queue: "hooks" }, failOnStatusCode: false });
  assert.equal(post.status(), 401);
  for (const p of ["/healthz", "/readyz"]) {
    const r = await anon.request.get(url(p));
    assert.equal(r.status(), 200, p);
  }
  await anon.close();
});

test("a cross-origin form post is refused", async () => {
  const r = await context.request.post(url("/queues/pause"), {
    form: { queue: "hooks" }, headers: { Origin: "https://evil.example", "Sec-Fetch-Site": "cross-site" },
    failOnStatusCode: false, maxRedirects: 0,
  });
  assert.equal(r.status(), 403);
});

test("search finds a job; its payload stays hidden until revealed", async () => {
  await page.goto(url("/jobs"));
  await page.fill("input[name=kind]", "email.send");
  await page.selectOption("select[name=state]", "ready");
  await Promise.all([page.waitForURL(/\/jobs\?/), page.click("#job-search button[type=submit]")]);
  const rows = page.locator("#jobs-table tbody tr");
  assert.ok((await rows.count()) > 0);
  assert.match(await rows.first().innerText(), /email\.send/);
  assert.ok(!(await page.content()).includes(marker), "a payload appears in search results");
  await shot("jobs");
  await Promise.all([page.waitForURL(/\/jobs\/\d+$/), rows.first().locator("a").first().click()]);
  await page.locator("#job-fields").waitFor();
  assert.ok(!(await page.content()).includes(marker), "the payload shows before a reveal");
  const jobPath = new URL(page.url()).pathname;
  const jobID = jobPath.match(/\/jobs\/(\d+)$/)[1];
  // The reveal is a same-origin POST (htmx).
  const [reveal] = await Promise.all([
    page.waitForRequest((r) => r.url().endsWith(`${jobPath}/payload`)),
    page.click("#reveal-payload"),
  ]);
  assert.equal(reveal.method(), "POST");
  await page.locator("#payload-text").waitFor();
  assert.match(await page.locator("#payload-text").innerText(), new RegExp(marker));
  if (process.env.SKIPLOCK_E2E_REVEALED) writeFileSync(process.env.SKIPLOCK_E2E_REVEALED, jobID);
  await shot("job");
  // Neither a GET nor a cross-site POST reveals anything.
  const get = await context.request.get(url(`${jobPath}/payload`), { failOnStatusCode: false });
  assert.equal(get.status(), 405);
  assert.ok(!(await get.text()).includes(marker));
  const forged = await context.request.post(url(`${jobPath}/payload`), {
    headers: { Origin: "https://evil.example", "Sec-Fetch-Site": "cross-site" }, failOnStatusCode: false,
  });
  assert.equal(forged.status(), 403);
  assert.ok(!(await forged.text()).includes(marker));
});

test("a request for another host name is refused (DNS rebinding); probes answer any host", async () => {
  const port = new URL(base).port;
  for (const p of ["/", "/jobs", "/dead"]) {
    const r = await context.request.get(url(p), { headers: { Host: `rebound.example:${port}` }, failOnStatusCode: false });
    assert.equal(r.status(), 421, p);
  }
  const probe = await context.request.get(url("/healthz"), { headers: { Host: `10.11.12.13:${port}` } });
  assert.equal(probe.status(), 200);
  const local = await context.request.get(url("/queues"), { headers: { Host: `localhost:${port}` } });
  assert.equal(local.status(), 200);
});

test("a forged flash message is not shown", async () => {
  await page.goto(url("/queues?flash=" + encodeURIComponent("Session expired: call +1 555 0100")));
  assert.equal(await page.locator(".flash").count(), 0);
});

test("a dead-letter group replays after confirmation", async () => {
  await page.goto(url("/dead"));
  const group = page.locator('#dead-groups tr[data-kind="webhook.deliver"]');
  await group.waitFor();
  const before = Number((await group.locator("td.num").first().innerText()).replace(/,/g, ""));
  assert.ok(before > 0);
  await shot("dead");
  await Promise.all([page.waitForURL(/\/dead\/confirm\?/), group.locator("a", { hasText: "Replay" }).click()]);
  assert.match(await page.locator("h1").innerText(), new RegExp(`Replay ${before} dead letters`));
  await shot("dead-confirm");
  await Promise.all([page.waitForURL(/\/dead\?flash=/), page.click("#confirm-button")]);
  assert.match(await page.locator(".flash").innerText(), /replaying/);
  // The replay trickles in the background; reload until it is done.
  for (let i = 0; i < 40; i++) {
    if (/done/.test(await page.locator("#replays").innerText())) break;
    await page.waitForTimeout(500);
    await page.goto(url("/dead"));
  }
  assert.match(await page.locator("#replays").innerText(), /done/);
  assert.equal(await page.locator('#dead-groups tr[data-kind="webhook.deliver"]').count(), 0);
  await page.goto(url(`/jobs?kind=webhook.deliver&state=ready`));
  assert.equal(await page.locator("#jobs-table tbody tr a").count(), before);
});

test("a queue pauses and resumes", async () => {
  await page.goto(url("/queues"));
  const row = page.locator('#queues-table tr[data-queue="hooks"]');
  await row.waitFor();
  await Promise.all([page.waitForURL(/\/queues\?flash=/), row.locator("button", { hasText: "Pause" }).click()]);
  await page.locator('#queues-table tr[data-queue="hooks"] .badge.paused').waitFor();
  await shot("queues");
  await Promise.all([page.waitForURL(/\/queues\?flash=/),
    page.locator('#queues-table tr[data-queue="hooks"] button', { hasText: "Resume" }).click()]);
  assert.equal(await page.locator('#queues-table tr[data-queue="hooks"] .badge.paused').count(), 0);
});

test("schedules, limits, workers and health render", async () => {
  await page.goto(url("/schedules"));
  assert.match(await page.locator("#schedules-table").innerText(), /nightly-report/);
  await shot("schedules");
  await page.goto(url("/workers"));
  assert.ok((await page.locator("#workers-table tbody tr").count()) > 0);
  await shot("workers");
  await page.goto(url("/health"));
  await page.locator('[data-check="dead_tuples"]').waitFor();
  await shot("health");
  await page.goto(url("/limits"));
  await page.locator("#limits-table").waitFor();
  await shot("limits");
  for (const p of ["/schedules", "/limits", "/workers", "/health", "/queues", "/dead"]) {
    await page.goto(url(p));
    assert.ok(!(await page.content()).includes(marker), `a payload appears on ${p}`);
  }
});

test("the static assets are served, the favicon included", async () => {
  for (const [p, type] of [["/static/favicon.svg", /image\/svg\+xml/], ["/static/htmx.min.js", /javascript/]]) {
    const r = await page.request.get(url(p));
    assert.equal(r.status(), 200, p);
    assert.match(r.headers()["content-type"] ?? "", type, p);
  }
});

const multiBase = process.env.SKIPLOCK_E2E_MULTI_URL;
const multi = (p) => new URL(p.replace(/^\//, ""), multiBase).toString();

test("over three databases: the overview adds up, and a database's pages and actions are its own",
  { skip: !multiBase && "SKIPLOCK_E2E_MULTI_URL is not set" }, async () => {
  await page.goto(multi("/"));
  const rows = page.locator("#database-table tbody tr");
  await rows.first().waitFor();
  assert.equal(await rows.count(), 3);
  const figures = async (row) => {
    const out = {};
    for (const cell of await row.locator("[data-col]").all()) {
      out[await cell.getAttribute("data-col")] = Number(await cell.innerText());
    }
    return out;
  };
  // One render: the sums line is the lines added up.
  const sums = {};
  for (const row of await rows.all()) {
    for (const [k, v] of Object.entries(await figures(row))) sums[k] = (sums[k] ?? 0) + v;
  }
  assert.deepEqual(await figures(page.locator("#database-table tfoot tr")), sums);
  assert.ok(sums.ready + sums.scheduled + sums.running > 600, "the two seeded databases' jobs are in the sums");
  for (const id of ["panel-lag", "panel-claims", "panel-running", "panel-dead", "panel-vacuum"]) {
    await page.locator(`#${id}`).waitFor({ state: "visible" });
  }
  await page.locator("#chart-throughput canvas").waitFor({ state: "attached" });
  assert.ok(!(await page.content()).includes(marker), "a payload appears on the overview");
  assert.ok(!(await page.content()).includes("postgres://"), "a URL appears on the overview");
  await page.screenshot({ path: process.env.SKIPLOCK_E2E_MULTI_SCREENSHOT ?? join(artifacts, "databases.png"), fullPage: true });
  await shot("databases");

  // The second database's pages: its overview, then its queues, where a
  // pause reaches it alone.
  const second = rows.nth(1);
  const label = await second.getAttribute("data-db");
  assert.match(label, /_b$/);
  await Promise.all([page.waitForURL(/\/db\/[^/]+\/$/), second.locator("a").first().click()]);
  assert.equal(await page.locator("#database-selector a.active").innerText(), label);
  assert.equal(await page.locator("#database-table").count(), 0);
  await Promise.all([page.waitForURL(/\/db\/[^/]+\/queues$/), page.click("header nav a[href$='/queues']")]);
  const mail = page.locator('#queues-table tr[data-queue="mail"]');
  await mail.waitFor();
  await Promise.all([page.waitForURL(/\/db\/[^/]+\/queues\?flash=/), mail.locator("button", { hasText: "Pause" }).click()]);
  await page.locator('#queues-table tr[data-queue="mail"] .badge.paused').waitFor();
  await shot("databases-queues");
  for (const other of [0, 2]) {
    await page.goto(multi("/"));
    const link = page.locator("#database-table tbody tr").nth(other).locator("a").first();
    await Promise.all([page.waitForURL(/\/db\/[^/]+\/$/), link.click()]);
    await Promise.all([page.waitForURL(/\/queues$/), page.click("header nav a[href$='/queues']")]);
    assert.equal(await page.locator(".badge.paused").count(), 0, "a pause reached another database");
  }
  await page.goto(multi(`/queues?db=${encodeURIComponent(label)}`));
  assert.match(page.url(), /\/db\/[^/]+\/queues$/);
  await Promise.all([page.waitForURL(/\/queues\?flash=/),
    page.locator('#queues-table tr[data-queue="mail"] button', { hasText: "Resume" }).click()]);
  assert.equal(await page.locator('#queues-table tr[data-queue="mail"] .badge.paused').count(), 0);

  // An unscoped page asks which database; an unscoped action is refused.
  await page.goto(multi("/jobs?state=ready"));
  assert.equal(await page.locator("#choose-database li").count(), 3);
  const refused = await context.request.post(multi("/queues/pause"), { form: { queue: "mail" }, failOnStatusCode: false, maxRedirects: 0 });
  assert.equal(refused.status(), 400);
});

test("no console errors, failed requests or CSP violations", () => {
  assert.deepEqual(problems, []);
});
