// The chat page (GET /) in a real headless Chromium (Debian's chromium, driven by puppeteer-core):
// it loads with its Content-Security-Policy and no console error or CSP violation, streams an
// answer into a conversation that a reload finds again, honours its settings, regenerates, stops
// mid-stream (the server cancels the request), asks for the API key on a 401, renders reasoning
// folded, renders Markdown without letting model output inject markup, and has a dark look. Every
// request the page makes goes to the server's own origin. `--no-webui` leaves / a JSON 404.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, haveModel, metric, modelsDir, waitFor, vkllmExe } from './harness.mjs';

const chromium = process.env.VKLLM_CHROMIUM ?? '/usr/bin/chromium';
let puppeteer;
try {
  puppeteer = (await import('puppeteer-core')).default;
} catch (e) {
  throw new Error(`the npm package 'puppeteer-core' is not installed: run \`npm ci --prefix tests/e2e\` (scripts/install_deps.sh does): ${e.message}`);
}

const skip = (!haveModel() && 'stories260K.gguf or the vkllm binary is missing') ||
  (!existsSync(chromium) && `${chromium} is missing (scripts/install_deps.sh installs Debian's chromium)`);

const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

let browser;
let server;  // stories260K, no key
let tmp;

async function stopChecked(s) {
  const r = await s.stop();
  assert.equal(r.code, 0, s.stderr);
  assert.deepEqual(r.validationErrors, []);
}

before(async () => {
  if (skip) return;
  tmp = mkdtempSync(path.join(os.tmpdir(), 'vkllm-webui-'));
  server = await startServer(['--parallel', '2']);
  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    // Chromium's sandbox cannot start as root (CI containers); the page is our own either way.
    args: [...(process.getuid?.() === 0 ? ['--no-sandbox'] : []), '--disable-gpu', '--no-first-run'],
    userDataDir: path.join(tmp, 'profile'),
  });
});

