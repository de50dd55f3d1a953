-- The order an Idempotency-Key created, recorded as soon as the order row exists: a retry
-- after a failure that left the order with effects (reserved, charged) reports that order
-- instead of placing a second one.
ALTER TABLE idempotency_keys ADD COLUMN order_id UUID REFERENCES orders (id);
