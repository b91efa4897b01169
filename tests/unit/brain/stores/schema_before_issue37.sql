-- The brain store's schema as the code before issue 37 made it (store/db.py, backups.py,
-- escalation/ledger.py, ops/alerts.py, scheduling/candidates.py): sqlite_master's sql,
-- written by that code. test_store_schema.py checks that the store made now is the same.
CREATE TABLE alerts (
        kind TEXT NOT NULL,
        subject TEXT NOT NULL,
        fired_at REAL NOT NULL,
        message TEXT NOT NULL,
        PRIMARY KEY (kind, subject)
    );
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
, owner TEXT, draft_origin TEXT);
CREATE TABLE input_hashes (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL,
    inode INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    seen_at REAL NOT NULL
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
, owner TEXT);
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
    fanout_group TEXT,
    fanout_index INTEGER,
    fingerprint TEXT,
    reused_from TEXT,
    written_json TEXT,
    UNIQUE (plan_id, key)
);
CREATE TABLE tokens (
    token_hash TEXT PRIMARY KEY,
    scope TEXT NOT NULL,
    name TEXT NOT NULL,
    created_at REAL NOT NULL,
    id TEXT,
    revoked_at REAL,
    trust TEXT
);
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
CREATE INDEX deps_upstream ON deps(depends_on);
CREATE INDEX escalations_answered ON escalations(answered_at);
CREATE INDEX escalations_due ON escalations(state, next_try_at);
CREATE INDEX escalations_sent ON escalations(sent_at);
CREATE INDEX escalations_task ON escalations(task_id);
CREATE INDEX events_plan ON events(plan_id);
CREATE INDEX events_ts ON events(ts);
CREATE INDEX plans_created ON plans(created_at, id);
CREATE INDEX tasks_escalation_due ON tasks(state)
       WHERE escalate = 'always' OR (escalate = 'on_failure'
             AND (context_tokens IS NULL OR task_errors >= 2));
CREATE INDEX tasks_fanout ON tasks(plan_id, fanout_group, state);
CREATE INDEX tasks_fingerprint ON tasks(fingerprint) WHERE fingerprint IS NOT NULL;
CREATE INDEX tasks_lease ON tasks(lease_id);
CREATE INDEX tasks_plan_state ON tasks(plan_id, state);
CREATE INDEX tasks_queue ON tasks(state, task_class, model, ready_at);
CREATE INDEX tasks_ready_heads
           ON tasks(state, task_class, model, priority, ready_at, id);
CREATE INDEX tasks_review_due ON tasks(state)
       WHERE escalate = 'on_failure' AND reviewed = 0 AND task_errors = 1;
CREATE UNIQUE INDEX tokens_id ON tokens(id);
CREATE INDEX workers_registered_by ON workers(registered_by);
CREATE INDEX workers_token ON workers(token_hash);
