package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// RequireTool finds a binary the checks run, failing (not skipping) with
// how to install it when it is missing.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed; install it with: apt-get install -y --no-install-recommends prometheus prometheus-alertmanager", name)
	}
	return p
}

// ExampleConfig loads the example config at path (deploy/example.yml)
// with fixed DSNs.
func ExampleConfig(t testing.TB, path string) *config.Config {
	t.Helper()
	t.Setenv("OUTBOX_DSN", "postgres://outbox_monitor@127.0.0.1:5432/app")
	t.Setenv("SEARCH_DSN", "postgres://outbox_monitor@127.0.0.1:5432/search")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// PromtoolTestRules writes a promtool unit-test file to dir and runs
// `promtool test rules` on it, failing with promtool's output and the
// file when a case does not hold.
func PromtoolTestRules(t testing.TB, dir, name, content string) {
	t.Helper()
	test := filepath.Join(dir, name)
	if err := os.WriteFile(test, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(RequireTool(t, "promtool"), "test", "rules", test).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules on the exporter's real values: %v\n%s\n%s", err, out, content)
	}
}
