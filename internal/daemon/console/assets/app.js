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

  // ------------------------------------------------------------ time zone

  // Every time the console shows, and every time typed into it, is in one
  // zone chosen in the header: UTC (the default, as the API writes times)
  // or the browser's own zone. The choice is a display preference, not a
  // secret, so it is kept in localStorage (per browser, across tabs); the
  // token never is. fmtTime, fmtClock, isoToLocal and localToISO follow it;
  // tzLabel names it for labels.
  const TZ_KEY = 'delayq.console.tz';
  const localZone = (() => {
    try { return Intl.DateTimeFormat().resolvedOptions().timeZone || ''; } catch (err) { return ''; }
  })();
  let tz = (() => {
    try { return localStorage.getItem(TZ_KEY) === 'local' ? 'local' : 'utc'; } catch (err) { return 'utc'; }
  })();

  function setTz(mode) {
    tz = mode === 'local' ? 'local' : 'utc';
    try { localStorage.setItem(TZ_KEY, tz); } catch (err) { /* storage refused: the choice lasts this page */ }
  }

  function tzLabel() {
    return tz === 'utc' ? 'UTC' : 'local (' + (localZone || 'this browser') + ')';
  }

  const p2 = (n) => String(n).padStart(2, '0');

  // zoned splits a time (ms) into its fields in the chosen zone.
  function zoned(ms) {
    const d = new Date(ms);
    if (tz === 'utc') {
      return { y: d.getUTCFullYear(), mo: d.getUTCMonth() + 1, d: d.getUTCDate(), h: d.getUTCHours(), mi: d.getUTCMinutes(), s: d.getUTCSeconds(), ms: d.getUTCMilliseconds() };
    }
    return { y: d.getFullYear(), mo: d.getMonth() + 1, d: d.getDate(), h: d.getHours(), mi: d.getMinutes(), s: d.getSeconds(), ms: d.getMilliseconds() };
  }

  // zoneOffsetMs is how far the chosen zone is ahead of UTC at ms.
  const zoneOffsetMs = (ms) => (tz === 'utc' ? 0 : -new Date(ms).getTimezoneOffset() * 60000);

  // fmtTime shows an RFC 3339 time: "2026-01-02 15:04:05.000Z" in UTC,
  // "2026-01-02 20:34:05.000 +05:30" in the local zone.
  function fmtTime(iso) {
    if (!iso) return '';
    if (tz === 'utc' && /Z$/.test(String(iso))) return String(iso).replace('T', ' ').replace(/(\.\d{3})\d*Z$/, '$1Z');
    const t = Date.parse(iso);
    if (Number.isNaN(t)) return String(iso);
    const z = zoned(t);
    const date = `${z.y}-${p2(z.mo)}-${p2(z.d)} ${p2(z.h)}:${p2(z.mi)}:${p2(z.s)}.${String(z.ms).padStart(3, '0')}`;
    if (tz === 'utc') return date + 'Z';
    const off = zoneOffsetMs(t) / 60000;
    return `${date} ${off < 0 ? '-' : '+'}${p2(Math.floor(Math.abs(off) / 60))}:${p2(Math.abs(off) % 60)}`;
  }

  // fmtClock is the time of day (ms) in the chosen zone: "15:04:05", or
  // "15:04" with short.
  function fmtClock(ms, short) {
    const z = zoned(ms);
    return `${p2(z.h)}:${p2(z.mi)}` + (short ? '' : ':' + p2(z.s));
  }

  // ----------------------------------------------------------- formatting

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

  // keyedScope: a rule limits each value of a key or header scope apart
  // (rather than the whole type, scope "" or "type").
  const keyedScope = (rule) => !!(rule && rule.scope && rule.scope !== 'type');

  function scopeText(rule) {
    if (!keyedScope(rule)) return 'type';
    const s = String(rule.scope);
    const what = s === 'key' ? 'per key' : s.startsWith('header:') ? 'per header ' + s.slice(7) : s;
    return rule.unordered ? what + ', unordered' : what;
  }

  // ruleSummary sums a rule up; a keyed rule's scope comes first ("per
  // key: …") unless noScope (where a column shows it).
  function ruleSummary(rule, noScope) {
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
    const text = out.join('; ');
    return noScope || !keyedScope(rule) ? text : `${scopeText(rule)}: ${text}`;
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
    $('tz').hidden = true;
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
    $('tz').hidden = false;
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
    // a page's query (#/tasks?type=T) is its own to read from location.hash
    let name = parts[0].replace(/\?.*$/, '') || 'overview';
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
      if (c === current) setPollState('live · ' + fmtClock(Date.now()) + (tz === 'utc' ? ' UTC' : ''));
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
    const census = censusParts();
    add(view, [
      el('h2', { text: 'Overview' }),
      errors, cards,
      el('h3', { text: 'Rates (from successive polls of this page)' }), rates,
      el('p', { class: 'note', text: 'Fired, handled and scheduled rates come from the counters each process writes to the registry about every 5 s (GET /v1/cluster); the changes are differences between two polls of this page.' }),
      census.nodes,
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
          census.refresh(),
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
        // (a daemon without /v1/cluster: its parts are null, not "null" text)
        rates.replaceChildren(...[
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
        ].filter(Boolean));
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

  // ------------------------------- overview: counts, charts, load, in flight

  // The overview's census (GET /v1/counts, /v1/history, /v1/load), drawn
  // as tables and inline SVG charts built with DOM calls: every label is a
  // Text node, nothing is parsed as markup. Each part reports its own
  // error, so a daemon without these endpoints still shows the rest.

  const SVG_NS = 'http://www.w3.org/2000/svg';
  const HISTORY_EVERY_MS = 15000; // the daemon samples its gauges every 15 s
  const LOAD_EVERY_MS = 10000;
  const COUNT_KEYS = ['scheduled', 'retrying', 'paused', 'succeeded', 'dead'];

  // svgEl builds an SVG element: attributes with setAttribute, children as
  // nodes or Text nodes.
  function svgEl(tag, attrs, ...children) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, String(v));
    return add(e, children);
  }

  // parseDur reads a Go duration ("5m", "1h0m0s", "1.5s") as ms; NaN when
  // it is none.
  function parseDur(s) {
    const m = String(s || '').match(/^(?:\d+(?:\.\d+)?(?:ms|h|m|s))+$/) ? String(s).match(/\d+(?:\.\d+)?(?:ms|h|m|s)/g) : null;
    if (!m) return NaN;
    const unit = { ms: 1, s: 1000, m: 60000, h: 3600000 };
    return m.reduce((a, p) => a + parseFloat(p) * unit[p.replace(/[\d.]/g, '')], 0);
  }

  // niceMax rounds a chart's top value up to 1, 2 or 5 times a power of ten.
  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    return [1, 2, 5, 10].map((m) => m * p).find((x) => x >= v);
  }

  const fmtCount = (v) => (Math.round(v * 10) / 10).toLocaleString('en-US');

  // timeTicks are round times of day in the chosen zone between t0 and t1,
  // at most about max of them.
  function timeTicks(t0, t1, max) {
    const steps = [60e3, 120e3, 300e3, 600e3, 900e3, 1800e3, 3600e3, 7200e3, 10800e3, 21600e3, 43200e3, 86400e3];
    const step = steps.find((s) => (t1 - t0) / s <= max) || 86400e3;
    const off = zoneOffsetMs(t0);
    const out = [];
    for (let t = Math.ceil((t0 + off) / step) * step - off; t <= t1; t += step) out.push(t);
    return out;
  }

  // timeChart draws bars (stacked parts over [start, end)) and lines over
  // the span [t0, t1] in an SVG exactly spec.width px wide, so that text
  // keeps its size on any screen (the page redraws it when the width
  // changes). spec: { width, height, t0, t1, unit, labelledby, testid,
  // barTestid, bars: [{ start, end, iso, title, parts: [{ cls, value }] }],
  // lines: [{ cls, points: [{ t, v }] }] }.
  function timeChart(spec) {
    const W = spec.width;
    const H = spec.height || 170;
    const L = 44; const R = 12; const T = 18; const B = 22;
    const pw = Math.max(10, W - L - R);
    const ph = H - T - B;
    const span = Math.max(1, spec.t1 - spec.t0);
    const x = (t) => L + (Math.min(Math.max(t, spec.t0), spec.t1) - spec.t0) / span * pw;
    const bars = spec.bars || [];
    const lines = (spec.lines || []).map((l) => ({ cls: l.cls, points: l.points.filter((p) => p.t >= spec.t0 && p.t <= spec.t1) }));
    let max = 0;
    for (const b of bars) max = Math.max(max, b.parts.reduce((a, p) => a + p.value, 0));
    for (const l of lines) for (const p of l.points) max = Math.max(max, p.v);
    const top = niceMax(max);
    const y = (v) => T + ph - (v / top) * ph;
    const s = svgEl('svg', { class: 'chart', width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img',
      'aria-labelledby': spec.labelledby, 'data-testid': spec.testid });
    s.append(svgEl('text', { class: 'axis', x: 2, y: 11 }, spec.unit));
    for (const v of [0, top / 2, top]) {
      s.append(svgEl('line', { class: 'grid', x1: L, x2: L + pw, y1: y(v), y2: y(v) }));
      s.append(svgEl('text', { class: 'axis', x: L - 5, y: y(v) + 4, 'text-anchor': 'end' }, fmtCount(v)));
    }
    for (const t of timeTicks(spec.t0, spec.t1, Math.max(2, Math.floor(pw / 64)))) {
      s.append(svgEl('line', { class: 'tick', x1: x(t), x2: x(t), y1: T + ph, y2: T + ph + 4 }));
      s.append(svgEl('text', { class: 'axis', x: x(t), y: H - 5, 'text-anchor': 'middle' }, fmtClock(t, true)));
    }
    for (const b of bars) {
      const x0 = x(b.start);
      const w = Math.max(1, x(b.end) - x0 - (x(b.end) - x0 > 4 ? 1.5 : 0));
      const total = b.parts.reduce((a, p) => a + p.value, 0);
      const g = svgEl('g', { class: 'bar', 'data-testid': spec.barTestid, 'data-start': b.iso, 'data-count': total },
        svgEl('title', null, b.title),
        svgEl('rect', { class: 'hit', x: x0, y: T, width: w, height: ph }));
      let acc = 0;
      for (const p of b.parts) {
        if (!(p.value > 0)) continue;
        g.append(svgEl('rect', { class: p.cls, 'data-value': p.value, x: x0, y: y(acc + p.value), width: w, height: Math.max(1, y(acc) - y(acc + p.value)) }));
        acc += p.value;
      }
      s.append(g);
    }
    for (const l of lines) {
      if (l.points.length === 1) s.append(svgEl('circle', { class: 'dot ' + l.cls, cx: x(l.points[0].t), cy: y(l.points[0].v), r: 2.5 }));
      else if (l.points.length) s.append(svgEl('polyline', { class: 'line ' + l.cls, points: l.points.map((p) => `${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join(' ') }));
    }
    s.append(svgEl('line', { class: 'axisline', x1: L, x2: L + pw, y1: T + ph, y2: T + ph }));
    return s;
  }

  function legend(items) {
    return el('div', { class: 'legend' }, items.map(([cls, label]) => el('span', { class: 'key' }, el('span', { class: 'swatch ' + cls }), label)));
  }

  // chartWidth is the width a chart in box gets: the box's own, so the
  // chart scales with the screen.
  const chartWidth = (box) => Math.max(240, Math.floor((box.clientWidth || 608) - 8)); // less the box's padding

  // typeLink opens the task search for one type (all waiting tasks of
  // it) through the address (#/tasks?type=T, which tasksPage reads), so
  // the link also works in a new tab and replaces an id search.
  function typeLink(type) {
    return el('a', { href: '#/tasks?type=' + encodeURIComponent(type), testid: 'count-type-link' }, type);
  }

  // countsPart: the tasks of each type per state (GET /v1/counts).
  function countsPart() {
    const t = table('counts-table', ['Type', ['Scheduled', 'num'], ['Retrying', 'num'], ['Paused', 'num'], ['Succeeded', 'num'], ['Dead', 'num']], 'counts-table');
    const foot = el('tfoot');
    t.table.append(foot);
    const err = el('p', { id: 'counts-error', class: 'error', testid: 'counts-error' });
    const note = el('p', { id: 'counts-note', class: 'note', testid: 'counts-note' });
    let types = [];
    async function refresh() {
      let d;
      try {
        d = await api('GET', '/v1/counts');
      } catch (e) {
        showError(err, 'GET /v1/counts: ' + String(e));
        return;
      }
      err.textContent = '';
      const list = Array.isArray(d.types) ? d.types : [];
      types = list.map((x) => String(x.type));
      render(t.body, { list, tz }, () => (list.length ? list.map((x) => el('tr', { testid: 'count-row', dataset: { type: String(x.type) } },
        el('td', { class: 'id', title: String(x.type) }, typeLink(String(x.type))),
        COUNT_KEYS.map((k) => el('td', { class: 'num', testid: 'count-' + k, text: num(x[k]) })))) : emptyRow(6, 'no task of any type')));
      const tot = d.totals || {};
      render(foot, tot, () => el('tr', { testid: 'count-totals' }, el('th', { text: 'All types' }),
        COUNT_KEYS.map((k) => el('th', { class: 'num', testid: 'count-' + k, text: num(tot[k]) }))));
      note.dataset.sampled = d.sampled ? 'true' : 'false';
      note.textContent = (d.sampled
        ? `Sampled: a set held more members than one scan reads (${num(d.scanned)} read), so the per-type figures are lower bounds; of the totals, dead and paused are exact, the others estimated from the part read. `
        : `Exact: every member read (${num(d.scanned)}). `) +
        `Succeeded counts the records still kept (DQ_RETENTION). As of ${fmtTime(d.at)}; the daemon caches the figures a few seconds.`;
    }
    return { nodes: el('section', { id: 'counts-section' }, el('h3', { text: 'Tasks per type' }), err, t.table, note), refresh, types: () => types };
  }

  // historyPart: the last hour, per minute, of tasks that succeeded and
  // died (GET /v1/history), and the daemon's gauge samples; fetched at
  // most every 15 s, redrawn on every poll (the width may have changed).
  function historyPart() {
    const err = el('p', { id: 'history-error', class: 'error', testid: 'history-error' });
    const box = el('div', { class: 'chart-box', id: 'history-chart', testid: 'history-chart' });
    const summary = el('p', { id: 'history-summary', class: 'note', testid: 'history-summary' });
    const gbox = el('div', { class: 'chart-box', id: 'gauge-chart', testid: 'gauge-chart' });
    const gsummary = el('p', { id: 'gauge-summary', class: 'note', testid: 'gauge-summary' });
    let data = null;
    let at = 0;
    async function refresh() {
      if (Date.now() - at >= HISTORY_EVERY_MS) {
        at = Date.now();
        try {
          data = await api('GET', '/v1/history' + query({ window: '1h', step: '1m' }));
          err.textContent = '';
        } catch (e) {
          showError(err, 'GET /v1/history: ' + String(e));
        }
      }
      if (data) draw(data);
    }
    function draw(d) {
      const step = parseDur(d.step) || 60000;
      const pts = (Array.isArray(d.points) ? d.points : []).map((p) => ({ t: Date.parse(p.at), iso: p.at, s: Number(p.succeeded) || 0, dd: Number(p.dead) || 0 }))
        .filter((p) => !Number.isNaN(p.t));
      const t1 = pts.length ? pts[pts.length - 1].t + step : Date.now();
      const t0 = pts.length ? pts[0].t : t1 - (parseDur(d.window) || 3600000);
      const S = pts.reduce((a, p) => a + p.s, 0);
      const D = pts.reduce((a, p) => a + p.dd, 0);
      const peak = pts.reduce((a, p) => (!a || p.s + p.dd > a.s + a.dd ? p : a), null);
      box.dataset.succeeded = String(S);
      box.dataset.dead = String(D);
      summary.textContent = `${fmtClock(t0, true)}–${fmtClock(t1, true)} (${tzLabel()}): ${num(S)} succeeded, ${num(D)} dead` +
        (peak && peak.s + peak.dd ? `; the busiest minute, from ${fmtClock(peak.t, true)}, had ${num(peak.s)} succeeded and ${num(peak.dd)} dead.` : '.');
      const w = chartWidth(box);
      render(box, { pts, w, tz }, () => timeChart({ width: w, t0, t1, unit: 'tasks per minute', labelledby: 'history-summary', testid: 'history-svg', barTestid: 'history-bar',
        bars: pts.map((p) => ({ start: p.t, end: p.t + step, iso: p.iso, title: `${fmtClock(p.t, true)}: ${p.s} succeeded, ${p.dd} dead`,
          parts: [{ cls: 'succeeded', value: p.s }, { cls: 'dead', value: p.dd }] })) }));
      const gs = (Array.isArray(d.gauges) ? d.gauges : []).map((g) => Object.assign({ t: Date.parse(g.at) }, g)).filter((g) => !Number.isNaN(g.t));
      const last = gs[gs.length - 1];
      gbox.dataset.samples = String(gs.length);
      gsummary.textContent = last
        ? `${gs.length} sample(s); the latest, at ${fmtClock(last.t)} (${tzLabel()}): ${num(last.scheduled)} scheduled, ${num(last.overdue)} overdue, ${num(last.firing)} firing, ${num(last.dead)} dead, journal depth ${num(last.journal_depth)}.`
        : 'No sample yet: the daemon samples its totals every 15 s and keeps the last hour in memory (none right after it started).';
      render(gbox, { gs, w, tz, t0, t1 }, () => timeChart({ width: w, height: 140, t0, t1, unit: 'waiting tasks', labelledby: 'gauge-summary', testid: 'gauge-svg',
        lines: ['scheduled', 'overdue'].map((k) => ({ cls: k, points: gs.map((g) => ({ t: g.t, v: Number(g[k]) || 0 })) })) }));
    }
    return {
      nodes: el('section', { id: 'history-section' }, el('h3', { text: 'The last hour' }), err,
        legend([['succeeded', 'succeeded per minute'], ['dead', 'dead per minute']]), box, summary,
        legend([['scheduled', 'scheduled (waiting)'], ['overdue', 'overdue']]), gbox, gsummary,
        el('p', { class: 'note', text: 'Succeeded and dead per minute come from the done and dead sets (GET /v1/history): a task counts in the minute it ended. The waiting figures are the daemon\'s own samples of GET /v1/stats, every 15 s.' })),
      refresh,
    };
  }

  // The coming load's choices stay while the console is open.
  const HORIZONS = [['15m', '1m', '15 min'], ['1h', '5m', '1 h'], ['6h', '30m', '6 h'], ['24h', '1h', '24 h']];
  const loadChoice = { horizon: '1h', type: '' };

  // loadPart: the tasks due in the coming horizon per bucket (GET
  // /v1/load), overdue apart; fetched every 10 s and when a choice changes.
  function loadPart(knownTypes) {
    const hsel = el('select', { id: 'load-horizon', name: 'horizon' }, HORIZONS.map(([h, , label]) => el('option', { value: h, text: label })));
    const tsel = el('select', { id: 'load-type', name: 'type' });
    const err = el('p', { id: 'load-error', class: 'error', testid: 'load-error' });
    const overdue = el('div', { class: 'v', testid: 'load-overdue' });
    const box = el('div', { class: 'chart-box', id: 'load-chart', testid: 'load-chart' });
    const summary = el('p', { id: 'load-summary', class: 'note', testid: 'load-summary' });
    hsel.value = loadChoice.horizon;
    let data = null;
    let at = 0;
    let seq = 0;
    hsel.addEventListener('change', () => { loadChoice.horizon = hsel.value; at = 0; refresh(); });
    tsel.addEventListener('change', () => { loadChoice.type = tsel.value; at = 0; refresh(); });
    async function refresh() {
      const names = [...new Set(['', ...knownTypes(), ...(data && Array.isArray(data.types) ? data.types.map((x) => String(x.type)) : []), loadChoice.type])].sort();
      render(tsel, names, () => names.map((n) => el('option', { value: n, text: n || 'all types' })));
      tsel.value = loadChoice.type;
      if (Date.now() - at >= LOAD_EVERY_MS) {
        at = Date.now();
        const [horizon, step] = HORIZONS.find(([h]) => h === loadChoice.horizon) || HORIZONS[1];
        const want = { horizon, type: loadChoice.type };
        const my = ++seq;
        try {
          const d = await api('GET', '/v1/load' + query({ horizon, step, type: loadChoice.type }));
          if (my !== seq) return;
          data = Object.assign({ want }, d);
          err.textContent = '';
        } catch (e) {
          if (my === seq) showError(err, 'GET /v1/load: ' + String(e));
        }
      }
      if (data) draw(data);
    }
    function draw(d) {
      const step = parseDur(d.step) || 300000;
      // the buckets count every type (exact); one type's figures are its
      // entry in types (from the capped walk), none: no task of it due
      const one = d.want.type ? (Array.isArray(d.types) ? d.types : []).find((x) => x.type === d.want.type) || { counts: [], overdue: 0 } : null;
      const buckets = (Array.isArray(d.buckets) ? d.buckets : []).map((b, i) => ({ t: Date.parse(b.start), iso: b.start, n: Number(one ? (one.counts || [])[i] : b.count) || 0 }))
        .filter((b) => !Number.isNaN(b.t));
      const overdueN = one ? Number(one.overdue) || 0 : Number(d.overdue) || 0;
      const t0 = Date.parse(d.from) || (buckets.length ? buckets[0].t : Date.now());
      const t1 = t0 + (parseDur(d.horizon) || buckets.length * step);
      const total = buckets.reduce((a, b) => a + b.n, 0);
      const peak = buckets.reduce((a, b) => (!a || b.n > a.n ? b : a), null);
      const [, stepLabel, label] = HORIZONS.find(([h]) => h === d.want.horizon) || HORIZONS[1];
      overdue.textContent = num(overdueN);
      overdue.parentNode.classList.toggle('warn', overdueN > 0);
      box.dataset.total = String(total);
      summary.textContent = `${num(total)} task(s) of ${d.want.type ? 'type ' + d.want.type : 'every type'} due in the next ${label}, from ${fmtClock(t0, true)} (${tzLabel()}), in steps of ${stepLabel}; ${num(overdueN)} overdue` +
        (peak && peak.n ? `; the busiest step starts at ${fmtClock(peak.t, true)} with ${num(peak.n)}.` : '.') +
        (d.sampled && d.want.type ? ' Per-type figures come from a capped scan: lower bounds.' : '') + ' Paused tasks are not counted.';
      const w = chartWidth(box);
      render(box, { buckets, w, tz, t0, t1 }, () => timeChart({ width: w, t0, t1, unit: 'tasks due', labelledby: 'load-summary', testid: 'load-svg', barTestid: 'load-bar',
        bars: buckets.map((b) => ({ start: b.t, end: b.t + step, iso: b.iso, title: `${fmtClock(b.t, true)}–${fmtClock(b.t + step, true)}: ${b.n} due`,
          parts: [{ cls: 'due', value: b.n }] })) }));
    }
    return {
      nodes: el('section', { id: 'load-section' }, el('h3', { text: 'Coming load' }), err,
        el('div', { class: 'panel filters' }, el('label', null, 'Next', hsel), el('label', null, 'Type', tsel)),
        el('div', { class: 'load-row' },
          el('div', { class: 'card overdue-card', testid: 'load-overdue-card' }, el('div', { class: 'k', text: 'Overdue now' }), overdue),
          box),
        summary),
      refresh,
    };
  }

  // censusParts are the overview's counts, history and load, in order.
  function censusParts() {
    const counts = countsPart();
    const history = historyPart();
    const load = loadPart(counts.types);
    return {
      nodes: [counts.nodes, history.nodes, load.nodes],
      // each part shows its own error; a refresh never throws
      refresh: async () => { await counts.refresh(); await Promise.all([history.refresh(), load.refresh()]); },
    };
  }

  // Charts are drawn as wide as their box: a new width redraws them.
  let resizeTimer = null;
  window.addEventListener('resize', () => { clearTimeout(resizeTimer); resizeTimer = setTimeout(tick, 150); });

  // tzSelect wires the header's zone choice: it names the local zone, and
  // a change redraws the page in the new zone.
  function tzSelect() {
    const sel = $('tz-select');
    sel.options[1].textContent = 'local (' + (localZone || 'this browser') + ')';
    sel.value = tz;
    sel.addEventListener('change', () => {
      setTz(sel.value);
      if (current && signedIn()) route();
    });
  }

  // ----------------------------------------------------------- in flight

  let inflightLimit = '100';

  // expiresIn says when a claim runs out: "in 25s", or "expired 3s ago".
  function expiresIn(iso) {
    const t = Date.parse(iso);
    if (Number.isNaN(t)) return '';
    return t >= Date.now() ? 'in ' + fmtAge((t - Date.now()) / 1000) : 'expired ' + fmtAge((Date.now() - t) / 1000) + ' ago';
  }

  // inflightPage: the tasks workers hold a claim on (GET /v1/inflight).
  function inflightPage(view, _arg, gen) {
    const err = el('p', { id: 'inflight-error', class: 'error', testid: 'inflight-error' });
    const limit = el('select', { id: 'inflight-limit', name: 'limit' }, ['100', '1000'].map((n) => el('option', { value: n, text: n })));
    limit.value = inflightLimit;
    const summary = el('p', { id: 'inflight-summary', class: 'muted', testid: 'inflight-summary' });
    const list = table('inflight-table', ['Id', 'Type', ['Shard', 'num'], ['Attempt', 'num'], 'Owner', 'Claim expires'], 'inflight-table');
    add(view, [
      el('h2', { text: 'In flight' }),
      el('p', { class: 'note', text: 'Tasks a worker holds a claim on right now, the soonest claim deadline first. The owner is the work process holding it. A claim past its deadline fires again: a worker that stopped or hangs shows here as an expired claim.' }),
      el('div', { class: 'panel filters' }, el('label', null, 'Show at most', limit)),
      err, summary, list.table,
    ]);
    const load = latestLoad(err, gen);
    async function refresh() {
      const data = await load(() => api('GET', '/v1/inflight' + query({ limit: inflightLimit })));
      if (data === undefined) return;
      const ts = Array.isArray(data.tasks) ? data.tasks : [];
      summary.textContent = data.truncated
        ? `the first ${ts.length} held task(s) by claim deadline; workers hold more`
        : `${ts.length} task(s) held by workers`;
      render(list.body, { ts, tz, s: Math.floor(Date.now() / 1000) }, () => (ts.length ? ts.map((x) => el('tr', { testid: 'inflight-row', dataset: { id: String(x.id), type: String(x.type), owner: String(x.owner) } },
        el('td', { class: 'id', title: String(x.id) }, link(['task', x.id], x.id, { testid: 'inflight-link' })),
        cell(x.type), cell(String(x.shard), 'num'), cell(String(x.attempt), 'num'),
        el('td', { class: 'id', title: String(x.owner), testid: 'inflight-owner' }, x.owner),
        el('td', { testid: 'inflight-expires', title: String(x.expires_at) }, expiresIn(x.expires_at),
          el('div', { class: 'muted', testid: 'inflight-expires-at', text: fmtTime(x.expires_at) })))) : emptyRow(6, 'No task is held by a worker right now.')));
    }
    limit.addEventListener('change', () => { inflightLimit = limit.value; refresh(); });
    return { refresh };
  }

  // ------------------------------------------------------------- tasks

  const STATES = ['', 'scheduled', 'retrying', 'paused', 'fired', 'dead', 'succeeded', 'cancelled', 'delivered'];

  // The states whose tasks a cancel takes, as the confirm names them.
  const CANCELLABLE = { '': 'scheduled + retrying', scheduled: 'scheduled', retrying: 'retrying', paused: 'paused' };
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

  // localToISO reads a datetime-local input's value ("2026-01-02T15:04" or
  // with seconds) as a time in the console's zone (see tzLabel).
  function localToISO(v) {
    if (!v) return '';
    const t = new Date(tz === 'utc' ? v + 'Z' : v);
    return Number.isNaN(t.getTime()) ? v : t.toISOString();
  }

  // isoToLocal is the datetime-local value of an RFC 3339 time in the
  // console's zone.
  function isoToLocal(iso) {
    if (!iso) return '';
    const t = Date.parse(iso);
    if (Number.isNaN(t)) return '';
    const z = zoned(t);
    return `${z.y}-${p2(z.mo)}-${p2(z.d)}T${p2(z.h)}:${p2(z.mi)}:${p2(z.s)}`;
  }

  // The tasks selected on the Tasks page (id -> state as last listed),
  // kept across its pages and visits to a task; a new search clears it.
  const taskSelected = new Map();

  // tasksURLFilter reads the search a link put in the address:
  // #/tasks?type=T&state=retrying (and prefix=P for an id search). null
  // when the address has no query: the page keeps the search it had.
  function tasksURLFilter() {
    const h = location.hash || '';
    const i = h.indexOf('?');
    if (i < 0) return null;
    const q = new URLSearchParams(h.slice(i + 1));
    return { type: (q.get('type') || '').trim(), state: q.get('state') || '', prefix: q.get('prefix') || '' };
  }

  // showTasksURL writes the current search into the address (without a
  // navigation), so that it can be copied and shared.
  function showTasksURL() {
    const f = taskSearch.filter;
    const q = query(idSearch.prefix ? { prefix: idSearch.prefix } : { type: f.type, state: f.state });
    if (location.hash !== '#/tasks' + q) history.replaceState(null, '', '#/tasks' + q);
  }

  // The id search (GET /v1/search): a prefix, the tasks found so far (in
  // id order), the scan's cursor and how many records it examined.
  const idSearch = { prefix: '', tasks: [], cursor: '', scanned: 0, calls: 0, done: true, loaded: false };
  const ID_SEARCH_CALLS = 5; // calls one "search" or "more" makes at most while it finds nothing

  function resetIDSearch(prefix) {
    Object.assign(idSearch, { prefix, tasks: [], cursor: '', scanned: 0, calls: 0, done: !prefix, loaded: false });
  }

  // searchMore follows the scan's cursor: call after call until it finds
  // a task, ends, or made ID_SEARCH_CALLS calls (each examines a bounded
  // number of records). s is idSearch or a copy being reloaded.
  async function searchMore(s) {
    const byID = new Map(s.tasks.map((t) => [t.id, t]));
    for (let i = 0; i < ID_SEARCH_CALLS; i++) {
      const r = await api('GET', '/v1/search' + query({ prefix: s.prefix, limit: 100, cursor: s.cursor }));
      const found = r.tasks || [];
      for (const t of found) byID.set(t.id, t);
      s.scanned += Number(r.scanned) || 0;
      s.calls++;
      s.cursor = r.cursor || '';
      s.done = !s.cursor;
      if (s.done || found.length) break;
    }
    s.tasks = [...byID.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    s.loaded = true;
  }

  // twoStep makes a bulk button name its scope and count before it acts:
  // the first click shows "Confirm: <what plan() says>" (the count in
  // data-count), a second click within 8 s runs it. plan() answers
  // {text, count, run}, or a string saying why there is nothing to do
  // (passed to say). The plan is made at the first click, from what the
  // page shows then, so the second click acts on exactly what was named.
  function twoStep(btn, plan, say) {
    let label = btn.textContent;
    let armedPlan = null;
    let timer = null;
    const disarm = () => {
      if (armedPlan) btn.textContent = label;
      armedPlan = null;
      clearTimeout(timer);
      btn.dataset.armed = '';
      delete btn.dataset.count;
    };
    btn.addEventListener('click', async () => {
      if (!armedPlan) {
        const p = plan();
        if (typeof p === 'string') { say(p); return; }
        label = btn.textContent;
        armedPlan = p;
        btn.dataset.armed = '1';
        btn.dataset.count = String(p.count);
        btn.textContent = 'Confirm: ' + p.text;
        timer = setTimeout(disarm, 8000);
        return;
      }
      const p = armedPlan;
      disarm();
      btn.disabled = true;
      try { await p.run(); } finally { btn.disabled = false; }
    });
    return disarm;
  }

  const plural = (n, one, many) => `${num(n)} ${n === 1 ? one : many}`;

  // selectAllBox puts a "select every row on this page" checkbox in a
  // table's first header cell; rows are the checkboxes of the page's rows
  // (data-id), selected the page's Set or Map of selected ids.
  function selectAllBox(tbl, testid, selected, onChange) {
    const all = el('input', { type: 'checkbox', testid, 'aria-label': 'select every row on this page' });
    tbl.querySelector('thead th').replaceChildren(all);
    const boxes = () => [...tbl.querySelectorAll('tbody input[type=checkbox]')];
    all.addEventListener('change', () => {
      const on = all.checked; // each row's change syncs this box: read it once
      for (const b of boxes()) {
        b.checked = on;
        b.dispatchEvent(new Event('change'));
      }
      onChange();
    });
    // sync shows the page's state: checked when every row is selected,
    // indeterminate when some are
    return () => {
      const bs = boxes();
      const n = bs.filter((b) => selected.has(b.dataset.id)).length;
      all.checked = bs.length > 0 && n === bs.length;
      all.indeterminate = n > 0 && n < bs.length;
      all.disabled = bs.length === 0;
    };
  }

  // runNow makes a task due now: a waiting task (scheduled, retrying,
  // paused) is rescheduled with delay 0s, a dead one redriven. It answers
  // what happened, as text.
  async function runNow(id, state) {
    if (state === 'dead') {
      const r = await api('POST', '/v1/dead/' + seg(id) + '/redrive');
      return `redriven: ${r.state}, due at ${fmtTime(r.due_at)}`;
    }
    const r = await api('PATCH', '/v1/tasks/' + seg(id), { delay: '0s' });
    return 'due now: ' + fmtTime(r.due_at);
  }
  const RUNNABLE = ['scheduled', 'retrying', 'paused', 'dead'];

  function tasksPage(view, _arg, gen) {
    const fromURL = tasksURLFilter();
    let urlError = '';
    if (fromURL) {
      let st = fromURL.state;
      if (!STATES.includes(st)) { urlError = `state: ${st} (from the address) is not one of ${STATES.filter(Boolean).join(', ')}; showing the scheduled and retrying tasks`; st = ''; }
      const f = taskSearch.filter;
      if (f.type !== fromURL.type || f.state !== st || idSearch.prefix !== fromURL.prefix) {
        taskSearch.filter = { state: st, type: fromURL.type, due_after: '', due_before: '', limit: f.limit || '100' };
        taskSearch.cursors = [''];
        taskSelected.clear();
        resetIDSearch(fromURL.prefix);
      }
    }
    const f = taskSearch.filter;
    const state = el('select', { id: 'f-state', name: 'state' }, STATES.map((s) => el('option', { value: s, text: s || 'scheduled + retrying' })));
    state.value = f.state;
    const type = el('input', { id: 'f-type', name: 'type', placeholder: 'any type', spellcheck: 'false', value: f.type });
    const after = el('input', { id: 'f-due-after', name: 'due_after', type: 'datetime-local', step: '1', value: isoToLocal(f.due_after) });
    const before = el('input', { id: 'f-due-before', name: 'due_before', type: 'datetime-local', step: '1', value: isoToLocal(f.due_before) });
    const limit = el('select', { id: 'f-limit', name: 'limit' }, ['25', '100', '500', '1000'].map((n) => el('option', { value: n, text: n })));
    limit.value = f.limit;
    const err = el('p', { id: 'tasks-error', class: 'error', testid: 'tasks-error', text: urlError });
    const result = el('p', { id: 'tasks-result', class: 'result', testid: 'tasks-result' });
    const cancelMatching = el('button', { type: 'button', id: 'tasks-cancel-matching', class: 'danger', text: CANCEL_LABEL });
    const form = el('form', { id: 'task-filter', class: 'panel filters' },
      el('label', null, 'State', state),
      el('label', null, 'Type', type),
      el('label', null, 'Due at or after', after),
      el('label', null, 'Due before', before),
      el('label', null, 'Page size', limit),
      el('button', { type: 'submit', id: 'task-search', class: 'primary', text: 'Search' }),
      el('button', { type: 'button', id: 'task-reset', text: 'Reset', onclick: () => {
        taskSearch.filter = { state: '', type: '', due_after: '', due_before: '', limit: '100' }; taskSearch.cursors = [''];
        taskSelected.clear(); resetIDSearch(''); history.replaceState(null, '', '#/tasks'); route();
      } }));
    // the id search: in place of the state list while a prefix is entered
    const prefix = el('input', { id: 'id-prefix', name: 'prefix', placeholder: 'id prefix', spellcheck: 'false', value: idSearch.prefix });
    const idClear = el('button', { type: 'button', id: 'id-search-clear', text: 'Clear' });
    const idForm = el('form', { id: 'id-search', class: 'panel filters' },
      el('label', null, 'Id starts with', prefix),
      el('button', { type: 'submit', id: 'id-search-btn', class: 'primary', text: 'Find' }),
      idClear,
      el('span', { class: 'note', text: 'Every state and type, across every shard, in id order (GET /v1/search).' }));
    const list = table('tasks-table', ['', 'Id', 'Type', 'State', 'Due', ['Attempt', 'num'], ['Shard', 'num'], 'Last error'], 'tasks-table');
    list.table.classList.add('selectable');
    const prevBtn = el('button', { type: 'button', id: 'tasks-prev', text: '‹ Previous' });
    const nextBtn = el('button', { type: 'button', id: 'tasks-next', text: 'Next ›' });
    const pageLabel = el('span', { id: 'tasks-page', class: 'muted', testid: 'tasks-page' });
    const pager = el('div', { class: 'pager', id: 'tasks-pager' }, prevBtn, pageLabel, nextBtn);
    const moreBtn = el('button', { type: 'button', id: 'id-search-more', text: 'More' });
    const scanLabel = el('span', { id: 'id-search-scanned', class: 'muted', testid: 'id-search-scanned' });
    const searchPager = el('div', { class: 'pager', id: 'id-search-pager' }, scanLabel, moreBtn);
    const listNote = el('p', { class: 'note', id: 'tasks-order-note' });
    const selLabel = el('span', { id: 'tasks-selected', class: 'muted', testid: 'tasks-selected' });
    const cancelSel = el('button', { type: 'button', id: 'tasks-cancel-selected', class: 'danger', text: 'Cancel selected' });
    const runSel = el('button', { type: 'button', id: 'tasks-run-selected', text: 'Run selected now' });
    const clearSel = el('button', { type: 'button', id: 'tasks-clear-selection', text: 'Clear selection' });
    let next = '';
    add(view, [
      el('h2', { text: 'Tasks' }), form, idForm, err, result,
      listNote,
      el('div', { class: 'row selbar', id: 'tasks-selbar' }, selLabel, runSel, cancelSel, clearSel),
      list.table,
      pager, searchPager,
      el('div', { class: 'row' }, cancelMatching),
    ]);
    const searching = () => !!idSearch.prefix;

    const syncAll = selectAllBox(list.table, 'tasks-select-all', taskSelected, () => syncSelection());
    function syncSelection() {
      const n = taskSelected.size;
      selLabel.textContent = n ? `${plural(n, 'task', 'tasks')} selected` : 'select tasks to cancel or run them now';
      cancelSel.disabled = !n; runSel.disabled = !n; clearSel.disabled = !n;
      syncAll();
    }
    const say = (m) => { err.textContent = ''; result.textContent = m; };
    const disarmCancelSel = twoStep(cancelSel, () => {
      const ids = [...taskSelected.keys()];
      if (!ids.length) return 'nothing selected';
      return { count: ids.length, text: `cancel ${plural(ids.length, 'selected task', 'selected tasks')}`, run: () => act(async () => {
        let n = 0;
        for (let i = 0; i < ids.length; i += MAX_BULK_IDS) {
          const r = await api('POST', '/v1/tasks/cancel', { ids: ids.slice(i, i + MAX_BULK_IDS) });
          n += r.changed || 0;
        }
        taskSelected.clear();
        return `cancelled ${n} of ${plural(ids.length, 'selected task', 'selected tasks')}` + (n < ids.length ? ' (the others were no longer waiting)' : '');
      }) };
    }, say);
    const disarmRunSel = twoStep(runSel, () => {
      const all = [...taskSelected.entries()];
      if (!all.length) return 'nothing selected';
      const runnable = all.filter(([, st]) => RUNNABLE.includes(st));
      if (!runnable.length) return 'none of the selected tasks is waiting or dead: nothing to run';
      const skip = all.length - runnable.length;
      return { count: runnable.length, text: `run ${plural(runnable.length, 'selected task', 'selected tasks')} now` +
        (skip ? ` (${plural(skip, 'other is', 'others are')} neither waiting nor dead: left alone)` : ''), run: () => act(async () => {
        let ok = 0;
        const failed = [];
        for (const [id, st] of runnable) {
          try { await runNow(id, st); ok++; } catch (e) { failed.push(`${id}: ${e}`); }
        }
        taskSelected.clear();
        if (failed.length) err.textContent = failed.slice(0, 5).join('\n') + (failed.length > 5 ? `\n… and ${failed.length - 5} more` : '');
        return `ran ${ok} of ${plural(runnable.length, 'selected task', 'selected tasks')} now (waiting: due now; dead: redriven)`;
      }) };
    }, say);
    clearSel.addEventListener('click', () => {
      taskSelected.clear();
      for (const b of list.body.querySelectorAll('input[type=checkbox]')) b.checked = false;
      syncSelection();
    });
    const disarmAll = () => { disarm(); disarmCancelSel(); disarmRunSel(); };

    // act runs a bulk action, then reloads what the page shows.
    async function act(fn) {
      err.textContent = ''; result.textContent = '';
      let msg = '';
      try { msg = await fn(); } catch (e) { showError(err, e); }
      if (searching()) idSearch.loaded = false;
      invalidate(list.body);
      await refresh().catch(() => {});
      result.textContent = msg;
    }

    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      taskSearch.filter = { state: state.value, type: type.value.trim(), due_after: localToISO(after.value), due_before: localToISO(before.value), limit: limit.value };
      taskSearch.cursors = [''];
      taskSelected.clear();
      resetIDSearch('');
      prefix.value = '';
      result.textContent = ''; err.textContent = '';
      disarmAll();
      showTasksURL();
      invalidate(list.body);
      refresh();
    });
    idForm.addEventListener('submit', (ev) => {
      ev.preventDefault();
      resetIDSearch(prefix.value);
      taskSelected.clear();
      result.textContent = ''; err.textContent = '';
      disarmAll();
      showTasksURL();
      invalidate(list.body);
      refresh();
    });
    idClear.addEventListener('click', () => {
      prefix.value = '';
      resetIDSearch('');
      taskSelected.clear();
      disarmAll();
      showTasksURL();
      invalidate(list.body);
      refresh();
    });
    moreBtn.addEventListener('click', async () => {
      if (idSearch.done) return;
      moreBtn.disabled = true;
      try { await searchMore(idSearch); } catch (e) { showError(err, e); }
      moreBtn.disabled = idSearch.done;
      await refresh().catch(() => {});
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
            (fl.state === '' ? ' (paused tasks of paused types are not included: search state paused for those)' : '') + ' (counted now)';
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

    const row = (t) => {
      const id = String(t.id);
      const box = el('input', { type: 'checkbox', testid: 'task-select', 'aria-label': 'select', dataset: { id } });
      box.checked = taskSelected.has(id);
      box.addEventListener('change', () => {
        if (box.checked) taskSelected.set(id, String(t.state)); else taskSelected.delete(id);
        syncSelection();
      });
      return el('tr', { testid: 'task-row', dataset: { id, state: String(t.state), type: String(t.type) } },
        el('td', { class: 'sel' }, box),
        el('td', { class: 'id', title: id }, link(['task', id], id, { testid: 'task-link' })),
        cell(t.type), el('td', null, badge(t.state)), timeCell(t.due_at),
        cell(`${t.attempt}/${t.max_attempts}`, 'num'), cell(String(t.shard), 'num'),
        el('td', { class: 'err' }, t.last_error || ''));
    };
    const showRows = (tasks, empty) => {
      // the selection remembers each task's state as last listed (run now
      // picks reschedule or redrive by it)
      for (const t of tasks) if (taskSelected.has(String(t.id))) taskSelected.set(String(t.id), String(t.state));
      render(list.body, tasks, () => (tasks.length ? tasks.map(row) : emptyRow(8, empty)));
      syncSelection();
    };

    const load = latestLoad(err, gen); // a poll that started before a search must not overwrite it
    async function refresh() {
      pager.hidden = searching(); searchPager.hidden = !searching();
      if (searching()) return refreshIDSearch();
      listNote.textContent = 'Ordered by time across every shard, oldest first: due time (dead: time of death; succeeded, cancelled: when the record expires); fired and delivered tasks shard by shard. A page can hold fewer tasks than its size and still have a next page: each request examines a bounded number of entries.';
      const fl = taskSearch.filter;
      const cursor = taskSearch.cursors[taskSearch.cursors.length - 1];
      const q = query({ state: fl.state, type: fl.type, due_after: fl.due_after, due_before: fl.due_before, limit: fl.limit, cursor });
      const data = await load(() => api('GET', '/v1/tasks' + q));
      if (data === undefined || searching()) return;
      const tasks = data.tasks || [];
      cancelMatching.hidden = !(fl.state in CANCELLABLE);
      next = data.next_cursor || '';
      nextBtn.disabled = !next;
      prevBtn.disabled = taskSearch.cursors.length <= 1;
      pageLabel.textContent = `page ${taskSearch.cursors.length} · ${tasks.length} task(s)${next ? '' : ' · end'}`;
      showRows(tasks, 'no task on this page');
    }
    // The id search is not re-run by every poll (a scan costs the daemon
    // more than a page of a list): it runs when asked (Find, More) and
    // after an action; "searched at" says how fresh it is.
    async function refreshIDSearch() {
      cancelMatching.hidden = true;
      listNote.textContent = `Tasks whose id starts with "${idSearch.prefix}", in any state, in id order. The search scans every shard's records a bounded number at a time: More goes on where it stopped. It is not refreshed every 2 s: Find searches again.`;
      if (!idSearch.loaded) {
        const s = { prefix: idSearch.prefix, tasks: [], cursor: '', scanned: 0, calls: 0, done: false };
        // reload as far as the search had gone (the same number of calls)
        const calls = Math.max(idSearch.calls, 1);
        const data = await load(async () => { do { await searchMore(s); } while (!s.done && s.calls < calls); return s; });
        if (data === undefined || data.prefix !== idSearch.prefix) return;
        Object.assign(idSearch, data, { at: Date.now() });
      }
      const s = idSearch;
      moreBtn.disabled = s.done;
      scanLabel.textContent = `${plural(s.tasks.length, 'task', 'tasks')} found · scanned ${plural(s.scanned, 'record', 'records')}` +
        (s.done ? ' · every shard scanned' : ' · more records to scan') + (s.at ? ` · searched at ${fmtTime(new Date(s.at).toISOString())}` : '');
      showRows(s.tasks, s.done ? 'no task has an id with this prefix' : 'none found yet: More scans further');
    }
    syncSelection();
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
    const runNowBtn = el('button', { type: 'button', id: 'task-run-now', class: 'primary', text: 'Run now', disabled: true });
    const attempts = table('task-attempts-table', [['Attempt', 'num'], 'Started', 'Ended', ['Duration', 'num'], 'Outcome', 'Error'], 'attempt-history');
    const attemptsNote = el('p', { id: 'task-attempts-note', class: 'note', testid: 'attempts-note' });
    const title = el('h2', null, 'Task ', el('span', { class: 'mono', id: 'task-title', text: id }));
    add(view, [
      el('p', null, link(['tasks'], '‹ back to the search')),
      title, err, result,
      el('div', { class: 'grid2' },
        el('div', null,
          el('div', { class: 'panel' }, fields),
          el('div', { class: 'panel', id: 'task-actions' },
            el('div', { class: 'row' }, runNowBtn, el('span', { class: 'note', text: 'waiting: due now; dead: redriven' })),
            el('div', { class: 'row' }, when, reschedule),
            el('div', { class: 'row' }, cancel, redrive, del))),
        el('div', null,
          el('h3', null, 'Payload ', kind), payload,
          el('h3', { text: 'Headers' }), headers.table,
          el('h3', { text: 'Last error' }), lastError)),
      el('h3', { text: 'Attempt history' }), attempts.table, attemptsNote,
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
    // Run now: a waiting task is rescheduled to now (delay 0s), a dead one
    // redriven; asks twice like the other actions.
    let shownState = '';
    armed(runNowBtn, () => act(() => runNow(id, shownState)));

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
      shownState = String(t.state);
      runNowBtn.disabled = !RUNNABLE.includes(shownState);
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
          row('fired copy due at', fmtTime(t.fired_due_at), 'task-fired-due');
          row('late', `${t.late_ms} ms`, 'task-late'); // fired_at - fired_due_at
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
      showAttempts(attempts.body, attemptsNote, t);
    }
    return { refresh };
  }

  // showAttempts fills a task's attempt history table: the attempts the
  // store recorded (GET /v1/tasks/{id} "attempts", oldest first), each with
  // its outcome and error as text.
  function showAttempts(body, note, t) {
    const hist = Array.isArray(t.attempts) ? t.attempts : [];
    render(body, hist, () => (hist.length ? hist.map((a) => {
      const s = Date.parse(a.started_at);
      const e = Date.parse(a.ended_at);
      const dur = Number.isNaN(s) || Number.isNaN(e) ? '–' : fmtAge(Math.max(e - s, 0) / 1000);
      return el('tr', { testid: 'attempt-row', dataset: { attempt: String(a.attempt), outcome: String(a.outcome || '') } },
        cell(String(a.attempt), 'num'),
        a.started_at ? timeCell(a.started_at) : el('td', { class: 'muted', text: 'unknown' }),
        a.ended_at ? timeCell(a.ended_at) : el('td', { class: 'muted', text: 'unknown' }),
        cell(dur, 'num'),
        el('td', { testid: 'attempt-outcome' }, badge(a.outcome)),
        el('td', { class: 'err', testid: 'attempt-error' }, a.error || ''));
    }) : emptyRow(6, 'no attempt recorded: none has ended yet, or they ended before the store kept a history')));
    const dropped = Number(t.attempts_dropped) || 0;
    note.textContent = (dropped ? `${plural(dropped, 'earlier attempt is', 'earlier attempts are')} not shown: the store keeps the last 16. ` : '') +
      'Started: when a worker began the attempt (unknown when none ran it); ended: when its outcome was stored. A success at the first attempt is not stored (it keeps the workers\' hot path cheap): it shows without times.';
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
    const selLabel = el('span', { id: 'dead-selected', class: 'muted', testid: 'dead-selected' });
    const countLabel = el('span', { id: 'dead-count', class: 'muted', testid: 'dead-count' });
    const form = el('form', { id: 'dead-filter', class: 'panel filters' },
      el('label', null, 'Type', type),
      el('button', { type: 'submit', id: 'dead-search', class: 'primary', text: 'Filter' }),
      redriveType, deleteType, countLabel);
    const list = table('dead-table', ['', 'Id', 'Type', 'Died', ['Attempts', 'num'], 'Reason', ''], 'dead-table');
    list.table.classList.add('selectable');
    const prevBtn = el('button', { type: 'button', id: 'dead-prev', text: '‹ Previous' });
    const nextBtn = el('button', { type: 'button', id: 'dead-next', text: 'Next ›' });
    const pageLabel = el('span', { id: 'dead-page', class: 'muted' });
    let next = '';
    add(view, [
      el('h2', { text: 'Dead letters' }), form, err, result,
      el('p', { class: 'note', text: 'Ordered by time of death across every shard, oldest first. Bulk actions name what they take and how many before they run: the selected rows, or every dead letter of the filtered type (counted by the page\'s last refresh).' }),
      el('div', { class: 'row selbar' }, selLabel, redriveSel, deleteSel),
      list.table,
      el('div', { class: 'pager' }, prevBtn, pageLabel, nextBtn),
    ]);
    const typeLabel = () => (deadSearch.type ? `type ${deadSearch.type}` : 'every type');
    const syncBulkLabels = () => {
      redriveType.textContent = deadSearch.type ? 'Redrive all of this type' : 'Redrive all dead letters';
      deleteType.textContent = deadSearch.type ? 'Delete all of this type' : 'Delete all dead letters';
    };
    syncBulkLabels();
    const syncAll = selectAllBox(list.table, 'dead-select-all', selected, () => syncSelection());
    function syncSelection() {
      const n = selected.size;
      selLabel.textContent = n ? `${plural(n, 'dead letter', 'dead letters')} selected` : 'select dead letters to redrive or delete them';
      redriveSel.disabled = !n; deleteSel.disabled = !n;
      syncAll();
    }
    // count: how many dead letters the filter names, as the last refresh
    // counted them ({type, n, exact, at}; null before the first).
    let count = null;
    const say = (m) => { err.textContent = ''; result.textContent = m; };
    const everyPlan = (verb, method, path) => () => {
      const c = count;
      if (!c || c.type !== deadSearch.type) return 'counting the dead letters: try again in a moment';
      if (c.exact && c.n === 0) return `nothing to ${verb}: no dead letter of ${typeLabel()}`;
      const scope = deadSearch.type ? `every dead letter of type ${deadSearch.type}` : 'every dead letter (every type)';
      const age = Math.round((Date.now() - c.at) / 1000);
      return { count: c.n, text: `${verb} ${scope}: ${c.exact ? '' : 'more than '}${num(c.n)} (counted ${age < 5 ? 'now' : age + ' s ago'})`,
        run: () => run(async () => {
          // the body names them: a type, or {} for every dead letter
          const body = { filter: deadSearch.type ? { type: deadSearch.type } : {} };
          const past = verb === 'redrive' ? 'redriven' : 'deleted';
          const n = await bulk(method, path, body, (t, more) => { result.textContent = `${past} ${t}${more ? ' so far…' : ''}`; });
          return `${past} ${n} dead letter(s) of ${typeLabel()}`;
        }) };
    };
    const selPlan = (verb, method, path) => () => {
      const ids = [...selected];
      if (!ids.length) return 'nothing selected';
      return { count: ids.length, text: `${verb} ${plural(ids.length, 'selected dead letter', 'selected dead letters')}`,
        run: () => run(async () => {
          const r = await api(method, path, { ids });
          selected.clear();
          return `${verb === 'redrive' ? 'redriven' : 'deleted'} ${r.changed} of ${ids.length} selected`;
        }) };
    };
    const disarms = [
      twoStep(redriveType, everyPlan('redrive', 'POST', '/v1/dead/redrive'), say),
      twoStep(deleteType, everyPlan('delete', 'DELETE', '/v1/dead'), say),
      twoStep(redriveSel, selPlan('redrive', 'POST', '/v1/dead/redrive'), say),
      twoStep(deleteSel, selPlan('delete', 'DELETE', '/v1/dead'), say),
    ];
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      for (const d of disarms) d();
      deadSearch.type = type.value.trim();
      deadSearch.cursors = [''];
      selected.clear();
      count = null;
      countLabel.textContent = '';
      syncBulkLabels();
      refresh();
    });
    prevBtn.addEventListener('click', () => { if (deadSearch.cursors.length > 1) { deadSearch.cursors.pop(); refresh(); } });
    nextBtn.addEventListener('click', () => { if (next) { deadSearch.cursors.push(next); refresh(); } });

    // run does an action, reloads the list (and the count), then says
    // what the action did.
    const run = async (fn) => {
      err.textContent = ''; result.textContent = '';
      let msg = '';
      try { msg = await fn(); } catch (e) { showError(err, e); }
      invalidate(list.body);
      await refresh().catch(() => {});
      result.textContent = msg;
    };

    const load = latestLoad(err, gen);
    async function refresh() {
      const cursor = deadSearch.cursors[deadSearch.cursors.length - 1];
      const typ = deadSearch.type;
      const data = await load(async () => {
        const [page, c] = await Promise.all([
          api('GET', '/v1/tasks' + query({ state: 'dead', type: typ, limit: 100, cursor })),
          countDead(typ),
        ]);
        return { page, c };
      });
      if (data === undefined) return;
      count = data.c;
      countLabel.textContent = count.type === deadSearch.type ? `${count.exact ? '' : 'more than '}${plural(count.n, 'dead letter', 'dead letters')} of ${typeLabel()}` : '';
      const tasks = data.page.tasks || [];
      next = data.page.next_cursor || '';
      nextBtn.disabled = !next;
      prevBtn.disabled = deadSearch.cursors.length <= 1;
      pageLabel.textContent = `page ${deadSearch.cursors.length} · ${tasks.length} dead letter(s)${next ? '' : ' · end'}`;
      const present = new Set(tasks.map((t) => String(t.id)));
      for (const id of [...selected]) if (!present.has(id)) selected.delete(id);
      render(list.body, tasks, () => (tasks.length ? tasks.map((t) => {
        const id = String(t.id);
        const box = el('input', { type: 'checkbox', testid: 'dead-select', 'aria-label': 'select', dataset: { id } });
        box.checked = selected.has(id);
        box.addEventListener('change', () => { if (box.checked) selected.add(id); else selected.delete(id); syncSelection(); });
        const rd = el('button', { type: 'button', testid: 'dead-redrive', text: 'Redrive' });
        rd.dataset.id = id;
        rd.addEventListener('click', () => run(async () => {
          const r = await api('POST', '/v1/dead/' + seg(id) + '/redrive');
          return `redriven ${id}: ${r.state}, due at ${fmtTime(r.due_at)}`;
        }));
        const dl = el('button', { type: 'button', class: 'danger', testid: 'dead-delete', text: 'Delete' });
        dl.dataset.id = id;
        armed(dl, () => run(async () => { await api('DELETE', '/v1/dead/' + seg(id)); return `deleted ${id}`; }));
        return el('tr', { testid: 'dead-row', dataset: { id, type: String(t.type) } },
          el('td', { class: 'sel' }, box),
          el('td', { class: 'id', title: id }, link(['task', id], id)),
          cell(t.type), timeCell(t.died_at), cell(`${t.attempt}/${t.max_attempts}`, 'num'),
          el('td', { class: 'err', testid: 'dead-reason' }, t.last_error || ''),
          el('td', null, el('div', { class: 'row' }, rd, dl)));
      }) : emptyRow(7, 'no dead letters')));
      syncSelection();
    }
    syncSelection();
    return { refresh };
  }

  // DEAD_COUNT_PAGES bounds the pages of 1,000 a count of one type's dead
  // letters reads; beyond it the count says "more than".
  const DEAD_COUNT_PAGES = 5;

  // countDead counts the dead letters of a type ('' every type): every
  // type from GET /v1/stats (the dead sets' sizes, exact), one type by
  // walking its dead list (exact up to DEAD_COUNT_PAGES pages).
  async function countDead(typ) {
    const at = Date.now();
    if (!typ) {
      const st = await api('GET', '/v1/stats');
      return { type: typ, n: Number(st.totals && st.totals.dead) || 0, exact: true, at };
    }
    let n = 0;
    let cursor = '';
    for (let i = 0; i < DEAD_COUNT_PAGES; i++) {
      const page = await api('GET', '/v1/tasks' + query({ state: 'dead', type: typ, limit: 1000, cursor }));
      n += (page.tasks || []).length;
      cursor = page.next_cursor || '';
      if (!cursor) return { type: typ, n, exact: true, at };
    }
    return { type: typ, n, exact: false, at };
  }

  // ------------------------------------------------------------ limits

  const TEMPLATES = {
    window: { window_quota: { limit: 100, window: '1s' } },
    bucket: { token_bucket: { rate: 50, burst: 100, reserve: 0, min_priority: 0 } },
    concurrency: { concurrency: { limit: 10, slot_ttl: '5m' } },
  };

  // keyText shows a scope value; the empty one (tasks without the header)
  // is named, not left blank.
  const keyText = (k) => (k === '' ? '(none)' : String(k));

  function limitsPage(view, _arg, gen) {
    const err = el('p', { id: 'limits-error', class: 'error', testid: 'limits-error' });
    const list = table('limits-table', ['Type', 'Scope', 'Rule', ['Window count', 'num'], ['Tokens', 'num'], ['Running', 'num'], ['Active values', 'num'], 'Usage error', ''], 'limits-table');
    const keys = table('limit-keys-table', ['Type', 'Value', ['Running', 'num'], ['Waiting', 'num'], ['Window count', 'num'], ['Tokens', 'num']], 'limit-keys-table');
    const type = el('input', { id: 'limit-type', placeholder: 'task type', spellcheck: 'false' });
    const rule = el('textarea', { id: 'limit-rule', spellcheck: 'false', rows: '9' });
    rule.value = JSON.stringify(TEMPLATES.window, null, 2);
    const scope = el('select', { id: 'limit-scope', name: 'scope' },
      el('option', { value: 'type', text: 'the whole type' }),
      el('option', { value: 'key', text: 'each task key' }),
      el('option', { value: 'header', text: 'each value of a header' }));
    const header = el('input', { id: 'limit-scope-header', placeholder: 'header name, e.g. tenant', spellcheck: 'false' });
    const unordered = el('input', { type: 'checkbox', id: 'limit-unordered' });
    const save = el('button', { type: 'submit', id: 'limit-save', class: 'primary', text: 'Save rule' });
    const del = el('button', { type: 'button', id: 'limit-delete', class: 'danger', text: 'Delete rule' });
    const editErr = el('pre', { id: 'limit-error', class: 'error', testid: 'limit-error' });
    const editRes = el('p', { id: 'limit-result', class: 'result', testid: 'limit-result' });

    // The scope controls and the rule's JSON say the same thing: the
    // controls write "scope" and "unordered" into the JSON (which is what
    // is sent), and the JSON, typed or loaded, sets the controls.
    const parseRule = () => {
      try {
        const r = JSON.parse(rule.value);
        return r && typeof r === 'object' && !Array.isArray(r) ? r : null;
      } catch (_) { return null; }
    };
    const controlsFromRule = () => {
      const r = parseRule();
      if (!r) return;
      const s = typeof r.scope === 'string' ? r.scope : '';
      if (s.startsWith('header:')) { scope.value = 'header'; header.value = s.slice(7); } else { scope.value = s === 'key' ? 'key' : 'type'; }
      unordered.checked = r.unordered === true;
      header.disabled = scope.value !== 'header';
      unordered.disabled = scope.value === 'type';
    };
    const ruleFromControls = () => {
      header.disabled = scope.value !== 'header';
      unordered.disabled = scope.value === 'type';
      const r = parseRule();
      if (!r) { editErr.textContent = 'the rule is not a JSON object: fix it before choosing the scope'; return; }
      editErr.textContent = '';
      const rest = Object.fromEntries(Object.entries(r).filter(([k]) => k !== 'scope' && k !== 'unordered'));
      const head = {};
      if (scope.value === 'key') head.scope = 'key';
      if (scope.value === 'header') head.scope = 'header:' + header.value.trim();
      if (scope.value !== 'type' && unordered.checked) head.unordered = true;
      rule.value = JSON.stringify(Object.assign(head, rest), null, 2);
    };
    scope.addEventListener('change', ruleFromControls);
    header.addEventListener('input', ruleFromControls);
    unordered.addEventListener('change', ruleFromControls);
    rule.addEventListener('input', controlsFromRule);
    controlsFromRule();

    const tpl = (name, label) => el('button', { type: 'button', id: 'limit-tpl-' + name, text: label,
      onclick: () => { rule.value = JSON.stringify(TEMPLATES[name], null, 2); ruleFromControls(); } });
    const form = el('form', { id: 'limit-form', class: 'panel' },
      el('h3', { text: 'Edit a rule' }),
      el('div', { class: 'filters' }, el('label', null, 'Type', type), el('label', null, 'Limit', scope), el('label', null, 'Header', header),
        el('label', { class: 'inline' }, unordered, 'unordered (a value\'s tasks need not start in due order)')),
      el('div', { class: 'row' }, 'Start from:', tpl('window', 'window quota'), tpl('bucket', 'token bucket'), tpl('concurrency', 'concurrency')),
      rule,
      el('div', { class: 'row' }, save, del),
      editErr, editRes,
      el('p', { class: 'note', text: 'The rule is sent as written (PUT /v1/limits/{type}); the daemon validates it and its error is shown verbatim. Workers apply a saved rule within about a second. With a key or header scope every limit applies to each value apart, and a value\'s tasks start in due order unless unordered.' }));
    add(view, [el('h2', { text: 'Rate limits' }), err, list.table,
      el('h3', { text: 'Busiest values of keyed rules' }), keys.table,
      el('p', { class: 'note', text: 'Per rule with a key or header scope, its busiest values (most slots held, then most tasks waiting in order, then most admitted in the window), as the daemon lists them.' }),
      form]);

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
        editBtn.addEventListener('click', () => { type.value = l.type; rule.value = JSON.stringify(l.rule, null, 2); controlsFromRule(); editErr.textContent = ''; editRes.textContent = ''; rule.focus(); });
        // A keyed rule's figures are sums over its values: a per-value
        // limit is no bound of them, so none is shown next to them.
        const keyed = keyedScope(r);
        const of = (v, lim) => (keyed ? num(v) : `${num(v)} / ${num(lim)}`);
        return el('tr', { testid: 'limit-row', dataset: { type: String(l.type) } },
          el('td', { class: 'id', title: String(l.type) }, l.type),
          el('td', { testid: 'limit-scope' }, scopeText(r)), cell(ruleSummary(l.rule, true)),
          cell(u && r.window_quota ? of(u.window_count, r.window_quota.limit) : '–', 'num'),
          cell(u && r.token_bucket && !keyed ? `${(Math.round(u.tokens * 10) / 10).toLocaleString('en-US')} / ${num(r.token_bucket.burst)}` : '–', 'num'),
          cell(u && r.concurrency ? of(u.running, r.concurrency.limit) : '–', 'num'),
          cell(u && keyed ? num(u.active_keys || 0) : '–', 'num'),
          el('td', { class: 'err' }, l.usage_error || ''),
          el('td', null, editBtn));
      }) : emptyRow(9, 'no rate-limit rule: every type runs unlimited')));
      const busiest = ls.filter((l) => keyedScope(l.rule) && l.usage && Array.isArray(l.usage.keys))
        .flatMap((l) => l.usage.keys.map((k) => ({ l, k })));
      render(keys.body, busiest.map(({ l, k }) => [l.type, k]), () => (busiest.length ? busiest.map(({ l, k }) => {
        const r = l.rule;
        return el('tr', { testid: 'limit-key-row', dataset: { type: String(l.type), key: String(k.key) } },
          el('td', { class: 'id', title: String(l.type) }, l.type),
          el('td', { class: 'id', title: String(k.key) }, keyText(k.key)),
          cell(r.concurrency ? `${num(k.running)} / ${num(r.concurrency.limit)}` : '–', 'num'),
          cell(num(k.waiting), 'num'),
          cell(r.window_quota ? `${num(k.window_count)} / ${num(r.window_quota.limit)}` : '–', 'num'),
          cell(r.token_bucket ? `${(Math.round(k.tokens * 10) / 10).toLocaleString('en-US')} / ${num(r.token_bucket.burst)}` : '–', 'num'));
      }) : emptyRow(6, 'no active value: no rule with a key or header scope has state in Redis')));
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
        // the tick as the schedule's own zone reads it (the API writes its
        // ticks with that zone's offset), under the time in the console's
        // zone: a cron line is written in the schedule's zone
        if (s.next && s.next.length && !/Z$/.test(String(s.next[0]))) {
          next.append(el('div', { class: 'muted', testid: 'schedule-zone-time', text: String(s.next[0]).replace('T', ' ') + ' ' + (s.timezone || '') }));
        }
        if (s.next && s.next.length) next.title = s.next.join('\n');
        return el('tr', { testid: 'schedule-row', dataset: { id: String(s.id), paused: String(!!s.paused) } },
          el('td', { class: 'id', title: String(s.id) }, link(['schedule', s.id], s.id, { testid: 'schedule-link' })),
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

  // ---------------------------------------------------- schedule detail

  const TICKS_SHOWN = 20; // latest ticks a schedule's page lists
  const TICK_SEARCH_CALLS = 50; // bound on the GET /v1/search calls one look for ticks makes
  const TICK_REFRESH_MS = 10000; // the ticks are searched again at most this often

  // scheduleTicks finds the tasks of a schedule's ticks. A tick's task id
  // is "<schedule>@<tick in unix ms>" (internal/schedule), so GET
  // /v1/search with the prefix "<schedule>@" finds them, in any state, on
  // every shard; the latest TICKS_SHOWN by tick time, newest first.
  async function scheduleTicks(sid) {
    const s = { prefix: sid + '@', tasks: [], cursor: '', scanned: 0, calls: 0, done: false };
    while (!s.done && s.calls < TICK_SEARCH_CALLS) await searchMore(s);
    const ticks = [];
    for (const t of s.tasks) {
      const rest = String(t.id).slice(sid.length + 1);
      if (/^\d+$/.test(rest)) ticks.push({ ms: Number(rest), t });
    }
    ticks.sort((a, b) => b.ms - a.ms);
    return { ticks: ticks.slice(0, TICKS_SHOWN), total: ticks.length, scanned: s.scanned, done: s.done, at: Date.now() };
  }

  function schedulePage(view, id, gen) {
    const back = el('p', null, link(['schedules'], '‹ back to the schedules'));
    if (!id) {
      add(view, [back, el('h2', { text: 'Schedule' }),
        el('p', { id: 'schedule-page-error', class: 'error', testid: 'schedule-no-id', text: 'No schedule id: open one from Schedules, or put its id after #/schedule/.' })]);
      return { refresh: async () => {} };
    }
    const err = el('p', { id: 'schedule-page-error', class: 'error', testid: 'schedule-page-error' });
    const result = el('p', { id: 'schedule-page-result', class: 'result', testid: 'schedule-page-result' });
    const fields = el('dl', { id: 'schedule-fields', class: 'fields', testid: 'schedule-fields' });
    const tmpl = el('pre', { id: 'schedule-template', class: 'box', testid: 'schedule-template' });
    const nextTicks = table('schedule-next', ['Next ticks'], 'schedule-next');
    const ticks = table('schedule-ticks', ['Tick', 'Task', 'State', ['Attempt', 'num'], 'Last error'], 'schedule-ticks');
    const ticksNote = el('p', { id: 'schedule-ticks-note', class: 'note', testid: 'schedule-ticks-note' });
    const ticksErr = el('p', { id: 'schedule-ticks-error', class: 'error', testid: 'schedule-ticks-error' });
    const ticksBtn = el('button', { type: 'button', id: 'schedule-ticks-refresh', text: 'Search the ticks again' });
    const toggle = el('button', { type: 'button', id: 'schedule-toggle', text: 'Pause' });
    add(view, [
      back,
      el('h2', null, 'Schedule ', el('span', { class: 'mono', id: 'schedule-title', text: id })),
      err, result,
      el('div', { class: 'grid2' },
        el('div', null,
          el('div', { class: 'panel' }, fields),
          el('div', { class: 'row' }, toggle),
          nextTicks.table),
        el('div', null, el('h3', { text: 'Task template' }), tmpl)),
      el('h3', null, `Latest ${TICKS_SHOWN} ticks`),
      el('div', { class: 'row' }, ticksBtn), ticksErr,
      ticks.table, ticksNote,
    ]);
    const path = '/v1/schedules/' + seg(id);
    let paused = null;
    toggle.addEventListener('click', async () => {
      if (paused === null) return;
      err.textContent = ''; result.textContent = '';
      try {
        const r = await api('POST', path + (paused ? '/resume' : '/pause'));
        result.textContent = `${r.id} is ${r.paused ? 'paused' : 'running'}${r.changed ? '' : ' (unchanged)'}`;
      } catch (e) { showError(err, e); }
      await refresh().catch(() => {});
    });
    let tickData = null;
    let tickBusy = false;
    async function loadTicks() {
      if (tickBusy) return;
      tickBusy = true;
      ticksBtn.disabled = true;
      try {
        const d = await scheduleTicks(id);
        if (stale(gen)) return;
        tickData = d;
        ticksErr.textContent = '';
      } catch (e) {
        if (!stale(gen)) showError(ticksErr, e);
      } finally { tickBusy = false; ticksBtn.disabled = false; }
      if (!tickData) return;
      const d = tickData;
      render(ticks.body, d.ticks, () => (d.ticks.length ? d.ticks.map(({ ms, t }) => el('tr', { testid: 'tick-row', dataset: { id: String(t.id), state: String(t.state), ms: String(ms) } },
        timeCell(new Date(ms).toISOString()),
        el('td', { class: 'id', title: String(t.id) }, link(['task', t.id], t.id, { testid: 'tick-link' })),
        el('td', null, badge(t.state)),
        cell(`${t.attempt}/${t.max_attempts}`, 'num'),
        el('td', { class: 'err' }, t.last_error || ''))) : emptyRow(5, 'no tick task found: none materialized yet, or their records expired')));
      ticksNote.textContent = `${plural(d.total, 'tick task', 'tick tasks')} found (ids starting "${id}@", GET /v1/search), the latest ${Math.min(d.total, TICKS_SHOWN)} shown; ` +
        `scanned ${plural(d.scanned, 'record', 'records')}${d.done ? '' : `, stopped after ${TICK_SEARCH_CALLS} calls: older ticks may be missing`}; searched at ${fmtTime(new Date(d.at).toISOString())}. ` +
        'A tick task\'s record lasts as long as the retention after it ends.';
    }
    ticksBtn.addEventListener('click', () => loadTicks());

    const load = latestLoad(err, gen);
    async function refresh() {
      const res = await load(() => request('GET', path));
      if (res === undefined) return;
      const s = res.data || {};
      let doc = null;
      try { doc = parseLossless(res.text); } catch (e) { doc = null; }
      paused = !!s.paused;
      toggle.textContent = paused ? 'Resume' : 'Pause';
      const state = s.paused ? 'paused' : (s.next && s.next.length) || s.next_error ? 'running' : 'ended';
      view.dataset.state = state;
      render(fields, s, () => {
        const out = [];
        const row = (k, v, testid) => { if (v !== undefined && v !== null && v !== '') out.push(el('dt', { text: k }), el('dd', { testid }, v)); };
        row('id', s.id, 'schedule-id');
        row('state', badge(state), 'schedule-detail-state');
        row('cron', s.cron, 'schedule-cron');
        row('time zone', s.timezone, 'schedule-tz');
        row('catch-up', s.catchup, 'schedule-catchup');
        row('starts', s.start_at ? fmtTime(s.start_at) : '', 'schedule-start');
        row('ends', s.end_at ? fmtTime(s.end_at) : '', 'schedule-end');
        row('task type', s.task && s.task.type, 'schedule-task-type');
        row('last tick', s.last_tick ? fmtTime(s.last_tick) : 'none yet', 'schedule-last-tick');
        row('last tick task', s.last_task_id ? link(['task', s.last_task_id], s.last_task_id) : '', 'schedule-last-task');
        row('created', fmtTime(s.created_at), 'schedule-created');
        row('updated', fmtTime(s.updated_at), 'schedule-updated');
        row('revision', s.revision === undefined ? '' : String(s.revision), 'schedule-revision');
        return out;
      });
      const raw = member(doc, 'task');
      const text = raw !== undefined ? pretty(raw) : JSON.stringify(s.task || {}, null, 2);
      if (tmpl.textContent !== text) tmpl.textContent = text;
      const next = Array.isArray(s.next) ? s.next : [];
      render(nextTicks.body, { next, e: s.next_error || '' }, () => (next.length ? next.map((n) => el('tr', { testid: 'next-tick' }, timeCell(n)))
        : emptyRow(1, s.next_error ? 'unknown: ' + s.next_error : 'no more ticks')));
      if (!tickData || Date.now() - tickData.at >= TICK_REFRESH_MS) await loadTicks();
    }
    return { refresh };
  }

  // -------------------------------------------------------------- start

  const pages = { overview: overviewPage, tasks: tasksPage, task: taskPage, dead: deadPage, limits: limitsPage, types: typesPage, schedules: schedulesPage, schedule: schedulePage, inflight: inflightPage };

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
    tzSelect();
    window.addEventListener('hashchange', () => { if (signedIn()) route(); });
    if (signedIn()) showConsole(); else probe();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start); else start();
})();
