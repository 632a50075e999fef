package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const cdcBase = base + `  events:
    database: main
    table: public.events
    id: id
    created_at: created_at
    deadline: 2m
cdc:
  debezium:
    database: main
    slot: debezium_outbox
    deadline: 1m
`

func TestCDCParse(t *testing.T) {
	cfg, err := Parse([]byte(cdcBase+"    outbox: events\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.CDC["debezium"]
	if c == nil || c.Database != "main" || c.Slot != "debezium_outbox" || c.Deadline != time.Minute || c.Outbox != "events" {
		t.Fatalf("cdc.debezium decoded as %+v", c)
	}
	if name, got, ok := cfg.CDCFor("events"); !ok || name != "debezium" || got != c {
		t.Errorf("CDCFor(events) = %q, %v, %v", name, got, ok)
	}
	if _, _, ok := cfg.CDCFor("messages"); ok {
		t.Error("CDCFor(messages): messages is published by a relay, not a slot")
	}
}

// Each bad cdc entry is refused with an error naming the key and line.
func TestCDCBadConfigs(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []string
	}{
		{"unknown key", cdcBase + "    slots: x\n", []string{"cdc.debezium.slots: unknown key (line 26)"}},
		{"no slot", strings.Replace(cdcBase, "    slot: debezium_outbox\n", "", 1), []string{"cdc.debezium.slot: is required"}},
		{"bad slot name", strings.Replace(cdcBase, "slot: debezium_outbox", "slot: Debezium-Outbox", 1), []string{`cdc.debezium.slot: is not a replication slot name`, "(line 24)"}},
		{"no deadline", strings.Replace(cdcBase, "    deadline: 1m\n", "", 1), []string{"cdc.debezium.deadline: is required"}},
		{"undefined database", strings.Replace(cdcBase, "database: main\n    slot", "database: other\n    slot", 1), []string{`cdc.debezium.database: names no database defined`, "(line 23)"}},
		{"undefined outbox", cdcBase + "    outbox: nope\n", []string{`cdc.debezium.outbox: names no outbox defined`}},
		{"outbox with status", cdcBase + "    outbox: messages\n", []string{`cdc.debezium.outbox: names an outbox with a status`}},
		{"same slot twice", cdcBase + "  again:\n    database: main\n    slot: debezium_outbox\n    deadline: 1m\n", []string{`cdc.debezium.slot: the same slot of the same database is already watched by cdc.again`}},
		{"bad name", cdcBase + "  \"a b\":\n    database: main\n    slot: other\n    deadline: 1m\n", []string{`cdc.a b: is not a valid cdc name`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), env(nil))
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("want config errors, got %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}
