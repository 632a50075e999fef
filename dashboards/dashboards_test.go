package dashboards

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// golden compares got with testdata/name, rewriting it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	testutil.Golden(t, filepath.Join("testdata", name), got, *update, "go test ./dashboards -update")
}

// exampleConfig loads deploy/example.yml with fixed DSNs.
func exampleConfig(t *testing.T) *config.Config {
	return testutil.ExampleConfig(t, "../deploy/example.yml")
}

func TestGoldenExample(t *testing.T) {
	files, err := All(exampleConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	wantUIDs := []string{OverviewUID, ConsumersUID, ReconcileUID, AuditUID, ExporterUID}
	if len(files) != len(wantUIDs) {
		t.Fatalf("%d dashboards, want %d", len(files), len(wantUIDs))
	}
	for i, f := range files {
		if got := derefString(f.Dashboard.Uid); got != wantUIDs[i] {
			t.Errorf("%s: uid %q, want %q", f.Name, got, wantUIDs[i])
		}
		b, err := Marshal(f.Dashboard)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, f.Name, b)
	}
}

// TestOnlyWhatTheConfigHas: without kafka, reconcile and audit sections
// their dashboards are not generated, and without published_at there are
// no SLO panels.
func TestOnlyWhatTheConfigHas(t *testing.T) {
	const yml = `
databases:
  db: {dsn: "postgres://x@localhost/db"}
outboxes:
  plain:
    database: db
    table: outbox
    id: id
    created_at: created_at
    labels: {kind: kind_col}
    deadline: 1m
`
	cfg, err := config.Parse([]byte(yml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	files, err := All(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
	}
	if got := strings.Join(names, " "); got != "outbox-overview.json outbox-exporter.json" {
		t.Errorf("dashboards: %s", got)
	}
	b, err := Marshal(files[0].Dashboard)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if strings.Contains(s, "Error budget") {
		t.Error("SLO panels without published_at")
	}
	if !strings.Contains(s, `max by (outbox, kind) (outbox_oldest_pending_age_seconds`) {
		t.Error("the configured label is not in the deadline panel")
	}
	if strings.Contains(s, `job=\"outbox_exporter\"`) {
		t.Error("a selector appears although alerting.selector is empty")
	}
}

// TestLeadershipPanel: with leader_election the exporter dashboard has the
// panel of who leads; without, it has not.
func TestLeadershipPanel(t *testing.T) {
	cfg := exampleConfig(t)
	for _, on := range []bool{false, true} {
		cfg.LeaderElection = nil
		if on {
			cfg.LeaderElection = &config.LeaderElection{Database: "main"}
		}
		d, err := Exporter(cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		has := strings.Contains(string(b), "max by (instance, task) (outbox_exporter_leader")
		if has != on {
			t.Errorf("leader_election %v: panel of who leads present %v", on, has)
		}
	}
}

// The share groups' row is there when a cluster selects share groups,
// and absent (no panel left without data) when none does.
func TestShareGroupRow(t *testing.T) {
	cfg := exampleConfig(t)
	for _, on := range []bool{false, true} {
		for _, k := range cfg.Kafka {
			k.ShareGroups = nil
			if on {
				k.ShareGroups = []string{"jobs"}
			}
		}
		d, err := Consumers(cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		has := strings.Contains(string(b), "outbox_share_group_lag_messages")
		if has != on {
			t.Errorf("share_groups %v: share group panels present %v", on, has)
		}
	}
}
