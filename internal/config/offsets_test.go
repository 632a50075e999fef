package config

import (
	"strings"
	"testing"
)

// TestWatermillOffsetsTable: the offsets table watermill-sql keeps beside
// a topic's messages table, in the same schema; none for other names.
func TestWatermillOffsetsTable(t *testing.T) {
	for in, want := range map[string]string{
		"watermill_orders":         "watermill_offsets_orders",
		"app.watermill_orders":     "app.watermill_offsets_orders",
		"watermill_offsets_orders": "",
		"watermill_":               "",
		"orders":                   "",
	} {
		if got := WatermillOffsetsTable(in); got != want {
			t.Errorf("WatermillOffsetsTable(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestWatermillPreset: the preset reads the topic's offsets table and
// labels the series by consumer group; offsets_table written beside it
// wins.
func TestWatermillPreset(t *testing.T) {
	o := parsePreset(t, "watermill-sql", "    table: app.watermill_orders\n")
	if o.OffsetsTable != "app.watermill_offsets_orders" || o.ID != "offset" || o.CreatedAt != "created_at" ||
		len(o.Labels) != 1 || o.Labels[0].Column != OffsetsGroupColumn || o.Style() != StyleDeleteOnPublish {
		t.Errorf("watermill-sql filled %+v", o)
	}
	o = parsePreset(t, "watermill-sql", "    table: orders_messages\n    offsets_table: orders_offsets\n")
	if o.OffsetsTable != "orders_offsets" {
		t.Errorf("offsets_table written = %q", o.OffsetsTable)
	}
}

// TestOffsetsTableRefused: what offsets_table needs, each refusal naming
// its key.
func TestOffsetsTableRefused(t *testing.T) {
	for _, tc := range []struct{ preset, extra, want string }{
		{"watermill-sql", "    table: orders\n", `outboxes.events.offsets_table: is required: table "orders" is not named watermill_TOPIC`},
		{"watermill-sql", "    table: watermill_orders\n    published_at: done_at\n", "outboxes.events.offsets_table: a consumer group's offset says which messages it has consumed: give no status, published_at or dead_at with it"},
		{"watermill-sql", "    table: watermill_orders\n    offsets_table: \"x;y\"\n", `outboxes.events.offsets_table: is not a valid table name`},
		{"watermill-sql", "    table: watermill_orders\n    labels: {kind: event_type}\n", "outboxes.events.labels: with offsets_table, one label must read the column consumer_group"},
		{"watermill-sql", "    table: watermill_orders\ncdc:\n  wm:\n    database: main\n    slot: s\n    deadline: 1m\n    outbox: events\n",
			`cdc.wm.outbox: outbox "events" has offsets_table: a message is pending or consumed per consumer group, not once`},
		{"watermill-sql", "    table: watermill_orders\nreconcile:\n  r:\n    schedule: \"@every 5m\"\n    authority: {database: main, table: a, key: id, version: v, created_at: c}\n    outbox: {name: events, key: id, version: v}\n",
			`reconcile.r.outbox.name: outbox "events" has offsets_table`},
		{"watermill-sql", "    table: watermill_orders\naudit:\n  events:\n    kafka: k\n    topics: [orders]\n",
			`audit.events: outbox "events" has offsets_table`},
	} {
		_, err := Parse([]byte(strings.Replace(presetBase, "%s", tc.preset, 1)+tc.extra), env(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.extra, err, tc.want)
		}
	}
}
