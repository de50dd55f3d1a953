-- A live ZooKeeper ensemble is not fenced out by a stranger (an instance pointed at a
-- staging ZooKeeper over this database): every running instance extends its ensemble's
-- `alive_until`, and an ensemble new to Postgres, or ranked below another, takes the
-- highest epoch only once every ensemble ranked above it has been silent past its
-- `alive_until`. A wiped ZooKeeper's old identity goes silent, so that recovery still
-- happens on its own, a few session timeouts later.
ALTER TABLE zk_ensembles ADD COLUMN alive_until TIMESTAMPTZ NOT NULL DEFAULT now();
