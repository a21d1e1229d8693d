// The fencegate ops dashboard. Plain browser JavaScript, no dependencies, no build step.
//
// Data: GET /v1/events (the backlog), then /v1/events/stream (Server-Sent Events, read
// with fetch so the request can carry a credential; after a drop it resumes after the
// last event it has), GET /v1/locks (paged) and GET /v1/status, polled. On a control
// listener with an auth file, every call carries the API key typed into the page
// (`Authorization: Bearer`), kept in this tab's sessionStorage only. Every value is put into the page as text (textContent,
// createElement): lock keys, paths and owners come from clients and are never parsed as
// HTML. The events are kept in a bounded buffer (MAX_EVENTS); the chart is aggregated
// from it by time bucket, the feed renders at most FEED_ROWS rows, and rendering is
// batched (at most one redraw per RENDER_MS), so a flood of events keeps the page usable.
'use strict';

(() => {
  const MAX_EVENTS = 10000;
  const FEED_ROWS = 200;
  const BUCKETS = 60;
  /** The time windows the page offers (?since=…), in ms; `all`: every event the page holds. */
  const WINDOWS = { '5m': 300000, '15m': 900000, '1h': 3600000, '6h': 21600000, '24h': 86400000, all: null };
  const DEFAULT_WINDOW = '15m';
  /** Identical events (type, reason, route, lock, token) at most this far apart share a feed row. */
  const BURST_MS = 10000;
  /** How often a lock's holder shown in the feed is asked again (GET /v1/locks/{key}), and how many at once. */
  const HOLDER_EVERY_MS = 3000;
  const HOLDER_LOOKUPS = 12;
  const UPSTREAMS_EVERY_MS = 3000;
  const TOPS = 8;
  const REDRAW_MS = 5000;
  const SERIES = 6;
  const RENDER_MS = 250;
  const LOCKS_PAGE = 50;
  const LOCKS_EVERY_MS = 2000;
  const STATUS_EVERY_MS = 3000;
  const WRITE_TYPES = ['fenced-write', 'drain-timeout'];
  const REASONS = [
    'stale',
    'forged',
    'missing',
    'lease',
    'malformed',
    'unavailable',
    'drain-timeout',
    'delivered-write',
    'store-reset',
    'expired',
    'lease-lost',
    'not-owner',
  ];
  const SVG = 'http://www.w3.org/2000/svg';
  const RETRY_MS = 2000;
  const KEY_STORE = 'fencegate.apiKey';

  /** Events, oldest first; trimmed to MAX_EVENTS at each render. */
  let events = [];
  let lastId = 0;
  let total = 0;
  let renderTimer = null;
  let gapNote = '';
  // asked: lock-list requests made; shown: the newest whose answer is on the table.
  const locks = { cursor: null, next: null, rows: [], fetchedAt: 0, asked: 0, shown: 0 };
  let apiKey = readKey();
  /** Aborts the running event stream (a new key starts another). */
  let stream = null;

  const $ = (id) => document.getElementById(id);

  // ---- credentials ----

  function readKey() {
    try {
      return sessionStorage.getItem(KEY_STORE) || '';
    } catch {
      return '';
    }
  }

  function storeKey(key) {
    apiKey = key;
    try {
      if (key) sessionStorage.setItem(KEY_STORE, key);
      else sessionStorage.removeItem(KEY_STORE);
    } catch {
      // storage refused (private mode): the key lasts until the page is left
    }
  }

  /** fetch() on the control API with the API key, if one was given. 401 asks for one. */
  async function api(path, init = {}) {
    const headers = new Headers(init.headers);
    if (apiKey) headers.set('authorization', `Bearer ${apiKey}`);
    const res = await fetch(path, { ...init, headers, cache: 'no-store' });
    if (res.status === 401) askForKey(apiKey ? 'API key refused' : 'API key needed');
    return res;
  }

  function askForKey(why) {
    setConn(why, 'pill-bad');
    $('auth').hidden = false;
    $('api-key').focus();
  }

  function useKey() {
    storeKey($('api-key').value.trim());
    $('api-key').value = '';
    $('auth').hidden = true;
    setConn('connecting…', 'pill-warn');
    refresh();
  }

  /** An element with text children (strings become text nodes, never markup). */
  function el(tag, className, ...children) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    for (const child of children) {
      node.append(
        child instanceof Node ? child : document.createTextNode(child == null ? '' : String(child)),
      );
    }
    return node;
  }

  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function row(cells, className) {
    const tr = el('tr', className);
    for (const c of cells) tr.append(c instanceof Node ? c : el('td', '', c));
    return tr;
  }

  function replaceRows(tbody, rows) {
    tbody.replaceChildren(...rows);
  }

  // ---- filters ----

  function filters() {
    return {
      route: $('f-route').value,
      lock: $('f-lock').value.trim(),
      reason: $('f-reason').value,
      group: $('f-group').value,
      since: $('f-since').value,
    };
  }

  /**
   * The filters live in the page's URL (?route=…&lock=…&reason=…&group=lock&since=1h), so a view
   * pasted into an incident channel opens as it was. A route named in the URL is chosen
   * once the routes are known (the list comes with the first status).
   */
  const FILTER_KEYS = ['route', 'lock', 'reason', 'group', 'since'];
  let routeFromUrl = null;

  function filtersFromUrl() {
    const q = new URLSearchParams(location.search);
    if (q.get('lock') !== null) $('f-lock').value = q.get('lock');
    if (REASONS.includes(q.get('reason'))) $('f-reason').value = q.get('reason');
    if (q.get('group') === 'lock') $('f-group').value = 'lock';
    if (Object.hasOwn(WINDOWS, q.get('since') ?? '')) $('f-since').value = q.get('since');
    routeFromUrl = q.get('route');
  }

  function filtersToUrl(f) {
    const q = new URLSearchParams(location.search);
    for (const k of FILTER_KEYS) q.delete(k);
    const wanted = {
      ...f,
      route: f.route || routeFromUrl || '',
      group: f.group === 'route' ? '' : f.group,
      since: f.since || DEFAULT_WINDOW, // always: a shared link carries its window
    };
    for (const k of FILTER_KEYS) if (wanted[k]) q.set(k, wanted[k]);
    const search = q.toString();
    const url = `${location.pathname}${search ? `?${search}` : ''}`;
    if (url !== `${location.pathname}${location.search}`) history.replaceState(null, '', url);
  }

  function matches(e, f) {
    if (f.route && e.route !== f.route) return false;
    if (f.reason && e.reason !== f.reason) return false;
    if (f.lock) {
      if (f.lock.endsWith('*')) {
        if (!e.lock.startsWith(f.lock.slice(0, -1))) return false;
      } else if (e.lock !== f.lock) return false;
    }
    return true;
  }

  // ---- rendering ----

  function scheduleRender() {
    if (renderTimer !== null) return;
    renderTimer = setTimeout(() => {
      renderTimer = null;
      render();
    }, RENDER_MS);
  }

  /**
   * The window in view: [start, end) in ms, its bucket width and its name. `all` spans the
   * events the page holds (at least 5 minutes). Every count on the page (chart, by route,
   * by lock, feed) is of the events in this window that match the filters: one set.
   */
  function viewWindow(since) {
    const now = Date.now();
    let span = WINDOWS[since] ?? null;
    if (span === null) {
      const oldest = events.length > 0 ? Date.parse(events[0].time) : now;
      span = Math.max(WINDOWS['5m'], now - oldest + 1000);
    }
    const bucketMs = Math.max(1000, Math.ceil(span / BUCKETS / 1000) * 1000);
    const end = Math.ceil(now / bucketMs) * bucketMs;
    const name = since === 'all' ? `all ${events.length} events held by this page` : windowName(since);
    return { start: end - BUCKETS * bucketMs, end, bucketMs, name };
  }

  function windowName(since) {
    return $('f-since').selectedOptions[0]?.textContent ?? since;
  }

  function render() {
    if (events.length > MAX_EVENTS) events = events.slice(events.length - MAX_EVENTS);
    const f = filters();
    filtersToUrl(f);
    const w = viewWindow(f.since);
    const shown = events.filter((e) => {
      if (!matches(e, f)) return false;
      return Date.parse(e.time) >= w.start; // one a little ahead of this clock goes in the last bucket
    });
    $('total').textContent = String(total);
    $('buffered').textContent = String(events.length);
    $('view-window').textContent = w.name;
    $('view-events').textContent = String(shown.length);
    renderFeed(shown);
    renderChart(
      shown.filter((e) => WRITE_TYPES.includes(e.type)),
      f.group,
      w,
    );
  }

  const pad = (n) => String(n).padStart(2, '0');

  /**
   * "2026-12-04 11:28:48 +01:00 · 12 s ago": the date, the time and the zone offset of
   * the browser's clock, so a time pasted into an incident channel means one instant,
   * and how long ago it was when the row was drawn.
   */
  function when(iso) {
    const d = new Date(iso);
    const off = -d.getTimezoneOffset();
    const zone = `${off >= 0 ? '+' : '-'}${pad(Math.floor(Math.abs(off) / 60))}:${pad(Math.abs(off) % 60)}`;
    const date = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
    const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    return `${date} ${time} ${zone} · ${ago(Date.now() - d.getTime())}`;
  }

  function ago(ms) {
    const s = Math.max(0, Math.round(ms / 1000));
    if (s < 1) return 'just now';
    if (s < 120) return `${s} s ago`;
    if (s < 7200) return `${Math.round(s / 60)} min ago`;
    return `${Math.round(s / 3600)} h ago`;
  }

  /**
   * Bursts: identical events (same type, reason, route, lock, token, shadow or not) at most
   * BURST_MS apart become one row with their count, first and last time. Rows are newest
   * first (by their last event); at most FEED_ROWS.
   */
  function groupBursts(shown) {
    const open = new Map();
    const groups = [];
    for (let i = shown.length - 1; i >= 0; i--) {
      const e = shown[i];
      const t = Date.parse(e.time);
      const key = [e.type, e.reason, e.route, e.lock, e.token, e.enforced].join('\u0000');
      const g = open.get(key);
      if (g !== undefined && g.firstMs - t <= BURST_MS) {
        g.count += 1;
        g.first = e;
        g.firstMs = t;
        continue;
      }
      if (groups.length >= FEED_ROWS) {
        if (g !== undefined) open.delete(key);
        continue;
      }
      const fresh = { last: e, first: e, firstMs: t, count: 1 };
      open.set(key, fresh);
      groups.push(fresh);
    }
    return groups;
  }

  /** "3 grants behind · lease ended 42 s ago": how stale a refused token was. */
  function behindText(e) {
    const parts = [];
    if (e.behind) {
      const n = e.behind.grants;
      parts.push(`${e.behind.exact ? '' : '≥ '}${n} grant${n === 1 ? '' : 's'} behind`);
    } else if (e.type === 'lease-expired' && e.highest !== null) {
      parts.push(`taken over by ${e.highest}`);
    } else if (e.type === 'fenced-write' && e.token !== null && e.highest !== null && e.token !== e.highest) {
      parts.push(`highest admitted ${e.highest}`); // the store no longer remembers the token's grant
    }
    if (e.leaseEndedAt) parts.push(`lease ended ${ago(Date.now() - Date.parse(e.leaseEndedAt))}`);
    return parts.length > 0 ? parts.join(' · ') : '–';
  }

  /** Who holds the lock now (asked of GET /v1/locks/{key}), else the newest grant the event names. */
  function holderText(e) {
    const now = holders.get(e.lock);
    if (now && now.state) {
      const l = now.state;
      return l.held ? `${l.owner} · ${l.token}` : `nobody (last token ${l.token})`;
    }
    if (e.holder) return `${e.holder.owner} · ${e.holder.token} (at the refusal)`;
    return '–';
  }

  function renderFeed(shown) {
    const groups = groupBursts(shown);
    const rows = groups.map((g) => {
      const e = g.last;
      const cls = e.reason === 'stale' ? 'bad' : e.type === 'fenced-write' ? 'warn' : '';
      const count = el('td', g.count > 1 ? 'num burst' : 'num', `×${g.count}`);
      if (g.count > 1)
        count.title = `${g.count} identical events from ${when(g.first.time)} to ${when(e.time)}`;
      return row(
        [
          el('td', 'num', e.id),
          el('td', 'time', when(e.time)),
          count,
          el('td', cls, e.reason),
          e.route ?? '–',
          e.lock,
          el('td', 'num', e.token ?? '–'),
          el('td', e.behind || e.leaseEndedAt ? 'behind' : 'muted', behindText(e)),
          e.owner ?? '–',
          holderText(e),
          el('td', 'time', g.count > 1 ? when(g.first.time) : '–'),
          e.type + (e.enforced ? '' : ' (shadow)'),
          e.client,
          e.method ? `${e.method} ${e.path}` : '–',
        ],
        g.count > 1 ? 'grouped' : '',
      );
    });
    replaceRows($('feed').tBodies[0], rows);
    const more = groups.length >= FEED_ROWS ? ` (the newest ${FEED_ROWS} rows)` : '';
    $('feed-caption').textContent =
      `${groups.length} rows for ${shown.length} events${more}; identical events within ${BURST_MS / 1000} s share a row${gapNote}`;
    wantHolders(groups);
  }

  // ---- who holds the locks shown now ----

  /** lock → { state (GET /v1/locks/{key}, null: none), at (ms), asking }. */
  const holders = new Map();

  function wantHolders(groups) {
    const now = Date.now();
    let asked = 0;
    const seen = new Set();
    for (const g of groups) {
      const lock = g.last.lock;
      if (lock === '' || g.last.token === null || seen.has(lock)) continue;
      seen.add(lock);
      const h = holders.get(lock);
      if (h && (h.asking || now - h.at < HOLDER_EVERY_MS)) continue;
      if (asked++ >= HOLDER_LOOKUPS) break;
      void askHolder(lock, h);
    }
    if (holders.size > 500) for (const k of holders.keys()) if (!seen.has(k)) holders.delete(k);
  }

  async function askHolder(lock, previous) {
    const entry = { state: previous?.state ?? null, at: Date.now(), asking: true };
    holders.set(lock, entry);
    try {
      const res = await api(`/v1/locks/${encodeURIComponent(lock)}`);
      if (res.ok) entry.state = await res.json();
      else if (res.status === 404) entry.state = null;
    } catch {
      // asked again after HOLDER_EVERY_MS
    } finally {
      entry.asking = false;
      entry.at = Date.now();
    }
    scheduleRender();
  }

  function topCounts(list, key, n) {
    const counts = new Map();
    for (const e of list) {
      const k = key(e);
      counts.set(k, (counts.get(k) || 0) + 1);
    }
    return [...counts.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, n);
  }

  /** The top routes and locks, then "k others" and the total: each table adds up to the chart's total. */
  function renderTops(writes) {
    const top = (id, key, noun) => {
      const all = topCounts(writes, key, Infinity);
      const rows = all.slice(0, TOPS).map(([name, n]) => row([name, el('td', 'num', n)]));
      if (all.length > TOPS) {
        const rest = all.slice(TOPS);
        const n = rest.reduce((sum, [, c]) => sum + c, 0);
        rows.push(row([el('td', 'muted', `${rest.length} other ${noun}`), el('td', 'num', n)], 'other'));
      }
      rows.push(row([el('td', 'muted', 'total'), el('td', 'num', writes.length)], 'sum'));
      replaceRows($(id).tBodies[0], rows);
    };
    top('top-routes', (e) => e.route ?? '(issuer)', 'routes');
    top('top-locks', (e) => e.lock, 'locks');
  }

  function renderChart(writes, group, w) {
    const chart = $('chart');
    const width = Math.max(200, chart.clientWidth || 600);
    const height = Math.max(120, chart.clientHeight || 220);
    const { start, bucketMs } = w;
    const keyOf = (e) => (group === 'lock' ? e.lock : (e.route ?? '(issuer)'));
    const series = topCounts(writes, keyOf, SERIES).map(([name]) => name);
    const index = new Map(series.map((name, i) => [name, i]));
    const buckets = Array.from({ length: BUCKETS }, () => new Array(SERIES + 1).fill(0));
    for (const e of writes) {
      const b = Math.min(BUCKETS - 1, Math.max(0, Math.floor((Date.parse(e.time) - start) / bucketMs)));
      const s = index.has(keyOf(e)) ? index.get(keyOf(e)) : SERIES;
      buckets[b][s] += 1;
    }
    const peak = Math.max(1, ...buckets.map((b) => b.reduce((x, y) => x + y, 0)));
    const left = 34;
    const bottom = 18;
    const plotH = height - bottom - 6;
    const barW = (width - left) / BUCKETS;
    const nodes = [
      svg('line', { x1: left, y1: height - bottom, x2: width, y2: height - bottom, class: 'axis' }),
      svg('text', { x: 2, y: 12 }, String(peak)),
      svg('text', { x: 2, y: height - bottom }, '0'),
      svg('text', { x: left, y: height - 4 }, `-${span(BUCKETS * bucketMs)}`),
      svg('text', { x: width - 24, y: height - 4 }, 'now'),
    ];
    buckets.forEach((counts, b) => {
      let y = height - bottom;
      counts.forEach((n, s) => {
        if (n === 0) return;
        const h = (n / peak) * plotH;
        y -= h;
        const rect = svg('rect', {
          x: left + b * barW + 1,
          y,
          width: Math.max(1, barW - 2),
          height: h,
          class: `c${Math.min(s, SERIES)}`,
          'data-count': n,
        });
        rect.append(svg('title', {}, `${s < series.length ? series[s] : 'other'}: ${n}`));
        nodes.push(rect);
      });
    });
    chart.setAttribute('viewBox', `0 0 ${width} ${height}`);
    chart.replaceChildren(...nodes);
    const legend = series.map((name, i) => el('span', '', el('span', `swatch c${i}`), name));
    if (writes.length > 0 && buckets.some((b) => b[SERIES] > 0)) {
      legend.push(el('span', '', el('span', `swatch c${SERIES}`), 'other'));
    }
    $('legend').replaceChildren(...legend);
    $('chart-total').textContent = String(writes.length);
    $('chart-caption').textContent = `${w.name}, ${span(bucketMs)} buckets, by ${group}`;
    renderTops(writes);
  }

  /** 90000 → "90 s", 900000 → "15 min", 3600000 → "1 h". */
  function span(ms) {
    if (ms < 120000) return `${Math.round(ms / 1000)} s`;
    if (ms < 7200000) return `${Math.round(ms / 60000)} min`;
    return `${Math.round(ms / 360000) / 10} h`;
  }

  // ---- events: backlog, then the live stream ----

  function accept(e) {
    if (e.id <= lastId) return; // already have it (a replay after a reconnect)
    lastId = e.id;
    total = Math.max(total, e.id);
    events.push(e);
  }

  async function loadBacklog() {
    const res = await api(`/v1/events?limit=${MAX_EVENTS}`);
    if (!res.ok) throw new Error(`GET /v1/events: ${res.status}`);
    const body = await res.json();
    total = body.total;
    for (let i = body.events.length - 1; i >= 0; i--) accept(body.events[i]);
    lastId = Math.max(lastId, body.total);
  }

  /** Follows /v1/events/stream until aborted, reconnecting after a drop. */
  function follow() {
    if (stream) stream.abort();
    const ctl = new AbortController();
    stream = ctl;
    void (async () => {
      while (!ctl.signal.aborted) {
        try {
          const res = await api(`/v1/events/stream?since=${lastId}`, {
            signal: ctl.signal,
            headers: { accept: 'text/event-stream' },
          });
          if (res.status === 401) return; // until a key is given
          if (res.status === 403) {
            setConn('no events grant', 'pill-bad');
            return;
          }
          if (!res.ok || !res.body) throw new Error(`GET /v1/events/stream: ${res.status}`);
          setConn('live', 'pill-ok');
          await readFrames(res.body, ctl.signal);
        } catch {
          // dropped: try again below
        }
        if (ctl.signal.aborted) return;
        setConn('reconnecting…', 'pill-warn');
        await new Promise((r) => setTimeout(r, RETRY_MS));
      }
    })();
  }

  /** Reads Server-Sent Events frames (id, event, data lines; blank line ends one). */
  async function readFrames(body, signal) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    signal.addEventListener('abort', () => void reader.cancel().catch(() => undefined), { once: true });
    let buffer = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buffer += value;
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let type = 'message';
        const data = [];
        for (const line of block.split('\n')) {
          if (line.startsWith('event:')) type = line.slice(6).trim();
          else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
        }
        if (data.length > 0) onFrame(type, data.join('\n'));
      }
    }
  }

  function onFrame(type, data) {
    if (type === 'gap') {
      const g = JSON.parse(data);
      gapNote = g.restarted ? ' (the server restarted: ids started again)' : ' (some events were missed)';
      if (g.restarted) {
        events = [];
        lastId = 0;
      }
    } else if (type === 'message') {
      accept(JSON.parse(data));
    }
    scheduleRender();
  }

  function setConn(text, cls) {
    const pill = $('conn');
    pill.textContent = text;
    pill.className = `pill ${cls}`;
  }

  // ---- locks ----

  function remaining(ms) {
    if (ms === null) return '–';
    if (ms <= 0) return 'expired';
    return ms >= 10000 ? `${Math.round(ms / 1000)} s` : `${(ms / 1000).toFixed(1)} s`;
  }

  function renderLocks() {
    const elapsed = Date.now() - locks.fetchedAt;
    replaceRows(
      $('locks').tBodies[0],
      locks.rows.map((l) =>
        row([
          l.key,
          l.owner ?? '–',
          el('td', 'num', l.token),
          el('td', 'num', l.highest ?? '–'),
          el('td', 'num', remaining(l.leaseRemainingMs === null ? null : l.leaseRemainingMs - elapsed)),
          el('td', 'num', l.waiters),
        ]),
      ),
    );
  }

  async function loadLocks() {
    const q = new URLSearchParams({ limit: String(LOCKS_PAGE) });
    const prefix = $('l-prefix').value;
    const cursor = locks.cursor;
    const ticket = ++locks.asked;
    if (prefix) q.set('prefix', prefix);
    if (cursor) q.set('cursor', cursor);
    const res = await api(`/v1/locks?${q}`);
    const body = res.ok ? await res.json() : null;
    // The periodic refresh, a keystroke in the prefix and a page click overlap, and their
    // answers can arrive out of order: one is shown only if it lists what the table is now
    // asked for and is newer than the one shown. (An older page's answer shown last left
    // its own `next` behind, and "next page" then went to the wrong place.)
    if (ticket < locks.shown || prefix !== $('l-prefix').value || cursor !== locks.cursor) return;
    locks.shown = ticket;
    if (body === null) {
      $('locks-caption').textContent = `(could not list: ${res.status})`;
      return;
    }
    locks.rows = body.locks;
    locks.next = body.next;
    locks.fetchedAt = Date.now();
    $('l-next').disabled = body.next === null;
    $('locks-caption').textContent =
      `${body.locks.length} on this page${locks.cursor ? ' (not the first)' : ''}`;
    renderLocks();
  }

  // ---- status ----

  function breakerCell(state, kind) {
    // The postgres kind runs each write as a database transaction: no HTTP circuit breaker.
    if (state === null) return el('td', 'muted', kind === 'postgres' ? 'none (database)' : 'no breaker yet');
    const cls = state === 'closed' ? 'ok' : state === 'open' ? 'bad' : 'warn';
    return el('td', cls, `breaker ${state.replace('_', '-')}`);
  }

  /** 3725 → "1h 2m 5s": an uptime an operator reads at a glance. */
  function duration(seconds) {
    const parts = [];
    const d = Math.floor(seconds / 86400);
    const h = Math.floor((seconds % 86400) / 3600);
    const m = Math.floor((seconds % 3600) / 60);
    if (d > 0) parts.push(`${d}d`);
    if (d > 0 || h > 0) parts.push(`${h}h`);
    if (d === 0 && (h > 0 || m > 0)) parts.push(`${m}m`);
    if (d === 0 && h === 0) parts.push(`${seconds % 60}s`);
    return parts.join(' ');
  }

  async function loadStatus() {
    const res = await api('/v1/status');
    if (!res.ok) return;
    const s = await res.json();
    const workers = s.workers ? ` · workers ${s.workers.ready}/${s.workers.configured}` : '';
    $('build').textContent = `fencegate ${s.version} · up ${duration(s.uptimeS)}${workers}`;
    const pill = $('store-pill');
    pill.textContent = `store ${s.store.kind}: ${s.store.ok ? 'ok' : 'DOWN'}`;
    pill.className = `pill ${s.store.ok ? 'pill-ok' : 'pill-bad'}`;
    const detail = el('td', 'muted', s.store.detail);
    detail.colSpan = 2;
    const rows = [
      row([
        `store (${s.store.kind})`,
        el('td', s.store.ok ? 'ok' : 'bad', s.store.ok ? 'up' : 'down'),
        breakerCell(s.store.breaker),
      ]),
      row(['', detail]),
    ];
    for (const u of s.upstreams) {
      rows.push(row([`upstream ${u.name} (${u.kind})`, u.url, breakerCell(u.breaker, u.kind)]));
    }
    replaceRows($('health').tBodies[0], rows);
    replaceRows(
      $('routes').tBodies[0],
      s.routes.map((r) =>
        row([
          r.name,
          r.methods.join(' '),
          r.path,
          r.kind,
          r.lock ?? '–',
          r.fencing ? `${r.fencing.check}${r.fencing.enforce ? '' : ', shadow'}` : 'not fenced',
        ]),
      ),
    );
    const select = $('f-route');
    const chosen = select.value || routeFromUrl || '';
    const names = s.routes.filter((r) => r.lock !== null).map((r) => r.name);
    const have = [...select.options].map((o) => o.value).slice(1);
    if (names.join('\n') !== have.join('\n')) {
      select.replaceChildren(el('option', '', 'all'), ...names.map((n) => el('option', '', n)));
      select.options[0].value = '';
      select.value = names.includes(chosen) ? chosen : '';
    }
    if (routeFromUrl !== null) {
      routeFromUrl = null;
      scheduleRender();
    }
  }

  // ---- upstreams ----

  function ms(v) {
    return v === null ? '–' : `${v < 10 ? v.toFixed(1) : Math.round(v)} ms`;
  }

  /** Each upstream's breaker beside its requests, errors, latency and last error (GET /v1/upstreams). */
  async function loadUpstreams() {
    const res = await api('/v1/upstreams');
    if (!res.ok) {
      $('upstreams-caption').textContent = `(could not read: ${res.status})`;
      return;
    }
    const body = await res.json();
    replaceRows(
      $('upstreams').tBodies[0],
      body.upstreams.map((u) => {
        const rate = u.errorRate;
        const rateCls = rate === null ? 'muted' : rate >= 0.5 ? 'bad' : rate > 0 ? 'warn' : 'ok';
        const last = u.lastError;
        const what = el('td', 'message', last ? last.message : '–');
        if (last) what.title = last.message;
        return row(
          [
            `${u.name} (${u.kind})`,
            breakerCell(u.breaker, u.kind),
            el('td', `num ${rateCls}`, rate === null ? '–' : `${(rate * 100).toFixed(rate < 0.1 ? 1 : 0)} %`),
            el('td', last ? 'bad' : 'muted', last ? String(last.status) : 'none'),
            el('td', u.errors > 0 ? 'num bad' : 'num', u.counted ? u.errors : '–'),
            el('td', 'num', u.counted ? u.requests : '–'),
            el('td', 'num', `${ms(u.latencyMs.p50)} / ${ms(u.latencyMs.p99)}`),
            el('td', 'num', ms(u.latencyMs.mean)),
            el('td', 'time', last ? when(last.time) : '–'),
            what,
          ],
          last ? 'failing' : '',
        );
      }),
    );
    $('upstreams-caption').textContent =
      `last ${span(body.windowS * 1000)} (the server's window, whatever the page's); errors: a 5xx answer, or none (the gateway answered 502/504)`;
  }

  // ---- wiring ----

  function start() {
    const reasons = $('f-reason');
    for (const r of REASONS) reasons.append(el('option', '', r));
    filtersFromUrl();
    for (const id of ['f-route', 'f-reason', 'f-group', 'f-since'])
      $(id).addEventListener('change', scheduleRender);
    $('f-lock').addEventListener('input', scheduleRender);
    $('f-clear').addEventListener('click', () => {
      $('f-route').value = '';
      $('f-reason').value = '';
      $('f-lock').value = '';
      scheduleRender();
    });
    $('l-prefix').addEventListener('input', () => {
      locks.cursor = null;
      void loadLocks();
    });
    $('l-first').addEventListener('click', () => {
      locks.cursor = null;
      void loadLocks();
    });
    $('l-next').addEventListener('click', () => {
      if (locks.next === null) return;
      locks.cursor = locks.next;
      void loadLocks();
    });
    $('key-use').addEventListener('click', useKey);
    $('api-key').addEventListener('keydown', (e) => {
      if (e.key === 'Enter') useKey();
    });
    $('key-forget').addEventListener('click', () => {
      storeKey('');
      refresh();
    });
    setInterval(() => void loadStatus().catch(() => undefined), STATUS_EVERY_MS);
    setInterval(() => void loadUpstreams().catch(() => undefined), UPSTREAMS_EVERY_MS);
    setInterval(() => void loadLocks().catch(() => undefined), LOCKS_EVERY_MS);
    setInterval(renderLocks, 1000);
    setInterval(scheduleRender, REDRAW_MS); // the window moves on, and "x s ago" with it
    refresh();
  }

  /** Loads everything again and (re)starts the stream: at start and after a new key. */
  function refresh() {
    $('key-forget').hidden = !apiKey;
    // What the last key showed is not shown under another one.
    if (stream) stream.abort();
    events = [];
    lastId = 0;
    locks.rows = [];
    locks.cursor = null;
    locks.shown = locks.asked + 1; // nor an answer to a listing asked for under it
    renderLocks();
    holders.clear();
    void loadStatus().catch(() => undefined);
    void loadUpstreams().catch(() => undefined);
    void loadLocks().catch(() => undefined);
    loadBacklog()
      .catch(() => undefined)
      .then(() => {
        render();
        follow();
      });
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
