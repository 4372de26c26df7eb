// The rdq dashboard (docs/dashboard.md): plain JavaScript over rdq's HTTP
// API, no framework, no build step. Every number and action goes through
// the same API routes every other client uses, with the same scopes.
//
// The token an operator enters is kept in this tab's sessionStorage and
// sent as an `Authorization: Bearer` header; it never goes in a URL or a
// cookie. Everything shown is built with DOM calls and textContent, never
// parsed as HTML, so task data cannot inject markup.
'use strict';

(() => {
  const TOKEN_KEY = 'rdq.token';
  const NAMES_KEY = 'rdq.queue-names';
  const PAGE = 50;
  // The reasons a dead task is filtered by (docs/outcomes.md).
  const DEAD_REASONS = ['ATTEMPTS_EXHAUSTED', 'PERMANENT_FAILURE', 'LEASE_EXPIRIES_EXHAUSTED', 'CANCELLED', 'HANDLER_VERSION_MISMATCH', 'COUNTERS_EXHAUSTED', 'UNRECORDED'];
  const TIME_FILTER_MAX = 10000;

  const state = { me: null, caps: null, keepBanner: false };

  // ---- DOM helpers -------------------------------------------------------

  /** An element with attributes (`on…` keys are listeners) and children. */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else if (k === 'class') el.className = v;
      else if (v === true) el.setAttribute(k, '');
      else el.setAttribute(k, String(v));
    }
    append(el, children);
    return el;
  }

  function append(el, children) {
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  const $ = (sel) => document.querySelector(sel);
  const main = () => $('#main');

  function svg(tag, attrs) {
    const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    return el;
  }

  // ---- API ---------------------------------------------------------------

  /** A refusal from the API: its problem document's code and detail. */
  class ApiError extends Error {
    constructor(status, problem) {
      super(`${problem.code || status}: ${problem.detail || problem.title || 'request failed'}`);
      this.status = status;
      this.code = problem.code || String(status);
      this.detail = problem.detail || '';
      this.hint = problem.hint || '';
      this.field = problem.field || '';
    }
  }

  function token() {
    return sessionStorage.getItem(TOKEN_KEY);
  }

  async function call(method, path, body, opts = {}) {
    const headers = {};
    const t = token();
    if (t) headers.Authorization = `Bearer ${t}`;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const resp = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'omit',
      cache: 'no-store',
    });
    if (!resp.ok) {
      let problem = {};
      try { problem = await resp.json(); } catch (_) { /* not JSON */ }
      const err = new ApiError(resp.status, problem);
      if (resp.status === 401 && !opts.quiet401) askToken(err.detail);
      throw err;
    }
    if (opts.raw) return resp;
    if (resp.status === 204) return null;
    return resp.json();
  }

  const get = (path, opts) => call('GET', path, undefined, opts);
  const q = encodeURIComponent;

  // ---- Banner, dialogs ---------------------------------------------------

  function say(text, kind = 'error') {
    const b = $('#banner');
    b.replaceChildren(h('span', {}, text), h('button', {
      type: 'button', class: 'link', 'aria-label': 'Dismiss message', onclick: () => { b.hidden = true; },
    }, '×'));
    b.className = kind;
    b.setAttribute('role', kind === 'error' ? 'alert' : 'status');
    b.hidden = false;
    state.keepBanner = true;
  }

  function clearBanner() { $('#banner').hidden = true; }

  function errorText(e) {
    if (e instanceof ApiError) return e.hint ? `${e.message} (${e.hint})` : e.message;
    return `the server could not be reached: ${e.message}`;
  }

  function confirmAction(title, text, okLabel) {
    const d = $('#confirm');
    $('#confirm-title').textContent = title;
    $('#confirm-text').textContent = text;
    $('#confirm-ok').textContent = okLabel;
    return new Promise((resolve) => {
      d.addEventListener('close', () => resolve(d.returnValue === 'ok'), { once: true });
      d.returnValue = 'cancel';
      d.showModal();
      $('#confirm-cancel').focus();
    });
  }

  function askToken(why) {
    const d = $('#login');
    if (d.open) return;
    $('#login-why').textContent = (why ? `${why}. ` : '') +
      'The token is kept in this tab only (session storage) and sent as an Authorization header.';
    $('#token-input').value = '';
    d.showModal();
    $('#token-input').focus();
  }

  function setupLogin() {
    $('#login-form').addEventListener('submit', () => {
      const value = $('#token-input').value.trim();
      if (value) sessionStorage.setItem(TOKEN_KEY, value);
      $('#token-input').value = '';
      start();
    });
    $('#login-cancel').addEventListener('click', () => $('#login').close());
    $('#sign-in').addEventListener('click', () => askToken(''));
    $('#sign-out').addEventListener('click', () => {
      sessionStorage.removeItem(TOKEN_KEY);
      state.me = null;
      start();
    });
    $('#goto-task').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const id = $('#goto-task-id').value.trim().toUpperCase();
      if (id) location.hash = `#/tasks/${q(id)}`;
    });
  }

  // ---- Who may do what ---------------------------------------------------

  const isAdmin = () => !!state.me && state.me.scopes.includes('admin');
  const can = (cap) => !!state.caps && state.caps[cap] === true;

  /** Why an action is not available (null: it is). */
  function refusal(needs) {
    if (needs.admin !== false && !isAdmin()) return 'needs a token with the admin scope';
    for (const cap of needs.caps || []) {
      if (!can(cap)) return `this store cannot do this (capability ${cap} is off)`;
    }
    return null;
  }

  let reasonSeq = 0;
  /** A button that is disabled, with its reason beside it, when `needs` fails. */
  function actionButton(label, needs, onclick, extra = {}) {
    const why = refusal(needs);
    const b = h('button', Object.assign({ type: 'button' }, extra), label);
    if (why) {
      const id = `why-${++reasonSeq}`;
      b.disabled = true;
      b.setAttribute('aria-describedby', id);
      b.title = why;
      return h('span', { class: 'action' }, b, h('span', { class: 'reason', id }, why));
    }
    b.addEventListener('click', async () => {
      b.disabled = true;
      try { await onclick(b); } catch (e) { say(errorText(e)); } finally { b.disabled = false; }
    });
    return h('span', { class: 'action' }, b);
  }

  function renderIdentity() {
    const me = state.me;
    const who = $('#identity');
    $('#sign-in').hidden = !!token() || (me && me.open);
    $('#sign-out').hidden = !token();
    if (!me) { who.textContent = ''; return; }
    if (me.open) who.textContent = 'Open server (no tokens configured): full access';
    else if (isAdmin()) who.textContent = `Signed in as ${me.name} (admin)`;
    else who.textContent = `Signed in as ${me.name} (${me.scopes.join(', ')}): read-only, actions need admin`;
  }

  // ---- Formatting --------------------------------------------------------

  function age(ms) {
    if (ms === null || ms === undefined) return '—';
    const s = Math.floor(ms / 1000);
    if (s < 60) return `${s} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m} min ${s % 60} s`;
    const hr = Math.floor(m / 60);
    if (hr < 48) return `${hr} h ${m % 60} min`;
    return `${Math.floor(hr / 24)} d ${hr % 24} h`;
  }

  function duration(a, b) {
    if (!a || !b) return '—';
    const ms = Date.parse(b) - Date.parse(a);
    return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  }

  const num = (n) => (n === null || n === undefined ? 'n/a' : Number(n).toLocaleString('en'));
  const lastError = (env) => {
    const a = env.attempts || [];
    for (let i = a.length - 1; i >= 0; i--) if (a[i].error) return a[i].error;
    return null;
  };
  const diedAt = (env) => {
    const a = env.attempts || [];
    return (a.length && a[a.length - 1].finished_at) || env.created_at;
  };

  // ULIDs sort by time: the first 10 characters are the milliseconds.
  const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
  function ulidAt(ms) {
    let t = Math.max(0, Math.floor(ms));
    let out = '';
    for (let i = 0; i < 10; i++) { out = CROCKFORD[t % 32] + out; t = Math.floor(t / 32); }
    return `${out}0000000000000000`;
  }

  /** A glob matching exactly `text` (its metacharacters in classes). */
  const literalGlob = (text) => text.replace(/[*?[\]]/g, (c) => `[${c}]`);

  // ---- Routing -----------------------------------------------------------

  function parseHash() {
    const raw = location.hash.replace(/^#/, '') || '/';
    const [path, query] = raw.split('?');
    const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
    return { parts, params: new URLSearchParams(query || '') };
  }

  function hashFor(parts, params) {
    const qs = params && [...params.entries()].filter(([, v]) => v !== '').length
      ? `?${new URLSearchParams([...params.entries()].filter(([, v]) => v !== '')).toString()}` : '';
    return `#/${parts.map(q).join('/')}${qs}`;
  }

  async function route(focus = true) {
    // A message said just before this render (an action's result) stays up.
    if (!state.keepBanner) clearBanner();
    state.keepBanner = false;
    const { parts, params } = parseHash();
    const view = h('div', { class: 'view' });
    main().replaceChildren(view);
    try {
      if (parts.length === 0) await overviewPage(view);
      else if (parts[0] === 'audit') await auditPage(view, params);
      else if (parts[0] === 'schedules') await schedulesPage(view);
      else if (parts[0] === 'sources') await sourcesPage(view);
      else if (parts[0] === 'tasks' && parts[1]) await taskPage(view, null, parts[1]);
      else if (parts[0] === 'queues' && parts[1] && parts[2] === 'tasks' && parts[3]) await taskPage(view, parts[1], parts[3]);
      else if (parts[0] === 'queues' && parts[1] && parts[2] === 'tasks') await tasksPage(view, parts[1], params);
      else if (parts[0] === 'queues' && parts[1] && parts[2] === 'policy') await policyPage(view, parts[1]);
      else if (parts[0] === 'queues' && parts[1] && parts[2] === 'flow') await flowPage(view, parts[1]);
      else if (parts[0] === 'queues' && parts[1]) await dlqPage(view, parts[1], params);
      else view.append(h('h1', { tabindex: '-1' }, 'Not found'), h('p', {}, 'No such page. ', h('a', { href: '#/' }, 'Back to the queues')));
    } catch (e) {
      view.append(h('p', { class: 'problem' }, errorText(e)));
    }
    // A new page within the app: move focus to its heading, so keyboard and
    // screen reader users start there; the first page keeps the browser's.
    const heading = view.querySelector('h1');
    if (heading && focus && !document.querySelector('dialog[open]')) heading.focus();
  }

  function notice(text) {
    return h('p', { class: 'notice', role: 'note' }, text);
  }

  // ---- Overview ----------------------------------------------------------

  function sparkline(history) {
    const w = 180, hgt = 28, bw = w / history.length;
    const max = Math.max(1, ...history.map((m) => m.succeeded + m.failed));
    const total = history.reduce((s, m) => s + m.succeeded + m.failed, 0);
    const failed = history.reduce((s, m) => s + m.failed, 0);
    const label = `last hour: ${num(total)} processed, ${num(failed)} failed`;
    const el = svg('svg', { width: w, height: hgt, viewBox: `0 0 ${w} ${hgt}`, role: 'img', 'aria-label': label, class: 'spark' });
    const title = svg('title', {});
    title.textContent = label;
    el.append(title);
    history.forEach((m, i) => {
      const ok = (m.succeeded / max) * hgt, bad = (m.failed / max) * hgt;
      if (ok > 0) el.append(svg('rect', { x: i * bw, y: hgt - ok - bad, width: Math.max(1, bw - 0.5), height: ok, class: 'ok' }));
      if (bad > 0) el.append(svg('rect', { x: i * bw, y: hgt - bad, width: Math.max(1, bw - 0.5), height: bad, class: 'bad' }));
    });
    return h('span', { class: 'history' }, el, h('span', { class: 'small' }, `${num(total)} / ${num(failed)} failed`));
  }

  async function overviewPage(view) {
    view.append(h('h1', { tabindex: '-1' }, 'Queues'));
    const names = sessionStorage.getItem(NAMES_KEY) || '';
    let data;
    try {
      data = await get(`/v1/overview${names ? `?names=${q(names)}` : ''}`);
    } catch (e) {
      if (e.code !== 'UNSUPPORTED') throw e;
      view.append(notice(errorText(e)), namesForm(names));
      return;
    }
    const toolbar = h('div', { class: 'toolbar' },
      h('button', { type: 'button', id: 'refresh', onclick: () => route() }, 'Refresh'));
    view.append(toolbar);
    if (data.queues.length === 0) {
      view.append(h('p', {}, 'No queues yet: a queue appears once it has tasks or a stored policy.'));
      return;
    }
    if (state.caps && state.caps.ends_once === false) {
      view.append(notice('This store delivers at least once (capability ends_once is off): after a broker crash or a network fault a task can run again, so handlers should be idempotent. See docs/stores/rabbitmq.md.'));
    }
    if (data.queues.some((r) => r.source === 'depths')) {
      view.append(notice('This store reports broker depths, not counts: "pending" is the messages ready in the work queue, "dead" those in the DLQ; in-flight and succeeded tasks cannot be counted.'));
    }
    const table = h('table', { class: 'grid', id: 'queues' },
      h('caption', {}, `Every queue you may see. "Last hour" counts attempts this server process finished per minute (processed / failed).`),
      h('thead', {}, h('tr', {},
        ['Queue', 'Pending', 'In flight', 'Succeeded', 'Dead', 'Oldest pending', 'Last hour', 'State', 'Actions'].map((c) => h('th', { scope: 'col' }, c)))));
    const body = h('tbody');
    for (const r of data.queues) {
      const oldest = r.oldest_pending_unknown
        ? h('span', { title: r.oldest_pending_unknown }, 'unknown')
        : (r.oldest_pending_age_ms === null ? '—'
          : h('a', { href: hashFor(['queues', r.queue, 'tasks', r.oldest_pending_id]) }, age(r.oldest_pending_age_ms)));
      const toggle = actionButton(r.paused ? 'Resume' : 'Pause', { caps: ['queue_config'] }, async () => {
        await call('PUT', `/v1/queues/${q(r.queue)}/config`, { paused: !r.paused });
        say(`${r.queue} ${r.paused ? 'resumed' : 'paused'}.`, 'ok');
        await route();
      }, { 'aria-label': `${r.paused ? 'Resume' : 'Pause'} ${r.queue}`, 'data-queue': r.queue, class: 'pause' });
      body.append(h('tr', { 'data-queue': r.queue },
        h('th', { scope: 'row' }, h('a', { href: hashFor(['queues', r.queue]) }, r.queue)),
        h('td', { class: 'n' }, num(r.pending)),
        h('td', { class: 'n' }, num(r.in_flight)),
        h('td', { class: 'n' }, num(r.succeeded)),
        h('td', { class: 'n' }, r.dead > 0 ? h('a', { href: hashFor(['queues', r.queue]), class: 'dead' }, num(r.dead)) : '0'),
        h('td', {}, oldest),
        h('td', {}, sparkline(r.history)),
        h('td', {}, h('span', { class: r.paused ? 'badge paused' : 'badge running' }, r.paused ? 'paused' : 'running')),
        h('td', {}, toggle, ' ', h('a', { href: hashFor(['queues', r.queue, 'policy']) }, 'Policy'))));
    }
    table.append(body);
    view.append(h('div', { class: 'scroll' }, table));
  }

  function namesForm(names) {
    const input = h('input', { id: 'queue-names', name: 'names', value: names, size: 40 });
    return h('form', {
      class: 'inline', onsubmit: (ev) => {
        ev.preventDefault();
        sessionStorage.setItem(NAMES_KEY, input.value.trim());
        route();
      },
    }, h('label', { for: 'queue-names' }, 'Queue names (comma-separated)'), input, h('button', { type: 'submit' }, 'Show'));
  }

  // ---- A queue's DLQ -----------------------------------------------------

  function queueHeader(view, queue, current) {
    view.append(h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Queues'), ' › ', queue));
    const titles = { dlq: `DLQ of ${queue}`, tasks: `Tasks of ${queue}`, policy: `Policy of ${queue}`, flow: `Flow of ${queue}` };
    view.append(h('h1', { tabindex: '-1' }, titles[current]));
    view.append(h('nav', { class: 'tabs', 'aria-label': `Queue ${queue}` },
      h('a', { href: hashFor(['queues', queue]), 'aria-current': current === 'dlq' ? 'page' : null }, 'Dead-letter queue'),
      h('a', { href: hashFor(['queues', queue, 'tasks']), 'aria-current': current === 'tasks' ? 'page' : null }, 'Tasks'),
      h('a', { href: hashFor(['queues', queue, 'policy']), 'aria-current': current === 'policy' ? 'page' : null }, 'Policy'),
      h('a', { href: hashFor(['queues', queue, 'flow']), 'aria-current': current === 'flow' ? 'page' : null }, 'Flow'),
      h('a', { href: hashFor(['audit'], new URLSearchParams({ queue })) }, 'Audit log')));
  }

  /** Every task of a queue by status, handler and header: where an operator finds the task to open or cancel. */
  async function tasksPage(view, queue, params) {
    queueHeader(view, queue, 'tasks');
    if (!can('list')) {
      view.append(notice('This store cannot list tasks (capability list is off).'));
      return;
    }
    const filter = {
      status: params.get('status') || 'PENDING',
      handler_ref: params.get('handler_ref') || '',
      header: params.get('header') || '',
      cursor: params.get('cursor') || '',
    };
    const status = h('select', { id: 'tasks-status', name: 'status' },
      ['PENDING', 'IN_FLIGHT', 'SUCCEEDED', 'DEAD', ''].map((v) => {
        const o = h('option', { value: v }, v || 'any');
        o.selected = v === filter.status;
        return o;
      }));
    const handler = h('input', { id: 'tasks-handler', name: 'handler_ref', value: filter.handler_ref, spellcheck: 'false', autocomplete: 'off' });
    const header = h('input', { id: 'tasks-header', name: 'header', value: filter.header, placeholder: 'tenant=acme', spellcheck: 'false', autocomplete: 'off' });
    view.append(h('form', {
      class: 'filters', id: 'tasks-filter', role: 'search', 'aria-label': 'Filter the tasks',
      onsubmit: (ev) => {
        ev.preventDefault();
        location.hash = hashFor(['queues', queue, 'tasks'], new URLSearchParams({ status: status.value, handler_ref: handler.value.trim(), header: header.value.trim() }));
      },
    },
    h('div', {}, h('label', { for: 'tasks-status' }, 'Status'), status),
    h('div', {}, h('label', { for: 'tasks-handler' }, 'Handler'), handler),
    h('div', {}, h('label', { for: 'tasks-header' }, 'Header (KEY=VALUE)'), header),
    h('div', { class: 'buttons' }, h('button', { type: 'submit', id: 'apply-tasks-filter' }, 'Apply filter'))));
    const query = new URLSearchParams({ limit: String(PAGE) });
    for (const k of ['status', 'handler_ref', 'header', 'cursor']) if (filter[k]) query.set(k, filter[k]);
    let page;
    try {
      page = await get(`/v1/queues/${q(queue)}/tasks?${query}`);
    } catch (e) {
      view.append(h('p', { class: 'problem' }, errorText(e)));
      return;
    }
    if (page.items.length === 0) {
      view.append(h('p', { id: 'tasks-empty' }, 'No task matches.'));
      return;
    }
    view.append(h('div', { class: 'scroll' }, h('table', { class: 'grid', id: 'tasks' },
      h('caption', {}, 'Tasks, newest first; open one to see it whole or to cancel it.'),
      h('thead', {}, h('tr', {}, ['Task', 'Status', 'Handler', 'Attempts', 'Due'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, page.items.map((env) => h('tr', { 'data-id': env.id },
        h('th', { scope: 'row' }, h('a', { href: hashFor(['queues', queue, 'tasks', env.id]) }, env.id)),
        h('td', {}, env.status),
        h('td', {}, h('code', {}, env.handler_ref)),
        h('td', { class: 'n' }, num(env.attempt_count || 0)),
        h('td', {}, env.next_attempt_at || '—')))))));
    if (page.next_cursor) {
      const next = new URLSearchParams({ status: filter.status, handler_ref: filter.handler_ref, header: filter.header, cursor: page.next_cursor });
      view.append(h('nav', { class: 'pager', 'aria-label': 'Task pages' }, h('a', { id: 'tasks-older', href: hashFor(['queues', queue, 'tasks'], next) }, 'Older →')));
    }
  }

  async function dlqPage(view, queue, params) {
    queueHeader(view, queue, 'dlq');
    const filter = {
      error_type: params.get('error_type') || '',
      reason: params.get('reason') || '',
      since: params.get('since') || '',
      until: params.get('until') || '',
      cursor: params.get('cursor') || '',
      back: params.get('back') || '',
    };
    if (!can('list')) {
      view.append(notice('This store cannot list tasks, so it has no DLQ to browse (capability list is off).'));
      return;
    }
    view.append(filterForm(queue, filter));
    const breakdownBox = h('section', { 'aria-labelledby': 'breakdown-title', class: 'breakdown' },
      h('h2', { id: 'breakdown-title' }, 'Why tasks died'), h('p', { class: 'loading' }, 'Counting…'));
    const listBox = h('section', { 'aria-labelledby': 'dead-title' }, h('h2', { id: 'dead-title' }, 'Dead tasks, newest first'));
    view.append(breakdownBox, listBox);
    await Promise.all([breakdown(breakdownBox, queue, filter), deadList(listBox, queue, filter)]);
  }

  function filterForm(queue, filter) {
    const et = h('input', { id: 'filter-error-type', name: 'error_type', value: filter.error_type, placeholder: 'http.Status5*', spellcheck: 'false', autocomplete: 'off' });
    const reason = h('select', { id: 'filter-reason', name: 'reason' },
      [''].concat(DEAD_REASONS).map((r) => {
        const o = h('option', { value: r }, r || 'any');
        o.selected = r === filter.reason;
        return o;
      }));
    const since = h('input', { id: 'filter-since', name: 'since', type: 'datetime-local', step: '1', value: filter.since });
    const until = h('input', { id: 'filter-until', name: 'until', type: 'datetime-local', step: '1', value: filter.until });
    return h('form', {
      class: 'filters', id: 'dlq-filter', role: 'search', 'aria-label': 'Filter the DLQ',
      onsubmit: (ev) => {
        ev.preventDefault();
        location.hash = hashFor(['queues', queue], new URLSearchParams({ error_type: et.value.trim(), reason: reason.value, since: since.value, until: until.value }));
      },
    },
    h('div', {}, h('label', { for: 'filter-error-type' }, 'Error type (glob)'), et),
    h('div', {}, h('label', { for: 'filter-reason' }, 'Why it died'), reason),
    h('div', {}, h('label', { for: 'filter-since' }, 'Submitted from'), since),
    h('div', {}, h('label', { for: 'filter-until' }, 'Submitted before'), until),
    h('div', { class: 'buttons' },
      h('button', { type: 'submit', id: 'apply-filter' }, 'Apply filter'),
      h('a', { href: hashFor(['queues', queue]), class: 'button' }, 'Clear')));
  }

  async function breakdown(box, queue, filter) {
    let data;
    let reasons;
    try {
      [data, reasons] = await Promise.all([
        get(`/v1/queues/${q(queue)}/dead/breakdown`),
        get(`/v1/queues/${q(queue)}/dead/reasons`),
      ]);
    } catch (e) {
      box.querySelector('.loading').replaceWith(h('p', { class: 'problem' }, errorText(e)));
      return;
    }
    const loading = box.querySelector('.loading');
    if (data.total === 0) { loading.replaceWith(h('p', {}, 'The DLQ is empty.')); return; }
    const table = h('table', { class: 'grid', id: 'breakdown' },
      h('caption', {}, `${num(data.total)} dead tasks by their latest error type (the whole DLQ).`),
      h('thead', {}, h('tr', {}, ['Error type', 'Tasks', 'Share', 'Newest example', ''].map((c) => h('th', { scope: 'col' }, c)))));
    const body = h('tbody');
    for (const g of data.groups) {
      const type = g.error_type === null ? '(no error)' : g.error_type;
      const err = lastError(g.newest);
      body.append(h('tr', { 'data-error-type': type },
        h('th', { scope: 'row' }, h('code', {}, type)),
        h('td', { class: 'n' }, num(g.count)),
        h('td', { class: 'n' }, `${Math.round((g.count / data.total) * 100)} %`),
        h('td', {}, h('a', { href: hashFor(['queues', queue, 'tasks', g.newest.id]) }, g.newest.id),
          err ? h('span', { class: 'message' }, ` ${err.message}`) : ''),
        h('td', {}, g.error_type === null ? '' : h('a', {
          href: hashFor(['queues', queue], new URLSearchParams({ error_type: literalGlob(g.error_type), since: filter.since, until: filter.until })),
          'aria-label': `Show only ${type}`,
        }, 'Show only these'))));
    }
    table.append(body);
    const byReason = h('table', { class: 'grid', id: 'reasons' },
      h('caption', {}, 'Dead tasks by reason (docs/outcomes.md).'),
      h('thead', {}, h('tr', {}, ['Reason', 'Tasks', ''].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, reasons.reasons.map((r) => h('tr', { 'data-reason': r.reason },
        h('th', { scope: 'row' }, h('code', {}, r.reason)),
        h('td', { class: 'n' }, num(r.count)),
        h('td', {}, h('a', {
          href: hashFor(['queues', queue], new URLSearchParams({ reason: r.reason, since: filter.since, until: filter.until })),
          'aria-label': `Show only ${r.reason}`,
        }, 'Show only these'))))));
    loading.replaceWith(byReason, table);
  }

  /** One page of the DLQ under `filter`; the time window narrows it by id (ULIDs sort by time). */
  async function dlqPageData(queue, filter, cursor, limit) {
    const sinceId = filter.since ? ulidAt(new Date(filter.since).getTime()) : '';
    const untilId = filter.until ? ulidAt(new Date(filter.until).getTime()) : '';
    const params = new URLSearchParams({ limit: String(limit) });
    const start = cursor || untilId;
    if (start) params.set('cursor', start);
    if (filter.error_type) params.set('error_type', filter.error_type);
    if (filter.reason) params.set('reason', filter.reason);
    const page = await get(`/v1/queues/${q(queue)}/dead?${params}`);
    if (sinceId) {
      const kept = page.items.filter((e) => e.id >= sinceId);
      if (kept.length < page.items.length) return { items: kept, next_cursor: null };
    }
    return page;
  }

  async function deadList(box, queue, filter) {
    let page;
    try {
      page = await dlqPageData(queue, filter, filter.cursor, PAGE);
    } catch (e) {
      box.append(h('p', { class: 'problem' }, errorText(e)));
      return;
    }
    const selected = new Set();
    const count = h('span', { id: 'selected-count', 'aria-live': 'polite' }, '0 selected');
    const update = () => { count.textContent = `${selected.size} selected`; };
    const timeFiltered = !!(filter.since || filter.until);
    const describe = [
      filter.error_type ? `with error type ${filter.error_type}` : '',
      filter.reason ? `dead for ${filter.reason}` : '',
    ].filter(Boolean).join(' and ') || 'in the DLQ';

    const actions = h('div', { class: 'toolbar', id: 'dlq-actions' },
      actionButton('Redrive selected', { caps: ['redrive'] }, async () => {
        if (selected.size === 0) { say('Select tasks first (the checkboxes in the list).'); return; }
        const ids = [...selected];
        const dry = await call('POST', `/v1/queues/${q(queue)}/dead/redrive`, { ids, dry_run: true });
        if (!await confirmAction('Redrive selected tasks', `Redrive ${dry.count} selected task(s) of ${queue}? They become PENDING now with their history kept.`, `Redrive ${dry.count}`)) return;
        const done = await call('POST', `/v1/queues/${q(queue)}/dead/redrive`, { ids });
        say(`Redrove ${done.count} task(s).`, 'ok');
        await route();
      }, { id: 'redrive-selected' }),
      actionButton('Redrive all matching…', { caps: ['redrive'] }, async () => {
        let body;
        if (timeFiltered) {
          const ids = await collectIds(queue, filter);
          if (ids.length === 0) { say('No dead task matches the filter.'); return; }
          body = { ids };
        } else {
          body = {};
          if (filter.error_type) body.error_type = filter.error_type;
          if (filter.reason) body.reason = filter.reason;
        }
        const dry = await call('POST', `/v1/queues/${q(queue)}/dead/redrive`, Object.assign({ dry_run: true }, body));
        if (dry.count === 0) { say('No dead task matches the filter.'); return; }
        const scope = timeFiltered ? `${describe} in the chosen time window` : describe;
        if (!await confirmAction('Redrive all matching', `Dry run: ${dry.count} task(s) ${scope} would be redriven. Redrive them now?`, `Redrive ${dry.count}`)) return;
        const done = await call('POST', `/v1/queues/${q(queue)}/dead/redrive`, body);
        say(`Redrove ${done.count} task(s).`, 'ok');
        await route();
      }, { id: 'redrive-matching' }),
      actionButton('Export JSONL', { admin: false, caps: ['list'] }, async () => {
        const only = new URLSearchParams();
        if (filter.error_type) only.set('error_type', filter.error_type);
        if (filter.reason) only.set('reason', filter.reason);
        const path = `/v1/queues/${q(queue)}/dead/export${only.toString() ? `?${only}` : ''}`;
        const resp = await call('GET', path, undefined, { raw: true });
        const blob = await resp.blob();
        const url = URL.createObjectURL(blob);
        const a = h('a', { href: url, download: `${queue}-dlq.jsonl`, hidden: true });
        document.body.append(a);
        a.click();
        a.remove();
        setTimeout(() => URL.revokeObjectURL(url), 10000);
      }, { id: 'export' }),
      actionButton('Purge DLQ…', { caps: ['purge'] }, async () => {
        const dry = await call('DELETE', `/v1/queues/${q(queue)}/dead?dry_run=true`);
        if (!await confirmAction('Purge the DLQ', `Delete all ${dry.purged} dead task(s) of ${queue} for good (the filter does not apply)? Export them first if you may need them.`, `Delete ${dry.purged}`)) return;
        const done = await call('DELETE', `/v1/queues/${q(queue)}/dead`);
        say(`Purged ${done.purged} task(s).`, 'ok');
        await route();
      }, { id: 'purge', class: 'danger' }),
      count);
    box.append(actions);
    if (timeFiltered) box.append(notice(`The time window is on submission time (task ids are time-ordered). "Redrive all matching" takes at most ${num(TIME_FILTER_MAX)} tasks per run.`));

    if (page.items.length === 0) {
      box.append(h('p', { id: 'dead-empty' }, filter.cursor ? 'No more dead tasks.' : 'No dead task matches.'));
    } else {
      const all = h('input', { type: 'checkbox', id: 'select-all', 'aria-label': 'Select every task on this page' });
      const boxes = [];
      all.addEventListener('change', () => {
        for (const b of boxes) { b.checked = all.checked; b.dispatchEvent(new Event('change')); }
      });
      const table = h('table', { class: 'grid', id: 'dead' },
        h('caption', {}, `Dead tasks ${describe}${timeFiltered ? ' in the time window' : ''}, newest first.`),
        h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, all),
          ['Task', 'Reason', 'Error type', 'Message', 'Attempts', 'Redrives', 'Died'].map((c) => h('th', { scope: 'col' }, c)))));
      const body = h('tbody');
      for (const env of page.items) {
        const err = lastError(env);
        const cb = h('input', { type: 'checkbox', class: 'select', value: env.id, 'aria-label': `Select task ${env.id}` });
        cb.addEventListener('change', () => { if (cb.checked) selected.add(env.id); else selected.delete(env.id); update(); });
        boxes.push(cb);
        body.append(h('tr', { 'data-id': env.id },
          h('td', {}, cb),
          h('th', { scope: 'row' }, h('a', { href: hashFor(['queues', queue, 'tasks', env.id]) }, env.id)),
          h('td', {}, h('code', {}, env.dead_reason ? env.dead_reason.code : 'UNRECORDED')),
          h('td', {}, h('code', {}, err ? err.type : '—')),
          h('td', { class: 'message' }, err ? err.message : ''),
          h('td', { class: 'n' }, num(env.attempt_count)),
          h('td', { class: 'n' }, num(env.redrive_count)),
          h('td', {}, h('time', { datetime: diedAt(env) }, diedAt(env)))));
      }
      table.append(body);
      box.append(h('div', { class: 'scroll' }, table));
    }
    // `back` lists the cursors of the pages before this one ('-' is the first).
    const pager = h('nav', { class: 'pager', 'aria-label': 'DLQ pages' });
    const base = { error_type: filter.error_type, reason: filter.reason, since: filter.since, until: filter.until };
    const backs = filter.back ? filter.back.split(',') : [];
    const link = (cursor, back, id, label) => h('a', {
      id, href: hashFor(['queues', queue], new URLSearchParams(Object.assign({}, base, { cursor, back: back.join(',') }))),
    }, label);
    if (filter.cursor) {
      const prev = backs.slice(0, -1);
      const cursor = backs.length ? backs[backs.length - 1] : '-';
      pager.append(link(cursor === '-' ? '' : cursor, prev, 'newer', '← Newer'));
    }
    if (page.next_cursor) {
      pager.append(' ', link(page.next_cursor, backs.concat([filter.cursor || '-']), 'older', 'Older →'));
    }
    box.append(pager);
  }

  async function collectIds(queue, filter) {
    const ids = [];
    let cursor = '';
    while (ids.length < TIME_FILTER_MAX) {
      const page = await dlqPageData(queue, filter, cursor, 1000);
      ids.push(...page.items.map((e) => e.id));
      if (!page.next_cursor) break;
      cursor = page.next_cursor;
    }
    return ids.slice(0, TIME_FILTER_MAX);
  }

  // ---- A task ------------------------------------------------------------

  function decodeBase64(text) {
    const bin = atob(text || '');
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return bytes;
  }

  function hexDump(bytes) {
    const lines = [];
    for (let off = 0; off < bytes.length; off += 16) {
      const row = bytes.slice(off, off + 16);
      const hex = [...row].map((b) => b.toString(16).padStart(2, '0')).join(' ');
      const ascii = [...row].map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : '.')).join('');
      lines.push(`${off.toString(16).padStart(8, '0')}  ${hex.padEnd(47)}  ${ascii}`);
    }
    return lines.join('\n') || '(empty)';
  }

  function payloadView(env) {
    const type = env.payload_content_type || 'application/octet-stream';
    const bytes = decodeBase64(env.payload);
    const isJson = /^application\/(.+\+)?json\b/i.test(type) || /\+json\b/i.test(type);
    let pretty = null;
    if (isJson) {
      try { pretty = JSON.stringify(JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes)), null, 2); } catch (_) { pretty = null; }
    }
    return h('section', { 'aria-labelledby': 'payload-title' },
      h('h2', { id: 'payload-title' }, 'Payload'),
      h('p', { class: 'small' }, `${type}, ${num(bytes.length)} bytes${isJson && pretty === null ? ' (not valid JSON: shown as hex)' : ''}`),
      h('pre', { id: 'payload', class: pretty !== null ? 'json' : 'hex', tabindex: '0', 'aria-label': pretty !== null ? 'Payload as JSON' : 'Payload as hex' },
        pretty !== null ? pretty : hexDump(bytes)));
  }

  function timeline(env) {
    const list = h('ol', { class: 'timeline', id: 'attempts' });
    for (const a of env.attempts || []) {
      const outcome = a.outcome || 'IN_FLIGHT';
      const err = a.error;
      list.append(h('li', { class: `attempt ${outcome.toLowerCase()}` },
        h('div', { class: 'head' },
          h('strong', {}, `Attempt ${a.attempt_no}`), ' ',
          h('span', { class: `badge ${outcome.toLowerCase()}` }, outcome), ' ',
          h('time', { datetime: a.started_at }, a.started_at), ' · ',
          h('span', {}, `took ${duration(a.started_at, a.finished_at)}`)),
        err ? h('div', { class: 'error' },
          h('code', {}, err.type), ': ', h('span', { class: 'message' }, err.message),
          err.detail !== undefined && err.detail !== null ? h('details', {}, h('summary', {}, 'Detail'), h('pre', {}, JSON.stringify(err.detail, null, 2))) : '',
          err.stack ? h('details', { class: 'stack' }, h('summary', {}, 'Stack'), h('pre', {}, err.stack)) : '') : ''));
    }
    if (!list.children.length) list.append(h('li', {}, 'No attempt yet.'));
    return h('section', { 'aria-labelledby': 'attempts-title' }, h('h2', { id: 'attempts-title' }, 'Attempt history'), list);
  }

  async function loadTask(queue, id) {
    if (can('get_by_id') || !queue) return get(`/v1/tasks/${q(id)}`);
    return get(`/v1/queues/${q(queue)}/dead/${q(id)}`);
  }

  async function taskPage(view, queueHint, id) {
    let env;
    try {
      env = await loadTask(queueHint, id);
    } catch (e) {
      view.append(h('h1', { tabindex: '-1' }, `Task ${id}`), h('p', { class: 'problem' }, errorText(e)));
      if (!can('get_by_id') && !queueHint) view.append(notice('This store cannot find a task by id; open it from its queue\'s DLQ.'));
      return;
    }
    const queue = env.queue;
    view.append(h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Queues'), ' › ', h('a', { href: hashFor(['queues', queue]) }, queue), ' › ', env.id));
    view.append(h('h1', { tabindex: '-1' }, `Task ${env.id}`));
    const dead = env.status === 'DEAD';
    view.append(h('div', { class: 'toolbar', id: 'task-actions' },
      dead ? actionButton('Redrive', { caps: ['redrive'] }, async () => {
        if (!await confirmAction('Redrive task', `Send ${env.id} back to PENDING now? Its history is kept and its attempts start again.`, 'Redrive')) return;
        const r = await call('POST', `/v1/queues/${q(queue)}/dead/redrive`, { ids: [env.id] });
        say(r.count === 1 ? 'Redriven: the task is PENDING again.' : 'Nothing was redriven: the task is no longer dead.', r.count === 1 ? 'ok' : 'error');
        await route();
      }, { id: 'redrive-task' }) : h('span', { class: 'small' }, `Redrive applies to dead tasks; this one is ${env.status}.`),
      env.status === 'PENDING' ? actionButton('Cancel task…', { caps: ['cancel'] }, async () => {
        if (!await confirmAction('Cancel task', `Cancel ${env.id}? It goes to the DLQ with reason CANCELLED and never runs unless redriven.`, 'Cancel task')) return;
        const r = await call('POST', `/v1/queues/${q(queue)}/cancel`, { ids: [env.id], message: 'cancelled from the dashboard' });
        say(r.running && r.running.length ? 'Asked to stop: it had started meanwhile; its worker has been told.' : 'Cancelled: the task is in the DLQ with reason CANCELLED.', 'ok');
        await route();
      }, { id: 'cancel-task', class: 'danger' }) : '',
      env.status === 'IN_FLIGHT' && !env.cancel_requested ? actionButton('Cancel running task…', { caps: ['cancel'] }, async () => {
        if (!await confirmAction('Cancel running task', `Ask ${env.id} to stop? Its worker is told at once; unless its handler succeeds first, it goes to the DLQ with reason CANCELLED and is not retried.`, 'Cancel running task')) return;
        const r = await call('POST', `/v1/queues/${q(queue)}/cancel`, { ids: [env.id], message: 'cancelled from the dashboard' });
        say(r.running && r.running.length ? 'Asked to stop: its worker has been told.' : 'Cancelled: the task is in the DLQ with reason CANCELLED.', 'ok');
        await route();
      }, { id: 'cancel-running-task', class: 'danger' }) : '',
      actionButton('Delete', { caps: ['purge', 'get_by_id'] }, async () => {
        if (!await confirmAction('Delete task', `Delete ${env.id} for good, whatever its status?`, 'Delete')) return;
        await call('DELETE', `/v1/tasks/${q(env.id)}`);
        say(`Deleted ${env.id}.`, 'ok');
        location.hash = hashFor(['queues', queue]);
      }, { id: 'delete-task', class: 'danger' })));

    if (env.cancel_requested) {
      const c = env.cancel_requested;
      view.append(h('p', { id: 'cancel-requested', class: env.status === 'IN_FLIGHT' ? 'problem' : 'small' },
        env.status === 'IN_FLIGHT' ? 'Asked to stop' : 'Was asked to stop while running',
        ` by ${c.by} at `, h('time', { datetime: c.at }, c.at), c.message ? `: ${c.message}` : ''));
    }
    if (env.dead_reason) {
      const r = env.dead_reason;
      view.append(h('p', { id: 'dead-reason', class: 'problem' },
        'Dead: ', h('code', {}, r.code), ` — decided by ${r.by} at `, h('time', { datetime: r.at }, r.at),
        r.message ? `: ${r.message}` : ''));
    }
    const fields = h('dl', { class: 'fields', id: 'envelope' });
    for (const [k, v] of Object.entries(env)) {
      if (['payload', 'headers', 'attempts'].includes(k)) continue;
      fields.append(h('dt', {}, k), h('dd', {}, v === null ? '—' : (typeof v === 'object' ? JSON.stringify(v) : String(v))));
    }
    view.append(h('section', { 'aria-labelledby': 'envelope-title' }, h('h2', { id: 'envelope-title' }, 'Envelope'), fields));
    const headers = Object.entries(env.headers || {});
    view.append(h('section', { 'aria-labelledby': 'headers-title' }, h('h2', { id: 'headers-title' }, 'Headers'),
      headers.length ? h('table', { class: 'grid', id: 'headers' },
        h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Name'), h('th', { scope: 'col' }, 'Value'))),
        h('tbody', {}, headers.map(([k, v]) => h('tr', {}, h('th', { scope: 'row' }, h('code', {}, k)), h('td', {}, String(v))))))
        : h('p', {}, 'No headers.')));
    view.append(payloadView(env), timeline(env));
    view.append(h('details', { class: 'raw' }, h('summary', {}, 'The whole envelope (JSON)'), h('pre', {}, JSON.stringify(env, null, 2))));
  }

  // ---- Policy ------------------------------------------------------------

  async function policyPage(view, queue) {
    queueHeader(view, queue, 'policy');
    const resp = await call('GET', `/v1/queues/${q(queue)}/config`, undefined, { raw: true });
    const policy = await resp.json();
    if (resp.headers.get('rdq-config-scope') === 'process') {
      view.append(notice('This store keeps queue policy in the server process: a change here applies to this process only and is gone at restart (set it in every process\'s configuration file instead).'));
    }
    if (!can('queue_config')) view.append(notice('This store cannot hold queue policy (capability queue_config is off): editing is disabled.'));
    const form = h('form', { id: 'policy', class: 'policy', 'aria-label': `Policy of ${queue}` });
    const inputs = [];
    for (const [k, v] of Object.entries(policy)) {
      const id = `policy-${k}`;
      let input;
      if (typeof v === 'boolean') {
        input = h('input', { id, name: k, type: 'checkbox' });
        input.checked = v;
      } else if (typeof v === 'number') {
        input = h('input', { id, name: k, type: 'number', value: String(v), min: '0', step: '1' });
      } else if (v === null || typeof v === 'object') {
        input = h('textarea', { id, name: k, rows: v === null ? 1 : Math.min(10, JSON.stringify(v, null, 2).split('\n').length), spellcheck: 'false' });
        input.value = JSON.stringify(v, null, 2);
      } else {
        input = h('input', { id, name: k, value: String(v) });
      }
      if (!can('queue_config') || !isAdmin()) input.disabled = true;
      inputs.push({ k, v, input });
      form.append(h('div', { class: 'field', 'data-field': k }, h('label', { for: id }, k), input, h('span', { class: 'field-error', id: `${id}-error`, 'aria-live': 'polite' })));
    }
    const save = actionButton('Save policy', { caps: ['queue_config'] }, async () => {
      form.querySelectorAll('.field-error').forEach((e) => { e.textContent = ''; });
      const patch = {};
      for (const { k, v, input } of inputs) {
        let next;
        if (typeof v === 'boolean') next = input.checked;
        else if (typeof v === 'number') next = input.value === '' ? null : Number(input.value);
        else if (v === null || typeof v === 'object') {
          try { next = JSON.parse(input.value); } catch (e) {
            $(`#policy-${k}-error`).textContent = `not JSON: ${e.message}`;
            throw new Error(`${k} is not JSON`);
          }
        } else next = input.value;
        if (JSON.stringify(next) !== JSON.stringify(v)) patch[k] = next;
      }
      if (Object.keys(patch).length === 0) { say('Nothing changed.', 'ok'); return; }
      try {
        await call('PUT', `/v1/queues/${q(queue)}/config`, patch);
      } catch (e) {
        const field = (e.field || '').split(/[.[]/)[0] || Object.keys(patch)[0];
        const slot = $(`#policy-${field}-error`);
        if (slot) slot.textContent = e.message;
        throw e;
      }
      say(`Saved: ${Object.keys(patch).join(', ')}.`, 'ok');
      await route();
    }, { id: 'save-policy' });
    form.append(h('div', { class: 'buttons' }, save));
    form.addEventListener('submit', (ev) => ev.preventDefault());
    view.append(form);
  }

  // ---- Flow --------------------------------------------------------------

  /** "until 14:03:52 (in 28 s)" for an RFC 3339 time. */
  function until(text) {
    const at = Date.parse(text);
    const left = Math.max(0, at - Date.now());
    return `until ${new Date(at).toLocaleString()} (in ${age(left)})`;
  }

  /** The flow section of a policy as short lines people read. */
  function flowLimits(limits) {
    const rate = (r) => `${r.per_second}/s${r.burst ? `, burst ${r.burst}` : ''}`;
    const lines = [];
    if (limits.rate) lines.push(['Rate', rate(limits.rate)]);
    if (limits.concurrency) lines.push(['Concurrency (all nodes)', String(limits.concurrency)]);
    if (limits.local_concurrency) lines.push(['Concurrency (per node)', String(limits.local_concurrency)]);
    if (limits.key_concurrency) lines.push(['Concurrency per flow key', String(limits.key_concurrency)]);
    if (limits.key_rate) lines.push(['Rate per flow key', rate(limits.key_rate)]);
    if (limits.fairness) lines.push(['Fairness', limits.fairness]);
    if (limits.weights && Object.keys(limits.weights).length) {
      lines.push(['Weights', Object.entries(limits.weights).map(([k, w]) => `${k}: ${w}`).join(', ')]);
    }
    if (limits.default_weight) lines.push(['Default weight', String(limits.default_weight)]);
    return lines;
  }

  async function flowPage(view, queue) {
    queueHeader(view, queue, 'flow');
    if (!can('claim_flow')) {
      view.append(notice('This store does not keep flow limits (capability claim_flow is off): nothing to show.'));
      return;
    }
    const flow = await get(`/v1/queues/${q(queue)}/flow`);
    const limits = flowLimits(flow.limits || {});
    const summary = h('dl', { class: 'fields', id: 'flow-summary' });
    const row = (k, v) => summary.append(h('dt', {}, k), h('dd', {}, v));
    if (limits.length === 0) row('Limits', 'none (the policy has no flow section)');
    for (const [k, v] of limits) row(k, v);
    if (flow.tokens !== null && flow.tokens !== undefined) row('Tokens left', flow.tokens.toFixed(1));
    row('In flight', num(flow.in_flight));
    row('Whole queue', flow.blocked_until ? `throttled ${until(flow.blocked_until)}` : 'not throttled');
    row('Claims cut short', num(flow.throttled_claims));
    view.append(h('h2', {}, 'Limits and status'), summary);

    view.append(h('h2', {}, 'Flow keys'));
    if (flow.keys.length === 0) {
      view.append(h('p', { id: 'flow-keys-empty' }, 'No flow key has tasks in flight or a throttle.'));
    } else {
      const table = h('table', { class: 'grid', id: 'flow-keys' },
        h('caption', {}, 'The busiest flow keys (most in flight first) and the throttled ones.'),
        h('thead', {}, h('tr', {}, ['Flow key', 'In flight', 'Tokens left', 'Throttled'].map((c) => h('th', { scope: 'col' }, c)))));
      const body = h('tbody');
      for (const k of flow.keys) {
        body.append(h('tr', { 'data-key': k.key },
          h('th', { scope: 'row' }, h('code', {}, k.key)),
          h('td', { class: 'n' }, num(k.in_flight)),
          h('td', { class: 'n' }, k.tokens === null || k.tokens === undefined ? '–' : k.tokens.toFixed(1)),
          h('td', {}, k.blocked_until ? until(k.blocked_until) : '–')));
      }
      table.append(body);
      view.append(table);
    }

    // Throttle a key or the whole queue (admin).
    const form = h('form', { id: 'throttle', class: 'filters', 'aria-label': `Throttle ${queue}` });
    const key = h('input', { id: 'throttle-key', name: 'flow_key', placeholder: 'the whole queue', spellcheck: 'false' });
    const secs = h('input', { id: 'throttle-for', name: 'for', type: 'number', min: '1', step: '1', value: '60' });
    if (!isAdmin()) { key.disabled = true; secs.disabled = true; }
    const go = actionButton('Throttle', {}, async () => {
      const body = { for_ms: Number(secs.value) * 1000 };
      if (key.value.trim()) body.flow_key = key.value.trim();
      await call('POST', `/v1/queues/${q(queue)}/throttle`, body);
      say(`Throttled ${body.flow_key || 'the whole queue'} for ${secs.value} s.`, 'ok');
      await route();
    }, { id: 'throttle-go' });
    form.append(
      h('label', { for: 'throttle-key' }, 'Flow key'), key,
      h('label', { for: 'throttle-for' }, 'For (seconds)'), secs, go);
    form.addEventListener('submit', (ev) => ev.preventDefault());
    view.append(h('h2', {}, 'Throttle'), form);
  }

  // ---- Audit log ---------------------------------------------------------

  // ---- Schedules ---------------------------------------------------------

  const instant = (ms) => (ms === null || ms === undefined ? '—' : new Date(ms).toISOString());

  function specText(spec) {
    if (spec.cron !== undefined) return spec.cron;
    const ms = spec.every_ms;
    return ms % 1000 === 0 ? `every ${age(ms)}` : `every ${ms} ms`;
  }

  function skipsText(skips) {
    const entries = Object.entries(skips || {}).filter(([, n]) => n > 0);
    return entries.length ? entries.map(([reason, n]) => `${reason} ${num(n)}`).join(', ') : 'none';
  }

  async function schedulesPage(view) {
    view.append(h('h1', { tabindex: '-1' }, 'Schedules'));
    if (!can('schedules')) {
      view.append(notice('This store keeps no schedules (capability schedules is off): see docs/schedules.md.'));
      return;
    }
    const data = await get('/v1/schedules');
    view.append(h('div', { class: 'toolbar' },
      h('button', { type: 'button', id: 'refresh', onclick: () => route() }, 'Refresh')));
    if (data.schedules.length === 0) {
      view.append(h('p', {}, 'No schedules yet: put one with rdq schedule put or PUT /v1/schedules/{name}.'));
      return;
    }
    const table = h('table', { class: 'grid', id: 'schedules' },
      h('caption', {}, 'Every schedule on a queue you may see. Times are UTC; skips count due times not submitted, by reason.'),
      h('thead', {}, h('tr', {},
        ['Schedule', 'Spec', 'Zone', 'Queue', 'State', 'Last fire', 'Last task', 'Next run', 'Fires', 'Skips', 'Actions'].map((c) => h('th', { scope: 'col' }, c)))));
    const body = h('tbody');
    for (const st of data.schedules) {
      const s = st.schedule;
      const name = st.name;
      const queue = s.task.queue;
      const path = `/v1/schedules/${q(name)}`;
      const toggle = actionButton(s.paused ? 'Resume' : 'Pause', { caps: ['schedules'] }, async () => {
        await call('POST', `${path}/${s.paused ? 'resume' : 'pause'}`);
        say(`${name} ${s.paused ? 'resumed' : 'paused'}.`, 'ok');
        await route();
      }, { 'aria-label': `${s.paused ? 'Resume' : 'Pause'} ${name}`, class: 'pause' });
      const run = actionButton('Run now…', { caps: ['schedules'] }, async () => {
        if (!await confirmAction('Run schedule now', `Submit the task of ${name} to ${queue} once now, outside its cadence?`, 'Run now')) return;
        const env = await call('POST', `${path}/run`);
        say(`Submitted task ${env.id} (a manual run of ${name}).`, 'ok');
        await route();
      }, { 'aria-label': `Run ${name} now`, class: 'run' });
      const del = actionButton('Delete…', { caps: ['schedules'] }, async () => {
        if (!await confirmAction('Delete schedule', `Delete the schedule ${name}? It submits nothing more; the tasks it submitted stay.`, 'Delete')) return;
        await call('DELETE', path);
        say(`Deleted schedule ${name}.`, 'ok');
        await route();
      }, { 'aria-label': `Delete ${name}`, class: 'danger' });
      const lastTask = st.last_fired_task
        ? h('a', { href: hashFor(['queues', queue, 'tasks', st.last_fired_task]) }, h('code', {}, st.last_fired_task))
        : '—';
      body.append(h('tr', { 'data-schedule': name },
        h('th', { scope: 'row' }, name),
        h('td', {}, h('code', {}, specText(s.spec))),
        h('td', {}, s.tz),
        h('td', {}, h('a', { href: hashFor(['queues', queue, 'tasks']) }, queue)),
        h('td', {}, h('span', { class: s.paused ? 'badge paused' : 'badge running' }, s.paused ? 'paused' : 'active')),
        h('td', {}, instant(st.last_fire_at_ms)),
        h('td', { class: 'last-task' }, lastTask),
        h('td', {}, instant(st.next_due_ms)),
        h('td', { class: 'n' }, num(st.fires)),
        h('td', { class: 'skips' }, skipsText(st.skips)),
        h('td', {}, toggle, ' ', run, ' ', del)));
    }
    table.append(body);
    view.append(h('div', { class: 'scroll' }, table));
  }

  // ---- Sources -----------------------------------------------------------

  const rate = (r) => `${Number(r).toLocaleString('en', { maximumFractionDigits: 1 })}/s`;

  async function sourcesPage(view) {
    view.append(h('h1', { tabindex: '-1' }, 'Sources'));
    const data = await get('/v1/sources');
    view.append(h('div', { class: 'toolbar' },
      h('button', { type: 'button', id: 'refresh', onclick: () => route() }, 'Refresh')));
    if (data.sources.length === 0) {
      view.append(h('p', { id: 'sources-empty' }, 'This server runs no sources on a queue you may see: configure [[sources]] in its configuration file (see docs/sources.md).'));
      return;
    }
    const table = h('table', { class: 'grid', id: 'sources' },
      h('caption', {}, 'The Kafka topics, JetStream streams and SQS queues this server reads, each record one task. Counts are since the server started; the rate is over the last 10 seconds; lag is as last measured.'),
      h('thead', {}, h('tr', {},
        ['Source', 'Kind', 'Queue', 'State', 'Paused', 'Lag', 'Rate', 'Ingested', 'Dead', 'Last error'].map((c) => h('th', { scope: 'col' }, c)))));
    const body = h('tbody');
    for (const s of data.sources) {
      const lastError = s.last_error
        ? h('span', { class: 'last-error' }, s.last_error,
          s.last_error_at_ms ? h('span', { class: 'small' }, ` (${instant(s.last_error_at_ms)})`) : '')
        : '—';
      body.append(h('tr', { 'data-source': s.name },
        h('th', { scope: 'row' }, s.name),
        h('td', {}, s.kind),
        h('td', {}, h('a', { href: hashFor(['queues', s.queue, 'tasks']) }, s.queue)),
        h('td', { class: 'state' }, h('span', { class: `badge ${s.state}` }, s.state)),
        h('td', { class: 'paused' }, s.paused ? 'yes' : 'no'),
        h('td', { class: 'n lag' }, s.lag === null ? '—' : num(s.lag)),
        h('td', { class: 'n rate' }, rate(s.rate)),
        h('td', { class: 'n ingested' }, num(s.ingested)),
        h('td', { class: 'n dead' }, s.dead > 0 ? h('a', { href: hashFor(['queues', s.queue]), class: 'dead' }, num(s.dead)) : '0'),
        h('td', {}, lastError)));
    }
    table.append(body);
    view.append(h('div', { class: 'scroll' }, table));
  }

  async function auditPage(view, params) {
    view.append(h('h1', { tabindex: '-1' }, 'Audit log'));
    const queue = params.get('queue') || '';
    const input = h('input', { id: 'audit-queue', name: 'queue', value: queue, autocomplete: 'off' });
    view.append(h('form', {
      class: 'inline', role: 'search', onsubmit: (ev) => {
        ev.preventDefault();
        location.hash = hashFor(['audit'], new URLSearchParams({ queue: input.value.trim() }));
      },
    }, h('label', { for: 'audit-queue' }, 'Queue'), input, h('button', { type: 'submit' }, 'Show')));
    if (!isAdmin()) {
      view.append(notice('The audit log needs a token with the admin scope.'));
      return;
    }
    const data = await get(`/v1/audit?limit=200${queue ? `&queue=${q(queue)}` : ''}`);
    view.append(h('p', { class: 'small' }, 'What this server process recorded since it started, newest first (the full log is in the server\'s log and its audit_log file).'));
    if (data.records.length === 0) { view.append(h('p', { id: 'audit-empty' }, 'Nothing recorded yet.')); return; }
    const table = h('table', { class: 'grid', id: 'audit' },
      h('thead', {}, h('tr', {}, ['When', 'Who', 'Action', 'Queue', 'Count', 'Dry run', 'Detail'].map((c) => h('th', { scope: 'col' }, c)))));
    const body = h('tbody');
    for (const r of data.records) {
      body.append(h('tr', { 'data-action': r.action },
        h('td', {}, h('time', { datetime: r.at }, r.at)),
        h('td', {}, r.who),
        h('td', {}, h('code', {}, r.action)),
        h('td', {}, r.queue ? h('a', { href: hashFor(['queues', r.queue]) }, r.queue) : '—'),
        h('td', { class: 'n' }, r.count === undefined ? '—' : num(r.count)),
        h('td', {}, r.dry_run ? 'yes' : 'no'),
        h('td', {}, r.detail === undefined ? '' : h('details', {}, h('summary', {}, 'Detail'), h('pre', {}, JSON.stringify(r.detail, null, 2))))));
    }
    table.append(body);
    view.append(h('div', { class: 'scroll' }, table));
  }

  // ---- Start -------------------------------------------------------------

  async function start() {
    try {
      state.me = await get('/v1/whoami');
      state.caps = (await get('/v1/capabilities')).capabilities;
    } catch (e) {
      state.me = null;
      renderIdentity();
      main().replaceChildren(h('h1', { tabindex: '-1' }, 'rdq'),
        h('p', { class: 'problem' }, errorText(e)),
        e.status === 401 ? h('p', {}, h('button', { type: 'button', id: 'enter-token', onclick: () => askToken('') }, 'Enter a token')) : '');
      return;
    }
    renderIdentity();
    await route(false);
  }

  window.addEventListener('hashchange', () => { if (state.me) route(true); });
  document.addEventListener('DOMContentLoaded', () => {
    setupLogin();
    start();
  });
})();
