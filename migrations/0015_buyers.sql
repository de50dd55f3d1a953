-- Buyers are who their token says (issue 47).
--
-- An Idempotency-Key is scoped to its buyer: the same key from two buyers is two keys. The
-- stored key is the buyer's id, a unit separator (U+001F: no buyer id holds a control
-- character), then the client's key; the keys kept so far are moved under their buyer (the
-- request each was first used with names it), so a retry across the upgrade still replays.
UPDATE idempotency_keys
   SET key = (request ->> 'user_id') || chr(31) || key
 WHERE strpos(key, chr(31)) = 0 AND request ->> 'user_id' IS NOT NULL;

-- `GET /orders`: a buyer's orders, newest first, a page at a time.
CREATE INDEX orders_by_buyer ON orders (user_id, created_at DESC, id DESC);
