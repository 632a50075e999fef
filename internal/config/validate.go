package config

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Defaults applied to keys left out of the file.
const (
	DefaultMaxConnections    = 2
	DefaultSessionsPerServer = 4
	DefaultStatementTimeout  = 5 * time.Second
	DefaultLockTimeout       = 1 * time.Second
	DefaultMaxLabelValues    = 100
	DefaultMaxLabelLength    = 128
	// MinLabelLength leaves room for the cut marker and a readable prefix.
	MinLabelLength          = 32
	DefaultMaxCount         = 10000
	DefaultSLOObjective     = 0.999
	DefaultKafkaDeadline    = 10 * time.Minute
	DefaultReconcileWindow  = 24 * time.Hour
	DefaultReconcileGrace   = 2 * time.Minute
	DefaultMaxFindings      = 10000
	DefaultChunkTime        = 200 * time.Millisecond
	DefaultReconcileTimeout = time.Hour
	DefaultAuditSample      = 1.0
	DefaultAuditGrace       = time.Minute
	DefaultAuditWindow      = time.Hour
	DefaultAuditInterval    = 30 * time.Second
	MaxLabels               = 3
)

func (c *Config) setDefaults() {
	orDefault(&c.SessionsPerServer, DefaultSessionsPerServer)
	for _, db := range c.Databases {
		orDefault(&db.MaxConnections, DefaultMaxConnections)
		orDefault(&db.StatementTimeout, DefaultStatementTimeout)
		orDefault(&db.LockTimeout, DefaultLockTimeout)
	}
	for _, o := range c.Outboxes {
		orDefault(&o.MaxLabelValues, DefaultMaxLabelValues)
		orDefault(&o.MaxLabelLength, DefaultMaxLabelLength)
		orDefault(&o.MaxCount, DefaultMaxCount)
		orDefault(&o.SLOObjective, DefaultSLOObjective)
	}
	for _, k := range c.Kafka {
		orDefault(&k.Deadline, DefaultKafkaDeadline)
	}
	for _, r := range c.Reconcile {
		orDefault(&r.Window, DefaultReconcileWindow)
		orDefault(&r.Grace, DefaultReconcileGrace)
		orDefault(&r.MaxFindings, DefaultMaxFindings)
		orDefault(&r.ChunkTime, DefaultChunkTime)
		orDefault(&r.Timeout, DefaultReconcileTimeout)
	}
	for _, a := range c.Audit {
		orDefault(&a.Sample, DefaultAuditSample)
		orDefault(&a.Grace, DefaultAuditGrace)
		orDefault(&a.Window, DefaultAuditWindow)
		orDefault(&a.Interval, DefaultAuditInterval)
	}
	if le := c.LeaderElection; le != nil {
		orDefault(&le.CheckInterval, DefaultLeaderCheckInterval)
		orDefault(&le.RetryInterval, DefaultLeaderRetryInterval)
	}
}

// orDefault sets *v to def if it is the zero value: the key was left out.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

