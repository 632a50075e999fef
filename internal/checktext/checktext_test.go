package checktext

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every part's report reads the same way: the verdict on the heading,
// one mark per item (a warning passes), the notes, then the statements
// under one heading, each on its own line.
func TestWrite(t *testing.T) {
	r := Report{Heading: "outbox messages (table public.outbox)", OK: false,
		Items: []Item{
			{What: "table", OK: true, Detail: "exists"},
			{What: "published_at", OK: true, Warn: true, Detail: "none: no latency"},
			{What: "index", Detail: "missing"},
			{What: "bare"},
		},
		Notes:      []string{"a hint"},
		Statements: []string{"CREATE INDEX CONCURRENTLY IF NOT EXISTS a ON t (x);", "CREATE INDEX CONCURRENTLY IF NOT EXISTS b ON t (y);"},
	}
	want := `outbox messages (table public.outbox): NOT OK
  ok   table: exists
  WARN published_at: none: no latency
  FAIL index: missing
  FAIL bare
  note a hint
  create these indexes (they do not block writes):
    CREATE INDEX CONCURRENTLY IF NOT EXISTS a ON t (x);
    CREATE INDEX CONCURRENTLY IF NOT EXISTS b ON t (y);
`
	if got := r.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if got := (Report{Heading: "cdc x (slot s)", OK: true}).String(); got != "cdc x (slot s): OK\n" {
		t.Errorf("an empty passing report: %q", got)
	}
}

func TestFailed(t *testing.T) {
	r := Failed("audit messages", errors.New("no broker answered"))
	if r.OK {
		t.Fatal("a check that could not run passed")
	}
	if got, want := r.String(), "audit messages: NOT OK\n  FAIL could not check: no broker answered\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestOneRenderer keeps every check report on this renderer: no other
// Go file of the project writes a verdict or the index block itself.
func TestOneRenderer(t *testing.T) {
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".cache" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasPrefix(path, filepath.Join(root, "internal", "checktext")) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, s := range []string{"create these indexes", `"NOT OK"`, `: NOT OK\n`} {
			if strings.Contains(string(b), s) {
				t.Errorf("%s writes %q itself: render its check report through checktext.Write", path, s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
