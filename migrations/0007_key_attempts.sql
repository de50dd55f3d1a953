-- Which attempt holds an Idempotency-Key. A key can be freed (its order sold nothing) and
-- taken by a later attempt; the first attempt's late bookkeeping must then leave the new
-- row alone, so every write that finishes an attempt names it.
ALTER TABLE idempotency_keys ADD COLUMN attempt UUID;
