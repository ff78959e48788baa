-- Each submission's job count by state, kept by triggers as jobs are
-- inserted and change state. The scheduler reads a submission's counts at
-- every result it stores (for the submission's ETA) and at every status
-- call; counting them from jobs cost a walk over all of a submission's jobs
-- each time, which at 20,000 jobs of one submission took a third of the
-- scheduler's time (perf, soak_bench with 256-job batches).
CREATE TABLE submission_counts (
  submission_id INTEGER NOT NULL REFERENCES submissions (id),
  state TEXT NOT NULL,
  n INTEGER NOT NULL CHECK (n >= 0),
  PRIMARY KEY (submission_id, state)
) WITHOUT ROWID;

INSERT INTO submission_counts (submission_id, state, n)
  SELECT submission_id, state, COUNT(*) FROM jobs GROUP BY submission_id, state;

CREATE TRIGGER submission_counts_insert AFTER INSERT ON jobs BEGIN
  INSERT INTO submission_counts (submission_id, state, n) VALUES (NEW.submission_id, NEW.state, 1)
    ON CONFLICT (submission_id, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER submission_counts_update AFTER UPDATE OF state ON jobs
    WHEN OLD.state != NEW.state BEGIN
  UPDATE submission_counts SET n = n - 1
    WHERE submission_id = OLD.submission_id AND state = OLD.state;
  INSERT INTO submission_counts (submission_id, state, n) VALUES (NEW.submission_id, NEW.state, 1)
    ON CONFLICT (submission_id, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER submission_counts_delete AFTER DELETE ON jobs BEGIN
  UPDATE submission_counts SET n = n - 1
    WHERE submission_id = OLD.submission_id AND state = OLD.state;
END;

-- A submission's jobs waiting for a tokenizer, counted at the same places
-- from their own index instead of a walk over the submission's queued jobs.
CREATE INDEX jobs_untokenised_submission ON jobs (submission_id)
  WHERE state = 'queued' AND kv_tokens IS NULL;
