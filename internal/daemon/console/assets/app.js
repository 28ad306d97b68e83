// delayq operator console. Plain JavaScript, no framework, no build step.
//
// Rules this file keeps:
//   - Every value that comes from the API (ids, types, payloads, headers,
//     errors, addresses) is attacker-controlled: it reaches the page only as
//     text (textContent, Text nodes, element.dataset, setAttribute on
//     non-URL attributes). Nothing here assigns innerHTML/outerHTML or calls
//     insertAdjacentHTML, document.write or eval.
//   - The bearer token lives in sessionStorage and travels only in the
//     Authorization header of same-origin fetches (credentials: 'omit').
//   - Polling runs every 2 s while the tab is visible and stops while it is
//     hidden.
'use strict';

(() => {
  const TOKEN_KEY = 'delayq.console.token';
  const POLL_MS = 2000;

  // ---------------------------------------------------------------- DOM

  // el builds an element. props: class, text, testid, dataset, on<event>
  // (listeners), any other key is an attribute (never a URL built from data
  // except the internal '#/...' links made by link()).
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === 'class') e.className = v;
        else if (k === 'text') e.textContent = String(v);
        else if (k === 'testid') e.setAttribute('data-testid', v);
        else if (k === 'dataset') Object.assign(e.dataset, v);
        else if (k.startsWith('on') && typeof v === 'function') e.addEventListener(k.slice(2), v);
        else e.setAttribute(k, v === true ? '' : String(v));
      }
    }
    add(e, children);
    return e;
  }

  function add(parent, children) {
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      parent.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return parent;
  }

  const $ = (id) => document.getElementById(id);

  // link is an internal hash link; every data part is URI-encoded.
  function link(parts, text, props) {
    const href = '#/' + parts.map((p) => encodeURIComponent(p)).join('/');
    return el('a', Object.assign({ href }, props || {}), text);
  }

  function badge(state) {
    const s = String(state || 'unknown');
    return el('span', { class: 'badge ' + s.replace(/[^a-z]/g, ''), text: s });
  }

  function cell(value, cls) {
    return el('td', { class: cls }, value);
  }

  function emptyRow(cols, text) {
    return el('tr', null, el('td', { class: 'empty', colspan: cols, text }));
  }

  // render replaces a container's children only when the data changed, so
  // that a poll does not swap a button away under the pointer.
  const rendered = new WeakMap(); // container -> the JSON of what it shows
  function render(container, data, build) {
    const key = JSON.stringify(data);
    if (rendered.get(container) === key) return;
    rendered.set(container, key);
    container.replaceChildren(...[build()].flat(Infinity).filter(Boolean));
  }
  const invalidate = (container) => rendered.delete(container);

  function table(id, headers, testid) {
    const tbody = el('tbody', { id: id + '-body' });
    const t = el('table', { id, testid },
      el('thead', null, el('tr', null, headers.map((h) => {
        const [label, cls] = Array.isArray(h) ? h : [h];
        return el('th', { class: cls, text: label });
      }))),
      tbody);
    return { table: t, body: tbody };
  }

  // armed makes a destructive button ask for a second click within 4 s.
  function armed(btn, action) {
    const label = btn.textContent;
    let timer = null;
    btn.addEventListener('click', async () => {
      if (btn.dataset.armed !== '1') {
        btn.dataset.armed = '1';
        btn.textContent = 'Confirm: ' + label;
        timer = setTimeout(() => { btn.dataset.armed = ''; btn.textContent = label; }, 4000);
        return;
      }
      clearTimeout(timer);
      btn.dataset.armed = '';
      btn.textContent = label;
      await action();
    });
    return btn;
  }

  // ----------------------------------------------------------- formatting

  function fmtTime(iso) {
    if (!iso) return '';
    return String(iso).replace('T', ' ').replace(/(\.\d{3})\d*Z$/, '$1Z');
  }

  function fmtAge(sec) {
    if (sec === undefined || sec === null || Number.isNaN(Number(sec))) return '';
    let s = Math.abs(Number(sec));
    if (s < 1) return (Math.round(s * 1000)) + 'ms';
    if (s < 60) return (Math.round(s * 10) / 10) + 's';
    const parts = [];
    const d = Math.floor(s / 86400); s -= d * 86400;
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    if (d) parts.push(d + 'd');
    if (h) parts.push(h + 'h');
    if (m && !d) parts.push(m + 'm');
    if (!d && !h) parts.push(Math.floor(s) + 's');
    return parts.join(' ');
  }

  function rel(iso) {
    const t = Date.parse(iso);
    if (Number.isNaN(t)) return '';
    const sec = (t - Date.now()) / 1000;
    return sec >= 0 ? 'in ' + fmtAge(sec) : fmtAge(-sec) + ' ago';
  }

  function timeCell(iso) {
    return el('td', { title: iso || '' }, fmtTime(iso), iso ? el('div', { class: 'muted', text: rel(iso) }) : null);
  }

  function num(n) {
    if (n === undefined || n === null) return '–';
    return Number(n).toLocaleString('en-US');
  }

  function rate(n) {
    if (n === null || n === undefined || !Number.isFinite(n)) return '–';
    const r = Math.round(n * 10) / 10;
    return (r > 0 ? '+' : '') + r.toLocaleString('en-US') + '/s';
  }

  function ruleSummary(rule) {
    if (!rule) return '';
    const out = [];
    if (rule.window_quota) out.push(`${rule.window_quota.limit} per ${rule.window_quota.window}`);
    if (rule.token_bucket) {
      const b = rule.token_bucket;
      let s = `bucket ${b.rate}/s burst ${b.burst}`;
      if (b.reserve) s += ` reserve ${b.reserve} (priority >= ${b.min_priority})`;
      out.push(s);
    }
    if (rule.concurrency) out.push(`${rule.concurrency.limit} at once (slot ttl ${rule.concurrency.slot_ttl})`);
    return out.join('; ');
  }

  // --------------------------------------------------- lossless JSON view

  // The payload is shown as sent: a JSON number such as
  // 12345678901234567890 must not come back rounded, and duplicate keys
  // must stay visible. parseLossless keeps numbers as their source text and
  // objects as ordered [key, value] lists; pretty prints that tree.
  class Raw { constructor(text) { this.text = text; } }
  class Obj { constructor(entries) { this.entries = entries; } }

  function parseLossless(text) {
    let i = 0;
    const ws = () => { while (i < text.length && ' \t\n\r'.includes(text[i])) i++; };
    const fail = (what) => { throw new SyntaxError(what + ' at offset ' + i); };
    function value() {
      ws();
      const c = text[i];
      if (c === '{') {
        i++; const entries = []; ws();
        if (text[i] === '}') { i++; return new Obj(entries); }
        for (;;) {
          ws(); if (text[i] !== '"') fail('expected a key');
          const k = str(); ws();
          if (text[i] !== ':') fail('expected :');
          i++;
          entries.push([k, value()]); ws();
          if (text[i] === ',') { i++; continue; }
          if (text[i] === '}') { i++; return new Obj(entries); }
          fail('expected , or }');
        }
      }
      if (c === '[') {
        i++; const items = []; ws();
        if (text[i] === ']') { i++; return items; }
        for (;;) {
          items.push(value()); ws();
          if (text[i] === ',') { i++; continue; }
          if (text[i] === ']') { i++; return items; }
          fail('expected , or ]');
        }
      }
      if (c === '"') return str();
      const m = /^(?:-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null)/.exec(text.slice(i, i + 400));
      if (!m) fail('unexpected character');
      i += m[0].length;
      return new Raw(m[0]);
    }
    function str() {
      const m = /^"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/.exec(text.slice(i));
      if (!m) fail('bad string');
      i += m[0].length;
      return JSON.parse(m[0]);
    }
    const v = value(); ws();
    if (i !== text.length) fail('trailing data');
    return v;
  }

  function pretty(v, indent) {
    indent = indent || '';
    const next = indent + '  ';
    if (v instanceof Raw) return v.text;
    if (typeof v === 'string') return JSON.stringify(v);
    if (Array.isArray(v)) {
      if (!v.length) return '[]';
      return '[\n' + v.map((x) => next + pretty(x, next)).join(',\n') + '\n' + indent + ']';
    }
    if (v instanceof Obj) {
      if (!v.entries.length) return '{}';
      return '{\n' + v.entries.map(([k, x]) => next + JSON.stringify(k) + ': ' + pretty(x, next)).join(',\n') + '\n' + indent + '}';
    }
    return JSON.stringify(v);
  }

  function member(obj, key) {
    if (!(obj instanceof Obj)) return undefined;
    let out;
    for (const [k, v] of obj.entries) if (k === key) out = v;
    return out;
  }

  // payloadView says how to show a task's payload: JSON pretty-printed,
  // text, or a hex dump of binary bytes.
  function payloadView(rawDoc, t) {
    const rawPayload = member(rawDoc, 'payload');
    if (rawPayload !== undefined) return { kind: 'JSON', text: pretty(rawPayload) };
    if ('payload' in t) {
      try {
        return { kind: 'JSON, numbers as JavaScript reads them', text: JSON.stringify(t.payload, null, 2) };
      } catch (err) {
        return { kind: 'JSON', text: '(too deeply nested to show: ' + err.message + ')' };
      }
    }
    if (!t.payload_base64) return { kind: 'empty', text: '' };
    let bytes;
    try {
      bytes = Uint8Array.from(atob(t.payload_base64), (c) => c.charCodeAt(0));
    } catch (err) {
      return { kind: 'base64 (undecodable)', text: t.payload_base64 };
    }
    let s;
    try {
      s = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    } catch (err) {
      return { kind: `binary, ${bytes.length} bytes`, text: hexdump(bytes) };
    }
    try {
      return { kind: `JSON in bytes, ${bytes.length} bytes`, text: pretty(parseLossless(s)) };
    } catch (err) {
      return { kind: `text, ${bytes.length} bytes`, text: s };
    }
  }

  function hexdump(bytes) {
    const lines = [];
    const max = Math.min(bytes.length, 4096);
    for (let off = 0; off < max; off += 16) {
      const row = bytes.subarray(off, Math.min(off + 16, max));
      const hex = Array.from(row, (b) => b.toString(16).padStart(2, '0')).join(' ');
      const asc = Array.from(row, (b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : '.')).join('');
      lines.push(off.toString(16).padStart(6, '0') + '  ' + hex.padEnd(48) + ' ' + asc);
    }
    if (bytes.length > max) lines.push(`… ${bytes.length - max} more bytes`);
    return lines.join('\n');
  }

  // ------------------------------------------------------------------ API

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
    toString() {
      return this.status ? `${this.status} ${this.code}: ${this.message}` : this.message;
    }
  }

  const signedIn = () => sessionStorage.getItem(TOKEN_KEY) !== null;

  // request calls the daemon; it answers {data, text} or throws ApiError
  // (the API's own code and message, shown verbatim as text).
  async function request(method, path, body) {
    const headers = { Accept: 'application/json' };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = 'Bearer ' + token;
    const init = { method, headers, credentials: 'omit', cache: 'no-store', redirect: 'error' };
    // every write is JSON, body or not: the daemon refuses other types (415)
    if (method !== 'GET' && method !== 'HEAD') headers['Content-Type'] = 'application/json';
    if (body !== undefined) {
      init.body = typeof body === 'string' ? body : JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (err) {
      throw new ApiError(0, 'network', 'the daemon did not answer: ' + err.message);
    }
    const text = await resp.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (err) { data = null; }
    if (resp.status === 401) {
      const msg = data && data.error ? data.error.message : 'unauthorized';
      signOut('The daemon refused the token: ' + msg);
    }
    if (!resp.ok) {
      const e = data && data.error;
      throw new ApiError(resp.status, (e && e.code) || 'http_' + resp.status,
        (e && e.message) || text.slice(0, 400) || resp.statusText);
    }
    return { data, text };
  }

  const api = async (method, path, body) => (await request(method, path, body)).data;
  const seg = (s) => encodeURIComponent(s);

  function query(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
    const s = q.toString();
    return s ? '?' + s : '';
  }

  // bulk repeats a bounded bulk request while the daemon says more=true.
  async function bulk(method, path, body, progress) {
    let total = 0;
    for (let round = 1; round <= 10000; round++) {
      const r = await api(method, path, body);
      total += r.changed || 0;
      progress(total, !!r.more);
      if (!r.more) break;
    }
    return total;
  }

  // ------------------------------------------------------------ messages

  function flash(message, kind) {
    const f = $('flash');
    f.textContent = message;
    f.className = 'flash ' + (kind || '');
    f.hidden = !message;
  }

  function showError(target, err) {
    if (target) target.textContent = err ? String(err) : '';
  }

  // ----------------------------------------------------------- sign in

  function signOut(reason) {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin(reason || '');
  }

  function showLogin(reason) {
    $('login').hidden = false;
    $('view').hidden = true;
    $('nav').hidden = true;
    $('logout').hidden = true;
    $('login-error').textContent = reason || '';
    $('token-input').value = '';
    $('token-input').focus();
    current = null;
    setPollState('');
  }

  function showConsole() {
    $('login').hidden = true;
    $('view').hidden = false;
    $('nav').hidden = false;
    // nothing to sign out of when the daemon needs no token
    $('logout').hidden = sessionStorage.getItem(TOKEN_KEY) === '';
    route();
  }

  // probe opens a tab that holds no token: it asks GET /v1/stats without
  // one. A 401 means the daemon has a token: the sign-in is shown. Any
  // other answer means it needs none: the page the address names opens at
  // once (a new tab, a bookmark, a deep link such as #/task/ID or #/dead),
  // as if an empty token had been entered. The probe bypasses request(),
  // whose 401 handling would say "refused the token" for a token never
  // given.
  async function probe() {
    let resp;
    try {
      resp = await fetch('/v1/stats', { method: 'GET', headers: { Accept: 'application/json' },
        credentials: 'omit', cache: 'no-store', redirect: 'error' });
    } catch (err) {
      showLogin('the daemon did not answer: ' + err.message);
      return;
    }
    if (signedIn()) return; // signed in meanwhile
    if (resp.status === 401) { showLogin(''); return; }
    sessionStorage.setItem(TOKEN_KEY, '');
    showConsole();
  }

  // ------------------------------------------------------------ routing

  let current = null; // { name, refresh }
  let generation = 0;

  function route() {
    if (!signedIn()) { showLogin(''); return; }
    const parts = (location.hash || '#/overview').replace(/^#\/?/, '').split('/');
    let name = parts[0] || 'overview';
    let arg = '';
    try { arg = parts.slice(1).map(decodeURIComponent).join('/'); } catch (err) { arg = ''; }
    if (!pages[name]) name = 'overview';
    for (const a of document.querySelectorAll('#nav a')) {
      a.classList.toggle('active', a.dataset.page === name || (name === 'task' && a.dataset.page === 'tasks'));
    }
    generation++;
    const view = $('view');
    view.replaceChildren();
    view.dataset.page = name;
    flash('');
    const page = pages[name](view, arg, generation);
    current = { name, refresh: page.refresh, gen: generation };
    tick();
  }

  const stale = (gen) => gen !== generation;

  // ----------------------------------------------------------- polling

  // One poll at a time: a tick that finds one in flight (a navigation, the
  // tab shown again) asks for another right after it; one timer at most.
  let inflight = false;
  let again = false;
  let timer = null;

  function setPollState(text) { $('poll-state').textContent = text; }

  async function tick() {
    clearTimeout(timer);
    timer = null;
    if (document.hidden) { setPollState('paused (tab hidden)'); return; }
    if (!current || !signedIn()) return;
    if (inflight) { again = true; return; }
    inflight = true;
    const c = current;
    try {
      await c.refresh();
      if (c === current) setPollState('live · ' + new Date().toLocaleTimeString('en-GB'));
    } catch (err) {
      if (c === current && signedIn()) setPollState('refresh failed: ' + String(err));
    } finally {
      inflight = false;
    }
    if (again) { again = false; tick(); return; }
    clearTimeout(timer);
    timer = null;
    if (!document.hidden && signedIn()) timer = setTimeout(tick, POLL_MS);
  }

  document.addEventListener('visibilitychange', () => {
    if (document.hidden) { clearTimeout(timer); timer = null; setPollState('paused (tab hidden)'); } else tick();
  });

  // ---------------------------------------------------------- overview

  // latestLoad makes a page's loads: the latest one wins (the answer to
  // an older load, or to one of a page left since, is dropped: undefined),
  // and err shows a load error until the next good load clears it (else
  // it holds an action's error)
  function latestLoad(err, gen) {
    let seq = 0;
    let failed = false;
    return async (load, onError) => {
      const my = ++seq;
      let data;
      try {
        data = await load();
      } catch (e) {
        if (stale(gen) || my !== seq) return undefined;
        failed = true;
        showError(err, e);
        if (onError) onError(e);
        throw e;
      }
      if (stale(gen) || my !== seq) return undefined;
      if (failed) { err.textContent = ''; failed = false; }
      return data;
    };
  }

  // per process: its last registry reading and the rates between its last
  // two readings (counters are written about every 5 s); kept across page
  // changes so the overview has rates at once when it comes back
  const procSeen = new Map();

  function overviewPage(view, _arg, gen) {
    const cards = el('div', { class: 'cards', id: 'ov-cards', testid: 'overview-cards' });
    const rates = el('div', { class: 'cards', id: 'ov-rates', testid: 'overview-rates' });
    const errors = el('div', { id: 'ov-errors', class: 'error', testid: 'overview-errors' });
    const shards = table('shards-table', ['Shard', 'Leader', 'Address', ['Token', 'num'], ['Pending', 'num'], ['Overdue', 'num'],
      ['Oldest overdue', 'num'], ['Paused', 'num'], ['Firing', 'num'], ['Dead', 'num']], 'shards-table');
    const procs = table('procs-table', ['Kind', 'Id', 'Version', 'Address', 'Ready', 'Reason', 'Started'], 'procs-table');
    const workedTopics = table('worked-table', ['Topic', 'Group', 'Since'], 'worked-table');
    add(view, [
      el('h2', { text: 'Overview' }),
      errors, cards,
      el('h3', { text: 'Rates (from successive polls of this page)' }), rates,
      el('p', { class: 'note', text: 'Fired, handled and scheduled rates come from the counters each process writes to the registry about every 5 s (GET /v1/cluster); the changes are differences between two polls of this page.' }),
      el('h3', { text: 'Shards' }), shards.table,
      el('h3', { text: 'Processes' }), procs.table,
      el('h3', { text: 'Worked topics' }), workedTopics.table,
      el('p', { class: 'note', text: 'Topics delayq work processes declared they consume: a task fired to one of them stays fired until a worker finishes it; a task fired to any other topic ends delivered once Kafka has it.' }),
    ]);
    let prev = null;
    const procRates = (list) => {
      const total = {};
      const live = new Set();
      for (const p of list || []) {
        if (!p || !p.as_of || !p.counters || typeof p.counters !== 'object') continue;
        live.add(p.id);
        const t = Date.parse(p.as_of);
        const e = procSeen.get(p.id);
        if (!e || e.t !== t) {
          const r = {};
          if (e && t > e.t) {
            for (const [k, v] of Object.entries(p.counters)) {
              const was = Number(e.counters[k]);
              if (k !== 'consumer_lag' && Number.isFinite(was) && Number(v) >= was) r[k] = (Number(v) - was) / ((t - e.t) / 1000);
            }
          }
          procSeen.set(p.id, { t, counters: p.counters, rates: e && t > e.t ? r : (e ? e.rates : {}) });
        }
        const cur = procSeen.get(p.id);
        for (const [k, v] of Object.entries(cur.rates)) total[k] = (total[k] || 0) + v;
        if (Number.isFinite(Number(p.counters.consumer_lag))) total.consumer_lag = (total.consumer_lag || 0) + Number(p.counters.consumer_lag);
      }
      for (const id of procSeen.keys()) if (!live.has(id)) procSeen.delete(id);
      return total;
    };
    return {
      async refresh() {
        const [cl, st, sched] = await Promise.all([
          api('GET', '/v1/cluster').catch((err) => ({ __err: err })),
          api('GET', '/v1/stats').catch((err) => ({ __err: err })),
          scheduledTotal(),
        ]);
        if (stale(gen)) return;
        const errs = [];
        if (cl.__err) errs.push('GET /v1/cluster: ' + String(cl.__err));
        if (st.__err) errs.push('GET /v1/stats: ' + String(st.__err));
        const c = cl.__err ? null : cl;
        const s = st.__err ? null : st;
        if (c && c.redis_error) errs.push('redis: ' + c.redis_error);
        if (c && c.etcd_error) errs.push('etcd: ' + c.etcd_error);
        if (!c && s && s.redis_error) errs.push('redis: ' + s.redis_error);
        errors.textContent = errs.join('\n');
        if (!c && !s) throw cl.__err;
        const ns = (c && c.namespace) || (s && s.namespace) || '';
        $('namespace').textContent = ns;

        // Totals from /v1/cluster's shards when present, else /v1/stats.
        const shardRows = c ? c.shards || [] : (s.shards || []).map((x) => ({
          shard: x.shard, leader: null, leader_token: x.leader_token, pending: x.scheduled,
          firing: x.firing, dead: x.dead,
        }));
        const sum = (k) => shardRows.reduce((a, x) => a + (Number(x[k]) || 0), 0);
        const tot = {
          pending: sum('pending'), overdue: sum('overdue'), paused: sum('paused'), firing: sum('firing'), dead: sum('dead'),
          oldest: shardRows.reduce((a, x) => Math.max(a, Number(x.oldest_overdue_seconds) || 0), 0),
        };
        const redisUp = c ? c.redis_up : s.redis_up;
        const journal = c ? c.journal_depth : s.journal_depth;
        const leaderless = c ? shardRows.filter((x) => !x.leader).length : null;
        const card = (k, v, testid, cls) => el('div', { class: 'card ' + (cls || ''), testid },
          el('div', { class: 'k', text: k }), el('div', { class: 'v', text: v }));
        render(cards, { ns, redisUp, journal, tot, n: shardRows.length, leaderless, sc: (c || s).shard_count }, () => [
          card('Shards', num((c || s).shard_count), 'card-shards'),
          card('Redis', redisUp ? 'up' : 'down', 'card-redis', redisUp ? '' : 'bad'),
          leaderless === null ? null : card('Shards without leader', num(leaderless), 'card-leaderless', leaderless ? 'bad' : ''),
          card('Journal depth', num(journal), 'card-journal', journal ? 'warn' : ''),
          card('Pending', num(tot.pending), 'card-pending'),
          c ? card('Overdue', num(tot.overdue), 'card-overdue', tot.overdue ? 'warn' : '') : null,
          c ? card('Oldest overdue', tot.oldest ? fmtAge(tot.oldest) : '–', 'card-oldest', tot.oldest > 60 ? 'bad' : '') : null,
          c ? card('Paused (parked)', num(tot.paused), 'card-paused') : null,
          card('Firing now', num(tot.firing), 'card-firing'),
          card('Dead', num(tot.dead), 'card-dead', tot.dead ? 'warn' : ''),
        ]);

        const now = Date.now();
        const sample = { t: now, pending: tot.pending, overdue: tot.overdue, dead: tot.dead, sched };
        const dt = prev ? (now - prev.t) / 1000 : 0;
        const d = (k) => (prev && dt > 0 && sample[k] !== null && prev[k] !== null ? (sample[k] - prev[k]) / dt : null);
        const r = { pending: d('pending'), overdue: c ? d('overdue') : null, dead: d('dead'), sched: d('sched') };
        prev = sample;
        const pr = c ? procRates(c.processes) : {};
        const prate = (k) => (k in pr ? rate(pr[k]) : '–');
        rates.replaceChildren(
          c ? card('Scheduled (cluster)', prate('scheduled'), 'rate-cluster-scheduled') : null,
          c ? card('Fired', prate('fired'), 'rate-fired') : null,
          c ? card('Succeeded', prate('succeeded'), 'rate-succeeded') : null,
          c ? card('Retried', prate('retried'), 'rate-retried') : null,
          c ? card('Dead (handled)', prate('dead'), 'rate-handled-dead') : null,
          c ? card('Consumer lag', 'consumer_lag' in pr ? num(pr.consumer_lag) : '–', 'rate-consumer-lag') : null,
          card('Scheduled via this daemon', sched === null ? '–' : rate(r.sched), 'rate-scheduled'),
          card('Pending change', rate(r.pending), 'rate-pending'),
          c ? card('Overdue change', rate(r.overdue), 'rate-overdue') : null,
          card('Dead letters change', rate(r.dead), 'rate-dead'),
        );
        for (const x of rates.querySelectorAll('.v')) x.classList.add('small');

        render(shards.body, shardRows, () => (shardRows.length ? shardRows.map((x) => el('tr', { testid: 'shard-row', dataset: { shard: String(x.shard) } },
          cell(String(x.shard), 'num'),
          el('td', { class: 'id', title: x.leader ? String(x.leader.id) : null }, x.leader ? x.leader.id : (c ? badge('none') : '–')),
          el('td', { class: 'id', title: x.leader ? String(x.leader.addr) : null }, x.leader ? x.leader.addr : ''),
          cell(num(x.leader_token), 'num'),
          cell(num(x.pending), 'num'),
          cell(c ? num(x.overdue) : '–', 'num'),
          cell(c && x.oldest_overdue_seconds ? fmtAge(x.oldest_overdue_seconds) : '–', 'num'),
          cell(c ? num(x.paused) : '–', 'num'),
          cell(num(x.firing), 'num'),
          cell(num(x.dead), 'num'),
        )) : emptyRow(10, redisUp ? 'no shards' : 'redis is unreachable: no shard figures')));

        const ps = c && c.processes ? c.processes : [];
        render(procs.body, ps, () => (ps.length ? ps.map((p) => el('tr', { testid: 'proc-row', dataset: { kind: String(p.kind || ''), id: String(p.id || '') } },
          cell(p.kind), el('td', { class: 'id', title: String(p.id || '') }, p.id), cell(p.version), el('td', { class: 'id', title: String(p.addr || '') }, p.addr),
          el('td', null, badge(p.ready ? 'ready' : 'not ready')),
          el('td', { class: 'err' }, p.reason || ''),
          timeCell(p.started_at),
        )) : emptyRow(7, c ? 'no process registered' : 'the daemon does not serve /v1/cluster')));

        const wts = c && Array.isArray(c.worked_topics) ? c.worked_topics : [];
        const noTopics = !c ? 'the daemon does not serve /v1/cluster'
          : c.etcd_error ? 'etcd could not be read'
            : !Array.isArray(c.worked_topics) ? 'the daemon does not list worked topics'
              : 'no worked topics: tasks fired to any topic end delivered';
        render(workedTopics.body, { wts, noTopics }, () => (wts.length ? wts.map((w) => el('tr', { testid: 'worked-row', dataset: { topic: String(w.topic || '') } },
          el('td', { class: 'id', title: String(w.topic || '') }, w.topic), cell(w.group), timeCell(w.since),
        )) : emptyRow(3, noTopics)));
      },
    };
  }

  // scheduledTotal reads delayq_tasks_scheduled_total (all outcomes) from
  // the daemon's own /metrics; null when it cannot.
  async function scheduledTotal() {
    try {
      const resp = await fetch('/metrics', { credentials: 'omit', cache: 'no-store', redirect: 'error' });
      if (!resp.ok) return null;
      const text = await resp.text();
      let total = 0; let seen = false;
      for (const line of text.split('\n')) {
        if (!line.startsWith('delayq_tasks_scheduled_total')) continue;
        const v = Number(line.slice(line.lastIndexOf(' ') + 1));
        if (Number.isFinite(v)) { total += v; seen = true; }
      }
      return seen ? total : null;
    } catch (err) {
      return null;
    }
  }

  // ------------------------------------------------------------- tasks

  const STATES = ['', 'scheduled', 'retrying', 'paused', 'fired', 'dead', 'succeeded', 'cancelled', 'delivered'];

  // The states whose tasks a cancel takes, as the confirm names them.
  const CANCELLABLE = { '': 'waiting (scheduled + retrying)', scheduled: 'scheduled', retrying: 'retrying', paused: 'paused' };
  const CANCEL_LABEL = 'Cancel every task this search lists';
  const CANCEL_MAX = 50000; // ids one "cancel what is listed" collects
  const MAX_BULK_IDS = 10000; // ids per bulk request (the daemon's limit)

  // listedIDs walks every page of a task search and returns the ids it
  // lists, at most CANCEL_MAX (more: there were others).
  async function listedIDs(fl) {
    const ids = [];
    let cursor = '';
    for (;;) {
      const data = await api('GET', '/v1/tasks' + query({ state: fl.state, type: fl.type, due_after: fl.due_after, due_before: fl.due_before, limit: 1000, cursor }));
      for (const t of data.tasks || []) {
        if (ids.length === CANCEL_MAX) return { ids, more: true };
        ids.push(t.id);
      }
      cursor = data.next_cursor || '';
      if (!cursor) return { ids, more: false };
    }
  }

  // The task search keeps its filter and page across visits to a task.
  const taskSearch = { filter: { state: '', type: '', due_after: '', due_before: '', limit: '100' }, cursors: [''] };

  function localToISO(v) {
    if (!v) return '';
    const t = new Date(v);
    return Number.isNaN(t.getTime()) ? v : t.toISOString();
  }

  function isoToLocal(iso) {
    if (!iso) return '';
    const t = new Date(iso);
    if (Number.isNaN(t.getTime())) return '';
    const p = (n) => String(n).padStart(2, '0');
    return `${t.getFullYear()}-${p(t.getMonth() + 1)}-${p(t.getDate())}T${p(t.getHours())}:${p(t.getMinutes())}:${p(t.getSeconds())}`;
  }

  function tasksPage(view, _arg, gen) {
    const f = taskSearch.filter;
    const state = el('select', { id: 'f-state', name: 'state' }, STATES.map((s) => el('option', { value: s, text: s || 'waiting (scheduled + retrying)' })));
    state.value = f.state;
    const type = el('input', { id: 'f-type', name: 'type', placeholder: 'any type', spellcheck: 'false', value: f.type });
    const after = el('input', { id: 'f-due-after', name: 'due_after', type: 'datetime-local', step: '1', value: isoToLocal(f.due_after) });
    const before = el('input', { id: 'f-due-before', name: 'due_before', type: 'datetime-local', step: '1', value: isoToLocal(f.due_before) });
    const limit = el('select', { id: 'f-limit', name: 'limit' }, ['25', '100', '500', '1000'].map((n) => el('option', { value: n, text: n })));
    limit.value = f.limit;
    const err = el('p', { id: 'tasks-error', class: 'error', testid: 'tasks-error' });
    const result = el('p', { id: 'tasks-result', class: 'result', testid: 'tasks-result' });
    const cancelMatching = el('button', { type: 'button', id: 'tasks-cancel-matching', class: 'danger', text: CANCEL_LABEL });
    const form = el('form', { id: 'task-filter', class: 'panel filters' },
      el('label', null, 'State', state),
      el('label', null, 'Type', type),
      el('label', null, 'Due at or after', after),
      el('label', null, 'Due before', before),
      el('label', null, 'Page size', limit),
      el('button', { type: 'submit', id: 'task-search', class: 'primary', text: 'Search' }),
      el('button', { type: 'button', id: 'task-reset', text: 'Reset', onclick: () => { taskSearch.filter = { state: '', type: '', due_after: '', due_before: '', limit: '100' }; taskSearch.cursors = ['']; route(); } }));
    const list = table('tasks-table', ['Id', 'Type', 'State', 'Due', ['Attempt', 'num'], ['Shard', 'num'], 'Last error'], 'tasks-table');
    const prevBtn = el('button', { type: 'button', id: 'tasks-prev', text: '‹ Previous' });
    const nextBtn = el('button', { type: 'button', id: 'tasks-next', text: 'Next ›' });
    const pageLabel = el('span', { id: 'tasks-page', class: 'muted', testid: 'tasks-page' });
    let next = '';
    add(view, [
      el('h2', { text: 'Tasks' }), form, err, result,
      el('p', { class: 'note', text: 'Ordered by time across every shard, oldest first: due time (dead: time of death; succeeded, cancelled: when the record expires); fired and delivered tasks shard by shard. A page can hold fewer tasks than its size and still have a next page: each request examines a bounded number of entries.' }),
      list.table,
      el('div', { class: 'pager' }, prevBtn, pageLabel, nextBtn),
      el('div', { class: 'row' }, cancelMatching),
    ]);

    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      taskSearch.filter = { state: state.value, type: type.value.trim(), due_after: localToISO(after.value), due_before: localToISO(before.value), limit: limit.value };
      taskSearch.cursors = [''];
      result.textContent = '';
      disarm();
      refresh();
    });
    prevBtn.addEventListener('click', () => { if (taskSearch.cursors.length > 1) { taskSearch.cursors.pop(); refresh(); } });
    nextBtn.addEventListener('click', () => { if (next) { taskSearch.cursors.push(next); refresh(); } });
    // Cancel what the search lists, exactly: the first click walks every
    // page of the search (the filter applied, its state included) and
    // names the count in the confirm; the second cancels those ids and no
    // other (a task added since is not in the count, so not cancelled).
    // The waiting search (no state) lists scheduled and retrying tasks,
    // not the paused tasks of paused types: the confirm says so, and
    // state "paused" lists and cancels those.
    let pending = null; let disarmTimer = null;
    function disarm() {
      pending = null;
      clearTimeout(disarmTimer);
      cancelMatching.dataset.armed = '';
      delete cancelMatching.dataset.count;
      cancelMatching.textContent = CANCEL_LABEL;
    }
    cancelMatching.addEventListener('click', async () => {
      err.textContent = '';
      const fl = taskSearch.filter;
      if (!pending) {
        if (!(fl.state in CANCELLABLE)) { result.textContent = `tasks in state ${fl.state} cannot be cancelled`; return; }
        cancelMatching.disabled = true;
        try {
          const m = await listedIDs(fl);
          if (!m.ids.length) { result.textContent = 'nothing to cancel: the search lists no task'; return; }
          pending = m.ids;
          cancelMatching.dataset.armed = '1';
          cancelMatching.dataset.count = String(m.ids.length);
          cancelMatching.textContent = `Confirm: cancel ${m.more ? 'the first ' : ''}${m.ids.length} ${CANCELLABLE[fl.state]} task(s) this search lists` +
            (fl.state === '' ? ' (paused tasks of paused types are not included: search state paused for those)' : '');
          disarmTimer = setTimeout(disarm, 8000);
        } catch (e) { showError(err, e); } finally { cancelMatching.disabled = false; }
        return;
      }
      const ids = pending;
      disarm();
      try {
        let n = 0;
        for (let i = 0; i < ids.length; i += MAX_BULK_IDS) {
          const r = await api('POST', '/v1/tasks/cancel', { ids: ids.slice(i, i + MAX_BULK_IDS) });
          n += r.changed || 0;
          result.textContent = `cancelled ${n} so far…`;
        }
        result.textContent = `cancelled ${n} of the ${ids.length} task(s) listed`;
      } catch (e) { showError(err, e); }
      refresh();
    });

    const load = latestLoad(err, gen); // a poll that started before a search must not overwrite it
    async function refresh() {
      const fl = taskSearch.filter;
      const cursor = taskSearch.cursors[taskSearch.cursors.length - 1];
      const q = query({ state: fl.state, type: fl.type, due_after: fl.due_after, due_before: fl.due_before, limit: fl.limit, cursor });
      const data = await load(() => api('GET', '/v1/tasks' + q));
      if (data === undefined) return;
      const tasks = data.tasks || [];
      cancelMatching.hidden = !(fl.state in CANCELLABLE);
      next = data.next_cursor || '';
      nextBtn.disabled = !next;
      prevBtn.disabled = taskSearch.cursors.length <= 1;
      pageLabel.textContent = `page ${taskSearch.cursors.length} · ${tasks.length} task(s)${next ? '' : ' · end'}`;
      render(list.body, tasks, () => (tasks.length ? tasks.map((t) => el('tr', { testid: 'task-row', dataset: { id: String(t.id), state: String(t.state), type: String(t.type) } },
        el('td', { class: 'id', title: String(t.id) }, link(['task', t.id], t.id, { testid: 'task-link' })),
        cell(t.type), el('td', null, badge(t.state)), timeCell(t.due_at),
        cell(`${t.attempt}/${t.max_attempts}`, 'num'), cell(String(t.shard), 'num'),
        el('td', { class: 'err' }, t.last_error || ''))) : emptyRow(7, 'no task on this page')));
    }
    return { refresh };
  }

  // -------------------------------------------------------- task detail

  // noTaskPage is #/task/ without an id: a message, not the API's 404.
  function noTaskPage(view) {
    add(view, [
      el('p', null, link(['tasks'], '‹ back to the search')),
      el('h2', { text: 'Task' }),
      el('p', { id: 'task-error', class: 'error', testid: 'task-no-id',
        text: 'No task id: the address names no task. Open one from Tasks or Dead letters, or put its id after #/task/.' }),
    ]);
    return { refresh: async () => {} };
  }

  function taskPage(view, id, gen) {
    if (!id) return noTaskPage(view);
    const err = el('p', { id: 'task-error', class: 'error', testid: 'task-error' });
    const result = el('p', { id: 'task-result', class: 'result', testid: 'task-result' });
    const fields = el('dl', { id: 'task-fields', class: 'fields', testid: 'task-fields' });
    const kind = el('span', { id: 'task-payload-kind', class: 'muted' });
    const payload = el('pre', { id: 'task-payload', class: 'box', testid: 'task-payload' });
    const headers = table('task-headers', ['Header', 'Value'], 'task-headers');
    const lastError = el('pre', { id: 'task-last-error', class: 'box err', testid: 'task-last-error' });
    const when = el('input', { id: 'resched-when', placeholder: 'delay (30s, 1h) or RFC 3339 time', spellcheck: 'false' });
    const reschedule = el('button', { type: 'button', id: 'task-reschedule', text: 'Reschedule' });
    const cancel = el('button', { type: 'button', id: 'task-cancel', class: 'danger', text: 'Cancel task' });
    const redrive = el('button', { type: 'button', id: 'task-redrive', text: 'Redrive' });
    const del = el('button', { type: 'button', id: 'task-delete', class: 'danger', text: 'Delete dead letter' });
    const title = el('h2', null, 'Task ', el('span', { class: 'mono', id: 'task-title', text: id }));
    add(view, [
      el('p', null, link(['tasks'], '‹ back to the search')),
      title, err, result,
      el('div', { class: 'grid2' },
        el('div', null,
          el('div', { class: 'panel' }, fields),
          el('div', { class: 'panel', id: 'task-actions' },
            el('div', { class: 'row' }, when, reschedule),
            el('div', { class: 'row' }, cancel, redrive, del))),
        el('div', null,
          el('h3', null, 'Payload ', kind), payload,
          el('h3', { text: 'Headers' }), headers.table,
          el('h3', { text: 'Last error' }), lastError)),
    ]);
    const path = '/v1/tasks/' + seg(id);
    const act = async (fn) => {
      err.textContent = ''; result.textContent = '';
      try { result.textContent = await fn(); } catch (e) { showError(err, e); }
      await refresh().catch(() => {});
    };
    reschedule.addEventListener('click', () => act(async () => {
      const v = when.value.trim();
      const body = /^\d{4}-\d\d-\d\dT/.test(v) ? { due_at: v } : { delay: v };
      const r = await api('PATCH', path, body);
      return 'rescheduled: due at ' + fmtTime(r.due_at);
    }));
    armed(cancel, () => act(async () => { const r = await api('DELETE', path); return 'task is ' + r.state; }));
    redrive.addEventListener('click', () => act(async () => {
      const r = await api('POST', '/v1/dead/' + seg(id) + '/redrive');
      return 'redriven: ' + r.state + ', due at ' + fmtTime(r.due_at);
    }));
    armed(del, () => act(async () => { await api('DELETE', '/v1/dead/' + seg(id)); return 'dead letter deleted'; }));

    const load = latestLoad(err, gen);
    async function refresh() {
      const res = await load(() => request('GET', path), (e) => {
        if (e.status === 404) { fields.replaceChildren(); payload.textContent = ''; }
      });
      if (res === undefined) return;
      const t = res.data;
      let doc = null;
      try { doc = parseLossless(res.text); } catch (e) { doc = null; }
      const waiting = ['scheduled', 'retrying', 'paused'].includes(t.state);
      reschedule.disabled = !waiting; when.disabled = !waiting; cancel.disabled = !waiting;
      redrive.disabled = t.state !== 'dead'; del.disabled = t.state !== 'dead';
      view.dataset.state = String(t.state);
      render(fields, t, () => {
        const out = [];
        const row = (k, v, testid) => { if (v !== undefined && v !== null && v !== '') out.push(el('dt', { text: k }), el('dd', { testid }, v)); };
        row('id', t.id, 'task-id');
        row('type', t.type, 'task-type');
        row('state', badge(t.state), 'task-state');
        row('due at', fmtTime(t.due_at) + '  (' + rel(t.due_at) + ')', 'task-due');
        row('attempts', `${t.attempt} of ${t.max_attempts}`, 'task-attempts');
        row('shard', String(t.shard), 'task-shard');
        row('priority', String(t.priority), 'task-priority');
        row('topic', t.topic, 'task-topic');
        row('key', t.key, 'task-key');
        row('timeout', t.timeout, 'task-timeout');
        row('died at', t.died_at ? fmtTime(t.died_at) : '', 'task-died');
        if (t.fired_at) {
          // the fire receipt: what Kafka acknowledged for the latest copy
          // (partition and offset 0 are real values)
          row('fired at', fmtTime(t.fired_at), 'task-fired-at');
          row('fired attempt', String(t.fired_attempt), 'task-fired-attempt');
          row('late', `${t.late_ms} ms`, 'task-late');
          row('partition', String(t.partition), 'task-partition');
          row('offset', String(t.offset), 'task-offset');
          row('leader token', String(t.leader_token), 'task-leader-token');
        }
        return out;
      });
      const pv = payloadView(doc, t);
      kind.textContent = '(' + pv.kind + ')';
      if (payload.textContent !== pv.text) payload.textContent = pv.text;
      const hs = Object.entries(t.headers || {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
      render(headers.body, hs, () => (hs.length ? hs.map(([k, v]) => el('tr', { testid: 'header-row' }, el('td', { class: 'id wrap' }, k), el('td', { class: 'id wrap' }, v))) : emptyRow(2, 'no headers')));
      lastError.textContent = t.last_error || '(none)';
      lastError.classList.toggle('err', !!t.last_error);
    }
    return { refresh };
  }

  // -------------------------------------------------------------- dead

  const deadSearch = { type: '', cursors: [''] };

  function deadPage(view, _arg, gen) {
    const type = el('input', { id: 'dead-type', placeholder: 'any type', spellcheck: 'false', value: deadSearch.type });
    const err = el('p', { id: 'dead-error', class: 'error', testid: 'dead-error' });
    const result = el('p', { id: 'dead-result', class: 'result', testid: 'dead-result' });
    const selected = new Set();
    const redriveType = el('button', { type: 'button', id: 'dead-redrive-type', text: 'Redrive all of this type' });
    const deleteType = el('button', { type: 'button', id: 'dead-delete-type', class: 'danger', text: 'Delete all of this type' });
    const redriveSel = el('button', { type: 'button', id: 'dead-redrive-selected', text: 'Redrive selected' });
    const deleteSel = el('button', { type: 'button', id: 'dead-delete-selected', class: 'danger', text: 'Delete selected' });
    const form = el('form', { id: 'dead-filter', class: 'panel filters' },
      el('label', null, 'Type', type),
      el('button', { type: 'submit', id: 'dead-search', class: 'primary', text: 'Filter' }),
      redriveType, deleteType);
    const list = table('dead-table', ['', 'Id', 'Type', 'Died', ['Attempts', 'num'], 'Reason', ''], 'dead-table');
    const prevBtn = el('button', { type: 'button', id: 'dead-prev', text: '‹ Previous' });
    const nextBtn = el('button', { type: 'button', id: 'dead-next', text: 'Next ›' });
    const pageLabel = el('span', { id: 'dead-page', class: 'muted' });
    let next = '';
    add(view, [
      el('h2', { text: 'Dead letters' }), form, err, result,
      el('div', { class: 'row' }, redriveSel, deleteSel),
      list.table,
      el('div', { class: 'pager' }, prevBtn, pageLabel, nextBtn),
    ]);
    const typeLabel = () => (deadSearch.type ? `type ${deadSearch.type}` : 'every type');
    const syncBulkLabels = () => {
      redriveType.textContent = deadSearch.type ? 'Redrive all of this type' : 'Redrive all dead letters';
      deleteType.textContent = deadSearch.type ? 'Delete all of this type' : 'Delete all dead letters';
    };
    syncBulkLabels();
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      deadSearch.type = type.value.trim();
      deadSearch.cursors = [''];
      selected.clear();
      syncBulkLabels();
      refresh();
    });
    prevBtn.addEventListener('click', () => { if (deadSearch.cursors.length > 1) { deadSearch.cursors.pop(); refresh(); } });
    nextBtn.addEventListener('click', () => { if (next) { deadSearch.cursors.push(next); refresh(); } });

    const run = async (label, fn) => {
      err.textContent = ''; result.textContent = '';
      try { result.textContent = await fn(); } catch (e) { showError(err, e); }
      invalidate(list.body);
      await refresh().catch(() => {});
    };
    redriveType.addEventListener('click', () => run('redrive', async () => {
      const body = { filter: deadSearch.type ? { type: deadSearch.type } : {} };
      const n = await bulk('POST', '/v1/dead/redrive', body, (t, more) => { result.textContent = `redriven ${t}${more ? ' so far…' : ''}`; });
      return `redriven ${n} dead letter(s) of ${typeLabel()}`;
    }));
    armed(deleteType, () => run('delete', async () => {
      // the body names them: a type, or {} for every dead letter
      const body = { filter: deadSearch.type ? { type: deadSearch.type } : {} };
      const n = await bulk('DELETE', '/v1/dead', body, (t, more) => { result.textContent = `deleted ${t}${more ? ' so far…' : ''}`; });
      return `deleted ${n} dead letter(s) of ${typeLabel()}`;
    }));
    redriveSel.addEventListener('click', () => run('redrive', async () => {
      const ids = [...selected];
      if (!ids.length) return 'nothing selected';
      const r = await api('POST', '/v1/dead/redrive', { ids });
      selected.clear();
      return `redriven ${r.changed} of ${ids.length} selected`;
    }));
    armed(deleteSel, () => run('delete', async () => {
      const ids = [...selected];
      if (!ids.length) return 'nothing selected';
      const r = await api('DELETE', '/v1/dead', { ids });
      selected.clear();
      return `deleted ${r.changed} of ${ids.length} selected`;
    }));

    const load = latestLoad(err, gen);
    async function refresh() {
      const cursor = deadSearch.cursors[deadSearch.cursors.length - 1];
      const data = await load(() => api('GET', '/v1/tasks' + query({ state: 'dead', type: deadSearch.type, limit: 100, cursor })));
      if (data === undefined) return;
      const tasks = data.tasks || [];
      next = data.next_cursor || '';
      nextBtn.disabled = !next;
      prevBtn.disabled = deadSearch.cursors.length <= 1;
      pageLabel.textContent = `page ${deadSearch.cursors.length} · ${tasks.length} dead letter(s)${next ? '' : ' · end'}`;
      const present = new Set(tasks.map((t) => t.id));
      for (const id of [...selected]) if (!present.has(id)) selected.delete(id);
      render(list.body, tasks, () => (tasks.length ? tasks.map((t) => {
        const box = el('input', { type: 'checkbox', testid: 'dead-select', 'aria-label': 'select' });
        box.checked = selected.has(t.id);
        box.addEventListener('change', () => { if (box.checked) selected.add(t.id); else selected.delete(t.id); });
        const rd = el('button', { type: 'button', testid: 'dead-redrive', text: 'Redrive' });
        rd.dataset.id = t.id;
        rd.addEventListener('click', () => run('redrive', async () => {
          const r = await api('POST', '/v1/dead/' + seg(t.id) + '/redrive');
          return `redriven ${t.id}: ${r.state}, due at ${fmtTime(r.due_at)}`;
        }));
        const dl = el('button', { type: 'button', class: 'danger', testid: 'dead-delete', text: 'Delete' });
        dl.dataset.id = t.id;
        armed(dl, () => run('delete', async () => { await api('DELETE', '/v1/dead/' + seg(t.id)); return `deleted ${t.id}`; }));
        return el('tr', { testid: 'dead-row', dataset: { id: String(t.id), type: String(t.type) } },
          el('td', null, box),
          el('td', { class: 'id', title: String(t.id) }, link(['task', t.id], t.id)),
          cell(t.type), timeCell(t.died_at), cell(`${t.attempt}/${t.max_attempts}`, 'num'),
          el('td', { class: 'err', testid: 'dead-reason' }, t.last_error || ''),
          el('td', null, el('div', { class: 'row' }, rd, dl)));
      }) : emptyRow(7, 'no dead letters')));
    }
    return { refresh };
  }

  // ------------------------------------------------------------ limits

  const TEMPLATES = {
    window: { window_quota: { limit: 100, window: '1s' } },
    bucket: { token_bucket: { rate: 50, burst: 100, reserve: 0, min_priority: 0 } },
    concurrency: { concurrency: { limit: 10, slot_ttl: '5m' } },
  };

  function limitsPage(view, _arg, gen) {
    const err = el('p', { id: 'limits-error', class: 'error', testid: 'limits-error' });
    const list = table('limits-table', ['Type', 'Rule', ['Window count', 'num'], ['Tokens', 'num'], ['Running', 'num'], 'Usage error', ''], 'limits-table');
    const type = el('input', { id: 'limit-type', placeholder: 'task type', spellcheck: 'false' });
    const rule = el('textarea', { id: 'limit-rule', spellcheck: 'false', rows: '9' });
    rule.value = JSON.stringify(TEMPLATES.window, null, 2);
    const save = el('button', { type: 'submit', id: 'limit-save', class: 'primary', text: 'Save rule' });
    const del = el('button', { type: 'button', id: 'limit-delete', class: 'danger', text: 'Delete rule' });
    const editErr = el('pre', { id: 'limit-error', class: 'error', testid: 'limit-error' });
    const editRes = el('p', { id: 'limit-result', class: 'result', testid: 'limit-result' });
    const tpl = (name, label) => el('button', { type: 'button', id: 'limit-tpl-' + name, text: label,
      onclick: () => { rule.value = JSON.stringify(TEMPLATES[name], null, 2); } });
    const form = el('form', { id: 'limit-form', class: 'panel' },
      el('h3', { text: 'Edit a rule' }),
      el('div', { class: 'filters' }, el('label', null, 'Type', type)),
      el('div', { class: 'row' }, 'Start from:', tpl('window', 'window quota'), tpl('bucket', 'token bucket'), tpl('concurrency', 'concurrency')),
      rule,
      el('div', { class: 'row' }, save, del),
      editErr, editRes,
      el('p', { class: 'note', text: 'The rule is sent as written (PUT /v1/limits/{type}); the daemon validates it and its error is shown verbatim. Workers apply a saved rule within about a second.' }));
    add(view, [el('h2', { text: 'Rate limits' }), err, list.table, form]);

    const edit = async (fn) => {
      editErr.textContent = ''; editRes.textContent = '';
      const t = type.value.trim();
      if (!t) { editErr.textContent = 'type: must not be empty'; return; }
      try { editRes.textContent = await fn(t); } catch (e) { showError(editErr, e); }
      invalidate(list.body);
      await refresh().catch(() => {});
    };
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      edit(async (t) => {
        const r = await api('PUT', '/v1/limits/' + seg(t), rule.value);
        return `saved the rule of ${r.type}: ${ruleSummary(r.rule)}`;
      });
    });
    armed(del, () => edit(async (t) => { await api('DELETE', '/v1/limits/' + seg(t)); return `deleted the rule of ${t}`; }));

    const load = latestLoad(err, gen);
    async function refresh() {
      const data = await load(() => api('GET', '/v1/limits'));
      if (data === undefined) return;
      const ls = data.limits || [];
      render(list.body, ls, () => (ls.length ? ls.map((l) => {
        const u = l.usage;
        const r = l.rule || {};
        const editBtn = el('button', { type: 'button', testid: 'limit-edit', text: 'Edit' });
        editBtn.dataset.type = l.type;
        editBtn.addEventListener('click', () => { type.value = l.type; rule.value = JSON.stringify(l.rule, null, 2); editErr.textContent = ''; editRes.textContent = ''; rule.focus(); });
        return el('tr', { testid: 'limit-row', dataset: { type: String(l.type) } },
          el('td', { class: 'id', title: String(l.type) }, l.type), cell(ruleSummary(l.rule)),
          cell(u && r.window_quota ? `${num(u.window_count)} / ${num(r.window_quota.limit)}` : '–', 'num'),
          cell(u && r.token_bucket ? `${(Math.round(u.tokens * 10) / 10).toLocaleString('en-US')} / ${num(r.token_bucket.burst)}` : '–', 'num'),
          cell(u && r.concurrency ? `${num(u.running)} / ${num(r.concurrency.limit)}` : '–', 'num'),
          el('td', { class: 'err' }, l.usage_error || ''),
          el('td', null, editBtn));
      }) : emptyRow(7, 'no rate-limit rule: every type runs unlimited')));
    }
    return { refresh };
  }

  // ------------------------------------------------------------- types

  function typesPage(view, _arg, gen) {
    const err = el('p', { id: 'types-error', class: 'error', testid: 'types-error' });
    const result = el('p', { id: 'types-result', class: 'result', testid: 'types-result' });
    const list = table('types-table', ['Type', 'State', 'Paused since', ['Parked', 'num'], 'Rate limit', ''], 'types-table');
    const name = el('input', { id: 'type-name', placeholder: 'task type', spellcheck: 'false' });
    const pauseBtn = el('button', { type: 'button', id: 'type-pause-btn', text: 'Pause' });
    const resumeBtn = el('button', { type: 'button', id: 'type-resume-btn', text: 'Resume' });
    add(view, [
      el('h2', { text: 'Types' }), err, result,
      el('p', { class: 'note', text: 'A paused type\'s tasks are parked by the workers when they fall due (no attempt is spent) and run, in their order, once it is resumed.' }),
      list.table,
      el('div', { class: 'panel filters', id: 'type-form' }, el('label', null, 'Another type', name), pauseBtn, resumeBtn),
    ]);
    const setPaused = async (t, pause) => {
      err.textContent = ''; result.textContent = '';
      try {
        const r = await api('POST', '/v1/types/' + seg(t) + (pause ? '/pause' : '/resume'));
        let msg = `${r.type} is ${r.paused ? 'paused' : 'running'}${r.changed ? '' : ' (unchanged)'}`;
        if (!pause && r.resumed) msg += `; ${r.resumed} parked task(s) back in line`;
        if (r.unpark_error) msg += '; parked tasks not moved yet: ' + r.unpark_error;
        result.textContent = msg;
      } catch (e) { showError(err, e); }
      invalidate(list.body);
      await refresh().catch(() => {});
    };
    pauseBtn.addEventListener('click', () => { const t = name.value.trim(); if (!t) { err.textContent = 'type: must not be empty'; return; } setPaused(t, true); });
    resumeBtn.addEventListener('click', () => { const t = name.value.trim(); if (!t) { err.textContent = 'type: must not be empty'; return; } setPaused(t, false); });

    const load = latestLoad(err, gen);
    async function refresh() {
      const data = await load(() => api('GET', '/v1/types'));
      if (data === undefined) return;
      const ts = data.types || [];
      render(list.body, ts, () => (ts.length ? ts.map((t) => {
        const btn = t.paused
          ? el('button', { type: 'button', testid: 'type-resume', text: 'Resume' })
          : el('button', { type: 'button', testid: 'type-pause', text: 'Pause' });
        btn.dataset.type = t.type;
        btn.addEventListener('click', () => setPaused(t.type, !t.paused));
        return el('tr', { testid: 'type-row', dataset: { type: String(t.type), paused: String(!!t.paused) } },
          el('td', { class: 'id', title: String(t.type) }, t.type),
          el('td', { testid: 'type-state' }, badge(t.paused ? 'paused' : 'running')),
          timeCell(t.paused_at),
          el('td', { class: 'num', testid: 'type-parked' }, num(t.parked || 0)),
          cell(ruleSummary(t.limit)),
          el('td', null, btn));
      }) : emptyRow(6, 'no type seen yet')));
    }
    return { refresh };
  }

  // --------------------------------------------------------- schedules

  const SCHEDULE_TEMPLATE = { cron: '0 30 9 * * MON-FRI', timezone: 'Europe/Berlin', task: { type: 'report.build', payload: { scope: 'day' } }, catchup: 'last' };

  function schedulesPage(view, _arg, gen) {
    const err = el('p', { id: 'schedules-error', class: 'error', testid: 'schedules-error' });
    const result = el('p', { id: 'schedules-result', class: 'result', testid: 'schedules-result' });
    const list = table('schedules-table', ['Schedule', 'Cron', 'Time zone', 'Task type', 'State', 'Next tick', 'Last tick', ''], 'schedules-table');
    const id = el('input', { id: 'schedule-id', placeholder: 'schedule id', spellcheck: 'false' });
    const spec = el('textarea', { id: 'schedule-spec', spellcheck: 'false', rows: '9' });
    spec.value = JSON.stringify(SCHEDULE_TEMPLATE, null, 2);
    const save = el('button', { type: 'submit', id: 'schedule-save', class: 'primary', text: 'Save schedule' });
    const editErr = el('pre', { id: 'schedule-error', class: 'error', testid: 'schedule-error' });
    const form = el('form', { id: 'schedule-form', class: 'panel' },
      el('h3', { text: 'Create or replace a schedule' }),
      el('div', { class: 'filters' }, el('label', null, 'Id', id)),
      spec,
      el('div', { class: 'row' }, save),
      editErr,
      el('p', { class: 'note', text: 'The spec is sent as written (PUT /v1/schedules/{id}) and replaces the whole schedule; the daemon validates it and its error is shown verbatim.' }));
    add(view, [
      el('h2', { text: 'Schedules' }), err, result,
      el('p', { class: 'note', text: 'Each tick of a schedule becomes one task with the id <schedule>@<tick in unix ms>, materialized ahead of time by the scheduler in the event processes. A paused schedule shows the ticks it would fire; ticks that pass while it is paused are not caught up.' }),
      list.table, form,
    ]);

    const act = async (fn) => {
      err.textContent = ''; result.textContent = ''; editErr.textContent = '';
      try { result.textContent = await fn(); } catch (e) { showError(err, e); }
      invalidate(list.body);
      await refresh().catch(() => {});
    };
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const s = id.value.trim();
      if (!s) { editErr.textContent = 'id: must not be empty'; return; }
      err.textContent = ''; result.textContent = ''; editErr.textContent = '';
      (async () => {
        try {
          const r = await api('PUT', '/v1/schedules/' + seg(s), spec.value);
          result.textContent = `${r.created ? 'created' : 'replaced'} ${r.id}: next tick ${r.next && r.next.length ? fmtTime(r.next[0]) : 'none'}`;
        } catch (e) { showError(editErr, e); }
        invalidate(list.body);
        await refresh().catch(() => {});
      })();
    });

    const load = latestLoad(err, gen);
    async function refresh() {
      // every page of GET /v1/schedules (next_cursor while more follow)
      const data = await load(async () => {
        const all = [];
        let cursor = '';
        do {
          const page = await api('GET', '/v1/schedules' + query({ limit: 1000, cursor }));
          all.push(...(page.schedules || []));
          cursor = page.next_cursor || '';
        } while (cursor);
        return { schedules: all };
      });
      if (data === undefined) return;
      const ss = data.schedules || [];
      render(list.body, ss, () => (ss.length ? ss.map((s) => {
        const state = s.paused ? 'paused' : (s.next && s.next.length) || s.next_error ? 'running' : 'ended';
        const toggle = el('button', { type: 'button', testid: s.paused ? 'schedule-resume' : 'schedule-pause', text: s.paused ? 'Resume' : 'Pause' });
        toggle.dataset.id = s.id;
        toggle.addEventListener('click', () => act(async () => {
          const r = await api('POST', '/v1/schedules/' + seg(s.id) + (s.paused ? '/resume' : '/pause'));
          return `${r.id} is ${r.paused ? 'paused' : 'running'}${r.changed ? '' : ' (unchanged)'}`;
        }));
        const editBtn = el('button', { type: 'button', testid: 'schedule-edit', text: 'Edit' });
        editBtn.dataset.id = s.id;
        editBtn.addEventListener('click', () => {
          const sp = { cron: s.cron, timezone: s.timezone, task: s.task, paused: s.paused, catchup: s.catchup };
          if (s.start_at) sp.start_at = s.start_at;
          if (s.end_at) sp.end_at = s.end_at;
          id.value = s.id; spec.value = JSON.stringify(sp, null, 2); editErr.textContent = ''; spec.focus();
        });
        const del = armed(el('button', { type: 'button', class: 'danger', testid: 'schedule-delete', text: 'Delete' }),
          () => act(async () => { await api('DELETE', '/v1/schedules/' + seg(s.id)); return `deleted ${s.id}`; }));
        del.dataset.id = s.id;
        const next = s.next && s.next.length ? timeCell(s.next[0]) : cell(s.next_error ? 'unknown: ' + s.next_error : '–');
        if (s.next && s.next.length) next.title = s.next.join('\n');
        return el('tr', { testid: 'schedule-row', dataset: { id: String(s.id), paused: String(!!s.paused) } },
          el('td', { class: 'id', title: String(s.id) }, s.id),
          el('td', { class: 'mono' }, s.cron),
          cell(s.timezone),
          el('td', { class: 'id', testid: 'schedule-type', title: (s.task && s.task.type) || null }, (s.task && s.task.type) || ''),
          el('td', { testid: 'schedule-state' }, badge(state)),
          next,
          s.last_tick ? el('td', { title: s.last_task_id || '' }, fmtTime(s.last_tick), el('div', { class: 'muted', text: s.last_task_id || '' })) : cell('–'),
          el('td', null, toggle, ' ', editBtn, ' ', del));
      }) : emptyRow(8, 'no schedule yet: create one below, with dq schedules set or PUT /v1/schedules/{id}')));
    }
    return { refresh };
  }

  // -------------------------------------------------------------- start

  const pages = { overview: overviewPage, tasks: tasksPage, task: taskPage, dead: deadPage, limits: limitsPage, types: typesPage, schedules: schedulesPage };

  function start() {
    $('login-form').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const token = $('token-input').value.trim();
      sessionStorage.setItem(TOKEN_KEY, token);
      $('login-error').textContent = '';
      try {
        await api('GET', '/v1/stats'); // checks the token once
      } catch (err) {
        if (err.status === 401) return; // request() signed out and said why
        if (err.status === 0) {
          sessionStorage.removeItem(TOKEN_KEY);
          $('login-error').textContent = String(err);
          return;
        }
        // Any other answer means the token was accepted; the page shows
        // the daemon's trouble itself.
      }
      if (!location.hash || location.hash === '#' || location.hash === '#/') history.replaceState(null, '', '#/overview');
      showConsole();
    });
    $('logout').addEventListener('click', () => signOut('Signed out.'));
    window.addEventListener('hashchange', () => { if (signedIn()) route(); });
    if (signedIn()) showConsole(); else probe();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start); else start();
})();
