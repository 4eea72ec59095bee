// `vkllm serve --mmproj` driven by the official OpenAI Node client: a chat message with an image
// part (a data URL, and an http URL with --allow-image-urls) on a random text model with a random
// Gemma 3 vision encoder (`vkllm gen-model --mmproj gemma3`), its prompt counted as llama-server
// counts it; /v1/models and /props say the model takes images; the 400s of images that cannot be
// read, of remote URLs that are off, of schemes never read and of images past the context.
//
// With VKLLM_E2E_PEER=/path/to/llama-server the checks marked for both run against llama-server
// instead (`--mmproj` is a flag both take), which is where PROMPT_TOKENS came from:
//   VKLLM_E2E_PEER=/work/shared/peer/bin/llama-server node --test tests/e2e/images.test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { startServer, haveModel, modelsDir, peer, vkllmExe, clientAgent } from './harness.mjs';

let OpenAI;
let Ollama;
try {
  OpenAI = (await import('openai')).default;
  ({ Ollama } = await import('ollama'));
} catch (e) {
  throw new Error(`the npm packages 'openai' and 'ollama' are not installed: run \`npm ci --prefix tests/e2e\` (scripts/install_deps.sh does): ${e.message}`);
}

// usage.prompt_tokens of the request below as llama-server b9749 answers it (llama.cpp's mtmd: the
// text around the image tokenized, Gemma 3's <start_of_image> and <end_of_image> as text, the image's
// 64 x 64 tile pooled to 16 rows), on the same files, from the command in this file's head.
const PROMPT_TOKENS = 49;
const TEXT_ONLY_PROMPT_TOKENS = 31;  // the same request without its image part
// [text "A", image, text "B"]: llama-server joins parts with newlines but none around an image
// ("A<__media__>B"), which newlines there would change.
const BETWEEN_PROMPT_TOKENS = 48;
// /completion with {prompt_string: "Look: <marker> and <marker>", multimodal_data: [picture, picture]}:
// tokens_evaluated as llama-server b9749 answers it (BOS, the text pieces, two images of 16 rows each
// with Gemma 3's markers spelled out).
const COMPLETION_PROMPT_TOKENS = 43;

const skip = !haveModel() && 'stories260K.gguf or the vkllm binary is missing';
const vkllmOnly = skip || (peer ? 'a vkllm-only check (VKLLM_E2E_PEER is set)' : false);

let dir;
let server;
let client;

// A w x h RGB PNG (zlib from node, the chunks' CRC written here), its pixels a pattern.
function png(w, h) {
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (buf) => {
    let c = 0xffffffff;
    for (const b of buf) c = crcTable[(c ^ b) & 255] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  };
  const chunk = (type, data) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const body = Buffer.concat([Buffer.from(type, 'ascii'), data]);
    const sum = Buffer.alloc(4);
    sum.writeUInt32BE(crc(body));
    return Buffer.concat([len, body, sum]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8;  // bit depth
  ihdr[9] = 2;  // RGB
  const raw = Buffer.alloc(h * (1 + 3 * w));
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      for (let c = 0; c < 3; c++) raw[y * (1 + 3 * w) + 1 + 3 * x + c] = (x * 37 + y * 11 + c * 5) & 255;
    }
  }
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', ihdr),
    chunk('IDAT', zlib.deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]);
}

const picture = png(20, 12);
const dataUrl = (bytes) => `data:image/png;base64,${bytes.toString('base64')}`;
const withImage = (url) => [{
  role: 'user',
  content: [{ type: 'text', text: 'Describe this' }, { type: 'image_url', image_url: { url } }],
}];

before(async () => {
  if (skip) return;
  dir = mkdtempSync(path.join(os.tmpdir(), 'vkllm-images-'));
  const text = path.join(dir, 'text.gguf');
  // The files PROMPT_TOKENS was measured on (any seed: the count depends on the shapes alone).
  await vkllmExe(['gen-model', '--arch', 'llama', '--vocab-from', path.join(modelsDir, 'ggml-vocab-llama-spm.gguf'),
    '--dim', '64', '--layers', '1', '--heads', '2', '--ffn', '128', '--type', 'f16', '--seed', '55', '-o', text,
    '--mmproj', process.env.VKLLM_E2E_PROJECTOR ?? 'gemma3']);
  server = await startServer(['--mmproj', path.join(dir, 'text-mmproj.gguf'), '-c', '256', '-np', '1'], { modelPath: text });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0, httpAgent: clientAgent, timeout: 120000 });
});

