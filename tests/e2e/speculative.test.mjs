// Speculative decoding in `vkllm serve` (--draft, --lookup): the text is plain decoding's, for one
// request and for several side by side; usage reports OpenAI's accepted/rejected prediction tokens,
// /completion's timings llama-server's draft_n / draft_n_accepted, /metrics the totals; a draft
// model of another vocabulary is refused at start with the difference named.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';

import { haveModel, metric, model, modelsDir, post, startServer, vkllmExe, vkllmRun } from './harness.mjs';

const skip = haveModel() ? false : 'needs build/vkllm and ../shared/models/stories260K.gguf';
const PROMPTS = ['Once upon a time', 'Lily and Tom went to the park. Lily and Tom', 'The cat sat on the mat. The cat'];
const N = 48;

for (const [name, args] of [['a draft model', ['--draft', model, '--draft-max', '6']], ['prompt lookup', ['--lookup']]]) {
  describe(`vkllm serve with ${name}`, { skip }, () => {
    let srv;
    const plain = [];
    before(async () => {
      for (const p of PROMPTS) plain.push(await vkllmRun(p, N));
      srv = await startServer(['-c', '256', '-np', '3', ...args]);
    });
    after(async () => { await srv?.stop(); });

    test('/completion: the greedy text is plain decoding\'s; timings count drafts', async () => {
      const r = await post(srv.url, '/completion', { prompt: PROMPTS[0], n_predict: N, temperature: 0 });
      assert.equal(r.status, 200);
      assert.equal(r.body.content, plain[0]);
      assert.ok(r.body.timings.draft_n >= r.body.timings.draft_n_accepted, JSON.stringify(r.body.timings));
      if (name === 'a draft model') assert.ok(r.body.timings.draft_n_accepted > 0, JSON.stringify(r.body.timings));
    });

    test('three requests side by side: each one\'s text is plain decoding\'s', async () => {
      const rs = await Promise.all(PROMPTS.map((p) => post(srv.url, '/v1/completions',
        { model: 'm', prompt: p, max_tokens: N, temperature: 0 })));
      for (let i = 0; i < PROMPTS.length; ++i) {
        assert.equal(rs[i].status, 200);
        assert.equal(rs[i].body.choices[0].text, plain[i]);
        const u = rs[i].body.usage;
        assert.equal(u.completion_tokens, N);
        if (u.completion_tokens_details) {
          const d = u.completion_tokens_details;
          assert.ok(d.accepted_prediction_tokens >= 0 && d.rejected_prediction_tokens >= 0, JSON.stringify(u));
        }
      }
      const drafted = await metric(srv.url, 'vkllm_draft_tokens_total');
      const accepted = await metric(srv.url, 'vkllm_draft_tokens_accepted_total');
      assert.ok(drafted > 0 && accepted > 0 && accepted <= drafted, `${accepted} of ${drafted}`);
    });
  });
}

describe('vkllm serve --draft refusals', { skip }, () => {
  test('a draft model of another vocabulary is refused by name', async () => {
    const other = path.join(modelsDir, 'llama-2-tiny-random.gguf');
    await assert.rejects(vkllmExe(['serve', '-m', model, '--port', '0', '--draft', other]),
      /--draft .*llama-2-tiny-random\.gguf: the draft model's vocabulary differs from the model's: it has 32000 tokens, the model 512/);
  });
  test('--draft and --lookup together are refused', async () => {
    await assert.rejects(vkllmExe(['serve', '-m', model, '--draft', model, '--lookup']), /excludes/);
  });
});
