// Starts `vkllm serve` on 127.0.0.1 with a free port for the end-to-end tests, and stops it.
// Paths come from the environment CTest sets (VKLLM_EXE, VKLLM_MODEL), with fallbacks for a
// manual `node --test` from tests/e2e/ after building into build/.
import { spawn } from 'node:child_process';
import http from 'node:http';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
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

// The HTTP agent of the tests' OpenAI clients. The client's own (agentkeepalive) keeps idle sockets
// for 4 s and ignores the server's `Keep-Alive: timeout=2`, so a request after a 2-4 s pause (a
// `vkllm run` between two requests on a slow, sanitized build) could go out on a socket the server
// had just closed: "Connection error". Node's agent honours the hint; real clients retry instead
// (the tests use maxRetries 0 so that no other error is hidden).
export const clientAgent = new http.Agent({ keepAlive: true });

export function haveModel() {
  return existsSync(model) && existsSync(exe);
}

// `vkllm serve` with `args` (on modelPath, default stories260K); resolves once /health says ok. The returned object has the base URL,
// the child process, its captured stderr, and stop() (SIGTERM, then the exit code and the time it
// took). With VKLLM_E2E_VIA_NGINX=1 (the e2e.*_nginx tests) it is a cluster instead: two replicas
// behind nginx (startCluster), which the tests see as one server.
export async function startServer(args = [], opts = {}) {
  if (process.env.VKLLM_E2E_PEER) return startPeer(args, opts);
  if (process.env.VKLLM_E2E_VIA_NGINX === '1') return startCluster(args, opts);
  return startReplica(args, opts);
}

// VKLLM_E2E_PEER=/path/to/llama-server: the tests that encode llama-server's behaviour run against
// it instead of vkllm (with the same arguments: use only flags both take), which proves each check
// is llama-server's. CPU only (-dev none), two threads. Never needed by the project's own runs.
export const peer = process.env.VKLLM_E2E_PEER ?? '';

