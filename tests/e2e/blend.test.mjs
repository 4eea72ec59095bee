// CacheBlend in `vkllm serve` (--blend-separator, --kv-store): documents marked by the separator in
// any OpenAI request (completions, chat) are evaluated alone once, kept in the document store and
// blended into later prompts in another order; /metrics counts them; the disk tier gets what leaves
// memory; bad flags are refused at start.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { haveModel, metric, model, post, startServer, vkllmExe } from './harness.mjs';

const skip = haveModel() ? false : 'needs build/vkllm and ../shared/models/stories260K.gguf';
const SEP = ' ## ';
const DOCS = [
  'Lily had a red ball. She liked to throw it high in the sky and catch it.',
  'Tom was a little dog who lived in a big house with a garden and a tree.',
  'The sun was hot, so Ben went to the lake to swim with his mom and dad.',
];
const prompt = (prefix, order, question) => [prefix, ...order.map((i) => DOCS[i]), question].join(SEP);

describe('vkllm serve --blend-separator', { skip }, () => {
  let srv;
  const store = fs.mkdtempSync(path.join(os.tmpdir(), 'vkllm-blend-'));
  before(async () => {
    // No memory budget: every document's rows go to disk, and come back from there.
    srv = await startServer(['-c', '512', '-np', '2', '--blend-separator', SEP, '--kv-store', store,
      '--kv-store-mib', '0']);
  });
  after(async () => { await srv?.stop(); fs.rmSync(store, { recursive: true, force: true }); });

  test('completions: documents stored once, blended from the store in another order', async () => {
    const a = await post(srv.url, '/v1/completions',
      { model: 'm', prompt: prompt('Three stories.', [0, 1, 2], 'Who had a red ball? It was'), max_tokens: 8, temperature: 0 });
    assert.equal(a.status, 200, JSON.stringify(a.body));
    assert.ok(a.body.choices[0].text.length > 0);
    assert.equal(await metric(srv.url, 'vkllm_blend_documents_total'), 3);
    assert.equal(await metric(srv.url, 'vkllm_blend_documents_stored_total'), 0);
    const b = await post(srv.url, '/v1/completions',
      { model: 'm', prompt: prompt('Some other stories.', [2, 0, 1], 'Who went to the lake? It was'), max_tokens: 8, temperature: 0 });
    assert.equal(b.status, 200, JSON.stringify(b.body));
    assert.equal(await metric(srv.url, 'vkllm_blend_documents_stored_total'), 3);
    const recomputed = await metric(srv.url, 'vkllm_blend_recomputed_tokens_total');
    const tokens = await metric(srv.url, 'vkllm_blend_tokens_total');
    assert.ok(recomputed > 0 && recomputed < tokens / 4, `${recomputed} of ${tokens}`);
    assert.equal(await metric(srv.url, 'vkllm_blend_fallbacks_total'), 0);
  });

  test('chat: the separator inside a message marks documents too', async () => {
    const before = await metric(srv.url, 'vkllm_blend_documents_total');
    const r = await post(srv.url, '/v1/chat/completions', {
      model: 'm', max_tokens: 8, temperature: 0,
      messages: [{ role: 'user', content: prompt('Read these.', [1, 2], 'Who was a little dog?') }],
    });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(await metric(srv.url, 'vkllm_blend_documents_total'), before + 2);
  });

  test('Ollama: /api/generate splits its prompt, and a continued context moves the documents with it', async () => {
    const before = await metric(srv.url, 'vkllm_blend_documents_total');
    const stored = await metric(srv.url, 'vkllm_blend_documents_stored_total');
    const body = (p, context) => ({ model: 'stories260K.gguf', prompt: p, stream: false, context,
      options: { num_predict: 4, temperature: 0 } });
    const a = await post(srv.url, '/api/generate', body(prompt('Stories.', [0, 2], 'Who swam?')));
    assert.equal(a.status, 200, JSON.stringify(a.body));
    assert.ok(Array.isArray(a.body.context) && a.body.context.length > 0, JSON.stringify(a.body));
    assert.equal(await metric(srv.url, 'vkllm_blend_documents_total'), before + 2);
    // The continuation's documents stand after the context: found where they were shifted to, and
    // blended from the store (both were stored by the first test).
    const b = await post(srv.url, '/api/generate', body(prompt(' More.', [1, 0], 'Who had a ball?'), a.body.context));
    assert.equal(b.status, 200, JSON.stringify(b.body));
    assert.equal(await metric(srv.url, 'vkllm_blend_documents_total'), before + 4);
    assert.equal(await metric(srv.url, 'vkllm_blend_documents_stored_total'), stored + 4);
    assert.equal(await metric(srv.url, 'vkllm_blend_fallbacks_total'), 0);
  });

  test('what leaves the memory budget is in the --kv-store directory', async () => {
    assert.ok(await metric(srv.url, 'vkllm_blend_store_disk_bytes') > 0);
    assert.equal(await metric(srv.url, 'vkllm_blend_store_bytes'), 0);
    assert.ok(fs.readdirSync(store).filter((f) => f.endsWith('.kv')).length >= 3);
  });
});

describe('vkllm serve blend refusals', { skip }, () => {
  test('--blend-ratio needs --blend-separator', async () => {
    await assert.rejects(vkllmExe(['serve', '-m', model, '--port', '0', '--blend-ratio', '0.2']), /--blend-separator/);
  });
  test('an unusable --kv-store directory is named', async () => {
    await assert.rejects(vkllmExe(['serve', '-m', model, '--port', '0', '--blend-separator', SEP, '--kv-store', '/proc/nope']),
      /--kv-store \/proc\/nope/);
  });
});
