#!/usr/bin/env python3
"""Cost of the embedded store's write statements per execution, by index layout.

Replays, with Python's sqlite3 module, the statements the SQLite store runs for each
execution at a steady rate: the trigger commit (advance the job, insert the execution), the
claim (select the due ones, mark them running) and the completion (mark them succeeded,
insert the attempt), executions triggered 5 s ahead of their fire time, on a fresh file built from the store's own
migrations (crates/store-sqlite/migrations), for JOBS every-second jobs over ROUNDS seconds.
It prints microseconds of wall time per execution for each phase. Python's own overhead is
in every figure alike, so compare layouts with each other, not with the server's figures.

Layouts (the first argument):
  current    the migrations as they are
  with-id    the history indexes as before 0006, with the execution id at the end of the key
  no-job     without executions_job (a lower bound: the history of a job unindexed)
  no-pending without executions_pending (job_uid of the executions waiting to run)
  run-apart  the run definition kept out of the execution rows (an empty text in its place),
             as if stored once per job version

The trigger commits are of BATCH (512) executions; claims and completions are of CLAIM
executions (the environment variable CLAIM, default 512; a worker that keeps up with a
steady load claims about 20 at a time).

Usage: [CLAIM=20] python3 scripts/sqlite_index_cost.py LAYOUT [ROUNDS]   (from the repository root)
"""

import json
import os
import random
import sqlite3
import sys
import tempfile
import time

JOBS = 10_000
BATCH = 512
CLAIM = int(os.environ.get('CLAIM', '512'))
LEAD_MS = 5000  # executions are triggered this far ahead of their fire time, as the scheduler does
MIGRATIONS = os.path.join(os.path.dirname(__file__), '..', 'crates', 'store-sqlite', 'migrations')
RUN = json.dumps({
    'target': {'type': 'http', 'url': 'http://127.0.0.1:40000/sink/x', 'method': 'POST',
               'headers': {}, 'body': None},
    'retry': {'max_attempts': 3, 'backoff': 'exponential', 'initial_delay': '1s',
              'max_delay': '1m'},
    'timeout': '30s', 'heartbeat_timeout': '30s', 'concurrency_policy': 'allow',
    'misfire_policy': 'run_once', 'misfire_threshold': '1m', 'one_off': False,
})


def execution_id(now, seq):
    """A time-ordered id of the shape of the store's UUIDv7 text (36 characters)."""
    return f'{now:08x}-{(seq >> 12) & 0xffff:04x}-7{seq & 0xfff:03x}-8000-{seq:012x}'


def open_db(path, layout):
    db = sqlite3.connect(path, isolation_level=None)
    db.execute('PRAGMA journal_mode=WAL')
    db.execute('PRAGMA synchronous=NORMAL')
    db.execute('PRAGMA wal_autocheckpoint=16384')
    for name in sorted(os.listdir(MIGRATIONS)):
        db.executescript(open(os.path.join(MIGRATIONS, name)).read())
    if layout == 'with-id':
        db.execute('DROP INDEX executions_job')
        db.execute('CREATE INDEX executions_job ON executions '
                   '(namespace, job, scheduled_at DESC, id DESC)')
        db.execute('DROP INDEX executions_ns')
        db.execute('CREATE INDEX executions_ns ON executions (namespace, scheduled_at DESC, id DESC)')
    elif layout == 'no-job':
        db.execute('DROP INDEX executions_job')
    elif layout == 'no-pending':
        db.execute('DROP INDEX executions_pending')
    elif layout not in ('current', 'run-apart'):
        sys.exit(f'unknown layout {layout!r}: current, with-id, no-job, no-pending or run-apart')
    return db


