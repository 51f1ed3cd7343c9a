-- TPC-C-like workload: helpers, the loader and the five transactions as
-- PL/pgSQL functions.  The pgbench scripts beside this file call them with
-- inputs drawn per the specification's distributions.

-- NURand(A, x, y) of the specification (2.1.6) with run constant c.
CREATE FUNCTION tpcc_nurand(a integer, x integer, y integer, c integer)
RETURNS integer LANGUAGE sql VOLATILE AS $$
    SELECT ((((floor(random() * (a + 1))::integer)
              | (x + floor(random() * (y - x + 1))::integer)) + c) % (y - x + 1)) + x
$$;

-- A random alphanumeric string of lo..hi characters.
CREATE FUNCTION tpcc_astring(lo integer, hi integer)
RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT substr(repeat(md5(random()::text), 16), 1, lo + floor(random() * (hi - lo + 1))::integer)
$$;

-- A random number string of exactly n digits.
CREATE FUNCTION tpcc_nstring(n integer)
RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT lpad((floor(random() * 10 ^ least(n, 15)))::bigint::text, n, '0')
$$;

-- Customer last name from a number 0..999 (4.3.2.3).
CREATE FUNCTION tpcc_last_name(n integer)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT s[n / 100 + 1] || s[(n / 10) % 10 + 1] || s[n % 10 + 1]
      FROM (SELECT ARRAY['BAR', 'OUGHT', 'ABLE', 'PRI', 'PRES',
                         'ESE', 'ANTI', 'CALLY', 'ATION', 'EING'] AS s) AS syllables
$$;

-- Data of 26..50 characters, 10 % of it containing "ORIGINAL".
CREATE FUNCTION tpcc_data()
RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT CASE WHEN random() < 0.1
                THEN overlay(tpcc_astring(26, 50) PLACING 'ORIGINAL' FROM 5)
                ELSE tpcc_astring(26, 50) END
$$;

-- Populate the database for the given number of warehouses with the
-- specification's initial cardinalities (4.3.3.1).
CREATE FUNCTION tpcc_load(warehouses integer)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO item
    SELECT i, 1 + floor(random() * 10000), tpcc_astring(14, 24),
           round((1 + random() * 99)::numeric, 2), tpcc_data()
      FROM generate_series(1, 100000) AS i;

    INSERT INTO warehouse
    SELECT w, tpcc_astring(6, 10), tpcc_astring(10, 20), tpcc_astring(10, 20),
           tpcc_astring(10, 20), upper(tpcc_astring(2, 2)), tpcc_nstring(4) || '11111',
           round((random() * 0.2)::numeric, 4), 300000
      FROM generate_series(1, warehouses) AS w;

    INSERT INTO stock
    SELECT w, i, 10 + floor(random() * 91),
           tpcc_astring(24, 24), tpcc_astring(24, 24), tpcc_astring(24, 24),
           tpcc_astring(24, 24), tpcc_astring(24, 24), tpcc_astring(24, 24),
           tpcc_astring(24, 24), tpcc_astring(24, 24), tpcc_astring(24, 24),
           tpcc_astring(24, 24), 0, 0, 0, tpcc_data()
      FROM generate_series(1, warehouses) AS w, generate_series(1, 100000) AS i;

    INSERT INTO district
    SELECT w, d, tpcc_astring(6, 10), tpcc_astring(10, 20), tpcc_astring(10, 20),
           tpcc_astring(10, 20), upper(tpcc_astring(2, 2)), tpcc_nstring(4) || '11111',
           round((random() * 0.2)::numeric, 4), 30000, 3001
      FROM generate_series(1, warehouses) AS w, generate_series(1, 10) AS d;

    INSERT INTO customer
    SELECT w, d, c, tpcc_astring(8, 16), 'OE',
           tpcc_last_name(CASE WHEN c <= 1000 THEN c - 1 ELSE tpcc_nurand(255, 0, 999, 157) END),
           tpcc_astring(10, 20), tpcc_astring(10, 20), tpcc_astring(10, 20),
           upper(tpcc_astring(2, 2)), tpcc_nstring(4) || '11111', tpcc_nstring(16), now(),
           CASE WHEN random() < 0.1 THEN 'BC' ELSE 'GC' END, 50000,
           round((random() * 0.5)::numeric, 4), -10, 10, 1, 0, tpcc_astring(300, 500)
      FROM generate_series(1, warehouses) AS w, generate_series(1, 10) AS d,
           generate_series(1, 3000) AS c;

    INSERT INTO history
    SELECT c_id, c_d_id, c_w_id, c_d_id, c_w_id, now(), 10, tpcc_astring(12, 24)
      FROM customer;

    -- Orders 1..3000 per district for a random permutation of customers;
    -- the last 900 are undelivered (new orders).
    INSERT INTO orders
    SELECT w, d, o, c, now(),
           CASE WHEN o < 2101 THEN 1 + floor(random() * 10) END,
           5 + floor(random() * 11), 1
      FROM generate_series(1, warehouses) AS w, generate_series(1, 10) AS d,
           LATERAL (SELECT row_number() OVER (ORDER BY random()) AS o, c
                      FROM generate_series(1, 3000) AS c) AS perm;

    INSERT INTO order_line
    SELECT o_w_id, o_d_id, o_id, n, 1 + floor(random() * 100000), o_w_id,
           CASE WHEN o_id < 2101 THEN o_entry_d END, 5,
           CASE WHEN o_id < 2101 THEN 0 ELSE round((0.01 + random() * 9999.98)::numeric, 2) END,
           tpcc_astring(24, 24)
      FROM orders, generate_series(1, o_ol_cnt) AS n;

    INSERT INTO new_order
    SELECT o_w_id, o_d_id, o_id FROM orders WHERE o_id >= 2101;