after(async () => {
  if (server) {
    const { code, validationErrors } = await server.stop();
    assert.equal(code, 0, server.stderr);
    assert.deepEqual(validationErrors ?? [], []);
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// The error the client throws for a request, or a failed check when it throws none.
async function refused(body) {
  try {
    await client.chat.completions.create({ max_tokens: 1, ...body });
  } catch (e) {
    return e;
  }
  assert.fail('expected an error');
}

test('an image part: 200, its prompt counted as llama-server counts it (both)', { skip }, async () => {
  const r = await client.chat.completions.create({ model: 'm', messages: withImage(dataUrl(picture)), max_tokens: 2, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.usage.prompt_tokens, PROMPT_TOKENS);
  assert.equal(r.usage.completion_tokens, 2);
  const plain = await client.chat.completions.create({
    model: 'm', messages: [{ role: 'user', content: [{ type: 'text', text: 'Describe this' }] }], max_tokens: 2, temperature: 0,
  });
  assert.equal(plain.usage.prompt_tokens, TEXT_ONLY_PROMPT_TOKENS);
  const between = await client.chat.completions.create({
    model: 'm',
    messages: [{ role: 'user', content: [{ type: 'text', text: 'A' }, { type: 'image_url', image_url: { url: dataUrl(picture) } }, { type: 'text', text: 'B' }] }],
    max_tokens: 2,
    temperature: 0,
  });
  assert.equal(between.usage.prompt_tokens, BETWEEN_PROMPT_TOKENS);
  // Streamed, with usage: the same count.
  const stream = await client.chat.completions.create({
    model: 'm', messages: withImage(dataUrl(picture)), max_tokens: 2, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let usage;
  for await (const chunk of stream) usage = chunk.usage ?? usage;
  assert.equal(usage.prompt_tokens, PROMPT_TOKENS);
});

test('/completion takes images as llama-server does: a prompt object, the marker from /props (both)', { skip }, async () => {
  const props = await (await fetch(`${server.url}/props`)).json();
  const marker = props.media_marker;
  assert.match(marker, /^<__media_\w+__>$/);
  assert.notEqual(marker, '<__media__>');  // random per process, as llama-server's
  const b64 = picture.toString('base64');
  const post = (prompt) => fetch(`${server.url}/completion`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ prompt, n_predict: 1, temperature: 0 }),
  });
  const r = await post({ prompt_string: `Look: ${marker} and ${marker}`, multimodal_data: [b64, b64] });
  assert.equal(r.status, 200);
  const body = await r.json();
  assert.equal(body.tokens_evaluated, COMPLETION_PROMPT_TOKENS);  // the whole prompt (prompt_n leaves out a cached prefix)
  // One marker for two images: refused (llama-server also refuses a count that does not match).
  const bad = await post({ prompt_string: `Look: ${marker}`, multimodal_data: [b64, b64] });
  assert.equal(bad.status, 400);
});

test('images encoded while other requests generate: every answer whole, no validation error', { skip: vkllmOnly }, async () => {
  const srv = await startServer(['--mmproj', path.join(dir, 'text-mmproj.gguf'), '-c', '256', '-np', '4'],
    { modelPath: path.join(dir, 'text.gguf') });
  try {
    const c = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
    const text = (i) => c.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: `Story ${i}` }], max_tokens: 48, temperature: 0 });
    const image = (i) => c.chat.completions.create({ model: 'm', messages: withImage(dataUrl(png(20 + i, 12))), max_tokens: 8, temperature: 0 });
    const all = await Promise.all([text(0), image(0), text(1), image(1), image(2), text(2), image(3)]);
    for (const r of all) assert.ok(r.usage.completion_tokens > 0);
    assert.equal(all[1].usage.prompt_tokens, PROMPT_TOKENS);
  } finally {
    const { code, validationErrors } = await srv.stop();
    assert.equal(code, 0, srv.stderr);
    assert.deepEqual(validationErrors, [], srv.stderr);
  }
});

test('/props and /v1/models say the model takes images (both)', { skip }, async () => {
  const props = await (await fetch(`${server.url}/props`)).json();
  assert.equal(props.modalities.vision, true);
  const models = await (await fetch(`${server.url}/v1/models`)).json();
  const caps = peer ? models.models[0].capabilities : models.data[0].capabilities;
  assert.ok(caps.includes('multimodal'), JSON.stringify(models));
});

test('images that cannot be read, remote URLs that are off, other schemes: 400s naming the part', { skip: vkllmOnly }, async () => {
  const param = 'messages[0].content[1].image_url';
  const cases = [
    [dataUrl(Buffer.from('not an image at all')), /cannot be read/],
    ['data:image/png;base64,iVBORw0KGgo', /base64 is malformed/],
    ['data:text/plain;base64,aGVsbG8=', /data:image\/<type>;base64/],
    ['http://127.0.0.1:9/cat.png', /--allow-image-urls/],
    ['file:///etc/passwd', /never read/],
  ];
  for (const [url, says] of cases) {
    const e = await refused({ messages: withImage(url) });
    assert.equal(e.status, 400, url);
    assert.equal(e.param, param, url);
    assert.match(e.message, says, url);
  }
  // More images than the context holds: the counts, as for a long prompt.
  const many = Array.from({ length: 16 }, () => ({ type: 'image_url', image_url: { url: dataUrl(picture) } }));
  const e = await refused({ messages: [{ role: 'user', content: many }] });
  assert.equal(e.status, 400);
  assert.equal(e.code, 'context_length_exceeded');
  assert.match(e.message, /maximum context length is 256 tokens.*of them for 16 images/);
  // A text holding the marker itself would move the image.
  const marked = await refused({ messages: [{ role: 'user', content: [{ type: 'text', text: 'a <__media__> b' }, { type: 'image_url', image_url: { url: dataUrl(picture) } }] }] });
  assert.equal(marked.status, 400);
  assert.equal(marked.param, 'messages[0].content[0].text');
});

