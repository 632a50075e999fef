package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// withNullableLabels runs f with the bench table's label columns
// nullable and one row in a thousand holding a NULL topic, then restores
// the table: the collector's queries then take their NULL-aware shape
// (a skip-scan that steps past NULL label values too, and one guarded
// read per NULL pattern), which is what -nullable-labels measures.
func withNullableLabels(server string, f func() error) (err error) {
	ctx := context.Background()
	u, err := benchURL(server)
	if err != nil {
		return err
	}
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		return fmt.Errorf("nullable labels: connect (run once without -nullable-labels to build the table): %w", err)
	}
	defer c.Close(ctx)
	logf("making event_type and topic nullable, one row in 1000 with a NULL topic")
	if _, err := c.Exec(ctx, `ALTER TABLE outbox ALTER COLUMN event_type DROP NOT NULL, ALTER COLUMN topic DROP NOT NULL`); err != nil {
		return fmt.Errorf("nullable labels: %w", err)
	}
	if _, err := c.Exec(ctx, `UPDATE outbox SET topic = NULL WHERE event_id % 1000 = 7`); err != nil {
		return fmt.Errorf("nullable labels: %w", err)
	}
	defer func() {
		logf("restoring the NOT NULL label columns")
		for _, q := range []string{
			`UPDATE outbox SET topic = (array['orders','payments','users','billing'])[1 + event_id % 4] WHERE event_id % 1000 = 7`,
			`ALTER TABLE outbox ALTER COLUMN event_type SET NOT NULL, ALTER COLUMN topic SET NOT NULL`,
			`VACUUM ANALYZE outbox`,
		} {
			if _, rerr := c.Exec(ctx, q); rerr != nil && err == nil {
				err = fmt.Errorf("nullable labels: restore: %w", rerr)
			}
		}
	}()
	return f()
}
