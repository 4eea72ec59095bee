// Starts `vkllm serve` on 127.0.0.1 with a free port for the end-to-end tests, and stops it.
// Paths come from the environment CTest sets (VKLLM_EXE, VKLLM_MODEL), with fallbacks for a
// manual `node --test` from tests/e2e/ after building into build/.
import { spawn, execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repo = path.resolve(here, '../..');
export const exe = process.env.VKLLM_EXE ?? path.join(repo, 'build/vkllm');
export const modelsDir = process.env.VKLLM_MODELS_DIR ?? path.resolve(repo, '../shared/models');
export const model = process.env.VKLLM_MODEL ?? path.join(modelsDir, 'stories260K.gguf');

// Extra environment for the vkllm processes only (a sanitized build's LD_PRELOAD and options, which
// node itself must not get): "K=V|K=V".
export function childEnv() {
  const env = { ...process.env };
  for (const kv of (process.env.VKLLM_CHILD_ENV ?? '').split('|')) {
    const i = kv.indexOf('=');
    if (i > 0) env[kv.slice(0, i)] = kv.slice(i + 1);
  }
  return env;
}

export function haveModel() {
  return existsSync(model) && existsSync(exe);
}

// `vkllm serve` with `args` (on modelPath, default stories260K); resolves once /health says ok. The returned object has the base URL,
// the child process, its captured stderr, and stop() (SIGTERM, then the exit code and the time it
// took).
export async function startServer(args = [], { readyTimeoutMs = 60000, modelPath = model } = {}) {
  const child = spawn(exe, ['serve', '-m', modelPath, '--host', '127.0.0.1', '--port', '0', '--validate', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: childEnv(),
  });
  let stdout = '';
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`vkllm serve printed no address in time; stderr:\n${stderr}`)), readyTimeoutMs);
    child.stdout.on('data', (d) => {
      stdout += d;
      const m = /listening on (http:\/\/[^\s]+)/.exec(stdout);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    exited.then(({ code }) => reject(new Error(`vkllm serve exited (${code}) before listening; stderr:\n${stderr}`)));
  });
  const deadline = Date.now() + readyTimeoutMs;
  for (;;) {
    try {
      const r = await fetch(`${url}/health`);
      if (r.status === 200) break;
    } catch { /* not accepting yet */ }
    if (Date.now() > deadline) throw new Error(`vkllm serve never became ready; stderr:\n${stderr}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url,
    child,
    exited,
    get stderr() { return stderr; },
    get stdout() { return stdout; },
    async stop(signal = 'SIGTERM') {
      const t0 = Date.now();
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      const { code, signal: sig } = await exited;
      // The server runs with --validate: any Vulkan validation error is a failure of the test.
      const validationErrors = stderr.match(/\[validation error\][^\n]*/g) ?? [];
      return { code, signal: sig, ms: Date.now() - t0, validationErrors };
    },
  };
}

// What `vkllm run` prints for a prompt, greedy, without echoing the prompt.
export function vkllmRun(prompt, n) {
  return execFileSync(exe, ['run', '-m', model, '-p', prompt, '-n', String(n), '--temp', '0', '--no-echo'], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
    env: childEnv(),
  });
}

// The value of one sample line of a Prometheus text page.
export async function metric(url, name, headers = {}) {
  const text = await (await fetch(`${url}/metrics`, { headers })).text();
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  return m ? Number(m[1]) : undefined;
}

export async function waitFor(pred, timeoutMs = 5000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (await pred()) return true;
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, 50));
  }
}
