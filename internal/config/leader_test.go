package config

import (
	"strings"
	"testing"
	"time"
)

func TestLeaderElectionValidation(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		want        string // "" = accepted
	}{
		{"database", "leader_election:\n  database: main\n", ""},
		{"intervals", "leader_election:\n  database: main\n  check_interval: 3s\n  retry_interval: 500ms\n", ""},
		{"unknown database", "leader_election:\n  database: other\n", `leader_election.database: names no database defined under databases`},
		{"no database", "leader_election:\n  check_interval: 3s\n", "leader_election.database: is required"},
		{"unknown key", "leader_election:\n  database: main\n  lease: 5s\n", "leader_election.lease"},
		{"check below a second", "leader_election:\n  database: main\n  check_interval: 500ms\n", "leader_election.check_interval: must be at least 1s"},
		{"retry too short", "leader_election:\n  database: main\n  retry_interval: 1ms\n", "leader_election.retry_interval: must be at least 100ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(base+tc.extra), env(nil))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("accepted:\n%s", tc.extra)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error does not contain %q:\n%v", tc.want, err)
			case tc.want != "" && !strings.Contains(err.Error(), "(line "):
				t.Fatalf("error names no line:\n%v", err)
			case tc.want == "" && c.LeaderElection == nil:
				t.Fatal("section lost")
			}
		})
	}
}

func TestLeaderElectionDefaults(t *testing.T) {
	c, err := Parse([]byte(base+"leader_election:\n  database: main\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	le := c.LeaderElection
	if le.CheckInterval != 2*time.Second || le.RetryInterval != 5*time.Second {
		t.Fatalf("defaults: check %v retry %v", le.CheckInterval, le.RetryInterval)
	}
	c, err = Parse([]byte(base), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.LeaderElection != nil {
		t.Fatal("absent section read as present")
	}
}
