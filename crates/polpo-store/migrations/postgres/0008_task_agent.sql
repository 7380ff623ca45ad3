-- The agent whose maxConcurrency each task counts against (polpo_store::work::runs_as), kept
-- beside the task so a claim counts each agent's tasks in flight without reading task bodies
-- (tasks stored before this take their assignTo), through an index of only the tasks that
-- may take an agent's place. And the dependents of a task, looked up when it is deleted.
ALTER TABLE tasks ADD COLUMN agent TEXT;
UPDATE tasks SET agent = (body::jsonb) ->> 'assignTo';
CREATE INDEX tasks_in_flight ON tasks (agent)
    WHERE status IN ('assigned', 'in_progress', 'review') OR claimed_by IS NOT NULL;
CREATE INDEX task_dependents ON task_dependencies (depends_on);
