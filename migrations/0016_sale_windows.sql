-- A sale opens at its second (issue 48): its window, a pause, and a line for the crowd.
--
-- `opens_at` NULL: on sale since it was created (every product made before this migration).
-- The window and the pause are terms: changed under the terms write lock, with a new
-- `terms_version`, and read again by each lock cycle from the row.
ALTER TABLE products
    ADD COLUMN opens_at  TIMESTAMPTZ,
    ADD COLUMN closes_at TIMESTAMPTZ,
    ADD COLUMN paused    BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN line      BOOLEAN NOT NULL DEFAULT false,
    ADD CONSTRAINT products_window CHECK (opens_at IS NULL OR closes_at IS NULL OR opens_at < closes_at);

-- A product's line (waiting room): one row, which every instance reads and one at a time
-- writes. `drawn_at` NULL: the opening's draw has not happened; `last_place`: the highest
-- place given so far; places 1..`admitted` are let in. `window_size`: how many passes may be
-- in buyers' hands (the pace's, see src/line/pace.rs). `paced_at`: when an instance last
-- let places in (one instance a tick: the others skip the locked row).
CREATE TABLE lines (
    product_id   BIGINT           PRIMARY KEY REFERENCES products (id),
    drawn_at     TIMESTAMPTZ,
    drawn        BIGINT           NOT NULL DEFAULT 0 CHECK (drawn >= 0),
    last_place   BIGINT           NOT NULL DEFAULT 0 CHECK (last_place >= drawn),
    admitted     BIGINT           NOT NULL DEFAULT 0 CHECK (admitted >= 0 AND admitted <= last_place),
    rate         DOUBLE PRECISION NOT NULL DEFAULT 0,
    window_size  BIGINT           NOT NULL DEFAULT 200 CHECK (window_size > 0),
    paced_at     TIMESTAMPTZ      NOT NULL DEFAULT 'epoch'
);

-- One place per buyer. Who joins before the opening gets `draw` (random, 63 bits) and no
-- place until the draw numbers them by it; who joins after gets the next place at once.
-- `seen_at`: when the buyer first looked after their place was let in (they hold their pass:
-- the pace counts them on their way). `spent_at`: when the pass was used (given back if its
-- order was refused). `refused_at`: when its order was last refused for the shop's load (a
-- full queue, a lock not granted in time): the pace's sign to let in fewer.
CREATE TABLE line_places (
    product_id BIGINT      NOT NULL REFERENCES lines (product_id),
    buyer      TEXT        NOT NULL,
    joined_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    draw       BIGINT,
    place      BIGINT,
    seen_at    TIMESTAMPTZ,
    spent_at   TIMESTAMPTZ,
    refused_at TIMESTAMPTZ,
    PRIMARY KEY (product_id, buyer),
    CHECK (place IS NOT NULL OR draw IS NOT NULL)
);
CREATE UNIQUE INDEX line_places_by_place ON line_places (product_id, place) WHERE place IS NOT NULL;
-- The pace reads the passes spent lately, and those seen lately.
CREATE INDEX line_places_spent ON line_places (product_id, spent_at) WHERE spent_at IS NOT NULL;
CREATE INDEX line_places_seen ON line_places (product_id, seen_at) WHERE seen_at IS NOT NULL;
CREATE INDEX line_places_refused ON line_places (product_id, refused_at) WHERE refused_at IS NOT NULL;

-- Each time places were let in: a pass's validity runs from its place's admission.
CREATE TABLE line_admissions (
    product_id BIGINT      NOT NULL REFERENCES lines (product_id),
    through    BIGINT      NOT NULL,
    at         TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (product_id, through)
);

-- The key every instance signs and checks passes with: 32 random bytes made by the first
-- instance that needs them (as `demo_issuer`'s).
CREATE TABLE line_key (
    only_one   BOOLEAN     PRIMARY KEY DEFAULT true CHECK (only_one),
    secret     BYTEA       NOT NULL CHECK (length(secret) = 32),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Joining, in one round trip (a crowd of thousands joins in the seconds before an opening).
-- Before the draw: a place-less row with the caller's random `draw`. After it: the next
-- place, from the line's counter. The shared advisory lock is the draw's to wait for: a
-- join in flight at the opening is in the draw or after it, never lost between. Joining
-- again returns the place already held (`created` false).
CREATE FUNCTION line_join(p_product BIGINT, p_buyer TEXT, p_draw BIGINT)
RETURNS TABLE (joined_at TIMESTAMPTZ, place BIGINT, spent_at TIMESTAMPTZ, created BOOLEAN)
LANGUAGE plpgsql AS $$
DECLARE
    v_drawn BOOLEAN;
    v_place BIGINT;
BEGIN
    -- A join is not money: acknowledged before its WAL is on disk, so the joins after the
    -- opening, which take turns on the line's counter, do not each wait for a flush. A crash
    -- may forget the last joins of a moment; joining again is safe.
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_advisory_xact_lock_shared(hashtext('seckill.line'), (p_product % 2147483648)::INT);
    RETURN QUERY SELECT lp.joined_at, lp.place, lp.spent_at, false
                 FROM line_places lp WHERE lp.product_id = p_product AND lp.buyer = p_buyer;
    IF FOUND THEN
        RETURN;
    END IF;
    SELECT l.drawn_at IS NOT NULL INTO v_drawn FROM lines l WHERE l.product_id = p_product;
    IF NOT FOUND THEN
        RETURN; -- no line: no row
    END IF;
    IF NOT v_drawn THEN
        INSERT INTO line_places AS lp (product_id, buyer, draw) VALUES (p_product, p_buyer, p_draw)
        ON CONFLICT (product_id, buyer) DO NOTHING;
    ELSE
        -- The counter's row lock orders the joins after the draw; a twin request of the same
        -- buyer that got in first is seen once we hold it, and its place is kept.
        UPDATE lines l SET last_place = l.last_place + 1 WHERE l.product_id = p_product
        RETURNING l.last_place INTO v_place;
        IF EXISTS (SELECT 1 FROM line_places lp WHERE lp.product_id = p_product AND lp.buyer = p_buyer) THEN
            UPDATE lines l SET last_place = l.last_place - 1 WHERE l.product_id = p_product;
        ELSE
            INSERT INTO line_places (product_id, buyer, place) VALUES (p_product, p_buyer, v_place);
        END IF;
    END IF;
    RETURN QUERY SELECT lp.joined_at, lp.place, lp.spent_at, true
                 FROM line_places lp WHERE lp.product_id = p_product AND lp.buyer = p_buyer;
END $$;

-- The opening's draw: everyone who joined before it, numbered in the order of their random
-- draws (a uniformly random order), once. Waits for the joins in flight (their shared lock).
-- Returns how many were drawn, or NULL if the line was drawn already.
CREATE FUNCTION line_draw(p_product BIGINT) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_n BIGINT;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('seckill.line'), (p_product % 2147483648)::INT);
    PERFORM 1 FROM lines WHERE product_id = p_product AND drawn_at IS NULL FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    WITH ranked AS (
        SELECT buyer, row_number() OVER (ORDER BY draw, buyer) AS n
        FROM line_places WHERE product_id = p_product AND place IS NULL
    )
    UPDATE line_places lp SET place = ranked.n
    FROM ranked WHERE lp.product_id = p_product AND lp.buyer = ranked.buyer;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    UPDATE lines SET drawn_at = clock_timestamp(), drawn = v_n, last_place = v_n
    WHERE product_id = p_product;
    RETURN v_n;
END $$;
