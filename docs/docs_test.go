// Package docs holds the reference pages and the tests that keep them
// true: every config key the loader accepts and every metric the
// collectors can export has its row, and every link inside the docs
// resolves.
package docs

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/web"
)

// configKeys walks t the way the config loader decodes it: a struct field
// by its yaml tag, a map of sections (outboxes.NAME) by the placeholder
// NAME, anything else a leaf. Every key reached is added to keys, sections
// included.
func configKeys(prefix string, t reflect.Type, keys map[string]bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Struct && t != reflect.TypeOf(config.Label{}):
		for i := 0; i < t.NumField(); i++ {
			tag := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]
			if tag == "" || tag == "-" {
				continue
			}
			key := join(prefix, tag)
			keys[key] = true
			configKeys(key, t.Field(i).Type, keys)
		}
	case t.Kind() == reflect.Map && isSection(t.Elem()):
		configKeys(join(prefix, "NAME"), t.Elem(), keys)
	}
}

// isSection reports whether a map's values are named sections (structs)
// rather than values keyed by the user (deadlines by label value).
func isSection(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct && t != reflect.TypeOf(config.Label{})
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// leaves are the keys that hold a value, not a section of further keys.
func leaves(keys map[string]bool) []string {
	var out []string
	for k := range keys {
		if !hasChild(keys, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func hasChild(keys map[string]bool, k string) bool {
	for other := range keys {
		if strings.HasPrefix(other, k+".") {
			return true
		}
	}
	return false
}

var (
	headingRe = regexp.MustCompile("^(#+) (.*)$")
	// sectionRe is a level-2 heading naming a section: ## `kafka.NAME`.
	sectionRe = regexp.MustCompile("^`([A-Za-z_.]+)`")
	// rowRe is a table row whose first cell is one backticked name.
	rowRe = regexp.MustCompile("^\\| `([A-Za-z0-9_.]+)` \\|")
)

// documentedKeys reads configuration.md: a level-2 heading `SECTION`
// opens a section, and "Top-level keys" the file's root (any other
// level-2 heading closes it), and each table row in it whose first cell
// is a backticked key documents SECTION.key.
func documentedKeys(t *testing.T, path string) map[string]int {
	t.Helper()
	keys := map[string]int{}
	section, open := "", false
	eachLine(t, path, func(n int, line string) {
		if m := headingRe.FindStringSubmatch(line); m != nil {
			if len(m[1]) == 2 {
				section, open = "", m[2] == "Top-level keys"
				if s := sectionRe.FindStringSubmatch(m[2]); s != nil {
					section, open = s[1], true
				}
			}
			return
		}
		if m := rowRe.FindStringSubmatch(line); m != nil && open {
			keys[join(section, m[1])] = n

			// A key row has three cells: key, default, meaning.
			cells := strings.Split(strings.ReplaceAll(line, `\|`, ""), "|")
			if len(cells) != 5 || strings.TrimSpace(cells[3]) == "" {
				t.Errorf("%s:%d: a key row has three cells: key, default, meaning", path, n)
			}
		}
	})
	return keys
}

// metricRow is one row of metrics.md: its line and its labels cell.
type metricRow struct {
	line   int
	labels string
}

// documentedMetrics reads metrics.md: each table row whose first cell is
// a backticked outbox_* name documents that metric, with five cells:
// name, type, labels, meaning, what it cannot see.
func documentedMetrics(t *testing.T, path string) map[string]metricRow {
	t.Helper()
	rows := map[string]metricRow{}
	eachLine(t, path, func(n int, line string) {
		m := rowRe.FindStringSubmatch(line)
		if m == nil || !strings.HasPrefix(m[1], "outbox_") {
			return
		}
		cells := strings.Split(strings.ReplaceAll(line, `\|`, ""), "|")
		if len(cells) != 7 || strings.TrimSpace(cells[4]) == "" {
			t.Errorf("%s:%d: a metric row has five cells: metric, type, labels, meaning, what it cannot see", path, n)
			return
		}
		if typ := strings.TrimSpace(cells[2]); !slices.Contains([]string{"gauge", "counter", "histogram", "summary"}, typ) {
			t.Errorf("%s:%d: %s has the type %q, not gauge, counter, histogram or summary", path, n, m[1], typ)
		}
		rows[m[1]] = metricRow{line: n, labels: cells[3]}
	})
	return rows
}

func eachLine(t *testing.T, path string, f func(n int, line string)) {
	t.Helper()
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	for n := 1; sc.Scan(); n++ {
		f(n, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
}

// TestEveryConfigKeyDocumented derives the keys the loader accepts from
// the config types and wants a row for each in configuration.md, and no
// row for a key the loader would refuse.
func TestEveryConfigKeyDocumented(t *testing.T) {
	all := map[string]bool{}
	configKeys("", reflect.TypeOf(config.Config{}), all)
	if len(all) < 50 {
		t.Fatalf("the walk of the config types found only %d keys: %v", len(all), leaves(all))
	}
	doc := documentedKeys(t, "configuration.md")
	t.Logf("%d keys accepted, %d rows documented", len(leaves(all)), len(doc))
	for _, k := range leaves(all) {
		if _, ok := doc[k]; !ok {
			section, key := splitKey(k)
			t.Errorf("config key %s is accepted by the loader but has no row in docs/configuration.md (add a row `%s` to the table under the heading %s)", k, key, section)
		}
	}
	for k, line := range doc {
		if !all[k] {
			t.Errorf("docs/configuration.md:%d documents %s, a key the loader does not accept", line, k)
		}
	}
}

// splitKey is where a key is documented: the heading of its section and
// the key relative to it (kafka.NAME.tls.ca_file: `kafka.NAME`, tls.ca_file).
func splitKey(k string) (section, key string) {
	if i := strings.LastIndex(k, ".NAME."); i >= 0 {
		return "`" + k[:i+len(".NAME")] + "`", k[i+len(".NAME."):]
	}
	if before, after, ok := strings.Cut(k, "."); ok {
		return "`" + before + "`", after
	}
	return "Top-level keys", k
}

var (
	descNameRe   = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)
	descLabelsRe = regexp.MustCompile(`constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}\}$`)
	labelNameRe  = regexp.MustCompile(`[a-z_]+`)
)

// exportedMetrics builds a server on a config enabling every feature and
// collects what its descriptors give, name and label names: the
// collectors' own list of what they may export. configured are the label
// names the config's label columns add (written <labels> in the docs).
func exportedMetrics(t *testing.T) (metrics map[string][]string, configured map[string]bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := web.New(ctx, web.Options{ConfigFile: "testdata/everything.yml",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ScrapeTimeout: time.Second})
	if err != nil {
		cancel()
		t.Fatalf("build the exporter on testdata/everything.yml: %v", err)
	}
	t.Cleanup(func() { cancel(); s.Close() })
	configured = map[string]bool{}
	for _, o := range s.App().Config.Outboxes {
		for _, l := range o.Labels {
			configured[l.Name] = true
		}
	}
	ch := make(chan *prometheus.Desc)
	go func() { s.Describe(ch); close(ch) }()
	metrics = map[string][]string{}
	for d := range ch {
		m, l := descNameRe.FindStringSubmatch(d.String()), descLabelsRe.FindStringSubmatch(d.String())
		if m == nil || l == nil {
			t.Fatalf("cannot read the name and labels of %s", d)
		}
		if !strings.HasPrefix(m[1], "outbox_") {
			continue
		}
		var labels []string
		for _, kv := range strings.Split(l[1], ",") {
			if name, _, ok := strings.Cut(kv, "="); ok {
				labels = append(labels, name)
			}
		}
		for _, name := range strings.Split(l[2], ",") {
			if name != "" {
				labels = append(labels, name)
			}
		}
		metrics[m[1]] = labels
	}
	return metrics, configured
}

// TestEveryMetricDocumented wants a row in metrics.md for every metric a
// collector can export, and no row for one none exports.
func TestEveryMetricDocumented(t *testing.T) {
	exported, configured := exportedMetrics(t)
	if len(exported) < 40 || len(configured) == 0 {
		t.Fatalf("the collectors described only %d metrics (label columns %v); does testdata/everything.yml still enable every feature?", len(exported), configured)
	}
	doc := documentedMetrics(t, "metrics.md")
	t.Logf("%d metrics described, %d rows documented", len(exported), len(doc))
	for _, name := range slices.Sorted(maps.Keys(exported)) {
		row, ok := doc[name]
		if !ok {
			t.Errorf("metric %s can be exported but has no row in docs/metrics.md", name)
			continue
		}
		checkLabels(t, name, row, exported[name], configured)
	}
	for name, row := range doc {
		if _, ok := exported[name]; !ok {
			t.Errorf("docs/metrics.md:%d documents %s, which no collector built from testdata/everything.yml describes (enable its feature there, or remove the row)", row.line, name)
		}
	}
}

// checkLabels wants the labels cell of a metric's row to name exactly the
// labels its descriptor has, the configured label columns written as
// <labels>.
func checkLabels(t *testing.T, name string, row metricRow, labels []string, configured map[string]bool) {
	t.Helper()
	cell := row.labels
	withColumns := strings.Contains(cell, "`<labels>`")
	documented := map[string]bool{}
	for _, l := range labelNameRe.FindAllString(strings.ReplaceAll(cell, "`<labels>`", ""), -1) {
		documented[l] = true
	}
	for _, l := range labels {
		switch {
		case documented[l]:
			delete(documented, l)
		case configured[l] && withColumns:
		default:
			t.Errorf("docs/metrics.md:%d: %s has the label %s, missing from its labels cell %q", row.line, name, l, strings.TrimSpace(cell))
		}
	}
	for l := range documented {
		t.Errorf("docs/metrics.md:%d: %s has no label %s, but its labels cell names it", row.line, name, l)
	}
}

// docFiles are the pages whose links are checked, relative to this
// directory.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"../README.md", "../CHANGELOG.md", "../BENCHMARKS.md"}
	for _, glob := range []string{"*.md", "../deploy/*.md"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	return files
}

// TestLinksResolve follows every relative link and #anchor in the docs.
func TestLinksResolve(t *testing.T) {
	files := docFiles(t)
	if len(files) < 8 {
		t.Fatalf("found only %d pages: %v", len(files), files)
	}
	checked := 0
	for _, f := range files {
		for _, l := range links(t, f) {
			if msg := resolve(f, l.target); msg != "" {
				t.Errorf("%s:%d: link %q: %s", f, l.line, l.target, msg)
			}
			checked++
		}
	}
	t.Logf("%d links in %d pages", checked, len(files))
	if checked < 30 {
		t.Fatalf("only %d links checked: is the link pattern still right?", checked)
	}
}
