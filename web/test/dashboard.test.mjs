// The dashboard in a real browser (docs/dashboard.md), on the embedded
// store and on PostgreSQL: tasks fail through the API (a pull worker),
// an operator finds why in the DLQ, filters, redrives from the dashboard
// and the worker then succeeds them; a read-only token finds every action
// refused; the main controls have labels and work from the keyboard.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  TOKENS, startServer, launchBrowser, newPage, signIn, submit, work, screenshotDir,
} from './harness.mjs';

const STORES = (process.env.RDQ_DASHBOARD_STORES || 'embedded,postgres').split(',').filter(Boolean);

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser?.close(); });

/** Submits one task per entry and fails each permanently with its error type. */
async function kill(server, queue, kinds) {
  const envs = [];
  for (const [i, kind] of kinds.entries()) {
    envs.push(await submit(server, kind.binary
      ? { queue, payload: Buffer.from([0, 1, 2, 0xfe, 0xff, 65, 66]).toString('base64'), payload_content_type: 'application/octet-stream' }
      : { queue, payload_json: { order: 1000 + i, amount_cents: 4200 }, headers: { tenant: 'acme' } }));
  }
  const byId = new Map(envs.map((e, i) => [e.id, kinds[i]]));
  const settled = await work(server, queue, (env) => ({
    outcome: 'PERMANENT_FAILURE',
    error: {
      type: byId.get(env.id).type,
      message: `${byId.get(env.id).type} for order ${env.id}`,
      stack: 'at charge (billing.js:42)\nat run (worker.js:7)',
    },
  }));
  assert.equal(settled.length, kinds.length);
  for (const s of settled) assert.equal(s.status, 'DEAD');
  return envs;
}

async function dlqRows(page) {
  return page.locator('#dead tbody tr').evaluateAll((rows) => rows.map((r) => ({
    id: r.getAttribute('data-id'),
    reason: r.querySelectorAll('code')[0].textContent,
    type: r.querySelectorAll('code')[1].textContent,
  })));
}

/** Every form control on the page has an accessible name. */
async function unlabelled(page) {
  return page.evaluate(() => {
    const missing = [];
    for (const el of document.querySelectorAll('input, select, textarea, button')) {
      if (el.type === 'hidden' || el.closest('dialog:not([open])')) continue;
      const named = (el.labels && el.labels.length > 0) || el.getAttribute('aria-label')
        || el.getAttribute('aria-labelledby') || (el.tagName === 'BUTTON' && el.textContent.trim());
      if (!named) missing.push(el.outerHTML.slice(0, 120));
    }
    return missing;
  });
}

