package demo

import (
	"os"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

func TestConfigYAMLParses(t *testing.T) {
	o := Options{}
	o.setDefaults()
	dsn := "postgres://postgres:s3cret@127.0.0.1:5432/outbox_demo?sslmode=disable"
	data := configYAML(dsn, []string{"127.0.0.1:39092"}, o)
	cfg, err := config.Parse(data, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("demo config does not parse:\n%v\n%s", err, data)
	}
	ob := cfg.Outboxes["messages"]
	if ob == nil || ob.Deadline != 30*time.Second || ob.Style() != config.StyleStatus || ob.LeaseUntil != "lease_until" {
		t.Fatalf("outbox messages: %+v", ob)
	}
	if ob.UnknownWhen != "status = 'PENDING' AND last_error LIKE 'unknown result: %'" {
		t.Errorf("unknown_when = %q", ob.UnknownWhen)
	}
	if got := cfg.Databases["demo"].DSN.Reveal(); got != dsn {
		t.Errorf("dsn = %q, want %q", got, dsn)
	}
	k := cfg.Kafka["demo"]
	if k == nil || len(k.Brokers) != 1 || k.Brokers[0] != "127.0.0.1:39092" || k.DeadlineFor(GroupNotify) != 30*time.Second || k.DeadlineFor(GroupSearchIndex) != time.Minute {
		t.Fatalf("kafka demo: %+v", k)
	}
	r := cfg.Reconcile["search_index"]
	if r == nil || r.Schedule != "@every 30s" || r.Grace != 20*time.Second || r.Window != time.Hour || r.Outbox == nil || r.Target == nil || r.Target.Table != "public.search_index" {
		t.Fatalf("reconcile search_index: %+v", r)
	}
	a := cfg.Audit["messages"]
	if a == nil || a.Sample != 1.0 || a.Grace != 15*time.Second || a.Window != 10*time.Minute || a.EventID != "header:event_id" || len(a.Topics) != 1 || a.Topics[0] != "messages" {
		t.Fatalf("audit messages: %+v", a)
	}
}

// TestWriteConfig: the demo's config is written readable by its owner
// only (the DSN may hold a password) and loads.
func TestWriteConfig(t *testing.T) {
	o := Options{}
	o.setDefaults()
	p := &Pipeline{opts: o, dbURL: "postgres://postgres:pw@127.0.0.1:5432/outbox_demo", brokers: []string{"127.0.0.1:9092"}}
	path, err := p.WriteConfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("config file %s: %v, %v; want mode 0600", path, fi, err)
	}
	if _, err := config.Load(path); err != nil {
		t.Fatalf("written config does not load: %v", err)
	}
}
