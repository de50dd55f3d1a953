-- Combined orders: one lock cycle serves up to `batch_max` queued orders of a product in one
-- transaction. 1 is per-request locking (each order takes the lock for itself), kept for
-- teaching and comparison; products from before keep it.
ALTER TABLE products
    ADD COLUMN batch_max INTEGER NOT NULL DEFAULT 1 CHECK (batch_max BETWEEN 1 AND 4096);

-- How many orders the lock cycle (or guarded transaction) that decided this order served.
ALTER TABLE orders
    ADD COLUMN batch_size INTEGER CHECK (batch_size >= 1);