after(async () => {
  await browser?.close();
  if (server) await stopChecked(server);
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

// A page on `url` that records what must not happen: console errors, uncaught exceptions, CSP
// violations, failed requests, and requests to any other origin. `allow(text)` excuses console
// errors a test expects (Chromium logs every 401 response as one).
async function openPage(url, { scheme = 'light', allow = () => false, init } = {}) {
  const page = await browser.newPage();
  const problems = [];
  const requests = [];
  const origin = new URL(url).origin;
  page.on('console', (m) => {
    if (m.type() === 'error' && !allow(m.text())) problems.push(`console error: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('request', (r) => {
    requests.push(r.url());
    // data: URLs (attached images' thumbnails) are read from the page itself, not fetched.
    if (!r.url().startsWith('data:') && new URL(r.url()).origin !== origin) problems.push(`request to another origin: ${r.url()}`);
  });
  page.on('requestfailed', (r) => {
    // Stop aborts the chat request on purpose.
    if (!(r.failure()?.errorText === 'net::ERR_ABORTED' && r.url().endsWith('/v1/chat/completions'))) {
      problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`);
    }
  });
  await page.evaluateOnNewDocument(() => {
    window.cspViolations = [];
    document.addEventListener('securitypolicyviolation', (e) => {
      window.cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`);
    });
  });
  if (init) await page.evaluateOnNewDocument(init);
  await page.emulateMediaFeatures([{ name: 'prefers-color-scheme', value: scheme }]);
  const response = await page.goto(url, { waitUntil: 'load' });
  await ready(page);
  return {
    page,
    response,
    requests,
    // Fails naming everything that went wrong on the page so far.
    async check() {
      const csp = await page.evaluate(() => window.cspViolations);
      assert.deepEqual([...problems, ...csp.map((v) => `CSP violation: ${v}`)], []);
    },
  };
}

async function ready(page) {
  await page.waitForSelector('body[data-ready="true"]', { timeout: 30000 });
}

const text = (page, selector) => page.$eval(selector, (e) => e.textContent);
// What the person sees (a <br> is a line break).
const shown = (page, selector) => page.$eval(selector, (e) => e.innerText);
const count = (page, selector) => page.$$eval(selector, (es) => es.length);
const visible = (page, selector) => page.$eval(selector, (e) => !e.hidden && e.checkVisibility());
const squash = (s) => s.replace(/\s+/g, ' ').trim();

// Types `message` into the composer and sends it with Enter; resolves once its answer has begun.
async function send(page, message) {
  const before = await count(page, '.message');
  await page.click('#prompt');
  await page.keyboard.type(message);
  await page.keyboard.press('Enter');
  await page.waitForFunction((n) => document.querySelectorAll('.message').length >= n + 2, {}, before);
}

// Waits until no answer streams (Send is back).
async function answered(page, timeout = 60000) {
  await page.waitForFunction(() => !document.body.classList.contains('running') &&
    !document.getElementById('send').hidden, { timeout });
}

async function setSettings(page, values) {
  await page.click('#settings-button');
  await page.waitForSelector('#settings[open]');
  for (const [name, value] of Object.entries(values)) {
    await page.$eval(`#settings-form [name="${name}"]`, (e, v) => { e.value = v; }, value);
  }
  await page.click('#settings-save');
  await page.waitForFunction(() => !document.getElementById('settings').open);
}

test('GET / serves the page with its security headers, gzip when taken, 304 on a matching ETag', { skip }, async () => {
  for (const p of ['/', '/assets/app.js', '/assets/style.css', '/assets/marked.min.js', '/assets/purify.min.js']) {
    const plain = await fetch(`${server.url}${p}`, { headers: { 'Accept-Encoding': 'identity' } });
    assert.equal(plain.status, 200, p);
    assert.equal(plain.headers.get('content-security-policy'), CSP, p);
    assert.equal(plain.headers.get('x-content-type-options'), 'nosniff', p);
    assert.equal(plain.headers.get('content-encoding'), null, p);
    assert.match(plain.headers.get('content-type'), p.endsWith('.css') ? /^text\/css/ : p.endsWith('.js') ? /^text\/javascript/ : /^text\/html/);
    const body = await plain.text();
    assert.ok(body.length > 100, p);
    // Node's fetch takes gzip and decodes it: the same text, sent compressed.
    const gz = await fetch(`${server.url}${p}`, { headers: { 'Accept-Encoding': 'gzip' } });
    assert.equal(gz.headers.get('content-encoding'), 'gzip', p);
    assert.ok(Number(gz.headers.get('content-length')) < Buffer.byteLength(body), p);
    assert.equal(await gz.text(), body, p);
    const again = await fetch(`${server.url}${p}`, { headers: { 'If-None-Match': gz.headers.get('etag') } });
    assert.equal(again.status, 304, p);
    assert.equal(again.headers.get('content-security-policy'), CSP, p);
  }
  // No file holds a source-map comment that developer tools would follow to a missing file.
  for (const p of ['/assets/marked.min.js', '/assets/purify.min.js']) {
    assert.doesNotMatch(await (await fetch(`${server.url}${p}`)).text(), /sourceMappingURL/, p);
  }
  const missing = await fetch(`${server.url}/assets/nothing.js`);
  assert.equal(missing.status, 404);
  assert.equal((await missing.json()).error.code, 'unknown_url');
});

test('a message gets an answer with the settings sent; Regenerate; a reload finds the conversation', { skip }, async () => {
  const { page, response, requests, check } = await openPage(server.url);
  assert.equal(response.headers()['content-security-policy'], CSP);
  const models = await (await fetch(`${server.url}/v1/models`)).json();
  assert.equal(await text(page, '#model-name'), models.data[0].id);

  await setSettings(page, { temperature: '0', max_tokens: '40', top_p: '', system: '' });
  await send(page, 'Once upon a time');
  await answered(page);

  // The same request by hand, greedy: the page sent temperature 0 and max_tokens 40.
  const direct = await (await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'Once upon a time' }], temperature: 0, max_tokens: 40 }),
  })).json();
  const expected = squash(direct.choices[0].message.content);
  assert.equal(direct.choices[0].finish_reason, 'length');
  assert.equal(squash(await shown(page, '.message.assistant .content')), expected);
  assert.match(await text(page, '.message.assistant .note'), /token limit/);
  assert.equal(squash(await text(page, '.message.user .content')), 'Once upon a time');

  // Regenerate replaces the answer (greedy: with the same text).
  await page.click('.message.assistant .regenerate');
  await answered(page);
  assert.equal(await count(page, '.message'), 2);
  assert.equal(squash(await shown(page, '.message.assistant .content')), expected);

  await page.reload({ waitUntil: 'load' });
  await ready(page);
  assert.equal(await count(page, '#conversations li'), 1);
  assert.equal(await text(page, '#conversations li .open'), 'Once upon a time');
  assert.equal(await count(page, '.message'), 2);
  assert.equal(squash(await shown(page, '.message.assistant .content')), expected);
  // The settings stayed too.
  await page.click('#settings-button');
  assert.equal(await page.$eval('#settings-form [name="max_tokens"]', (e) => e.value), '40');
  await page.click('#settings-cancel');

  // A new chat, then the old one again from the list.
  await page.click('#new-chat');
  assert.equal(await count(page, '.message'), 0);
  await send(page, 'The cat');
  await answered(page);
  assert.equal(await count(page, '#conversations li'), 2);
  await page.click('#conversations li:last-child .open');
  await page.waitForFunction(() => document.querySelector('.message.user .content')?.textContent === 'Once upon a time');

  await check();
  assert.ok(requests.some((u) => u.endsWith('/v1/chat/completions')));
  assert.ok(requests.some((u) => u.endsWith('/assets/marked.min.js')));
  await page.close();
});

