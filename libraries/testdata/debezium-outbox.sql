-- origin: Debezium 3.x documentation, "Outbox Event Router" (transformations/outbox-event-router),
-- the example outbox table whose columns the router reads by default (id, aggregatetype,
-- aggregateid, type, payload), given there as a psql listing and written here as the
-- CREATE TABLE it describes. Debezium ships no DDL for it: each application creates its own.

CREATE TABLE outbox (
    id uuid NOT NULL,
    aggregatetype character varying(255) NOT NULL,
    aggregateid character varying(255) NOT NULL,
    type character varying(255) NOT NULL,
    payload jsonb,
    PRIMARY KEY (id)
);
