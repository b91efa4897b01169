-- A store as the brain of release 5fda188 made it (the code before issue 37: tables made by
-- store/db.py, backups.py, escalation/ledger.py, ops/alerts.py, scheduling/candidates.py),
-- no alembic_version table, with a plan of two tasks, a join token, a worker and an alert.
-- Made once by running that release's brain and dumping its file (sqlite3 iterdump);
-- test_store_migrations.py opens it with the brain of today, which upgrades it.
BEGIN TRANSACTION;
CREATE TABLE alerts (
        kind TEXT NOT NULL,
        subject TEXT NOT NULL,
        fired_at REAL NOT NULL,
        message TEXT NOT NULL,
        PRIMARY KEY (kind, subject)
    );
INSERT INTO "alerts" VALUES('queue_depth','cpu',5.0,'deep');
CREATE TABLE deps (
    task_id INTEGER NOT NULL REFERENCES tasks(id),
    depends_on INTEGER NOT NULL REFERENCES tasks(id),
    PRIMARY KEY (task_id, depends_on)
);
INSERT INTO "deps" VALUES(2,1);
CREATE TABLE escalations (
        id TEXT PRIMARY KEY,
        task_id INTEGER NOT NULL,
        plan_id TEXT NOT NULL,
        task_key TEXT NOT NULL,
        why TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_try_at REAL,
        created_at REAL NOT NULL,
        sent_at REAL,
        answered_at REAL,
        reask INTEGER NOT NULL DEFAULT 0,
        request_json TEXT,
        provider TEXT,
        model TEXT,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        estimated_cost REAL NOT NULL DEFAULT 0,
        cost REAL NOT NULL DEFAULT 0,
        outcome TEXT,
        subtasks_json TEXT,
        error TEXT
    );
CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    event_type TEXT NOT NULL,
    plan_id TEXT,
    task_id INTEGER,
    body_json TEXT NOT NULL
);
INSERT INTO "events" VALUES(1,1000.0,'task_submitted','554388799028',2,'{"timestamp": "1970-01-01T00:16:40.000Z", "event_type": "task_submitted", "plan": "554388799028", "task_id": "b", "task_uid": 2, "attempt": 0, "class": "cpu", "model": null, "worker_id": null, "gpu_id": null, "duration_ms": null, "tokens_generated": null, "error": null, "reason": null, "to": "PENDING"}');
INSERT INTO "events" VALUES(2,1000.0,'task_submitted','554388799028',1,'{"timestamp": "1970-01-01T00:16:40.000Z", "event_type": "task_submitted", "plan": "554388799028", "task_id": "a", "task_uid": 1, "attempt": 0, "class": "cpu", "model": null, "worker_id": null, "gpu_id": null, "duration_ms": null, "tokens_generated": null, "error": null, "reason": null, "to": "READY"}');
CREATE TABLE goals (
    id TEXT PRIMARY KEY,
    goal TEXT NOT NULL,
    inputs_dir TEXT,
    state TEXT NOT NULL,
    draft_json TEXT,
    errors_json TEXT NOT NULL DEFAULT '[]',
    plan_id TEXT,
    drafting_plan_id TEXT,
    submitted_by TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL
);
CREATE TABLE plans (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    idempotency_key TEXT UNIQUE,
    body_hash TEXT NOT NULL,
    submitted_by TEXT NOT NULL,
    created_at REAL NOT NULL,
    fixes_json TEXT NOT NULL DEFAULT '[]',
    cancelled INTEGER NOT NULL DEFAULT 0
);
INSERT INTO "plans" VALUES('554388799028','t',NULL,'d','test',1000.0,'[{"task": "a", "field": "task_class", "fix": "inferred ''cpu''", "reason": "no GPU or LLM keyword"}, {"task": "b", "field": "task_class", "fix": "inferred ''cpu''", "reason": "no GPU or LLM keyword"}]',0);
CREATE TABLE tasks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    plan_id TEXT NOT NULL REFERENCES plans(id),
    key TEXT NOT NULL,
    name TEXT NOT NULL,
    type TEXT NOT NULL,
    task_class TEXT NOT NULL,
    payload_json TEXT NOT NULL,
    model TEXT,
    priority INTEGER NOT NULL,
    trusted INTEGER NOT NULL,
    sensitive INTEGER NOT NULL,
    timeout_s REAL NOT NULL,
    retry_count INTEGER NOT NULL,
    state TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    task_errors INTEGER NOT NULL DEFAULT 0,
    infra_errors INTEGER NOT NULL DEFAULT 0,
    lease_id TEXT,
    worker_id TEXT,
    lease_expires_at REAL,
    attempt_deadline REAL,
    created_at REAL NOT NULL,
    ready_at REAL,
    not_before REAL,
    started_at REAL,
    finished_at REAL,
    output_json TEXT,
    output_file TEXT,
    files_json TEXT NOT NULL DEFAULT '[]',
    metrics_json TEXT NOT NULL DEFAULT '{}',
    result_hash TEXT,
    error_type TEXT,
    error TEXT,
    reason TEXT,
    tainted_output INTEGER NOT NULL DEFAULT 0,
    origin TEXT,
    depth INTEGER NOT NULL DEFAULT 0,
    escalate TEXT NOT NULL DEFAULT 'never',
    allow_external INTEGER NOT NULL DEFAULT 0,
    context_tokens INTEGER,
    reviewed INTEGER NOT NULL DEFAULT 0,
    UNIQUE (plan_id, key)
);
INSERT INTO "tasks" VALUES(1,'554388799028','a','a','noop','cpu','{}',NULL,5,1,0,60.0,3,'READY',0,0,0,NULL,NULL,NULL,NULL,1000.0,1000.0,NULL,NULL,NULL,NULL,NULL,'[]','{}',NULL,NULL,NULL,NULL,0,NULL,0,'never',0,NULL,0);
INSERT INTO "tasks" VALUES(2,'554388799028','b','b','noop','cpu','{}',NULL,5,1,0,60.0,3,'PENDING',0,0,0,NULL,NULL,NULL,NULL,1000.0,NULL,NULL,NULL,NULL,NULL,NULL,'[]','{}',NULL,NULL,NULL,NULL,0,NULL,0,'never',0,NULL,0);
CREATE TABLE tokens (
    token_hash TEXT PRIMARY KEY,
    scope TEXT NOT NULL,
    name TEXT NOT NULL,
    created_at REAL NOT NULL,
    id TEXT,
    revoked_at REAL,
    trust TEXT
);
INSERT INTO "tokens" VALUES('h-join','join','rig-b',1.0,'abcdefabcdef',NULL,'untrusted');
CREATE TABLE workers (
    id TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL,
    classes_json TEXT NOT NULL,
    gpu_index INTEGER,
    gpus_json TEXT NOT NULL DEFAULT '[]',
    models_json TEXT NOT NULL DEFAULT '[]',
    registered_at REAL NOT NULL,
    last_heartbeat REAL NOT NULL,
    host TEXT NOT NULL DEFAULT '',
    registered_by TEXT,
    last_claim_at REAL
);
INSERT INTO "workers" VALUES('w1','h-join','["cpu"]',NULL,'[]','[]',1.0,2.0,'rig-b',NULL,NULL);
CREATE INDEX deps_upstream ON deps(depends_on);
CREATE INDEX events_plan ON events(plan_id);
CREATE INDEX workers_token ON workers(token_hash);
CREATE INDEX tasks_plan_state ON tasks(plan_id, state);
CREATE INDEX tasks_queue ON tasks(state, task_class, model, ready_at);
CREATE INDEX plans_created ON plans(created_at, id);
CREATE UNIQUE INDEX tokens_id ON tokens(id);
CREATE INDEX workers_registered_by ON workers(registered_by);
CREATE INDEX tasks_lease ON tasks(lease_id);
CREATE INDEX tasks_ready_heads
           ON tasks(state, task_class, model, priority, ready_at, id);
CREATE INDEX escalations_due ON escalations(state, next_try_at);
CREATE INDEX escalations_task ON escalations(task_id);
CREATE INDEX escalations_answered ON escalations(answered_at);
CREATE INDEX escalations_sent ON escalations(sent_at);
CREATE INDEX tasks_escalation_due ON tasks(state)
       WHERE escalate = 'always' OR (escalate = 'on_failure'
             AND (context_tokens IS NULL OR task_errors >= 2));
CREATE INDEX tasks_review_due ON tasks(state)
       WHERE escalate = 'on_failure' AND reviewed = 0 AND task_errors = 1;
CREATE INDEX events_ts ON events(ts);
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('tasks',2);
INSERT INTO "sqlite_sequence" VALUES('events',2);
COMMIT;
