-- Least-privilege PostgreSQL role for outbox_exporter, for the tables of
-- deploy/example.yml: public.outbox and public.messages in the app
-- database, public.search_index in the search database.
--
-- The role is the fence that holds whatever SQL the exporter sends (its
-- filter and unknown_when come from a config file): it may connect, see
-- the schema and read only the columns the exporter queries, never the
-- event payload or the message body; it owns nothing, may create nothing
-- (no tables, no temporary tables, no large objects), may use no
-- sequence, and its sessions start read-only with statement and lock
-- timeouts. The exporter also runs every statement in a read-only
-- transaction that it rolls back.
--
-- Run with psql 15 or later as a role that may create roles and grant on
-- the tables. The password is read from the environment, or asked for;
-- it is never on a command line (where ps and shell history see it):
--   export OUTBOX_MONITOR_PASSWORD   # e.g. read from a secret store
--   psql "postgres://admin@db:5432/app" \
--     -v role=outbox_monitor -v app_db=app -v search_db=search \
--     -f deploy/postgres/monitoring-role.sql
-- Without OUTBOX_MONITOR_PASSWORD, psql asks for it (\password), and
-- sends only its SCRAM verifier.
-- Running it again updates the password and the grants.
--
-- REVOKE ... FROM PUBLIC below takes TEMPORARY on the two databases and
-- the right to create large objects from every role that has them only
-- through PUBLIC: grant them back to the roles that need them (GRANT
-- TEMPORARY ON DATABASE app TO app_role; GRANT EXECUTE ON FUNCTION
-- lo_create(oid) TO app_role), or run with -v keep_public=on to leave
-- PUBLIC's rights alone (then the role can create temporary tables and
-- large objects; the exporter's rolled-back transactions still keep none).
--
-- For another config, grant SELECT on the columns its outboxes, reconcile
-- jobs and audits name (id, created_at, labels, status, published_at,
-- dead_at, lease_until or claimed_at, attempts, last_error, and the
-- columns used in filter and unknown_when).

\set ON_ERROR_STOP on
\if :{?role}
\else
  \set role outbox_monitor
\endif
\if :{?app_db}
\else
  \set app_db app
\endif
\if :{?search_db}
\else
  \set search_db search
\endif
\if :{?password}
  DO $$BEGIN RAISE EXCEPTION 'monitoring-role.sql: do not pass the password with -v (ps and shell history see it): set OUTBOX_MONITOR_PASSWORD, or let psql ask'; END$$;
\endif
\if :{?keep_public}
\else
  \set keep_public off
\endif

SELECT NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'role') AS create_role \gset
\if :create_role
  CREATE ROLE :"role" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS
    CONNECTION LIMIT 10;
\else
  ALTER ROLE :"role" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS
    CONNECTION LIMIT 10;
\endif

-- The password: from the environment, sent once with statement logging
-- off for this session where the runner may turn it off (a superuser);
-- else asked for by psql, which sends only the SCRAM verifier.
\getenv role_password OUTBOX_MONITOR_PASSWORD
\if :{?role_password}
  SELECT rolsuper AS runner_is_superuser FROM pg_roles WHERE rolname = current_user \gset
  \if :runner_is_superuser
    SET log_statement = 'none';
    SET log_min_duration_statement = -1;
  \endif
  ALTER ROLE :"role" PASSWORD :'role_password';
  \unset role_password
  \if :runner_is_superuser
    RESET log_statement;
    RESET log_min_duration_statement;
  \endif
\else
  \password :role
\endif

-- Every session of the role starts read-only, and cannot hold a lock, a
-- query or an idle transaction for long. A session can change these for
-- itself: they are the defaults, the privileges below are the fence.
ALTER ROLE :"role" SET default_transaction_read_only = on;
ALTER ROLE :"role" SET statement_timeout = '10s';
ALTER ROLE :"role" SET lock_timeout = '2s';
ALTER ROLE :"role" SET idle_in_transaction_session_timeout = '60s';

GRANT CONNECT ON DATABASE :"app_db" TO :"role";
GRANT CONNECT ON DATABASE :"search_db" TO :"role";
\if :keep_public
\else
  REVOKE TEMPORARY ON DATABASE :"app_db" FROM PUBLIC;
  REVOKE TEMPORARY ON DATABASE :"search_db" FROM PUBLIC;
\endif
REVOKE TEMPORARY ON DATABASE :"app_db" FROM :"role";
REVOKE TEMPORARY ON DATABASE :"search_db" FROM :"role";

\connect :app_db
-- Before PostgreSQL 15 every role may create tables in public.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
\if :keep_public
\else
  -- Any role may create large objects unless PUBLIC loses these.
  REVOKE EXECUTE ON FUNCTION lo_create(oid), lo_creat(integer), lo_from_bytea(oid, bytea),
    lo_import(text), lo_import(text, oid) FROM PUBLIC;
\endif
GRANT USAGE ON SCHEMA public TO :"role";
-- cdc: replication slot positions (PUBLIC may read them by default; hardened servers revoke it).
GRANT SELECT ON pg_catalog.pg_replication_slots TO :"role";
-- outboxes.messages: id, created_at, labels (event_type, topic), status,
-- published_at, lease_until, attempts, last_error, aggregate and sequence
-- (conversation_id, seq), receipt (receipt_id); reconcile's outbox side
-- (message_id, message_version).
GRANT SELECT (event_id, created_at, event_type, topic, status, published_at,
              lease_until, attempts, last_error, conversation_id, seq, receipt_id,
              message_id, message_version)
  ON public.outbox TO :"role";
-- reconcile.search_index.authority: key, version, created_at.
GRANT SELECT (id, version, created_at) ON public.messages TO :"role";

\connect :search_db
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
\if :keep_public
\else
  REVOKE EXECUTE ON FUNCTION lo_create(oid), lo_creat(integer), lo_from_bytea(oid, bytea),
    lo_import(text), lo_import(text, oid) FROM PUBLIC;
\endif
GRANT USAGE ON SCHEMA public TO :"role";
-- reconcile.search_index.target: key, version.
GRANT SELECT (message_id, version) ON public.search_index TO :"role";
