package demo

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

func recreateDatabase(ctx context.Context, adminURL, name string) (string, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connect to the server: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("drop database %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return withDatabase(adminURL, name)
}

func dropDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to the server: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// schema is the demo's tables and the indexes the exporter's queries want.
const schema = `
CREATE TABLE messages (
	id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	version    int NOT NULL DEFAULT 1,
	body       text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX messages_created_at ON messages (created_at);

CREATE TABLE outbox (
	event_id        text PRIMARY KEY,
	message_id      bigint NOT NULL,
	message_version int NOT NULL,
	event_type      text NOT NULL,
	topic           text NOT NULL,
	status          text NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'CLAIMED', 'PUBLISHED', 'ABANDONED')),
	created_at      timestamptz NOT NULL DEFAULT now(),
	published_at    timestamptz,
	lease_until     timestamptz,
	claimed_by      text,
	attempts        int NOT NULL DEFAULT 0,
	last_error      text,
	next_attempt_at timestamptz,
	receipt         text,
	UNIQUE (message_id, message_version)
);
-- The relays' claim query.
CREATE INDEX outbox_unpublished_created_at ON outbox (created_at) WHERE status IN ('PENDING', 'CLAIMED');
-- The indexes outbox_exporter check asks for.
CREATE INDEX outbox_exporter_messages_unpublished ON outbox (event_type, topic, created_at)
	INCLUDE (status, lease_until, attempts) WHERE status IN ('PENDING', 'CLAIMED');
CREATE INDEX outbox_exporter_messages_lease ON outbox (lease_until)
	INCLUDE (event_id, status, attempts, created_at, event_type, topic) WHERE status IN ('PENDING', 'CLAIMED') AND status IN ('CLAIMED');
CREATE INDEX outbox_exporter_messages_claimed_unknown ON outbox (lease_until)
	INCLUDE (event_id, status, attempts, created_at, event_type, topic) WHERE status IN ('PENDING', 'CLAIMED') AND status IN ('CLAIMED')
	AND ((status = 'PENDING' AND last_error LIKE 'unknown result: %') OR attempts > 0);
CREATE INDEX outbox_exporter_messages_claimed_by_label ON outbox (event_type, topic, lease_until)
	INCLUDE (status, attempts, created_at) WHERE status IN ('PENDING', 'CLAIMED') AND status IN ('CLAIMED');
CREATE INDEX outbox_exporter_messages_unknown ON outbox (event_type, topic, created_at)
	INCLUDE (status, lease_until, attempts) WHERE status IN ('PENDING', 'CLAIMED') AND NOT status IN ('CLAIMED')
	AND ((status = 'PENDING' AND last_error LIKE 'unknown result: %'));
CREATE INDEX outbox_exporter_messages_unclassified ON outbox (event_type, topic)
	INCLUDE (status) WHERE (status IS NULL OR NOT status IN ('PENDING', 'CLAIMED', 'PUBLISHED', 'ABANDONED'));
CREATE INDEX outbox_abandoned_created_at ON outbox (created_at) WHERE status = 'ABANDONED';
CREATE INDEX outbox_published_at ON outbox (published_at) WHERE published_at IS NOT NULL;

CREATE TABLE search_index (
	message_id bigint PRIMARY KEY,
	version    int NOT NULL,
	event_id   text NOT NULL,
	indexed_at timestamptz NOT NULL DEFAULT now()
);
`
