// Polpo dashboard: agents, sessions, chat, events, run journals, schedules, and the router
// that shows one view at a time (see core.js for the helpers; loaded last, after every view).
'use strict';

// ---- Agents ---------------------------------------------------------------------------------

function names(list) {
  if (list === undefined) return 'not set (defaults)';
  return list.length ? list.join(', ') : 'none';
}

async function loadAgents(selected) {
  state.agents = await data('/api/v1/agents');
  const options = () => state.agents.map((a) => el('option', { value: a.id }, a.id));
  const chatAgent = $('chat-agent').value || state.chat.agent;
  $('chat-agent').replaceChildren(...options());
  if (chatAgent) $('chat-agent').value = chatAgent;
  const sessionsAgent = $('sessions-agent').value;
  $('sessions-agent').replaceChildren(el('option', { value: '' }, 'all'), ...options());
  $('sessions-agent').value = sessionsAgent;
  $('agent-list').replaceChildren(...state.agents.map((a) => el('li', { className: a.id === selected ? 'selected' : '' },
    el('a', { href: '#agents/' + encodeURIComponent(a.id) }, a.id), ' ', el('span', { className: 'muted' }, (a.config && a.config.role) || ''))));
  if (!state.agents.length) $('agent-list').append(el('li', { className: 'muted' }, 'No agents: add one under .polpo/agents/.'));
  if (selected) await showAgent(selected);
}

async function showAgent(id) {
  const [a, skills] = await Promise.all([data('/api/v1/agents/{id}', { id }), data('/api/v1/skills')]);
  const c = a.config || {};
  const mine = skills.filter((s) => (s.assignedTo || []).includes(id));
  $('agent-detail').replaceChildren(
    el('h2', {}, a.id),
    facts([
      ['Role', c.role],
      ['Model', typeof c.model === 'string' ? c.model : c.model && JSON.stringify(c.model)],
      ['Tools', names(c.allowedTools)],
      ['Chat tools', c.chat && c.chat.allowedTools && names(c.chat.allowedTools)],
      ['Hooks', c.hooks && names(c.hooks)],
      ['Skills', names(mine.map((s) => s.name + (s.description ? ` (${s.description})` : '')))],
      ['Max turns', c.maxTurns],
      ['File', a.file],
      ['Revision', a.revision],
    ]),
    el('button', { type: 'button', onclick: () => openChat(a.id, null) }, 'Chat with ' + a.id),
    el('h3', {}, 'Instructions'),
    el('pre', {}, a.instructions || ''),
    el('details', {}, el('summary', {}, 'agent.json'), el('pre', {}, json(c))),
  );
}

// ---- Sessions -------------------------------------------------------------------------------

function contentText(content) {
  if (content == null) return '';
  if (typeof content === 'string') return content;
  return content.map((p) => (p.type === 'text' ? p.text : `[${p.type}]`)).join('\n');
}

/** One stored message: role, reasoning, text, tool calls. */
function messageView(m) {
  const who = m.role + (m.name ? ` (${m.name})` : '') + (m.tool_call_id ? ` → ${m.tool_call_id}` : '');
  return el('div', { className: 'msg ' + m.role },
    el('div', { className: 'who' }, who),
    m.reasoning && el('details', {}, el('summary', {}, 'thinking'), el('pre', {}, m.reasoning)),
    (m.tool_calls || []).map((t) => el('div', { className: 'tool' }, `${t.name}(${short(t.arguments)})`)),
    el('div', { className: 'text' }, contentText(m.content)));
}

async function loadSessions(selected, cursor) {
  const page = await data('/api/v1/chat/sessions', {}, { agent: $('sessions-agent').value, limit: 50, cursor });
  const items = page.sessions.map((s) => el('li', { className: s.id === selected ? 'selected' : '' },
    el('a', { href: '#sessions/' + encodeURIComponent(s.id) }, s.title || s.id),
    el('div', { className: 'muted' }, `${s.agent} · ${s.messageCount ?? '?'} messages · ${new Date(s.updatedAt).toLocaleString()}`)));
  if (cursor) $('session-list').append(...items);
  else $('session-list').replaceChildren(...items);
  if (!cursor && !items.length) $('session-list').append(el('li', { className: 'muted' }, 'No sessions yet.'));
  $('sessions-more').hidden = !page.nextCursor;
  $('sessions-more').onclick = guard(() => loadSessions(selected, page.nextCursor));
  if (selected && !cursor) await showSession(selected);
}

async function showSession(id) {
  const { session, messages } = await data('/api/v1/chat/sessions/{id}', { id });
  $('session-detail').replaceChildren(
    el('h2', {}, session.title || session.id),
    facts([['Id', session.id], ['Agent', session.agent], ['User', session.user], ['Created', session.createdAt], ['Updated', session.updatedAt]]),
    el('button', { type: 'button', onclick: () => openChat(session.agent, session.id, messages) }, 'Continue in chat'),
    ...messages.map(messageView));
}

// ---- Chat -----------------------------------------------------------------------------------

