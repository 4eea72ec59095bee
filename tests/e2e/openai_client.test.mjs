// `vkllm serve` driven by the official OpenAI Node client (npm `openai` v4), as a desktop app
// would: model list, chat and completions, whole and streamed, logprobs, errors, and the API key.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { startServer, haveModel, vkllmRun, modelsDir, metric, waitFor, clientAgent } from './harness.mjs';

// The client comes from tests/e2e/node_modules (npm ci, which scripts/install_deps.sh runs).
let OpenAI;
try {
  OpenAI = (await import('openai')).default;
} catch (e) {
  throw new Error(`the npm package 'openai' is not installed: run \`npm ci --prefix tests/e2e\` (scripts/install_deps.sh does): ${e.message}`);
}

const KEY = 'sk-e2e-test-key';
let server;
let client;

before(async () => {
  if (!haveModel()) return;
  server = await startServer(['--parallel', '4', '--api-key', KEY, '--ctx', '1024']);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY, maxRetries: 0, httpAgent: clientAgent, timeout: 60000 });
});

after(async () => {
  if (!server) return;
  const { code, ms, validationErrors, graceful } = await server.stop();
  assert.equal(code, 0, server.stderr);
  assert.deepEqual(validationErrors, []);
  assert.ok(graceful, server.stderr);
  assert.ok(ms < 30000, `shutdown took ${ms} ms`);
});

const skip = !haveModel() && 'stories260K.gguf or the vkllm binary is missing';
const chatMessages = [{ role: 'user', content: 'Tell me a story about a cat.' }];

test('models.list names the loaded file', { skip }, async () => {
  const page = await client.models.list();
  assert.equal(page.data.length, 1);
  assert.equal(page.data[0].id, 'stories260K.gguf');
  assert.equal(page.data[0].object, 'model');
  assert.equal(page.data[0].owned_by, 'vkllm');
});

test('a greedy completion equals `vkllm run` for the same prompt', { skip }, async () => {
  const r = await client.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 40, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.model, 'stories260K');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].text, await vkllmRun('Once upon a time', 40));
  assert.equal(r.usage.completion_tokens, 40);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 40);
  assert.equal(r.choices[0].finish_reason, 'length');
});

test('a batch of prompts: one choice per prompt, each what the prompt alone gives, whole and streamed', { skip }, async () => {
  const prompts = ['Once upon a time', 'Lily and Ben', 'The cat'];
  const alone = [];
  for (const prompt of prompts) {
    alone.push((await client.completions.create({ model: 'x', prompt, max_tokens: 12, temperature: 0 })).choices[0].text);
  }
  const r = await client.completions.create({ model: 'x', prompt: prompts, max_tokens: 12, temperature: 0 });
  assert.equal(r.choices.length, 3);
  for (const c of r.choices) assert.equal(c.text, alone[c.index]);
  const single = await client.completions.create({ model: 'x', prompt: prompts[0], max_tokens: 12, temperature: 0 });
  assert.ok(r.usage.prompt_tokens > single.usage.prompt_tokens);
  const texts = ['', '', ''];
  const stream = await client.completions.create({ model: 'x', prompt: prompts, max_tokens: 12, temperature: 0, stream: true });
  for await (const chunk of stream) for (const c of chunk.choices) texts[c.index] += c.text;
  assert.deepEqual(texts, alone);
});

test('the empty prompt gives the published greedy story', { skip }, async () => {
  const expected = readFileSync(path.join(modelsDir, 'stories260K.greedy200.txt'), 'utf8');
  const r = await client.completions.create({ model: 'x', prompt: '', max_tokens: 200, temperature: 0 });
  assert.equal(r.choices[0].text, expected);
});

test('a chat completion, whole', { skip }, async () => {
  const r = await client.chat.completions.create({ model: 'stories260K', messages: chatMessages, max_tokens: 12, temperature: 0, seed: 1 });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(typeof r.created, 'number');
  assert.equal(r.choices[0].index, 0);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 5);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
});

