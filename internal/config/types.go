// Package config loads and validates the outbox_exporter configuration file.
//
// The file is strict YAML: unknown keys, wrong types and bad values are
// errors that name the key path and the line, and every error found is
// reported at once. ${VAR} in any string is replaced from the environment.
package config

import (
	"time"
)

// Config is a loaded and validated configuration file.
type Config struct {
	Databases map[string]*Database     `yaml:"databases"`
	Outboxes  map[string]*Outbox       `yaml:"outboxes"`
	Kafka     map[string]*Kafka        `yaml:"kafka"`
	Reconcile map[string]*ReconcileJob `yaml:"reconcile"`
	Audit     map[string]*Audit        `yaml:"audit"`
	CDC       map[string]*CDC          `yaml:"cdc"` // outboxes published through a replication slot (cdc.go)
	Alerting  Alerting                 `yaml:"alerting"`
	// SessionsPerServer is how many sessions all configured databases on
	// one server (host and port) share: the exporter never holds more
	// there, so it cannot take the application's connection slots.
	SessionsPerServer int `yaml:"sessions_per_server"`
	// LeaderElection, when set, makes one replica lead each piece of work
	// that must be done once (leader.go); nil: every replica does all.
	LeaderElection *LeaderElection `yaml:"leader_election"`

	// lines maps a key path such as "outboxes.messages.deadline" to the
	// line it was written on, for errors found after decoding.
	lines map[string]int
	// secretsLeft is set by ParseWithoutSecrets: secrets may still hold
	// ${VAR} references, which are not judged as DSNs.
	secretsLeft bool
}

// Line returns the line a key path was written on, or 0 if it was not.
func (c *Config) Line(path string) int {
	if c == nil || c.lines == nil {
		return 0
	}
	return c.lines[path]
}

// Database is one monitored PostgreSQL database. Every session the exporter
// opens on it is read-only.
type Database struct {
	// DSN is a libpq URL or key=value string. It may hold a password:
	// never log it; use RedactDSN.
	DSN              Secret        `yaml:"dsn"`
	MaxConnections   int           `yaml:"max_connections"`
	StatementTimeout time.Duration `yaml:"statement_timeout"`
	LockTimeout      time.Duration `yaml:"lock_timeout"`
}

// Label is one label column of an outbox: Name becomes the metric label,
// Column is read from the table. Order is kept as written in the file; the
// first label selects per-label deadlines.
type Label struct {
	Name   string
	Column string
}

// Outbox describes one outbox table and how a row's state is read.
type Outbox struct {
	// Preset names the library that wrote the table (preset.go): it
	// fills in the keys the library decides; a key written beside it
	// wins.
	Preset    string  `yaml:"preset"`
	Database  string  `yaml:"database"`
	Table     string  `yaml:"table"`
	ID        string  `yaml:"id"`
	CreatedAt string  `yaml:"created_at"`
	Labels    []Label `yaml:"labels"`

	Status    string   `yaml:"status"`
	Pending   []string `yaml:"pending"`
	InFlight  []string `yaml:"in_flight"`
	Published []string `yaml:"published"`
	Dead      []string `yaml:"dead"`
	Unknown   []string `yaml:"unknown"`

	PublishedAt string        `yaml:"published_at"`
	DeadAt      string        `yaml:"dead_at"`
	LeaseUntil  string        `yaml:"lease_until"`
	ClaimedAt   string        `yaml:"claimed_at"`
	LeaseTTL    time.Duration `yaml:"lease_ttl"`
	Attempts    string        `yaml:"attempts"`
	// AttemptsOnInsert is the value a writer puts in attempts when it
	// inserts a row (Spring Modulith 2.x writes 1): a row was retried
	// when attempts is above it. Default 0.
	AttemptsOnInsert int `yaml:"attempts_on_insert"`
	// NullStatus is the state a NULL status means (pending, in_flight,
	// published or dead); "" leaves such rows in no state.
	NullStatus  string `yaml:"null_status"`
	LastError   string `yaml:"last_error"`
	Filter      string `yaml:"filter"`
	UnknownWhen string `yaml:"unknown_when"`

	// TimeZone is the zone in which the writers store the outbox's
	// `timestamp without time zone` columns (EF Core and Hibernate often
	// write UTC); "" means the server session's TimeZone. It does not
	// apply to timestamptz columns.
	TimeZone string `yaml:"time_zone"`
	// EpochUnit reads the time columns of an integer type as a number of
	// seconds ("s"), milliseconds ("ms") or microseconds ("us") since the
	// Unix epoch; "" refuses integer time columns.
	EpochUnit string `yaml:"epoch_unit"`

	Deadline       time.Duration            `yaml:"deadline"`
	Deadlines      map[string]time.Duration `yaml:"deadlines"`
	MaxLabelValues int                      `yaml:"max_label_values"`
	// MaxLabelLength is the longest label value, in bytes, the exporter
	// shows (metrics, page, API); a longer one is cut with a visible
	// marker that keeps distinct values apart (collectors.CutLabel).
	// Default 128.
	MaxLabelLength int `yaml:"max_label_length"`
	// SLOObjective is the share of events that must be published within
	// their deadline; the generated burn-rate alerts use it. Default 0.999.
	SLOObjective float64 `yaml:"slo_objective"`
	// MaxCount caps exact counting during a huge backlog: with more
	// unpublished (or dead) rows than MaxCount, outbox_events_capped is 1
	// and the counts are lower bounds read per label set, at least 1
	// where a row exists (README, Cost). Default 10000.
	MaxCount int `yaml:"max_count"`

	// Aggregate and Sequence are the columns of an event's aggregate (a
	// conversation, an order) and its place in it; with both set,
	// outbox_out_of_order_events counts unpublished rows overtaken by a
	// published successor (two relays inverted their order). Receipt is the column a
	// relay fills with the downstream's receipt id; with it set,
	// outbox_published_without_receipt_events_total counts rows published
	// without one (marked sent without the downstream's confirmation). See validate_order.go.
	Aggregate string `yaml:"aggregate"`
	Sequence  string `yaml:"sequence"`
	Receipt   string `yaml:"receipt"`

	// OffsetsTable is a consumer offsets table of watermill-sql's shape
	// (consumer_group, offset_acked, last_processed_transaction_id)
	// beside a messages table that is never deleted from: a message is
	// unpublished for each group that has not acked it, and the group is
	// the label consumer_group (offsets.go).
	OffsetsTable string `yaml:"offsets_table"`

	// preset is the preset in use and the keys written beside it.
	preset *presetUse
	// renamed maps a label renamed because its written name is one the
	// exporter sets itself to that written name.
	renamed map[string]string
}

