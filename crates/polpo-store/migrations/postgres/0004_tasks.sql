-- Tasks and missions (the orchestrator's state). The body is the whole task or mission as
-- JSON text; the columns beside it are copies of the fields that are queried (status,
-- mission, title, priority, creation time) plus what only the store keeps (revision, claim).
CREATE TABLE missions (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    status     TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    revision   BIGINT NOT NULL,
    body       TEXT NOT NULL
);
CREATE INDEX missions_newest_first ON missions (created_at DESC, id DESC);

CREATE TABLE tasks (
    id               TEXT PRIMARY KEY,
    title            TEXT NOT NULL,
    status           TEXT NOT NULL,
    mission_id       TEXT REFERENCES missions (id),
    priority         DOUBLE PRECISION NOT NULL,
    created_at       BIGINT NOT NULL,
    revision         BIGINT NOT NULL,
    claimed_by       TEXT,
    claim_expires_at BIGINT,
    body             TEXT NOT NULL
);
CREATE INDEX tasks_newest_first ON tasks (created_at DESC, id DESC);
CREATE INDEX tasks_of_mission ON tasks (mission_id, created_at DESC, id DESC);
CREATE INDEX tasks_pending_by_priority ON tasks (priority DESC, created_at, id) WHERE status = 'pending';
-- Missions refer to tasks by title: unique among the tasks that are not finished.
CREATE UNIQUE INDEX tasks_unfinished_title ON tasks (title) WHERE status NOT IN ('done', 'failed');

-- dependsOn, fixed at creation; readiness joins through it.
CREATE TABLE task_dependencies (
    task_id    TEXT NOT NULL REFERENCES tasks (id),
    depends_on TEXT NOT NULL REFERENCES tasks (id),
    PRIMARY KEY (task_id, depends_on)
);
