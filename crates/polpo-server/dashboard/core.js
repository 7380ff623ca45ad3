// Polpo dashboard: plain script over the REST API, no build step, no dependencies. Classic
// scripts loaded in order, sharing their top-level names: core.js (these helpers, the API key,
// the live event feed), work.js (tasks, missions), loops.js (approvals, loop runs and their
// traces), app.js (the other views and the router, last because it lists every view).
//
// Every string from the server or a model is rendered as text (text nodes, textContent), never
// parsed as markup. The API key lives in this tab's sessionStorage and travels only in the
// Authorization header, never in a URL. API paths are written as the OpenAPI document spells
// them ('/api/v1/agents/{id}'), so a test can check each one against the server's route table.
'use strict';

const KEY = 'polpo.apiKey';
const $ = (id) => document.getElementById(id);
const state = { agents: [], chat: { agent: '', session: null, run: null, durable: false, controller: null }, run: null };

// ---- DOM and HTTP helpers -------------------------------------------------------------------

/** An element with properties (`dataset` fills data-* attributes) and children (nested arrays
 * flattened); strings become text nodes. */
function el(tag, props, ...children) {
  const { dataset, ...rest } = props || {};
  const node = Object.assign(document.createElement(tag), rest);
  Object.assign(node.dataset, dataset || {});
  for (const c of children.flat(Infinity)) if (c != null && c !== false) node.append(c instanceof Node ? c : String(c));
  return node;
}

/** A definition list of the rows that have a value. */
function facts(rows) {
  return el('dl', {}, rows.filter(([, v]) => v != null && v !== '').map(([k, v]) => [el('dt', {}, k), el('dd', {}, String(v))]));
}

function json(value) {
  return JSON.stringify(value, null, 2);
}

function short(value, max = 300) {
  const s = typeof value === 'string' ? value : JSON.stringify(value);
  return s && s.length > max ? s.slice(0, max) + '…' : s;
}

/** Replaces `target`'s children, skipping absent ones (null, undefined, false) as `el` does. */
function render(target, ...children) {
  target.replaceChildren(...children.flat(Infinity).filter((c) => c != null && c !== false));
}

/** A rows list, or one muted row saying it is empty. */
function fill(list, rows, empty) {
  list.replaceChildren(...(rows.length ? rows : [el('li', { className: 'muted' }, empty)]));
}

function notice(message) {
  $('notice').textContent = message || '';
  $('notice').hidden = !message;
}

/** A route template filled with URL-encoded parameters, plus the non-empty query values. */
function path(template, params, query) {
  const p = template.replace(/\{(\w+)\}/g, (_, k) => encodeURIComponent(params[k]));
  const q = new URLSearchParams(Object.entries(query || {}).filter(([, v]) => v != null && v !== ''));
  return q.toString() ? p + '?' + q : p;
}

/** fetch with the key; a 401 asks for a key, any other failure throws the server's message. A
 * read refused `429` (the key's rate limit) is asked again once, after the server's
 * `Retry-After` (at most 10 s): a view reloaded by a burst of live events catches up by itself. */
async function request(method, template, { params, query, body, headers, signal } = {}, retried = false) {
  const h = new Headers(headers);
  const key = sessionStorage.getItem(KEY);
  if (key) h.set('authorization', 'Bearer ' + key);
  if (body !== undefined) h.set('content-type', 'application/json');
  const r = await fetch(path(template, params, query), { method, headers: h, signal, body: body === undefined ? undefined : JSON.stringify(body) });
  if (r.status === 429 && method === 'GET' && !retried) {
    const wait = Math.min(Math.max(Number(r.headers.get('retry-after')) || 1, 1), 10);
    await new Promise((done) => setTimeout(done, wait * 1000));
    return request(method, template, { params, query, body, headers, signal }, true);
  }
  if (r.status === 401) {
    askForKey(key ? 'The API key was refused.' : '');
    throw Object.assign(new Error('API key required'), { unauthorized: true });
  }
  if (!r.ok) throw Object.assign(new Error(await failure(r)), { status: r.status });
  return r;
}

