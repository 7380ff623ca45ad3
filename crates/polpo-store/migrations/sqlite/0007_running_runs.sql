-- The runs a server takes over at start-up (running, lease lapsed), found through an index
-- of running runs only, so start-up does not walk every finished run.
CREATE INDEX runs_running_oldest_first ON runs (created_at, id) WHERE status = 'running';