test('a chat stream: role first, the same text as the whole response, usage last', { skip }, async () => {
  const args = { model: 'stories260K', messages: chatMessages, max_tokens: 24, temperature: 0 };
  const whole = await client.chat.completions.create(args);
  const stream = await client.chat.completions.create({ ...args, stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  assert.equal(chunks[0].choices[0].delta.content, '');
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage.completion_tokens, whole.usage.completion_tokens);
  const finish = chunks.at(-2);
  assert.equal(finish.choices[0].finish_reason, whole.choices[0].finish_reason);
  assert.deepEqual(finish.choices[0].delta, {});
  let text = '';
  for (const c of chunks) {
    assert.equal(c.object, 'chat.completion.chunk');
    assert.equal(c.id, chunks[0].id);
    for (const ch of c.choices) text += ch.delta.content ?? '';
  }
  assert.equal(text, whole.choices[0].message.content);
});

test('a completions stream', { skip }, async () => {
  const stream = await client.completions.create({ model: 'x', prompt: 'Once upon a time', max_tokens: 20, temperature: 0, stream: true });
  let text = '';
  let finish = null;
  for await (const c of stream) {
    assert.equal(c.object, 'text_completion');
    text += c.choices[0].text;
    finish = c.choices[0].finish_reason ?? finish;
  }
  assert.equal(text, await vkllmRun('Once upon a time', 20));
  assert.equal(finish, 'length');
});

test('logprobs: chat top_logprobs and completions logprobs', { skip }, async () => {
  const r = await client.chat.completions.create({
    model: 'x', messages: chatMessages, max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 3,
  });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  for (const t of content) {
    assert.ok(t.logprob <= 0);
    assert.ok(Array.isArray(t.bytes));
    assert.equal(t.top_logprobs.length, 3);
    // Greedy: the chosen token is the most likely one.
    assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4);
  }
  const c = await client.completions.create({ model: 'x', prompt: 'Once upon a time', max_tokens: 4, temperature: 0, logprobs: 2 });
  const lp = c.choices[0].logprobs;
  assert.equal(lp.tokens.length, 4);
  assert.equal(lp.tokens.join(''), c.choices[0].text);
  assert.equal(lp.token_logprobs.length, 4);
  assert.equal(Object.keys(lp.top_logprobs[0]).length, 2);
  assert.deepEqual(lp.text_offset.slice(0, 1), [0]);
});

test('stop sequences end the text before them', { skip }, async () => {
  const full = await vkllmRun('Once upon a time', 30);
  const word = full.split(' ').filter((w) => w.length > 2)[3];
  const r = await client.completions.create({ model: 'x', prompt: 'Once upon a time', max_tokens: 30, temperature: 0, stop: [word] });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].text, full.slice(0, full.indexOf(word)));
});

test('invalid requests raise BadRequestError naming the parameter', { skip }, async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'x', messages: chatMessages, temperature: 5 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature' && e.type === 'invalid_request_error',
  );
  await assert.rejects(
    client.chat.completions.create({ model: 'x', messages: chatMessages, n: 9 }),
    (e) => e.status === 400 && e.param === 'n',
  );
  const long = 'Once upon a time there was a cat. '.repeat(200);
  await assert.rejects(
    client.completions.create({ model: 'x', prompt: long }),
    (e) => e.status === 400 && e.code === 'context_length_exceeded',
  );
});

test('a wrong API key raises AuthenticationError', { skip }, async () => {
  const bad = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'sk-wrong', maxRetries: 0, httpAgent: clientAgent });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401 && e.code === 'invalid_api_key');
});

test('aborting a stream from the client frees its slot', { skip }, async () => {
  const stream = await client.completions.create({ model: 'x', prompt: 'Once upon a time', max_tokens: 400, temperature: 0.8, stream: true });
  let n = 0;
  for await (const c of stream) {
    if (c.choices[0]?.text) n++;
    if (n === 3) { stream.controller.abort(); break; }
  }
  const headers = { Authorization: `Bearer ${KEY}` };
  assert.ok(await waitFor(async () => (await metric(server.url, 'vkllm_slots_busy', headers)) === 0), 'the slot stayed busy');
});

// Structured output: stories260K never writes JSON by itself, so every parse below is the grammar's
// doing. Each output is checked by an independent validator (Ajv).
const { default: Ajv } = await import('ajv');
const personSchema = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 12 },
    age: { type: 'integer', minimum: 1, maximum: 120 },
    pets: { type: 'array', items: { enum: ['cat', 'dog', 'bird'] }, maxItems: 3 },
    mood: { anyOf: [{ type: 'null' }, { type: 'string', pattern: '^[a-z]{1,8}$' }] },
  },
  required: ['name', 'age', 'pets'],
  additionalProperties: false,
};