def main():
    layout = sys.argv[1] if len(sys.argv) > 1 else 'current'
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    with tempfile.TemporaryDirectory() as tmp:
        db = open_db(os.path.join(tmp, 'cost.db'), layout)
        uids = [f'{i:08d}-0000-7000-8000-000000000000' for i in range(JOBS)]
        db.execute('BEGIN')
        db.executemany('INSERT INTO jobs VALUES (?, ?, ?, ?, 1, ?, 0, 0, 0, 0, 0)',
                       [('bench', f'j{i}', u, i % 1024, '{}') for i, u in enumerate(uids)])
        db.execute('COMMIT')
        run = '' if layout == 'run-apart' else RUN
        spent = {'trigger': 0.0, 'claim': 0.0, 'complete': 0.0}
        now, seq, claimed = 1_000_000, 0, 0
        for _ in range(rounds):
            now += 1000
            order = list(range(JOBS))
            random.shuffle(order)
            for start in range(0, JOBS, BATCH):
                part = order[start:start + BATCH]
                rows = []
                for i in part:
                    seq += 1
                    slot = now + LEAD_MS
                    rows.append((execution_id(now, seq), 'bench', f'j{i}', uids[i], i % 1024,
                                 'schedule', slot, slot, slot, slot, 'scheduled', run, 'node', now))
                t = time.perf_counter()
                db.execute('BEGIN IMMEDIATE')
                db.executemany('UPDATE jobs SET next_slot_at = ?, next_fire_at = ? WHERE uid = ?',
                               [(now + LEAD_MS + 1000, now + LEAD_MS + 1000, uids[i])
                                for i in part])
                db.executemany(
                    'INSERT INTO executions (id, namespace, job, job_uid, job_version, shard, '
                    'trigger, scheduled_at, fire_at, queued_at, due_at, finished_at, state, '
                    'max_attempts, lease_ms, run, triggered_by, created_at) VALUES '
                    '(?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, NULL, ?, 3, 30000, ?, ?, ?) '
                    'ON CONFLICT DO NOTHING', rows)
                db.execute('COMMIT')
                spent['trigger'] += time.perf_counter() - t
                for _ in range(0, len(part), CLAIM):
                    t = time.perf_counter()
                    db.execute('BEGIN IMMEDIATE')
                    due = db.execute('SELECT id, job_uid, trigger, run, due_at, fire_at, attempt '
                                     'FROM executions WHERE due_at <= ? ORDER BY due_at LIMIT ?',
                                     (now, CLAIM)).fetchall()
                    db.execute("UPDATE executions SET state = 'running', attempt = attempt + 1, "
                               "worker = 'w', started_at = coalesce(started_at, ?1), "
                               "attempt_started_at = ?1, lease_expires_at = ?1 + lease_ms, "
                               "due_at = NULL WHERE id IN (SELECT value FROM json_each(?2)) "
                               "AND state IN ('scheduled', 'queued', 'retry_wait') RETURNING id",
                               (now, json.dumps([r[0] for r in due]))).fetchall()
                    db.execute('COMMIT')
                    spent['claim'] += time.perf_counter() - t
                    claimed += len(due)
                    t = time.perf_counter()
                    db.execute('BEGIN IMMEDIATE')
                    db.executemany("UPDATE executions SET state = 'succeeded', due_at = NULL, "
                                   "finished_at = ?, lease_expires_at = NULL WHERE id = ? "
                                   "AND attempt = 1 AND state = 'running'",
                                   [(now, r[0]) for r in due])
                    db.executemany("INSERT INTO attempts (execution_id, attempt, worker, started_at, "
                                   "finished_at, outcome, status_code) "
                                   "VALUES (?, 1, 'w', ?, ?, 'succeeded', 200)",
                                   [(r[0], now, now) for r in due])
                    db.execute('COMMIT')
                    spent['complete'] += time.perf_counter() - t
            db.execute('PRAGMA wal_checkpoint(PASSIVE)')
        n = rounds * JOBS
        per = {'trigger': spent['trigger'] / n * 1e6,
               'claim': spent['claim'] / max(claimed, 1) * 1e6,
               'complete': spent['complete'] / max(claimed, 1) * 1e6}
        print(f"{layout}: trigger {per['trigger']:.1f} µs, claim {per['claim']:.1f} µs, "
              f"complete {per['complete']:.1f} µs, total {sum(per.values()):.1f} µs per execution "
              f"({n} executions of {JOBS} jobs, claims of {CLAIM}; SQLite {sqlite3.sqlite_version})")


if __name__ == '__main__':
    main()
