package config

import (
	"strings"
	"testing"
)

// TestNoCreatedAt: created_at may be left empty only when written so (or
// by a preset); then deadline is optional and ignored, and the features
// that read a creation time are refused naming their key.
func TestNoCreatedAt(t *testing.T) {
	noCreated := strings.Replace(base, "    created_at: created_at\n", "    created_at: \"\"\n", 1)
	for _, tc := range []struct {
		name, yaml string
		want       []string // substrings of the error; nil: valid
	}{
		{"omitted", strings.Replace(base, "    created_at: created_at\n", "", 1),
			[]string{"outboxes.messages.created_at: is required", `created_at: ""`}},
		{"written empty", noCreated, nil},
		{"written empty, no deadline", strings.Replace(noCreated, "    deadline: 5m\n", "", 1), nil},
		{"with a deadline, no deadline is required", strings.Replace(base, "    deadline: 5m\n", "", 1),
			[]string{"outboxes.messages.deadline: is required"}},
		{"cdc link", noCreated + "cdc:\n  slot1:\n    database: main\n    slot: s1\n    deadline: 5m\n    outbox: messages\n",
			[]string{"cdc.slot1.outbox", "names an outbox with no created_at"}},
		{"aggregate", strings.Replace(noCreated, "    deadline: 5m", "    deadline: 5m\n    aggregate: agg\n    sequence: seq", 1),
			[]string{"outboxes.messages.aggregate: needs created_at"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.yaml), env(nil))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				if !cfg.Outboxes["messages"].NoCreatedAt() {
					t.Errorf("NoCreatedAt() = false")
				}
				return
			}
			if err == nil {
				t.Fatalf("want an error with %q, got none", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