test('response_format json_schema: whole and streamed outputs parse and validate', { skip }, async () => {
  const validate = new Ajv().compile(personSchema);
  for (const [i, stream] of [[0, false], [1, true], [2, false], [3, true]]) {
    const req = {
      model: 'x', messages: chatMessages, max_tokens: 250, temperature: 1.0, seed: 100 + i,
      response_format: { type: 'json_schema', json_schema: { name: 'person', strict: true, schema: personSchema } },
    };
    let text = '';
    let finish;
    if (stream) {
      for await (const c of await client.chat.completions.create({ ...req, stream: true })) {
        text += c.choices[0]?.delta?.content ?? '';
        finish = c.choices[0]?.finish_reason ?? finish;
      }
    } else {
      const r = await client.chat.completions.create(req);
      text = r.choices[0].message.content;
      finish = r.choices[0].finish_reason;
    }
    assert.equal(finish, 'stop', text);
    const value = JSON.parse(text);
    assert.ok(validate(value), `${text}: ${JSON.stringify(validate.errors)}`);
  }
});

test('response_format json_object and the grammar field', { skip }, async () => {
  for (const stream of [false, true]) {
    const req = { model: 'x', messages: chatMessages, max_tokens: 200, temperature: 0.8, seed: 7, response_format: { type: 'json_object' } };
    let text = '';
    if (stream) {
      for await (const c of await client.chat.completions.create({ ...req, stream: true })) text += c.choices[0]?.delta?.content ?? '';
    } else {
      text = (await client.chat.completions.create(req)).choices[0].message.content;
    }
    // Within max_tokens the object may be cut short ('length'); what was written is still a prefix
    // of an object. Most seeds close it: require a parse when it stopped.
    assert.equal(text[0], '{');
  }
  const r = await client.completions.create({ model: 'x', prompt: 'The cat is', max_tokens: 10, temperature: 1, seed: 3, grammar: 'root ::= " " ("happy" | "sad") "."' });
  assert.match(r.choices[0].text, /^ (happy|sad)\.$/);
  assert.equal(r.choices[0].finish_reason, 'stop');
});

test('a schema that cannot be enforced is a 400 naming the keyword', { skip }, async () => {
  await assert.rejects(
    client.chat.completions.create({
      model: 'x', messages: chatMessages,
      response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'object', patternProperties: { '^x': {} } } } },
    }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'response_format.json_schema.schema' && /patternProperties/.test(e.message),
  );
  await assert.rejects(
    client.chat.completions.create({ model: 'x', messages: chatMessages, tool_choice: 'required', tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', not: {} } } }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'tools[0].function.parameters' && /'not'/.test(e.message),
  );
});

// stories260K never calls a tool by itself: a required or named tool_choice must still give a call
// whose arguments are valid for the tool's parameters, whole and streamed, with no markup in content.
const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', minLength: 1, maxLength: 20 }, unit: { enum: ['celsius', 'fahrenheit'] } },
      required: ['city'],
      additionalProperties: false,
    },
  },
};
const timeTool = {
  type: 'function',
  function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string', maxLength: 10 } }, required: ['zone'], additionalProperties: false } },
};

