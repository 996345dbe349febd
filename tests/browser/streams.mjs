// WebSockets and Server-Sent Events in a real browser: headless Debian Chromium driven by
// playwright-core, against examples/websocket-chat served by filerouter.
// Usage: node streams.mjs BASE_URL   (CHROMIUM=/usr/bin/chromium by default)
// Run by tests/websockets.rs against `filerouter dev` and `filerouter run`. Exits non-zero on
// failure.
import { chromium } from "playwright-core";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [base] = process.argv.slice(2);
if (!base) {
  console.error("usage: node streams.mjs BASE_URL");
  process.exit(2);
}
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const profile = mkdtempSync(join(tmpdir(), "filerouter-chromium-"));
const step = (what) => console.log("- " + what);
const room = "room" + Math.floor(Math.random() * 1e9);

const context = await chromium.launchPersistentContext(profile, {
  executablePath,
  headless: true,
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});

try {
  const problems = [];
  const open = async (name) => {
    const page = await context.newPage();
    page.on("pageerror", (err) => problems.push(`${name}: page error: ${err.message}`));
    await page.goto(base + "/index.html");
    await page.fill("#room", room);
    await page.fill("#name", name);
    await page.click("#join");
    await page.waitForFunction(() => document.getElementById("log").textContent.includes("joined"), null, { timeout: 15000 });
    return page;
  };

  step("a WebSocket echoes in the page's own script");
  const first = await open("ann");
  const echoed = await first.evaluate(() => new Promise((resolve, reject) => {
    const socket = new WebSocket(`ws://${location.host}/echo`);
    socket.onopen = () => socket.send("ping from Chromium");
    socket.onmessage = (event) => { resolve(event.data); socket.close(); };
    socket.onerror = () => reject(new Error("the echo socket failed"));
    setTimeout(() => reject(new Error("no echo in 10 s")), 10000);
  }));
  assert.equal(echoed, "Message text was: ping from Chromium");

  step("an EventSource follows the room");
  const second = await open("bob");
  await second.evaluate((room) => {
    window.events = [];
    window.source = new EventSource(`/chat/${room}/events`);
    window.source.addEventListener("message", (event) => window.events.push({ id: event.lastEventId, data: JSON.parse(event.data) }));
  }, room);
  await second.waitForFunction(() => window.source.readyState === EventSource.OPEN, null, { timeout: 10000 });

  step("what one tab says, the other tab and the EventSource see");
  await first.fill("#text", "hello from ann");
  await first.click("#say button");
  await second.waitForFunction(() => document.getElementById("log").textContent.includes("ann: hello from ann"), null, { timeout: 15000 });
  await second.waitForFunction(() => window.events.some((e) => e.data.text === "hello from ann"), null, { timeout: 15000 });
  const event = await second.evaluate(() => window.events.find((e) => e.data.text === "hello from ann"));
  assert.equal(event.data.from, "ann");
  assert.match(event.id, /^[0-9]+$/);

  step("closing a tab is announced to the room");
  await first.close();
  await second.waitForFunction(() => document.getElementById("log").textContent.includes("ann left"), null, { timeout: 15000 });
  await second.evaluate(() => window.source.close());

  assert.deepEqual(problems, []);
  console.log("ok");
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
