-- The embedded schema's 0006 drops the execution id from the keys of its two history indexes,
-- because SQLite's single writer pays for every index page an insert touches. PostgreSQL's
-- indexes are unchanged; the file keeps the two stores' migration numbers in step.
SELECT 1;
