// Polpo dashboard: approvals and Project Loop runs (see core.js for the helpers). A loop run,
// picked from the list, shows its trace in order and its context; a run waiting on a human step
// shows a form for that step's `output.schema`, answered through
// `POST /api/v1/loop-runs/{id}/human` (the server validates the answer; its refusal is shown).
// The view follows the live feed: a `loop_run:trace` event of the shown run adds its row to the
// trace as it happens, and a run's turning point (`loop_run:started`, `…:awaiting_human`,
// `…:completed`, `…:failed`, `…:resumed`) reloads the list and the shown run.
'use strict';

const loops = { run: null };

/** Approve (then resume the run past its gate) or reject with the reviewer's feedback. */
async function decide(approval, approve) {
  const params = { id: approval.id };
  if (approve) {
    await request('POST', '/api/v1/approvals/{id}/approve', { params, body: {} });
    await request('POST', '/api/v1/loop-runs/{id}/resume', { params: { id: approval.loopRunId }, body: {} });
  } else {
    const feedback = prompt(`Why is ${approval.id} rejected? (sent to the run as feedback)`);
    if (!feedback || !feedback.trim()) return;
    await request('POST', '/api/v1/approvals/{id}/reject', { params, body: { feedback } });
  }
  await loadApprovals(loops.run);
}

async function loadApprovals(selected) {
  loops.run = selected || null;
  const { approvals } = await data('/api/v1/approvals', {}, { status: 'pending', limit: 100 });
  fill($('approval-list'), approvals.map((a) => el('li', { className: 'approval', dataset: { id: a.id } },
    el('strong', {}, a.message), ' ',
    el('span', { className: 'muted' }, `${a.id} · loop ${a.loop} · agent ${a.agent} · run ${a.loopRunId} · gate ${(a.gate && a.gate.id) || '?'}`),
    el('div', {},
      el('button', { type: 'button', className: 'approve', onclick: guard(() => decide(a, true)) }, 'Approve'), ' ',
      el('button', { type: 'button', className: 'reject', onclick: guard(() => decide(a, false)) }, 'Reject')))), 'No pending approvals.');
  const { loopRuns } = await data('/api/v1/loop-runs', {}, { limit: 100 });
  fill($('loop-run-list'), loopRuns.map((r) => el('li', { className: 'loop-run' + (r.id === selected ? ' selected' : ''), dataset: { id: r.id, status: r.status } },
    el('strong', {}, r.status), ' ', el('a', { href: '#approvals/' + encodeURIComponent(r.id) }, r.id),
    el('div', { className: 'muted' }, `loop ${r.loop} · agent ${r.agent} · updated ${r.updatedAt || ''}` + (r.error ? ` · ${r.error.code || ''}: ${r.error.message || ''}` : '')))), 'No loop runs yet.');
  if (selected) await showLoopRun(selected);
  else $('loop-run-detail').replaceChildren();
}

/** One trace event as a row: its type, the step (or the transition), status, guard, error, data. */
function traceRow(e) {
  const where = e.type === 'transition' ? `${e.fromStepKey || e.from || '?'} → ${e.toStepKey || e.to || '?'}` : e.stepKey || e.step || '';
  const extra = e.data && e.type === 'transition' && e.data.label ? e.data.label : e.data && short(e.data, 300);
  return el('li', { className: 'trace-event ' + (e.status || ''), dataset: { id: e.id, type: e.type, step: e.stepKey || e.toStepKey || '' } },
    el('span', { className: 'muted' }, e.id), el('span', { className: 'name' }, e.type), where,
    e.tool ? ` · tool ${e.tool}` : '', e.status ? ` · ${e.status}` : '', e.when ? ` · when ${e.when}` : '',
    e.error ? el('span', { className: 'error' }, ' · ' + e.error) : '', extra ? el('span', { className: 'muted' }, ' · ' + extra) : '');
}

