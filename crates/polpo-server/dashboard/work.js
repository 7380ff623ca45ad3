// Polpo dashboard: tasks and missions (see core.js for the helpers). Both views follow the live
// event feed: a `task:*`, `mission:*`, `assessment:*`, checkpoint, delay or quality-gate event
// reloads what the open view shows, so progress moves without a reload and without polling.
'use strict';

/** Most tasks read to count a page of missions' progress (pages of 1000). */
const MAX_TASKS_READ = 10000;

const work = { task: null, mission: null, status: '' };

/** Every task matching `query`, following the cursor (bounded by MAX_TASKS_READ). */
async function allTasks(query) {
  const tasks = [];
  let cursor;
  do {
    const page = await data('/api/v1/tasks', {}, { ...query, limit: 1000, cursor });
    tasks.push(...page.tasks);
    cursor = page.nextCursor;
  } while (cursor && tasks.length < MAX_TASKS_READ);
  return tasks;
}

/** The weighted score of a task's last assessment, when an LLM review scored it. */
function scoreOf(task) {
  const a = task.result && task.result.assessment;
  return a && a.globalScore != null ? a.globalScore : null;
}

/** A labelled action button; `run` goes through `guard`, then the view reloads. */
function action(label, className, run, reload) {
  return el('button', { type: 'button', className, onclick: guard(async () => { await run(); await reload(); }) }, label);
}

/** POST to an action route of `template` for `id`. */
function post(template, id, body) {
  return request('POST', template, { params: { id }, body: body || {} });
}

// ---- Tasks ----------------------------------------------------------------------------------

async function loadTasks(selected) {
  work.task = selected || null;
  const [page, missions] = await Promise.all([
    data('/api/v1/tasks', {}, { status: $('tasks-status').value, limit: 200 }),
    data('/api/v1/missions', {}, { limit: 200 }),
  ]);
  const names = new Map(missions.missions.map((m) => [m.id, m.name]));
  fill($('task-list'), page.tasks.map((t) => el('li', { className: 'task' + (t.id === selected ? ' selected' : ''), dataset: { id: t.id, status: t.status } },
    el('a', { href: '#tasks/' + encodeURIComponent(t.id) }, t.title), ' ', el('strong', { className: 'status ' + t.status }, t.status),
    el('div', { className: 'muted' }, [
      t.assignTo ? 'agent ' + t.assignTo : 'unassigned',
      t.missionId && 'mission ' + (names.get(t.missionId) || t.missionId),
      scoreOf(t) != null && 'score ' + scoreOf(t),
    ].filter(Boolean).join(' · ')))), 'No tasks: create one with POST /api/v1/tasks or polpo tasks add.');
  if (selected) await showTask(selected);
  else $('task-detail').replaceChildren(el('p', { className: 'muted' }, 'Pick a task.'));
}

/** One check of an assessment: its verdict, message and, for an LLM review, its scores. */
function checkView(c) {
  const scores = c.scores && Object.entries(c.scores);
  return el('li', { className: 'check ' + (c.passed ? 'passed' : 'failed'), dataset: { type: c.type } },
    el('strong', {}, c.passed ? 'passed' : 'failed'), ' ', c.type, c.globalScore != null ? ` · score ${c.globalScore}` : '',
    el('div', {}, c.message),
    scores && scores.length ? el('table', { className: 'scores' },
      el('tr', {}, el('th', {}, 'dimension'), el('th', {}, 'median score')),
      scores.map(([name, score]) => el('tr', {}, el('td', {}, name), el('td', {}, String(score))))) : null,
    c.reviewers && c.reviewers.length ? el('details', {}, el('summary', {}, `${c.reviewers.length} reviewers`), el('pre', {}, json(c.reviewers))) : null);
}

function assessmentView(a) {
  if (!a) return el('p', { className: 'muted' }, 'Not assessed yet.');
  return el('div', { className: 'assessment', dataset: { passed: String(a.passed) } },
    facts([['Verdict', a.passed ? 'passed' : 'failed'], ['Score', a.globalScore], ['Trigger', a.trigger], ['When', a.timestamp]]),
    el('ul', { className: 'list checks' }, (a.checks || []).map(checkView),
      (a.metrics || []).map((m) => el('li', { className: 'check ' + (m.passed ? 'passed' : 'failed') },
        el('strong', {}, m.passed ? 'passed' : 'failed'), ` metric ${m.name}: ${m.value ?? 'no number'} (needs ${m.threshold})`))));
}

