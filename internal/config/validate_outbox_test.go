package config

import (
	"strings"
	"testing"
)

// TestOutboxStatusAndTimeZone: a status column with published_at but no
// published list is refused naming the key, and
// time_zone is checked.
func TestOutboxStatusAndTimeZone(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // substrings of the error; nil: valid
	}{
		{"status with published_at only", strings.Replace(base, "    published: [PUBLISHED]\n", "    published_at: published_at\n", 1),
			[]string{"outboxes.messages.published: is required with status", "published_at only times it"}},
		{"status with both", strings.Replace(base, "    published: [PUBLISHED]\n", "    published: [PUBLISHED]\n    published_at: published_at\n", 1), nil},
		{"time zone", strings.Replace(base, "    deadline: 5m", "    deadline: 5m\n    time_zone: UTC", 1), nil},
		{"time zone named", strings.Replace(base, "    deadline: 5m", "    deadline: 5m\n    time_zone: Europe/Berlin", 1), nil},
		{"time zone unknown", strings.Replace(base, "    deadline: 5m", "    deadline: 5m\n    time_zone: Mars/Olympus", 1),
			[]string{"outboxes.messages.time_zone", "not a known time zone"}},
		{"time zone offset", strings.Replace(base, "    deadline: 5m", "    deadline: 5m\n    time_zone: \"+02:00\"", 1),
			[]string{"outboxes.messages.time_zone", "not a time zone name"}},
		{"time zone injection", strings.Replace(base, "    deadline: 5m", "    deadline: 5m\n    time_zone: \"UTC' OR 'x\"", 1),
			[]string{"outboxes.messages.time_zone", "not a time zone name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), env(nil))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
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
