-- Fencing: every grant of a run's lease takes the next generation, kept on the run so it
-- survives released leases; a write carrying an older generation is refused.
ALTER TABLE runs ADD COLUMN lease_generation BIGINT NOT NULL DEFAULT 0;
ALTER TABLE run_leases ADD COLUMN generation BIGINT NOT NULL DEFAULT 0;