test('a request the server refuses shows its message under the answer', { skip }, async () => {
  // Chromium logs the 400 response itself as a console error: expected here.
  const { page, check } = await openPage(server.url, { allow: (t) => /status of 400/.test(t) });
  await page.click('#new-chat');
  await setSettings(page, { system: 'Once upon a time there was a cat. '.repeat(300) });
  try {
    await send(page, 'Hi');
    await answered(page);
    assert.match(await text(page, '.message.assistant .note'), /^Error 400: .*context/);
    assert.ok(await page.$eval('.message.assistant .note', (e) => e.classList.contains('error')));
  } finally {
    await setSettings(page, { system: '' });
  }
  await check();
  await page.close();
});

test('an answer streams; Stop ends it mid-stream, the server cancels it, and the partial answer is kept', { skip }, async () => {
  // A random model on a 32000-token vocabulary: greedy, it runs to max_tokens rather than ending.
  const model = path.join(tmp, 'random.gguf');
  await vkllmExe(['gen-model', '--arch', 'llama', '--dim', '128', '--layers', '4', '--heads', '4', '--ffn', '256',
    '--vocab-from', path.join(modelsDir, 'ggml-vocab-llama-spm.gguf'), '--type', 'f32', '--ctx', '4096', '-o', model]);
  const slow = await startServer(['--parallel', '1', '--ctx', '4096'], { modelPath: model });
  try {
    const { page, check } = await openPage(slow.url);
    await setSettings(page, { temperature: '0', max_tokens: '4000' });
    await send(page, 'Hello');
    // The answer grows while it streams.
    const length = () => page.$eval('.message.assistant .content', (e) => e.textContent.length);
    await page.waitForFunction(() => document.querySelector('.message.assistant .content')?.textContent.length > 0,
      { timeout: 30000 });
    const first = await length();
    await page.waitForFunction((n) => document.querySelector('.message.assistant .content').textContent.length > n,
      { timeout: 30000 }, first);
    assert.ok(await visible(page, '#stop'));
    assert.equal(await page.$eval('#send', (e) => e.hidden), true);
    await page.click('#stop');
    await answered(page, 10000);
    assert.equal(await text(page, '.message.assistant .note'), 'Stopped.');
    const partial = await text(page, '.message.assistant .content');
    assert.ok(partial.length > 0);
    // The server saw the connection close and cancelled the generation.
    assert.ok(await waitFor(async () => (await metric(slow.url, 'vkllm_requests_cancelled_total')) === 1, 10000),
      'the server did not cancel the request');
    assert.equal(await metric(slow.url, 'vkllm_slots_busy'), 0);
    // The partial answer was saved with its note.
    await page.reload({ waitUntil: 'load' });
    await ready(page);
    assert.equal(await text(page, '.message.assistant .note'), 'Stopped.');
    assert.equal(await text(page, '.message.assistant .content'), partial);

    // A reload mid-stream: the server cancels, and the page finds what had come, marked as cut.
    await send(page, 'Again');
    await page.waitForFunction(() => document.querySelector('.message.assistant:last-child .content').textContent.length > 0,
      { timeout: 30000 });
    await new Promise((r) => setTimeout(r, 2500));  // the page stores a streaming answer every 2 s
    await page.reload({ waitUntil: 'load' });
    await ready(page);
    assert.equal(await count(page, '.message'), 4);
    assert.match(await text(page, '.message.assistant:last-child .note'), /^Interrupted/);
    assert.ok((await text(page, '.message.assistant:last-child .content')).length > 0);
    assert.ok(await waitFor(async () => (await metric(slow.url, 'vkllm_requests_cancelled_total')) === 2, 10000),
      'the server did not cancel the request of the page that went away');
    await check();
    await page.close();
  } finally {
    await stopChecked(slow);
  }
});

