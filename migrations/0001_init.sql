-- The sale's three tables. Statuses and guards are TEXT with CHECKs rather than enum types,
-- so adding one later is a one-line migration and sqlx needs no custom type mapping.

CREATE TABLE products (
    id             BIGSERIAL PRIMARY KEY,
    name           TEXT        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    price_cents    BIGINT      NOT NULL CHECK (price_cents >= 0),
    -- What is left to sell. Never negative; an oversell shows up as Σ orders > stocked_total.
    stock          INTEGER     NOT NULL CHECK (stock >= 0),
    -- Every unit ever put on sale: the audit's reference figure.
    stocked_total  INTEGER     NOT NULL CHECK (stocked_total >= 0),
    max_per_order  INTEGER     NOT NULL DEFAULT 10 CHECK (max_per_order >= 1),
    guard          TEXT        NOT NULL DEFAULT 'zk' CHECK (guard IN ('zk', 'pg-atomic', 'none')),
    -- Fencing token (czxid of the ZooKeeper lock node) of the newest holder that claimed the row.
    -- Stock writes under the lock carry `WHERE fence = <their token>`, so a holder whose lock
    -- was granted to someone newer cannot write.
    fence          BIGINT      NOT NULL DEFAULT 0,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE orders (
    id            UUID PRIMARY KEY,
    product_id    BIGINT      NOT NULL REFERENCES products (id),
    user_id       TEXT        NOT NULL CHECK (length(user_id) BETWEEN 1 AND 64),
    quantity      INTEGER     NOT NULL CHECK (quantity >= 1),
    amount_cents  BIGINT      NOT NULL CHECK (amount_cents >= 0),
    -- created -> reserved -> paid; or sold_out, payment_failed, failed.
    status        TEXT        NOT NULL DEFAULT 'created'
                  CHECK (status IN ('created', 'reserved', 'paid', 'sold_out', 'payment_failed', 'failed')),
    -- Why an order ended `failed` (lock_timeout, lock_lost, client_gone, ...).
    failure       TEXT,
    fence         BIGINT,
    lock_wait_ms  INTEGER,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The audit sums quantities per product and status.
CREATE INDEX orders_product_status ON orders (product_id, status);

CREATE TABLE payments (
    id            BIGSERIAL PRIMARY KEY,
    order_id      UUID        NOT NULL REFERENCES orders (id),
    amount_cents  BIGINT      NOT NULL CHECK (amount_cents >= 0),
    outcome       TEXT        NOT NULL CHECK (outcome IN ('succeeded', 'failed')),
    provider_ref  TEXT        NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX payments_order ON payments (order_id);
