// The /docs page in a real browser: headless Debian Chromium driven by playwright-core.
// Usage: node docs-page.mjs BASE_URL ARTIFACT_DIR [SECURED_URL]   (CHROMIUM=/usr/bin/chromium by default)
// Run by tests/docs.rs against `filerouter dev` on examples/hello, and on SECURED_URL a ported
// app with a bearer dependency (tests/docs.rs `secured()`). Exits non-zero on failure.
import { chromium } from "playwright-core";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [base, artifacts, secured] = process.argv.slice(2);
if (!base || !artifacts) {
  console.error("usage: node docs-page.mjs BASE_URL ARTIFACT_DIR");
  process.exit(2);
}
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const profile = mkdtempSync(join(tmpdir(), "filerouter-chromium-"));
const step = (what) => console.log("- " + what);

const context = await chromium.launchPersistentContext(profile, {
  executablePath,
  headless: true,
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
  viewport: { width: 1280, height: 900 },
  colorScheme: "light",
});

try {
  const page = context.pages()[0] || (await context.newPage());
  const problems = [];
  page.on("pageerror", (err) => problems.push("page error: " + err.message));
  // Statuses the try-it requests ask for (a 422) are not page errors; "Failed to load resource"
  // is how Chromium logs them, so those lines are left out.
  page.on("console", (msg) => {
    if (msg.type() === "error" && !msg.text().startsWith("Failed to load resource")) problems.push("console error: " + msg.text());
  });
  // Self-contained: the page asks for nothing but the server under test.
  page.on("request", (req) => {
    const own = req.url().startsWith(base) || (secured && req.url().startsWith(secured));
    if (!own && !req.url().startsWith("data:")) problems.push("outside request: " + req.url());
  });

  const document = await (await fetch(base + "/openapi.json")).json();
  const operations = [];
  for (const [path, item] of Object.entries(document.paths)) {
    for (const [method, op] of Object.entries(item)) operations.push({ path, method: method.toUpperCase(), id: op.operationId });
  }
  assert.ok(operations.length >= 5, "the example has at least five operations");

  step("the page renders every route of /openapi.json");
  const response = await page.goto(base + "/docs", { waitUntil: "load" });
  assert.equal(response.status(), 200);
  const title = await page.locator("h1").textContent();
  assert.equal(title, document.info.title);
  for (const { path, method, id } of operations) {
    // The bare path of an optional catch-all is listed under its route.
    if (id.endsWith("_bare")) continue;
    const op = page.locator(`article.op[id="${id}"]`);
    assert.ok(await op.isVisible(), `${method} ${path} is not shown`);
    assert.equal((await op.locator(".method").first().textContent()).trim(), method);
    const shown = (await op.locator("summary .path").textContent()).replace(/:[a-z?]+\}/g, "}").replace(/\?.*$/, "");
    assert.equal(shown, path, `${method} ${path} is shown as ${shown}`);
  }
  const total = await page.locator("article.op").count();
  assert.equal(await page.locator("#stat-total").textContent(), String(total));

  step("the filter hides routes that do not match");
  await page.locator("#filter").fill("files");
  const visible = await page.locator("article.op:visible").count();
  assert.ok(visible >= 1 && visible < total, `filter "files" shows ${visible} of ${total}`);
  for (const text of await page.locator("article.op:visible summary .path").allTextContents()) {
    assert.ok(text.includes("files"), `"${text}" does not match "files"`);
  }
  await page.locator("#filter").fill("zzz-no-such-route");
  assert.equal(await page.locator("article.op:visible").count(), 0);
  assert.ok(await page.locator("#nothing").isVisible(), "the empty message shows");
  await page.locator("#filter").fill("");
  assert.equal(await page.locator("article.op:visible").count(), total);

  step("a method chip narrows to that method");
  await page.locator('.bar-row[data-method="POST"]').click();
  const posts = await page.locator("article.op:visible").count();
  assert.equal(posts, operations.filter((o) => o.method === "POST" && !o.id.endsWith("_bare")).length);
  await page.locator('.bar-row[data-method="POST"]').click();

  step("try it: a request to a dynamic route shows the handler's JSON");
  const user = page.locator('article.op[id="get_users_user_id"]');
  await user.locator("summary").click();
  await user.locator('input[name="path:user_id"]').fill("42");
  await user.locator('button[type="submit"]').click();
  const body = user.locator(".result pre.body");
  await body.waitFor({ state: "visible", timeout: 15000 });
  assert.deepEqual(JSON.parse(await body.textContent()), { id: 42, name: "user42" });
  assert.match(await user.locator(".result .status").textContent(), /^200/);
  assert.match(await user.locator(".result pre.headers").textContent(), /content-type: application\/json/);

  step("try it: a bad value shows FastAPI's 422");
  await user.locator('input[name="path:user_id"]').fill("abc");
  await user.locator('button[type="submit"]').click();
  await page.waitForFunction(() => /^422/.test(document.querySelector("#get_users_user_id .result .status")?.textContent || ""));
  assert.equal(JSON.parse(await body.textContent()).detail[0].type, "int_parsing");

  step("try it: query parameters and a catch-all");
  const files = page.locator('article.op[id="get_files_path"]');
  await files.locator("summary").click();
  await files.locator('input[name="path:path"]').fill("docs/a b/c.txt");
  await files.locator('button[type="submit"]').click();
  await files.locator(".result pre.body").waitFor({ state: "visible", timeout: 15000 });
  assert.deepEqual(JSON.parse(await files.locator(".result pre.body").textContent()), { segments: ["docs", "a b", "c.txt"] });
  const users = page.locator('article.op[id="get_users"]');
  if (await users.count()) {
    await users.locator("summary").click();
    await users.locator('input[name="query:limit"]').fill("2");
    await users.locator('button[type="submit"]').click();
    await users.locator(".result pre.body").waitFor({ state: "visible", timeout: 15000 });
    assert.equal(JSON.parse(await users.locator(".result pre.body").textContent()).items.length, 2);
  }

  step("try it: a JSON body");
  const items = page.locator('article.op[id="post_items"]');
  await items.locator("summary").click();
  await items.locator('textarea[name="body"]').fill('{"name": "pen", "price": 2}');
  await items.locator('button[type="submit"]').click();
  await items.locator(".result pre.body").waitFor({ state: "visible", timeout: 15000 });
  assert.deepEqual(JSON.parse(await items.locator(".result pre.body").textContent()), { received: { name: "pen", price: 2 } });

  await user.locator('input[name="path:user_id"]').fill("42");
  await user.locator('button[type="submit"]').click();
  await page.waitForFunction(() => /^200/.test(document.querySelector("#get_users_user_id .result .status")?.textContent || ""));
  // The screenshot: the top of the page, with one operation tried.
  await page.evaluate(() => {
    for (const d of document.querySelectorAll(".op details")) d.open = d.closest(".op").id === "get_users_user_id";
    window.scrollTo(0, 0);
  });
  await page.screenshot({ path: join(artifacts, "docs-page.png"), fullPage: true });

  step("dark mode: the system preference, and the toggle");
  const background = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  const light = await background();
  await page.emulateMedia({ colorScheme: "dark" });
  const dark = await background();
  assert.notEqual(light, dark, "prefers-color-scheme: dark changes the page");
  await page.locator("#theme").click();
  assert.equal(await background(), light, "the toggle switches back to light");
  await page.locator("#theme").click();
  assert.equal(await background(), dark);
  await page.screenshot({ path: join(artifacts, "docs-page-dark.png") });

  step("phone width: nothing overflows sideways");
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(base + "/docs#get_users_user_id", { waitUntil: "load" });
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(width <= 390, `the page is ${width}px wide at 390px`);
  assert.ok(await page.locator('article.op[id="get_users_user_id"] details[open]').count(), "a #link opens its operation");
  await page.screenshot({ path: join(artifacts, "docs-page-phone.png") });

  if (secured) {
    await page.setViewportSize({ width: 1280, height: 900 });
    await page.emulateMedia({ colorScheme: "light" });
    await securedApp(page);
  }

  assert.deepEqual(problems, []);
  console.log(`ok: ${operations.length} operations, screenshots in ${artifacts}`);
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}

