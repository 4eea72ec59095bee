// deploy/nginx/vkllm.conf, as shipped, in front of two `vkllm serve` replicas on loopback: affinity
// by X-Session-Id (a conversation stays on one replica and reuses its prompt prefix there), and a
// replica killed under a 100-request load: every non-streaming request still succeeds (nginx
// retries it on the survivor), a stream cut by the dying replica ends with an error rather than a
// hang, and the survivor's /metrics count what it served. (e2e.openai_client_nginx runs the whole
// OpenAI-client suite through the same setup.)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { startCluster, haveModel, metric, nginxExe, clientAgent } from './harness.mjs';

let OpenAI;
try {
  OpenAI = (await import('openai')).default;
} catch (e) {
  throw new Error(`the npm package 'openai' is not installed: run \`npm ci --prefix tests/e2e\` (scripts/install_deps.sh does): ${e.message}`);
}

const skip = (!haveModel() && 'stories260K.gguf or the vkllm binary is missing') ||
  (!existsSync(nginxExe) && `${nginxExe} is missing (scripts/install_deps.sh installs Debian's nginx)`);
let cluster;
let client;

before(async () => {
  if (skip) return;
  // Each replica's queue holds the whole load, as it must when its peer dies.
  cluster = await startCluster(['--parallel', '4', '--ctx', '512', '--queue', '128']);
  client = new OpenAI({ baseURL: `${cluster.url}/v1`, apiKey: 'unused', maxRetries: 0, httpAgent: clientAgent, timeout: 120000 });
});

after(async () => {
  if (!cluster) return;
  const { results, validationErrors } = await cluster.stop();
  // Replica 0 was killed by the load test; the survivor shuts down cleanly.
  assert.equal(results[1].code, 0, cluster.stderr);
  assert.deepEqual(validationErrors, []);
});

const served = (i) => metric(cluster.replicas[i].url, 'vkllm_requests_total');
const cached = (i) => metric(cluster.replicas[i].url, 'vkllm_prompt_tokens_cached_total');
const session = (id) => ({ headers: { 'X-Session-Id': id } });

// Which replica served `n` requests of session `id` (each time the same one), by their counters.
async function replicaOf(id, n = 1) {
  const before = [await served(0), await served(1)];
  for (let k = 0; k < n; ++k) {
    await client.completions.create({ model: 'x', prompt: `Once upon a time ${id}`, max_tokens: 4, temperature: 0 }, session(id));
  }
  const delta = [(await served(0)) - before[0], (await served(1)) - before[1]];
  assert.ok((delta[0] === n && delta[1] === 0) || (delta[0] === 0 && delta[1] === n),
    `session ${id}: ${delta[0]} and ${delta[1]} requests on the two replicas`);
  return delta[0] === n ? 0 : 1;
}

test('a conversation (X-Session-Id) stays on one replica, which reuses its prompt prefix', { skip }, async () => {
  const r = await replicaOf('conv-a', 4);
  // Its next turn repeats the conversation so far: the replica's slot has the prefix.
  const c0 = await cached(r);
  const history = 'Once upon a time there was a little cat who liked to play in the garden with a red ball.';
  await client.completions.create({ model: 'x', prompt: history, max_tokens: 8, temperature: 0 }, session('conv-a'));
  await client.completions.create({ model: 'x', prompt: `${history} One day`, max_tokens: 8, temperature: 0 }, session('conv-a'));
  assert.ok((await cached(r)) > c0, 'the second turn found no cached prefix');
  // Other conversations hash elsewhere: some of a few session ids land on the other replica.
  const where = [];
  for (let i = 0; i < 12; ++i) where.push(await replicaOf(`conv-${i}`));
  assert.ok(where.includes(0) && where.includes(1), `12 sessions all on replica ${where[0]}`);
});

