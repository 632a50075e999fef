package testutil

import (
	"bytes"
	"os"
	"testing"
)

// Golden compares got with the file at path, rewriting the file first
// when update is set. A missing or different file fails the test, saying
// the command (rerun) that regenerates it.
func Golden(t testing.TB, path string, got []byte, update bool, rerun string) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run %s)", err, rerun)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the generated output; run %s and review the diff", path, rerun)
	}
}