test('--allow-image-urls fetches http images (redirects to http only) under --image-url-max-bytes', { skip: vkllmOnly }, async () => {
  const files = http.createServer((req, res) => {
    if (req.url === '/cat.png') {
      res.writeHead(200, { 'Content-Type': 'image/png' });
      res.end(picture);
    } else if (req.url === '/moved') {
      res.writeHead(302, { Location: '/cat.png' });
      res.end();
    } else if (req.url === '/to-file') {
      res.writeHead(302, { Location: 'file:///etc/passwd' });
      res.end();
    } else if (req.url === '/big.png') {
      res.writeHead(200, { 'Content-Type': 'image/png' });
      res.end(Buffer.concat([picture, Buffer.alloc(4096)]));
    } else {
      res.writeHead(404);
      res.end();
    }
  });
  await new Promise((r) => files.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${files.address().port}`;
  const srv = await startServer(['--mmproj', path.join(dir, 'text-mmproj.gguf'), '-c', '256', '-np', '1',
    '--allow-image-urls', '--image-url-max-bytes', '2048', '--image-url-timeout', '5'], { modelPath: path.join(dir, 'text.gguf') });
  try {
    const c = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
    for (const p of ['/cat.png', '/moved']) {
      const r = await c.chat.completions.create({ model: 'm', messages: withImage(base + p), max_tokens: 1 });
      assert.equal(r.usage.prompt_tokens, PROMPT_TOKENS, p);
    }
    for (const [p, says] of [['/to-file', /only http and https/], ['/big.png', /--image-url-max-bytes/], ['/gone.png', /HTTP 404/]]) {
      const e = await c.chat.completions.create({ model: 'm', messages: withImage(base + p), max_tokens: 1 }).then(() => null, (x) => x);
      assert.equal(e?.status, 400, p);
      assert.match(e.message, says, p);
    }
  } finally {
    await srv.stop();
    files.close();
  }
});

test('Ollama\'s client: a chat message\'s images and a generate\'s, as the same prompt as OpenAI\'s image part first', { skip: vkllmOnly }, async () => {
  const ollama = new Ollama({ host: server.url });
  const show = await ollama.show({ model: 'text.gguf' });
  assert.ok(show.capabilities.includes('vision'), JSON.stringify(show.capabilities));
  // Ollama puts a message's images before its text: OpenAI's [image, text] is the same prompt.
  const openai = await client.chat.completions.create({
    model: 'm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: dataUrl(picture) } }, { type: 'text', text: 'Describe this' }] }], max_tokens: 4, temperature: 0,
  });
  const chat = await ollama.chat({
    model: 'text.gguf', messages: [{ role: 'user', content: 'Describe this', images: [new Uint8Array(picture)] }],
    options: { num_predict: 4, temperature: 0 },
  });
  assert.equal(chat.prompt_eval_count, openai.usage.prompt_tokens);
  assert.equal(chat.message.content, openai.choices[0].message.content);
  const gen = await ollama.generate({ model: 'text.gguf', prompt: 'Describe this', images: [picture.toString('base64')], options: { num_predict: 4, temperature: 0 } });
  assert.equal(gen.prompt_eval_count, openai.usage.prompt_tokens);
  assert.equal(gen.response, openai.choices[0].message.content);
  await assert.rejects(ollama.generate({ model: 'text.gguf', prompt: 'x', raw: true, images: [picture.toString('base64')] }),
    (e) => e.status_code === 400 && /images/.test(e.message));
});

test('a server without --mmproj refuses image parts and does not claim images', { skip: vkllmOnly }, async () => {
  const srv = await startServer([]);
  try {
    const c = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const e = await c.chat.completions.create({ model: 'm', messages: withImage(dataUrl(picture)), max_tokens: 1 }).then(() => null, (x) => x);
    assert.equal(e?.status, 400);
    assert.equal(e.param, 'messages[0].content[1].type');
    assert.match(e.message, /takes no images.*--mmproj/);
    const props = await (await fetch(`${srv.url}/props`)).json();
    assert.equal(props.modalities.vision, false);
  } finally {
    await srv.stop();
  }
});
