// `vkllm serve` over raw HTTP (node:net / fetch): what a client library would not send, what a
// misbehaving client does, concurrency, and shutdown.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer, haveModel, metric, waitFor } from './harness.mjs';

// Stops a server and checks it left as it should: exit 0, no validation error.
async function stopChecked(server) {
  const r = await server.stop();
  assert.equal(r.code, 0, server.stderr);
  assert.deepEqual(r.validationErrors, []);
  return r;
}

const skip = !haveModel() && 'stories260K.gguf or the vkllm binary is missing';

// One HTTP/1.1 exchange on a fresh socket: the raw response text (the server closes or the time runs out).
function rawExchange(url, request, { timeoutMs = 10000, until } = {}) {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const sock = net.connect(Number(port), hostname);
    let got = '';
    const timer = setTimeout(() => { sock.destroy(); resolve(got); }, timeoutMs);
    sock.on('data', (d) => {
      got += d;
      if (until && got.includes(until)) { clearTimeout(timer); sock.destroy(); resolve(got); }
    });
    sock.on('end', () => { clearTimeout(timer); resolve(got); });
    sock.on('error', (e) => { clearTimeout(timer); got ? resolve(got) : reject(e); });
    sock.write(request);
  });
}

function post(path, body, extra = '') {
  return `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n${extra}\r\n${body}`;
}

async function postJson(url, path, body, headers = {}) {
  const r = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: r.status, headers: r.headers, json: await r.json() };
}

// The concatenated content of a chat stream read with fetch.
async function streamText(url, body) {
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }),
  });
  assert.equal(r.status, 200);
  const raw = await r.text();
  let text = '';
  for (const line of raw.split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    const j = JSON.parse(line.slice(6));
    for (const c of j.choices) text += c.delta.content ?? '';
  }
  assert.ok(raw.trimEnd().endsWith('data: [DONE]'));
  return text;
}

test('raw HTTP against vkllm serve', { skip }, async (t) => {
  const server = await startServer(['--parallel', '4', '--ctx', '256']);
  const url = server.url;
  try {
    await t.test('malformed JSON is a 400 and the server keeps serving', async () => {
      for (const body of ['{bad', '', '[1,2,3]', '{"messages": [}', '\u0000\u0001']) {
        const r = await postJson(url, '/v1/chat/completions', body);
        assert.equal(r.status, 400, body);
        assert.equal(r.json.error.type, 'invalid_request_error');
        assert.ok('param' in r.json.error && 'code' in r.json.error);
      }
      const ok = await postJson(url, '/v1/completions', { prompt: 'Hi', max_tokens: 2 });
      assert.equal(ok.status, 200);
    });

    await t.test('wrong types and ranges name the field', async () => {
      const cases = [
        [{ messages: 'hello' }, 'messages'],
        [{ messages: [{ role: 'user', content: 'x' }], max_tokens: 'ten' }, 'max_tokens'],
        [{ messages: [{ role: 'user', content: 'x' }], top_p: 2 }, 'top_p'],
        [{ messages: [{ role: 'user', content: 'x' }], stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop'],
        [{ messages: [{ role: 'user', content: 'x' }], logprobs: true, top_logprobs: 50 }, 'top_logprobs'],
        [{ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 'messages[0].content[0].type'],
      ];
      for (const [body, param] of cases) {
        const r = await postJson(url, '/v1/chat/completions', body);
        assert.equal(r.status, 400, JSON.stringify(body));
        assert.equal(r.json.error.param, param);
        assert.ok(r.json.error.message.includes(param.split('[')[0]), r.json.error.message);
      }
      const unknown = await postJson(url, '/v1/chat/completions', {
        messages: [{ role: 'user', content: 'x' }], max_tokens: 1, frobnicate: true, logit_bias: { 1: 2 },
      });
      assert.equal(unknown.status, 200);
    });

    await t.test('a huge body is 413', async () => {
      const body = JSON.stringify({ prompt: 'a'.repeat(9 << 20) });
      const r = await rawExchange(url, post('/v1/completions', body), { until: 'request_too_large' });
      assert.match(r, /^HTTP\/1\.1 413/);
      assert.equal((await fetch(`${url}/health`)).status, 200);
    });

    await t.test('unknown routes are 404, wrong methods 405, in OpenAI error shape', async () => {
      let r = await fetch(`${url}/v1/nothing`);
      assert.equal(r.status, 404);
      assert.equal((await r.json()).error.message, 'Invalid URL (GET /v1/nothing)');
      r = await fetch(`${url}/v1/completions`);
      assert.equal(r.status, 405);
      assert.equal(r.headers.get('allow'), 'POST');
    });

    await t.test('tokenize, detokenize, apply-template, health, metrics', async () => {
      const tok = await postJson(url, '/tokenize', { content: 'Once upon a time' });
      assert.equal(tok.status, 200);
      assert.ok(tok.json.tokens.length > 2);
      const detok = await postJson(url, '/detokenize', { tokens: tok.json.tokens });
      assert.equal(detok.json.content, ' Once upon a time');  // llama-server's pieces: the leading space kept
      const tmpl = await postJson(url, '/apply-template', { messages: [{ role: 'user', content: 'Hi' }] });
      assert.equal(tmpl.status, 200);
      assert.ok(tmpl.json.prompt.includes('Hi'));
      const health = await fetch(`${url}/health`);
      assert.deepEqual(await health.json(), { status: 'ok' });
      assert.equal(await metric(url, 'vkllm_slots'), 4);
    });

    await t.test('a client that disconnects mid-stream frees its slot', async () => {
      const body = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 250, temperature: 1, stream: true });
      const before = await metric(url, 'vkllm_requests_cancelled_total');
      const got = await rawExchange(url, post('/v1/completions', body), { until: '"text"' });
      assert.match(got, /^HTTP\/1\.1 200/);
      assert.ok(await waitFor(async () => (await metric(url, 'vkllm_slots_busy')) === 0), 'slot still busy');
      assert.ok(await waitFor(async () => (await metric(url, 'vkllm_requests_cancelled_total')) === before + 1));
      assert.ok(await waitFor(async () => (await metric(url, 'vkllm_http_streams_open')) === 0));
    });

    await t.test('several streams at once: each greedy text equals the same request alone', async () => {
      const prompts = ['Tell me about a dog.', 'Once there was a bird.', 'Lily went to the park.', 'Tom had a red ball.', 'The sun was hot.', 'A fish swam.'];
      const req = (p) => ({ messages: [{ role: 'user', content: p }], max_tokens: 48, temperature: 0 });
      const alone = [];
      for (const p of prompts) alone.push(await streamText(url, req(p)));
      const together = await Promise.all(prompts.map((p) => streamText(url, req(p))));
      assert.deepEqual(together, alone);
      assert.ok(await waitFor(async () => (await metric(url, 'vkllm_slots_busy')) === 0));
    });
  } finally {
    await stopChecked(server);
  }
});

test('an API key: 401 without it, /health open', { skip }, async () => {
  const server = await startServer(['--api-key', 'sk-secret', '--parallel', '1', '--ctx', '128']);
  try {
    const health = await fetch(`${server.url}/health`);
    assert.equal(health.status, 200);
    for (const auth of [undefined, 'Bearer sk-secre', 'Bearer sk-secret2', 'Basic sk-secret']) {
      const r = await postJson(server.url, '/v1/completions', { prompt: 'x' }, auth ? { Authorization: auth } : {});
      assert.equal(r.status, 401);
      assert.equal(r.json.error.code, 'invalid_api_key');
      assert.equal(r.json.error.type, 'invalid_request_error');
    }
    const ok = await postJson(server.url, '/v1/completions', { prompt: 'x', max_tokens: 1 }, { Authorization: 'Bearer sk-secret' });
    assert.equal(ok.status, 200);
  } finally {
    await stopChecked(server);
  }
});

test('SIGTERM with a stream open: the stream ends cleanly and the server stops gracefully and exits 0', { skip }, async () => {
  const server = await startServer(['--parallel', '2', '--ctx', '2048']);
  const body = JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2000, temperature: 1, ignore_eos: true, stream: true });
  const { hostname, port } = new URL(server.url);
  const sock = net.connect(Number(port), hostname);
  let got = '';
  const closed = new Promise((resolve) => sock.on('close', resolve));
  sock.on('data', (d) => { got += d; });
  sock.write(post('/v1/chat/completions', body));
  assert.ok(await waitFor(() => got.includes('"content":"') && got.split('data: ').length > 4, 20000), 'no tokens streamed');
  const { code, signal, ms, validationErrors, graceful } = await server.stop('SIGTERM');
  assert.deepEqual(validationErrors, []);
  await closed;
  assert.equal(signal, null);
  assert.equal(code, 0, server.stderr);
  assert.ok(graceful, server.stderr);
  assert.ok(ms < 30000, `exit took ${ms} ms`);
  // The stream's end: the shutdown error event and the chunked terminator, not a cut connection.
  assert.ok(got.includes('The server is shutting down.'), got.slice(-500));
  assert.ok(got.endsWith('0\r\n\r\n'), JSON.stringify(got.slice(-200)));
});

