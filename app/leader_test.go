package app

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
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

// TestReloadKeepsTheElector: a reload that leaves leader_election and its
// database alone hands the running Elector (its session, its leases) to
// the new App: the terms go on, and an audit the reload rebuilt (its
// cluster changed) runs in the same term in place of the old one. A
// reload that changes leader_election builds a new Elector, which leads
// once the old one let go.
func TestReloadKeepsTheElector(t *testing.T) {
	db := pgtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	parse := func(deadline, kdeadline, check string) *config.Config {
		y := strings.NewReplacer("DSN", db.URL, "KDEADLINE", kdeadline, "DEADLINE", deadline).Replace(reloadConfig) +
			"\nleader_election: {database: main, check_interval: " + check + ", retry_interval: 100ms}\n"
		cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	leadsAll := func(a *App) bool {
		st := a.Leader.Status()
		for _, s := range st {
			if !s.Leading {
				return false
			}
		}
		return len(st) == 2
	}
	a1, err := Build(ctx, parse("5m", "2m", "1s"), testutil.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	a1.SetIdentity("r1:1")
	a1.Start(ctx)
	waitLeads(t, "the first App leads both tasks", func() bool { return leadsAll(a1) })
	before := a1.Leader.Status()

	a2, err := Rebuild(ctx, parse("6m", "3m", "1s"), testutil.Quiet(), a1)
	if err != nil {
		t.Fatal(err)
	}
	a2.Start(ctx)
	a1.Close()
	if a2.Leader != a1.Leader {
		t.Fatal("a reload that left leader_election alone built a new Elector")
	}
	if after := a2.Leader.Status(); !reflect.DeepEqual(after, before) {
		t.Fatalf("the terms changed across the reload:\nbefore %+v\nafter  %+v", before, after)
	}
	if au := a2.Audits["messages"]; au == a1.Audits["messages"] || a2.bound["messages"] != au {
		t.Fatal("the rebuilt audit is not the one its term runs")
	}

	a3, err := Rebuild(ctx, parse("6m", "3m", "2s"), testutil.Quiet(), a2)
	if err != nil {
		t.Fatal(err)
	}
	a3.Start(ctx)
	a2.Close()
	defer a3.Close()
	if a3.Leader == a2.Leader {
		t.Fatal("a reload that changed leader_election kept the Elector")
	}
	waitLeads(t, "the new Elector leads both tasks", func() bool { return leadsAll(a3) })
}

func waitLeads(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(testutil.HangLimit); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, testutil.HangLimit)
		}
	}
}
