package generate

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// metricSet is what the exporter exports: every series name, and which of
// them are counters (including histogram buckets, sums and counts), which
// may appear only inside rate() or increase().
type metricSet struct {
	names    map[string]bool
	counters map[string]bool
}

// loadMetrics reads the exporter's metric names from a file in the text
// exposition format: "# TYPE name type" lines and sample lines.
func loadMetrics(path string) (*metricSet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read exported metrics: %w", err)
	}
	defer f.Close()
	m := &metricSet{names: map[string]bool{}, counters: map[string]bool{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			fs := strings.Fields(rest)
			if len(fs) != 2 {
				return nil, fmt.Errorf("read exported metrics: bad TYPE line %q", line)
			}
			name, typ := fs[0], fs[1]
			switch typ {
			case "histogram":
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					m.names[name+s] = true
					m.counters[name+s] = true
				}
			case "summary":
				m.names[name] = true
				for _, s := range []string{"_sum", "_count"} {
					m.names[name+s] = true
					m.counters[name+s] = true
				}
			case "counter":
				m.names[name] = true
				m.counters[name] = true
			default:
				m.names[name] = true
			}
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		name := line
		if i := strings.IndexAny(name, "{ "); i >= 0 {
			name = name[:i]
		}
		m.names[name] = true
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read exported metrics: %w", err)
	}
	return m, nil
}

// rateIntervalMarker stands in for $__rate_interval while parsing, so a
// range can be told apart from one written by hand.
const rateIntervalMarker = 7777 * time.Second

// dashboardVars replaces Grafana variables by values that parse and can
// be recognised afterwards: $__rate_interval, and each of vars as
// __name__.
func dashboardVars(expr string, vars []string) string {
	pairs := []string{"$__rate_interval", "7777s"}
	// Longest names first, so that $instance is not read as $in + stance.
	sorted := slices.Clone(vars)
	slices.SortFunc(sorted, func(a, b string) int { return len(b) - len(a) })
	for _, v := range sorted {
		pairs = append(pairs, "${"+v+"}", "__"+v+"__", "$"+v, "__"+v+"__")
	}
	return strings.NewReplacer(pairs...).Replace(expr)
}

// exprRules says which dashboard-linter rules an expression must follow
// beyond parsing and naming exported metrics.
type exprRules struct {
	// dashboard: ranges of rate() and increase() are $__rate_interval,
	// and every selector has job=~"$job" and instance=~"$instance".
	dashboard bool
	// noInstance: the linter's .lint excludes target-instance-rule here.
	noInstance bool
	// vars are the dashboard's variables.
	vars []string
}

var promqlParser = parser.NewParser(parser.Options{})

// checkExpr returns what is wrong with one expression: it does not parse,
// names a metric the exporter does not export, uses a counter outside
// rate() or increase(), or (for a dashboard) breaks the linter's rules.
func checkExpr(expr string, known *metricSet, rules exprRules) []string {
	src := dashboardVars(expr, rules.vars)
	if strings.Contains(src, "$") {
		return []string{"uses an unknown Grafana variable"}
	}
	ast, err := promqlParser.ParseExpr(src)
	if err != nil {
		return []string{"does not parse: " + err.Error()}
	}
	var probs []string
	parser.Inspect(ast, func(node parser.Node, path []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			name := n.Name
			if name == "" {
				for _, m := range n.LabelMatchers {
					if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
						name = m.Value
					}
				}
			}
			if !known.names[name] {
				probs = append(probs, fmt.Sprintf("names %q, which the exporter does not export", name))
			}
			if known.counters[name] && !insideRate(path) {
				probs = append(probs, fmt.Sprintf("uses counter %q outside rate() or increase()", name))
			}
			if rules.dashboard {
				if !hasMatcher(n, "job", "__job__") {
					probs = append(probs, fmt.Sprintf("selector of %q lacks job=~\"$job\"", name))
				}
				if !rules.noInstance && !hasMatcher(n, "instance", "__instance__") {
					probs = append(probs, fmt.Sprintf("selector of %q lacks instance=~\"$instance\"", name))
				}
			}
		case *parser.Call:
			switch n.Func.Name {
			case "rate", "increase", "irate":
				if rules.dashboard {
					for _, a := range n.Args {
						if ms, ok := a.(*parser.MatrixSelector); ok && ms.Range != rateIntervalMarker {
							probs = append(probs, fmt.Sprintf("%s() over %s, not $__rate_interval", n.Func.Name, ms.Range))
						}
					}
				}
			}
		}
		return nil
	})
	return probs
}

// insideRate reports whether the selector at the end of path is the range
// argument of rate(), irate() or increase().
func insideRate(path []parser.Node) bool {
	if len(path) < 2 {
		return false
	}
	if _, ok := path[len(path)-1].(*parser.MatrixSelector); !ok {
		return false
	}
	c, ok := path[len(path)-2].(*parser.Call)
	if !ok {
		return false
	}
	switch c.Func.Name {
	case "rate", "irate", "increase":
		return true
	}
	return false
}

func hasMatcher(vs *parser.VectorSelector, name, value string) bool {
	for _, m := range vs.LabelMatchers {
		if m.Name == name && m.Type == labels.MatchRegexp && m.Value == value {
			return true
		}
	}
	return false
}

// exportedMetricsFile is the golden /metrics of an exporter running every
// collector (web's TestMetricsGolden keeps it current): the
// generated dashboards and rules may name only what is in it.
const exportedMetricsFile = "../web/testdata/metrics.golden"
