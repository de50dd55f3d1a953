-- The payment provider's own ledger (a stand-in for Stripe, Alipay or WeChat Pay), in a
-- database of its own: what the provider charged, whatever its callers believe.
CREATE TABLE ledger (
    -- The caller's Idempotency-Key: one charge per key, however often it is sent.
    key          TEXT        PRIMARY KEY CHECK (length(key) BETWEEN 1 AND 255),
    amount_cents BIGINT      NOT NULL CHECK (amount_cents >= 0),
    status       TEXT        NOT NULL CHECK (status IN ('succeeded', 'declined')),
    reference    TEXT        NOT NULL UNIQUE,
    -- When the charge started and ended at the provider: its concurrency, after the fact.
    started_at   TIMESTAMPTZ NOT NULL,
    ended_at     TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX ledger_ended ON ledger (ended_at);
