// The chat page in a real headless Chromium (Debian's, driven by playwright-core): it loads with no network but the
// server, streams a reply, stops one mid-stream, shows a message holding HTML as text, and starts a new chat.
// Usage: node ui_test.mjs URL SCREENSHOT_DIR
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const [url, shots] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"],
});
let passed = 0;
let failed = 0;
const check = async (name, fn) => {
  try {
    await fn();
    passed++;
  } catch (e) {
    failed++;
    console.log(`FAIL: ${name}: ${e.stack || e}`);
  }
};
const page = await browser.newPage({ viewport: { width: 1000, height: 700 } });
const offsite = [];
page.on("request", (r) => { if (!r.url().startsWith(url)) offsite.push(r.url()); });
const errors = [];
page.on("pageerror", (e) => errors.push(String(e)));
let dialogs = 0;
page.on("dialog", async (d) => { dialogs++; await d.dismiss(); });

await check("the page loads and names the model", async () => {
  await page.goto(url);
  await page.waitForFunction(() => document.getElementById("model").textContent.includes("context"));
});

await check("a streamed reply", async () => {
  await page.click("#toggle-settings");
  await page.fill("#max-tokens", "12");
  await page.fill("#temperature", "0");
  await page.fill("#input", "Hello there");
  await page.click("#send");
  await page.waitForSelector(".msg.assistant .stats:not(:empty)");
  const user = await page.textContent(".msg.user .content");
  assert.equal(user, "Hello there");
  const stats = await page.textContent(".msg.assistant .stats");
  assert.match(stats, /TTFT \d+ ms/);
  assert.match(stats, /tok\/s/);
  assert.match(stats, /12 tokens/);
  const reply = await page.textContent(".msg.assistant .content");
  assert.ok(reply.length > 0);
  await page.screenshot({ path: `${shots}/web-chat.png` });
});

await check("stop ends a reply mid-stream", async () => {
  // Over a slow link (16 KB/s, as a poor mobile connection) the reply takes many seconds to arrive however fast the
  // machine generates it, so the click on Stop lands mid-stream.
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Network.enable");
  await cdp.send("Network.emulateNetworkConditions",
                 { offline: false, latency: 20, downloadThroughput: 16 * 1024, uploadThroughput: -1 });
  try {
    await page.fill("#max-tokens", "2000");
    await page.fill("#input", "Tell me a long story");
    await page.click("#send");
    await page.waitForFunction(
      () => document.querySelectorAll(".msg.assistant")[1].querySelector(".content").textContent.length > 0);
    await page.click("#stop");
    await page.waitForSelector("#send:not([hidden])");
    const stats = await page.locator(".msg.assistant .stats").nth(1).textContent();
    assert.match(stats, /stopped/);
    const shown = () => page.locator(".msg.assistant .content").nth(1).evaluate((e) => e.textContent.length);
    const atStop = await shown();
    await page.waitForTimeout(500);
    assert.equal(await shown(), atStop, "the reply grew after Stop");
  } finally {
    await cdp.send("Network.emulateNetworkConditions",
                   { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 });
  }
});

await check("HTML in a message is shown as text", async () => {
  await page.fill("#max-tokens", "2");
  const evil = '<img src=x onerror="window.pwned=1;alert(1)"><b>bold</b>';
  await page.fill("#input", evil);
  await page.click("#send");
  await page.waitForFunction(() => document.querySelectorAll(".msg.user").length === 3);
  await page.waitForSelector("#send:not([hidden])");
  const shown = await page.locator(".msg.user .content").nth(2).textContent();
  assert.equal(shown, evil);
  assert.equal(await page.locator(".msg img").count(), 0);
  assert.equal(await page.locator(".msg b").count(), 0);
  assert.equal(await page.evaluate(() => window.pwned), undefined);
  assert.equal(dialogs, 0);
  await page.screenshot({ path: `${shots}/web-chat-escaped.png` });
});

await check("new chat clears the conversation", async () => {
  await page.click("#new-chat");
  assert.equal(await page.locator(".msg").count(), 0);
});

await check("no request left the server; no script error", async () => {
  assert.deepEqual(offsite, []);
  assert.deepEqual(errors, []);
});

await browser.close();
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
