-- A product's terms (price, limits, reservation time) can change during a sale: the change
-- takes the product's terms write lock and bumps this version; each lock cycle reads the
-- terms from the row in its own stock transaction, so none decides on terms older than it.
ALTER TABLE products ADD COLUMN terms_version INT NOT NULL DEFAULT 1;

-- When each charge started and ended at the provider (NULL for payments recorded before):
-- the provider's concurrency, after the fact, against --payment-concurrency.
ALTER TABLE payments ADD COLUMN started_at TIMESTAMPTZ, ADD COLUMN ended_at TIMESTAMPTZ;
