package config

import (
	"testing"
	"time"
)

func TestLoadExample(t *testing.T) {
	t.Setenv("OUTBOX_DSN", "postgres://exporter:hunter2@127.0.0.1:5432/app")
	t.Setenv("SEARCH_DSN", "postgres://exporter@127.0.0.1:5432/search")
	cfg, err := Load("../../deploy/example.yml")
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.Outboxes["messages"]
	if o.Deadline != 5*time.Minute || o.DeadlineFor("order.paid") != 30*time.Second || o.DeadlineFor("x") != 5*time.Minute {
		t.Errorf("deadlines: %v %v", o.Deadline, o.Deadlines)
	}
	if len(o.Labels) != 2 || o.Labels[0] != (Label{"event_type", "event_type"}) || o.Labels[1] != (Label{"destination", "topic"}) {
		t.Errorf("labels out of order: %v", o.Labels)
	}
	if got := cfg.Databases["main"].DSN.Reveal(); got != "postgres://exporter:hunter2@127.0.0.1:5432/app" {
		t.Errorf("dsn not expanded: %q", got)
	}
	if cfg.Databases["search"].MaxConnections != DefaultMaxConnections {
		t.Errorf("default max_connections not set")
	}
	if cfg.Line("outboxes.messages.deadline") != 31 {
		t.Errorf("line of deadline = %d", cfg.Line("outboxes.messages.deadline"))
	}
}
