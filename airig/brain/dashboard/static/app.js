// airig operator console: one page, hash routes, polling with fetch.
//
// The admin token lives in sessionStorage and travels only in an Authorization header
// (EventSource cannot send one, so no SSE). Every text from the brain goes through
// textContent: plan and task names are written by submitters and must never become markup.
'use strict';

(() => {
  const TOKEN_KEY = 'airig.token';
  const POLL_MS = 2000;
  const MODELS_EVERY_MS = 10000;
  const HISTORY = 90; // heartbeats kept per GPU for the sparklines
  const MAX_DAG_NODES = 300;
  const MAX_TABLE_ROWS = 500;
  const LIVE = ['READY', 'RUNNING', 'LEASED', 'RETRY_WAIT', 'PENDING'];
  const ALL_STATES = ['PENDING', 'READY', 'LEASED', 'RUNNING', 'RETRY_WAIT', 'ESCALATED', 'SUCCEEDED',
    'FAILED', 'UPSTREAM_FAILED', 'CANCELLED'];
  const MEANING = { READY: 'waiting for a worker', RUNNING: 'executing now', LEASED: 'claimed, not started',
    RETRY_WAIT: 'backing off before a retry', PENDING: 'waiting on dependencies',
    ESCALATED: 'waiting for the external tier' };
  const EVENT_TYPES = ['task_submitted', 'task_ready', 'task_leased', 'task_started', 'task_completed',
    'task_failed', 'task_retry_scheduled', 'task_released', 'task_cancelled',
    'task_upstream_failed', 'task_escalated', 'task_escalation_waiting', 'gpu.thermal_block',
    'gpu.thermal_resume'];

  const app = {
    view: null, // {name, refresh()}
    timer: null,
    busy: false,
    workers: [],
    workerCounts: { alive: 0, expected: 0, silent: 0, stopped: 0 },
    history: new Map(), // "worker#gpu" -> [{hb, temp, power}]
  };

  // ------------------------------------------------------------------ DOM helpers
  const $ = (sel) => document.querySelector(sel);

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    add(el, children);
    return el;
  }

  const SVG_NS = 'http://www.w3.org/2000/svg';
  function s(tag, attrs, ...children) {
    const el = document.createElementNS(SVG_NS, tag);
    setAttrs(el, attrs);
    add(el, children);
    return el;
  }

  function setAttrs(el, attrs) {
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === 'text') el.textContent = String(value);
      else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
      else el.setAttribute(key, value === true ? '' : String(value));
    }
  }

  // Replace an element's children; null / false children are skipped, arrays flattened.
  function fill(el, ...children) {
    el.replaceChildren();
    add(el, children);
  }

  function add(el, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }

  const pill = (state, text) => h('span', { class: `pill st-${state}`, text: text || state.replace('_', ' ') });
  const empty = (text) => h('div', { class: 'empty', text });
  const mono = (text) => h('span', { class: 'mono', text });

  function table(head, rows, cls) {
    return h('div', { class: 'table-wrap' },
      h('table', { class: cls || 'grid' },
        h('thead', {}, h('tr', {}, head.map((c) => (typeof c === 'string'
          ? h('th', { text: c }) : h('th', { class: 'num', text: c.num }))))),
        h('tbody', {}, rows)));
  }

  function pageHead(title, subtitle, ...extra) {
    return h('div', { class: 'page-head' },
      h('div', {}, h('h1', { text: title }), subtitle ? h('p', { class: 'muted', text: subtitle }) : null),
      h('div', { class: 'page-actions' }, extra));
  }

  function tile(label, value, opts = {}) {
    return h('div', { class: `tile ${opts.cls || ''}`, 'data-tile': opts.key || null },
      h('div', { class: 'tile-label', text: label }),
      h('div', { class: 'tile-value', text: value }),
      opts.note ? h('div', { class: 'tile-note', text: opts.note }) : null,
      opts.extra || null);
  }

  // ------------------------------------------------------------------ formatting
  function duration(seconds) {
    if (seconds === null || seconds === undefined || !isFinite(seconds)) return '—';
    const s = Math.max(0, Math.round(seconds));
    if (s < 60) return `${s}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, '0')}s`;
    const m = Math.floor(s / 60);
    if (m < 1440) return `${Math.floor(m / 60)}h ${String(m % 60).padStart(2, '0')}m`;
    return `${Math.floor(m / 1440)}d ${Math.floor((m % 1440) / 60)}h`;
  }
  const ago = (ts) => (ts ? `${duration(Date.now() / 1000 - ts)} ago` : '—');
  const clock = (date) => date.toLocaleTimeString([], { hour12: false });
  function bytes(n) {
    if (typeof n !== 'number') return '—';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
    return `${n.toFixed(i && n < 10 ? 1 : 0)} ${units[i]}`;
  }
  const gb = (mb) => (mb / 1024).toFixed(1);
  const label = (state) => state.replace('_', ' ');
  const clip = (text, n) => (text.length > n ? `${text.slice(0, n - 1)}…` : text);

  // ------------------------------------------------------------------ the brain
  class SignedOut extends Error {}

  // GET, or POST of ``body`` as JSON (the Search page's query).
  async function api(path, body) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) throw new SignedOut('no token');
    const headers = { Authorization: `Bearer ${token}`, Accept: 'application/json' };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const answer = await fetch(path, {
      method: body === undefined ? 'GET' : 'POST', headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer',
    });
    if (answer.status === 401) {
      signOut('The brain did not accept that token. Paste the current BRAIN_ADMIN_TOKEN.');
      throw new SignedOut('401');
    }
    if (answer.status === 403) {
      signOut('That token is not an admin token; the dashboard needs BRAIN_ADMIN_TOKEN.');
      throw new SignedOut('403');
    }
    if (!answer.ok) {
      let detail = '';
      try { detail = JSON.stringify((await answer.json()).detail); } catch (_) { /* no body */ }
      throw new Error(`${path} answered HTTP ${answer.status} ${detail}`);
    }
    return answer.json();
  }

  function setConn(ok, text) {
    const conn = $('#conn');
    conn.dataset.status = ok ? 'live' : 'down';
    $('#conn-text').textContent = text;
  }

  async function tick() {
    if (app.busy || !sessionStorage.getItem(TOKEN_KEY)) return;
    app.busy = true;
    try {
      const { workers, counts } = await api('/v1/workers');
      app.workers = workers;
      app.workerCounts = counts;
      remember(workers);
      const warned = workers.filter((w) => w.thermal_blocked || (w.warnings || []).length).length;
      badge('#badge-cluster', warned, 'warn');
      if (app.view && app.view.refresh) await app.view.refresh();
      setConn(true, `live · ${clock(new Date())}`);
    } catch (err) {
      if (!(err instanceof SignedOut)) setConn(false, `brain unreachable: ${err.message}`);
    } finally {
      app.busy = false;
    }
  }

  function poll() {
    clearTimeout(app.timer);
    app.timer = setTimeout(async () => {
      await tick();
      if (sessionStorage.getItem(TOKEN_KEY)) poll();
    }, POLL_MS);
  }

  function badge(sel, count, cls) {
    const el = $(sel);
    el.hidden = !count;
    el.className = `badge ${cls || ''}`;
    el.textContent = String(count);
  }

  // GPU history for the sparklines: one sample per heartbeat, kept in this tab only.
  function remember(workers) {
    for (const w of workers) {
      for (const g of w.gpus || []) {
        const key = `${w.name}#${g.index}`;
        const list = app.history.get(key) || [];
        if (!list.length || list[list.length - 1].hb !== w.last_heartbeat) {
          list.push({ hb: w.last_heartbeat, temp: g.temperature_c, power: g.power_w });
          if (list.length > HISTORY) list.shift();
        }
        app.history.set(key, list);
      }
    }
  }

  // ------------------------------------------------------------------ sign in / out
  function showLogin(message) {
    $('#nav').hidden = true;
    $('#conn').hidden = true;
    $('#view').hidden = true;
    $('#login').hidden = false;
    $('#login-error').textContent = message || '';
    const input = $('#token-input');
    input.value = '';
    input.focus();
  }

  function signOut(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    clearTimeout(app.timer);
    app.view = null;
    showLogin(message);
  }

  function start() {
    $('#login').hidden = true;
    $('#nav').hidden = false;
    $('#conn').hidden = false;
    $('#view').hidden = false;
    setConn(true, 'connecting…');
    route();
  }

  // ------------------------------------------------------------------ routing
  function parseHash() {
    const [path, query] = location.hash.replace(/^#/, '').split('?');
    const [name, ...rest] = (path || 'cluster').split('/');
    let arg = rest.join('/');
    try { arg = decodeURIComponent(arg); } catch (_) { /* keep it as typed */ }
    return { name, arg, params: new URLSearchParams(query || '') };
  }

  function route() {
    if (!sessionStorage.getItem(TOKEN_KEY)) return;
    const { name, arg, params } = parseHash();
    const mount = VIEWS[name] || VIEWS.cluster;
    const root = $('#view');
    root.replaceChildren();
    document.body.dataset.view = VIEWS[name] ? name : 'cluster';
    const nav = name === 'plan' ? 'plans' : document.body.dataset.view;
    for (const link of document.querySelectorAll('[data-nav]')) {
      link.classList.toggle('active', link.dataset.nav === nav);
    }
    app.view = mount(root, arg, params);
    clearTimeout(app.timer);
    tick().then(poll);
  }

  // ------------------------------------------------------------------ cluster
  function sparkline(samples) {
    const W = 160;
    const H = 34;
    const svg = s('svg', { class: 'spark', viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none',
      role: 'img', 'aria-label': 'temperature and power, recent heartbeats' });
    const line = (values, span, cls) => {
      const known = values.filter((v) => typeof v === 'number');
      if (!known.length) return;
      const mid = (Math.min(...known) + Math.max(...known)) / 2;
      const half = Math.max(span, Math.max(...known) - Math.min(...known)) / 2 * 1.15;
      const lo = mid - half;
      const hi = mid + half;
      const pts = [];
      values.forEach((v, i) => {
        if (typeof v !== 'number') return;
        const x = values.length > 1 ? (i / (values.length - 1)) * W : W;
        const y = H - 2 - ((Math.min(Math.max(v, lo), hi) - lo) / (hi - lo || 1)) * (H - 4);
        pts.push(`${x.toFixed(1)},${y.toFixed(1)}`);
      });
      if (pts.length) svg.append(s('polyline', { class: cls, points: pts.join(' ') }));
    };
    line(samples.map((x) => x.power), 40, 'spark-power');
    line(samples.map((x) => x.temp), 10, 'spark-temp');
    return svg;
  }

  function gpuBlock(w, g) {
    const used = g.vram_total_mb ? g.vram_total_mb - g.vram_free_mb : 0;
    const share = g.vram_total_mb ? used / g.vram_total_mb : 0;
    const temp = g.temperature_c;
    const tempCls = w.thermal_blocked ? 'hot' : temp >= 75 ? 'warm' : '';
    const bar = h('i', {});
    bar.style.width = `${Math.round(share * 100)}%`;
    const samples = app.history.get(`${w.name}#${g.index}`) || [];
    return h('div', { class: 'gpu', 'data-gpu': g.index },
      h('div', { class: 'gpu-head' },
        h('span', { class: 'gpu-index', text: `GPU ${g.index}` }),
        h('span', { class: 'gpu-name', text: g.name || 'unknown card' })),
      h('div', { class: 'gpu-stats' },
        h('div', { class: 'stat' }, h('label', { text: 'Temp' }),
          h('b', { class: `temp ${tempCls}`, 'data-temp': '', text: typeof temp === 'number' ? `${temp.toFixed(0)} °C` : '—' })),
        h('div', { class: 'stat' }, h('label', { text: 'Power' }),
          h('b', { text: typeof g.power_w === 'number' ? `${g.power_w.toFixed(0)} W` : '—' })),
        h('div', { class: 'stat stat-wide' }, h('label', { text: 'VRAM' }),
          h('b', { 'data-vram': '', text: g.vram_total_mb ? `${gb(used)} / ${gb(g.vram_total_mb)} GB` : '—' }),
          h('div', { class: `meter ${share > 0.9 ? 'meter-hot' : ''}` }, bar))),
      h('div', { class: 'spark-wrap' }, sparkline(samples),
        h('div', { class: 'spark-legend' },
          h('span', { class: 'key-temp', text: 'temp' }), h('span', { class: 'key-power', text: 'power' }),
          h('span', { class: 'muted', text: `${samples.length} heartbeats` }))));
  }

  function currentTask(tasks) {
    if (!tasks.length) return h('div', { class: 'current idle', text: 'Idle' });
    return h('div', { class: 'current' }, tasks.map((t) =>
      h('div', { class: 'current-task', 'data-current': `${t.plan_id}/${t.task}` },
        pill(t.state),
        h('a', { href: `#plan/${encodeURIComponent(t.plan_id)}`, class: 'mono', text: t.task }),
        h('span', { class: 'muted', text: [t.type, t.model].filter(Boolean).join(' · ') }),
        h('span', { class: 'muted right', text: t.started_at ? duration(Date.now() / 1000 - t.started_at) : '' }))));
  }

  function workerCard(w, tasks) {
    const warnings = [...(w.warnings || [])];
    if (w.thermal_blocked && !warnings.length) warnings.push('thermal guard: claims paused');
    const gpus = w.gpus || [];
    return h('article', { class: `card worker ${w.alive ? '' : 'silent'}`, 'data-worker': w.name, 'data-alive': String(!!w.alive) },
      h('header', { class: 'worker-head' },
        h('h3', { class: 'mono', text: w.name }),
        w.host ? h('span', { class: 'host', 'data-host': w.host, text: w.host }) : null,
        // stopped: deregistered on a clean stop, not a worker gone quiet
        h('span', { class: `pill ${w.alive ? 'st-SUCCEEDED' : w.stopped ? 'st-CANCELLED' : 'st-FAILED'}`, text: w.alive ? 'alive' : w.stopped ? 'stopped' : 'silent' })),
      h('div', { class: 'worker-meta' },
        (w.classes || []).map((c) => h('span', { class: 'chip', text: c })),
        h('span', { class: 'muted', text: `heartbeat ${ago(w.last_heartbeat)}` })),
      warnings.length ? h('div', { class: 'warning', role: 'status', 'data-warning': '' },
        h('strong', { text: w.thermal_blocked ? 'Thermal guard' : 'Warning' }), warnings.join('; ')) : null,
      h('div', { class: 'section-label', text: 'Current task' }),
      currentTask(tasks),
      h('div', { class: 'section-label', text: gpus.length ? 'GPUs' : 'Hardware' }),
      gpus.length ? h('div', { class: 'gpus' }, gpus.map((g) => gpuBlock(w, g)))
        : h('div', { class: 'muted small', text: 'CPU worker, no GPU' }),
      h('div', { class: 'section-label', text: 'Resident models' }),
      h('div', { class: 'chips' }, (w.resident_models || []).length
        ? w.resident_models.map((m) => h('span', { class: 'chip chip-model', text: m }))
        : h('span', { class: 'muted small', text: 'none' })));
  }

  function clusterView(root) {
    const tiles = h('div', { class: 'tiles' });
    const grid = h('div', { class: 'workers' });
    root.append(pageHead('Cluster', 'Workers, their GPUs and what they are running'), tiles, grid);
    return {
      async refresh() {
        const [queue, store] = await Promise.all([api('/v1/queue'), api('/v1/store')]);
        const byWorker = new Map();
        for (const t of queue.active) {
          if (!byWorker.has(t.worker_id)) byWorker.set(t.worker_id, []);
          byWorker.get(t.worker_id).push(t);
        }
        const workers = app.workers;
        const gpus = workers.flatMap((w) => w.gpus || []);
        const hot = workers.filter((w) => w.thermal_blocked).length;
        // the brain's count: a worker that stopped cleanly (a slot scaled away) is no
        // longer expected, so scaling down leaves the tile green (routes/workers.py)
        const counts = app.workerCounts;
        fill(tiles,
          tile('Workers alive', `${counts.alive} / ${counts.expected}`, { key: 'workers',
            note: counts.stopped ? `${counts.stopped} stopped cleanly, not counted` : null,
            cls: counts.alive < counts.expected ? 'tile-warn' : '' }),
          tile('GPUs', String(gpus.length), { note: hot ? `${hot} paused by thermal guard` : 'none paused', cls: hot ? 'tile-bad' : '' }),
          tile('Running', String(queue.totals.RUNNING + queue.totals.LEASED), { key: 'running' }),
          tile('Ready', String(queue.totals.READY), { note: `oldest ${duration(queue.oldest_ready_wait_s)}` }),
          tile('Store', bytes(store.db_bytes + store.wal_bytes), { key: 'store',
            note: `database · results ${bytes(store.results_bytes)} · logs ${bytes(Object.values(store.logs).reduce((a, b) => a + b, 0))} · kept ${store.retention_days ? `${store.retention_days} d` : 'forever'} · ${store.last_backup_at ? `backup ${duration(Date.now() / 1000 - store.last_backup_at)} ago` : 'never backed up'}` }));
        fill(grid, ...(workers.length
          ? workers.map((w) => workerCard(w, byWorker.get(w.name) || []))
          : [empty('No worker has registered yet.')]));
      },
    };
  }

  // ------------------------------------------------------------------ queue
  function waitGauge(queue) {
    const wait = queue.oldest_ready_wait_s;
    const share = wait ? wait / queue.max_wait_s : 0;
    const bar = h('i', {});
    bar.style.width = `${Math.min(100, share * 100).toFixed(1)}%`;
    const cls = share >= 1 ? 'meter-bad' : share >= 0.5 ? 'meter-warn' : 'meter-ok';
    const task = queue.oldest_ready;
    return h('div', { class: 'card gauge', 'data-oldest-wait': wait === null ? '' : wait.toFixed(1) },
      h('div', { class: 'tile-label', text: 'Oldest READY wait' }),
      h('div', { class: 'gauge-value' }, h('b', { text: duration(wait) }),
        h('span', { class: 'muted', text: ` of ${duration(queue.max_wait_s)} max wait` })),
      h('div', { class: `meter meter-lg ${cls}` }, bar),
      h('div', { class: 'muted small' }, task
        ? ['task ', h('a', { href: `#plan/${encodeURIComponent(task.plan_id)}`, class: 'mono', text: task.task }),
          ` · ${task.task_class}${task.model ? ` · ${task.model}` : ''}`]
        : 'nothing is waiting'));
  }

  function groupTable(title, groups, key) {
    const rows = groups.map((g) => h('tr', { [`data-${key}`]: g.name === null ? '' : g.name },
      h('td', { class: 'mono', text: g.name === null ? '(none)' : g.name }),
      LIVE.map((st) => h('td', { class: `num ${g.counts[st] ? `cnt st-${st}` : 'zero'}`, 'data-state': st, text: g.counts[st] })),
      h('td', { class: 'num', text: duration(g.oldest_ready_wait_s) })));
    return h('div', { class: 'card' }, h('h2', { text: title }),
      rows.length ? table([key === 'class' ? 'Class' : 'Model', ...LIVE.map((st) => ({ num: label(st) })),
        { num: 'Oldest READY' }], rows)
        : empty('No live tasks.'));
  }

  function queueView(root) {
    const top = h('div', { class: 'queue-top' });
    const groups = h('div', { class: 'two-col' });
    const active = h('div', { class: 'card' });
    root.append(pageHead('Queue', 'Live tasks per class and model, and what holds a lease'), top, groups, active);
    return {
      async refresh() {
        const q = await api('/v1/queue');
        badge('#badge-queue', q.totals.READY, '');
        fill(top,
          h('div', { class: 'tiles tiles-states' }, LIVE.map((st) =>
            tile(label(st), String(q.totals[st]), { cls: `tile-state st-${st}`, key: st, note: MEANING[st] }))),
          waitGauge(q));
        fill(groups, groupTable('By class', q.by_class, 'class'), groupTable('By model', q.by_model, 'model'));
        const now = Date.now() / 1000;
        const rows = q.active.map((t) => h('tr', {},
          h('td', { class: 'mono', text: t.worker_id || '—' }),
          h('td', {}, h('a', { href: `#plan/${encodeURIComponent(t.plan_id)}`, class: 'mono', text: clip(t.plan_id, 14) })),
          h('td', { class: 'mono', text: t.task }), h('td', { text: t.type }),
          h('td', { text: t.task_class }), h('td', { class: 'mono', text: t.model || '—' }),
          h('td', {}, pill(t.state)), h('td', { class: 'num', text: t.attempt }),
          h('td', { class: 'num', text: t.started_at ? duration(now - t.started_at) : '—' })));
        fill(active, h('h2', { text: 'Leased and running' }),
          rows.length ? table(['Worker', 'Plan', 'Task', 'Type', 'Class', 'Model', 'State', { num: 'Attempt' }, { num: 'For' }], rows)
            : empty('Nothing holds a lease.'),
          q.active_truncated ? h('p', { class: 'muted small', text: 'Only the first 500 are shown.' }) : null);
      },
    };
  }

  // ------------------------------------------------------------------ plans
  function progress(counts, total) {
    const bar = h('div', { class: 'progress', title: Object.entries(counts).map(([k, v]) => `${k}: ${v}`).join(', ') });
    for (const st of ALL_STATES) {
      if (!counts[st]) continue;
      const seg = h('i', { class: `st-${st}` });
      seg.style.width = `${(counts[st] / total) * 100}%`;
      bar.append(seg);
    }
    return bar;
  }

  function plansView(root) {
    const body = h('div', { class: 'card' });
    root.append(pageHead('Plans', 'The newest 100 plans; open one for its task graph'), body);
    return {
      async refresh() {
        const { plans } = await api('/v1/plans?limit=100');
        const rows = plans.map((p) => {
          const done = p.counts.SUCCEEDED || 0;
          return h('tr', { class: 'clickable', 'data-plan': p.id, 'data-status': p.status,
            onclick: () => { location.hash = `#plan/${encodeURIComponent(p.id)}`; } },
          h('td', {}, h('a', { href: `#plan/${encodeURIComponent(p.id)}`, text: p.name || '(unnamed)' })),
          h('td', { class: 'mono muted', text: p.id }),
          h('td', {}, pill(`plan-${p.status}`, p.status)),
          h('td', { class: 'progress-cell' }, progress(p.counts, p.task_total)),
          h('td', { class: 'num', text: `${done} / ${p.task_total}` }),
          h('td', { class: 'muted', text: ago(p.created_at) }));
        });
        fill(body, rows.length
          ? table(['Name', 'Plan', 'Status', 'Progress', { num: 'Succeeded' }, 'Submitted'], rows)
          : empty('No plan submitted yet: airig submit plan.yaml'));
      },
    };
  }

  // Layers by longest path from a root; within a layer, ordered by the mean position of
  // the task's parents (one barycentre pass keeps most edges short and uncrossed).
  function layout(tasks) {
    const byId = new Map(tasks.map((t, i) => [t.id, { t, i, deps: [], kids: [], depth: 0 }]));
    for (const n of byId.values()) {
      for (const d of n.t.depends_on) {
        const up = byId.get(d);
        if (up) { n.deps.push(up); up.kids.push(n); }
      }
    }
    const waiting = new Map([...byId.values()].map((n) => [n, n.deps.length]));
    const queue = [...byId.values()].filter((n) => !n.deps.length);
    while (queue.length) {
      const n = queue.shift();
      for (const k of n.kids) {
        k.depth = Math.max(k.depth, n.depth + 1);
        waiting.set(k, waiting.get(k) - 1);
        if (!waiting.get(k)) queue.push(k);
      }
    }
    const layers = [];
    for (const n of byId.values()) (layers[n.depth] = layers[n.depth] || []).push(n);
    layers.forEach((layer, depth) => {
      if (depth) {
        const mean = (n) => n.deps.reduce((a, d) => a + d.row, 0) / (n.deps.length || 1);
        layer.sort((a, b) => mean(a) - mean(b) || a.i - b.i);
      }
      layer.forEach((n, row) => { n.row = row; });
    });
    return { nodes: byId, layers };
  }

  function dag(tasks) {
    const NW = 184; const NH = 48; const GX = 64; const GY = 14; const PAD = 16;
    const { nodes, layers } = layout(tasks);
    const tallest = Math.max(...layers.map((l) => l.length));
    const width = PAD * 2 + layers.length * NW + (layers.length - 1) * GX;
    const height = PAD * 2 + tallest * NH + (tallest - 1) * GY;
    for (const layer of layers) {
      const offset = ((tallest - layer.length) * (NH + GY)) / 2;
      for (const n of layer) {
        n.x = PAD + n.depth * (NW + GX);
        n.y = PAD + offset + n.row * (NH + GY);
      }
    }
    const svg = s('svg', { class: 'dag', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': 'task graph' },
      s('defs', {}, s('marker', { id: 'arrow', viewBox: '0 0 8 8', refX: 7, refY: 4, markerWidth: 7, markerHeight: 7, orient: 'auto' },
        s('path', { d: 'M0,0 L8,4 L0,8 z', class: 'arrow' }))));
    for (const n of nodes.values()) {
      for (const d of n.deps) {
        const x1 = d.x + NW; const y1 = d.y + NH / 2; const x2 = n.x - 2; const y2 = n.y + NH / 2;
        const cls = ['RUNNING', 'LEASED'].includes(n.t.state) ? 'edge edge-live' : d.t.state === 'SUCCEEDED' ? 'edge edge-done' : 'edge';
        svg.append(s('path', { class: cls, 'marker-end': 'url(#arrow)',
          d: `M${x1},${y1} C${x1 + GX / 2},${y1} ${x2 - GX / 2},${y2} ${x2},${y2}` }));
      }
    }
    for (const n of nodes.values()) {
      const t = n.t;
      const sub = [label(t.state), t.attempt > 1 ? `try ${t.attempt}` : null, t.worker_id].filter(Boolean).join(' · ');
      const tip = [`${t.id} (${t.type}, ${t.task_class})`, `state: ${t.state}`, t.model ? `model: ${t.model}` : null,
        t.worker_id ? `worker: ${t.worker_id}` : null, t.origin ? `added by: ${t.origin}` : null,
        t.error ? `error: ${t.error}` : null].filter(Boolean).join('\n');
      svg.append(s('g', { class: `node st-${t.state}`, 'data-task': t.id, 'data-state': t.state, transform: `translate(${n.x},${n.y})` },
        s('title', { text: tip }),
        s('rect', { class: 'node-box', width: NW, height: NH, rx: 7 }),
        s('rect', { class: 'node-stripe', width: 4, height: NH - 12, x: 6, y: 6, rx: 2 }),
        s('text', { class: 'node-title', x: 18, y: 20, text: clip(t.name || t.id, 22) }),
        s('text', { class: 'node-sub', x: 18, y: 37, text: clip(sub, 28) })));
    }
    return svg;
  }

  // A fan-out group: one row with its items' progress, opened to list them (kept open
  // across refreshes in ``opened``).
  function fanoutCell(fan, opened) {
    const progress = `${fan.done} done / ${fan.running} running / ${fan.failed} failed of ${fan.total}`;
    const items = fan.items.slice(0, MAX_TABLE_ROWS).map((i) => h('li', { 'data-item': i.index },
      pill(i.state.toUpperCase(), i.state), ' ', h('span', { class: 'mono', text: `#${i.index} ${i.label}` }),
      i.error ? h('span', { class: 'detail', text: ` ${i.error}` }) : null));
    return h('details', { 'data-fanout': fan.id, open: opened.has(fan.id),
      ontoggle: (e) => { if (e.target.open) opened.add(fan.id); else opened.delete(fan.id); } },
    h('summary', { 'data-fanout-progress': fan.id, text: progress }),
    h('ul', { class: 'fanout-items' }, items),
    fan.items.length > MAX_TABLE_ROWS ? h('p', { class: 'muted small', text: `The first ${MAX_TABLE_ROWS} items are shown.` }) : null);
  }

  // A group's state as shown: PARTIAL (amber) when it ended with failed items (the
  // brain's group task succeeds, listing them), RUNNING once one of its items has left
  // PENDING (the group task itself stays PENDING until they have all ended); as
  // ``plan ID`` on the command line shows it (launcher/cli/tasks.py group_state).
  function groupState(t, fan, all) {
    if (t.state === 'SUCCEEDED' && fan.failed) return 'PARTIAL';
    const started = fan.running || fan.done || fan.failed
      || all.some((i) => i.group === t.id && i.state !== 'PENDING');
    return ['PENDING', 'READY'].includes(t.state) && started ? 'RUNNING' : t.state;
  }

  function taskRows(tasks, fanouts = new Map(), opened = new Set()) {
    return tasks.slice(0, MAX_TABLE_ROWS).map((t) => {
      const took = t.started_at && t.finished_at ? duration(t.finished_at - t.started_at)
        : t.started_at ? `${duration(Date.now() / 1000 - t.started_at)} so far` : '—';
      const fan = fanouts.get(t.id);
      if (fan) {
        return h('tr', { 'data-task-row': t.id, 'data-group': t.id },
          h('td', { class: 'mono', text: t.id }), h('td', { text: 'fan-out' }), h('td', { text: '—' }),
          h('td', {}, pill(t.state)), h('td', { class: 'num', text: '—' }), h('td', { text: '—' }),
          h('td', { text: '—' }), h('td', { text: '—' }), h('td', { class: 'num', text: took }),
          h('td', { class: 'detail' }, fanoutCell(fan, opened), t.error ? h('div', { text: t.error }) : null));
      }
      return h('tr', { 'data-task-row': t.id },
        h('td', { class: 'mono', text: t.id }), h('td', { text: t.type }), h('td', { text: t.task_class }),
        h('td', {}, pill(t.state)), h('td', { class: 'num', text: t.attempt }),
        h('td', { class: 'mono', text: t.worker_id || '—' }), h('td', { class: 'mono', text: t.model || '—' }),
        h('td', { class: 'mono', text: t.origin || '—' }), h('td', { class: 'num', text: took }),
        h('td', { class: 'detail', text: t.error || t.reason || '' }));
    });
  }

  function planView(root, planId) {
    const head = h('div', {});
    const graph = h('div', { class: 'card dag-card' });
    const list = h('div', { class: 'card' });
    const opened = new Set();
    root.append(head, graph, list);
    return {
      async refresh() {
        const plan = await api(`/v1/plans/${encodeURIComponent(planId)}`);
        const counts = ALL_STATES.filter((st) => plan.counts[st]).map((st) => pill(st, `${label(st)} ${plan.counts[st]}`));
        fill(head,
          h('a', { class: 'back', href: '#plans', text: '← Plans' }),
          pageHead(plan.name || '(unnamed plan)', null,
            h('a', { class: 'btn btn-quiet', href: `#events?plan=${encodeURIComponent(plan.id)}`, text: 'Events' })),
          h('div', { class: 'plan-meta' },
            h('span', { class: `pill st-plan-${plan.status}`, 'data-plan-status': plan.status, text: plan.status }),
            mono(plan.id), h('span', { class: 'muted', text: `submitted ${ago(plan.created_at)}` }), counts));
        // a fan-out item's tasks are counted on their group's row, not listed one by one
        const fanouts = new Map((plan.fanouts || []).map((f) => [f.id, f]));
        const tasks = (plan.tasks || []).filter((t) => !t.group)
          .map((t) => (fanouts.has(t.id) ? { ...t, state: groupState(t, fanouts.get(t.id), plan.tasks) } : t));
        fill(graph, h('h2', { text: 'Task graph' }),
          tasks.length > MAX_DAG_NODES
            ? empty(`${tasks.length} tasks: too many to draw; see the table below.`)
            : h('div', { class: 'dag-scroll' }, dag(tasks)),
          h('div', { class: 'legend' }, [...ALL_STATES, ...(fanouts.size ? ['PARTIAL'] : [])]
            .map((st) => h('span', { class: `legend-item st-${st}`, text: label(st) }))));
        fill(list, h('h2', { text: `Tasks (${tasks.length})` }),
          table(['Task', 'Type', 'Class', 'State', { num: 'Attempt' }, 'Worker', 'Model', 'Origin', { num: 'Took' }, 'Error / reason'], taskRows(tasks, fanouts, opened)),
          tasks.length > MAX_TABLE_ROWS ? h('p', { class: 'muted small', text: `The first ${MAX_TABLE_ROWS} are shown.` }) : null);
      },
    };
  }

  // ------------------------------------------------------------------ events
  function eventsView(root, _arg, params) {
    const filters = { plan: params.get('plan') || '', type: params.get('type') || '',
      task: params.get('task') || '', worker: params.get('worker') || '', limit: '100' };
    const seenTypes = new Set(EVENT_TYPES);
    const body = h('div', { class: 'card' });
    const inputs = {};
    const field = (key, label, el) => { inputs[key] = el; el.value = filters[key]; return h('label', { class: 'field' }, h('span', { text: label }), el); };
    const typeSelect = h('select', { name: 'type', 'data-filter': 'type' });
    const fillTypes = () => {
      const current = typeSelect.value || filters.type;
      fill(typeSelect, h('option', { value: '', text: 'any type' }),
        [...seenTypes].sort().map((t) => h('option', { value: t, text: t })));
      typeSelect.value = current;
    };
    fillTypes();
    let debounce = null;
    const changed = () => {
      for (const key of Object.keys(inputs)) filters[key] = inputs[key].value.trim();
      clearTimeout(debounce);
      debounce = setTimeout(() => { view.refresh().catch(() => {}); }, 250);
    };
    const bar = h('form', { class: 'filters card', onsubmit: (e) => { e.preventDefault(); changed(); }, oninput: changed, onchange: changed },
      field('plan', 'Plan', h('input', { name: 'plan', 'data-filter': 'plan', placeholder: 'plan id', spellcheck: 'false' })),
      field('type', 'Event', typeSelect),
      field('task', 'Task', h('input', { name: 'task', 'data-filter': 'task', placeholder: 'task id', spellcheck: 'false' })),
      field('worker', 'Worker', h('input', { name: 'worker', 'data-filter': 'worker', placeholder: 'worker name', spellcheck: 'false' })),
      field('limit', 'Show', h('select', { name: 'limit', 'data-filter': 'limit' }, ['50', '100', '200', '500'].map((n) => h('option', { value: n, text: `${n} newest` })))),
      h('button', { class: 'btn btn-quiet', type: 'button', text: 'Clear',
        onclick: () => { for (const key of ['plan', 'type', 'task', 'worker']) inputs[key].value = ''; changed(); } }));
    root.append(pageHead('Events', 'Recent state changes, newest first'), bar, body);
    const setFilter = (key, value) => { inputs[key].value = value; changed(); };
    const linkish = (key, value) => (value === null || value === undefined || value === ''
      ? h('span', { class: 'muted', text: '—' })
      : h('button', { class: 'linkish mono', type: 'button', title: `only ${key} ${value}`, text: clip(String(value), 18),
        onclick: () => setFilter(key, String(value)) }));
    const view = {
      async refresh() {
        const query = new URLSearchParams();
        for (const [key, value] of Object.entries(filters)) if (value) query.set(key, value);
        const data = await api(`/v1/events?${query}`);
        let grew = false;
        for (const e of data.events) if (!seenTypes.has(e.event_type)) { seenTypes.add(e.event_type); grew = true; }
        if (grew) fillTypes();
        const rows = data.events.map((e) => h('tr', { 'data-event': e.id, 'data-type': e.event_type },
          h('td', { class: 'mono muted', text: clock(new Date(e.timestamp)) }),
          h('td', {}, h('span', { class: `evt evt-${e.event_type.replace(/[^a-z]/g, '-')}`, text: e.event_type })),
          h('td', {}, linkish('plan', e.plan)), h('td', {}, linkish('task', e.task_id)),
          h('td', { class: 'num', text: e.attempt ?? '—' }), h('td', {}, linkish('worker', e.worker_id)),
          h('td', { class: 'detail', text: [e.error, e.reason, typeof e.duration_ms === 'number' ? `${e.duration_ms} ms` : null].filter(Boolean).join(' · ') })));
        fill(body, rows.length
          ? table(['Time', 'Event', 'Plan', 'Task', { num: 'Attempt' }, 'Worker', 'Detail'], rows, 'grid compact')
          : empty('No event matches these filters.'));
      },
    };
    return view;
  }

  // ------------------------------------------------------------------ models
  function modelsView(root) {
    const body = h('div', { class: 'stack' });
    let fetchedAt = 0;
    root.append(pageHead('Models', 'Verified by the init containers, served by the models-ready gate'), body);
    return {
      async refresh() {
        if (Date.now() - fetchedAt < MODELS_EVERY_MS) return;
        const inv = await api('/v1/models');
        fetchedAt = Date.now();
        if (!inv.available) {
          fill(body, h('div', { class: 'card notice', 'data-models': 'unavailable' },
            h('h2', { text: 'The models-ready gate is not reachable' }),
            h('p', { text: inv.reason || '' }),
            h('p', { class: 'muted small' }, 'Asked ', mono(inv.url), ' (BRAIN_MODELS_URL). It runs in the 02-compute stack.')));
          return;
        }
        const total = inv.models.reduce((a, m) => a + (m.size || 0), 0);
        const rows = inv.models.map((m) => h('tr', { 'data-model': m.name },
          h('td', {}, h('span', { class: 'chip', text: m.service })), h('td', { class: 'mono', text: m.name }),
          h('td', { class: 'num', text: bytes(m.size) }), h('td', { class: 'num', text: m.files ?? '—' }),
          h('td', { class: 'muted', text: m.verified_at ? new Date(m.verified_at).toLocaleString([], { hour12: false }) : '—' })));
        const problems = inv.sources.filter((x) => x.error);
        fill(body,
          h('div', { class: 'tiles' }, tile('Verified models', String(inv.models.length), { key: 'models' }),
            tile('On disk', bytes(total)), tile('Sources', String(inv.sources.length), { note: problems.length ? `${problems.length} with a note` : 'all read' })),
          h('div', { class: 'card', 'data-models': 'available' }, rows.length
            ? table(['Service', 'Model', { num: 'Size' }, { num: 'Files' }, 'Verified'], rows) : empty('No model is verified yet.'),
          problems.length ? h('ul', { class: 'notes' }, problems.map((x) => h('li', {}, h('b', { text: x.service }), ` ${x.error}`))) : null));
      },
    };
  }

  // ------------------------------------------------------------------ external tier
  function money(x) { return Number(x || 0).toFixed(4); }

  function spendTile(label, spent, limit) {
    const share = limit ? spent / limit : 1;
    return tile(label, `${money(spent)} / ${money(limit)}`,
      { cls: share >= 1 ? 'tile-bad' : share >= 0.8 ? 'tile-warn' : '', note: `${(share * 100).toFixed(0)}% of the budget` });
  }

  function escalationsView(root) {
    const top = h('div', { class: 'tiles' });
    const waiting = h('div', { class: 'card' });
    const calls = h('div', { class: 'card' });
    root.append(pageHead('External tier', 'Calls to the external model, the spend against the budgets, and the tasks waiting'),
      top, waiting, calls);
    return {
      async refresh() {
        const e = await api('/v1/escalations');
        badge('#badge-escalations', e.waiting.length, '');
        fill(top,
          tile('Escalation', e.enabled ? 'on' : 'off', { key: 'escalation', note: e.enabled ? `if over budget: ${e.budget.over_budget}` : 'AIRIG_ESCALATION=off: nothing leaves the machine' }),
          spendTile('Spent today (UTC)', e.budget.spent_today, e.budget.daily),
          spendTile('Spent this month', e.budget.spent_month, e.budget.monthly),
          tile('Calls', String(e.totals.calls), { key: 'calls', note: `${e.totals.input_tokens} tokens in · ${e.totals.output_tokens} out · limit ${e.rate_per_min}/min` }));
        const now = Date.now() / 1000;
        fill(waiting, h('h2', { text: `Waiting (${e.waiting.length})` }), e.waiting.length
          ? table(['Plan', 'Task', 'Call', 'Next try', 'Reason'], e.waiting.map((t) => h('tr', { 'data-escalated': t.key },
            h('td', {}, h('a', { href: `#plan/${encodeURIComponent(t.plan_id)}`, class: 'mono', text: clip(t.plan_id, 14) })),
            h('td', { class: 'mono', text: t.key }), h('td', { text: t.call_state || '—' }),
            h('td', { class: 'num', text: t.next_try_at ? duration(Math.max(0, t.next_try_at - now)) : '—' }),
            h('td', { class: 'detail', text: t.reason || '' }))))
          : empty('No task waits for the external tier.'));
        fill(calls, h('h2', { text: 'Calls' }), e.calls.length
          ? table(['When', 'Task', 'State', 'Outcome', 'Model', { num: 'In' }, { num: 'Out' }, { num: 'Cost' }, 'Error'],
            e.calls.map((c) => h('tr', { 'data-call': c.id },
              h('td', { class: 'muted', text: new Date(c.created_at * 1000).toLocaleString([], { hour12: false }) }),
              h('td', { class: 'mono', text: c.task_key }), h('td', { text: c.state }), h('td', { text: c.outcome || '—' }),
              h('td', { class: 'mono', text: c.model ? `${c.provider}/${c.model}` : '—' }),
              h('td', { class: 'num', text: c.input_tokens }), h('td', { class: 'num', text: c.output_tokens }),
              h('td', { class: 'num', text: money(c.cost) }), h('td', { class: 'detail', text: c.error || '' }))))
          : empty('No call yet.'));
      },
    };
  }

  // search.js (loaded before this file) holds the Search page; it gets the helpers here.
  const searchView = (root, _arg, params) => window.AirigSearch.view(root, params,
    { h, fill, empty, pageHead, api, token: () => sessionStorage.getItem(TOKEN_KEY) });

  // report.js holds the Report page (plots of GET /v1/report); it gets the helpers here.
  const reportView = (root, _arg, params) => window.AirigReport.view(root, params,
    { h, fill, empty, pageHead, api, table });

  const VIEWS = { cluster: clusterView, queue: queueView, plans: plansView, plan: planView, events: eventsView, models: modelsView,
    escalations: escalationsView, search: searchView, report: reportView };

  // ------------------------------------------------------------------ boot
  document.addEventListener('DOMContentLoaded', () => {
    $('#token-form').addEventListener('submit', (event) => {
      event.preventDefault();
      const token = $('#token-input').value.trim();
      if (!token) { $('#login-error').textContent = 'Paste a token first.'; return; }
      sessionStorage.setItem(TOKEN_KEY, token);
      $('#token-input').value = '';
      start();
    });
    $('#sign-out').addEventListener('click', () => signOut(''));
    window.addEventListener('hashchange', route);
    if (sessionStorage.getItem(TOKEN_KEY)) start();
    else showLogin('');
  });
})();
