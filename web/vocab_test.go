package web

import (
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestVocabNamesAreExported: every metric name internal/vocab writes is a
// metric the exporter exports (one with HELP in the golden /metrics), so
// that a rule, dashboard or page reading a vocab name reads a real series.
// The names are read from vocab's source, so a name added there is
// checked without being listed here.
func TestVocabNamesAreExported(t *testing.T) {
	golden, err := os.ReadFile("testdata/metrics.golden")
	if err != nil {
		t.Fatal(err)
	}
	names := vocabMetricNames(t, "../internal/vocab/vocab.go")
	if len(names) < 10 {
		t.Fatalf("read %d metric names from vocab: %v", len(names), names)
	}
	for _, n := range names {
		if !strings.Contains("\n"+string(golden), "\n# HELP "+n+" ") {
			t.Errorf("vocab names metric %s, which the exporter does not export", n)
		}
	}
}

// vocabMetricNames returns the values of the string constants of file
// that name metrics (outbox_...).
func vocabMetricNames(t *testing.T, file string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
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
	return out
}