test('a replica killed under 100 requests: non-streaming ones all succeed, cut streams end with an error, the survivor serves the rest', { skip }, async () => {
  const before = [await served(0), await served(1)];
  const logStart = cluster.accessLog().length;
  let done = 0;
  let killedAt = -1;
  let deadShare = 0;  // requests replica 0 had finished (its /metrics) when it was killed
  let checking = false;
  const results = [];
  const one = async (i) => {
    const opts = session(`load-${i}`);
    const body = { model: 'x', prompt: `Once upon a time, story ${i}:`, max_tokens: 48, temperature: 0.8, seed: i };
    if (i % 5 === 4) {  // 20 streams
      try {
        let text = '';
        let finish = null;
        for await (const c of await client.completions.create({ ...body, stream: true }, opts)) {
          text += c.choices[0]?.text ?? '';
          finish = c.choices[0]?.finish_reason ?? finish;
        }
        results[i] = { stream: true, ok: finish !== null, text };
      } catch (e) {
        results[i] = { stream: true, ok: false, error: String(e) };
      }
    } else {
      try {
        const r = await client.completions.create(body, opts);
        results[i] = { stream: false, ok: r.choices[0].text.length > 0 && r.choices[0].finish_reason !== null };
      } catch (e) {
        results[i] = { stream: false, ok: false, error: String(e) };
      }
    }
    // The kill: once 15 requests have finished and replica 0 has finished some of them (on a slow
    // driver one replica may still be compiling its kernels when the other answers the first 15).
    if (++done >= 15 && killedAt < 0 && !checking) {
      checking = true;
      const share = (await served(0)) - before[0];
      if (share > 0 && killedAt < 0) {
        killedAt = done;
        deadShare = share;
        cluster.replicas[0].child.kill('SIGKILL');
      }
      checking = false;
    }
  };
  const t0 = Date.now();
  await Promise.all(Array.from({ length: 100 }, (_, i) => one(i)));
  assert.ok(killedAt > 0 && killedAt < 100, `replica 0 was killed after ${killedAt} answers`);
  const plain = results.filter((r) => !r.stream);
  const streams = results.filter((r) => r.stream);
  assert.equal(plain.length, 80);
  const failed = plain.filter((r) => !r.ok);
  assert.deepEqual(failed, [], `${failed.length} non-streaming requests failed`);
  // Every stream ended (the test would time out on a hang): whole, or with an error when the
  // replica died under it.
  assert.equal(streams.length, 20);
  for (const s of streams) assert.ok(s.ok || /terminated|closed|aborted|ECONNRESET|premature|socket/i.test(s.error), JSON.stringify(s));
  const cut = streams.filter((s) => !s.ok).length;
  // Both replicas had a share before the kill, and the survivor served what came after.
  const survivor = (await served(1)) - before[1];
  assert.equal((await cluster.replicas[0].exited).signal, 'SIGKILL');
  assert.ok(deadShare > 0, 'replica 0 had no share of the load before it was killed');
  // nginx's log of the load (the metrics reads above are GETs, not completions): each request ended
  // on replica 0 (answered before the kill, or a stream cut by it) or on the survivor, which counted
  // exactly those; the ones that had tried replica 0 first were retried there.
  const port = (i) => `127.0.0.1:${new URL(cluster.replicas[i].url).port}`;
  const load = cluster.accessLog().slice(logStart).filter((e) => e.uri === '/v1/completions');
  assert.equal(load.length, 100);
  const endedOn0 = load.filter((e) => e.upstreams.at(-1) === port(0)).length;  // answered before the kill, or cut
  const endedOn1 = load.filter((e) => e.upstreams.at(-1) === port(1)).length;
  const retried = load.filter((e) => e.upstreams.length > 1).length;
  assert.equal(endedOn0 + endedOn1, 100, 'requests that ended on neither replica');
  assert.ok(endedOn0 >= cut);
  assert.equal(survivor, endedOn1, `the survivor's /metrics count ${survivor}, nginx sent it ${endedOn1}`);
  assert.ok(retried > 0, 'no request was retried on the survivor');
  // nginx took the dead replica out (its error log names the refused connections).
  assert.match(cluster.nginxLog(), /Connection refused|prematurely closed|reset by peer/);
  console.log(`# 100 requests in ${Date.now() - t0} ms; replica 0 had finished ${deadShare} when killed after ${killedAt} ` +
              `answers and answered ${endedOn0 - cut}; the survivor served ${survivor} (${retried} retried from replica 0); ` +
              `${cut} of 20 streams cut`);
});
