-- Job counts by model and state (the scheduler's nightshift_jobs gauge, read
-- at every metrics scrape) come from this index alone instead of a scan of
-- every job row with its request: 0.017 s instead of 0.22 s for 200k jobs
-- of 600-byte requests, measured with sqlite3.
CREATE INDEX jobs_model_state ON jobs (model, state);