/** The REST envelope `{ok:false, error, code}` or the OpenAI `{error:{message, code}}`. */
async function failure(r) {
  const text = await r.text();
  try {
    const body = JSON.parse(text);
    const e = body.error;
    const message = typeof e === 'string' ? e : e && e.message;
    return `${r.status} ${body.code || (e && e.code) || ''}: ${message || text}`;
  } catch {
    return `${r.status}: ${text}`;
  }
}

async function data(template, params, query) {
  return (await (await request('GET', template, { params, query })).json()).data;
}

/** Calls `onFrame({id, event, data})` for each server-sent event of a fetch response. */
async function readSse(response, onFrame) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n/g, '\n');
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const frame = { id: null, event: 'message', data: [] };
      for (const line of buffer.slice(0, end).split('\n')) {
        const i = line.indexOf(':');
        if (i === 0) continue; // comment (keep-alive ping)
        const field = i < 0 ? line : line.slice(0, i);
        const v = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
        if (field === 'data') frame.data.push(v);
        else if (field === 'event') frame.event = v;
        else if (field === 'id') frame.id = v;
      }
      buffer = buffer.slice(end + 2);
      if (frame.data.length) onFrame({ ...frame, data: frame.data.join('\n') });
    }
  }
}

/** Runs an async view action, showing its failure (a missing key shows the key form instead). */
function guard(action) {
  return (...args) => action(...args).catch((e) => { if (!e.unauthorized && e.name !== 'AbortError') notice(e.message); });
}

// ---- API key --------------------------------------------------------------------------------

function askForKey(why) {
  $('key-form').hidden = false;
  $('key-forget').hidden = true;
  notice(why);
  $('key-input').focus();
}

$('key-form').addEventListener('submit', (e) => {
  e.preventDefault();
  sessionStorage.setItem(KEY, $('key-input').value.trim());
  $('key-input').value = '';
  $('key-form').hidden = true;
  $('key-forget').hidden = false;
  notice('');
  route();
});

$('key-forget').addEventListener('click', () => {
  sessionStorage.removeItem(KEY);
  location.reload();
});


// ---- The live event feed --------------------------------------------------------------------

/** The page's one connection to `/api/v1/events` (unfiltered; each listener picks its names). */
const live = { controller: null, last: '0', listeners: new Set() };

/** A name glob (`task:*`) as an anchored regular expression; only `*` is special. */
function globRegex(glob) {
  return new RegExp('^' + glob.split('*').map((s) => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.*') + '$');
}

/** Calls `fn(frame)` for every live event whose name matches one of `globs`. */
function onLive(globs, fn) {
  const patterns = globs.map(globRegex);
  live.listeners.add((f) => { if (patterns.some((p) => p.test(f.event))) fn(f); });
}

function liveState(text) {
  $('events-state').textContent = text;
}

/** Follows the feed (once, however many views want it), resuming after the last id seen when
 * the connection drops; the first connection replays the events the server still keeps. */
async function connectLive() {
  if (live.controller) return;
  const controller = (live.controller = new AbortController());
  while (!controller.signal.aborted) {
    try {
      const r = await request('GET', '/api/v1/events', { headers: { 'last-event-id': live.last }, signal: controller.signal });
      liveState('live');
      await readSse(r, (f) => {
        if (f.id) live.last = f.id;
        for (const listener of live.listeners) listener(f);
      });
    } catch (e) {
      if (controller.signal.aborted || e.unauthorized) break;
      if (e.status < 500) { notice(e.message); break; } // a refused feed (403) does not get better by retrying
      liveState('reconnecting: ' + e.message);
    }
    if (!controller.signal.aborted) await new Promise((done) => setTimeout(done, 2000));
  }
  if (live.controller === controller) {
    live.controller = null;
    liveState('disconnected');
  }
}

/** `load` now, and when asked again while it runs, once more after it: a burst of events costs
 * two loads, not one per event. Failures show as the page's notice. */
function coalesce(load) {
  let running = null;
  let again = false;
  return () => {
    if (running) { again = true; return running; }
    running = (async () => {
      try {
        do { again = false; await load(); } while (again);
      } finally {
        running = null;
      }
    })().catch((e) => { if (!e.unauthorized) notice(e.message); });
    return running;
  };
}

/** The view the address shows (`#missions/m1` → `missions`). */
function currentView() {
  return location.hash.slice(1).split('/')[0];
}