async function callOnce(req, stream) {
  if (!stream) {
    const r = await client.chat.completions.create(req);
    return { content: r.choices[0].message.content, calls: r.choices[0].message.tool_calls ?? [], finish: r.choices[0].finish_reason };
  }
  let content = '';
  const calls = [];
  let finish;
  for await (const c of await client.chat.completions.create({ ...req, stream: true })) {
    const d = c.choices[0]?.delta ?? {};
    content += d.content ?? '';
    for (const tc of d.tool_calls ?? []) {
      // OpenAI's deltas: the first fragment of a call has its id and name, later ones add arguments.
      if (!calls[tc.index]) calls[tc.index] = { id: tc.id, type: tc.type, function: { name: tc.function?.name ?? '', arguments: '' } };
      calls[tc.index].function.arguments += tc.function?.arguments ?? '';
    }
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  return { content, calls, finish };
}

test('tool_choice required and named force valid calls, whole and streamed', { skip }, async () => {
  const ajv = new Ajv();
  const validators = { get_weather: ajv.compile(weatherTool.function.parameters), get_time: ajv.compile(timeTool.function.parameters) };
  const cases = [
    [false, 'required', [weatherTool]],
    [true, 'required', [weatherTool]],
    [false, 'required', [weatherTool, timeTool]],
    [true, { type: 'function', function: { name: 'get_time' } }, [weatherTool, timeTool]],
  ];
  for (const [i, [stream, choice, tools]] of cases.entries()) {
    const req = { model: 'x', messages: chatMessages, max_tokens: 200, temperature: 0.9, seed: 40 + i, tools, tool_choice: choice, parallel_tool_calls: false };
    const { content, calls, finish } = await callOnce(req, stream);
    assert.equal(finish, 'tool_calls', JSON.stringify({ content, calls }));
    assert.ok(!content, `content must be empty: ${content}`);
    assert.equal(calls.length, 1);
    const call = calls[0];
    assert.equal(call.type, 'function');
    assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
    if (typeof choice === 'object') assert.equal(call.function.name, choice.function.name);
    const validate = validators[call.function.name];
    assert.ok(validate, `unknown tool ${call.function.name}`);
    const args = JSON.parse(call.function.arguments);
    assert.ok(validate(args), `${call.function.arguments}: ${JSON.stringify(validate.errors)}`);
  }
});

// tool_choice auto: stories260K's template has no tool format (the generic one: a call is an answer
// that opens with {"tool_calls"; the lazy grammar holds it from there, which the C++ tests check).
// An answer that opens with other JSON is not a call: a bias on '{' gives free text, never a
// forced call; without it the model tells a story; stop strings work beside tools.
test('tool_choice auto: answers stay free until a call begins, and stop works beside tools', { skip }, async () => {
  const tok = await fetch(`${server.url}/tokenize`, {
    method: 'POST', headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ content: 'a{' }),
  }).then((r) => r.json());
  const brace = tok.tokens[tok.tokens.length - 1];
  const unitTool = {
    type: 'function',
    function: { name: 'set_unit', parameters: { type: 'object', properties: { unit: { enum: ['celsius', 'fahrenheit'] } }, required: ['unit'], additionalProperties: false } },
  };
  for (const stream of [false, true]) {
    const braces = await callOnce({ model: 'x', messages: chatMessages, max_tokens: 30, seed: 3, temperature: 0.8, tools: [unitTool], logit_bias: { [brace]: 100 } }, stream);
    assert.equal(braces.calls.length, 0);
    assert.equal(braces.finish, 'length');
    assert.ok(braces.content.startsWith('{'), braces.content);
  }
  const plain = await callOnce({ model: 'x', messages: chatMessages, max_tokens: 40, seed: 3, tools: [unitTool], stop: ['.'] }, false);
  assert.equal(plain.calls.length, 0);
  assert.ok(plain.content && !plain.content.includes('.'), plain.content);
  assert.equal(plain.finish, 'stop');
});

test('a follow-up turn with the assistant tool_calls and the tool result is answered', { skip }, async () => {
  const first = await client.chat.completions.create({
    model: 'x', messages: chatMessages, max_tokens: 200, seed: 5, tools: [weatherTool], tool_choice: 'required', parallel_tool_calls: false,
  });
  assert.equal(first.choices[0].finish_reason, 'tool_calls', JSON.stringify(first.choices[0]));
  const msg = first.choices[0].message;
  const r = await client.chat.completions.create({
    model: 'x', max_tokens: 8, tools: [weatherTool],
    messages: [...chatMessages, msg, { role: 'tool', tool_call_id: msg.tool_calls[0].id, content: '{"temp": 21}' }],
  });
  assert.equal(r.object, 'chat.completion');
  assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
});

test('logit_bias -100 bans the greedy choice', { skip }, async () => {
  const req = { model: 'x', prompt: 'Once upon a time', max_tokens: 1, temperature: 0 };
  const first = (await client.completions.create(req)).choices[0].text;
  const tok = await fetch(`${server.url}/tokenize`, {
    method: 'POST', headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ content: first }),
  }).then((r) => r.json());
  // The text's tokens (SentencePiece may add its dummy-prefix piece): the greedy token is among them.
  const bias = Object.fromEntries(tok.tokens.map((t) => [t, -100]));
  const banned = (await client.completions.create({ ...req, logit_bias: bias })).choices[0].text;
  assert.notEqual(banned, first);
  await assert.rejects(
    client.completions.create({ ...req, logit_bias: { 999999: 1 } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'logit_bias',
  );
});

test('n choices, whole and streamed: one per index, each its own seed', { skip }, async () => {
  const req = { model: 'x', messages: chatMessages, max_tokens: 12, temperature: 1.0, seed: 3, n: 3 };
  const whole = await client.chat.completions.create(req);
  assert.deepEqual(whole.choices.map((c) => c.index), [0, 1, 2]);
  const texts = whole.choices.map((c) => c.message.content);
  assert.ok(new Set(texts).size > 1, `three seeds, one text: ${texts}`);
  // Choice i samples with seed + i: choice 1 here is choice 0 of a request with seed 4.
  const alone = await client.chat.completions.create({ ...req, n: 1, seed: 4 });
  assert.equal(alone.choices[0].message.content, texts[1]);
  const streamed = ['', '', ''];
  let usage;
  for await (const c of await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } })) {
    for (const ch of c.choices) streamed[ch.index] += ch.delta?.content ?? '';
    if (c.usage) usage = c.usage;
  }
  assert.deepEqual(streamed, texts);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
});