END
$$;

-- New-Order (2.4): with p_rollback the last item is unused, and the whole
-- transaction is rolled back, as the specification's 1 % of New-Orders are.
CREATE FUNCTION tpcc_new_order(p_w integer, p_d integer, p_c integer,
                               p_ol_cnt integer, p_rollback boolean, p_warehouses integer)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_o_id   integer;
    v_item   integer;
    v_supply integer;
    v_qty    integer;
    v_price  numeric;
    v_dist   char(24);
    v_local  integer := 1;
BEGIN
    PERFORM w_tax FROM warehouse WHERE w_id = p_w;
    UPDATE district SET d_next_o_id = d_next_o_id + 1
     WHERE d_w_id = p_w AND d_id = p_d
    RETURNING d_next_o_id - 1 INTO v_o_id;
    PERFORM c_discount, c_last, c_credit FROM customer
     WHERE c_w_id = p_w AND c_d_id = p_d AND c_id = p_c;

    INSERT INTO orders VALUES (p_w, p_d, v_o_id, p_c, now(), NULL, p_ol_cnt, 1);
    INSERT INTO new_order VALUES (p_w, p_d, v_o_id);

    FOR n IN 1 .. p_ol_cnt LOOP
        v_item := CASE WHEN p_rollback AND n = p_ol_cnt THEN 100001
                       ELSE tpcc_nurand(8191, 1, 100000, 7911) END;
        v_supply := p_w;
        IF p_warehouses > 1 AND random() < 0.01 THEN
            v_supply := 1 + (p_w + floor(random() * (p_warehouses - 1))::integer) % p_warehouses;
            v_local := 0;
        END IF;
        v_qty := 1 + floor(random() * 10);

        SELECT i_price INTO v_price FROM item WHERE i_id = v_item;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'item number is not valid' USING ERRCODE = 'no_data_found';
        END IF;

        UPDATE stock
           SET s_quantity = CASE WHEN s_quantity - v_qty >= 10 THEN s_quantity - v_qty
                                 ELSE s_quantity - v_qty + 91 END,
               s_ytd = s_ytd + v_qty,
               s_order_cnt = s_order_cnt + 1,
               s_remote_cnt = s_remote_cnt + (v_supply <> p_w)::integer
         WHERE s_w_id = v_supply AND s_i_id = v_item
        RETURNING CASE p_d WHEN 1 THEN s_dist_01 WHEN 2 THEN s_dist_02 WHEN 3 THEN s_dist_03
                           WHEN 4 THEN s_dist_04 WHEN 5 THEN s_dist_05 WHEN 6 THEN s_dist_06
                           WHEN 7 THEN s_dist_07 WHEN 8 THEN s_dist_08 WHEN 9 THEN s_dist_09
                           ELSE s_dist_10 END INTO v_dist;

        INSERT INTO order_line
        VALUES (p_w, p_d, v_o_id, n, v_item, v_supply, NULL, v_qty, v_qty * v_price, v_dist);
    END LOOP;

    IF v_local = 0 THEN
        UPDATE orders SET o_all_local = 0
         WHERE o_w_id = p_w AND o_d_id = p_d AND o_id = v_o_id;
    END IF;
    RETURN 'committed';
