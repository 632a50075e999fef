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

// Promtool3 is where scripts/deps.sh builds promtool 3.x from the Go module
// proxy, relative to the repository's root.
const Promtool3 = ".cache/bin/promtool"

// Promtools returns the promtool binaries the rule tests run with: Debian's
// (2.x) and the 3.x one scripts/deps.sh builds, which differ in how far
// back a range or an instant selector reaches. Either missing fails the
// test with how to get it.
func Promtools(t testing.TB) []string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "scripts", "deps.sh")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no scripts/deps.sh above the test's directory: cannot find the repository's root")
		}
		dir = parent
	}
	p3 := filepath.Join(dir, Promtool3)
	if _, err := os.Stat(p3); err != nil {
		t.Fatalf("promtool 3.x is not built; run scripts/deps.sh (it builds %s from the Go module proxy): %v", Promtool3, err)
	}
	return []string{RequireTool(t, "promtool"), p3}
}
