-- Schema 4: the OpenAI Batch API over HTTP (scheduler/http/): its files and
-- its batches. A batch is a submission underneath (batch_<submission id>);
-- this table holds only what the Batch object adds to it.

-- An uploaded file's bytes are the file `stored_name` in the files directory
-- beside the database, written and fsynced before its row is committed. An
-- output or error file has no bytes of its own: it is rendered from the
-- results of `submission_id` when downloaded (`bytes` is its rendered size,
-- counted at finalizing).
CREATE TABLE files (
  id INTEGER PRIMARY KEY AUTOINCREMENT,  -- "file-<id>"; never reused after a delete
  filename TEXT NOT NULL,
  purpose TEXT NOT NULL CHECK (purpose IN ('batch', 'batch_output', 'batch_error')),
  bytes INTEGER NOT NULL CHECK (bytes >= 0),
  created_at_ms INTEGER NOT NULL,
  stored_name TEXT,             -- uploads only
  submission_id INTEGER REFERENCES submissions (id),  -- output and error files only
  CHECK ((purpose = 'batch') = (stored_name IS NOT NULL)),
  CHECK ((purpose = 'batch') = (submission_id IS NULL))
);

CREATE TABLE http_batches (
  submission_id INTEGER PRIMARY KEY REFERENCES submissions (id),
  input_file_id INTEGER NOT NULL,  -- may be deleted once the batch is finished
  endpoint TEXT NOT NULL CHECK (endpoint IN ('/v1/completions', '/v1/chat/completions')),
  completion_window TEXT NOT NULL,  -- as given: "24h", "90s", ...
  window_ms INTEGER NOT NULL CHECK (window_ms > 0),
  metadata TEXT,                    -- JSON object, or NULL
  status TEXT NOT NULL CHECK (status IN ('validating', 'failed', 'in_progress', 'finalizing',
                                         'completed', 'expired', 'cancelling', 'cancelled')),
  errors TEXT,                      -- JSON [{code, message, param, line}] when failed
  output_file_id INTEGER,
  error_file_id INTEGER,
  created_at_ms INTEGER NOT NULL,
  in_progress_at_ms INTEGER,
  finalizing_at_ms INTEGER,
  completed_at_ms INTEGER,
  failed_at_ms INTEGER,
  expired_at_ms INTEGER,
  cancelling_at_ms INTEGER,
  cancelled_at_ms INTEGER,
  CHECK ((status = 'failed') = (failed_at_ms IS NOT NULL))
);
CREATE INDEX http_batches_open ON http_batches (status)
  WHERE status IN ('validating', 'in_progress', 'finalizing', 'cancelling');
