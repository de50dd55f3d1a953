-- A payment is an intent first: its row is written before its charge is sent (for a
-- `pay: true` order in the lock cycle's own commit), under the key the provider sees on
-- every try, and its outcome is recorded when the provider's answer is known. Until then
-- `outcome` is NULL: pending, settled by the sweep asking the provider under the same key.
ALTER TABLE payments ALTER COLUMN outcome DROP NOT NULL,
                     ALTER COLUMN provider_ref DROP NOT NULL,
                     ADD COLUMN key TEXT,
                     ADD COLUMN settled_at TIMESTAMPTZ;
-- Rows from before intents were charged in-process, with no key the provider knows.
UPDATE payments SET key = 'legacy-' || id, settled_at = created_at WHERE key IS NULL;
ALTER TABLE payments ALTER COLUMN key SET NOT NULL;
-- One row per charge: a record retried after a lost acknowledgement updates it.
ALTER TABLE payments ADD CONSTRAINT payments_key UNIQUE (key);
CREATE INDEX payments_pending ON payments (created_at) WHERE outcome IS NULL;

-- An Idempotency-Key is "in progress" until its attempt's own deadline (the request timeout
-- plus a margin), not a fixed minute: then a retry may take it over.
ALTER TABLE idempotency_keys ADD COLUMN deadline TIMESTAMPTZ;