// RenamedLabels maps each label renamed with ReservedLabelPrefix to the
// name written in the file.
func (o *Outbox) RenamedLabels() map[string]string { return o.renamed }

// StateStyle is how an outbox row's state is stored.
type StateStyle int

const (
	// StyleStatus: a status column with text or integer values.
	StyleStatus StateStyle = iota
	// StyleTimestamps: published when published_at is set, dead when dead_at is set.
	StyleTimestamps
	// StyleDeleteOnPublish: every row present is unpublished.
	StyleDeleteOnPublish
)

// NoCreatedAt reports an outbox whose table keeps no creation time: its
// rows are counted by state, but no age, no past-deadline count and no
// publish latency can be seen, and its deadline is ignored.
func (o *Outbox) NoCreatedAt() bool { return o.CreatedAt == "" }

// Style reports how the outbox stores a row's state.
func (o *Outbox) Style() StateStyle {
	switch {
	case o.Status != "":
		return StyleStatus
	case o.PublishedAt != "" || o.DeadAt != "":
		return StyleTimestamps
	default:
		return StyleDeleteOnPublish
	}
}

// DeadlineFor returns the deadline of events whose first label has value v.
func (o *Outbox) DeadlineFor(v string) time.Duration { return overrideOr(o.Deadlines, v, o.Deadline) }

// overrideOr is overrides[k] if it is set, else def.
func overrideOr(overrides map[string]time.Duration, k string, def time.Duration) time.Duration {
	if d, ok := overrides[k]; ok {
		return d
	}
	return def
}