// The ported app with a bearer dependency: the Authorize button, and "Try it" sending the
// token (the route echoes the token it got), typed in or fetched through the password flow.
async function securedApp(page) {
  const status = (id) => page.evaluate((id) => document.querySelector(`[id="${id}"] .result .status`)?.textContent || "", id);
  // Send the operation's form and wait for the answer of `expected` status (the previous
  // answer is cleared first, so an equal status is a new one).
  async function send(op, expected) {
    const id = await op.getAttribute("id");
    await page.evaluate((id) => { const r = document.querySelector(`[id="${id}"] .result`); r.hidden = true; r.textContent = ""; }, id);
    await op.locator('button[type="submit"]').click();
    await page.waitForFunction(([id, expected]) => new RegExp("^" + expected).test(document.querySelector(`[id="${id}"] .result .status`)?.textContent || ""), [id, String(expected)], { timeout: 15000 });
    return JSON.parse(await op.locator(".result pre.body").textContent());
  }

  step("secured app: /openapi.json declares the scheme, the page shows Authorize");
  const openapi = await (await fetch(secured + "/openapi.json")).json();
  assert.equal(openapi.components.securitySchemes.OAuth2PasswordBearer.type, "oauth2");
  await page.goto(secured + "/docs", { waitUntil: "load" });
  const authorize = page.locator("#authorize");
  assert.ok(await authorize.isVisible(), "the Authorize button shows");
  assert.equal((await authorize.textContent()).trim(), "Authorize");

  step("secured app: grouped by tag, openapi_tags first, then the path's group");
  const headings = (await page.locator("section.group h2").allTextContents()).map((h) => h.trim());
  assert.deepEqual(headings, ["users", "auth", "/items", "/keys", "/legacy"]);
  assert.ok(await page.locator('[id="get_legacy"] .deprecated-badge').isVisible(), "deprecated is marked");

  step("secured app: try it without a token is FastAPI's 401");
  const me = page.locator('article.op[id="read_own_token"]');
  await me.locator("summary").click();
  assert.match(await me.locator(".auth-note").textContent(), /not authorized yet/);
  assert.deepEqual(await send(me, 401), { detail: "Not authenticated" });
  assert.match(await me.locator(".result pre.headers").textContent(), /www-authenticate: Bearer/i);

  step("secured app: Authorize with a token, and try it sends it");
  await authorize.click();
  const dialog = page.locator("#auth-dialog");
  await dialog.waitFor({ state: "visible" });
  const oauth = dialog.locator('form.scheme[data-scheme="OAuth2PasswordBearer"]');
  await oauth.locator('input[name="token"]').fill("secret-token-123");
  await oauth.locator('button[type="submit"]').click();
  await oauth.locator(".auth-state", { hasText: "authorized" }).waitFor({ timeout: 5000 });
  await page.screenshot({ path: join(artifacts, "docs-page-authorize.png") });
  await dialog.locator(".auth-close").first().click();
  await dialog.waitFor({ state: "hidden" });
  assert.match(await me.locator(".auth-note").textContent(), /Sends the credentials of OAuth2PasswordBearer/);
  assert.match(await me.locator(".url").textContent(), /^GET \/users\/me$/);
  assert.deepEqual(await send(me, 200), { token: "secret-token-123" });
  assert.match(await status("read_own_token"), /^200/);

  step("secured app: the password flow trades a user name and password for a token");
  await authorize.click();
  await dialog.waitFor({ state: "visible" });
  await oauth.locator(".auth-clear").click();
  assert.equal(await oauth.locator(".auth-state").textContent(), "");
  await oauth.locator('input[name="username"]').fill("alice");
  await oauth.locator('input[name="password"]').fill("wrong");
  await oauth.locator('button[type="submit"]').click();
  await oauth.locator(".auth-error").waitFor({ state: "visible", timeout: 15000 });
  assert.match(await oauth.locator(".auth-error").textContent(), /400: Incorrect username or password/);
  await oauth.locator('input[name="password"]').fill("secret");
  await oauth.locator('button[type="submit"]').click();
  await oauth.locator(".auth-state", { hasText: "authorized" }).waitFor({ timeout: 15000 });
  await dialog.locator(".auth-close").first().click();
  await dialog.waitFor({ state: "hidden" });
  assert.deepEqual(await send(me, 200), { token: "tok-alice" });

  step("secured app: an operation that requires the scheme through a sub-dependency sends it too");
  const items = page.locator('article.op[id="get_users_me_items"]');
  await items.locator("summary").click();
  assert.deepEqual(await send(items, 200), [{ owner: "alice", item: "pen" }]);

  step("secured app: the credentials last for the tab (a reload keeps them)");
  await page.reload({ waitUntil: "load" });
  const again = page.locator('article.op[id="read_own_token"]');
  await again.locator("summary").click();
  assert.deepEqual(await send(again, 200), { token: "tok-alice" });
  // Operations that require nothing send nothing.
  assert.equal(await page.locator('[id="get_items"] .auth-note').count(), 0);
}
