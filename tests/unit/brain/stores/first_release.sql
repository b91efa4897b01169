-- A store as an early brain made it: before every column of store/db.py's ADDED_COLUMNS
-- and the indexes on them, with the old tasks_state index and a join token with no id
-- or trust. Made once from the code before issue 37 (its tables less those columns);
-- test_store_schema.py opens it with the brain of today.

CREATE TABLE backups (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at REAL NOT NULL,
    archive TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    models INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE deps (
    task_id INTEGER NOT NULL REFERENCES tasks(id),
    depends_on INTEGER NOT NULL REFERENCES tasks(id),
    PRIMARY KEY (task_id, depends_on)
);
CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    event_type TEXT NOT NULL,
    plan_id TEXT,
    task_id INTEGER,
    body_json TEXT NOT NULL
);
INSERT INTO "events" VALUES(1,1.0,'plan_submitted','p1',NULL,'{}');
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
INSERT INTO "goals" VALUES('g1','a goal',NULL,'drafting',NULL,'[]',NULL,NULL,'',1.0,NULL);
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
INSERT INTO "plans" VALUES('p1','old plan',NULL,'x','admin',1.0,'[]',0);
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
    UNIQUE (plan_id, key)
);
INSERT INTO "tasks" VALUES(1,'p1','a','a','noop','cpu','{}',NULL,0,1,0,60.0,0,'SUCCEEDED',0,0,0,NULL,NULL,NULL,NULL,1.0,NULL,NULL,NULL,NULL,NULL,NULL,'[]','{}',NULL,NULL,NULL,NULL);
CREATE TABLE tokens (
    token_hash TEXT PRIMARY KEY,
    scope TEXT NOT NULL,
    name TEXT NOT NULL,
    created_at REAL NOT NULL);
INSERT INTO "tokens" VALUES('h1','join','rig-b',1.0);
INSERT INTO "tokens" VALUES('h2','admin','admin',2.0);
CREATE TABLE workers (
    id TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL,
    classes_json TEXT NOT NULL,
    gpu_index INTEGER,
    gpus_json TEXT NOT NULL DEFAULT '[]',
    models_json TEXT NOT NULL DEFAULT '[]',
    registered_at REAL NOT NULL,
    last_heartbeat REAL NOT NULL);
INSERT INTO "workers" VALUES('w1','h1','["cpu"]',NULL,'[]','[]',1.0,2.0);
CREATE INDEX deps_upstream ON deps(depends_on);
CREATE INDEX events_plan ON events(plan_id);
CREATE INDEX workers_token ON workers(token_hash);
CREATE INDEX tasks_plan_state ON tasks(plan_id, state);
CREATE INDEX tasks_queue ON tasks(state, task_class, model, ready_at);
CREATE INDEX plans_created ON plans(created_at, id);
CREATE INDEX tasks_state ON tasks(state);
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('tasks',1);
INSERT INTO "sqlite_sequence" VALUES('events',1);
