-- Holiday calendars (docs/time.md, "Calendars"): a namespace holds few, each read whole.
CREATE TABLE calendars (
    namespace  TEXT   NOT NULL,
    name       TEXT   NOT NULL,
    spec       TEXT   NOT NULL,   -- CalendarSpec as JSON
    version    BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (namespace, name)
);
-- The jobs that name a calendar (`calendar_users`, read when one is deleted or inspected):
-- a partial index holding only the jobs whose schedule has `exclude_calendars`, so the lookup
-- does not scan a namespace of millions of jobs, and jobs without calendars cost nothing.
CREATE INDEX jobs_calendar_users ON jobs USING gin ((spec -> 'schedule' -> 'exclude_calendars'))
    WHERE spec -> 'schedule' ? 'exclude_calendars';
