/* greenreplica--0.1.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION greenreplica" to load this file. \quit

-- One row describing this server's greenreplica state.
CREATE FUNCTION greenreplica_status(
    OUT role text,
    OUT mode text,
    OUT phase text,
    OUT worker_pid integer
)
RETURNS record
AS 'MODULE_PATHNAME', 'greenreplica_status'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE VIEW greenreplica_status AS
    SELECT * FROM greenreplica_status();

COMMENT ON VIEW greenreplica_status IS
    'greenreplica state of this server: its role, the replay mode and the scheduler phase';

-- Status is for monitoring roles, not for everyone.
REVOKE ALL ON FUNCTION greenreplica_status() FROM PUBLIC;
REVOKE ALL ON greenreplica_status FROM PUBLIC;
GRANT EXECUTE ON FUNCTION greenreplica_status() TO pg_monitor;
GRANT SELECT ON greenreplica_status TO pg_monitor;