async function showTask(id) {
  const t = await data('/api/v1/tasks/{id}', { id });
  const r = t.result || {};
  const reload = () => loadTasks(id);
  const actions = [
    t.status === 'draft' && action('Queue', 'queue', () => post('/api/v1/tasks/{id}/queue', id), reload),
    t.status === 'failed' && action('Retry', 'retry', () => post('/api/v1/tasks/{id}/retry', id), reload),
    ['assigned', 'in_progress', 'review'].includes(t.status) && action('Kill', 'kill', () => post('/api/v1/tasks/{id}/kill', id), reload),
    ['done', 'failed'].includes(t.status) && r.stdout != null && action('Reassess', 'reassess', () => post('/api/v1/tasks/{id}/reassess', id), reload),
    t.status === 'awaiting_approval' && action('Approve', 'approve', () => post('/api/v1/tasks/{id}/approve', id), reload),
    t.status === 'awaiting_approval' && action('Reject', 'reject', () => post('/api/v1/tasks/{id}/reject', id), reload),
  ].filter(Boolean);
  render($('task-detail'),
    el('h2', {}, t.title),
    facts([
      ['Status', t.status], ['Phase', t.phase], ['Agent', t.assignTo], ['Mission', t.group],
      ['Retries', `${t.retries} of ${t.maxRetries}`], ['Fix attempts', t.fixAttempts], ['Depends on', t.dependsOn && t.dependsOn.join(', ')],
      ['Duration', r.duration != null ? r.duration + ' ms' : null], ['Created', t.createdAt], ['Updated', t.updatedAt],
    ]),
    el('p', {}, t.missionId && el('a', { href: '#missions/' + encodeURIComponent(t.missionId) }, 'mission ' + (t.group || t.missionId)), ' ',
      t.runId && el('a', { className: 'run-link', href: '#runs/' + encodeURIComponent(t.runId) }, 'run ' + t.runId)),
    el('div', { className: 'bar' }, actions),
    el('h3', {}, 'Description'), el('pre', {}, t.description),
    el('h3', {}, 'Assessment'), assessmentView(r.assessment),
    (r.assessmentHistory || []).length ? el('details', {}, el('summary', {}, `${r.assessmentHistory.length} earlier assessments`), el('pre', {}, json(r.assessmentHistory))) : null,
    r.stdout ? el('details', {}, el('summary', {}, 'answer'), el('pre', {}, r.stdout)) : null,
    r.stderr ? el('details', {}, el('summary', {}, 'errors'), el('pre', {}, r.stderr)) : null,
    el('details', {}, el('summary', {}, 'task'), el('pre', {}, json(t))));
}

// ---- Missions -------------------------------------------------------------------------------

/** Done and total tasks of a mission (its plan's length while its tasks do not exist yet). */
function progressOf(mission, tasks) {
  const total = tasks.length || ((mission.data && mission.data.tasks) || []).length;
  return { done: tasks.filter((t) => t.status === 'done').length, failed: tasks.filter((t) => t.status === 'failed').length, total };
}

function progressBar(p) {
  return el('span', { className: 'progress' }, el('progress', { max: p.total || 1, value: p.done }),
    ` ${p.done}/${p.total} done` + (p.failed ? `, ${p.failed} failed` : ''));
}

async function loadMissions(selected) {
  work.mission = selected || null;
  const [page, tasks] = await Promise.all([data('/api/v1/missions', {}, { limit: 200 }), allTasks({})]);
  const byMission = new Map();
  for (const t of tasks) if (t.missionId) byMission.set(t.missionId, [...(byMission.get(t.missionId) || []), t]);
  fill($('mission-list'), page.missions.map((m) => {
    const p = progressOf(m, byMission.get(m.id) || []);
    return el('li', { className: 'mission' + (m.id === selected ? ' selected' : ''), dataset: { id: m.id, status: m.status, done: p.done, total: p.total } },
      el('a', { href: '#missions/' + encodeURIComponent(m.id) }, m.name), ' ', el('strong', { className: 'status ' + m.status }, m.status),
      el('div', {}, progressBar(p)));
  }), 'No missions: create one with POST /api/v1/missions or polpo missions create.');
  if (selected) await showMission(selected);
  else $('mission-detail').replaceChildren(el('p', { className: 'muted' }, 'Pick a mission.'));
}

/** What a checkpoint, delay or gate waits on, in words. */
function stopRow(kind, name, after, blocks, status) {
  return el('li', { className: 'stop ' + kind, dataset: { name, state: status } },
    el('strong', {}, `${kind} ${name}`), ' ', el('span', { className: 'status' }, status),
    el('div', { className: 'muted' }, `after ${after.join(', ') || '—'} · blocks ${blocks.join(', ') || '—'}`));
}