async function startPeer(args = [], { readyTimeoutMs = 60000, modelPath = model } = {}) {
  const [port] = await freePorts(1);
  const child = spawn(peer, ['-m', modelPath, '--host', '127.0.0.1', '--port', String(port), '-dev', 'none', '-t', '2',
    ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + readyTimeoutMs;
  for (;;) {
    try {
      if ((await fetch(`${url}/health`)).status === 200) break;
    } catch { /* not accepting yet */ }
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`the peer never became ready:\n${stderr}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url,
    child,
    exited,
    get stderr() { return stderr; },
    async stop(signal = 'SIGTERM') {
      const t0 = Date.now();
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      const { code, signal: sig } = await exited;
      return { code, signal: sig, ms: Date.now() - t0, validationErrors: [], graceful: true };
    },
  };
}

async function startReplica(args = [], { readyTimeoutMs = 60000, modelPath = model } = {}) {
  const child = spawn(exe, ['serve', '-m', modelPath, '--host', '127.0.0.1', '--port', '0', '--validate', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: childEnv(),
  });
  let stdout = '';
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  // 'close' comes after 'exit' once stdout and stderr are drained: the last lines are read by then.
  const drained = new Promise((resolve) => child.on('close', resolve));
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
      await drained;
      // The server runs with --validate: any Vulkan validation error is a failure of the test.
      const validationErrors = stderr.match(/\[validation error\][^\n]*/g) ?? [];
      // graceful: the server ended every stream and joined every connection itself (its own 4 s
      // limit), rather than exiting past open connections. Wall-clock time depends on the machine's
      // load (CI runs two suites at once), so tests bound it only loosely, as a hang guard.
      const graceful = /vkllm serve: stopped\n/.test(stderr) && !/exiting without waiting/.test(stderr);
      return { code, signal: sig, ms: Date.now() - t0, validationErrors, graceful };
    },
  };
}

// Runs the vkllm binary and resolves with its stdout (rejects naming the exit code and stderr).
// Asynchronous on purpose: while a synchronous child runs, the event loop cannot see a keep-alive
// connection closed by the server's idle timeout, and the next request reuses the dead socket.
export function vkllmExe(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(exe, args, { stdio: ['ignore', 'pipe', 'pipe'], env: childEnv() });
    let out = '';
    let err = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { err += d; });
    child.on('error', reject);
    child.on('close', (code, signal) => {
      if (code === 0) resolve(out);
      else reject(new Error(`vkllm ${args[0]} exited with ${code ?? signal}:\n${err}`));
    });
  });
}

// What `vkllm run` prints for a prompt, greedy, without echoing the prompt.
export function vkllmRun(prompt, n) {
  return vkllmExe(['run', '-m', model, '-p', prompt, '-n', String(n), '--temp', '0', '--no-echo']);
}

// A JSON POST: its status and parsed body.
export async function post(url, route, body) {
  const r = await fetch(`${url}${route}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: r.status, body: await r.json() };
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

export const nginxExe = process.env.VKLLM_NGINX ?? '/usr/sbin/nginx';

// Free TCP ports on 127.0.0.1 (bound, then released for the caller).
async function freePorts(n) {
  const net = await import('node:net');
  const servers = [];
  const ports = [];
  for (let i = 0; i < n; ++i) {
    const srv = net.createServer();
    await new Promise((resolve, reject) => { srv.once('error', reject); srv.listen(0, '127.0.0.1', resolve); });
    servers.push(srv);
    ports.push(srv.address().port);
  }
  for (const srv of servers) await new Promise((resolve) => srv.close(resolve));
  return ports;
}

// deploy/nginx/vkllm.conf as shipped, with its listen port and its upstream's server lines replaced by
// `port` and one line per replica port, inside a minimal nginx.conf whose files live in `dir`.
export function nginxConfig(dir, port, replicaPorts) {
  const shipped = readFileSync(path.join(repo, 'deploy/nginx/vkllm.conf'), 'utf8');
  const servers = /^(\s*)server 127\.0\.0\.1:\d+ (.*);\n/m.exec(shipped);
  if (!servers) throw new Error('deploy/nginx/vkllm.conf: no upstream server line');
  let conf = shipped.replace(/^\s*server 127\.0\.0\.1:\d+ .*;\n/mg, '');
  conf = conf.replace(/(upstream vkllm \{\n)/, `$1${replicaPorts.map((p) => `${servers[1]}server 127.0.0.1:${p} ${servers[2]};\n`).join('')}`);
  conf = conf.replace(/listen 127\.0\.0\.1:\d+;/, `listen 127.0.0.1:${port};`);
  if (!conf.includes(`listen 127.0.0.1:${port};`)) throw new Error('deploy/nginx/vkllm.conf: no listen line');
  for (const sub of ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) mkdirSync(path.join(dir, sub), { recursive: true });
  return `daemon off;
master_process off;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 1024; }
http {
    log_format upstreams '$upstream_addr|$status|$request_uri';  # every replica a request tried, in order
    access_log ${dir}/access.log upstreams;
    client_body_temp_path ${dir}/client_body;
    proxy_temp_path ${dir}/proxy;
    fastcgi_temp_path ${dir}/fastcgi;
    uwsgi_temp_path ${dir}/uwsgi;
    scgi_temp_path ${dir}/scgi;
${conf}
}
`;
}

// `replicas` vkllm serve processes with the same `args`, behind nginx with deploy/nginx/vkllm.conf.
// The result looks like startServer's (url: nginx's) plus `replicas` (each startReplica's) and
// `nginx` (its process); stop() stops nginx, then every replica, and reports the worst exit.
export async function startCluster(args = [], { replicas = 2, ...opts } = {}) {
  if (!existsSync(nginxExe)) throw new Error(`${nginxExe} is missing: scripts/install_deps.sh installs Debian's nginx`);
  const servers = [];
  try {
    for (let i = 0; i < replicas; ++i) servers.push(await startReplica(args, opts));
  } catch (e) {
    for (const s of servers) await s.stop();
    throw e;
  }
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vkllm-nginx-'));
  const [port] = await freePorts(1);
  writeFileSync(path.join(dir, 'nginx.conf'), nginxConfig(dir, port, servers.map((s) => new URL(s.url).port)));
  const nginx = spawn(nginxExe, ['-p', dir, '-c', path.join(dir, 'nginx.conf'), '-e', path.join(dir, 'error.log')],
    { stdio: ['ignore', 'pipe', 'pipe'] });
  let nginxErr = '';
  nginx.stderr.on('data', (d) => { nginxErr += d; });
  const nginxExited = new Promise((resolve) => nginx.on('exit', (code, signal) => resolve({ code, signal })));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 10000;
  for (;;) {
    // The port was free a moment ago; answered by nginx (its Server header) means this nginx got it.
    try {
      const r = await fetch(`${url}/health`);
      if (r.status === 200 && /^nginx/.test(r.headers.get('server') ?? '') && nginx.exitCode === null) break;
    } catch { /* not listening yet */ }
    if (nginx.exitCode !== null || Date.now() > deadline) {
      if (nginx.exitCode === null) nginx.kill('SIGKILL');
      await nginxExited;
      for (const s of servers) await s.stop();
      let log = '';
      try { log = readFileSync(path.join(dir, 'error.log'), 'utf8'); } catch { /* none written */ }
      rmSync(dir, { recursive: true, force: true });
      throw new Error(`nginx did not start: ${nginxErr}${log}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url,
    replicas: servers,
    nginx,
    dir,
    get stderr() { return servers.map((s, i) => `--- replica ${i}\n${s.stderr}`).join('\n') + `--- nginx\n${nginxErr}`; },
    nginxLog() { return readFileSync(path.join(dir, 'error.log'), 'utf8'); },
    // One entry per request nginx answered: the replicas ("127.0.0.1:PORT") it tried, in order, and the status.
    accessLog() {
      return readFileSync(path.join(dir, 'access.log'), 'utf8').split('\n').filter((l) => l).map((l) => {
        const [up, status, uri] = l.split('|');
        return { upstreams: up.split(/, | : /), status: Number(status), uri };
      });
    },
    async stop(signal = 'SIGTERM') {
      const t0 = Date.now();
      if (nginx.exitCode === null && nginx.signalCode === null) nginx.kill('SIGQUIT');  // graceful: open streams end
      await nginxExited;
      let code = 0;
      const validationErrors = [];
      const results = [];
      for (const s of servers) {
        const r = await s.stop(signal);
        results.push(r);
        if (r.code !== 0) code = r.code;
        validationErrors.push(...r.validationErrors);
      }
      rmSync(dir, { recursive: true, force: true });
      return { code, ms: Date.now() - t0, validationErrors, results, graceful: results.every((r) => r.graceful) };
    },
  };
}
