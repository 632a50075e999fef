package config

import (
	"strings"
	"testing"
)

// TestMaxLabelLength: default 128; a value too short for the cut marker
// is refused naming the key and line.
func TestMaxLabelLength(t *testing.T) {
	cfg, err := Parse([]byte(base), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Outboxes["messages"].MaxLabelLength; got != 128 {
		t.Fatalf("default max_label_length %d, want 128", got)
	}
	set := func(v string) string {
		return strings.Replace(base, "    deadline: 5m", "    deadline: 5m\n    max_label_length: "+v, 1)
	}
	cfg, err = Parse([]byte(set("64")), env(nil))
	if err != nil || cfg.Outboxes["messages"].MaxLabelLength != 64 {
		t.Fatalf("max_label_length 64: %v", err)
	}
	for _, v := range []string{"8", "-1"} {
		_, err := Parse([]byte(set(v)), env(nil))
		if err == nil || !strings.Contains(err.Error(), "outboxes.messages.max_label_length: must be at least 32 bytes") ||
			!strings.Contains(err.Error(), "line") {
			t.Errorf("max_label_length %s: %v", v, err)
		}
	}
	if _, err := Parse([]byte(set("many")), env(nil)); err == nil || !strings.Contains(err.Error(), "outboxes.messages.max_label_length") {
		t.Errorf("max_label_length many: %v (want the key named)", err)
	}
}