function stopsView(m, report) {
  const p = (m.data && m.data.progress) || {};
  const reached = p.checkpoints || [];
  const delays = p.delays || {};
  const rows = [
    ...(m.checkpoints || []).map((c) => {
      const waiting = m.status === 'paused' && reached[reached.length - 1] === c.name;
      const status = waiting ? 'waiting: resume the mission to go on' : reached.includes(c.name) ? 'passed' : 'not reached';
      return stopRow('checkpoint', c.name, c.afterTasks, c.blocksTasks, status + (c.message ? ` — ${c.message}` : ''));
    }),
    ...(m.delays || []).map((d) => {
      const s = delays[d.name];
      const status = !s ? `not started (${d.duration})` : s.expired ? 'expired' : `waiting ${d.duration} from ${s.startedAt}`;
      return stopRow('delay', d.name, d.afterTasks, d.blocksTasks, status);
    }),
    ...(m.qualityGates || []).map((g) => {
      const r = (report.qualityGates || []).find((x) => x.name === g.name) || { status: 'pending' };
      const rule = [g.minScore != null && `min score ${g.minScore}`, g.requireAllPassed && 'all passed', g.condition].filter(Boolean).join(', ');
      const reason = r.verdict && r.verdict.reason ? ` — ${r.verdict.reason}` : '';
      return stopRow('gate', g.name, g.afterTasks, g.blocksTasks, `${r.status}${rule ? ` (${rule})` : ''}${reason}`);
    }),
  ];
  return rows.length ? el('ul', { className: 'list stops' }, rows) : el('p', { className: 'muted' }, 'No checkpoints, delays or quality gates.');
}

async function showMission(id) {
  const [m, tasks, report] = await Promise.all([
    data('/api/v1/missions/{id}', { id }),
    allTasks({ missionId: id }),
    data('/api/v1/missions/{id}/report', { id }),
  ]);
  const reload = () => loadMissions(id);
  const retryFailed = el('input', { type: 'checkbox', id: 'mission-retry-failed' });
  const terminal = ['completed', 'failed', 'cancelled'].includes(m.status);
  const actions = [
    m.status === 'draft' && action('Execute', 'execute', () => post('/api/v1/missions/{id}/execute', id), reload),
    m.status === 'active' && action('Pause', 'pause', () => post('/api/v1/missions/{id}/pause', id), reload),
    m.status === 'paused' && [action('Resume', 'resume', () => post('/api/v1/missions/{id}/resume', id, { retryFailed: retryFailed.checked }), reload),
      el('label', {}, retryFailed, ' retry failed tasks')],
    !terminal && action('Abort', 'abort', () => confirm(`Abort mission ${m.name}? Its running tasks are killed.`) && post('/api/v1/missions/{id}/abort', id), reload),
  ].filter(Boolean);
  const scores = new Map(report.tasks.map((r) => [r.title, r]));
  const files = tasks.flatMap((t) => (t.outcomes || []).filter((o) => o.path).map((o) => `${o.path} (${o.label}, ${t.title})`));
  render($('mission-detail'),
    el('h2', {}, m.name),
    el('div', { id: 'mission-progress' }, progressBar(progressOf(m, tasks))),
    facts([['Status', m.status], ['Quality threshold', report.qualityThreshold], ['Runs', m.executionCount], ['Deadline', m.deadline], ['Created', m.createdAt], ['Updated', m.updatedAt]]),
    el('div', { className: 'bar' }, actions),
    el('h3', {}, 'Tasks'),
    tasks.length ? el('table', { className: 'mission-tasks' },
      el('tr', {}, ['task', 'status', 'agent', 'score', 'retries', 'duration'].map((h) => el('th', {}, h))),
      tasks.map((t) => el('tr', { dataset: { id: t.id, status: t.status } },
        el('td', {}, el('a', { href: '#tasks/' + encodeURIComponent(t.id) }, t.title)), el('td', {}, t.status), el('td', {}, t.assignTo || ''),
        el('td', {}, String((scores.get(t.title) || {}).score ?? '')), el('td', {}, String(t.retries)),
        el('td', {}, t.result ? t.result.duration + ' ms' : ''))))
      : el('p', { className: 'muted' }, `Not executed yet: ${progressOf(m, tasks).total} tasks planned.`),
    el('h3', {}, 'Checkpoints, delays and quality gates'),
    stopsView(m, report),
    el('h3', {}, 'Report'),
    facts([['All passed', report.allPassed ? 'yes' : 'no'], ['Average score', report.avgScore != null ? report.avgScore.toFixed(2) : 'not scored'],
      ['Total duration', report.totalDuration + ' ms'], ['Files', files.length ? files.join(', ') : 'none recorded']]),
    el('details', {}, el('summary', {}, 'mission'), el('pre', {}, json(m))));
}

// ---- Live updates ---------------------------------------------------------------------------

const reloadWork = coalesce(async () => {
  if (currentView() === 'tasks') await loadTasks(work.task);
  else if (currentView() === 'missions') await loadMissions(work.mission);
});
onLive(['task:*', 'mission:*', 'assessment:*', 'checkpoint:*', 'delay:*', 'quality:*'], reloadWork);

$('tasks-status').addEventListener('change', guard(() => loadTasks(work.task)));
