-- The greenreplica.* parameters: defaults, units and validation.
SELECT name, setting, unit, context, vartype, min_val, max_val, enumvals
  FROM pg_settings
 WHERE name LIKE 'greenreplica.%'
 ORDER BY name;

SHOW greenreplica.rto;
SHOW greenreplica.window_size;

-- Bad values are refused with the allowed range or values.
ALTER SYSTEM SET greenreplica.rto = '-5s';
ALTER SYSTEM SET greenreplica.rto = '0';
ALTER SYSTEM SET greenreplica.rto = '8d';
ALTER SYSTEM SET greenreplica.rto = 'soon';
ALTER SYSTEM SET greenreplica.mode = 'fast';
ALTER SYSTEM SET greenreplica.prefetch_method = 'disk';
ALTER SYSTEM SET greenreplica.prefetch_merge_gap = -1;
ALTER SYSTEM SET greenreplica.window_size = '0';
ALTER SYSTEM SET greenreplica.window_size = '2TB';
ALTER SYSTEM SET greenreplica.max_spin_cycles_per_day = -1;
ALTER SYSTEM SET greenreplica.max_spin_cycles_per_day = 100000;
ALTER SYSTEM SET greenreplica.agent_socket = 'relative/agent.sock';
ALTER SYSTEM SET greenreplica.agent_socket =
  '/a/path/that/is/much/too/long/for/a/unix/domain/socket/because/sun_path/holds/only/one/hundred/and/eight/bytes.sock';
-- Names under the prefix are reserved: a typo is an error, not a new parameter.
ALTER SYSTEM SET greenreplica.rpo = '0';

-- Good values are accepted.
ALTER SYSTEM SET greenreplica.rto = '2min';
ALTER SYSTEM SET greenreplica.mode = 'defer';
ALTER SYSTEM SET greenreplica.window_size = '128MB';
ALTER SYSTEM SET greenreplica.max_spin_cycles_per_day = 0;
ALTER SYSTEM SET greenreplica.agent_socket = '/run/greenreplica/agent.sock';
ALTER SYSTEM SET greenreplica.agent_socket = '';
ALTER SYSTEM RESET ALL;

-- Reload-time parameters cannot be changed for one session.
SET greenreplica.rto = '50s';