function openChat(agent, session, messages) {
  state.chat.agent = agent;
  state.chat.session = session;
  state.chat.run = null;
  $('chat-agent').value = agent;
  $('chat-log').replaceChildren(...(messages || []).map(messageView));
  chatIds();
  location.hash = '#chat';
}

function chatIds() {
  const { session, run, durable } = state.chat;
  $('chat-ids').replaceChildren(session ? `session ${session}` : 'new session', ...(run && durable ? [' · ', el('a', { href: '#runs/' + encodeURIComponent(run) }, `run ${run}`)] : []));
}

/** The assistant's answer as it streams: text deltas, thinking, server tool lifecycle. */
function answerView() {
  const text = el('div', { className: 'text' });
  const thinking = el('pre');
  const thinkingBox = el('details', { hidden: true }, el('summary', {}, 'thinking'), thinking);
  const tools = el('div');
  const toolRows = new Map();
  const foot = el('div', { className: 'who' });
  const box = el('div', { className: 'msg assistant' }, el('div', { className: 'who' }, state.chat.agent), thinkingBox, tools, text, foot);
  const tool = (t) => {
    let row = toolRows.get(t.id);
    if (!row) toolRows.set(t.id, (row = tools.appendChild(el('div', { className: 'tool' }))));
    const detail = t.state === 'preparing' ? t.argumentsText : t.state === 'calling' ? t.arguments : t.result;
    row.className = 'tool ' + t.state;
    row.textContent = `${t.name} · ${t.state}` + (detail != null && detail !== '' ? `: ${short(detail)}` : '');
  };
  return {
    box,
    chunk(c) {
      if (c.error) return this.error(`${c.error.code || 'error'}: ${c.error.message}`);
      const choice = (c.choices && c.choices[0]) || {};
      const delta = choice.delta || {};
      if (delta.content) text.append(delta.content);
      if (choice.thinking) { thinkingBox.hidden = false; thinking.append(choice.thinking); }
      if (choice.tool_call) tool(choice.tool_call);
      for (const t of delta.tool_calls || []) tools.append(el('div', { className: 'tool' }, `client tool ${t.function.name}(${short(t.function.arguments)})`));
      if (c.polpo && c.polpo.suggestions) foot.append('suggested: ' + c.polpo.suggestions.map((s) => s.text || s.label || JSON.stringify(s)).join(' | ') + ' ');
      if (choice.finish_reason) foot.append(`finish: ${choice.finish_reason}` + (c.usage ? ` · tokens ${c.usage.prompt_tokens ?? '?'} in / ${c.usage.completion_tokens ?? '?'} out` : ''));
    },
    error(message) {
      box.append(el('div', { className: 'error' }, message));
    },
  };
}

async function send(message) {
  const agent = $('chat-agent').value;
  if (agent !== state.chat.agent) openChat(agent, null);
  $('chat-log').append(messageView({ role: 'user', content: message }));
  const answer = answerView();
  $('chat-log').append(answer.box);
  const controller = (state.chat.controller = new AbortController());
  state.chat.run = null;
  state.chat.durable = false;
  $('chat-send').disabled = true;
  $('chat-stop').disabled = false;
  try {
    const headers = state.chat.session ? { 'x-session-id': state.chat.session } : {};
    // A durable run: the answer is kept even if this tab closes, and the run view can follow it.
    const polpo = { delivery: { onDisconnect: 'continue' } };
    const body = { agent, messages: [{ role: 'user', content: message }], stream: true, polpo };
    const r = await request('POST', '/v1/chat/completions', { body, headers, signal: controller.signal });
    state.chat.session = r.headers.get('x-session-id') || state.chat.session;
    state.chat.run = r.headers.get('x-polpo-run-id');
    chatIds();
    await readSse(r, (f) => {
      // Only durable runs number their frames (a server with `chatExecution: inline` does not).
      if (f.id && !state.chat.durable) { state.chat.durable = true; chatIds(); }
      if (f.data !== '[DONE]') answer.chunk(JSON.parse(f.data));
      $('chat-log').scrollTop = $('chat-log').scrollHeight;
    });
  } catch (e) {
    answer.error(e.name === 'AbortError' ? 'stopped' : e.message);
  } finally {
    $('chat-send').disabled = false;
    $('chat-stop').disabled = true;
  }
}

$('chat-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const message = $('chat-input').value.trim();
  if (!message) return;
  $('chat-input').value = '';
  send(message);
});
$('chat-input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); $('chat-form').requestSubmit(); }
});
/** A durable run outlives its request: abort the run on the server (inline runs too), then stop reading. */
async function stop() {
  const { run, controller } = state.chat;
  try {
    if (run) await request('POST', '/api/v1/runs/{id}/abort', { params: { id: run }, body: { reason: 'stopped from the dashboard' } });
  } finally {
    if (controller) controller.abort();
  }
}

$('chat-stop').addEventListener('click', guard(stop));
$('chat-new').addEventListener('click', () => openChat($('chat-agent').value, null));
$('chat-agent').addEventListener('change', () => openChat($('chat-agent').value, null));

// ---- Events and run journals ----------------------------------------------------------------

