-- The batch planner: the paper's formulas, the window cap, infeasibility.
CREATE EXTENSION greenreplica;

-- 1 MB/s generated, 50 MB/s applied, RTO 100 s, no spin-up, no cap.
SELECT round(t_apl::numeric, 2) AS t_apl, round(t_wnd::numeric, 1) AS t_wnd,
       max_unapplied_bytes, feasible, reason
  FROM greenreplica_plan(1e6, 5e7, 100, 0, 1e12::bigint);

-- Spin-up comes out of the budget.
SELECT max_unapplied_bytes FROM greenreplica_plan(1e6, 5e7, 100, 26, 1e12::bigint);

-- A 32 MB window caps the backlog and shortens the cycle.
SELECT round(t_apl::numeric, 3) AS t_apl, round(t_wnd::numeric, 2) AS t_wnd,
       max_unapplied_bytes
  FROM greenreplica_plan(1e6, 5e7, 100, 0, 32000000);

-- Infeasible plans say why.
SELECT t_apl, t_wnd, max_unapplied_bytes, feasible, reason
  FROM greenreplica_plan(5e7, 5e7, 100, 0, 1e12::bigint);
SELECT feasible, reason FROM greenreplica_plan(1e6, 5e7, 26, 26, 1e12::bigint);

-- No WAL at all: feasible, no forced batch.
SELECT t_wnd, feasible FROM greenreplica_plan(0, 5e7, 100, 0, 1e12::bigint);

-- Bad arguments.
SELECT * FROM greenreplica_plan(-1, 5e7, 100, 0, 1e12::bigint);
SELECT * FROM greenreplica_plan(1e6, 'NaN', 100, 0, 1e12::bigint);
SELECT * FROM greenreplica_plan(1e6, 5e7, 100, 0, 0);

-- Forcing a batch is a standby's business.
SELECT greenreplica_batch_now();

DROP EXTENSION greenreplica;