test('SIGINT on an idle server exits 0', { skip }, async () => {
  const server = await startServer(['--parallel', '1', '--ctx', '128']);
  const { code, ms, graceful } = await server.stop('SIGINT');
  assert.equal(code, 0, server.stderr);
  assert.ok(graceful, server.stderr);
  assert.ok(ms < 30000, `exit took ${ms} ms`);
});

test('a port in use and a bad key file are refused with exit 1 and a message', { skip }, async () => {
  const { spawnSync } = await import('node:child_process');
  const { exe, model } = await import('./harness.mjs');
  const server = await startServer(['--parallel', '1', '--ctx', '128']);
  try {
    const port = new URL(server.url).port;
    const r = spawnSync(exe, ['serve', '-m', model, '--port', port], { encoding: 'utf8', timeout: 30000 });
    assert.equal(r.status, 1);
    assert.match(r.stderr, new RegExp(`cannot listen on 127\\.0\\.0\\.1:${port}`));
    const k = spawnSync(exe, ['serve', '-m', model, '--port', '0', '--api-key-file', '/nonexistent/key'], { encoding: 'utf8', timeout: 30000 });
    assert.equal(k.status, 1);
    assert.match(k.stderr, /--api-key-file: cannot read '\/nonexistent\/key'/);
  } finally {
    await stopChecked(server);
  }
});

test('--api-key-file: the key is the first line of the file', { skip }, async () => {
  const { mkdtempSync, writeFileSync } = await import('node:fs');
  const os = await import('node:os');
  const path = await import('node:path');
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vkllm-key-'));
  const file = path.join(dir, 'key');
  writeFileSync(file, 'sk-from-file\n', { mode: 0o600 });
  const server = await startServer(['--api-key-file', file, '--parallel', '1', '--ctx', '128']);
  try {
    const ok = await fetch(`${server.url}/v1/models`, { headers: { Authorization: 'Bearer sk-from-file' } });
    assert.equal(ok.status, 200);
    const bad = await fetch(`${server.url}/v1/models`, { headers: { Authorization: 'Bearer sk-from-fil' } });
    assert.equal(bad.status, 401);
  } finally {
    await stopChecked(server);
  }
});
