package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const base = `
databases:
  main:
    dsn: postgres://exporter@127.0.0.1/app
outboxes:
  messages:
    database: main
    table: public.outbox
    id: event_id
    created_at: created_at
    status: status
    pending: [PENDING]
    published: [PUBLISHED]
    deadline: 5m
`

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func TestParseMinimal(t *testing.T) {
	cfg, err := Parse([]byte(base), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	db := cfg.Databases["main"]
	if db.MaxConnections != 2 || db.StatementTimeout != 5*time.Second {
		t.Errorf("defaults not applied: %+v", db)
	}
	o := cfg.Outboxes["messages"]
	if o.MaxLabelValues != 100 || o.Style() != StyleStatus || o.SLOObjective != 0.999 {
		t.Errorf("outbox defaults: %+v", o)
	}
}

func TestReconcileDefaults(t *testing.T) {
	cfg, err := Parse([]byte(base+"reconcile:\n  idx:\n    schedule: \"@every 5m\"\n    authority: {database: main, table: messages, key: id, version: version, created_at: created_at}\n    target: {database: main, table: search_index, key: message_id, version: version}\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Reconcile["idx"]; r.Timeout != time.Hour || r.Grace != 2*time.Minute || r.Authority.UpdatedAt != "" {
		t.Errorf("reconcile defaults: %+v", r)
	}
}

func TestStyles(t *testing.T) {
	for _, tc := range []struct {
		o    Outbox
		want StateStyle
	}{
		{Outbox{Status: "s"}, StyleStatus},
		{Outbox{PublishedAt: "p"}, StyleTimestamps},
		{Outbox{DeadAt: "d"}, StyleTimestamps},
		{Outbox{}, StyleDeleteOnPublish},
	} {
		if got := tc.o.Style(); got != tc.want {
			t.Errorf("%+v: style %v, want %v", tc.o, got, tc.want)
		}
	}
}

// Each bad configuration must be refused with an error naming the key path
// and, where the key was written, its line.
func TestBadConfigs(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []string // every string must appear in the error
	}{
		{"unknown top-level key", base + "scrape: {}\n", []string{"scrape: unknown key (line 15)"}},
		{"unknown outbox key", strings.Replace(base, "    deadline: 5m", "    deadline: 5m\n    dedline: 5m", 1), []string{"outboxes.messages.dedline: unknown key (line 15)"}},
		{"bad duration", strings.Replace(base, "deadline: 5m", `deadline: "5 minutes"`, 1), []string{`outboxes.messages.deadline: is not a duration`, "(line 14)"}},
		{"negative duration", strings.Replace(base, "deadline: 5m", "deadline: -5m", 1), []string{"outboxes.messages.deadline", "negative"}},
		{"missing deadline", strings.Replace(base, "    deadline: 5m\n", "", 1), []string{"outboxes.messages.deadline: is required"}},
		{"max_connections not a number", base + "", nil},
		{"undefined database", strings.Replace(base, "database: main", "database: mian", 1), []string{`outboxes.messages.database: names no database defined`, "(line 7)"}},
		{"table injection", strings.Replace(base, "table: public.outbox", `table: "outbox; DROP TABLE x"`, 1), []string{"outboxes.messages.table", "not a valid table name", "(line 8)"}},
		{"column injection", strings.Replace(base, "id: event_id", `id: "id) FROM pg_shadow --"`, 1), []string{"outboxes.messages.id", "not a valid column name"}},
		{"three-part table", strings.Replace(base, "table: public.outbox", "table: a.b.c", 1), []string{"outboxes.messages.table", "schema.table"}},
		{"status without pending", strings.Replace(base, "    pending: [PENDING]\n", "", 1), []string{"outboxes.messages.pending: is required with status"}},
		{"status listed twice", strings.Replace(base, "pending: [PENDING]", "pending: [PENDING, PUBLISHED]", 1), []string{"outboxes.messages.published[0]", `also listed under pending`}},
		{"status values without status column", strings.Replace(base, "    status: status\n", "", 1), []string{"outboxes.messages.pending: status values need a status column"}},
		{"too many labels", strings.Replace(base, "    deadline: 5m", "    deadline: 5m\n    labels: {a: a, b: b, c: c, d: d}", 1), []string{"outboxes.messages.labels: at most 3 label columns, got 4"}},
		{"reserved label renamed onto a taken name", strings.Replace(base, "    deadline: 5m", "    deadline: 5m\n    labels: {event_state: x, state: s}", 1), []string{`outboxes.messages.labels.state: label "event_state" is given twice`}},
		{"deadlines without labels", strings.Replace(base, "    deadline: 5m", "    deadline: 5m\n    deadlines: {order.paid: 30s}", 1), []string{"outboxes.messages.deadlines: overrides by the first label's value need labels"}},
		{"lease_ttl without claimed_at", strings.Replace(base, "    deadline: 5m", "    deadline: 5m\n    lease_ttl: 2m", 1), []string{"outboxes.messages.lease_ttl: needs claimed_at"}},
		{"lease_until and claimed_at", strings.Replace(base, "    deadline: 5m", "    deadline: 5m\n    lease_until: l\n    claimed_at: c", 1), []string{"outboxes.messages.claimed_at: give lease_until or claimed_at"}},
		{"filter with semicolon", strings.Replace(base, "    deadline: 5m", "    deadline: 5m\n    filter: \"true; DELETE FROM outbox\"", 1), []string{"outboxes.messages.filter: must be one SQL predicate"}},
		{"unset env var", strings.Replace(base, "postgres://exporter@127.0.0.1/app", "${NOPE_DSN}", 1), []string{"databases.main.dsn: environment variable NOPE_DSN is not set (line 4)"}},
		{"list where mapping expected", base + "kafka: [a, b]\n", []string{"kafka: expected a mapping, got a list (line 15)"}},
		{"sasl mechanism", base + "kafka:\n  main:\n    brokers: [127.0.0.1:9092]\n    sasl: {mechanism: GSSAPI, username: u}\n", []string{`kafka.main.sasl.mechanism: is not one of PLAIN`, "(line 18)"}},
		{"kafka uncommitted rule", base + "kafka:\n  main:\n    brokers: [127.0.0.1:9092]\n    uncommitted: latest\n", []string{`kafka.main.uncommitted: is not one of ignore`, "log_start"}},
		{"kafka isolation", base + "kafka:\n  main:\n    brokers: [127.0.0.1:9092]\n    isolation: read_committd\n", []string{"kafka.main.isolation: is not read_committed or read_uncommitted (line 18)"}},
		{"kafka isolations entry", base + "kafka:\n  main:\n    brokers: [127.0.0.1:9092]\n    isolations: {notify: uncommitted}\n", []string{"kafka.main.isolations.notify: is not read_committed or read_uncommitted", "(line 18)"}},
		{"bad share group regex", base + "kafka:\n  main:\n    brokers: [127.0.0.1:9092]\n    share_groups: [\"/(/\"]\n", []string{"kafka.main.share_groups[0]", "not a valid regular expression"}},
		{"bad group regex", base + "kafka:\n  main:\n    brokers: [127.0.0.1:9092]\n    groups: [\"/[/\"]\n", []string{"kafka.main.groups[0]", "not a valid regular expression"}},
		{"broker without port", base + "kafka:\n  main:\n    brokers: [localhost]\n", []string{`kafka.main.brokers[0]: is not host:port`}},
		{"bad cron", base + "reconcile:\n  idx:\n    schedule: every five minutes\n    authority: {database: main, table: messages, key: id, version: version, created_at: created_at}\n    target: {database: main, table: search_index, key: message_id, version: version}\n", []string{`reconcile.idx.schedule: is not a cron schedule`, "(line 17)"}},
		{"reconcile negative timeout", base + "reconcile:\n  idx:\n    schedule: \"@every 5m\"\n    timeout: -1m\n    authority: {database: main, table: messages, key: id, version: version, created_at: created_at}\n    target: {database: main, table: search_index, key: message_id, version: version}\n", []string{`reconcile.idx.timeout: is negative`}},
		{"reconcile bad updated_at", base + "reconcile:\n  idx:\n    schedule: \"@every 5m\"\n    authority: {database: main, table: messages, key: id, version: version, created_at: created_at, updated_at: \"a b\"}\n    target: {database: main, table: search_index, key: message_id, version: version}\n", []string{`reconcile.idx.authority.updated_at`}},
		{"reconcile unknown outbox", base + "reconcile:\n  idx:\n    schedule: \"@every 5m\"\n    authority: {database: main, table: messages, key: id, version: version, created_at: created_at}\n    outbox: {name: nope, key: message_id, version: v}\n", []string{`reconcile.idx.outbox.name: names no outbox defined`}},
		{"audit sample out of range", base + "kafka:\n  main:\n    brokers: [127.0.0.1:9092]\naudit:\n  messages:\n    kafka: main\n    topics: [messages]\n    event_id: header:event_id\n    sample: 1.5\n", []string{"audit.messages.sample: must be in (0, 1] (line 23)"}},
		{"audit event_id form", base + "kafka:\n  main:\n    brokers: [127.0.0.1:9092]\naudit:\n  messages:\n    kafka: main\n    topics: [messages]\n    event_id: body\n", []string{`audit.messages.event_id: is not header:NAME, key or json:FIELD`}},
		{"duplicate key", strings.Replace(base, "    deadline: 5m", "    deadline: 5m\n    deadline: 6m", 1), []string{"outboxes.messages.deadline: key given twice (line 15)"}},
		{"bool not bool", base + "kafka:\n  main:\n    brokers: [127.0.0.1:9092]\n    tls: {enabled: maybe}\n", []string{`kafka.main.tls.enabled: expected true or false, got a string`}},
	} {
		if tc.want == nil {
			tc.yaml = strings.Replace(base, "    dsn: postgres://exporter@127.0.0.1/app", "    dsn: x\n    max_connections: two", 1)
			tc.want = []string{`databases.main.max_connections: expected a whole number, got a string (line 5)`}
		}
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), env(nil))
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.yaml)
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error is %T, not config.Errors: %v", err, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}

