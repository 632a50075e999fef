package alerts

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// exampleConfig loads deploy/example.yml with fixed DSNs.
func exampleConfig(t *testing.T) *config.Config {
	return testutil.ExampleConfig(t, "../deploy/example.yml")
}

// golden compares got with testdata/name, rewriting it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	testutil.Golden(t, filepath.Join("testdata", name), got, *update, "go test ./alerts -update")
}

func TestGoldenExample(t *testing.T) {
	f, err := Build(exampleConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "example.rules.yml", b)
	pr, err := MarshalPrometheusRule(f, "outbox-exporter")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "example.prometheusrule.yml", pr)
}

// multiConfig loads testdata/multi.yml: two outboxes, two Kafka clusters,
// two reconcile jobs and a cluster label.
func multiConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.LoadWithoutSecrets("testdata/multi.yml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestGoldenMulti(t *testing.T) {
	f, err := Build(multiConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "multi.rules.yml", b)
}
