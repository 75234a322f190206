// edgeflow hub dashboard. Plain JavaScript, no dependencies: it reads the
// hub's own API with relative URLs (so it works behind a path prefix) and
// keeps the page in step with it:
//   fleet table      <- GET v1/devices          (polled, following next)
//   window chart     <- GET v1/aggregates       (polled) + v1/stream (SSE:
//                       watermark, final and revised updates as they happen)
//   ingest           <- GET metrics             (Prometheus text, polled)
//   late events      <- GET v1/late             (polled)
// The chart's SVG carries the data it draws (data-* attributes) and the
// exact query it came from (data-query), so a test can compare the two.
'use strict';
(function () {
  const $ = (id) => document.getElementById(id);
  const SVGNS = 'http://www.w3.org/2000/svg';
  const POLL_DEVICES = 2000, POLL_CHART = 3000, POLL_METRICS = 2000, POLL_LATE = 4000;
  const ALERT_PAGE = 1000, MAX_ALERT_PAGES = 5, MAX_ALERT_ROWS = 500; // firing alerts read, and shown
  const DEVICE_PAGE = 1000, MAX_DEVICE_PAGES = 10; // GET v1/devices paging: up to 10,000 devices
  const RATE_POINTS = 90, MAX_CORRECTIONS = 50, CATCHING_UP_MS = 10000, CATCHING_UP_EVENTS = 20;
  // A buffer this full is shown as a warning (the example buffer rule's
  // threshold, docs/RULES.md).
  const BUFFER_WARN_FILL = 0.75;
  const ADHOC_WINDOWS = ['tumbling:10s', 'tumbling:1m', 'tumbling:5m'];

  const params = new URLSearchParams(location.search);
  // alerts_poll_ms: how often the firing alerts are re-read (default 10 s,
  // at least 1 s); between reads the stream's alert events update them.
  const POLL_ALERTS = Math.max(1000, Number(params.get('alerts_poll_ms')) || 10000);
  const state = {
    metric: params.get('metric') || 'temp',
    metricChosen: params.has('metric'),
    window: params.get('window') || '', // '' = the hub's first configured window
    windowName: '',                     // the name the hub answered with
    agg: params.get('agg') || 'avg',
    range: Number(params.get('range')) || 900000,
    windows: new Map(),                 // start_ms -> window JSON (group {})
    query: '',
    watermarkMs: 0,
    configured: new Set(),
    corrections: [],
    seenCorrections: new Set(),
    rate: [],                           // {t, v} events/s
    lastCounter: null,
    metricsKnown: new Set(),
    discovered: false,
    es: null,
    alerts: new Map(),                  // id -> firing alert
    alertSeen: new Map(),               // id -> latest revision the stream sent
    alertsMore: false,
  };

  // ---- read token -----------------------------------------------------
  // A hub started with a read token (http-read-token) answers 401 without
  // it. The user pastes it into the header's field; it lives in this tab's
  // sessionStorage only (never in a URL, a cookie or localStorage) and goes
  // with every API call as Authorization: Bearer.
  const TOKEN_KEY = 'edgeflow-read-token';
  function token() { try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch (e) { return ''; } }
  function authHeaders() { const t = token(); return t ? { Authorization: 'Bearer ' + t } : {}; }
  function apiFetch(path, opts) {
    const o = Object.assign({ cache: 'no-store' }, opts || {});
    o.headers = Object.assign({}, o.headers || {}, authHeaders());
    return fetch(path, o).then((r) => {
      if (r.status === 401) needToken();
      return r;
    });
  }
  function needToken() {
    const f = $('token-form');
    if (f) { f.hidden = false; f.classList.add('needed'); }
    setText('token-note', token() ? 'token refused' : 'this hub needs a read token');
  }

  // ---- helpers --------------------------------------------------------
  async function getJSON(path) {
    const r = await apiFetch(path);
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.error || (r.status + ' ' + r.statusText));
    return body;
  }
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function svg(tag, attrs) {
    const e = document.createElementNS(SVGNS, tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    return e;
  }
  function fmtNum(n) {
    if (n === undefined || n === null || Number.isNaN(n)) return '–';
    if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(2) + 'M';
    if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(1) + 'k';
    if (Number.isInteger(n)) return String(n);
    return n.toFixed(Math.abs(n) >= 100 ? 0 : 2);
  }
  function fmtPct(f) {
    const p = f * 100;
    if (p > 0 && p < 0.1) return '<0.1%';
    return (p > 0 && p < 10 ? p.toFixed(1) : p.toFixed(0)) + '%';
  }
  function fmtDur(ms) {
    const a = Math.abs(ms), s = ms < 0 ? '-' : '';
    if (a < 1) return s + (a * 1000).toFixed(0) + 'µs';
    if (a < 1000) return s + a.toFixed(a < 10 ? 1 : 0) + 'ms';
    if (a < 60e3) return s + (a / 1000).toFixed(a < 10e3 ? 2 : 1) + 's';
    if (a < 3600e3) return s + (a / 60e3).toFixed(1) + 'm';
    if (a < 86400e3) return s + (a / 3600e3).toFixed(1) + 'h';
    return s + (a / 86400e3).toFixed(1) + 'd';
  }
  function ago(iso) {
    const t = Date.parse(iso);
    if (!t || t < 86400e3) return '–'; // the zero time: never seen
    return fmtDur(Math.max(0, Date.now() - t)) + ' ago';
  }
  function hhmmss(ms) {
    return new Date(ms).toLocaleTimeString([], { hour12: false });
  }
  function emptyRow(tbody, cols, text) {
    const tr = el('tr');
    tr.append(el('td', { colspan: cols, class: 'muted' }, text));
    tbody.append(tr);
  }
  function setText(id, text) { const e = $(id); if (e.textContent !== text) e.textContent = text; }

  // ---- fleet ----------------------------------------------------------
  // fetchDevices follows GET v1/devices' next cursor, a page of
  // DEVICE_PAGE at a time, for at most MAX_DEVICE_PAGES pages: the table
  // and the summary cover up to 10,000 devices; more says some were left.
  async function fetchDevices() {
    const devs = [];
    let after = '';
    for (let page = 0; page < MAX_DEVICE_PAGES; page++) {
      const body = await getJSON('v1/devices?limit=' + DEVICE_PAGE + (after ? '&after=' + encodeURIComponent(after) : ''));
      for (const d of body.devices || []) devs.push(d);
      if (!body.next) return { devs, more: false };
      after = body.next;
    }
    return { devs, more: true };
  }
  let devicesLoading = false; // a slow walk is not started again by the next poll
  async function loadDevices() {
    if (devicesLoading) return;
    devicesLoading = true;
    let devs, more;
    try { ({ devs, more } = await fetchDevices()); } catch (e) { setText('fleet-note', 'error: ' + e.message); return; } finally { devicesLoading = false; }
    const tbody = el('tbody');
    let online = 0, backlog = 0;
    for (const d of devs) {
      const events = (d.streams || []).reduce((s, x) => s + (x.events || 0), 0);
      const gaps = (d.streams || []).reduce((s, x) => s + (x.gap_events || 0), 0);
      const reasons = {};
      for (const x of d.streams || []) for (const k in x.gap_reasons || {}) reasons[k] = (reasons[k] || 0) + x.gap_reasons[k];
      const bl = (d.backlog && d.backlog.events) || 0;
      // A few events are always in flight; more than CATCHING_UP_EVENTS
      // whose oldest is older than CATCHING_UP_MS means the device is
      // catching up after an outage. oldest_ns is device time: corrected
      // by the device's clock offset, as the hub's metrics do.
      const offMs = d.clock && d.clock.source !== 'none' ? d.clock.offset_ns / 1e6 : 0;
      const behind = bl > 0 && d.backlog.oldest_ns ? Date.now() - (d.backlog.oldest_ns / 1e6 + offMs) : 0;
      const catchingUp = bl > CATCHING_UP_EVENTS && behind > CATCHING_UP_MS;
      if (d.status === 'online') online++;
      backlog += bl;
      const buf = d.buffer;
      const tr = el('tr', { 'data-device': d.id, 'data-status': d.status, 'data-events': events, 'data-backlog': bl, 'data-gaps': gaps,
        'data-fill': buf ? buf.fill : '' });
      if (catchingUp && d.status === 'online') tr.className = 'catching-up';
      tr.append(el('td', {}, d.id));
      tr.append(el('td', { class: 'st-' + d.status, 'data-field': 'status' }, d.status));
      tr.append(el('td', { 'data-field': 'last-seen', title: d.last_seen }, ago(d.last_seen)));
      tr.append(el('td', { class: 'num', 'data-field': 'events' }, fmtNum(events)));
      const oldest = behind ? ' (oldest ' + fmtDur(behind) + ' old)' : '';
      tr.append(el('td', { class: 'num' + (catchingUp ? ' warn' : ''), 'data-field': 'backlog', title: (d.backlog ? d.backlog.bytes : 0) + ' bytes' + oldest }, fmtNum(bl)));
      // The agent's buffer: how close the device is to dropping events
      // while it cannot upload (reported with its online status).
      if (buf) {
        const rate = buf.fill_rate ? ', ' + (buf.fill_rate > 0 ? '+' : '') + fmtNum(Math.round(buf.fill_rate)) + ' B/s' : '';
        tr.append(el('td', { class: 'num' + (buf.fill >= BUFFER_WARN_FILL ? ' warn' : ''), 'data-field': 'buffer',
          title: fmtNum(buf.used_bytes) + ' of ' + fmtNum(buf.capacity_bytes) + ' bytes' + rate + ', reported ' + ago(buf.reported_at) }, fmtPct(buf.fill)));
      } else {
        tr.append(el('td', { class: 'num muted', 'data-field': 'buffer', title: 'the agent does not report its buffer' }, '–'));
      }
      const c = d.clock || {};
      const off = c.source === 'none' ? '–' : fmtDur(c.offset_ns / 1e6) + ' ± ' + fmtDur(c.uncertainty_ns / 1e6);
      tr.append(el('td', { 'data-field': 'offset', title: 'true time − device clock; drift ' + (c.drift_ppm || 0).toFixed(1) + ' ppm' }, off));
      tr.append(el('td', { 'data-field': 'method', class: c.method === 'UNTRUSTED' ? 'warn' : '' }, (c.method || '') + (c.source && c.source !== 'none' ? ' (' + c.source + ')' : '')));
      tr.append(el('td', { class: 'num' + (gaps > 0 ? ' warn' : ''), 'data-field': 'gaps', title: JSON.stringify(reasons) }, fmtNum(gaps)));
      tbody.append(tr);
    }
    if (!devs.length) emptyRow(tbody, 9, 'no device has reported yet');
    $('devices').replaceChild(tbody, $('devices').tBodies[0]);
    $('devices').setAttribute('data-count', devs.length);
    setText('sum-devices', String(devs.length) + (more ? '+' : ''));
    setText('sum-online', online + ' online' + (more ? ' (of the first ' + devs.length + ')' : ''));
    setText('sum-backlog', fmtNum(backlog) + (more ? '+' : ''));
    setText('fleet-note', (more ? 'first ' + devs.length + ' devices by id · ' : '') + 'updated ' + hhmmss(Date.now()));
    if (!state.discovered && devs.length) discoverMetrics(devs);
  }

  // discoverMetrics reads a minute of one device's events to fill the
  // metric list (the API has no list of metrics).
  async function discoverMetrics(devs) {
    state.discovered = true;
    const d = devs.find((x) => x.status === 'online') || devs[0];
    const to = Date.now(), from = to - 60000;
    try {
      const body = await getJSON('v1/events?device=' + encodeURIComponent(d.id) + '&from=' + from + '&to=' + to + '&limit=500');
      for (const e of body.events || []) addMetric(e.metric);
    } catch (e) { state.discovered = false; return; }
    if (!state.metricChosen && state.metricsKnown.size && !state.metricsKnown.has(state.metric)) {
      state.metric = [...state.metricsKnown].sort()[0];
      $('metric').value = state.metric;
      restartChart();
    }
  }
  function addMetric(name) {
    if (!name || state.metricsKnown.has(name)) return;
    state.metricsKnown.add(name);
    $('metrics').append(el('option', { value: name }));
  }

  // ---- chart ----------------------------------------------------------
  function chartQuery() {
    const to = Math.ceil(Date.now() / 1000) * 1000 + 10000;
    const from = to - state.range;
    let q = 'v1/aggregates?metric=' + encodeURIComponent(state.metric) + '&from=' + from + '&to=' + to + '&aggs=count,avg,min,max,p99';
    if (state.window) q += '&window=' + encodeURIComponent(state.window);
    return q;
  }

  async function loadChart() {
    const q = chartQuery();
    let body;
    try { body = await getJSON(q); } catch (e) { setText('chart-status', e.message); return; }
    if (body.metric !== state.metric) return; // the metric changed meanwhile
    state.query = q;
    state.windowName = body.window;
    if (!state.window || !body.window.includes(':')) addConfigured(body.window);
    const next = new Map();
    const first = state.windows.size === 0;
    for (const w of body.windows || []) {
      const prev = state.windows.get(w.start_ms);
      if (prev && w.revision > prev.revision) noteCorrection(body.window, w, prev);
      else if (first && w.revision > 0) noteCorrection(body.window, w, undefined, true);
      next.set(w.start_ms, w);
    }
    state.windows = next;
    setText('chart-status', (body.windows || []).length + ' windows of ' + body.window);
    drawChart();
  }

  function addConfigured(name) {
    if (!name || name.includes(':') || state.configured.has(name)) return;
    state.configured.add(name);
    fillWindowSelect();
  }
  function fillWindowSelect() {
    const s = $('window');
    const want = state.window || state.windowName;
    s.textContent = '';
    const names = [...state.configured].concat(ADHOC_WINDOWS.filter((w) => !state.configured.has(w)));
    if (!names.length) names.push('');
    for (const n of names) s.append(el('option', { value: n }, n || 'configured'));
    if (want && !names.includes(want)) s.append(el('option', { value: want }, want));
    s.value = want;
  }

  // noteCorrection records a window's revision; earlier ones (found on the
  // first load, before the page watched) go after the live ones.
  function noteCorrection(window, w, prev, earlier) {
    const key = window + '@' + w.start_ms + '#' + w.revision;
    if (state.seenCorrections.has(key)) return;
    state.seenCorrections.add(key);
    const before = prev ? prev.count : undefined;
    const c = { at: earlier ? 0 : Date.now(), window, start: w.start_ms, end: w.end_ms, revision: w.revision, late: w.late, count: w.count, before };
    if (earlier) state.corrections.push(c); else state.corrections.unshift(c);
    state.corrections.length = Math.min(state.corrections.length, MAX_CORRECTIONS);
    if (!earlier) flash.set(w.start_ms, Date.now());
    drawCorrections();
  }
  const flash = new Map(); // start_ms -> when it was corrected

  function drawCorrections() {
    const ol = $('corrections');
    ol.textContent = '';
    if (!state.corrections.length) { ol.append(el('li', { class: 'muted empty' }, 'none yet')); return; }
    for (const c of state.corrections) {
      const delta = c.before !== undefined ? ' (count ' + c.before + ' → ' + c.count + ')' : ' (count ' + c.count + ')';
      ol.append(el('li', { 'data-start-ms': c.start, 'data-revision': c.revision },
        (c.at ? hhmmss(c.at) : 'before this page') + ' — window ' + hhmmss(c.start) + '–' + hhmmss(c.end) + ' revised to r' + c.revision + ': ' + c.late + ' late events in total' + delta));
    }
  }

  let drawPending = false;
  function drawChart() {
    if (drawPending) return;
    drawPending = true;
    requestAnimationFrame(() => { drawPending = false; renderChart(); });
  }

  function renderChart() {
    const root = $('chart');
    const W = root.clientWidth || 600, H = root.clientHeight || 240;
    const pad = { l: 44, r: 8, t: 8, b: 20 };
    root.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    root.setAttribute('data-query', state.query);
    root.setAttribute('data-window', state.windowName);
    root.textContent = '';
    const ws = [...state.windows.values()].sort((a, b) => a.start_ms - b.start_ms);
    const val = (w) => state.agg === 'count' ? w.count : w[state.agg];
    const vals = ws.map(val).filter((v) => typeof v === 'number');
    if (!ws.length) {
      const t = svg('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' });
      t.textContent = 'no windows of ' + state.metric + ' in this range yet';
      root.append(t);
      return;
    }
    let lo = Math.min(0, ...vals), hi = Math.max(...vals, 1e-9);
    if (state.agg !== 'count' && vals.length) { lo = Math.min(...vals); hi = Math.max(...vals); const m = (hi - lo) * 0.1 || 1; lo -= m; hi += m; }
    const t1 = state.query ? Number(/to=(\d+)/.exec(state.query)[1]) : Date.now();
    const t0 = t1 - state.range;
    const x = (t) => pad.l + (t - t0) / (t1 - t0) * (W - pad.l - pad.r);
    const y = (v) => H - pad.b - (v - lo) / (hi - lo || 1) * (H - pad.t - pad.b);
    // axes and labels
    root.append(svg('line', { class: 'axis', x1: pad.l, x2: W - pad.r, y1: H - pad.b, y2: H - pad.b }));
    for (const v of [lo, (lo + hi) / 2, hi]) {
      const t = svg('text', { x: pad.l - 4, y: y(v) + 3, 'text-anchor': 'end' });
      t.textContent = fmtNum(v);
      root.append(t);
      root.append(svg('line', { class: 'axis', x1: pad.l, x2: W - pad.r, y1: y(v), y2: y(v) }));
    }
    const ticks = W < 500 ? 2 : 4;
    for (let i = 0; i <= ticks; i++) {
      const tm = t0 + (t1 - t0) * i / ticks;
      const t = svg('text', { x: x(tm), y: H - 5, 'text-anchor': i === 0 ? 'start' : i === ticks ? 'end' : 'middle' });
      t.textContent = hhmmss(tm);
      root.append(t);
    }
    const now = Date.now();
    for (const w of ws) {
      const v = val(w);
      if (typeof v !== 'number') continue;
      const x0 = Math.max(pad.l, x(w.start_ms)), x1 = Math.min(W - pad.r, x(w.end_ms));
      if (x1 <= x0) continue;
      const base = state.agg === 'count' ? 0 : lo;
      const kind = !w.final ? 'provisional' : w.revision > 0 ? 'revised' : 'final';
      const f = flash.get(w.start_ms);
      const r = svg('rect', {
        class: kind + (f && now - f < 3000 ? ' flash' : ''),
        x: x0 + 0.5, width: Math.max(1, x1 - x0 - 1), y: Math.min(y(v), y(base)), height: Math.max(1, Math.abs(y(base) - y(v))),
        'data-start-ms': w.start_ms, 'data-end-ms': w.end_ms, 'data-count': w.count, 'data-value': v,
        'data-final': w.final, 'data-revision': w.revision, 'data-late': w.late, 'data-behind': w.behind,
      });
      const title = svg('title');
      title.textContent = hhmmss(w.start_ms) + '–' + hhmmss(w.end_ms) + ': ' + state.agg + ' ' + fmtNum(v) + ', count ' + w.count +
        (w.final ? ', final' : ', provisional (' + w.behind + ' streams behind)') + (w.revision ? ', revision ' + w.revision + ' (' + w.late + ' late)' : '');
      r.append(title);
      root.append(r);
    }
    if (state.watermarkMs >= t0 && state.watermarkMs <= t1) {
      const xm = x(state.watermarkMs);
      root.append(svg('line', { class: 'wm', x1: xm, x2: xm, y1: pad.t, y2: H - pad.b, 'data-watermark-ms': state.watermarkMs }));
    }
  }

  // ---- live stream ----------------------------------------------------
  let refreshTimer = 0;
  function refreshSoon() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(loadChart, 400);
  }

  // EventSource cannot send a header: with a token, the stream is read
  // with fetch and parsed here (the same events, the same handlers).
  function fetchEventSource(url) {
    const ctl = new AbortController();
    const es = { listeners: {}, onopen: null, onerror: null, closed: false,
      addEventListener(name, fn) { (this.listeners[name] = this.listeners[name] || []).push(fn); },
      close() { this.closed = true; ctl.abort(); } };
    const dispatch = (name, data) => { for (const fn of es.listeners[name] || []) fn({ data }); };
    (async () => {
      try {
        const r = await apiFetch(url, { signal: ctl.signal, headers: { Accept: 'text/event-stream' } });
        if (!r.ok || !r.body) throw new Error(r.status + ' ' + r.statusText);
        if (es.onopen) es.onopen();
        const reader = r.body.getReader(), dec = new TextDecoder();
        let buf = '', name = 'message', data = [];
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += dec.decode(value, { stream: true });
          let i;
          while ((i = buf.indexOf('\n')) >= 0) {
            const line = buf.slice(0, i).replace(/\r$/, '');
            buf = buf.slice(i + 1);
            if (line === '') { if (data.length) dispatch(name, data.join('\n')); name = 'message'; data = []; }
            else if (line.startsWith('event:')) name = line.slice(6).trim();
            else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
          }
        }
        throw new Error('stream ended');
      } catch (e) {
        if (es.closed) return;
        if (es.onerror) es.onerror(e);
        setTimeout(() => { if (!es.closed && state.es === es) openStream(); }, 2000);
      }
    })();
    return es;
  }

  function openStream() {
    if (state.es) state.es.close();
    const url = 'v1/stream?metric=' + encodeURIComponent(state.metric) + '&aggs=count,avg,min,max,p99';
    const es = token() ? fetchEventSource(url) : new EventSource(url);
    state.es = es;
    const conn = $('conn');
    es.onopen = () => { conn.textContent = 'live'; conn.className = 'pill live'; };
    es.onerror = () => { conn.textContent = 'reconnecting'; conn.className = 'pill down'; };
    es.addEventListener('watermark', (ev) => {
      const u = JSON.parse(ev.data);
      state.watermarkMs = u.watermark_ms;
      setText('watermark', 'watermark ' + hhmmss(u.watermark_ms) + ' (' + fmtDur(Date.now() - u.watermark_ms) + ' behind)');
      drawChart();
    });
    const onWindow = (kind) => (ev) => {
      const u = JSON.parse(ev.data);
      addConfigured(u.window);
      if (u.window !== state.windowName || u.metric !== state.metric) {
        if (kind === 'revised') refreshSoon(); // another window of this metric changed: ours may have too
        return;
      }
      for (const w of u.windows || []) {
        if (w.group && Object.keys(w.group).length) continue;
        const prev = state.windows.get(w.start_ms);
        if (kind === 'revised') noteCorrection(u.window, w, prev);
        state.windows.set(w.start_ms, w);
      }
      drawChart();
    };
    es.addEventListener('final', onWindow('final'));
    es.addEventListener('revised', onWindow('revised'));
    es.addEventListener('alert', onAlert);
    es.addEventListener('dropped', () => { es.close(); setTimeout(() => { openStream(); loadAlerts(); }, 1000); });
  }

  function restartChart() {
    state.windows = new Map();
    state.corrections = [];
    state.seenCorrections.clear();
    drawCorrections();
    openStream();
    loadChart();
  }

  // ---- ingest (Prometheus text) ----------------------------------------
  function sumMetric(text, name) {
    let sum = 0, found = false;
    const re = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/;
    for (const line of text.split('\n')) {
      if (!line || line[0] === '#') continue;
      const m = re.exec(line);
      if (m && m[1] === name) { sum += Number(m[3]); found = true; }
    }
    return found ? sum : undefined;
  }

  async function loadMetrics() {
    let text;
    try {
      const r = await apiFetch('metrics');
      if (!r.ok) throw new Error(r.status + ' ' + r.statusText);
      text = await r.text();
    } catch (e) { setText('ingest-note', 'metrics: ' + e.message); return; }
    const now = Date.now();
    const events = sumMetric(text, 'edgeflow_hub_events_applied_total');
    if (events !== undefined) {
      if (state.lastCounter && now > state.lastCounter.t) {
        const v = Math.max(0, (events - state.lastCounter.v) / ((now - state.lastCounter.t) / 1000));
        state.rate.push({ t: now, v });
        if (state.rate.length > RATE_POINTS) state.rate.shift();
        setText('sum-rate', fmtNum(Math.round(v)));
      }
      state.lastCounter = { t: now, v: events };
      setText('ingest-note', fmtNum(events) + ' events applied in total');
    }
    const rejected = sumMetric(text, 'edgeflow_hub_rejected_batches_total');
    const dropped = sumMetric(text, 'edgeflow_hub_dropped_messages_total');
    setText('sum-rejected', fmtNum(rejected || 0));
    setText('sum-dropped', 'batches; ' + fmtNum(dropped || 0) + ' messages dropped');
    drawRate();
  }

  function drawRate() {
    const root = $('throughput');
    const W = root.clientWidth || 600, H = root.clientHeight || 140;
    root.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    root.textContent = '';
    const pts = state.rate;
    const hi = Math.max(1, ...pts.map((p) => p.v)) * 1.1;
    const pad = { l: 44, r: 8, t: 6, b: 6 };
    root.append(svg('line', { class: 'axis', x1: pad.l, x2: W - pad.r, y1: H - pad.b, y2: H - pad.b }));
    for (const v of [0, hi / 2, hi]) {
      const t = svg('text', { x: pad.l - 4, y: H - pad.b - v / hi * (H - pad.t - pad.b) + 3, 'text-anchor': 'end' });
      t.textContent = fmtNum(hi >= 10 ? Math.round(v) : Number(v.toFixed(1)));
      root.append(t);
    }
    if (pts.length < 2) return;
    const step = (W - pad.l - pad.r) / (RATE_POINTS - 1);
    const off = RATE_POINTS - pts.length;
    const coords = pts.map((p, i) => (pad.l + (off + i) * step).toFixed(1) + ',' + (H - pad.b - p.v / hi * (H - pad.t - pad.b)).toFixed(1));
    root.append(svg('polyline', { points: coords.join(' '), 'data-last': pts[pts.length - 1].v }));
  }

  // ---- alerts ---------------------------------------------------------
  // The firing alerts come from GET v1/alerts?state=firing (paged, at
  // most MAX_ALERT_PAGES pages, re-read every POLL_ALERTS) and each
  // "alert" event of v1/stream updates them between reads: a firing
  // revision adds or replaces its alert, any other state removes it. A
  // read never undoes a newer revision the stream already delivered.
  let alertsLoading = false;
  async function loadAlerts() {
    if (alertsLoading) return;
    alertsLoading = true;
    const got = new Map();
    let more = false;
    try {
      let cursor = '';
      for (let page = 0; ; page++) {
        if (page === MAX_ALERT_PAGES) { more = true; break; }
        const r = await apiFetch('v1/alerts?state=firing&limit=' + ALERT_PAGE + (cursor ? '&cursor=' + encodeURIComponent(cursor) : ''));
        if (r.status === 404) { setText('alerts-note', 'this hub evaluates no rules (they need aggregate.enabled)'); setText('sum-alerts', '–'); return; }
        const body = await r.json().catch(() => ({}));
        if (!r.ok) throw new Error(body.error || (r.status + ' ' + r.statusText));
        for (const a of body.alerts || []) got.set(a.id, a);
        if (!body.next) break;
        cursor = body.next;
      }
    } catch (e) { setText('alerts-note', 'error: ' + e.message); return; } finally { alertsLoading = false; }
    for (const [id, seen] of state.alertSeen) {
      const a = got.get(id);
      if (a && a.revision >= seen.revision) continue;
      if (seen.state === 'firing') got.set(id, seen); else got.delete(id);
    }
    state.alertSeen.clear();
    state.alerts = got;
    state.alertsMore = more;
    drawAlerts();
  }
  function onAlert(ev) {
    let a;
    try { a = JSON.parse(ev.data); } catch (e) { return; }
    const seen = state.alertSeen.get(a.id);
    if (seen && seen.revision >= a.revision) return;
    if (state.alertSeen.size >= 10000) state.alertSeen.clear(); // the next read reconciles
    state.alertSeen.set(a.id, a);
    const cur = state.alerts.get(a.id);
    if (cur && cur.revision >= a.revision) return;
    if (a.state === 'firing') state.alerts.set(a.id, a); else state.alerts.delete(a.id);
    drawAlerts();
  }
  function drawAlerts() {
    const all = [...state.alerts.values()].sort((a, b) => Date.parse(b.start) - Date.parse(a.start) || (a.id < b.id ? -1 : 1));
    const tbody = el('tbody');
    for (const a of all.slice(0, MAX_ALERT_ROWS)) {
      const tr = el('tr', { 'data-id': a.id, 'data-rule': a.rule, 'data-group': a.group, 'data-value': a.value, 'data-revision': a.revision,
        'data-start': a.start, 'data-end': a.end || '' });
      tr.append(el('td', {}, a.rule));
      tr.append(el('td', {}, a.group || '(fleet)'));
      tr.append(el('td', { title: a.start }, fmtTime(a.start)));
      tr.append(el('td', { title: a.end || 'still open' }, a.end ? fmtTime(a.end) : '–'));
      tr.append(el('td', { class: 'num', title: String(a.value) }, fmtNum(a.value)));
      tr.append(el('td', { class: 'num' }, String(a.revision)));
      tr.append(el('td', { title: a.fired_at }, ago(a.fired_at)));
      tbody.append(tr);
    }
    if (!all.length) emptyRow(tbody, 7, 'none firing');
    $('alerts').replaceChild(tbody, $('alerts').tBodies[0]);
    $('alerts').setAttribute('data-count', all.length);
    const n = String(all.length) + (state.alertsMore ? '+' : '');
    setText('sum-alerts', n);
    $('sum-alerts').classList.toggle('firing', all.length > 0);
    setText('alerts-note', (all.length > MAX_ALERT_ROWS ? 'newest ' + MAX_ALERT_ROWS + ' of ' + n + ' · ' : '') + 'updated ' + hhmmss(Date.now()));
  }
  // fmtTime shows a time of today as hh:mm:ss, others with their date.
  function fmtTime(iso) {
    const t = Date.parse(iso);
    if (!t) return '–';
    const d = new Date(t);
    return d.toDateString() === new Date().toDateString() ? hhmmss(t) : d.toLocaleString([], { hour12: false });
  }

  // ---- late log -------------------------------------------------------
  async function loadLate() {
    let body;
    try { body = await getJSON('v1/late?limit=50'); } catch (e) { return; }
    setText('sum-late', fmtNum(body.total));
    const tbody = el('tbody');
    const evs = (body.events || []).slice().reverse();
    for (const e of evs) {
      addMetric(e.metric);
      const tr = el('tr', { 'data-offset': e.offset });
      tr.append(el('td', { title: e.arrived }, hhmmss(Date.parse(e.arrived))));
      tr.append(el('td', {}, e.device));
      tr.append(el('td', {}, e.metric));
      tr.append(el('td', { class: 'num' }, fmtNum(e.value)));
      tr.append(el('td', { title: e.time }, hhmmss(e.time_ms)));
      tr.append(el('td', { class: 'num' }, fmtDur(e.watermark_ms - e.time_ms)));
      tbody.append(tr);
    }
    if (!evs.length) emptyRow(tbody, 6, 'none: every event so far fell within late_horizon');
    $('late').replaceChild(tbody, $('late').tBodies[0]);
    $('late').setAttribute('data-total', body.total);
  }

  // ---- wiring ---------------------------------------------------------
  function every(ms, fn) { fn(); setInterval(fn, ms); }

  $('agg').value = state.agg;
  $('range').value = String(state.range);
  if (!$('range').value) $('range').value = '900000';
  $('metric').value = state.metric;
  fillWindowSelect();
  $('chart-form').addEventListener('submit', (e) => e.preventDefault());
  $('metric').addEventListener('change', () => {
    const m = $('metric').value.trim();
    if (!m || m === state.metric) return;
    state.metric = m;
    state.metricChosen = true;
    restartChart();
  });
  $('window').addEventListener('change', () => { state.window = $('window').value; state.windows = new Map(); loadChart(); });
  $('agg').addEventListener('change', () => { state.agg = $('agg').value; drawChart(); });
  $('range').addEventListener('change', () => { state.range = Number($('range').value); loadChart(); });
  window.addEventListener('resize', () => { drawChart(); drawRate(); });

  $('token-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const t = $('token').value.trim();
    try { if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY); } catch (err) { /* storage off */ }
    $('token').value = '';
    setText('token-note', t ? 'token set for this tab' : 'token cleared');
    restartChart();
    loadDevices(); loadMetrics(); loadLate(); loadAlerts();
  });
  if (token()) setText('token-note', 'token set for this tab');

  openStream();
  every(POLL_DEVICES, loadDevices);
  every(POLL_CHART, loadChart);
  every(POLL_METRICS, loadMetrics);
  every(POLL_LATE, loadLate);
  every(POLL_ALERTS, loadAlerts);
  setInterval(drawChart, 1000); // let correction flashes fade
})();