test('a server with --api-key: the page loads without it, asks for it on 401, keeps it', { skip }, async () => {
  const keyed = await startServer(['--api-key', 'sekrit-key']);
  try {
    assert.equal((await fetch(`${keyed.url}/`)).status, 200);
    assert.equal((await fetch(`${keyed.url}/assets/app.js`)).status, 200);
    assert.equal((await fetch(`${keyed.url}/v1/models`)).status, 401);
    const page = await browser.newPage();
    const errors = [];
    page.on('console', (m) => {
      // Chromium logs each 401 response; those are expected here.
      if (m.type() === 'error' && !/status of 401/.test(m.text())) errors.push(m.text());
    });
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(keyed.url, { waitUntil: 'load' });
    await page.waitForSelector('#key-dialog[open]');
    assert.equal(await text(page, '#key-error'), '');
    // A wrong key: asked again, with the server's message.
    await page.type('#key-input', 'wrong');
    await page.click('#key-ok');
    await page.waitForFunction(() => document.getElementById('key-error').textContent !== '');
    assert.match(await text(page, '#key-error'), /Incorrect API key/);
    assert.ok(await page.$eval('#key-dialog', (e) => e.open));
    await page.type('#key-input', 'sekrit-key');
    await page.click('#key-ok');
    await ready(page);
    assert.equal(await text(page, '#model-name'), 'stories260K.gguf');
    assert.equal(await page.evaluate(() => localStorage.getItem('vkllm.apiKey')), 'sekrit-key');
    await setSettings(page, { max_tokens: '48' });
    await send(page, 'Once upon a time');
    await answered(page);
    assert.ok((await text(page, '.message.assistant .content')).length > 0);
    assert.equal(await page.$eval('.message.assistant .note', (e) => e.classList.contains('error')), false);
    // Remembered: a reload asks nothing.
    await page.reload({ waitUntil: 'load' });
    await ready(page);
    assert.equal(await page.$eval('#key-dialog', (e) => e.open), false);
    // Forgotten from the settings, and declined: the page says what went wrong.
    await page.click('#settings-button');
    await page.click('#forget-key');
    await page.click('#settings-cancel');
    await send(page, 'Hello');
    await page.waitForSelector('#key-dialog[open]');
    await page.click('#key-cancel');
    await answered(page);
    assert.match(await text(page, '.message.assistant:last-child .note'), /^Error 401: You didn't provide an API key/);
    assert.deepEqual(errors, []);
    await page.close();
  } finally {
    await stopChecked(keyed);
  }
});

test('reasoning_content is shown folded above the answer; a stream error is shown', { skip }, async () => {
  const { page, check } = await openPage(server.url);
  // The page's own request, answered here as a reasoning model would (stories260K has no reasoning).
  await page.setRequestInterception(true);
  let reply = 'reasoning';
  page.on('request', (r) => {
    if (!r.url().endsWith('/v1/chat/completions')) return r.continue();
    const body = JSON.parse(r.postData());
    assert.equal(body.stream, true);
    const chunk = (delta, finish = null) => `data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    if (reply === 'reasoning') {
      return r.respond({
        status: 200,
        contentType: 'text/event-stream',
        body: chunk({ role: 'assistant' }) + chunk({ reasoning_content: 'The user greets; ' }) +
          chunk({ reasoning_content: 'answer kindly.' }) + chunk({ content: 'Hello **there**.' }) + chunk({}, 'stop') + 'data: [DONE]\n\n',
      });
    }
    return r.respond({
      status: 200,
      contentType: 'text/event-stream',
      body: chunk({ content: 'Half' }) + `data: ${JSON.stringify({ error: { message: 'The model failed.', type: 'server_error', param: null, code: null } })}\n\n`,
    });
  });
  await page.click('#new-chat');
  await send(page, 'Hi');
  await answered(page);
  assert.equal(await text(page, '.message.assistant .reasoning-text'), 'The user greets; answer kindly.');
  assert.equal(await page.$eval('.message.assistant details.reasoning', (e) => e.open || e.hidden), false);
  assert.equal(await text(page, '.message.assistant details.reasoning summary'), 'Reasoning');
  assert.equal(await page.$eval('.message.assistant .content', (e) => e.innerHTML.trim()), '<p>Hello <strong>there</strong>.</p>');
  reply = 'error';
  await send(page, 'Again');
  await answered(page);
  assert.equal(await shown(page, '.message.assistant:last-child .content'), 'Half');
  assert.equal(await text(page, '.message.assistant:last-child .note'), 'Error: The model failed.');
  await check();
  await page.close();
});

test('images: attached by file or paste only where the model takes them, sent as data URL parts, shown and kept', { skip }, async () => {
  // stories260K takes no images: no Image button, and a pasted picture is left to the browser.
  {
    const { page, check } = await openPage(server.url);
    assert.equal(await visible(page, '#attach'), false);
    await check();
    await page.close();
  }
  // The same server said to take images (its /v1/models answered here with llama-server's
  // "multimodal" capability); the page's chat request is answered here too.
  const { page, check } = await openPage(server.url, {
    init: () => {
      const real = window.fetch;
      window.fetch = async (input, init) => {
        const res = await real(input, init);
        if (!String(input).endsWith('v1/models')) return res;
        const body = await res.json();
        body.data[0].capabilities = ['completion', 'multimodal'];
        return new Response(JSON.stringify(body), { status: 200, headers: { 'Content-Type': 'application/json' } });
      };
    },
  });
  await page.setRequestInterception(true);
  const sent = [];
  page.on('request', (r) => {
    if (!r.url().endsWith('/v1/chat/completions')) return r.continue();
    sent.push(JSON.parse(r.postData()));
    const chunk = (delta, finish = null) => `data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    return r.respond({ status: 200, contentType: 'text/event-stream', body: chunk({ content: 'A square.' }) + chunk({}, 'stop') + 'data: [DONE]\n\n' });
  });
  assert.equal(await visible(page, '#attach'), true);
  // A 1x1 PNG from a file, and a GIF pasted into the message.
  const png = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP438AAAAQBAYDFKhhdAAAAAElFTkSuQmCC', 'base64');
  const file = path.join(tmp, 'dot.png');
  writeFileSync(file, png);
  await page.click('#new-chat');
  const input = await page.$('#image-file');
  await input.uploadFile(file);
  await page.waitForFunction(() => document.querySelectorAll('#attachments img').length === 1);
  const gif = 'R0lGODlhAQABAIAAAP///wAAACH5BAEAAAAALAAAAAABAAEAAAICRAEAOw==';
  await page.$eval('#prompt', (el, b64) => {
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const data = new DataTransfer();
    data.items.add(new File([bytes], 'pasted.gif', { type: 'image/gif' }));
    el.dispatchEvent(new ClipboardEvent('paste', { clipboardData: data, bubbles: true, cancelable: true }));
  }, gif);
  await page.waitForFunction(() => document.querySelectorAll('#attachments img').length === 2);
  // A file that is not an image is refused with a note, and nothing is attached.
  const notImage = path.join(tmp, 'notes.txt');
  writeFileSync(notImage, 'hello');
  await input.uploadFile(notImage);
  await page.waitForFunction(() => /not a PNG/.test(document.getElementById('status').textContent));
  assert.equal(await count(page, '#attachments img'), 2);
  await send(page, 'What is this?');
  await answered(page);
  assert.equal(sent.length, 1);
  const content = sent[0].messages.at(-1).content;
  assert.deepEqual(content, [
    { type: 'image_url', image_url: { url: `data:image/png;base64,${png.toString('base64')}` } },
    { type: 'image_url', image_url: { url: `data:image/gif;base64,${gif}` } },
    { type: 'text', text: 'What is this?' },
  ]);
  assert.equal(await visible(page, '#attachments'), false);
  assert.equal(await count(page, '.message.user .images img'), 2);
  assert.equal(squash(await shown(page, '.message.assistant .content')), 'A square.');
  // Kept with the conversation: a reload shows the images, and Regenerate sends them again.
  await page.reload({ waitUntil: 'load' });
  await ready(page);
  assert.equal(await count(page, '.message.user .images img'), 2);
  // Found and clicked in one step in the page: the restored conversation may render its messages
  // again after ready(), which would leave a handle taken a moment earlier detached.
  await page.$eval('.message.assistant .regenerate', (b) => b.click());
  await answered(page);
  assert.equal(sent.length, 2);
  assert.deepEqual(sent[1].messages.at(-1).content, content);
  await check();
  // Later tests open the latest conversation: this one goes.
  await page.click('#conversations li.current .delete');
  await page.waitForFunction(() => document.querySelectorAll('.message').length === 0);
  await page.close();
});

test('Markdown renders code blocks; raw HTML, scripts, javascript: links and remote images do not get through', { skip }, async () => {
  const { page, requests, check } = await openPage(server.url);
  const html = await page.evaluate(async () => {
    const { renderMarkdown } = await import('/assets/markdown.js');
    const div = document.createElement('div');
    renderMarkdown(div, [
      '# Title', '', '**bold** and `code`', '', '```js', 'const a = 1 < 2;', '```', '',
      '<img src=x onerror="window.pwned=1"> <script>window.pwned=2</script> <b onclick="x()">b</b>',
      '', '[click](javascript:window.pwned=3) [ok](https://example.com/)', '', '![remote](https://example.com/i.png)',
      '', '| a | b |', '|---|---|', '| 1 | 2 |',
    ].join('\n'));
    document.body.append(div);
    return div.innerHTML;
  });
  assert.match(html, /<h1>Title<\/h1>/);
  assert.match(html, /<strong>bold<\/strong> and <code>code<\/code>/);
  assert.match(html, /<pre><code class="language-js">const a = 1 &lt; 2;\n<\/code><\/pre>/);
  assert.match(html, /<table>/);
  // Raw HTML shown as text, never as elements.
  assert.match(html, /&lt;img src=x onerror="window.pwned=1"&gt;/);
  assert.match(html, /&lt;script&gt;/);
  assert.doesNotMatch(html, /<img|<script|<b |javascript:/i);
  assert.equal(await page.evaluate(() => document.querySelectorAll('img, script:not([src]), [onclick], [onerror]').length), 0);
  assert.match(html, /<a href="https:\/\/example.com\/" target="_blank" rel="noopener noreferrer">ok<\/a>/);
  assert.match(html, /<a href="https:\/\/example.com\/i.png"[^>]*>remote<\/a>/);
  assert.equal(await page.evaluate(() => window.pwned), undefined);
  await new Promise((r) => setTimeout(r, 200));
  assert.ok(requests.every((u) => u.startsWith(server.url)), requests.join('\n'));
  await check();
  await page.close();
});

test('where the browser refuses IndexedDB the page still chats, and says its conversations last as long as the tab', { skip }, async () => {
  const { page, check } = await openPage(server.url, {
    init: () => { indexedDB.open = () => { throw new DOMException('refused', 'SecurityError'); }; },
  });
  assert.match(await text(page, '#status'), /conversations last as long as the tab/);
  await send(page, 'Once upon a time');
  await answered(page);
  assert.ok((await shown(page, '.message.assistant .content')).length > 0);
  assert.equal(await count(page, '#conversations li'), 1);
  await check();
  await page.close();
});

test('dark and light follow prefers-color-scheme', { skip }, async () => {
  const luminance = (rgb) => {
    const [r, g, b] = rgb.match(/\d+/g).map(Number);
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
  };
  for (const scheme of ['dark', 'light']) {
    const { page, check } = await openPage(server.url, { scheme });
    const colors = await page.evaluate(() => {
      const s = getComputedStyle(document.body);
      const t = getComputedStyle(document.getElementById('prompt'));
      return { bg: s.backgroundColor, fg: s.color, input: t.backgroundColor };
    });
    if (scheme === 'dark') {
      assert.ok(luminance(colors.bg) < 0.15 && luminance(colors.fg) > 0.7, JSON.stringify(colors));
      assert.ok(luminance(colors.input) < 0.15, JSON.stringify(colors));
    } else {
      assert.ok(luminance(colors.bg) > 0.9 && luminance(colors.fg) < 0.3, JSON.stringify(colors));
    }
    const shot = await page.screenshot({ encoding: 'binary' });
    assert.ok(shot.length > 1000);
    await check();
    await page.close();
  }
});

test('--no-webui: / is a 404 in the API\'s error shape, the API still answers', { skip }, async () => {
  const bare = await startServer(['--no-webui']);
  try {
    for (const p of ['/', '/assets/app.js']) {
      const r = await fetch(`${bare.url}${p}`);
      assert.equal(r.status, 404, p);
      const body = await r.json();
      assert.equal(body.error.code, 'unknown_url', p);
      assert.equal(body.error.message, `Invalid URL (GET ${p})`, p);
    }
    assert.equal((await fetch(`${bare.url}/v1/models`)).status, 200);
  } finally {
    await stopChecked(bare);
  }
});
