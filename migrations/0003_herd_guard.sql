-- `zk-herd`: the naive ZooKeeper lock (everyone watches one node), kept for the teaching page's
-- herd-effect comparison. Fenced like `zk`.
ALTER TABLE products DROP CONSTRAINT products_guard_check;
ALTER TABLE products ADD CONSTRAINT products_guard_check
    CHECK (guard IN ('zk', 'zk-herd', 'pg-atomic', 'none'));
