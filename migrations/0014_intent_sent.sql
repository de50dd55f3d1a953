-- An intent remembers whether its charge was sent: it is marked before the first request
-- to the provider leaves, and an intent never marked was never sent. The sweep charges or
-- looks up only sent intents, and drops unsent ones: a buyer told "not charged" (no payment
-- lease, no time left, the database away when the order was given back) stays not charged.
ALTER TABLE payments ADD COLUMN sent_at TIMESTAMPTZ;
-- Intents from before this column may have been sent: they count as sent.
UPDATE payments SET sent_at = created_at;

-- 0013's backfill summed the orders without locking them: a lock cycle that had written
-- its product's row and committed its orders while the backfill ran could leave `sold`
-- short. Summed again here, with the orders locked against writers until this migration
-- commits (the triggers keep the count from then on).
LOCK TABLE orders IN SHARE MODE;
UPDATE products p
SET sold = COALESCE((SELECT SUM(o.quantity) FROM orders o
                     WHERE o.product_id = p.id AND o.status IN ('reserved', 'paying', 'paid')), 0);