var (
	identPart = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`)
	nameRe    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)
	labelRe   = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// reservedLabels are labels the exporter sets itself.
var reservedLabels = map[string]bool{"outbox": true, "state": true, "le": true, "job": true, "instance": true, "cluster": true, "group": true, "topic": true}

type validator struct {
	c    *Config
	errs Errors
}

func (v *validator) fail(path, format string, args ...any) {
	line := v.c.Line(path)
	for p := path; line == 0 && p != ""; {
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
		line = v.c.Line(p)
	}
	v.errs = append(v.errs, &Error{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// column checks an optional column name.
func (v *validator) column(path, col string) {
	if col != "" && !identPart.MatchString(col) {
		v.fail(path, "is not a valid column name (letters, digits, _ and $, starting with a letter or _, at most 63)")
	}
}

func (v *validator) required(path, val string) bool {
	if val == "" {
		v.fail(path, "is required")
		return false
	}
	return true
}

func (v *validator) table(path, t string) {
	if !v.required(path, t) {
		return
	}
	parts := strings.Split(t, ".")
	if len(parts) > 2 {
		v.fail(path, "is not a table name (schema.table or table)")
		return
	}
	for _, p := range parts {
		if !identPart.MatchString(p) {
			v.fail(path, "is not a valid table name (letters, digits, _ and $, starting with a letter or _, at most 63 per part)")
			return
		}
	}
}

func (v *validator) database(path, name string) {
	if !v.required(path, name) {
		return
	}
	if _, ok := v.c.Databases[name]; !ok {
		v.fail(path, "names no database defined under databases")
	}
}

// CronParser parses reconcile schedules: standard five-field specs and
// descriptors such as "@every 5m" and "@daily".
var CronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

func (c *Config) validate() Errors {
	v := &validator{c: c}
	if c.SessionsPerServer < 2 {
		// A reconcile run with both sides on one server holds a session
		// of each at once.
		v.fail("sessions_per_server", "must be at least 2 (a reconcile run may hold two sessions on one server at once)")
	}
	for _, name := range slices.Sorted(maps.Keys(c.Databases)) {
		db, p := c.Databases[name], "databases."+name
		if !nameRe.MatchString(name) {
			v.fail(p, "is not a valid name (letters, digits, _, . and -, starting with a letter or _)")
		}
		if v.required(p+".dsn", string(db.DSN)) {
			// A DSN left as ${VAR} by ParseWithoutSecrets is judged
			// where it is expanded, by the commands that connect.
			unexpanded := v.c.secretsLeft && envRef.MatchString(db.DSN.Reveal())
			if msg := DSNProblem(db.DSN.Reveal()); msg != "" && !unexpanded {
				v.fail(p+".dsn", "does not parse: %s", msg)
			}
		}
		if db.MaxConnections < 1 {
			v.fail(p+".max_connections", "must be at least 1")
		}
		// PostgreSQL takes these in whole milliseconds; less would be sent
		// as 0, which turns the timeout off.
		for _, t := range []struct {
			key string
			d   time.Duration
		}{{"statement_timeout", db.StatementTimeout}, {"lock_timeout", db.LockTimeout}} {
			if t.d < time.Millisecond {
				v.fail(p+"."+t.key, "must be at least 1ms (PostgreSQL reads less as 0: no timeout at all)")
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Outboxes)) {
		v.outbox("outboxes."+name, name, c.Outboxes[name])
	}
	for _, name := range slices.Sorted(maps.Keys(c.Kafka)) {
		v.kafka("kafka."+name, c.Kafka[name])
	}
	for _, name := range slices.Sorted(maps.Keys(c.Reconcile)) {
		v.reconcile("reconcile."+name, c.Reconcile[name])
	}
	for _, name := range slices.Sorted(maps.Keys(c.Audit)) {
		v.audit("audit."+name, name, c.Audit[name])
	}
	v.cdcs()
	v.leaderElection()
	v.alerting("alerting", &c.Alerting)
	v.order()
	v.offsetsUsers()
	return v.errs
}

func (v *validator) outbox(p, name string, o *Outbox) {
	if !labelValueOK(name) {
		v.fail(p, "is not a valid outbox name")
	}
	v.outboxPreset(p, o)
	v.database(p+".database", o.Database)
	v.table(p+".table", o.Table)
	if v.required(p+".id", o.ID) {
		v.column(p+".id", o.ID)
	}
	v.outboxCreated(p, o)
	if len(o.Labels) > MaxLabels {
		v.fail(p+".labels", "at most %d label columns, got %d", MaxLabels, len(o.Labels))
	}
	v.outboxLabels(p, o)
	for k, col := range map[string]string{
		"status": o.Status, "published_at": o.PublishedAt, "dead_at": o.DeadAt,
		"lease_until": o.LeaseUntil, "claimed_at": o.ClaimedAt, "attempts": o.Attempts, "last_error": o.LastError,
	} {
		v.column(p+"."+k, col)
	}
	v.outboxStatuses(p, o)
	v.outboxNullStatus(p, o)
	if o.LeaseUntil != "" && o.ClaimedAt != "" {
		v.fail(p+".claimed_at", "give lease_until or claimed_at with lease_ttl, not both")
	}
	if o.LeaseTTL > 0 && o.ClaimedAt == "" {
		v.fail(p+".lease_ttl", "needs claimed_at")
	}
	if o.Deadline <= 0 && o.CreatedAt != "" {
		v.fail(p+".deadline", "is required: the promised notification deadline, e.g. 5m")
	}
	if len(o.Deadlines) > 0 && len(o.Labels) == 0 {
		v.fail(p+".deadlines", "overrides by the first label's value need labels")
	}
	for _, k := range slices.Sorted(maps.Keys(o.Deadlines)) {
		if o.Deadlines[k] <= 0 {
			v.fail(p+".deadlines."+k, "must be positive")
		}
	}
	if o.MaxLabelValues < 1 {
		v.fail(p+".max_label_values", "must be at least 1")
	}
	if o.MaxLabelLength < MinLabelLength {
		v.fail(p+".max_label_length", "must be at least %d bytes (room for the cut marker), got %d", MinLabelLength, o.MaxLabelLength)
	}
	if o.MaxCount < 1 {
		v.fail(p+".max_count", "must be at least 1")
	}
	if o.SLOObjective <= 0 || o.SLOObjective >= 1 {
		v.fail(p+".slo_objective", "must be between 0 and 1 exclusive")
	}
	v.outboxTimeZone(p, o)
	v.outboxOffsets(p, o)
	for _, pr := range []struct{ key, sql string }{{"filter", o.Filter}, {"unknown_when", o.UnknownWhen}} {
		if pr.sql == "" {
			continue
		}
		if err := CheckPredicate(pr.sql); err != nil {
			v.fail(p+"."+pr.key, "must be one SQL predicate: it %v", err)
		}
	}
}

func labelValueOK(s string) bool { return nameRe.MatchString(s) }

var saslMechanisms = map[string]bool{"": true, "PLAIN": true, "SCRAM-SHA-256": true, "SCRAM-SHA-512": true}

func (v *validator) kafka(p string, k *Kafka) {
	if len(k.Brokers) == 0 {
		v.fail(p+".brokers", "is required: at least one host:port")
	}
	for i, b := range k.Brokers {
		if _, port, ok := strings.Cut(b, ":"); !ok || port == "" {
			v.fail(fmt.Sprintf("%s.brokers[%d]", p, i), "is not host:port")
		} else if _, err := strconv.Atoi(port[strings.LastIndex(port, ":")+1:]); err != nil {
			v.fail(fmt.Sprintf("%s.brokers[%d]", p, i), "is not host:port")
		}
	}
	if (k.TLS.CertFile == "") != (k.TLS.KeyFile == "") {
		v.fail(p+".tls", "cert_file and key_file go together")
	}
	if !k.TLS.Enabled && (k.TLS.CAFile != "" || k.TLS.CertFile != "" || k.TLS.InsecureSkipVerify) {
		v.fail(p+".tls.enabled", "TLS options are set but enabled is false")
	}
	if !saslMechanisms[k.SASL.Mechanism] {
		v.fail(p+".sasl.mechanism", "is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512")
	}
	if k.SASL.Mechanism != "" && k.SASL.Username == "" {
		v.fail(p+".sasl.username", "is required with a SASL mechanism")
	}
	for i, g := range k.Groups {
		if _, err := ParsePattern(g); err != nil {
			v.fail(fmt.Sprintf("%s.groups[%d]", p, i), "%s", patternProblem(err))
		}
	}
	for i, t := range k.Topics {
		if _, err := ParsePattern(t); err != nil {
			v.fail(fmt.Sprintf("%s.topics[%d]", p, i), "%s", patternProblem(err))
		}
	}
	v.kafkaUncommitted(p, k)
	v.kafkaIsolation(p, k)
	if k.Deadline <= 0 {
		v.fail(p+".deadline", "must be positive")
	}
}

func (v *validator) reconcile(p string, r *ReconcileJob) {
	if !labelValueOK(strings.TrimPrefix(p, "reconcile.")) {
		v.fail(p, "not a valid job name")
	}
	if v.required(p+".schedule", r.Schedule) {
		if _, err := CronParser.Parse(r.Schedule); err != nil {
			v.fail(p+".schedule", "is not a cron schedule (five fields, or a descriptor such as @every 5m or @daily)")
		}
	}
	if r.FullSweep != "" {
		if _, err := CronParser.Parse(r.FullSweep); err != nil {
			v.fail(p+".full_sweep", "is not a cron schedule (five fields, or a descriptor such as @every 5m or @daily)")
		}
	}
	a := r.Authority
	v.database(p+".authority.database", a.Database)
	v.table(p+".authority.table", a.Table)
	if v.required(p+".authority.key", a.Key) {
		v.column(p+".authority.key", a.Key)
	}
	if v.required(p+".authority.version", a.Version) {
		v.column(p+".authority.version", a.Version)
	}
	if v.required(p+".authority.created_at", a.CreatedAt) {
		v.column(p+".authority.created_at", a.CreatedAt)
	}
	if a.UpdatedAt != "" {
		v.column(p+".authority.updated_at", a.UpdatedAt)
	}
	if r.Outbox != nil {
		if v.required(p+".outbox.name", r.Outbox.Name) {
			if _, ok := v.c.Outboxes[r.Outbox.Name]; !ok {
				v.fail(p+".outbox.name", "names no outbox defined under outboxes")
			}
		}
		if v.required(p+".outbox.key", r.Outbox.Key) {
			v.column(p+".outbox.key", r.Outbox.Key)
		}
		if v.required(p+".outbox.version", r.Outbox.Version) {
			v.column(p+".outbox.version", r.Outbox.Version)
		}
	}
	if r.Target != nil {
		v.database(p+".target.database", r.Target.Database)
		v.table(p+".target.table", r.Target.Table)
		if v.required(p+".target.key", r.Target.Key) {
			v.column(p+".target.key", r.Target.Key)
		}
		if v.required(p+".target.version", r.Target.Version) {
			v.column(p+".target.version", r.Target.Version)
		}
	}
	if r.Outbox == nil && r.Target == nil {
		v.fail(p, "needs outbox, target or both to compare the authority with")
	}
	if r.MaxFindings < 1 {
		v.fail(p+".max_findings", "must be at least 1")
	}
	if r.Timeout < 0 {
		v.fail(p+".timeout", "must be positive")
	}
}

// eventIDRe: key, header:NAME, or json:PATH with PATH field names joined
// by single dots (json:payload.id reaches into a Debezium envelope).
var eventIDRe = regexp.MustCompile(`^(key|header:.+|json:[^.]+(\.[^.]+)*)$`)

func (v *validator) audit(p, name string, a *Audit) {
	if o, ok := v.c.Outboxes[name]; !ok {
		v.fail(p, "names no outbox defined under outboxes")
	} else if o.NoCreatedAt() {
		v.fail(p, "names an outbox with no created_at: the audit chooses the rows it judges by their creation time")
	}
	if v.required(p+".kafka", a.Kafka) {
		if _, ok := v.c.Kafka[a.Kafka]; !ok {
			v.fail(p+".kafka", "names no cluster defined under kafka")
		}
	}
	if len(a.Topics) == 0 {
		v.fail(p+".topics", "is required: the topics the relays publish to")
	}
	if v.required(p+".event_id", a.EventID) && !eventIDRe.MatchString(a.EventID) {
		v.fail(p+".event_id", "is not header:NAME, key or json:FIELD (a dotted json:PATH reaches into nested objects: json:payload.id)")
	}
	if a.Sample <= 0 || a.Sample > 1 {
		v.fail(p+".sample", "must be in (0, 1]")
	}
	// A row is judged grace after it was marked published, and only rows
	// published inside the window are judged: with grace >= window no row
	// is ever judged and the audit would report a clean result it never
	// made.
	if a.Grace >= a.Window {
		v.fail(p+".grace", "must be shorter than window: no row would ever be judged")
	}
}

// patternProblem says what is wrong with a group or topic pattern without
// quoting it: the regexp error's code, not the expression it quotes.
func patternProblem(err error) string {
	var se *syntax.Error
	if errors.As(err, &se) {
		return "is not a valid regular expression: " + string(se.Code)
	}
	if errors.Is(err, errEmptyName) {
		return "is empty"
	}
	return "is not a valid regular expression"
}

var errEmptyName = errors.New("empty name")

// Pattern matches a name exactly, or by regular expression when written
// as /regex/.
type Pattern struct {
	Exact string
	Re    *regexp.Regexp
}

// Match reports whether s matches the pattern.
func (p Pattern) Match(s string) bool {
	if p.Re != nil {
		return p.Re.MatchString(s)
	}
	return p.Exact == s
}

// ParsePattern parses a name or a /regex/. A regex is anchored.
func ParsePattern(s string) (Pattern, error) {
	if len(s) >= 2 && strings.HasPrefix(s, "/") && strings.HasSuffix(s, "/") {
		re, err := regexp.Compile("^(?:" + s[1:len(s)-1] + ")$")
		if err != nil {
			return Pattern{}, fmt.Errorf("%q is not a valid regular expression: %w", s, err)
		}
		return Pattern{Re: re}, nil
	}
	if s == "" {
		return Pattern{}, errEmptyName
	}
	return Pattern{Exact: s}, nil
}
