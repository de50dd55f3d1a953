-- A key's first recorded answer is its answer for good: a later write of a key that already
-- has one (an attempt's late retry of its record, a settlement racing it) changes nothing,
-- so a replay never goes from `paid` back to `reserved`. The service's own statements say
-- `response IS NULL` too; this keeps it true for every writer.
CREATE FUNCTION idempotency_keep_first_answer() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RETURN NULL; -- skip the update: the row keeps its first answer
END $$;

CREATE TRIGGER idempotency_first_answer_wins
    BEFORE UPDATE ON idempotency_keys
    FOR EACH ROW WHEN (OLD.response IS NOT NULL)
    EXECUTE FUNCTION idempotency_keep_first_answer();

-- Lapsed reservations of one product, oldest first: the returns' lock cycle takes them by
-- the hundred under the product's guard.
CREATE INDEX orders_due_by_product ON orders (product_id, expires_at) WHERE status = 'reserved';
