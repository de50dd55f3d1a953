-- Flash-sale rules: per-customer limits, reserve-then-pay with expiry, idempotent orders.

ALTER TABLE products
    -- Most units one user may hold (reserved + paid) of this product.
    ADD COLUMN per_user_limit    INTEGER NOT NULL DEFAULT 1 CHECK (per_user_limit >= 1),
    -- How long a reservation waits for its payment before the stock goes back on sale.
    ADD COLUMN reservation_ttl_s INTEGER NOT NULL DEFAULT 600 CHECK (reservation_ttl_s >= 1);

ALTER TABLE orders
    ADD COLUMN expires_at TIMESTAMPTZ;

-- `paying`: claimed by a payment, so expiry cannot return its stock under it.
-- `expired`: the reservation ran out unpaid; its stock went back on sale.
ALTER TABLE orders DROP CONSTRAINT orders_status_check;
ALTER TABLE orders ADD CONSTRAINT orders_status_check CHECK (status IN
    ('created', 'reserved', 'paying', 'paid', 'sold_out', 'payment_failed', 'expired', 'failed'));

-- The expiry sweep looks for due reservations only.
CREATE INDEX orders_due ON orders (expires_at) WHERE status = 'reserved';

-- Units each user holds per product. The CHECK is the per-customer limit: concurrent orders
-- of one user, on any instance and under any guard, serialise on this row and cannot pass it.
CREATE TABLE purchases (
    product_id BIGINT  NOT NULL REFERENCES products (id),
    user_id    TEXT    NOT NULL,
    units      INTEGER NOT NULL CHECK (units >= 0),
    max_units  INTEGER NOT NULL,
    CONSTRAINT purchases_within_limit CHECK (units <= max_units),
    PRIMARY KEY (product_id, user_id)
);

INSERT INTO purchases (product_id, user_id, units, max_units)
SELECT o.product_id, o.user_id, SUM(o.quantity), GREATEST(MAX(p.per_user_limit), SUM(o.quantity))
FROM orders o JOIN products p ON p.id = o.product_id
WHERE o.status IN ('reserved', 'paid')
GROUP BY o.product_id, o.user_id;

-- One row per Idempotency-Key: the request it was first used with and, once the order has
-- finished, the exact response to replay. No response yet = still in flight.
CREATE TABLE idempotency_keys (
    key          TEXT PRIMARY KEY,
    request      JSONB       NOT NULL,
    status_code  SMALLINT,
    response     TEXT,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    completed_at TIMESTAMPTZ
);

CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
