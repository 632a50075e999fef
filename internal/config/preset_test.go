package config

import (
	"slices"
	"strings"
	"testing"
)

const presetBase = `
databases:
  main:
    dsn: postgres://exporter@127.0.0.1/app
outboxes:
  events:
    database: main
    preset: %s
    deadline: 5m
`

func parsePreset(t *testing.T, preset, extra string) *Outbox {
	t.Helper()
	y := strings.Replace(presetBase, "%s", preset, 1) + extra
	cfg, err := Parse([]byte(y), env(nil))
	if err != nil {
		t.Fatalf("preset %s: %v", preset, err)
	}
	return cfg.Outboxes["events"]
}

// TestPresetFillsBase: a preset alone is a whole, valid outbox, filled
// from its oldest generation when the file is read.
func TestPresetFillsBase(t *testing.T) {
	o := parsePreset(t, "spring-modulith", "")
	if o.Table != "event_publication" || o.ID != "id" || o.CreatedAt != "publication_date" || o.PublishedAt != "completion_date" {
		t.Errorf("spring-modulith base not filled: %+v", o)
	}
	if o.Status != "" || o.Style() != StyleTimestamps || o.Generation().Name != "1.x" {
		t.Errorf("base generation should be 1.x by completion_date, got status %q style %v gen %v", o.Status, o.Style(), o.Generation())
	}
	if len(o.Labels) != 1 || o.Labels[0] != (Label{Name: "listener", Column: "listener_id"}) {
		t.Errorf("labels: %v", o.Labels)
	}
	m := parsePreset(t, "masstransit", "")
	if m.Table != "OutboxMessage" || m.ID != "SequenceNumber" || m.CreatedAt != "SentTime" || m.TimeZone != "UTC" || m.Style() != StyleDeleteOnPublish {
		t.Errorf("masstransit: %+v", m)
	}
}

// TestPresetWrittenKeysWin: a key written beside the preset is kept, in
// the base generation and in the one the table's columns choose.
func TestPresetWrittenKeysWin(t *testing.T) {
	o := parsePreset(t, "spring-modulith", "    table: app.publications\n    labels: {event: event_type}\n    pending: [PUBLISHED]\n    status: status\n    published: [COMPLETED]\n")
	if o.Table != "app.publications" || o.Labels[0].Column != "event_type" || o.CreatedAt != "publication_date" {
		t.Errorf("written keys lost or preset not applied: %+v", o)
	}
	v2, g := o.ForColumns(func(string) bool { return true })
	if g.Name != "2.x" || v2.Table != "app.publications" || !slices.Equal(v2.Pending, []string{"PUBLISHED"}) || v2.Labels[0].Column != "event_type" {
		t.Errorf("2.x overrode written keys: gen %s %+v", g.Name, v2)
	}
	if !slices.Equal(v2.Dead, []string{"FAILED"}) || v2.Attempts != "completion_attempts" {
		t.Errorf("2.x keys not filled: %+v", v2)
	}
	if o.Status != "status" || o.Dead != nil {
		t.Errorf("ForColumns changed the parsed outbox: %+v", o)
	}
}

// TestPresetGenerationFromColumns: Spring Modulith's generations are told
// apart by the columns 2.x added; a table with only one of them is 1.x.
func TestPresetGenerationFromColumns(t *testing.T) {
	o := parsePreset(t, "spring-modulith", "")
	for _, tc := range []struct {
		cols []string
		gen  string
	}{
		{[]string{"id", "publication_date", "completion_date"}, "1.x"},
		{[]string{"id", "publication_date", "completion_date", "status"}, "1.x"},
		{[]string{"id", "publication_date", "completion_date", "status", "completion_attempts"}, "2.x"},
	} {
		got, g := o.ForColumns(func(c string) bool { return slices.Contains(tc.cols, c) })
		if g.Name != tc.gen {
			t.Errorf("columns %v: generation %s, want %s", tc.cols, g.Name, tc.gen)
		}
		if (got.Style() == StyleStatus) != (tc.gen == "2.x") {
			t.Errorf("columns %v: style %v", tc.cols, got.Style())
		}
	}
	plain := &Outbox{Table: "t"}
	if got, g := plain.ForColumns(func(string) bool { return true }); got != plain || g != nil {
		t.Errorf("an outbox without a preset changed: %+v %v", got, g)
	}
}

