-- Holiday calendars (docs/time.md, "Calendars"): a namespace holds few, each read whole.
-- Which jobs and workflows name one is read from their specs (`calendar_users`): on SQLite a
-- scan of the namespace's rows, done only when a calendar is deleted or inspected.
CREATE TABLE calendars (
    namespace  TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    spec       TEXT    NOT NULL,   -- CalendarSpec as JSON
    version    INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (namespace, name)
);
