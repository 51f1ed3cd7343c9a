-- Marking tablespaces, or the whole volume, hot or cold on the storage agent's volume.
CREATE EXTENSION greenreplica;

-- A temperature other than hot, cold or normal is refused first.
SELECT greenreplica_set_tablespace_temperature('pg_default', 'warm');
SELECT greenreplica_set_tablespace_temperature('pg_default', '');

-- An unknown tablespace.
SELECT greenreplica_set_tablespace_temperature('no_such_tablespace', 'cold');

-- This instance has no storage agent.
SELECT greenreplica_set_tablespace_temperature('pg_default', 'cold');

-- NULLs are no request at all.
SELECT greenreplica_set_tablespace_temperature(NULL, 'cold') IS NULL AS no_request;

-- The whole volume: the same temperatures, checked first.
SELECT * FROM greenreplica_set_volume_temperature('warm');
SELECT * FROM greenreplica_set_volume_temperature('Cold');
-- This instance has no storage agent.
SELECT * FROM greenreplica_set_volume_temperature('cold');
-- A NULL temperature is no request at all.
SELECT greenreplica_set_volume_temperature(NULL) IS NULL AS no_request;

-- Not for ordinary roles: they drive the storage of the whole server.
CREATE ROLE gr_nobody;
SET ROLE gr_nobody;
SELECT greenreplica_set_tablespace_temperature('pg_default', 'cold');
SELECT * FROM greenreplica_set_volume_temperature('cold');
RESET ROLE;
DROP ROLE gr_nobody;

DROP EXTENSION greenreplica;

-- 0.5 updates to 0.6, which brings the function.
CREATE EXTENSION greenreplica VERSION '0.5';
SELECT count(*) AS before FROM pg_proc
 WHERE proname = 'greenreplica_set_tablespace_temperature';
ALTER EXTENSION greenreplica UPDATE TO '0.6';
SELECT count(*) AS after FROM pg_proc
 WHERE proname = 'greenreplica_set_tablespace_temperature';

-- 0.7: the result counts the files mapped and the files skipped.
SELECT pg_get_function_result('greenreplica_set_tablespace_temperature'::regproc) AS result_06;
ALTER EXTENSION greenreplica UPDATE TO '0.7';
SELECT pg_get_function_result('greenreplica_set_tablespace_temperature'::regproc) AS result_07;
SELECT has_function_privilege('public', 'greenreplica_set_tablespace_temperature(name, text)',
                              'EXECUTE') AS public_may_run;

-- 0.8 brings the whole volume's temperature, for superusers only.
SELECT count(*) AS before FROM pg_proc
 WHERE proname = 'greenreplica_set_volume_temperature';
ALTER EXTENSION greenreplica UPDATE TO '0.8';
SELECT pg_get_function_arguments('greenreplica_set_volume_temperature'::regproc) AS arguments_08;
SELECT has_function_privilege('public', 'greenreplica_set_volume_temperature(text)',
                              'EXECUTE') AS public_may_run;
DROP EXTENSION greenreplica;
