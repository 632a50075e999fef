package config

import "time"

// LeaderElection makes the replicas of one configuration share the work
// that must be done once (each reconcile job, each audit, each cdc
// entry's WAL history): one replica leads each such task, the others
// stand by and take over when it goes. The leases are PostgreSQL
// advisory locks on the server of Database, held by one session per
// replica (internal/leader).
type LeaderElection struct {
	// Database names the database (under databases) whose server holds
	// the leases. Its role needs no privilege beyond connecting.
	Database string `yaml:"database"`
	// CheckInterval is how often a leader checks that its lease session
	// is alive; a failed check stops its work at once.
	CheckInterval time.Duration `yaml:"check_interval"`
	// RetryInterval is how soon a replica opens its lease session again
	// after failing to open it or losing it (a standby with a session
	// waits for a leader's lease instead of trying at an interval).
	RetryInterval time.Duration `yaml:"retry_interval"`
}

// Defaults of the leader_election section.
const (
	DefaultLeaderCheckInterval = 2 * time.Second
	DefaultLeaderRetryInterval = 5 * time.Second
)

// leaderElection validates the leader_election section.
func (v *validator) leaderElection() {
	le := v.c.LeaderElection
	if le == nil {
		return
	}
	v.database("leader_election.database", le.Database)
	// The lease session's server-side keepalives are set from the check
	// interval in whole seconds (internal/leader), so less than a second
	// would round to none.
	if le.CheckInterval < time.Second {
		v.fail("leader_election.check_interval", "must be at least 1s, got %v", le.CheckInterval)
	}
	if le.RetryInterval < 100*time.Millisecond {
		v.fail("leader_election.retry_interval", "must be at least 100ms, got %v", le.RetryInterval)
	}
}
