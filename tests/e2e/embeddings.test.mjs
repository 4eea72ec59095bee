// `vkllm serve` on an embedding model (a random BERT written by `vkllm gen-model` with the bge
// WordPiece vocab) driven by the official OpenAI Node client: float and base64 encodings give the
// vectors `vkllm embed` prints, arrays of strings and of token ids, usage, and the 400s (dimensions
// it cannot honour, an input longer than the model takes, chat on an embedding model); and a random
// reranker (pooling rank) behind /v1/rerank, called through the client's generic post(), giving the
// scores `vkllm embed --rerank` prints; and a decoder embedding model (a random Qwen3 whose file
// names pooling last, as Qwen3-Embedding) served with a small ubatch, so that inputs run in chunks.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, exe, modelsDir, childEnv, clientAgent, vkllmExe } from './harness.mjs';

let OpenAI;
try {
  OpenAI = (await import('openai')).default;
} catch (e) {
  throw new Error(`the npm package 'openai' is not installed: run \`npm ci --prefix tests/e2e\` (scripts/install_deps.sh does): ${e.message}`);
}

const vocab = path.join(modelsDir, 'ggml-vocab-bert-bge.gguf');
const skip = !(existsSync(vocab) && existsSync(exe)) && 'ggml-vocab-bert-bge.gguf or the vkllm binary is missing';
const tmp = mkdtempSync(path.join(os.tmpdir(), 'vkllm-e2e-embed-'));
const modelPath = path.join(tmp, 'bert.gguf');
const rerankerPath = path.join(tmp, 'reranker.gguf');
const decoderPath = path.join(tmp, 'qwen3-embedding.gguf');
const spmVocab = path.join(modelsDir, 'ggml-vocab-llama-spm.gguf');
let server, reranker, decoder;
let client, rerankClient, decoderClient;

before(async () => {
  if (skip) return;
  execFileSync(exe, ['gen-model', '--arch', 'bert', '--vocab-from', vocab, '--dim', '128', '--layers', '2', '--heads', '4',
    '--ffn', '256', '--ctx', '64', '--type', 'f16', '-o', modelPath], { stdio: 'ignore', env: childEnv() });
  server = await startServer([], { modelPath });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0, httpAgent: clientAgent, timeout: 60000 });
  execFileSync(exe, ['gen-model', '--arch', 'bert', '--vocab-from', vocab, '--dim', '128', '--layers', '2', '--heads', '4',
    '--ffn', '256', '--ctx', '64', '--type', 'f16', '--pooling', 'rank', '--seed', '5', '-o', rerankerPath],
  { stdio: 'ignore', env: childEnv() });
  reranker = await startServer([], { modelPath: rerankerPath });
  rerankClient = new OpenAI({ baseURL: `${reranker.url}/v1`, apiKey: 'unused', maxRetries: 0, httpAgent: clientAgent, timeout: 60000 });
  execFileSync(exe, ['gen-model', '--arch', 'qwen3', '--vocab-from', spmVocab, '--dim', '64', '--layers', '2', '--heads', '4',
    '--kv-heads', '2', '--head-dim', '32', '--ffn', '128', '--ctx', '128', '--type', 'f16', '--pooling', 'last', '--seed', '7',
    '-o', decoderPath], { stdio: 'ignore', env: childEnv() });
  decoder = await startServer(['--ubatch', '16'], { modelPath: decoderPath });
  decoderClient = new OpenAI({ baseURL: `${decoder.url}/v1`, apiKey: 'unused', maxRetries: 0, httpAgent: clientAgent, timeout: 60000 });
});

after(async () => {
  for (const s of [server, reranker, decoder]) {
    if (!s) continue;
    const { code, validationErrors } = await s.stop();
    assert.equal(code, 0, s.stderr);
    assert.deepEqual(validationErrors, []);
  }
  rmSync(tmp, { recursive: true, force: true });
});

const texts = ['The giant panda is a bear.', 'what is a panda?', 'Äpfel, naïve café — 中文!'];

