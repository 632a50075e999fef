package web

import (
	"context"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestVocabNamesAreExported: every metric name internal/vocab writes is a
// metric the exporter exports, so that a rule, dashboard or page reading a
// vocab name reads a real series. A name passes with a HELP line in the
// golden /metrics, or with a descriptor of the server built on the config
// that enables every feature (docs/testdata/everything.yml): some metrics,
// the CDC slot's and the per-partition lag, have no series in the golden
// scrape. The names are read from vocab's source, so a name added there is
// checked without being listed here.
func TestVocabNamesAreExported(t *testing.T) {
	golden, err := os.ReadFile("testdata/metrics.golden")
	if err != nil {
		t.Fatal(err)
	}
	described := describedNames(t, "../docs/testdata/everything.yml")
	names := vocabMetricNames(t, "../internal/vocab")
	if len(names) < 40 {
		t.Fatalf("read %d metric names from vocab: %v", len(names), names)
	}
	for _, n := range names {
		if !strings.Contains("\n"+string(golden), "\n# HELP "+n+" ") && !described[n] {
			t.Errorf("vocab names metric %s, which no collector exports", n)
		}
	}
}

// TestExportedNamesAreInVocab is the other way round: every metric the
// exporter exports (a HELP line in the golden /metrics, or a descriptor of
// the server on the config enabling every feature) is named in vocab, so
// that a new metric is written there and the rules and the page can read
// it under one name.
func TestExportedNamesAreInVocab(t *testing.T) {
	golden, err := os.ReadFile("testdata/metrics.golden")
	if err != nil {
		t.Fatal(err)
	}
	exported := describedNames(t, "../docs/testdata/everything.yml")
	for _, line := range strings.Split(string(golden), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "#" && f[1] == "HELP" {
			exported[f[2]] = true
		}
	}
	inVocab := map[string]bool{}
	for _, n := range vocabMetricNames(t, "../internal/vocab") {
		inVocab[n] = true
	}
	for n := range exported {
		if strings.HasPrefix(n, "outbox_") && !inVocab[n] {
			t.Errorf("the exporter exports %s, which internal/vocab does not name", n)
		}
	}
}

var fqNameRe = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)

// describedNames returns the names of every descriptor a server built on
// the config file sends from Describe.
func describedNames(t *testing.T, file string) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, Options{ConfigFile: file, Logger: quiet(), ScrapeTimeout: time.Second})
	if err != nil {
		cancel()
		t.Fatalf("build the exporter on %s: %v", file, err)
	}
	t.Cleanup(func() { cancel(); s.Close() })
	ch := make(chan *prometheus.Desc)
	go func() { s.Describe(ch); close(ch) }()
	out := map[string]bool{}
	for d := range ch {
		m := fqNameRe.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		out[m[1]] = true
	}
	if len(out) < 40 {
		t.Fatalf("the server on %s described only %d metrics; does it still enable every feature?", file, len(out))
	}
	return out
}

// vocabMetricNames returns the values of the string constants of the
// package in dir (test files left out) that name metrics (outbox_...).
func vocabMetricNames(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, f := range sourceFiles(t, dir) {
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			if v := constant.StringVal(constant.MakeFromLiteral(lit.Value, lit.Kind, 0)); strings.HasPrefix(v, "outbox_") {
				out = append(out, v)
			}
			return true
		})
	}
	return out
}

// sourceFiles parses the Go files of the package in dir, its tests left
// out.
func sourceFiles(t *testing.T, dir string) []*ast.File {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []*ast.File
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}
