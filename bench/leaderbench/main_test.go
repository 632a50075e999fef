package main

import (
	"strings"
	"testing"
	"time"
)

// TestArmRuns: each arm ends after as many reconcile runs as the
// schedule's @every interval fits in -for, or after -runs when given;
// a schedule without an interval needs -runs.
func TestArmRuns(t *testing.T) {
	cases := []struct {
		schedule string
		dur      time.Duration
		runs     int64
		want     int64
		err      string
	}{
		{"@every 30s", 10 * time.Minute, -1, 20, ""},
		{"@every 45s", 10 * time.Minute, -1, 13, ""},
		{"@every 30s", 10 * time.Minute, 7, 7, ""},
		{"@every 30s", 10 * time.Minute, 0, 0, ""},
		{"0 * * * *", 10 * time.Minute, -1, 0, "no @every interval"},
		{"@every soon", 10 * time.Minute, -1, 0, "no duration"},
		{"0 * * * *", 10 * time.Minute, 3, 3, ""},
	}
	for _, c := range cases {
		got, err := armRuns(opts{schedule: c.schedule, dur: c.dur, runs: c.runs})
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q, -for %v, -runs %d: error %v, want one saying %q", c.schedule, c.dur, c.runs, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%q, -for %v, -runs %d: %d, %v; want %d", c.schedule, c.dur, c.runs, got, err, c.want)
		}
	}
}