// TLS configures a Kafka client's TLS.
type TLS struct {
	Enabled            bool   `yaml:"enabled"`
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// SASL configures a Kafka client's SASL authentication.
type SASL struct {
	Mechanism string `yaml:"mechanism"`
	Username  string `yaml:"username"`
	Password  Secret `yaml:"password"`
}

// Kafka is one Kafka cluster and the consumer groups watched on it.
type Kafka struct {
	Brokers   []string                 `yaml:"brokers"`
	TLS       TLS                      `yaml:"tls"`
	SASL      SASL                     `yaml:"sasl"`
	Groups    []string                 `yaml:"groups"`
	Topics    []string                 `yaml:"topics"`
	Deadline  time.Duration            `yaml:"deadline"`
	Deadlines map[string]time.Duration `yaml:"deadlines"`
	// PerPartition adds outbox_consumer_partition_lag_* series: one per
	// (group, topic, partition), so cardinality grows with partitions.
	PerPartition bool `yaml:"per_partition"`
	// Uncommitted is how a partition a group never committed to counts:
	// "ignore" (default, as kminion and Burrow: not at all) or
	// "log_start" (from the log start, in records and seconds).
	Uncommitted string `yaml:"uncommitted"`
	// Isolation is how the groups' consumers read transactional records:
	// "read_committed" (default) or "read_uncommitted". It decides which
	// record the time lag ages: a read_uncommitted consumer reads aborted
	// records and open transactions too. Isolations overrides it by group.
	Isolation  string            `yaml:"isolation"`
	Isolations map[string]string `yaml:"isolations"`
	// ShareGroups selects share groups (KIP-932) by name or /regex/, as
	// Groups selects consumer groups.
	ShareGroups []string `yaml:"share_groups"`
}

// DeadlineFor returns the lag deadline of a consumer group.
func (k *Kafka) DeadlineFor(group string) time.Duration {
	return overrideOr(k.Deadlines, group, k.Deadline)
}

// ReadUncommitted reports whether the consumers of group read with
// read_uncommitted isolation: its Isolations entry, else Isolation.
func (k *Kafka) ReadUncommitted(group string) bool {
	iso, ok := k.Isolations[group]
	if !ok {
		iso = k.Isolation
	}
	return iso == IsolationReadUncommitted
}

// ReconcileJob compares the authoritative table with the outbox and the
// derived target.
type ReconcileJob struct {
	Schedule  string        `yaml:"schedule"`
	FullSweep string        `yaml:"full_sweep"`
	Window    time.Duration `yaml:"window"`
	Grace     time.Duration `yaml:"grace"`
	Authority AuthoritySide `yaml:"authority"`
	Outbox    *OutboxSide   `yaml:"outbox"`
	Target    *TargetSide   `yaml:"target"`
	// MaxFindings caps the findings kept per kind; the metric keeps the
	// true count. Default 10000.
	MaxFindings int `yaml:"max_findings"`
	// ChunkTime is the target time of one range query. Default 200ms.
	ChunkTime time.Duration `yaml:"chunk_time"`
	// Timeout cancels a run that takes longer; it counts as failed.
	// Default 1h.
	Timeout time.Duration `yaml:"timeout"`
}

// AuthoritySide is the table that owns the truth (e.g. messages).
type AuthoritySide struct {
	Database  string `yaml:"database"`
	Table     string `yaml:"table"`
	Key       string `yaml:"key"`
	Version   string `yaml:"version"`
	CreatedAt string `yaml:"created_at"`
	// UpdatedAt (optional) dates a row's last change: a row changed
	// within grace is not judged yet.
	UpdatedAt string `yaml:"updated_at"`
}

// OutboxSide names an outbox from the outboxes section and its columns
// that carry the authority key and version.
type OutboxSide struct {
	Name    string `yaml:"name"`
	Key     string `yaml:"key"`
	Version string `yaml:"version"`
}

// TargetSide is the derived table (e.g. a search index).
type TargetSide struct {
	Database string `yaml:"database"`
	Table    string `yaml:"table"`
	Key      string `yaml:"key"`
	Version  string `yaml:"version"`
}

// Audit compares an outbox with the topics its relays publish to.
type Audit struct {
	Kafka   string        `yaml:"kafka"`
	Topics  []string      `yaml:"topics"`
	EventID string        `yaml:"event_id"`
	Sample  float64       `yaml:"sample"`
	Grace   time.Duration `yaml:"grace"`
	Window  time.Duration `yaml:"window"`
	// Interval is how often the outbox is compared with the topics.
	// Default 30s.
	Interval time.Duration `yaml:"interval"`
	// Aggregate and Sequence say where a record carries its aggregate and
	// its sequence (key, header:NAME or a dotted json:PATH); with both
	// set, outbox_audit_order_inversions_total counts records seen out of
	// order on a partition.
	Aggregate string `yaml:"aggregate"`
	Sequence  string `yaml:"sequence"`
}

// Alerting holds what `generate` needs beyond the collectors' own keys.
type Alerting struct {
	// Selector is added to every generated PromQL selector, e.g.
	// `job="outbox_exporter"`. Default empty.
	Selector string `yaml:"selector"`
	// RunbookURL is the base of every alert's runbook_url; a "#anchor"
	// naming the alert is appended.
	RunbookURL string `yaml:"runbook_url"`
	// ClusterLabel is the label that tells Prometheus servers (or
	// Kubernetes clusters) apart where rules are evaluated over several
	// of them (a Thanos or Mimir ruler): every aggregation keeps it and
	// absence is judged per value. The mixins' clusterLabel. Default
	// empty: one Prometheus.
	ClusterLabel string `yaml:"cluster_label"`
	// DashboardUIDPrefix starts the uid of every generated dashboard, so
	// that the dashboards of two configs can share one Grafana. Default
	// empty: the uids are outbox-overview, outbox-consumers and so on.
	DashboardUIDPrefix string `yaml:"dashboard_uid_prefix"`
}
