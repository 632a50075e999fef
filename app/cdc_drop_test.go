package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A slot dropped after a scrape: the outbox it publishes fails its very
// next collection, even one that runs before the slot's collector has
// read the slots again (it checks the slot in its own transaction), and
// the slot's series say missing instead of vanishing.
func TestDroppedSlot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ba := startBehindApp(ctx, t)
	ba.exec(t, `INSERT INTO outbox (kind) VALUES ('a')`)
	scrapeApp(t, ba.a)
	s := ba.spacedScrape(t)
	if s.success(t, "outbox", "orders") != 1 {
		t.Fatalf("before the drop the outbox was not collected")
	}
	if v, _ := s.value(t, "outbox_cdc_slot_missing", map[string]string{"cdc": "orders"}); v != 0 {
		t.Errorf("before the drop outbox_cdc_slot_missing = %v, want 0", v)
	}
	ba.exec(t, `SELECT pg_drop_replication_slot('orders_slot')`)

	// The outbox's collection first, alone: the slot's collector still
	// holds the state it read before the drop.
	ch := make(chan prometheus.Metric, 1000)
	err := ba.a.outbox["orders"].Update(ctx, ch)
	close(ch)
	if err == nil || !strings.Contains(err.Error(), `replication slot "orders_slot" does not exist`) {
		t.Errorf("the outbox's collection after the drop: %v, want it to fail naming the slot", err)
	}

	s = scrapeApp(t, ba.a)
	if s.success(t, "outbox", "orders") != 0 {
		t.Errorf("the first scrape after the drop collected the outbox")
	}
	if v, ok := s.value(t, "outbox_cdc_slot_missing", map[string]string{"cdc": "orders"}); !ok || v != 1 {
		t.Errorf("after the drop outbox_cdc_slot_missing = %v (present %v), want 1", v, ok)
	}
	if _, ok := s.value(t, "outbox_cdc_slot_lag_seconds", map[string]string{"cdc": "orders"}); ok {
		t.Errorf("a dropped slot still has a lag")
	}
}
