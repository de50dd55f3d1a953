-- Recovery from faults a deployment meets.

-- Every ZooKeeper ensemble that has granted a lock, numbered in the order Postgres first saw
-- it. A fencing token is (epoch, zxid): a wiped or replaced ensemble starts its zxids again
-- from zero, and its higher epoch is what lets its tokens supersede the old ones.
CREATE TABLE zk_ensembles (
    id          UUID PRIMARY KEY,
    epoch       BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    first_seen  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The epoch of the token in `fence`. 0: claimed before ensembles were told apart, older than
-- any ensemble's.
ALTER TABLE products ADD COLUMN fence_epoch BIGINT NOT NULL DEFAULT 0;

-- The sweep: an instance takes a row by moving this into the future, so the others skip it,
-- and a row it could not settle waits that long before anyone tries again instead of
-- blocking the rows behind it.
ALTER TABLE orders ADD COLUMN sweep_after TIMESTAMPTZ;

-- The sweep's other two questions: payments abandoned in `paying`, and orders left `created`.
CREATE INDEX orders_paying ON orders (updated_at) WHERE status = 'paying';
CREATE INDEX orders_created ON orders (created_at) WHERE status = 'created';
