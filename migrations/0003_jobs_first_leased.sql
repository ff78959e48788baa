-- When a job was first leased (NULL until then): the end of its queue time,
-- which a later lease (after a lost lease or a draining worker's hand-back)
-- does not move. Jobs leased before this migration take their last update.
ALTER TABLE jobs ADD COLUMN first_leased_at_ms INTEGER;
UPDATE jobs SET first_leased_at_ms = updated_at_ms WHERE COALESCE(worker_id, '') != '';
