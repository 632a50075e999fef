package outboxsql

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// offsetsColumns are the columns an offsets table must have:
// watermill-sql's consumer group, the offset it acked last and the
// transaction of that message.
var offsetsColumns = []string{config.OffsetsGroupColumn, "offset_acked", "last_processed_transaction_id"}

// ErrOffsetsShape is returned when offsets_table lacks a column an
// offsets table has.
var ErrOffsetsShape = errors.New("is not an offsets table of watermill-sql's shape")

// IntrospectOutbox reads the columns of o's table as the queries see
// them: with offsets_table, the offsets table must have offsetsColumns
// and its consumer_group is one more column of each message (the
// messages as each group still has to consume them, offsetsFrom).
func IntrospectOutbox(ctx context.Context, q Querier, o *config.Outbox) (map[string]Column, error) {
	cols, err := Introspect(ctx, q, o.Table)
	if err != nil || o.OffsetsTable == "" {
		return cols, err
	}
	oc, err := Introspect(ctx, q, o.OffsetsTable)
	if err != nil {
		return nil, fmt.Errorf("offsets_table: %w", err)
	}
	for _, c := range offsetsColumns {
		if _, ok := oc[c]; !ok {
			return nil, fmt.Errorf("offsets_table %s lacks column %s: %w", o.OffsetsTable, c, ErrOffsetsShape)
		}
	}
	cols = maps.Clone(cols)
	cols[config.OffsetsGroupColumn] = oc[config.OffsetsGroupColumn]
	return cols, nil
}

// offsetsFrom is what the queries read, as t, for an outbox with an
// offsets table: each message once for each consumer group that has not
// acked it. watermill-sql orders a topic by (transaction_id, offset) and
// a group has consumed every message up to its
// (last_processed_transaction_id, offset_acked); the row comparison is
// the library's own condition for the next message to hand out, and
// the messages table's primary key serves it. A message a group has not
// acked is unpublished for that group, so the outbox reads as one whose
// rows are deleted on publish.
func offsetsFrom(o *config.Outbox) string {
	return fmt.Sprintf(`(SELECT m.*, g.%[1]s FROM %[2]s m JOIN %[3]s g
  ON (m.transaction_id, m.%[4]s) > (g.last_processed_transaction_id, g.offset_acked))`,
		pg.Ident(config.OffsetsGroupColumn), pg.Table(o.Table), pg.Table(o.OffsetsTable), pg.Ident(o.ID))
}
