-- Who learnt a payment's outcome: the order's own request (`answer`: the provider answered
-- it) or the sweep (`sweep`: the answer never came, and the sweep asked the provider again
-- under the same key). The page shows it beside the intent; the ledger's line is the proof.
-- NULL on a payment settled before this column existed: by whom was not recorded.
ALTER TABLE payments ADD COLUMN settled_by TEXT CHECK (settled_by IN ('answer', 'sweep'));