for (const kind of STORES) {
  describe(`the dashboard on the ${kind} store`, () => {
    let server;
    before(async () => { server = await startServer(kind); });
    after(async () => { await server?.stop(); });

    it('finds why tasks died, filters by error type, redrives them and sees them succeed', async () => {
      const queue = 'billing';
      const envs = await kill(server, queue, [
        { type: 'card.Declined' }, { type: 'http.Status503' }, { type: 'card.Declined' },
        { type: 'http.Status503', binary: true }, { type: 'card.Declined' },
      ]);
      const page = await newPage(browser);
      const sent = [];
      page.on('request', (r) => sent.push([r.url(), r.headers().authorization || null]));
      await signIn(page, server.base, TOKENS.admin);
      assert.equal(await page.locator('#sign-in').isVisible(), false);
      assert.equal(await page.locator('#sign-out').isVisible(), true);

      // The overview: the queue with its numbers and the last hour.
      const row = page.locator('#queues tbody tr[data-queue="billing"]');
      await row.waitFor();
      assert.deepEqual(await row.locator('td.n').allTextContents(), ['0', '0', '0', '5']);
      assert.match(await row.locator('svg.spark').getAttribute('aria-label'), /5 processed, 5 failed/);
      if (kind === 'embedded') await page.screenshot({ path: join(screenshotDir, 'dashboard-overview.png') });

      // The DLQ: the breakdown by error type, with the newest example of each.
      await row.getByRole('link', { name: 'billing' }).first().click();
      // The breakdown and the list load side by side: wait for both.
      await page.locator('#breakdown').waitFor();
      await page.locator('#dead').waitFor();
      const groups = await page.locator('#breakdown tbody tr').evaluateAll((rows) => rows.map((r) => [
        r.getAttribute('data-error-type'), r.querySelector('td.n').textContent, r.querySelector('a').textContent]));
      assert.deepEqual(groups, [['card.Declined', '3', envs[4].id], ['http.Status503', '2', envs[3].id]]);
      assert.deepEqual((await dlqRows(page)).map((r) => r.id), envs.map((e) => e.id).reverse());
      // Why they died: each failed permanently.
      const reasons = await page.locator('#reasons tbody tr').evaluateAll((rows) => rows.map((r) => [
        r.getAttribute('data-reason'), r.querySelector('td.n').textContent]));
      assert.deepEqual(reasons, [['PERMANENT_FAILURE', '5']]);
      assert.deepEqual((await dlqRows(page)).map((r) => r.reason), Array(5).fill('PERMANENT_FAILURE'));
      if (kind === 'embedded') await page.screenshot({ path: join(screenshotDir, 'dashboard-dlq.png'), fullPage: true });

      // Filter by reason: none was cancelled.
      await page.getByLabel('Why it died').selectOption('CANCELLED');
      await page.getByRole('button', { name: 'Apply filter' }).click();
      await page.locator('#dead-empty').waitFor();
      await page.getByLabel('Why it died').selectOption('');

      // Filter by error type.
      await page.getByLabel('Error type (glob)').fill('card.*');
      await page.getByRole('button', { name: 'Apply filter' }).click();
      await page.waitForFunction(() => document.querySelectorAll('#dead tbody tr').length === 3);
      const filtered = await dlqRows(page);
      assert.deepEqual(filtered.map((r) => r.type), ['card.Declined', 'card.Declined', 'card.Declined']);

      // Redrive everything matching: the dry run's count, then the redrive.
      await page.getByRole('button', { name: 'Redrive all matching…' }).click();
      const dialog = page.locator('#confirm');
      await dialog.waitFor();
      assert.match(await page.locator('#confirm-text').textContent(), /Dry run: 3 task\(s\) with error type card\.\* would be redriven/);
      if (kind === 'embedded') await page.screenshot({ path: join(screenshotDir, 'dashboard-redrive-confirm.png') });
      await page.getByRole('button', { name: 'Redrive 3' }).click();
      await page.locator('#banner').filter({ hasText: 'Redrove 3 task(s).' }).waitFor();
      await page.locator('#dead-empty').waitFor();

      // The worker now succeeds them.
      const succeeded = await work(server, queue, () => ({ outcome: 'SUCCESS' }));
      assert.deepEqual(succeeded.map((e) => e.id).sort(), [envs[0].id, envs[2].id, envs[4].id].sort());

      // The task page shows the whole story: failure, redrive, success.
      await page.goto(`${server.base}/ui#/queues/billing/tasks/${envs[0].id}`);
      await page.locator('#attempts').waitFor();
      const outcomes = await page.locator('#attempts li .badge').allTextContents();
      assert.deepEqual(outcomes, ['PERMANENT_FAILURE', 'SUCCESS']);
      assert.match(await page.locator('#envelope').textContent(), /statusSUCCEEDED/);
      assert.match(await page.locator('#envelope').textContent(), /redrive_count1/);
      assert.equal(await page.locator('#payload').getAttribute('class'), 'json');
      assert.deepEqual(JSON.parse(await page.locator('#payload').textContent()), { order: 1000, amount_cents: 4200 });
      assert.match(await page.locator('#headers').textContent(), /tenantacme/);
      const stack = page.locator('#attempts details.stack');
      assert.equal(await stack.evaluate((d) => d.open), false, 'the stack starts collapsed');
      await stack.locator('summary').click();
      assert.match(await stack.locator('pre').textContent(), /billing\.js:42/);
      assert.equal(await page.getByRole('button', { name: 'Redrive', exact: true }).count(), 0, 'no redrive for a SUCCEEDED task');

      // A binary payload is shown as hex; redrive one task from its page.
      await page.goto(`${server.base}/ui#/queues/billing/tasks/${envs[3].id}`);
      await page.locator('#payload').waitFor();
      assert.equal(await page.locator('#payload').getAttribute('class'), 'hex');
      assert.match(await page.locator('#payload').textContent(), /00 01 02 fe ff 41 42/);
      if (kind === 'embedded') await page.screenshot({ path: join(screenshotDir, 'dashboard-task.png'), fullPage: true });
      await page.locator('#redrive-task').click();
      await page.locator('#confirm[open]').waitFor();
      await page.locator('#confirm-ok').click();
      await page.locator('#banner').filter({ hasText: 'Redriven: the task is PENDING again.' }).waitFor();
      assert.equal((await server.api(TOKENS.admin, 'GET', `/v1/tasks/${envs[3].id}`)).body.status, 'PENDING');

      // Redrive a selection from the DLQ list.
      await page.goto(`${server.base}/ui#/queues/billing`);
      await page.locator('#dead').waitFor();
      assert.deepEqual((await dlqRows(page)).map((r) => r.id), [envs[1].id]);
      await page.getByLabel(`Select task ${envs[1].id}`).check();
      assert.equal(await page.locator('#selected-count').textContent(), '1 selected');
      await page.getByRole('button', { name: 'Redrive selected' }).click();
      await page.locator('#confirm-ok').click();
      await page.locator('#banner').filter({ hasText: 'Redrove 1 task(s).' }).waitFor();
      const last = await work(server, queue, () => ({ outcome: 'SUCCESS' }));
      assert.deepEqual(last.map((e) => e.id).sort(), [envs[1].id, envs[3].id].sort());

      // Every action is in the audit log, which the dashboard shows.
      await page.goto(`${server.base}/ui#/audit`);
      await page.locator('#audit').waitFor();
      const actions = await page.locator('#audit tbody tr').evaluateAll((rows) => rows.map((r) => [
        r.getAttribute('data-action'), r.children[1].textContent, r.children[4].textContent, r.children[5].textContent]));
      assert.deepEqual(actions, [
        ['dlq.redrive', 'ops', '1', 'no'], ['dlq.redrive', 'ops', '1', 'yes'],
        ['dlq.redrive', 'ops', '1', 'no'],
        ['dlq.redrive', 'ops', '3', 'no'], ['dlq.redrive', 'ops', '3', 'yes'],
      ]);
      // The token went in a header on every API call, never in a URL or a cookie.
      const apiCalls = sent.filter(([url]) => new URL(url).pathname.startsWith('/v1/'));
      assert.ok(apiCalls.length > 10);
      // (The first call, before the token was entered, is the 401 that asked for it.)
      assert.deepEqual(apiCalls[0], [`${server.base}/v1/whoami`, null]);
      assert.ok(apiCalls.slice(1).every(([, auth]) => auth === `Bearer ${TOKENS.admin}`), JSON.stringify(apiCalls));
      assert.ok(sent.every(([url]) => !url.includes(TOKENS.admin)));
      assert.deepEqual(await page.context().cookies(), []);
      assert.deepEqual(page.problems, []);
      await page.context().close();
    });

    it('cancels a pending task after a confirmation and shows why it is dead', async () => {
      const queue = 'outbox';
      const env = await submit(server, { queue, handler_ref: 'send', payload_json: { to: 'a@b.c' }, headers: { tenant: 'acme' } });
      await submit(server, { queue, handler_ref: 'send', payload_json: { to: 'd@e.f' }, headers: { tenant: 'globex' } });
      const page = await newPage(browser);
      await signIn(page, server.base, TOKENS.admin);
      // Find it among the queue's tasks by header, then open it.
      await page.goto(`${server.base}/ui#/queues/${queue}/tasks`);
      await page.locator('#tasks').waitFor();
      assert.equal(await page.locator('#tasks tbody tr').count(), 2);
      await page.getByLabel('Header (KEY=VALUE)').fill('tenant=acme');
      await page.getByRole('button', { name: 'Apply filter' }).click();
      await page.waitForFunction(() => document.querySelectorAll('#tasks tbody tr').length === 1);
      await page.locator(`#tasks tbody tr[data-id="${env.id}"] a`).click();
      await page.locator('#cancel-task').click();
      await page.locator('#confirm').waitFor();
      assert.match(await page.locator('#confirm-text').textContent(), /reason CANCELLED/);
      await page.getByRole('button', { name: 'Cancel task', exact: true }).last().click();
      await page.locator('#banner').filter({ hasText: 'Cancelled' }).waitFor();
      await page.locator('#dead-reason').waitFor();
      assert.match(await page.locator('#dead-reason').textContent(), /CANCELLED — decided by ops/);
      assert.match(await page.locator('#dead-reason').textContent(), /cancelled from the dashboard/);
      assert.equal(await page.locator('#cancel-task').count(), 0, 'a dead task has no cancel button');
      assert.deepEqual(page.problems, []);
      await page.context().close();
    });

    it('asks a running task to stop after a confirmation and shows the request', async () => {
      const queue = 'longjobs';
      const env = await submit(server, { queue, handler_ref: 'crunch', payload_json: { n: 1 } });
      const claimed = await server.api(TOKENS.worker, 'POST', `/v1/queues/${queue}/claim`, { max: 1, lease_ms: 60000 });
      assert.equal(claimed.body.tasks[0].id, env.id);
      const page = await newPage(browser);
      await signIn(page, server.base, TOKENS.admin);
      await page.goto(`${server.base}/ui#/tasks/${env.id}`);
      await page.locator('#cancel-running-task').click();
      await page.locator('#confirm').waitFor();
      assert.match(await page.locator('#confirm-text').textContent(), /not retried/);
      await page.getByRole('button', { name: 'Cancel running task', exact: true }).last().click();
      await page.locator('#banner').filter({ hasText: 'Asked to stop' }).waitFor();
      await page.locator('#cancel-requested').waitFor();
      assert.match(await page.locator('#cancel-requested').textContent(), /Asked to stop by ops/);
      assert.equal(await page.locator('#cancel-running-task').count(), 0, 'asked once');
      // The worker hears of it at its next extension, then stops.
      const t = claimed.body.tasks[0];
      const ext = await server.api(TOKENS.worker, 'POST', `/v1/tasks/${t.id}/lease`, { lease_token: t.lease_token, extend_ms: 60000 });
      assert.equal(ext.body.cancel_requested.by, 'ops');
      const settled = await server.api(TOKENS.worker, 'POST', `/v1/tasks/${t.id}/settle`,
        { lease_token: t.lease_token, outcome: 'RETRYABLE_FAILURE', error: { type: 'app.Stopped', message: 'stopped' } });
      assert.equal(settled.body.dead_reason.code, 'CANCELLED');
      assert.deepEqual(page.problems, []);
      await page.context().close();
    });

    it('exports, purges with confirmation, pauses and edits the policy with the API\'s codes', async () => {
      const queue = 'mail';
      await kill(server, queue, [{ type: 'smtp.Timeout' }, { type: 'smtp.Refused' }]);
      const page = await newPage(browser);
      await signIn(page, server.base, TOKENS.admin);

      // Pause and resume from the overview.
      const row = page.locator('#queues tbody tr[data-queue="mail"]');
      await row.getByRole('button', { name: 'Pause mail' }).click();
      await row.locator('.badge.paused').waitFor();
      assert.equal((await server.api(TOKENS.admin, 'GET', `/v1/queues/${queue}/config`)).body.paused, true);
      await page.locator('#queues tbody tr[data-queue="mail"]').getByRole('button', { name: 'Resume mail' }).click();
      await page.locator('#queues tbody tr[data-queue="mail"] .badge.running').waitFor();
      assert.equal((await server.api(TOKENS.admin, 'GET', `/v1/queues/${queue}/config`)).body.paused, false);

      // Export: a JSONL download of the DLQ.
      await page.goto(`${server.base}/ui#/queues/mail`);
      await page.locator('#dead').waitFor();
      const [download] = await Promise.all([
        page.waitForEvent('download'),
        page.getByRole('button', { name: 'Export JSONL' }).click(),
      ]);
      assert.equal(download.suggestedFilename(), 'mail-dlq.jsonl');
      const lines = readFileSync(await download.path(), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
      assert.deepEqual(lines.map((e) => e.status), ['DEAD', 'DEAD']);

      // Purge asks first; cancelling changes nothing.
      await page.getByRole('button', { name: 'Purge DLQ…' }).click();
      await page.locator('#confirm[open]').waitFor();
      assert.match(await page.locator('#confirm-text').textContent(), /Delete all 2 dead task\(s\) of mail/);
      await page.keyboard.press('Escape');
      await page.locator('#confirm').waitFor({ state: 'hidden' });
      assert.equal((await dlqRows(page)).length, 2);
      await page.getByRole('button', { name: 'Purge DLQ…' }).click();
      await page.getByRole('button', { name: 'Delete 2' }).click();
      await page.locator('#banner').filter({ hasText: 'Purged 2 task(s).' }).waitFor();
      await page.locator('#dead-empty').waitFor();

      // The policy: a refused value shows the API's code at the field.
      await page.getByRole('link', { name: 'Policy', exact: true }).click();
      await page.locator('#policy').waitFor();
      await page.getByLabel('max_attempts').fill('0');
      await page.getByRole('button', { name: 'Save policy' }).click();
      await page.locator('#policy-max_attempts-error').filter({ hasText: 'INVALID_POLICY' }).waitFor();
      assert.match(await page.locator('#banner').textContent(), /INVALID_POLICY/);
      assert.notEqual((await server.api(TOKENS.admin, 'GET', `/v1/queues/${queue}/config`)).body.max_attempts, 0);
      await page.getByLabel('max_attempts').fill('7');
      await page.getByRole('button', { name: 'Save policy' }).click();
      await page.locator('#banner').filter({ hasText: 'Saved: max_attempts.' }).waitFor();
      assert.equal((await server.api(TOKENS.admin, 'GET', `/v1/queues/${queue}/config`)).body.max_attempts, 7);
      if (kind === 'embedded') await page.screenshot({ path: join(screenshotDir, 'dashboard-policy.png'), fullPage: true });
      assert.deepEqual(page.problems, []);
      await page.context().close();
    });

    it('shows a read-only token the numbers and every action disabled with the reason; the server refuses anyway', async () => {
      const queue = 'reports';
      const [env] = await kill(server, queue, [{ type: 'pdf.RenderError' }]);
      const page = await newPage(browser);
      await signIn(page, server.base, TOKENS.reader);
      assert.match(await page.locator('#identity').textContent(), /viewer \(submit, work\): read-only/);

      const row = page.locator('#queues tbody tr[data-queue="reports"]');
      await row.waitFor();
      const pause = row.getByRole('button', { name: 'Pause reports' });
      assert.equal(await pause.isDisabled(), true);
      assert.match(await row.locator('.reason').textContent(), /needs a token with the admin scope/);

      // The DLQ is readable (breakdown, list, export); changing it is not.
      await page.goto(`${server.base}/ui#/queues/reports`);
      await page.locator('#breakdown').waitFor();
      await page.locator('#dead').waitFor();
      assert.deepEqual((await dlqRows(page)).map((r) => r.id), [env.id]);
      for (const name of ['Redrive selected', 'Redrive all matching…', 'Purge DLQ…']) {
        const b = page.getByRole('button', { name, exact: true });
        assert.equal(await b.isDisabled(), true, `${name} is disabled`);
        assert.equal(await b.getAttribute('title'), 'needs a token with the admin scope');
      }
      assert.equal(await page.getByRole('button', { name: 'Export JSONL', exact: true }).isDisabled(), false);

      // The policy is shown, not editable.
      await page.goto(`${server.base}/ui#/queues/reports/policy`);
      await page.locator('#save-policy').waitFor();
      assert.equal(await page.locator('#save-policy').isDisabled(), true);
      assert.equal(await page.getByLabel('max_attempts', { exact: true }).isDisabled(), true);

      await page.goto(`${server.base}/ui#/tasks/${env.id}`);
      await page.locator('#task-actions').waitFor();
      for (const name of ['Redrive', 'Delete']) {
        const b = page.getByRole('button', { name, exact: true });
        assert.equal(await b.isDisabled(), true, `${name} is disabled`);
        assert.equal(await b.getAttribute('title'), 'needs a token with the admin scope');
      }
      if (kind === 'embedded') await page.screenshot({ path: join(screenshotDir, 'dashboard-read-only.png'), fullPage: true });

      // Enabling the button by hand does not help: the server refuses.
      await page.evaluate(() => { document.querySelector('#redrive-task').disabled = false; });
      const refused = await page.evaluate(async ([q, id, token]) => {
        const r = await fetch(`/v1/queues/${q}/dead/redrive`, {
          method: 'POST', headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' }, body: JSON.stringify({ ids: [id] }),
        });
        return [r.status, (await r.json()).code];
      }, [queue, env.id, TOKENS.reader]);
      assert.deepEqual(refused, [403, 'FORBIDDEN']);
      assert.equal((await server.api(TOKENS.admin, 'GET', `/v1/tasks/${env.id}`)).body.status, 'DEAD');
      assert.deepEqual(page.problems, []);
      await page.context().close();
    });

    it('labels the main controls and works from the keyboard alone', async () => {
      const queue = 'keys';
      await kill(server, queue, [{ type: 'kbd.Enter' }, { type: 'kbd.Tab' }]);
      const page = await newPage(browser);
      await page.goto(`${server.base}/ui`);
      // The token dialog takes focus; type and press Enter.
      await page.locator('#login[open]').waitFor();
      assert.equal(await page.evaluate(() => document.activeElement.id), 'token-input');
      await page.keyboard.type(TOKENS.admin);
      await page.keyboard.press('Enter');
      await page.locator('#queues').waitFor();
      assert.deepEqual(await unlabelled(page), []);

      // After a load, the first Tab reaches the skip link; Tab on to the
      // queue's link, Enter.
      await page.reload();
      await page.locator('#queues').waitFor();
      await page.keyboard.press('Tab');
      assert.equal(await page.evaluate(() => document.activeElement.textContent), 'Skip to content');
      let reached = false;
      for (let i = 0; i < 60 && !reached; i++) {
        await page.keyboard.press('Tab');
        reached = await page.evaluate(() => document.activeElement.tagName === 'A' && document.activeElement.textContent === 'keys');
      }
      assert.ok(reached, 'Tab reaches the queue link');
      await page.keyboard.press('Enter');
      await page.locator('#breakdown').waitFor();
      // The new page's heading takes the focus once the page is rendered.
      await page.waitForFunction(() => document.activeElement.tagName === 'H1', null, { timeout: 10000 });
      assert.deepEqual(await unlabelled(page), []);
      for (const label of ['Error type (glob)', 'Submitted from', 'Submitted before', 'Select every task on this page', 'Task id']) {
        assert.equal(await page.getByLabel(label, { exact: true }).count(), 1, label);
      }

      // Filter from the keyboard: focus the field, type, Enter.
      await page.getByLabel('Error type (glob)').focus();
      await page.keyboard.type('kbd.Tab');
      await page.keyboard.press('Enter');
      await page.waitForFunction(() => document.querySelectorAll('#dead tbody tr').length === 1);
      // Select with Space, open the redrive with Enter, cancel with Escape.
      await page.locator('#dead tbody input.select').focus();
      await page.keyboard.press('Space');
      assert.equal(await page.locator('#selected-count').textContent(), '1 selected');
      await page.locator('#redrive-selected').focus();
      await page.keyboard.press('Enter');
      await page.locator('#confirm[open]').waitFor();
      assert.equal(await page.evaluate(() => document.activeElement.id), 'confirm-cancel');
      await page.keyboard.press('Escape');
      await page.locator('#confirm').waitFor({ state: 'hidden' });
      const still = await server.api(TOKENS.admin, 'GET', `/v1/queues/${queue}/dead`);
      assert.equal(still.body.items.length, 2, 'Escape redrove nothing');

      // The task page and the policy page are labelled too.
      await page.locator('#dead tbody th a').focus();
      await page.keyboard.press('Enter');
      await page.locator('#attempts').waitFor();
      assert.deepEqual(await unlabelled(page), []);
      await page.goto(`${server.base}/ui#/queues/keys/policy`);
      await page.locator('#policy').waitFor();
      assert.deepEqual(await unlabelled(page), []);
      assert.deepEqual(page.problems, []);
      await page.context().close();
    });
  });
}

// Flow control needs a store that keeps flow limits (capability
// claim_flow); the in-memory store does.
describe('the schedules page', () => {
  let server;
  before(async () => { server = await startServer('memory'); });
  after(async () => { await server?.stop(); });

  it('lists schedules with their last task and skips, and pauses, runs and deletes them after confirmations', async () => {
    const put = await server.api(TOKENS.admin, 'PUT', '/v1/schedules/tick',
      { task: { queue: 'ticks', handler_ref: 'tick' }, spec: { every_ms: 1000 } });
    assert.equal(put.status, 201, JSON.stringify(put.body));
    // The server's scheduler fires it within a few seconds.
    let state;
    for (let i = 0; i < 50; i++) {
      state = (await server.api(TOKENS.admin, 'GET', '/v1/schedules/tick')).body;
      if (state.last_fired_task) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(state.last_fired_task, JSON.stringify(state));

    const page = await newPage(browser);
    await signIn(page, server.base, TOKENS.admin);
    await page.locator('#nav-schedules').click();
    const row = page.locator('#schedules tbody tr[data-schedule="tick"]');
    await row.waitFor();
    assert.match(await row.textContent(), /every 1 s/);
    assert.match(await row.locator('.skips').textContent(), /none|catch_up/);
    const link = row.locator('.last-task a');
    assert.match(await link.getAttribute('href'), /^#\/queues\/ticks\/tasks\/[0-9A-Z]{26}$/);

    await page.getByRole('button', { name: 'Pause tick' }).click();
    await page.locator('#banner').filter({ hasText: 'tick paused' }).waitFor();
    await page.locator('#schedules tbody tr[data-schedule="tick"] .badge.paused').waitFor();
    const nightly = await server.api(TOKENS.admin, 'PUT', '/v1/schedules/nightly.report?owner=code',
      { task: { queue: 'reports', handler_ref: 'build-report' }, spec: { cron: '30 2 * * *' },
        tz: 'Europe/London', overlap: 'skip_if_running' });
    assert.equal(nightly.status, 201, JSON.stringify(nightly.body));
    await page.locator('#nav-queues').click();
    await page.locator('#nav-schedules').click();
    await page.locator('#schedules tbody tr[data-schedule="nightly.report"]').waitFor();
    await page.screenshot({ path: join(screenshotDir, 'dashboard-schedules.png'), fullPage: true });

    await page.getByRole('button', { name: 'Run tick now' }).click();
    await page.locator('#confirm').waitFor();
    assert.match(await page.locator('#confirm-text').textContent(), /once now/);
    await page.locator('#confirm-ok').click();
    await page.locator('#banner').filter({ hasText: 'a manual run of tick' }).waitFor();
    const manual = (await server.api(TOKENS.admin, 'GET', '/v1/queues/ticks/tasks?header=rdq.schedule_manual%3Dtrue')).body;
    assert.equal(manual.items.length, 1, JSON.stringify(manual));

    await page.getByRole('button', { name: 'Delete tick' }).click();
    await page.locator('#confirm').waitFor();
    await page.locator('#confirm-ok').click();
    await page.locator('#banner').filter({ hasText: 'Deleted schedule tick' }).waitFor();
    assert.equal(await page.locator('#schedules tbody tr[data-schedule="tick"]').count(), 0);
    assert.equal((await server.api(TOKENS.admin, 'GET', '/v1/schedules/tick')).status, 404);
    assert.deepEqual(page.problems, []);
    await page.context().close();
  });
});

// A Kafka source whose broker does not answer: the server serves, and the
// source shows its error while it tries again (the rdq binary's default
// features include Kafka).
describe('the sources page', () => {
  let server;
  before(async () => {
    server = await startServer('memory', {
      config: [
        '', '[[sources]]', 'name = "orders"', 'queue = "orders"', 'handler = "order.created"', 'retry_ms = 200',
        '[sources.kafka]', 'brokers = "127.0.0.1:1"', 'topic = "orders"',
      ],
    });
  });
  after(async () => { await server?.stop(); });

  it('lists each source with its state, lag, rate, counters and last error', async () => {
    // librdkafka gives up on the broker after its metadata timeout.
    let status;
    for (let i = 0; i < 160; i++) {
      status = (await server.api(TOKENS.reader, 'GET', '/v1/sources/orders')).body;
      if (status.last_error) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    assert.match(status.last_error || '', /127\.0\.0\.1:1/, JSON.stringify(status));

    const page = await newPage(browser);
    await signIn(page, server.base, TOKENS.reader);
    await page.locator('#nav-sources').click();
    const row = page.locator('#sources tbody tr[data-source="orders"]');
    await row.waitFor();
    const cells = await row.locator('th, td').allTextContents();
    assert.equal(cells[0], 'orders');
    assert.equal(cells[1], 'kafka');
    assert.equal(cells[2], 'orders');
    assert.match(cells[3], /^(starting|retrying)$/);
    assert.equal(cells[4], 'no');
    assert.equal(cells[5], '—');
    assert.equal(cells[6], '0/s');
    assert.equal(cells[7], '0');
    assert.equal(cells[8], '0');
    assert.match(cells[9], /cannot reach the Kafka cluster at 127\.0\.0\.1:1/);
    assert.equal(await row.locator('td a').first().getAttribute('href'), '#/queues/orders/tasks');
    assert.deepEqual(await unlabelled(page), []);
    await page.screenshot({ path: join(screenshotDir, 'dashboard-sources.png'), fullPage: true });
    assert.deepEqual(page.problems, []);
    await page.context().close();
  });
});

const FLOW_STORES = (process.env.RDQ_DASHBOARD_FLOW_STORES || 'memory').split(',').filter(Boolean);

for (const kind of FLOW_STORES) {
  describe(`the flow page on the ${kind} store`, () => {
    let server;
    before(async () => { server = await startServer(kind); });
    after(async () => { await server?.stop(); });

    it('shows the limits, tokens, the busiest keys and throttled keys, and throttles the queue', async () => {
      const queue = 'tenants';
      const put = await server.api(TOKENS.admin, 'PUT', `/v1/queues/${queue}/config`,
        { flow: { rate: { per_second: 5, burst: 10 }, key_concurrency: 3 } });
      assert.equal(put.status, 200, JSON.stringify(put.body));
      for (const key of ['tenant-a', 'tenant-a', 'tenant-b']) {
        await submit(server, { queue, payload_json: { key }, flow_key: key });
      }
      const claimed = await server.api(TOKENS.worker, 'POST', `/v1/queues/${queue}/claim`, { max: 10 });
      assert.equal(claimed.body.tasks.length, 3);
      const t = await server.api(TOKENS.admin, 'POST', `/v1/queues/${queue}/throttle`, { flow_key: 'tenant-c', for_ms: 120000 });
      assert.equal(t.status, 200, JSON.stringify(t.body));

      const page = await newPage(browser);
      await signIn(page, server.base, TOKENS.admin);
      await page.goto(`${server.base}/ui#/queues/${queue}/flow`);
      await page.locator('#flow-summary').waitFor();
      const summary = await page.locator('#flow-summary').textContent();
      assert.match(summary, /Rate5\/s, burst 10/);
      assert.match(summary, /Concurrency per flow key3/);
      assert.match(summary, /Tokens left\d/);
      assert.match(summary, /In flight3/);
      assert.match(summary, /Whole queuenot throttled/);
      const rows = await page.locator('#flow-keys tbody tr').evaluateAll((trs) => trs.map((r) => ({
        key: r.getAttribute('data-key'),
        cells: [...r.querySelectorAll('td')].map((c) => c.textContent),
      })));
      assert.deepEqual(rows.map((r) => r.key), ['tenant-a', 'tenant-b', 'tenant-c']);
      assert.equal(rows[0].cells[0], '2');
      assert.equal(rows[0].cells[2], '–');
      assert.match(rows[2].cells[2], /^until .+ \(in (1 min \d+|\d+) s\)$/);
      assert.deepEqual(await unlabelled(page), []);
      if (kind === 'memory') await page.screenshot({ path: join(screenshotDir, 'dashboard-flow.png'), fullPage: true });

      // Throttle the whole queue from the page.
      await page.getByLabel('For (seconds)').fill('30');
      await page.getByRole('button', { name: 'Throttle' }).click();
      await page.locator('#banner').filter({ hasText: 'Throttled the whole queue for 30 s.' }).waitFor();
      await page.locator('#flow-summary').filter({ hasText: 'throttled until' }).waitFor();
      const flow = await server.api(TOKENS.admin, 'GET', `/v1/queues/${queue}/flow`);
      assert.ok(flow.body.blocked_until, JSON.stringify(flow.body));
      assert.deepEqual(page.problems, []);
      await page.context().close();

      // A token without admin sees the flow, and the throttle disabled.
      const reader = await newPage(browser);
      await signIn(reader, server.base, TOKENS.reader);
      await reader.goto(`${server.base}/ui#/queues/${queue}/flow`);
      await reader.locator('#flow-keys').waitFor();
      assert.equal(await reader.locator('#throttle-go').isDisabled(), true);
      assert.deepEqual(reader.problems, []);
      await reader.context().close();
    });
  });
}

describe('the dashboard on an open loopback server', () => {
  let server;
  before(async () => { server = await startServer('embedded', { tokens: false }); });
  after(async () => { await server?.stop(); });

  it('needs no token and no configuration, and sends none', async () => {
    await submit(server, { queue: 'open', payload_json: { n: 1 } });
    const page = await newPage(browser);
    const sent = [];
    page.on('request', (r) => sent.push([r.url(), r.headers().authorization || null]));
    await page.goto(`${server.base}/ui`);
    await page.locator('#queues tbody tr[data-queue="open"]').waitFor();
    assert.match(await page.locator('#identity').textContent(), /Open server/);
    assert.equal(await page.locator('#login[open]').count(), 0);
    assert.ok(sent.every(([url, auth]) => auth === null && !/token/i.test(url)), JSON.stringify(sent));
    const cookies = await page.context().cookies();
    assert.deepEqual(cookies, []);
    await page.context().close();
  });

  it('says so when the server runs no sources', async () => {
    const page = await newPage(browser);
    await page.goto(`${server.base}/ui#/sources`);
    await page.locator('#sources-empty').waitFor();
    assert.match(await page.locator('#sources-empty').textContent(), /no sources/);
    assert.equal(await page.locator('#sources').count(), 0);
    assert.deepEqual(page.problems, []);
    await page.context().close();
  });
});

mkdirSync(screenshotDir, { recursive: true });
