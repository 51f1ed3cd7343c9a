/* greenreplica--0.6--0.7.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION greenreplica UPDATE TO '0.7'" to load this file. \quit

-- greenreplica_status() gains write_only_batches: the batches whose window read
-- nothing from the data volume (every first touch an image or an init, or in
-- shared buffers or the OS page cache), so the scheduler woke the volume with
-- "writes_only" and the extents the window writes (a QMD volume then takes the
-- write-back in flash while its cold disks sleep).
DROP VIEW greenreplica_status;
DROP FUNCTION greenreplica_status();

-- One row describing this server's greenreplica state.
CREATE FUNCTION greenreplica_status(
    OUT role text,
    OUT mode text,
    OUT phase text,
    OUT worker_pid integer,
    OUT note text,
    OUT unapplied_bytes bigint,
    OUT max_unapplied_bytes bigint,
    OUT r_gen float8,
    OUT r_apl float8,
    OUT r_apl_measured boolean,
    OUT feasible boolean,
    OUT rto_budget_s float8,
    OUT rto_estimate_s float8,
    OUT next_batch_at timestamptz,
    OUT batches bigint,
    OUT last_batch_start timestamptz,
    OUT last_batch_duration_s float8,
    OUT last_batch_bytes bigint,
    OUT last_batch_records bigint,
    OUT last_batch_buffers_flushed bigint,
    OUT last_batch_windows bigint,
    OUT last_batch_decoded_records bigint,
    OUT last_batch_block_refs bigint,
    OUT last_batch_distinct_blocks bigint,
    OUT last_batch_reads_needed bigint,
    OUT last_batch_reads_avoided bigint,
    OUT last_batch_fold_ratio float8,
    OUT last_batch_prefetch_ios bigint,
    OUT last_batch_prefetch_bytes bigint,
    OUT last_batch_sequential_share float8,
    OUT last_batch_decode_seconds float8,
    OUT last_batch_bytes_per_block float8,
    OUT last_batch_hint_extents bigint,
    OUT total_block_refs bigint,
    OUT total_distinct_blocks bigint,
    OUT total_reads_avoided bigint,
    OUT total_prefetch_ios bigint,
    OUT total_prefetch_bytes bigint,
    OUT window_splits bigint,
    OUT prefetches_aborted bigint,
    OUT spin_cycles_today integer,
    OUT agent text,
    OUT agent_message text,
    OUT volume_state text,
    OUT spin_up_s float8,
    OUT break_even_s float8,
    OUT last_promotion_s float8,
    OUT step text,
    OUT step_started_at timestamptz,
    OUT volume_state_at timestamptz,
    OUT oldest_unapplied_age_s float8,
    OUT operator_paused boolean,
    OUT wal_receiver text,
    OUT sleep_volume_ios bigint,
    OUT sleep_volume_spin_ups bigint,
    OUT unapplied_reads bigint,
    OUT read_time_ms float8,
    OUT read_time_measured boolean,
    OUT replay_rate float8,
    OUT step_done bigint,
    OUT step_total bigint,
    OUT last_batch_wake_s float8,
    OUT last_batch_prefetch_s float8,
    OUT last_batch_apply_s float8,
    OUT last_batch_flush_s float8,
    OUT last_batch_gap_blocks bigint,
    OUT carried_dirty_buffers bigint,
    OUT carried_write_s float8,
    OUT write_back text,
    OUT last_batch_ended_at_checkpoint boolean,
    OUT restartpoints bigint,
    OUT spin_cycle_budget integer,
    OUT paced boolean,
    OUT pace_interval_s float8,
    OUT last_batch_blocks_cached bigint,
    OUT write_only_batches bigint
)
RETURNS record
AS 'MODULE_PATHNAME', 'greenreplica_status'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE VIEW greenreplica_status AS
    SELECT * FROM greenreplica_status();

COMMENT ON VIEW greenreplica_status IS
    'greenreplica state of this server: role, replay mode, batch cycle, rates, RTO, compaction and the data volume';

REVOKE ALL ON FUNCTION greenreplica_status() FROM PUBLIC;
REVOKE ALL ON greenreplica_status FROM PUBLIC;
GRANT EXECUTE ON FUNCTION greenreplica_status() TO pg_monitor;
GRANT SELECT ON greenreplica_status TO pg_monitor;

-- greenreplica_set_tablespace_temperature() reports what it could not mark:
-- the extents sent, the files mapped, and the files skipped (each named in a
-- WARNING: not opened, or not wholly mapped to the volume).
DROP FUNCTION greenreplica_set_tablespace_temperature(name, text);

CREATE FUNCTION greenreplica_set_tablespace_temperature(tablespace name, temperature text,
    OUT extents integer, OUT files integer, OUT skipped_files integer)
RETURNS record
AS 'MODULE_PATHNAME', 'greenreplica_set_tablespace_temperature'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION greenreplica_set_tablespace_temperature(name, text) IS
    'mark a tablespace hot, cold or normal on the storage agent''s volume; returns the extents sent and the files mapped and skipped';

-- It drives the storage of the whole server: superusers only, unless granted.
REVOKE ALL ON FUNCTION greenreplica_set_tablespace_temperature(name, text) FROM PUBLIC;