// All errors are reported at once, not just the first.
func TestAllErrorsAtOnce(t *testing.T) {
	y := strings.Replace(base, "deadline: 5m", `deadline: "5 minutes"`, 1) + "bogus: 1\n"
	y = strings.Replace(y, "database: main", "database: nope", 1)
	_, err := Parse([]byte(y), env(nil))
	var errs Errors
	if !errors.As(err, &errs) || len(errs) < 2 {
		t.Fatalf("want several errors, got %v", err)
	}
	for _, w := range []string{"outboxes.messages.deadline", "bogus: unknown key"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("missing %q in:\n%v", w, err)
		}
	}
}

func TestEnvExpansion(t *testing.T) {
	y := strings.Replace(base, "postgres://exporter@127.0.0.1/app", "postgres://exporter:${PW}@${HOST}/app", 1)
	y = strings.Replace(y, "deadline: 5m", "deadline: ${DEADLINE}", 1)
	cfg, err := Parse([]byte(y), env(map[string]string{"PW": "s3cret", "HOST": "db", "DEADLINE": "90s"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Databases["main"].DSN.Reveal(); got != "postgres://exporter:s3cret@db/app" {
		t.Errorf("dsn %q", got)
	}
	if cfg.Outboxes["messages"].Deadline != 90*time.Second {
		t.Errorf("deadline %v", cfg.Outboxes["messages"].Deadline)
	}
}

func TestSecretNeverPrints(t *testing.T) {
	s := Secret("hunter2")
	for _, got := range []string{s.String(), s.GoString()} {
		if strings.Contains(got, "hunter2") {
			t.Errorf("secret leaked: %q", got)
		}
	}
	b, _ := s.MarshalText()
	if strings.Contains(string(b), "hunter2") {
		t.Errorf("secret leaked in text: %q", b)
	}
}

func TestRedactDSN(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:hunter2@h:5432/db?sslmode=disable": "postgres://u:xxxxx@h:5432/db?sslmode=disable",
		"postgresql://u@h/db?password=hunter2":           "postgresql://u@h/db?password=xxxxx",
		"host=h user=u password=hunter2 dbname=d":        "host=h user=u password=xxxxx dbname=d",
		"host=h password='hun ter2' dbname=d":            "host=h password=xxxxx dbname=d",
		"host=h user=u":                                  "host=h user=u",
		"postgres://u:hunter2@h:notaport/db":             unparsedDSN,
		"postgres://u:hun@ter2@h:bad/db?password=x":      unparsedDSN,
		"postgres://u:hun/ter2@h/db":                     unparsedDSN,
		"host=h sslpassword=hunter2 password='a\\ b'":    "host=h sslpassword=xxxxx password=xxxxx",
		"postgres://u@h/db?sslpassword=hunter2":          "postgres://u@h/db?sslpassword=xxxxx",
	} {
		if got := RedactDSN(in); got != want {
			t.Errorf("RedactDSN(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPattern(t *testing.T) {
	p, err := ParsePattern("/search-.*/")
	if err != nil {
		t.Fatal(err)
	}
	if !p.Match("search-index") || p.Match("xsearch-index") || p.Match("notify") {
		t.Error("regex pattern must match whole names")
	}
	e, _ := ParsePattern("notify")
	if !e.Match("notify") || e.Match("notify2") {
		t.Error("exact pattern")
	}
}
