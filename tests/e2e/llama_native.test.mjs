// llama-server's native API on `vkllm serve`: /completion, /infill, /tokenize, /detokenize,
// /apply-template, /props, /health, /slots and the flags scripts pass, checking what llama.cpp's own
// server tests (tools/server/tests/unit: test_completion, test_infill, test_tokenize, test_basic,
// test_slots) check. Every check also passes against llama-server itself:
//   VKLLM_E2E_PEER=../shared/peer/bin/llama-server node --test tests/e2e/llama_native.test.mjs
// (the harness then starts it with the same arguments), which proves it encodes llama-server's
// behaviour; the few that differ on purpose are vkllmOnly and listed in docs/serving.md.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';

import { exe, haveModel, peer, post, startServer, vkllmExe, waitFor } from './harness.mjs';

const skip = haveModel() ? false : 'needs build/vkllm and ../shared/models/stories260K.gguf';
const vkllmOnly = peer ? 'vkllm keeps its own way here (docs/serving.md)' : false;
const PROMPT = 'I believe the meaning of life is';
// Greedy text of stories260K after PROMPT (llama-server and vkllm agree).
const GREEDY_8 = ' a big, small bo';

// The `data: {...}` events of a stream, parsed.
async function streamEvents(url, route, body) {
  const r = await fetch(`${url}${route}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true }),
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /text\/event-stream/);
  const text = await r.text();
  return text.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => JSON.parse(e.slice(6)));
}

describe('llama-server native API (stories260K)', { skip }, () => {
  let srv;
  before(async () => { srv = await startServer(['-c', '256', '-np', '2', '--alias', 'tinyllama-2', '--jinja']); });
  after(async () => { await srv?.stop(); });

  test('GET /health', async () => {
    const r = await fetch(`${srv.url}/health`);
    assert.equal(r.status, 200);
    assert.equal((await r.json()).status, 'ok');
  });

  test('GET /props: model, slots, context and default settings', async () => {
    const r = await fetch(`${srv.url}/props`);
    assert.equal(r.status, 200);
    const p = await r.json();
    assert.ok(p.model_path.includes('.gguf'));
    assert.equal(p.model_alias, 'tinyllama-2');
    assert.equal(p.total_slots, 2);
    assert.equal(p.default_generation_settings.n_ctx, 256);
    assert.equal(p.default_generation_settings.params.seed, 4294967295);
    assert.ok(Math.abs(p.default_generation_settings.params.temperature - 0.8) < 1e-6);
    assert.equal(p.default_generation_settings.params.top_k, 40);
    assert.equal(p.modalities.vision, false);
    assert.equal(typeof p.chat_template, 'string');
    assert.equal(typeof p.build_info, 'string');
    assert.equal(p.bos_token, '<s>');
  });

  test('POST /props is refused (501)', async () => {
    const r = await post(srv.url, '/props', {});
    assert.equal(r.status, 501);
    assert.ok(r.body.error);
  });

  test('--alias names the model in /v1/models and in results', async () => {
    const models = await (await fetch(`${srv.url}/v1/models`)).json();
    assert.equal(models.data[0].id, 'tinyllama-2');
    const r = await post(srv.url, '/completion', { prompt: 'Hi', n_predict: 1 });
    assert.equal(r.body.model, 'tinyllama-2');
  });

  test('GET /slots: one entry per slot, idle', async () => {
    // A slot is released a moment after its last response (llama-server).
    await waitFor(async () => (await (await fetch(`${srv.url}/slots`)).json()).every((s) => !s.is_processing));
    const r = await fetch(`${srv.url}/slots`);
    assert.equal(r.status, 200);
    const slots = await r.json();
    assert.equal(slots.length, 2);
    for (const [i, s] of slots.entries()) {
      assert.equal(s.id, i);
      assert.equal(s.n_ctx, 256);
      assert.equal(s.is_processing, false);
    }
    assert.equal((await fetch(`${srv.url}/slots?fail_on_no_slot=1`)).status, 200);
  });

  test('POST /slots/0?action=save is refused (501)', async () => {
    const r = await post(srv.url, '/slots/0?action=save', { filename: 'x.bin' });
    assert.equal(r.status, 501);
    assert.ok(r.body.error);
  });

  test('/completion: text, counts, settings and timings', async () => {
    const r = await post(srv.url, '/completion', { prompt: PROMPT, n_predict: 8, temperature: 0, seed: 42 });
    assert.equal(r.status, 200);
    const b = r.body;
    assert.equal(b.content, GREEDY_8);
    assert.equal(b.stop, true);
    assert.equal(b.stop_type, 'limit');
    assert.equal(b.stopping_word, '');
    assert.equal(b.truncated, false);
    assert.equal(typeof b.has_new_line, 'boolean');
    assert.deepEqual(b.tokens, []);
    assert.equal(b.tokens_predicted, 8);
    assert.equal(b.timings.predicted_n, 8);
    assert.equal(b.timings.prompt_n + b.timings.cache_n, b.tokens_evaluated);
    assert.ok(b.timings.prompt_n >= 1);
    assert.equal(b.tokens_cached, b.tokens_evaluated + 7);
    assert.equal(b.prompt, `<s> ${PROMPT}`);
    assert.equal(b.generation_settings.n_predict, 8);
    assert.equal(b.generation_settings.seed, 42);
    assert.equal(b.generation_settings.temperature, 0);
    assert.ok(b.id_slot === 0 || b.id_slot === 1);
    assert.equal(b.index, 0);
  });

  test('/completion: return_tokens gives the generated ids', async () => {
    const r = await post(srv.url, '/completion', { prompt: PROMPT, n_predict: 8, temperature: 0, return_tokens: true });
    assert.equal(r.status, 200);
    assert.equal(r.body.tokens.length, 8);
    assert.ok(r.body.tokens.every((t) => Number.isInteger(t)));
    const detok = await post(srv.url, '/detokenize', { tokens: r.body.tokens });
    assert.equal(detok.body.content, GREEDY_8);
  });

  test('/completion stream: chunks with tokens, then the result with stop true', async () => {
    const events = await streamEvents(srv.url, '/completion', { prompt: PROMPT, n_predict: 8, temperature: 0, seed: 42 });
    let content = '';
    let finals = 0;
    for (const e of events) {
      assert.equal(typeof e.stop, 'boolean');
      if (e.stop) {
        ++finals;
        assert.equal(e.timings.predicted_n, 8);
        assert.equal(e.truncated, false);
        assert.equal(e.stop_type, 'limit');
        assert.equal(typeof e.has_new_line, 'boolean');
        assert.equal(e.generation_settings.n_predict, 8);
        assert.equal(e.generation_settings.seed, 42);
        assert.equal(e.content, '');
      } else {
        assert.ok(e.tokens.length > 0);
        assert.ok(e.tokens.every((t) => Number.isInteger(t)));
        assert.equal(e.index, 0);
        content += e.content;
      }
    }
    assert.equal(finals, 1);
    assert.ok(events.at(-1).stop);
    assert.equal(content, GREEDY_8);  // the same text as the whole response
  });

  test('/completion: token ids, several prompts, mixed ids and text', async () => {
    const tok = await post(srv.url, '/tokenize', { content: PROMPT, add_special: true });
    assert.equal(tok.status, 200);
    const tokens = tok.body.tokens;
    assert.equal(tokens[0], 1);  // BOS
    const one = await post(srv.url, '/completion', { prompt: tokens, n_predict: 8, temperature: 0 });
    assert.equal(one.status, 200);
    assert.equal(one.body.content, GREEDY_8);
    const two = await post(srv.url, '/completion', { prompt: [tokens, tokens], n_predict: 8, temperature: 0 });
    assert.equal(two.status, 200);
    assert.ok(Array.isArray(two.body));
    assert.equal(two.body.length, 2);
    assert.equal(two.body[0].content, two.body[1].content);
    assert.deepEqual(two.body.map((b) => b.index), [0, 1]);
    const mixed = await post(srv.url, '/completion', { prompt: [tokens, PROMPT], n_predict: 8, temperature: 0 });
    assert.equal(mixed.status, 200);
    assert.equal(mixed.body.length, 2);
    assert.equal(mixed.body[0].content, mixed.body[1].content);
    const seq = await post(srv.url, '/completion', {
      prompt: [1, 2, 3, 4, 5, 6, PROMPT, 7, 8, 9, 10, PROMPT], n_predict: 4, temperature: 0,
    });
    assert.equal(seq.status, 200);
    assert.equal(typeof seq.body.content, 'string');
  });

  test('/completion: a prompt longer than the context is a 400', async () => {
    const r = await post(srv.url, '/completion', { prompt: PROMPT.repeat(32), cache_prompt: false });
    assert.equal(r.status, 400);
    assert.ok(r.body.error);
  });

  test('/completion: bad fields are 400s', async () => {
    for (const body of [{}, { prompt: 5 }, { prompt: [] }, { prompt: 'Hi', n_predict: 'x' },
      { prompt: 'Hi', temperature: 'hot' }, { prompt: 'Hi', n_probs: 'x' }]) {
      const r = await post(srv.url, '/completion', body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.ok(r.body.error);
    }
  });

  test('/completion: the same seed gives the same text, other seeds other texts', async () => {
    let last;
    for (let i = 0; i < 3; ++i) {
      const r = await post(srv.url, '/completion', { prompt: PROMPT, seed: 42, temperature: 0, n_predict: 16, cache_prompt: false });
      if (last !== undefined) assert.equal(r.body.content, last);
      last = r.body.content;
    }
    const texts = new Set();
    for (let seed = 0; seed < 4; ++seed) {
      const r = await post(srv.url, '/completion', { prompt: PROMPT, seed, temperature: 1.0, n_predict: 32, cache_prompt: false });
      texts.add(r.body.content);
    }
    assert.ok(texts.size >= 3, [...texts].join(' | '));
  });

  test('/completion: response_fields keeps only the fields named', async () => {
    const r = await post(srv.url, '/completion', {
      prompt: PROMPT, n_predict: 32, response_fields: ['content', 'generation_settings/n_predict', 'prompt'],
    });
    assert.equal(r.status, 200);
    assert.deepEqual(Object.keys(r.body).sort(), ['content', 'generation_settings/n_predict', 'prompt']);
    assert.equal(r.body['generation_settings/n_predict'], 32);
    assert.equal(r.body.prompt, `<s> ${PROMPT}`);
    assert.equal(typeof r.body.content, 'string');
  });

  function checkProb(p) {
    assert.ok(Number.isInteger(p.id) && p.id > 0);
    assert.equal(typeof p.token, 'string');
    assert.ok(p.logprob <= 0);
    assert.ok(Array.isArray(p.bytes));
  }

  test('/completion: n_probs gives completion_probabilities', async () => {
    const r = await post(srv.url, '/completion', { prompt: PROMPT, n_probs: 10, temperature: 0, n_predict: 5 });
    assert.equal(r.status, 200);
    assert.equal(r.body.completion_probabilities.length, 5);
    for (const tok of r.body.completion_probabilities) {
      checkProb(tok);
      assert.equal(tok.top_logprobs.length, 10);
      tok.top_logprobs.forEach(checkProb);
      assert.equal(tok.top_logprobs[0].id, tok.id);  // greedy: the best is the one chosen
    }
  });

  test('/completion stream: n_probs in every chunk', async () => {
    const events = await streamEvents(srv.url, '/completion', { prompt: PROMPT, n_probs: 10, temperature: 0, n_predict: 5 });
    for (const e of events.filter((x) => !x.stop)) {
      assert.equal(e.completion_probabilities.length, 1);
      checkProb(e.completion_probabilities[0]);
      assert.equal(e.completion_probabilities[0].top_logprobs.length, 10);
    }
  });

  for (const [tokenize, openaiStyle] of [[false, false], [false, true], [true, false], [true, true]]) {
    test(`/completion: logit_bias (${tokenize ? 'ids' : 'texts'}, ${openaiStyle ? 'object' : 'pairs'})`, async () => {
      const exclude = ['i', 'I', 'the', 'The', 'to', 'a', 'an', 'be', 'is', 'was', 'but', 'But', 'and', 'And', 'so',
        'So', 'you', 'You', 'he', 'He', 'she', 'She', 'we', 'We', 'they', 'They', 'it', 'It', 'his', 'His', 'her',
        'Her', 'book', 'Book'];
      let bias;
      if (tokenize) {
        const r = await post(srv.url, '/tokenize', { content: ` ${exclude.join(' ')} ` });
        bias = r.body.tokens.map((t) => [t, -100]);
      } else {
        bias = exclude.map((w) => [` ${w} `, -100]);
      }
      if (openaiStyle) bias = Object.fromEntries(bias);
      const r = await post(srv.url, '/completion', { prompt: 'What is the best book', n_predict: 64, temperature: 0, logit_bias: bias });
      assert.equal(r.status, 200);
      for (const w of exclude) assert.equal(r.body.content.includes(` ${w} `), false, `${w} in ${r.body.content}`);
    });
  }

  test('/completion: grammar and json_schema hold the text', async () => {
    const g = await post(srv.url, '/completion', { prompt: 'Hi', grammar: 'root ::= "yes" | "no"', n_predict: 8 });
    assert.equal(g.status, 200);
    assert.ok(['yes', 'no'].includes(g.body.content), g.body.content);
    const s = await post(srv.url, '/completion', { prompt: 'Hi', json_schema: { type: 'boolean' }, n_predict: 8 });
    assert.equal(s.status, 200);
    assert.ok(['true', 'false'].includes(s.body.content), s.body.content);
  });

  test('/completion: a stop string ends the text (stop_type word)', async () => {
    const r = await post(srv.url, '/completion', { prompt: 'Hi', stop: ['a'], n_predict: 30, temperature: 0 });
    assert.equal(r.status, 200);
    assert.equal(r.body.stop_type, 'word');
    assert.equal(r.body.stopping_word, 'a');
    assert.equal(r.body.content.includes('a'), false);
  });

  test('/slots shows both slots busy while two requests run, idle after a cancel', async () => {
    const ctrl = new AbortController();
    const body = (p) => JSON.stringify({ prompt: p, n_predict: 200, ignore_eos: true, temperature: 1.0 });
    const running = ['Once upon a time', 'The sky is blue'].map((p) => fetch(`${srv.url}/completion`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: body(p), signal: ctrl.signal,
    }).catch(() => null));
    const both = await waitFor(async () => {
      const slots = await (await fetch(`${srv.url}/slots`)).json();
      return slots.filter((s) => s.is_processing).length === 2;
    }, 10000);
    assert.ok(both, 'both slots were never busy at once');
    const busy = await fetch(`${srv.url}/slots?fail_on_no_slot=1`);
    ctrl.abort();
    await Promise.all(running);
    if (busy.status !== 200) {  // the requests may have ended in between
      assert.equal(busy.status, 503);
      assert.ok((await busy.json()).error);
    }
    const idle = await waitFor(async () => {
      const slots = await (await fetch(`${srv.url}/slots`)).json();
      return slots.every((s) => !s.is_processing);
    }, 10000);
    assert.ok(idle, 'a slot stayed busy after its client went away');
  });

  test('/tokenize and /detokenize round trip', async () => {
    const content = 'What is the capital of France ?';
    const t = await post(srv.url, '/tokenize', { content });
    assert.equal(t.status, 200);
    assert.ok(t.body.tokens.length > 5);
    assert.notEqual(t.body.tokens[0], 1);  // no BOS unless asked
    const d = await post(srv.url, '/detokenize', { tokens: t.body.tokens });
    assert.equal(d.status, 200);
    assert.equal(d.body.content.trim(), content);
  });

  test('/tokenize with_pieces: text, or bytes where a piece is not UTF-8', async () => {
    const r = await post(srv.url, '/tokenize', { content: 'This is a test string with unicode 媽 and emoji 🤗', with_pieces: true });
    assert.equal(r.status, 200);
    for (const t of r.body.tokens) {
      assert.ok(t.id > 0);
      assert.ok(t.piece.length > 0);
      if (Array.isArray(t.piece)) assert.ok(t.piece.every((b) => Number.isInteger(b) && b >= 0 && b < 256));
      else assert.equal(typeof t.piece, 'string');
    }
    assert.ok(r.body.tokens.some((t) => Array.isArray(t.piece)));  // the byte-fallback pieces of 媽
    assert.equal(r.body.tokens[0].piece, ' T');
  });

  test('/apply-template renders the messages', async () => {
    const r = await post(srv.url, '/apply-template', { messages: [{ role: 'user', content: 'What is today?' }] });
    assert.equal(r.status, 200);
    assert.equal(typeof r.body.prompt, 'string');
    assert.ok(r.body.prompt.includes('What is today?'));
  });

  test('/infill without FIM tokens is refused (501)', async () => {
    const r = await post(srv.url, '/infill', { input_prefix: 'a', input_suffix: 'b' });
    assert.equal(r.status, 501);
    assert.ok(r.body.error.message.includes('prefix token is missing'));
  });

  test('/completion: id_slot beyond the slots is a 400 naming it', { skip: vkllmOnly }, async () => {
    const r = await post(srv.url, '/completion', { prompt: 'Hi', n_predict: 1, id_slot: 5 });
    assert.equal(r.status, 400);
    assert.equal(r.body.error.param, 'id_slot');
  });

  test('/completion: samplers vkllm lacks are refused by name', { skip: vkllmOnly }, async () => {
    for (const [field, value] of [['mirostat', 2], ['typical_p', 0.5], ['xtc_probability', 0.5], ['dry_multiplier', 0.8],
      ['post_sampling_probs', true], ['samplers', ['top_k']]]) {
      const r = await post(srv.url, '/completion', { prompt: 'Hi', n_predict: 1, [field]: value });
      assert.equal(r.status, 400, field);
      assert.equal(r.body.error.param, field);
    }
    const off = await post(srv.url, '/completion', { prompt: 'Hi', n_predict: 1, mirostat: 0, typical_p: 1, top_n_sigma: -1 });
    assert.equal(off.status, 200);
  });
});

describe('llama-server /infill (a random model with FIM tokens)', { skip }, () => {
  let srv;
  let dir;
  before(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'vkllm-fim-'));
    const file = path.join(dir, 'fim.gguf');
    await vkllmExe(['gen-model', '--fim', '-o', file, '--type', 'f32', '--dim', '64', '--layers', '1', '--heads', '2',
      '--ffn', '64', '--vocab', '512', '--ctx', '4096']);
    srv = await startServer(['-c', '4096', '-np', '1'], { modelPath: file });
  });
  after(async () => {
    await srv?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const base = {
    input_prefix: '#include <cstdio>\n#include "llama.h"\n\nint main() {\n',
    prompt: '    int n_threads = llama_',
    input_suffix: '}\n',
    n_predict: 4,
    temperature: 0,
    // Random weights: llama-server fails a reply that is not valid text, so the reply is held to letters.
    grammar: 'root ::= [a-z]+',
  };

  test('without input_extra: the repository pattern around prefix, prompt and suffix', async () => {
    const r = await post(srv.url, '/infill', base);
    assert.equal(r.status, 200);
    assert.equal(typeof r.body.content, 'string');
    assert.equal(r.body.prompt, '<|repo_name|> myproject\n<|file_sep|> filename\n<s><|fim_prefix|> #include <cstdio>\n'
      + '#include "llama.h"\n\nint main() {\n     int n_threads = llama_<|fim_suffix|> }\n<|fim_middle|>');
  });

  test('with input_extra: each file after a file separator, before the edited one', async () => {
    const r = await post(srv.url, '/infill', {
      ...base, input_extra: [{ filename: 'llama.h', text: 'LLAMA_API int32_t llama_n_threads();\n' }],
    });
    assert.equal(r.status, 200);
    assert.ok(r.body.prompt.startsWith('<|repo_name|> myproject\n<|file_sep|> llama.h\n LLAMA_API int32_t '
      + 'llama_n_threads();\n<|file_sep|> filename\n<s><|fim_prefix|>'), r.body.prompt);
  });

  test('a streamed infill ends with the result', async () => {
    const events = await streamEvents(srv.url, '/infill', base);
    assert.ok(events.at(-1).stop);
    const streamed = events.slice(0, -1).reduce((n, e) => n + e.tokens.length, 0);
    assert.equal(events.at(-1).tokens_predicted, streamed);
    assert.ok(streamed >= 1 && streamed <= 4);
    assert.ok(/^[a-z]+$/.test(events.slice(0, -1).map((e) => e.content).join('')));
  });

  for (const extra of [{}, { filename: 'ok' }, { filename: 123 }, { filename: 123, text: 'abc' }, { filename: 123, text: 456 }]) {
    test(`input_extra ${JSON.stringify(extra)} is a 400`, async () => {
      const r = await post(srv.url, '/infill', { ...base, input_extra: [extra] });
      assert.equal(r.status, 400);
      assert.ok(r.body.error);
    });
  }

  test('OpenAI suffix and Ollama suffix fill in the middle with the same prompt', { skip: vkllmOnly }, async () => {
    const prompt = 'int main() {\n    int n = ';
    const suffix = '\n}\n';
    const oa = await post(srv.url, '/v1/completions', { prompt, suffix, max_tokens: 4, temperature: 0 });
    assert.equal(oa.status, 200, JSON.stringify(oa.body));
    const plain = await post(srv.url, '/v1/completions', { prompt, max_tokens: 1, temperature: 0 });
    // The FIM markers and the suffix are in the prompt.
    assert.ok(oa.body.usage.prompt_tokens > plain.body.usage.prompt_tokens + 2);
    const ol = await post(srv.url, '/api/generate', { model: 'fim.gguf', prompt, suffix, stream: false,
      options: { num_predict: 4, temperature: 0 } });
    assert.equal(ol.status, 200, JSON.stringify(ol.body));
    assert.equal(ol.body.prompt_eval_count, oa.body.usage.prompt_tokens);
    assert.equal(ol.body.response, oa.body.choices[0].text);
  });

  test('input_prefix and input_suffix are required', { skip: vkllmOnly }, async () => {
    for (const missing of ['input_prefix', 'input_suffix']) {
      const body = { ...base };
      delete body[missing];
      const r = await post(srv.url, '/infill', body);
      assert.equal(r.status, 400, missing);
    }
  });
});

describe('CORS, as llama.cpp\'s test_security checks it (a server with an API key)', { skip }, () => {
  let srv;
  before(async () => { srv = await startServer(['--api-key', 'llama.cpp']); });
  after(async () => { await srv?.stop(); });

  for (const origin of ['localhost', 'web.mydomain.fr', 'origin.com']) {
    test(`a preflight from ${origin} needs no key and is allowed`, async () => {
      const r = await fetch(`${srv.url}/v1/chat/completions`, {
        method: 'OPTIONS',
        headers: { Origin: origin, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'Authorization' },
      });
      assert.ok(r.status === 200 || r.status === 204, String(r.status));  // llama-server: 200, vkllm: 204
      assert.equal(r.headers.get('access-control-allow-origin'), origin);
      assert.equal(r.headers.get('access-control-allow-credentials'), 'true');
      assert.match(r.headers.get('access-control-allow-methods'), /POST/);
      assert.match(r.headers.get('access-control-allow-headers'), /^\*$|Authorization/i);
    });
  }

  test('the request itself needs the key, and its answer carries the origin', async () => {
    const body = JSON.stringify({ prompt: 'Once', n_predict: 2 });
    let r = await fetch(`${srv.url}/completion`, { method: 'POST', headers: { Origin: 'origin.com' }, body });
    assert.equal(r.status, 401);
    r = await fetch(`${srv.url}/completion`, {
      method: 'POST', headers: { Origin: 'origin.com', Authorization: 'Bearer llama.cpp' }, body,
    });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('access-control-allow-origin'), 'origin.com');
    await r.json();
  });
});

describe('llama-server flags', { skip }, () => {
  test('an unknown flag is refused by name', async () => {
    const bin = peer || exe;
    const args = peer ? ['--no-such-flag'] : ['serve', '--no-such-flag'];
    const { code, stderr } = await new Promise((resolve) => {
      const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
      let err = '';
      child.stdout.on('data', (d) => { err += d; });
      child.stderr.on('data', (d) => { err += d; });
      child.on('close', (c) => resolve({ code: c, stderr: err }));
    });
    assert.notEqual(code, 0);
    assert.ok(stderr.includes('--no-such-flag'), stderr);
  });
});