// `vkllm embed --json` on the same file and texts: the reference vectors (with the sanitizer
// environment a sanitized build's processes need, as the server gets it).
async function embedCli(inputs, model = modelPath) {
  const file = path.join(tmp, 'inputs.txt');
  writeFileSync(file, inputs.join('\n') + '\n');
  return JSON.parse(await vkllmExe(['embed', '-m', model, '-f', file, '--batch-lines', '--json']));
}

function assertClose(got, want, what) {
  assert.equal(got.length, want.length, what);
  for (let i = 0; i < got.length; ++i) assert.ok(Math.abs(got[i] - want[i]) < 1e-6, `${what}[${i}]: ${got[i]} vs ${want[i]}`);
}

test('float and base64 (the client default) give the vectors of `vkllm embed`, with usage', { skip }, async () => {
  const want = await embedCli(texts);
  const asFloat = await client.embeddings.create({ model: 'bert', input: texts, encoding_format: 'float' });
  const asBase64 = await client.embeddings.create({ model: 'bert', input: texts });  // the client asks for base64
  assert.equal(asFloat.object, 'list');
  assert.equal(asFloat.data.length, texts.length);
  assert.equal(asFloat.usage.prompt_tokens, want.usage.prompt_tokens);
  assert.equal(asBase64.usage.total_tokens, want.usage.prompt_tokens);
  for (let i = 0; i < texts.length; ++i) {
    assert.equal(asFloat.data[i].index, i);
    assert.equal(asFloat.data[i].object, 'embedding');
    assert.equal(asFloat.data[i].embedding.length, 128);
    assertClose(asFloat.data[i].embedding, want.data[i].embedding, `float ${i}`);
    assertClose(asBase64.data[i].embedding, asFloat.data[i].embedding, `base64 ${i}`);
    const norm = Math.hypot(...asFloat.data[i].embedding);
    assert.ok(Math.abs(norm - 1) < 1e-5, `L2 norm ${norm}`);
  }
});

test('a single string, token ids, and arrays of token ids', { skip }, async () => {
  const one = await client.embeddings.create({ model: 'bert', input: texts[0], encoding_format: 'float' });
  const tok = await (await fetch(`${server.url}/tokenize`, {
    method: 'POST', body: JSON.stringify({ content: texts[0], add_special: true }),
  })).json();
  const ids = await client.embeddings.create({ model: 'bert', input: tok.tokens, encoding_format: 'float' });
  const idLists = await client.embeddings.create({ model: 'bert', input: [tok.tokens, tok.tokens], encoding_format: 'float' });
  assertClose(ids.data[0].embedding, one.data[0].embedding, 'token ids');
  assert.equal(idLists.data.length, 2);
  assertClose(idLists.data[1].embedding, one.data[0].embedding, 'token id lists');
  assert.equal(ids.usage.prompt_tokens, tok.tokens.length);
});

