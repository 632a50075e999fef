package discover

import (
	"slices"
	"strings"
	"testing"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// table builds a Table from "name type" pairs.
func table(schema, name string, cols ...string) Table {
	t := Table{Schema: schema, Name: name, Cols: map[string]outboxsql.Column{}}
	for _, c := range cols {
		n, typ, _ := strings.Cut(c, " ")
		cat := map[string]string{"text": "S", "varchar": "S", "timestamptz": "D", "timestamp": "D", "int4": "N", "int8": "N", "uuid": "U"}[typ]
		t.Cols[n] = outboxsql.Column{Name: n, Type: typ, Category: cat}
	}
	return t
}

// TestMatch: library tables by preset and generation, a hand-made outbox
// by its shape, a table of orders (a status and a creation time) not at
// all, and a library-named table lacking a column named with what it lacks.
func TestMatch(t *testing.T) {
	sm1 := table("public", "event_publication", "id uuid", "listener_id text", "publication_date timestamptz", "completion_date timestamptz")
	sm2 := table("app", "event_publication", "id uuid", "listener_id text", "publication_date timestamptz", "completion_date timestamptz", "status text", "completion_attempts int4")
	broken := table("old", "event_publication", "id uuid", "listener_id text", "publication_date timestamptz")
	orders := table("public", "orders", "id int8", "status text", "created_at timestamptz")
	hand := table("public", "outbox", "id int8", "created_at timestamptz", "topic text", "published_at timestamptz", "attempts int4")
	deleted := table("public", "OutboxQueue", "id int8", "created_at timestamptz")
	found, misses := Match([]Table{sm1, sm2, broken, orders, hand, deleted})
	byTable := map[string]Found{}
	for _, f := range found {
		byTable[f.Table.QualifiedName()] = f
	}
	if len(found) != 4 {
		t.Fatalf("found %d tables, want 4: %v", len(found), byTable)
	}
	if f := byTable["public.event_publication"]; f.Preset == nil || f.Gen.Name != "1.x" || len(f.Keys) != 0 {
		t.Errorf("1.x table: %+v", f)
	}
	if f := byTable["app.event_publication"]; f.Preset == nil || f.Gen.Name != "2.x" || !slices.Equal(f.Keys, []string{"table: app.event_publication"}) {
		t.Errorf("2.x table: %+v", f)
	}
	if _, ok := byTable["public.orders"]; ok {
		t.Error("a table of orders was taken for an outbox")
	}
	want := []string{"table: public.outbox", "id: id", "created_at: created_at", "labels: {event_topic: topic}", "published_at: published_at", "attempts: attempts"}
	if f := byTable["public.outbox"]; f.Preset != nil || !slices.Equal(f.Keys, want) {
		t.Errorf("hand-made outbox: keys %q, want %q", f.Keys, want)
	}
	if f := byTable["public.OutboxQueue"]; len(f.Notes) != 1 || !strings.Contains(f.Notes[0], "deleted on publish") {
		t.Errorf("delete-on-publish outbox: %+v", f)
	}
	if len(misses) != 1 || misses[0].Preset.Name != "spring-modulith" || misses[0].Gen.Name != "1.x" || !slices.Equal(misses[0].Missing, []string{"completion_date"}) {
		t.Errorf("misses: %+v", misses)
	}
}

// TestClosest: a table given the wrong preset is told the closest one and
// the columns it lacks.
func TestClosest(t *testing.T) {
	tb := table("public", "x", "id text", "status text", "created_at timestamptz", "completed_at timestamptz", "failure_count int4", "failure_reason text")
	p, g, miss := config.ClosestPreset(outboxsql.HasColumn(tb.Cols))
	if p.Name != "namastack" || g.Name != "1.x" || !slices.Equal(miss, []string{"handler_id"}) {
		t.Errorf("closest %s %s lacking %v", p.Name, g.Name, miss)
	}
}

// TestMatchWatermillTopic: a watermill-sql topic is found by its messages
// table beside its offsets table, with its table written; the offsets
// table is not listed on its own, and a messages table without one is
// not taken for a topic.
func TestMatchWatermillTopic(t *testing.T) {
	msgs := func(schema, name string) Table {
		return table(schema, name, "offset int8", "uuid varchar", "created_at timestamp", "payload text", "transaction_id int8")
	}
	offsets := table("app", "watermill_offsets_orders", "consumer_group varchar", "offset_acked int8", "last_processed_transaction_id int8")
	found, misses := Match([]Table{msgs("app", "watermill_orders"), offsets, msgs("app", "watermill_lonely")})
	if len(found) != 1 || len(misses) != 0 {
		t.Fatalf("found %+v, misses %+v, want only app.watermill_orders", found, misses)
	}
	f := found[0]
	if f.Preset == nil || f.Preset.Name != "watermill-sql" || f.Table.QualifiedName() != "app.watermill_orders" || !slices.Equal(f.Keys, []string{"table: app.watermill_orders"}) {
		t.Errorf("topic: %+v", f)
	}
}
