-- The SQL API on a primary.
CREATE EXTENSION greenreplica;

-- A primary runs no scheduler.
SELECT role, mode, phase, worker_pid IS NULL AS no_scheduler
  FROM greenreplica_status;

-- The view and the function agree.
SELECT (SELECT role FROM greenreplica_status) =
       (SELECT role FROM greenreplica_status()) AS same_role;

-- Status is for monitoring roles only.
CREATE ROLE gr_nobody;
CREATE ROLE gr_monitor IN ROLE pg_monitor;
SET ROLE gr_nobody;
SELECT role FROM greenreplica_status;
RESET ROLE;
SET ROLE gr_monitor;
SELECT role FROM greenreplica_status;
RESET ROLE;
DROP ROLE gr_nobody, gr_monitor;

-- The library is already loaded; LOAD is then a no-op, not an error.
LOAD 'greenreplica';

DROP EXTENSION greenreplica;

-- An installation of 0.1 updates in place to the current columns.
CREATE EXTENSION greenreplica VERSION '0.1';
ALTER EXTENSION greenreplica UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'greenreplica';
SELECT role, step IS NULL AS no_step, operator_paused, wal_receiver
  FROM greenreplica_status;
DROP EXTENSION greenreplica;