/** The inputs of a flat object schema (string, number, integer, boolean, enum properties). */
function schemaFields(schema) {
  const props = schema && schema.type === 'object' && schema.properties ? Object.entries(schema.properties) : null;
  if (!props || !props.length || !props.every(([, p]) => ['string', 'number', 'integer', 'boolean'].includes(p.type))) return null;
  const required = new Set(schema.required || []);
  return props.map(([name, p]) => {
    const input = p.enum ? el('select', { name }, el('option', { value: '' }, ''), p.enum.map((v) => el('option', { value: String(v) }, String(v))))
      : p.type === 'boolean' ? el('input', { type: 'checkbox', name })
        : el('input', { type: p.type === 'string' ? 'text' : 'number', name, step: p.type === 'integer' ? '1' : 'any' });
    const read = () => {
      if (p.type === 'boolean') return input.checked;
      if (input.value === '') return undefined; // left out: the server says what is required
      return p.type === 'string' ? input.value : Number(input.value);
    };
    return { name, read, row: el('label', { className: 'field' }, `${name}${required.has(name) ? ' *' : ''}`, p.description ? el('span', { className: 'muted' }, ` ${p.description}`) : '', input) };
  });
}

/** The form answering the run's waiting human step; the server's refusal shows in the form. */
function humanForm(run) {
  const { step, schema } = run.human;
  const fields = schemaFields(schema);
  const raw = fields ? null : el('textarea', { name: 'output', rows: 6, value: '{}' });
  const error = el('p', { className: 'error human-error', role: 'alert', hidden: true });
  const form = el('form', { className: 'human-form', dataset: { step } },
    el('h3', {}, `Step ${step} waits for a person`),
    fields ? fields.map((f) => f.row) : el('label', { className: 'field' }, 'Answer (JSON)', raw),
    schema ? el('details', {}, el('summary', {}, 'output.schema'), el('pre', {}, json(schema))) : null,
    el('button', {}, 'Send answer'), error);
  form.addEventListener('submit', guard(async (e) => {
    e.preventDefault();
    error.hidden = true;
    let output;
    if (fields) {
      output = {};
      for (const f of fields) { const v = f.read(); if (v !== undefined) output[f.name] = v; }
    } else {
      try { output = JSON.parse(raw.value); } catch (err) { error.textContent = 'Not JSON: ' + err.message; error.hidden = false; return; }
    }
    try {
      await request('POST', '/api/v1/loop-runs/{id}/human', { params: { id: run.id }, body: { output } });
    } catch (err) {
      if (err.unauthorized) throw err;
      error.textContent = err.message;
      error.hidden = false;
      return;
    }
    form.replaceChildren(el('p', { className: 'muted' }, `Answer sent: the run goes on from ${step}.`));
    await showLoopRun(run.id);
  }));
  return form;
}

async function showLoopRun(id) {
  const run = await data('/api/v1/loop-runs/{id}', { id });
  const s = run.state || {};
  const error = run.error && `${run.error.code || ''}: ${run.error.message || ''}`;
  render($('loop-run-detail'),
    el('h2', {}, `Loop run ${run.id}`),
    facts([['Status', run.status], ['Loop', run.loop], ['Agent', run.agent], ['Steps executed', s.executed], ['Next steps', s.frontier && s.frontier.join(', ')],
      ['Error', error], ['Created', run.createdAt], ['Updated', run.updatedAt]]),
    run.human && run.status === 'awaiting_human' ? humanForm(run) : null,
    el('h3', {}, 'Trace'),
    el('ol', { id: 'loop-trace', className: 'events' }, (run.trace || []).map(traceRow)),
    el('h3', {}, 'Context'), el('pre', { id: 'loop-context' }, json(s.context)),
    run.output !== undefined ? el('details', {}, el('summary', {}, 'output'), el('pre', {}, json(run.output))) : null,
    (run.agentRuns || []).length ? el('p', {}, 'Agent step runs: ', run.agentRuns.map((a) => [el('a', { href: '#runs/' + encodeURIComponent(a.runId) }, `${a.step || ''} ${a.runId}`), ' '])) : null);
}

$('approvals-refresh').addEventListener('click', guard(() => loadApprovals(loops.run)));
// A gate asked for or decided elsewhere, or a loop run reaching a turning point, shows without a click.
const reloadApprovals = coalesce(async () => { if (currentView() === 'approvals') await loadApprovals(loops.run); });
onLive(['approval:*', 'loop_run:started', 'loop_run:resumed', 'loop_run:awaiting_human', 'loop_run:completed', 'loop_run:failed'], reloadApprovals);
// The shown run's trace grows as it runs (a row already shown, by its trace id, is not added twice).
onLive(['loop_run:trace'], (f) => {
  let e;
  try { e = JSON.parse(f.data); } catch { return; }
  const list = $('loop-trace');
  if (currentView() !== 'approvals' || e.loopRunId !== loops.run || !list) return;
  if ([...list.children].some((li) => li.dataset.id === e.id)) return;
  list.append(traceRow(e));
});
