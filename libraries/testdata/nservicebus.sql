-- origin: NServiceBus.Persistence.Sql, src/ScriptBuilder/Outbox/Create_PostgreSql.sql at
-- commit d4a7fc511b2b94163e2e0451491e2ca05f0cfab5: the table and indexes its
-- create_outbox_table(tablePrefix) function creates, written out with an empty
-- prefix (an endpoint's installer prefixes the name, e.g. "Sales_OutboxData").
-- The persister writes DispatchedAt from DateTime.UtcNow: UTC in a timestamp
-- without time zone.

create table if not exists public."OutboxData"
(
    "MessageId" character varying(200),
    "Dispatched" boolean not null default false,
    "DispatchedAt" timestamp,
    "PersistenceVersion" character varying(23),
    "Operations" jsonb not null,
    primary key ("MessageId")
);
create index if not exists "Index_DispatchedAt" on public."OutboxData" using btree ("DispatchedAt" asc nulls last);
create index if not exists "Index_Dispatched" on public."OutboxData" using btree ("Dispatched" asc nulls last);
