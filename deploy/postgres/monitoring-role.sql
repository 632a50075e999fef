-- Least-privilege PostgreSQL role for outbox_exporter, for the tables of
-- deploy/example.yml: public.outbox and public.messages in the app
-- database, public.search_index in the search database.
--
-- It may connect, see the schema and read only the columns the exporter
-- queries: never the event payload or the message body. Its sessions are
-- read-only by default (the exporter also opens them read-only).
--
-- Run with psql as a role that may create roles and grant on the tables:
--   psql "postgres://admin@db:5432/app" \
--     -v role=outbox_monitor -v password="$OUTBOX_MONITOR_PASSWORD" \
--     -v app_db=app -v search_db=search \
--     -f deploy/postgres/monitoring-role.sql
-- Running it again updates the password and the grants.
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
\else
  \echo 'monitoring-role.sql: set the password with -v password=...'
  \quit
\endif

SELECT NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'role') AS create_role \gset
\if :create_role
  CREATE ROLE :"role" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS
    CONNECTION LIMIT 10 PASSWORD :'password';
\else
  ALTER ROLE :"role" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS
    CONNECTION LIMIT 10 PASSWORD :'password';
\endif

-- Every session of the role is read-only unless it asks otherwise, and
-- cannot hold a transaction or a query for long.
ALTER ROLE :"role" SET default_transaction_read_only = on;
ALTER ROLE :"role" SET statement_timeout = '10s';
ALTER ROLE :"role" SET idle_in_transaction_session_timeout = '60s';

GRANT CONNECT ON DATABASE :"app_db" TO :"role";
GRANT CONNECT ON DATABASE :"search_db" TO :"role";

\connect :app_db
GRANT USAGE ON SCHEMA public TO :"role";
-- cdc: replication slot positions (PUBLIC may read them by default; hardened servers revoke it).
GRANT SELECT ON pg_catalog.pg_replication_slots TO :"role";
-- outboxes.messages: id, created_at, labels (event_type, topic), status,
-- published_at, lease_until, attempts, last_error; reconcile's outbox side
-- (message_id, message_version).
GRANT SELECT (event_id, created_at, event_type, topic, status, published_at,
              lease_until, attempts, last_error, message_id, message_version)
  ON public.outbox TO :"role";
-- reconcile.search_index.authority: key, version, created_at.
GRANT SELECT (id, version, created_at) ON public.messages TO :"role";

\connect :search_db
GRANT USAGE ON SCHEMA public TO :"role";
-- reconcile.search_index.target: key, version.
GRANT SELECT (message_id, version) ON public.search_index TO :"role";
