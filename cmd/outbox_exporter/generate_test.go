package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenerateWithoutDSNVariables: `generate` writes the rules and
// dashboards for deploy/example.yml although OUTBOX_DSN and SEARCH_DSN
// are unset (it never connects), while `check` still names the missing
// variable.
func TestGenerateWithoutDSNVariables(t *testing.T) {
	for _, v := range []string{"OUTBOX_DSN", "SEARCH_DSN"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	out := filepath.Join(t.TempDir(), "gen")
	var stdout, stderr strings.Builder
	if code := run(context.Background(), []string{"generate", "--config.file=../../deploy/example.yml", "--out=" + out}, &stdout, &stderr); code != 0 {
		t.Fatalf("generate exited %d: %s", code, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(out, "rules", "outbox.rules.yml")); err != nil {
		t.Errorf("no rules written: %v", err)
	}
	stdout.Reset()
	stderr.Reset()
	if code := run(context.Background(), []string{"check", "--config.file=../../deploy/example.yml"}, &stdout, &stderr); code == 0 || !strings.Contains(stdout.String()+stderr.String(), "OUTBOX_DSN is not set") {
		t.Errorf("check without OUTBOX_DSN: exit %d, %s%s", code, stdout.String(), stderr.String())
	}
}
