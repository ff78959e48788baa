-- Schema 1: submissions and their jobs, batches (the leases), workers and the
-- models they advertise, tokenizers, results and per-pass progress.
--
-- Applied by scheduler/store.cc inside one transaction together with its row
-- in schema_migrations. Times are milliseconds since the Unix epoch.

CREATE TABLE submissions (
  id INTEGER PRIMARY KEY,
  created_at_ms INTEGER NOT NULL,
  -- 0 while a client is still sending chunks: its jobs are stored, not scheduled.
  sealed INTEGER NOT NULL CHECK (sealed IN (0, 1)),
  -- A client's key that makes a retried SubmitJobs return the first submission.
  idempotency_key TEXT UNIQUE
);

-- A batch is the set of jobs of one model leased to one worker. It stays
-- 'active' while any of its jobs is leased or running.
CREATE TABLE batches (
  id INTEGER PRIMARY KEY,
  worker_id TEXT NOT NULL,
  model TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('active', 'finished', 'expired', 'released')),
  lease_expires_at_ms INTEGER NOT NULL,
  created_at_ms INTEGER NOT NULL,
  ended_at_ms INTEGER,
  CHECK ((state = 'active') = (ended_at_ms IS NULL))
);
CREATE INDEX batches_active ON batches (worker_id) WHERE state = 'active';

CREATE TABLE jobs (
  id INTEGER PRIMARY KEY,
  submission_id INTEGER NOT NULL REFERENCES submissions (id),
  idx INTEGER NOT NULL,
  custom_id TEXT NOT NULL,
  model TEXT NOT NULL,
  priority INTEGER NOT NULL,
  spec TEXT NOT NULL,        -- the request (JobSpec) as JSON
  prompt_tokens BLOB,        -- int32 little-endian token ids; NULL until tokenised
  label_tokens TEXT,         -- JSON [[ids], ...]; NULL until tokenised
  kv_tokens INTEGER,         -- tokens priced in the KV cache; NULL until tokenised
  passes INTEGER NOT NULL CHECK (passes >= 1),
  -- The job state enum of scheduler/types.h; transitions are checked below.
  state TEXT NOT NULL
    CHECK (state IN ('queued', 'leased', 'running', 'succeeded', 'failed', 'cancelled')),
  attempt INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
  max_attempts INTEGER NOT NULL CHECK (max_attempts >= 1),
  batch_id INTEGER REFERENCES batches (id),
  worker_id TEXT,            -- worker of the current or last batch
  reason TEXT NOT NULL DEFAULT '',
  created_at_ms INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL,
  CHECK (attempt <= max_attempts),
  CHECK ((state IN ('leased', 'running')) = (batch_id IS NOT NULL)),
  CHECK ((prompt_tokens IS NULL) = (kv_tokens IS NULL)),
  CHECK ((prompt_tokens IS NULL) = (label_tokens IS NULL)),
  CHECK (state NOT IN ('leased', 'running') OR kv_tokens IS NOT NULL),
  UNIQUE (submission_id, custom_id),
  UNIQUE (submission_id, idx)
);
-- The queue in dispatch order: higher priority first, then oldest submission.
CREATE INDEX jobs_queue ON jobs (model, priority DESC, submission_id, id)
  WHERE state = 'queued' AND kv_tokens IS NOT NULL;
CREATE INDEX jobs_untokenised ON jobs (model, id) WHERE state = 'queued' AND kv_tokens IS NULL;
CREATE INDEX jobs_batch ON jobs (batch_id) WHERE batch_id IS NOT NULL;
CREATE INDEX jobs_submission_state ON jobs (submission_id, state);
CREATE INDEX jobs_state ON jobs (state, id);

-- The transition function of scheduler/types.h (Transition), mirrored: any
-- other change of state is refused by the database itself.
CREATE TRIGGER jobs_state_transition BEFORE UPDATE OF state ON jobs
WHEN NEW.state <> OLD.state AND NOT (
     (OLD.state = 'queued' AND NEW.state IN ('leased', 'failed', 'cancelled'))
  OR (OLD.state = 'leased' AND NEW.state IN ('running', 'succeeded', 'failed', 'cancelled', 'queued'))
  OR (OLD.state = 'running' AND NEW.state IN ('succeeded', 'failed', 'cancelled', 'queued')))
BEGIN
  SELECT RAISE(ABORT, 'illegal job state transition');
END;

CREATE TABLE workers (
  id TEXT PRIMARY KEY,
  session INTEGER NOT NULL CHECK (session >= 1),  -- +1 on each attach; fences older streams
  device TEXT NOT NULL,
  memory_budget_bytes INTEGER NOT NULL,
  kv_budget_bytes INTEGER NOT NULL CHECK (kv_budget_bytes >= 0),
  read_bytes_per_second REAL NOT NULL,
  max_batch_jobs INTEGER NOT NULL,
  open_model TEXT NOT NULL,
  connected INTEGER NOT NULL CHECK (connected IN (0, 1)),
  attached_at_ms INTEGER NOT NULL,
  last_seen_at_ms INTEGER NOT NULL
);

CREATE TABLE worker_models (
  worker_id TEXT NOT NULL REFERENCES workers (id) ON DELETE CASCADE,
  model TEXT NOT NULL,
  kv_bytes_per_token INTEGER NOT NULL CHECK (kv_bytes_per_token > 0),
  checkpoint_bytes INTEGER NOT NULL,
  seconds_per_pass REAL NOT NULL,
  max_context_tokens INTEGER NOT NULL,
  tokenizer_hash TEXT NOT NULL,
  PRIMARY KEY (worker_id, model)
);
CREATE INDEX worker_models_model ON worker_models (model);

-- Tokenizer files cached by content hash (scheduler/types.h TokenizerHash).
CREATE TABLE tokenizers (
  hash TEXT PRIMARY KEY,
  files TEXT NOT NULL,    -- JSON {file name: content}
  eos_ids TEXT NOT NULL,  -- JSON [ids]
  created_at_ms INTEGER NOT NULL
);

-- One row per job at most, never updated: execution is at-least-once,
-- results are exactly-once.
CREATE TABLE results (
  job_id INTEGER PRIMARY KEY REFERENCES jobs (id),
  batch_id INTEGER NOT NULL REFERENCES batches (id),
  worker_id TEXT NOT NULL,
  ok INTEGER NOT NULL CHECK (ok IN (0, 1)),
  output TEXT,  -- JobOutput as JSON when ok
  error TEXT,   -- when not ok
  created_at_ms INTEGER NOT NULL,
  CHECK ((ok = 1) = (output IS NOT NULL)),
  CHECK ((ok = 0) = (error IS NOT NULL))
);
CREATE TRIGGER results_insert_once BEFORE UPDATE ON results
BEGIN
  SELECT RAISE(ABORT, 'results are inserted once and never changed');
END;

-- Per-pass progress samples. Retention is bounded by the store (a number of
-- passes per batch and an age).
CREATE TABLE progress (
  batch_id INTEGER NOT NULL REFERENCES batches (id),
  pass_index INTEGER NOT NULL,
  seconds REAL NOT NULL,
  bytes_read INTEGER NOT NULL,
  io_wait_seconds REAL NOT NULL,
  sequences INTEGER NOT NULL,
  tokens INTEGER NOT NULL,
  mode TEXT NOT NULL,
  at_ms INTEGER NOT NULL,
  PRIMARY KEY (batch_id, pass_index)
) WITHOUT ROWID;
CREATE INDEX progress_age ON progress (at_ms);