EXCEPTION
    WHEN no_data_found THEN
        RETURN 'rolled back';
END
$$;

-- Payment (2.5): by customer number, or by last name (the middle one).
CREATE FUNCTION tpcc_payment(p_w integer, p_d integer, p_c_w integer, p_c_d integer,
                             p_c integer, p_last text, p_amount numeric)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_c      integer := p_c;
    v_credit char(2);
BEGIN
    UPDATE warehouse SET w_ytd = w_ytd + p_amount WHERE w_id = p_w;
    UPDATE district SET d_ytd = d_ytd + p_amount WHERE d_w_id = p_w AND d_id = p_d;

    IF p_last IS NOT NULL THEN
        SELECT c_id INTO v_c FROM (
            SELECT c_id, row_number() OVER (ORDER BY c_first) AS rn, count(*) OVER () AS cnt
              FROM customer
             WHERE c_w_id = p_c_w AND c_d_id = p_c_d AND c_last = p_last) AS matches
         WHERE rn = (cnt + 1) / 2;
        IF NOT FOUND THEN
            v_c := 1;
        END IF;
    END IF;

    UPDATE customer
       SET c_balance = c_balance - p_amount,
           c_ytd_payment = c_ytd_payment + p_amount,
           c_payment_cnt = c_payment_cnt + 1
     WHERE c_w_id = p_c_w AND c_d_id = p_c_d AND c_id = v_c
    RETURNING c_credit INTO v_credit;
    IF v_credit = 'BC' THEN
        UPDATE customer
           SET c_data = left(format('%s %s %s %s %s %s | ', v_c, p_c_d, p_c_w, p_d, p_w, p_amount)
                             || c_data, 500)
         WHERE c_w_id = p_c_w AND c_d_id = p_c_d AND c_id = v_c;
    END IF;

    INSERT INTO history
    VALUES (v_c, p_c_d, p_c_w, p_d, p_w, now(), p_amount, tpcc_astring(12, 24));
END
$$;

-- Order-Status (2.6): read-only.
CREATE FUNCTION tpcc_order_status(p_w integer, p_d integer, p_c integer, p_last text)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_c    integer := p_c;
    v_o_id integer;
    v_lines integer;
BEGIN
    IF p_last IS NOT NULL THEN
        SELECT c_id INTO v_c FROM (
            SELECT c_id, row_number() OVER (ORDER BY c_first) AS rn, count(*) OVER () AS cnt
              FROM customer
             WHERE c_w_id = p_w AND c_d_id = p_d AND c_last = p_last) AS matches
         WHERE rn = (cnt + 1) / 2;
    END IF;
    SELECT o_id INTO v_o_id FROM orders
     WHERE o_w_id = p_w AND o_d_id = p_d AND o_c_id = v_c
     ORDER BY o_id DESC LIMIT 1;
    SELECT count(*) INTO v_lines FROM order_line
     WHERE ol_w_id = p_w AND ol_d_id = p_d AND ol_o_id = v_o_id;
    RETURN v_lines;
END
$$;

