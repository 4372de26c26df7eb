// Shared by the browser tests: a real `rdq serve` on a free loopback port
// (the binary in RDQ_BIN) over a fresh embedded store, a fresh PostgreSQL
// schema or the in-memory store, a small API client (the pull worker the tests use), and headless
// Chromium (Debian's /usr/bin/chromium) through playwright-core.

import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
export const ROOT = resolve(here, '..', '..');

export const TOKENS = {
  admin: 'dashboard-admin-token-0001',
  reader: 'dashboard-reader-token-001',
  worker: 'dashboard-worker-token-001',
};

const PG_BASE = process.env.RDQ_TEST_POSTGRES || 'postgres://postgres@127.0.0.1:5432/test';

function rdqBin() {
  if (process.env.RDQ_BIN) return process.env.RDQ_BIN;
  for (const p of ['target/debug/rdq', 'target/release/rdq']) {
    const full = join(ROOT, p);
    if (existsSync(full)) return full;
  }
  throw new Error('RDQ_BIN is not set and target/debug/rdq does not exist: cargo build --workspace --bin rdq');
}

let seq = 0;
function unique() {
  return `dash${process.pid}x${Date.now() % 100000}x${seq++}`;
}

/**
 * Starts `rdq serve` on `kind` ('embedded', 'postgres' or 'memory'); with `tokens`
 * the admin, reader (submit, work) and worker tokens are configured, else
 * the server runs open (loopback, no configuration). `config` lines
 * (TOML: `[[sources]]` tables, …) are appended to the configuration file.
 */
export async function startServer(kind, { tokens = true, config: extra = [] } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'rdq-dashboard-'));
  const tag = unique();
  const stores = { postgres: `${PG_BASE}?schema=${tag}`, memory: 'memory:' };
  const store = stores[kind] || join(dir, 'data');
  const config = join(dir, 'rdq.toml');
  const lines = ['[maintenance]', 'reaper_interval_ms = 100', ''];
  if (tokens) {
    lines.push(
      '[[tokens]]', 'name = "ops"', `token = "${TOKENS.admin}"`, 'scopes = ["admin"]', '',
      '[[tokens]]', 'name = "viewer"', `token = "${TOKENS.reader}"`, 'scopes = ["submit", "work"]', '',
      '[[tokens]]', 'name = "worker"', `token = "${TOKENS.worker}"`, 'scopes = ["submit", "work"]', '',
    );
  }
  lines.push(...extra);
  writeFileSync(config, lines.join('\n'));
  const child = spawn(rdqBin(), ['serve', '--listen', '127.0.0.1:0', '--store', store, '--config', config, '--log', 'info'], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  const base = await new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`rdq serve did not start within 60 s:\n${log}`)), 60000);
    child.stderr.on('data', (chunk) => {
      log += chunk.toString();
      const m = log.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) { clearTimeout(timer); ok(m[1]); }
    });
    child.on('exit', (code) => { clearTimeout(timer); fail(new Error(`rdq serve exited with ${code}:\n${log}`)); });
  });
  child.stderr.on('data', (chunk) => { log += chunk.toString(); });
  const exited = new Promise((ok) => child.on('exit', ok));

  return {
    kind,
    base,
    log: () => log,
    api: (token, method, path, body) => api(base, token, method, path, body),
    async stop() {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 15000);
      await exited;
      clearTimeout(timer);
      if (kind === 'postgres') {
        const r = spawnSync('psql', [PG_BASE, '-q', '-c', `DROP SCHEMA IF EXISTS ${tag} CASCADE`], { encoding: 'utf8' });
        if (r.status !== 0) console.warn(`could not drop schema ${tag}: ${r.stderr || r.error}`);
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** One API call; answers `{ status, body }` (body parsed when JSON). */
export async function api(base, token, method, path, body) {
  const headers = {};
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await resp.text();
  let parsed = text;
  try { parsed = JSON.parse(text); } catch (_) { /* not JSON */ }
  return { status: resp.status, body: parsed, headers: resp.headers };
}

/**
 * A pull worker over the HTTP API: claims up to `max` tasks of `queue` and
 * settles each with what `decide(envelope)` returns (`{outcome, error?}`).
 * Returns the settled envelopes.
 */
export async function work(server, queue, decide, max = 100) {
  const claimed = await server.api(TOKENS.worker, 'POST', `/v1/queues/${queue}/claim`, { max, lease_ms: 30000 });
  if (claimed.status !== 200) throw new Error(`claim: ${claimed.status} ${JSON.stringify(claimed.body)}`);
  const settles = claimed.body.tasks.map((t) => Object.assign({ id: t.id, lease_token: t.lease_token }, decide(t.envelope)));
  if (settles.length === 0) return [];
  const r = await server.api(TOKENS.worker, 'POST', '/v1/settle', { settles });
  if (r.status !== 200) throw new Error(`settle: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.results.map((x) => {
    if (x.status !== 200) throw new Error(`settle item: ${JSON.stringify(x)}`);
    return x.envelope;
  });
}

/** Submits a task; answers its envelope. */
export async function submit(server, body) {
  const r = await server.api(TOKENS.worker, 'POST', '/v1/tasks', Object.assign({ handler_ref: 'charge' }, body));
  if (r.status !== 201) throw new Error(`submit: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

export async function launchBrowser() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-dev-shm-usage'],
  });
}

/** A new page that fails the test on any page error or CSP violation. */
export async function newPage(browser) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 }, acceptDownloads: true });
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/status of (401|403|404|409|400)/.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  page.problems = problems;
  return page;
}

/** Signs in through the token dialog. */
export async function signIn(page, base, token) {
  await page.goto(`${base}/ui`);
  await page.getByLabel('Token', { exact: true }).fill(token);
  await page.getByRole('button', { name: 'Use token' }).click();
  await page.locator('#identity').filter({ hasText: 'Signed in as' }).waitFor();
}

export const screenshotDir = join(ROOT, 'docs', 'img');
