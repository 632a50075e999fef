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
		}
	})
	return keys
}

// documentedMetrics reads metrics.md: each table row whose first cell is
// a backticked outbox_* name documents that metric.
func documentedMetrics(t *testing.T, path string) map[string]int {
	t.Helper()
	names := map[string]int{}
	eachLine(t, path, func(n int, line string) {
		if m := rowRe.FindStringSubmatch(line); m != nil && strings.HasPrefix(m[1], "outbox_") {
			names[m[1]] = n
		}
	})
	return names
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
			t.Errorf("config key %s is accepted by the loader but has no row in docs/configuration.md (add `%s` to the table under its section's heading)", k, k[strings.LastIndex(k, ".")+1:])
		}
	}
	for k, line := range doc {
		if !all[k] {
			t.Errorf("docs/configuration.md:%d documents %s, a key the loader does not accept", line, k)
		}
	}
}

// exportedMetrics builds a server on a config enabling every feature and
// collects the names its descriptors give: the collectors' own list of
// what they may export.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := web.New(ctx, web.Options{ConfigFile: "testdata/everything.yml",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ScrapeTimeout: time.Second})
	if err != nil {
		cancel()
		t.Fatalf("build the exporter on testdata/everything.yml: %v", err)
	}
	t.Cleanup(func() { cancel(); s.Close() })
	ch := make(chan *prometheus.Desc)
	go func() { s.Describe(ch); close(ch) }()
	nameRe := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for d := range ch {
		m := nameRe.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("descriptor without a name: %s", d)
		}
		if strings.HasPrefix(m[1], "outbox_") {
			names[m[1]] = true
		}
	}
	return names
}

// TestEveryMetricDocumented wants a row in metrics.md for every metric a
// collector can export, and no row for one none exports.
func TestEveryMetricDocumented(t *testing.T) {
	exported := exportedMetrics(t)
	if len(exported) < 40 {
		t.Fatalf("the collectors described only %d metrics; does testdata/everything.yml still enable every feature? %v", len(exported), exported)
	}
	doc := documentedMetrics(t, "metrics.md")
	t.Logf("%d metrics described, %d rows documented", len(exported), len(doc))
	for _, name := range slices.Sorted(maps.Keys(exported)) {
		if _, ok := doc[name]; !ok {
			t.Errorf("metric %s can be exported but has no row in docs/metrics.md", name)
		}
	}
	for name, line := range doc {
		if !exported[name] {
			t.Errorf("docs/metrics.md:%d documents %s, which no collector built from testdata/everything.yml describes (enable its feature there, or remove the row)", line, name)
		}
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
