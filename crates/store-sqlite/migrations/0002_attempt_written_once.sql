-- A running attempt lives on its execution row (attempt, worker, attempt_started_at) and its
-- row in attempts is written once, when it ends (completion, lapse, cancel): one write per
-- attempt instead of an insert at the claim and an update at the end.
ALTER TABLE executions ADD COLUMN attempt_started_at BIGINT;
