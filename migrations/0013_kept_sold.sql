-- The units a product's orders hold (reserved, paying, paid), kept by PostgreSQL itself:
-- `GET /api/products` and `/api/products/{id}` read this column instead of summing the
-- product's orders on every request (a flood of views would otherwise scan a hot sale's
-- orders thousands of times a second). The audit still sums the orders: it is the check,
-- and it says whether this count agrees.
--
-- Statement triggers over transition tables: a lock cycle's batch of orders is one INSERT
-- and costs one UPDATE per product, and a status change between counted statuses
-- (reserved -> paying -> paid) touches no product row at all.
ALTER TABLE products ADD COLUMN sold BIGINT NOT NULL DEFAULT 0;

UPDATE products p
SET sold = COALESCE((SELECT SUM(o.quantity) FROM orders o
                     WHERE o.product_id = p.id AND o.status IN ('reserved', 'paying', 'paid')), 0);

CREATE FUNCTION orders_keep_sold() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        UPDATE products p SET sold = p.sold + d.units
        FROM (SELECT product_id, SUM(quantity) AS units FROM new_rows
              WHERE status IN ('reserved', 'paying', 'paid') GROUP BY product_id) d
        WHERE p.id = d.product_id;
    ELSIF TG_OP = 'UPDATE' THEN
        UPDATE products p SET sold = p.sold + d.units
        FROM (SELECT product_id, SUM(units) AS units
              FROM (SELECT product_id, quantity AS units FROM new_rows
                    WHERE status IN ('reserved', 'paying', 'paid')
                    UNION ALL
                    SELECT product_id, -quantity FROM old_rows
                    WHERE status IN ('reserved', 'paying', 'paid')) changed
              GROUP BY product_id HAVING SUM(units) <> 0) d
        WHERE p.id = d.product_id;
    ELSE
        UPDATE products p SET sold = p.sold - d.units
        FROM (SELECT product_id, SUM(quantity) AS units FROM old_rows
              WHERE status IN ('reserved', 'paying', 'paid') GROUP BY product_id) d
        WHERE p.id = d.product_id;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER orders_sold_on_insert AFTER INSERT ON orders
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION orders_keep_sold();
CREATE TRIGGER orders_sold_on_update AFTER UPDATE ON orders
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION orders_keep_sold();
CREATE TRIGGER orders_sold_on_delete AFTER DELETE ON orders
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION orders_keep_sold();