test('requests it cannot honour exactly are 400s naming the parameter', { skip }, async () => {
  await assert.rejects(client.embeddings.create({ model: 'bert', input: 'x', dimensions: 64 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'dimensions' && /cannot be shortened/.test(e.message));
  await assert.rejects(client.embeddings.create({ model: 'bert', input: 'panda '.repeat(80) }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded' && /at most 64 tokens/.test(e.message));
  await assert.rejects(client.embeddings.create({ model: 'bert', input: '' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'input');
  await assert.rejects(client.embeddings.create({ model: 'bert', input: 'x', encoding_format: 'int8' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'encoding_format');
  await assert.rejects(client.chat.completions.create({ model: 'bert', messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e instanceof OpenAI.BadRequestError && /embedding model/.test(e.message));
});

// `vkllm embed --rerank --json` on the same file: the reference scores, by document index.
async function rerankCli(query, docs) {
  const file = path.join(tmp, 'documents.txt');
  writeFileSync(file, docs.join('\n') + '\n');
  const out = JSON.parse(await vkllmExe(['embed', '-m', rerankerPath, '--rerank', query, '-f', file, '--batch-lines', '--json']));
  const scores = [];
  for (const r of out.results) scores[r.index] = r.relevance_score;
  return { scores, tokens: out.usage.prompt_tokens };
}

test('/v1/rerank through the client: the scores of `vkllm embed --rerank`, best first, top_n and documents', { skip }, async () => {
  const query = 'what is a panda?';
  const want = await rerankCli(query, texts);
  const all = await rerankClient.post('/rerank', { body: { model: 'reranker', query, documents: texts } });
  assert.equal(all.object, 'list');
  assert.equal(all.results.length, texts.length);
  assert.equal(all.usage.prompt_tokens, want.tokens);
  for (let i = 0; i < all.results.length; ++i) {
    const r = all.results[i];
    assert.ok(Math.abs(r.relevance_score - want.scores[r.index]) < 1e-6, `document ${r.index}`);
    if (i > 0) assert.ok(r.relevance_score <= all.results[i - 1].relevance_score, 'best first');
    assert.equal(r.document, undefined);
  }
  const top = await rerankClient.post('/rerank', { body: { query, documents: texts.map((t) => ({ text: t })), top_n: 2,
    return_documents: true } });
  assert.equal(top.results.length, 2);
  assert.deepEqual(top.results.map((r) => r.index), all.results.slice(0, 2).map((r) => r.index));
  assert.equal(top.results[0].document.text, texts[top.results[0].index]);
});

test('rerank requests it cannot honour are 400s naming the parameter; each model answers its own endpoint', { skip }, async () => {
  await assert.rejects(rerankClient.post('/rerank', { body: { query: 'q', documents: [] } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'documents');
  await assert.rejects(rerankClient.post('/rerank', { body: { documents: ['a'] } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'query');
  await assert.rejects(rerankClient.post('/rerank', { body: { query: 'q', documents: ['a'], top_n: 0 } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'top_n');
  await assert.rejects(rerankClient.post('/rerank', { body: { query: 'panda '.repeat(40), documents: ['panda '.repeat(40)] } }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded' && /at most 64 tokens/.test(e.message));
  await assert.rejects(rerankClient.embeddings.create({ model: 'reranker', input: 'x' }),
    (e) => e instanceof OpenAI.BadRequestError && /is a reranker/.test(e.message));
  await assert.rejects(client.post('/rerank', { body: { query: 'q', documents: ['a'] } }),
    (e) => e instanceof OpenAI.BadRequestError && /not a reranker/.test(e.message));
});

test('a decoder embedding model: the last token\'s state as `vkllm embed` gives it, inputs longer than the ubatch', { skip }, async () => {
  // The server runs 16 tokens at a time through the KV cache; `vkllm embed` the whole input at once.
  const inputs = [...texts, 'The giant panda is a bear species endemic to China. '.repeat(4)];
  const want = await embedCli(inputs, decoderPath);
  const got = await decoderClient.embeddings.create({ model: 'qwen3', input: inputs, encoding_format: 'float' });
  assert.equal(got.data.length, inputs.length);
  assert.equal(got.usage.prompt_tokens, want.usage.prompt_tokens);
  const long = await (await fetch(`${decoder.url}/tokenize`, {
    method: 'POST', body: JSON.stringify({ content: inputs.at(-1), add_special: true }),
  })).json();
  assert.ok(long.tokens.length > 32, `the long input (${long.tokens.length} tokens) spans several ubatches of 16`);
  for (let i = 0; i < inputs.length; ++i) {
    const a = got.data[i].embedding, b = want.data[i].embedding;
    assert.equal(a.length, 64);
    const cos = a.reduce((sum, x, j) => sum + x * b[j], 0);  // both unit length
    assert.ok(cos > 0.99999, `input ${i}: cosine ${cos}`);
  }
  await assert.rejects(decoderClient.embeddings.create({ model: 'qwen3', input: 'panda '.repeat(200) }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded' && /at most 128 tokens/.test(e.message));
  await assert.rejects(decoderClient.chat.completions.create({ model: 'qwen3', messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e instanceof OpenAI.BadRequestError && /embedding model/.test(e.message));
});
