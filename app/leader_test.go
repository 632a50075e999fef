package app

import (
	"strings"
	"testing"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// TestTasks: one task per reconcile job and audit, sorted, and none for
// the other sections (a cdc entry's slots are read by every replica).
func TestTasks(t *testing.T) {
	cfg := &config.Config{
		Reconcile: map[string]*config.ReconcileJob{"b": {}, "a": {}},
		Audit:     map[string]*config.Audit{"messages": {}},
		CDC:       map[string]*config.CDC{"orders": {Database: "main"}, "pay": {Database: "other"}},
		Outboxes:  map[string]*config.Outbox{"messages": {}},
	}
	got := strings.Join(Tasks(cfg), " ")
	if want := "audit/messages reconcile/a reconcile/b"; got != want {
		t.Fatalf("tasks %q, want %q", got, want)
	}
}

// TestDefaultIdentity: the host name and the listen port.
func TestDefaultIdentity(t *testing.T) {
	id := DefaultIdentity("0.0.0.0:9187")
	if !strings.HasSuffix(id, ":9187") || strings.HasPrefix(id, ":") {
		t.Fatalf("identity %q: want HOST:9187", id)
	}
	if strings.Contains(DefaultIdentity(""), ":") {
		t.Fatalf("identity without a listen address %q has a port", DefaultIdentity(""))
	}
}
