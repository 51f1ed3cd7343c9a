/* greenreplica--0.7--0.8.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION greenreplica UPDATE TO '0.8'" to load this file. \quit

-- greenreplica_set_volume_temperature() marks the whole storage agent volume
-- [0, capacity) hot, cold or normal.  A QMD pair sleeps whole only when every
-- byte it holds is marked, so the usual sequence is the volume cold, then the
-- hot tablespaces hot (a later mark replaces an earlier one where they overlap).
CREATE FUNCTION greenreplica_set_volume_temperature(temperature text,
    OUT marked_bytes bigint, OUT ranges integer)
RETURNS record
AS 'MODULE_PATHNAME', 'greenreplica_set_volume_temperature'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION greenreplica_set_volume_temperature(text) IS
    'mark the whole storage agent volume hot, cold or normal; returns the bytes marked and the ranges the agent holds';

-- It drives the storage of the whole server: superusers only, unless granted.
REVOKE ALL ON FUNCTION greenreplica_set_volume_temperature(text) FROM PUBLIC;