/** One frame as a list row, newest first, at most 500 rows kept. */
function logFrame(list, label, name, payload) {
  list.prepend(el('li', {}, el('span', { className: 'muted' }, label), el('span', { className: 'name' }, name), short(payload, 400)));
  while (list.childElementCount > 500) list.lastElementChild.remove();
}

/** Frames kept for the Events view (newest last), so a new filter applies to what was seen. */
const seen = [];

/** The Events view's name globs (comma-separated), applied in the page to the one live feed. */
function eventFilter() {
  const globs = $('events-filter').value.split(',').map((g) => g.trim()).filter(Boolean).map(globRegex);
  return (f) => !globs.length || globs.some((g) => g.test(f.event));
}

function logEvent(f) {
  logFrame($('events-log'), f.id ? '#' + f.id : '', f.event, f.data);
}

onLive(['*'], (f) => {
  seen.push(f);
  if (seen.length > 500) seen.shift();
  if (eventFilter()(f)) logEvent(f);
});

$('events-form').addEventListener('submit', (e) => {
  e.preventDefault();
  $('events-log').replaceChildren();
  seen.filter(eventFilter()).forEach(logEvent);
  connectLive();
});
$('events-stop').addEventListener('click', () => live.controller && live.controller.abort());

async function showRun(id) {
  const run = await data('/api/v1/runs/{id}', { id });
  $('run-id').value = id;
  $('run-abort').hidden = run.status !== 'running' && run.status !== 'paused';
  $('run-abort').onclick = guard(async () => {
    await request('POST', '/api/v1/runs/{id}/abort', { params: { id }, body: { reason: 'aborted from the dashboard' } });
    await showRun(id);
  });
  $('run-info').replaceChildren(
    facts([['Status', run.status], ['Agent', run.agent], ['Session', run.sessionId], ['Created', run.createdAt], ['Updated', run.updatedAt]]),
    el('details', {}, el('summary', {}, 'run'), el('pre', {}, json(run))));
  return run;
}

/** The run, then its journal from the start, live until the run ends. */
async function loadRun(id) {
  if (state.run) state.run.abort();
  $('run-events').replaceChildren();
  $('run-info').replaceChildren();
  if (!id) return;
  const controller = (state.run = new AbortController());
  await showRun(id);
  const r = await request('GET', '/api/v1/runs/{id}/events', { params: { id }, signal: controller.signal });
  await readSse(r, (f) => {
    const e = JSON.parse(f.data);
    logFrame($('run-events'), `${e.sequence} ${e.createdAt || ''}`, e.type, e.data);
  });
  if (state.run === controller) await showRun(id);
}

$('run-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const next = '#runs/' + encodeURIComponent($('run-id').value.trim());
  if (location.hash === next) route(); // the same run again: reload it
  else location.hash = next;
});

// ---- Schedules ------------------------------------------------------------------------------

async function loadSchedules() {
  const schedules = await data('/api/v1/schedules');
  fill($('schedule-list'), schedules.map((s) => el('li', { className: 'schedule', dataset: { id: s.id } },
    el('strong', {}, s.name || s.id), ' ', el('span', { className: 'muted' }, s.status),
    s.description && el('div', {}, s.description),
    el('div', { className: 'muted' }, s.nextOccurrenceAt ? 'next: ' + s.nextOccurrences.join(', ') : 'not firing (paused)'))), 'No schedules: add one under .polpo/schedules/.');
}

// ---- Views ----------------------------------------------------------------------------------

const views = {
  agents: loadAgents,
  sessions: loadSessions,
  chat: async () => { if (!state.agents.length) await loadAgents(); chatIds(); $('chat-input').focus(); },
  events: async () => { connectLive(); },
  runs: loadRun,
  tasks: async (id) => { connectLive(); await loadTasks(id); },
  missions: async (id) => { connectLive(); await loadMissions(id); },
  approvals: async (id) => { connectLive(); await loadApprovals(id); },
  schedules: loadSchedules,
};

/** `#view/argument` picks the view and what it shows (an agent, a session, a run, a task, a
 * mission or a loop run id). */
function route() {
  const [name, ...rest] = location.hash.slice(1).split('/');
  const view = name in views ? name : 'agents';
  for (const v of Object.keys(views)) {
    $('view-' + v).hidden = v !== view;
    if (v === view) $('nav-' + v).setAttribute('aria-current', 'page');
    else $('nav-' + v).removeAttribute('aria-current');
  }
  notice('');
  const arg = rest.length ? decodeURIComponent(rest.join('/')) : undefined;
  guard(views[view])(arg);
}

$('sessions-agent').addEventListener('change', () => {
  if (location.hash === '#sessions') guard(loadSessions)();
  else location.hash = '#sessions';
});
window.addEventListener('hashchange', route);
$('key-forget').hidden = !sessionStorage.getItem(KEY);
fetch('/api/v1/health')
  .then((r) => r.json())
  .then((h) => { $('server').textContent = `Polpo ${h.data.version} · up ${h.data.uptime} s`; })
  .catch(() => { $('server').textContent = 'server unreachable'; });
route();
