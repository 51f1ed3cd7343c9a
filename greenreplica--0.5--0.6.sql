/* greenreplica--0.5--0.6.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION greenreplica UPDATE TO '0.6'" to load this file. \quit

-- Mark a tablespace hot, cold or normal on the storage agent's volume (QMD's
-- partial on-line mirrors: mirrored pairs that hold only cold data may sleep
-- whole).  Maps the tablespace's files to volume extents with FIEMAP and
-- sends them to the agent; returns the number of extents sent.
CREATE FUNCTION greenreplica_set_tablespace_temperature(tablespace name, temperature text)
RETURNS integer
AS 'MODULE_PATHNAME', 'greenreplica_set_tablespace_temperature'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION greenreplica_set_tablespace_temperature(name, text) IS
    'mark a tablespace hot, cold or normal on the storage agent''s volume';

-- It drives the storage of the whole server: superusers only, unless granted.
REVOKE ALL ON FUNCTION greenreplica_set_tablespace_temperature(name, text) FROM PUBLIC;