-- Delivery (2.7): the oldest new order of each district of a warehouse.
CREATE FUNCTION tpcc_delivery(p_w integer, p_carrier integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_o_id      integer;
    v_c         integer;
    v_amount    numeric;
    v_delivered integer := 0;
BEGIN
    FOR d IN 1 .. 10 LOOP
        SELECT no_o_id INTO v_o_id FROM new_order
         WHERE no_w_id = p_w AND no_d_id = d
         ORDER BY no_o_id LIMIT 1
           FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        DELETE FROM new_order WHERE no_w_id = p_w AND no_d_id = d AND no_o_id = v_o_id;
        UPDATE orders SET o_carrier_id = p_carrier
         WHERE o_w_id = p_w AND o_d_id = d AND o_id = v_o_id
        RETURNING o_c_id INTO v_c;
        UPDATE order_line SET ol_delivery_d = now()
         WHERE ol_w_id = p_w AND ol_d_id = d AND ol_o_id = v_o_id;
        SELECT sum(ol_amount) INTO v_amount FROM order_line
         WHERE ol_w_id = p_w AND ol_d_id = d AND ol_o_id = v_o_id;
        UPDATE customer
           SET c_balance = c_balance + v_amount, c_delivery_cnt = c_delivery_cnt + 1
         WHERE c_w_id = p_w AND c_d_id = d AND c_id = v_c;
        v_delivered := v_delivered + 1;
    END LOOP;
    RETURN v_delivered;
END
$$;

-- Stock-Level (2.8): read-only.
CREATE FUNCTION tpcc_stock_level(p_w integer, p_d integer, p_threshold integer)
RETURNS bigint LANGUAGE sql AS $$
    SELECT count(DISTINCT s_i_id)
      FROM district
      JOIN order_line ON ol_w_id = d_w_id AND ol_d_id = d_id
                     AND ol_o_id >= d_next_o_id - 20 AND ol_o_id < d_next_o_id
      JOIN stock ON s_w_id = d_w_id AND s_i_id = ol_i_id
     WHERE d_w_id = p_w AND d_id = p_d AND s_quantity < p_threshold
$$;

-- The specification's consistency conditions 1-4 (3.3.2); a row per
-- condition with the number of warehouses or districts that violate it.
CREATE FUNCTION tpcc_consistency()
RETURNS TABLE (condition text, violations bigint) LANGUAGE sql STABLE AS $$
    SELECT '1: W_YTD = sum(D_YTD)', count(*)
      FROM warehouse w
     WHERE w.w_ytd <> (SELECT sum(d_ytd) FROM district WHERE d_w_id = w.w_id)
    UNION ALL
    SELECT '2: D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID)', count(*)
      FROM district d
     WHERE d.d_next_o_id - 1 <> (SELECT max(o_id) FROM orders
                                  WHERE o_w_id = d.d_w_id AND o_d_id = d.d_id)
        OR d.d_next_o_id - 1 <> coalesce((SELECT max(no_o_id) FROM new_order
                                           WHERE no_w_id = d.d_w_id AND no_d_id = d.d_id),
                                          d.d_next_o_id - 1)
    UNION ALL
    SELECT '3: max(NO_O_ID) - min(NO_O_ID) + 1 = count(new orders)', count(*)
      FROM (SELECT max(no_o_id) - min(no_o_id) + 1 AS span, count(*) AS n
              FROM new_order GROUP BY no_w_id, no_d_id) AS per_district
     WHERE span <> n
    UNION ALL
    SELECT '4: sum(O_OL_CNT) = count(order lines)', count(*)
      FROM (SELECT o_w_id, o_d_id, sum(o_ol_cnt) AS lines FROM orders GROUP BY 1, 2) AS o
      JOIN (SELECT ol_w_id, ol_d_id, count(*) AS lines FROM order_line GROUP BY 1, 2) AS ol
        ON ol.ol_w_id = o.o_w_id AND ol.ol_d_id = o.o_d_id
     WHERE o.lines <> ol.lines
$$;
