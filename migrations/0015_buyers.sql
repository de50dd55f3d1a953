-- Buyers are who their token says (issue 47).
--
-- An Idempotency-Key is scoped to its buyer: the same key from two buyers is two keys. The
-- stored key is the buyer's id, a unit separator (U+001F: no buyer id holds a control
-- character), then the client's key; the keys kept so far are moved under their buyer (the
-- request each was first used with names it), so a retry across the upgrade still replays.
-- The first-answer trigger (0012) would skip every answered key's update: off meanwhile.
ALTER TABLE idempotency_keys DISABLE TRIGGER idempotency_first_answer_wins;
UPDATE idempotency_keys
   SET key = (request ->> 'user_id') || chr(31) || key
 WHERE strpos(key, chr(31)) = 0 AND request ->> 'user_id' IS NOT NULL;
ALTER TABLE idempotency_keys ENABLE TRIGGER idempotency_first_answer_wins;

-- `GET /orders`: a buyer's orders, newest first, a page at a time.
CREATE INDEX orders_by_buyer ON orders (user_id, created_at DESC, id DESC);

-- The demo issuer's signing key (`--buyer-auth demo`): 32 random bytes, made by the first
-- instance that needs them and read by every other, so a token one instance issued is
-- accepted by all. Random rather than derived from a secret of the deployment: its public
-- half is published, and must not let anyone test guesses of that secret offline.
CREATE TABLE demo_issuer (
    only_one   BOOLEAN     PRIMARY KEY DEFAULT true CHECK (only_one),
    seed       BYTEA       NOT NULL CHECK (length(seed) = 32),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