// TestPresetGenerationsValid: every generation's fill, alone, passes the
// same validation as a hand-written outbox.
func TestPresetGenerationsValid(t *testing.T) {
	for _, p := range Presets() {
		for _, g := range p.Generations {
			o := g.Fill
			o.Database, o.Deadline = "main", 5
			if o.Table == "" {
				// A preset whose table is named per topic (watermill-sql).
				o.Table = "watermill_orders"
				o.OffsetsTable = WatermillOffsetsTable(o.Table)
			}
			// Through its preset: a fill with no created_at is how a
			// library with no creation time says so.
			o.preset = &presetUse{p: p, written: map[string]bool{}}
			c := &Config{Databases: map[string]*Database{"main": {DSN: "postgres://x@127.0.0.1/app", MaxConnections: 1, StatementTimeout: 1e9, LockTimeout: 1e9}}, Outboxes: map[string]*Outbox{"events": &o}}
			c.setDefaults()
			if errs := c.validate(); len(errs) > 0 {
				t.Errorf("%s %s: %v", p.Name, g.Name, errs)
			}
			if g.Blind == "" {
				t.Errorf("%s %s: says nothing of what it cannot see", p.Name, g.Name)
			}
		}
	}
}

// TestPresetUnknown: an unknown name is an error that lists the known
// ones, without quoting the name written.
func TestPresetUnknown(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"spring-moduliths", `outboxes.events.preset: is not a known preset; known: debezium-outbox, eventuate-tram, masstransit, namastack, nservicebus, spring-modulith, watermill-sql (line 8)`},
	} {
		_, err := Parse([]byte(strings.Replace(presetBase, "%s", tc.name, 1)), env(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("preset %s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestReservedLabelRenamed: a label named as one the exporter sets
// itself (a library's natural topic column) is renamed, not refused.
func TestReservedLabelRenamed(t *testing.T) {
	y := strings.Replace(base, "    deadline: 5m", "    deadline: 5m\n    labels: {topic: topic, kind: event_type}", 1)
	cfg, err := Parse([]byte(y), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.Outboxes["messages"]
	if !slices.Equal(o.Labels, []Label{{"event_topic", "topic"}, {"kind", "event_type"}}) || o.RenamedLabels()["event_topic"] != "topic" {
		t.Errorf("labels %v, renamed %v", o.Labels, o.RenamedLabels())
	}
}

// TestNullStatusAndAttemptsOnInsert: null_status names a state and needs
// a status column; attempts_on_insert needs attempts; WithNullStatus adds
// the NULL stand-in to the named state's values only.
func TestNullStatusAndAttemptsOnInsert(t *testing.T) {
	for _, tc := range []struct{ extra, want string }{
		{"    null_status: waiting\n", `outboxes.messages.null_status: "waiting" is not one of pending, in_flight, published, dead`},
		{"    attempts_on_insert: 1\n", "outboxes.messages.attempts_on_insert: needs attempts"},
		{"    attempts_on_insert: -1\n    attempts: a\n", "must be 0 or more"},
	} {
		_, err := Parse([]byte(base+tc.extra), env(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.extra, err, tc.want)
		}
	}
	cfg, err := Parse([]byte(base+"    null_status: pending\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.Outboxes["messages"]
	w := o.WithNullStatus()
	if !slices.Equal(w.Pending, []string{"PENDING", NullStatusValue}) || !slices.Equal(o.Pending, []string{"PENDING"}) || !slices.Equal(w.Published, o.Published) {
		t.Errorf("WithNullStatus: %v (parsed %v)", w.Pending, o.Pending)
	}
	if _, err := Parse([]byte(strings.Replace(base, "    status: status\n    pending: [PENDING]\n    published: [PUBLISHED]\n", "", 1)+"    null_status: pending\n"), env(nil)); err == nil || !strings.Contains(err.Error(), "null_status: needs a status column") {
		t.Errorf("null_status without status: %v", err)
	}
}
