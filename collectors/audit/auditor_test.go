package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

const secretBody = "SECRET-BODY-must-never-leak"

type fixture struct {
	t     *testing.T
	db    *pgtest.DB
	kafka *kafkatest.Cluster // nil on the real broker
	env   kafkatest.Env
	prod  *kgo.Client
	pool  *pgxpool.Pool
	ob    *config.Outbox
	kcfg  *config.Kafka
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	c := kafkatest.New(t, 1, kfake.SeedTopics(2, "messages"), kfake.SeedTopics(1, "messages.retry"))
	f := newFixtureOn(t, c)
	f.kafka = c
	return f
}

// newFixtureOn is a fixture on a kfake cluster or a real broker; topics
// are the test's to create.
func newFixtureOn(t *testing.T, env kafkatest.Env) *fixture {
	t.Helper()
	f := &fixture{t: t, db: pgtest.New(t), env: env}
	f.kcfg = &config.Kafka{Brokers: env.Brokers()}
	var err error
	f.prod, err = kgo.NewClient(kgo.SeedBrokers(env.Brokers()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.prod.Close)
	f.db.Exec(t, `CREATE TABLE public.outbox (
		event_id text PRIMARY KEY,
		created_at timestamptz NOT NULL,
		status text NOT NULL,
		published_at timestamptz,
		body text NOT NULL DEFAULT '`+secretBody+`')`)
	f.ob = &config.Outbox{
		Database: "main", Table: "public.outbox", ID: "event_id", CreatedAt: "created_at",
		Status: "status", Pending: []string{"PENDING"}, InFlight: []string{"CLAIMED"},
		Published: []string{"PUBLISHED"}, Dead: []string{"ABANDONED"}, PublishedAt: "published_at",
	}
	f.pool, err = pg.Open(context.Background(), &config.Database{DSN: config.Secret(f.db.URL), MaxConnections: 2, StatementTimeout: 5 * time.Second, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.pool.Close)
	return f
}

func (f *fixture) row(id, status string, created time.Time, published *time.Time) {
	f.t.Helper()
	f.db.Exec(f.t, `INSERT INTO public.outbox (event_id, created_at, status, published_at) VALUES ($1, $2, $3, $4)`, id, created, status, published)
}

func (f *fixture) produce(recs ...*kgo.Record) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		f.t.Fatalf("produce: %v", err)
	}
}

func rec(topic string, partition int32, id string, ts time.Time) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: partition, Timestamp: ts, Key: []byte("k-" + id),
		Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte(id)}}, Value: []byte(secretBody)}
}

func (f *fixture) auditor(sample float64, eventID string) *Auditor {
	f.t.Helper()
	cfg := &config.Audit{Kafka: "main", Topics: []string{"messages", "messages.retry"}, EventID: eventID, Sample: sample, Grace: time.Minute, Window: time.Hour}
	a, err := New("messages", cfg, f.ob, f.kcfg, f.pool, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	a.SetCompareInterval(time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	a.Start(ctx)
	f.t.Cleanup(func() { cancel(); a.Close() })
	waitReady(f.t, a)
	return a
}

func waitReady(t *testing.T, a *Auditor) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !a.Ready() {
		if time.Now().After(deadline) {
			t.Fatalf("auditor not ready: %v", a.Stats().Err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitRecords waits until the tailer has read n records.
func waitRecords(t *testing.T, a *Auditor, n uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for a.Stats().Records < n {
		if time.Now().After(deadline) {
			t.Fatalf("read %d records, want %d", a.Stats().Records, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func compare(t *testing.T, a *Auditor) Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Compare(ctx); err != nil {
		t.Fatal(err)
	}
	return a.Report()
}

// scenario is a set of outbox rows and records in every state, and the
// exact findings they must give.
type scenario struct {
	missing, unmarked []string
	dead              []string       // dead rows on the topics
	dups              map[string]int // id → copies
	notJudged         []string
	records           int // records produced, malformed included
	malformed         int
	late              []*kgo.Record // produced after the auditor started
}

// seed writes n ids of each kind. Record and row times are relative to now.
func (f *fixture) seed(n int, now time.Time) *scenario {
	f.t.Helper()
	s := &scenario{dups: map[string]int{}}
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		p := int32(i % 2)
		// Published and on the topic: consistent.
		id := fmt.Sprintf("ok-%d", i)
		f.row(id, "PUBLISHED", ago(30*time.Minute), ptrTime(ago(29*time.Minute)))
		recs = append(recs, rec("messages", p, id, ago(29*time.Minute)))
		// Published, never reached the broker: silent loss.
		id = fmt.Sprintf("lost-%d", i)
		f.row(id, "PUBLISHED", ago(30*time.Minute), ptrTime(ago(29*time.Minute)))
		s.missing = append(s.missing, id)
		// Published inside grace and not there yet: not judged.
		id = fmt.Sprintf("fresh-%d", i)
		f.row(id, "PUBLISHED", ago(40*time.Second), ptrTime(ago(20*time.Second)))
		s.notJudged = append(s.notJudged, id)
		// Pending (lease expired after a lost ack) but on the topic.
		id = fmt.Sprintf("unacked-%d", i)
		f.row(id, "PENDING", ago(20*time.Minute), nil)
		recs = append(recs, rec("messages.retry", 0, id, ago(19*time.Minute)))
		s.unmarked = append(s.unmarked, id)
		// Claimed, published long ago, never marked.
		id = fmt.Sprintf("claimed-%d", i)
		f.row(id, "CLAIMED", ago(20*time.Minute), nil)
		recs = append(recs, rec("messages", p, id, ago(18*time.Minute)))
		s.unmarked = append(s.unmarked, id)
		// Claimed and just published: the relay is about to mark it.
		id = fmt.Sprintf("marking-%d", i)
		f.row(id, "CLAIMED", ago(30*time.Second), nil)
		recs = append(recs, rec("messages", p, id, ago(5*time.Second)))
		s.notJudged = append(s.notJudged, id)
		// Pending, not on the topic: consistent.
		f.row(fmt.Sprintf("pending-%d", i), "PENDING", ago(5*time.Minute), nil)
		// Dead and on the topic: reported (a dead row whose event reached the broker anyway).
		id = fmt.Sprintf("dead-%d", i)
		f.row(id, "ABANDONED", ago(15*time.Minute), nil)
		recs = append(recs, rec("messages", p, id, ago(10*time.Minute)))
		s.dead = append(s.dead, id)
		// Dead and not on the topic: what the outbox collector reports.
		f.row(fmt.Sprintf("dead-absent-%d", i), "ABANDONED", ago(15*time.Minute), nil)
		// Published twice before the start, a third time after it.
		id = fmt.Sprintf("dup-%d", i)
		f.row(id, "PUBLISHED", ago(26*time.Minute), ptrTime(ago(25*time.Minute)))
		recs = append(recs, rec("messages", p, id, ago(25*time.Minute)), rec("messages.retry", 0, id, ago(24*time.Minute)))
		s.late = append(s.late, rec("messages", 1-p, id, time.Time{}))
		s.dups[id] = 3
		// Created before the window: out of scope.
		f.row(fmt.Sprintf("old-%d", i), "PUBLISHED", ago(2*time.Hour), ptrTime(ago(2*time.Hour)))
		// Records without an event id header.
		if i%10 == 0 {
			r := rec("messages", p, "", ago(12*time.Minute))
			r.Headers = nil
			recs = append(recs, r)
			s.malformed++
		}
	}
	// A record without an id after the start: counted.
	live := rec("messages", 0, "", time.Time{})
	live.Headers = nil
	s.late = append(s.late, live)
	// Records outside the window, of ids that the window must not see.
	for i := 0; i < n; i++ {
		recs = append(recs, rec("messages", 0, fmt.Sprintf("lost-%d", i), ago(3*time.Hour)))
	}
	f.produce(recs...)
	s.records = len(recs) + len(s.late)
	return s
}

// restrict keeps the ids a sampler picks.
func restrict(ids []string, s Sampler) []string {
	out := []string{}
	for _, id := range ids {
		if h, _ := Digest([]byte(id)); s.Sampled(h) {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// wantIDs checks that the findings of kind what have exactly the ids
// want, in order.
func wantIDs(t *testing.T, what string, fs []Finding, want ...string) {
	t.Helper()
	if got := ids(fs); !reflect.DeepEqual(got, want) {
		t.Errorf("%s %v, want %v", what, got, want)
	}
}

func ids(fs []Finding) []string {
	out := []string{}
	for _, f := range fs {
		out = append(out, f.ID)
	}
	return out
}

func dupIDs(ds []Duplicate) map[string]int {
	out := map[string]int{}
	for _, d := range ds {
		out[d.ID] = d.Copies
	}
	return out
}

func checkReport(t *testing.T, r Report, s *scenario, sampler Sampler) {
	t.Helper()
	if got, want := ids(r.Missing), restrict(s.missing, sampler); !reflect.DeepEqual(got, want) {
		t.Errorf("missing_in_broker = %v, want %v", got, want)
	}
	if got, want := ids(r.Unmarked), restrict(s.unmarked, sampler); !reflect.DeepEqual(got, want) {
		t.Errorf("unmarked_in_broker = %v, want %v", got, want)
	}
	if got, want := ids(r.Dead), restrict(s.dead, sampler); !reflect.DeepEqual(got, want) {
		t.Errorf("dead_in_broker = %v, want %v", got, want)
	}
	if r.MissingCount != len(r.Missing) || r.UnmarkedCount != len(r.Unmarked) || r.DeadCount != len(r.Dead) {
		t.Errorf("counts %d/%d do not match lists %d/%d", r.MissingCount, r.UnmarkedCount, len(r.Missing), len(r.Unmarked))
	}
	var dupList []string
	for id := range s.dups {
		dupList = append(dupList, id)
	}
	want := map[string]int{}
	for _, id := range restrict(dupList, sampler) {
		want[id] = s.dups[id]
	}
	if got := dupIDs(r.Duplicates); !reflect.DeepEqual(got, want) {
		t.Errorf("duplicates = %v, want %v", got, want)
	}
}

func TestAuditFindings(t *testing.T) {
	f := newFixture(t)
	s := f.seed(100, time.Now())
	for _, sample := range []float64{1, 0.1} {
		t.Run(fmt.Sprint("sample ", sample), func(t *testing.T) {
			f.t = t
			sampler := NewSampler(sample)
			a := f.auditor(sample, "header:event_id")
			waitRecords(t, a, uint64(s.records-len(s.late)))
			if sample == 1 {
				// The third copies arrive after the start: live.
				for _, r := range s.late {
					r.Timestamp = time.Now()
				}
				f.produce(s.late...)
			}
			waitRecords(t, a, uint64(s.records))
			r := compare(t, a)
			checkReport(t, r, s, sampler)
			if sample == 0.1 && len(r.Missing)+len(r.Unmarked) == 0 {
				t.Fatal("the sample picked no finding; the test proves nothing")
			}
			st := a.Stats()
			if st.Err != nil {
				t.Errorf("stats error: %v", st.Err)
			}
			if !st.Compared || st.Missing != len(restrict(s.missing, sampler)) || st.Unmarked != len(restrict(s.unmarked, sampler)) {
				t.Errorf("stats %+v do not match the report", st)
			}
			// Malformed records before the start are re-read, not counted.
			wantMalformed, wantReread := uint64(1), uint64(s.malformed)
			if sample != 1 {
				wantMalformed, wantReread = 0, uint64(s.malformed+1)
			}
			if st.Malformed != wantMalformed || r.RereadMalformed != wantReread {
				t.Errorf("malformed = %d, re-read %d, want %d, %d", st.Malformed, r.RereadMalformed, wantMalformed, wantReread)
			}
			// Duplicates before the start rebuild state but are not counted;
			// each later copy is counted once.
			wantDups := uint64(0)
			if sample == 1 {
				wantDups = uint64(len(s.dups))
			}
			if st.Duplicates != wantDups {
				t.Errorf("duplicates_total = %d, want %d", st.Duplicates, wantDups)
			}
			// No body in the answer.
			b, _ := json.Marshal(r)
			if strings.Contains(string(b), secretBody) {
				t.Error("report holds a message body")
			}
		})
	}
}

func TestAuditRestartMidWindow(t *testing.T) {
	f := newFixture(t)
	s := f.seed(60, time.Now())
	first := f.auditor(1, "header:event_id")
	waitRecords(t, first, uint64(s.records-len(s.late)))
	compare(t, first)
	// More traffic mid-window, then a restart.
	for _, r := range s.late {
		r.Timestamp = time.Now()
	}
	f.produce(s.late...)
	waitRecords(t, first, uint64(s.records))
	before := compare(t, first)
	checkReport(t, before, s, NewSampler(1))
	if d := first.Stats().Duplicates; d != uint64(len(s.dups)) {
		t.Errorf("first process counted %d duplicates, want %d", d, len(s.dups))
	}
	first.Close()

	second := f.auditor(1, "header:event_id")
	waitRecords(t, second, uint64(s.records))
	after := compare(t, second)
	if !reflect.DeepEqual(ids(after.Missing), ids(before.Missing)) || !reflect.DeepEqual(ids(after.Unmarked), ids(before.Unmarked)) ||
		!reflect.DeepEqual(dupIDs(after.Duplicates), dupIDs(before.Duplicates)) {
		t.Errorf("after restart:\n%+v\nbefore:\n%+v", after, before)
	}
	if m := first.Stats().Malformed; m != 1 {
		t.Errorf("first process counted %d malformed records, want 1", m)
	}
	// The re-read window is not counted again.
	if st := second.Stats(); st.Duplicates != 0 || st.Malformed != 0 {
		t.Errorf("restarted process counted %d re-read duplicates and %d malformed records, want 0", st.Duplicates, st.Malformed)
	}
	if got := second.Report().RereadMalformed; got != uint64(s.malformed+1) {
		t.Errorf("re-read malformed = %d, want %d", got, s.malformed+1)
	}
}

// TestAuditChecked advances the auditor's clock to show each sampled row
// is counted once, when it leaves grace, and that rows inside grace are
// judged only then.
func TestAuditChecked(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	f.row("a", "PUBLISHED", now.Add(-10*time.Second), ptrTime(now.Add(-5*time.Second)))
	f.row("b", "PUBLISHED", now.Add(-20*time.Second), ptrTime(now.Add(-10*time.Second)))
	f.row("c", "PENDING", now.Add(-15*time.Second), nil)
	f.row("before-start", "PUBLISHED", now.Add(-10*time.Minute), ptrTime(now.Add(-9*time.Minute)))
	f.produce(rec("messages", 0, "a", now.Add(-5*time.Second)), rec("messages", 0, "before-start", now.Add(-9*time.Minute)))
	a := f.auditor(1, "header:event_id")
	waitRecords(t, a, 2)
	var offset atomic.Int64
	a.setClock(func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })
	r := compare(t, a)
	if len(r.Missing) != 0 || a.Stats().Checked != 0 {
		t.Fatalf("inside grace: missing %v, checked %d", ids(r.Missing), a.Stats().Checked)
	}
	offset.Store(int64(2 * time.Minute))
	r = compare(t, a)
	if got := ids(r.Missing); !reflect.DeepEqual(got, []string{"b"}) {
		t.Errorf("after grace: missing %v, want [b]", got)
	}
	if c := a.Stats().Checked; c != 3 {
		t.Errorf("checked = %d, want 3 (a, b, c; not the row older than the start)", c)
	}
	offset.Store(int64(3 * time.Minute))
	compare(t, a)
	if c := a.Stats().Checked; c != 3 {
		t.Errorf("checked = %d after another comparison, want 3: each row counts once", c)
	}
}

func TestAuditKeyAndJSON(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	f.row("j-1", "PUBLISHED", now.Add(-10*time.Minute), ptrTime(now.Add(-9*time.Minute)))
	f.row("j-2", "PUBLISHED", now.Add(-10*time.Minute), ptrTime(now.Add(-9*time.Minute)))
	f.row("42", "PENDING", now.Add(-10*time.Minute), nil)
	ts := now.Add(-9 * time.Minute)
	mk := func(key, value string) *kgo.Record {
		return &kgo.Record{Topic: "messages", Partition: 0, Timestamp: ts, Key: []byte(key), Value: []byte(value)}
	}
	f.produce(
		mk("j-1", `{"body":"`+secretBody+`","event_id":"j-1"}`),
		mk("42", `{"event_id":42}`),
		mk("x", `{"event_id":`),      // bad JSON
		mk("y", `{"other":"j-2"}`),   // no field
		mk("z", `not json at all`),   // bad JSON
		mk("j-1", `{"event_id":{}}`), // not a string or number
	)
	t.Run("json", func(t *testing.T) {
		f.t = t
		a := f.auditor(1, "json:event_id")
		waitRecords(t, a, 6)
		r := compare(t, a)
		wantIDs(t, "missing", r.Missing, "j-2")
		wantIDs(t, "unmarked", r.Unmarked, "42")
		if m := a.Report().RereadMalformed; m != 4 {
			t.Errorf("re-read malformed = %d, want 4", m)
		}
	})
	t.Run("key", func(t *testing.T) {
		f.t = t
		a := f.auditor(1, "key")
		waitRecords(t, a, 6)
		r := compare(t, a)
		wantIDs(t, "missing", r.Missing, "j-2")
		if got := dupIDs(r.Duplicates); !reflect.DeepEqual(got, map[string]int{"j-1": 2}) {
			t.Errorf("duplicates %v, want j-1 twice", got)
		}
		if m := a.Report().RereadMalformed; m != 0 {
			t.Errorf("re-read malformed = %d, want 0", m)
		}
	})
}

// TestAuditTimestampsAndDeleteOnPublish covers the other two ways an
// outbox stores a row's state.
func TestAuditOtherStyles(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	f.db.Exec(t, `CREATE TABLE public.outbox_ts (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, published_at timestamptz, dead_at timestamptz)`)
	f.db.Exec(t, `INSERT INTO public.outbox_ts VALUES
		(1, $1, $2, NULL), (2, $1, $2, NULL), (3, $1, NULL, NULL), (4, $1, NULL, $2)`, now.Add(-10*time.Minute), now.Add(-9*time.Minute))
	ts := now.Add(-9 * time.Minute)
	f.produce(rec("messages", 0, "1", ts), rec("messages", 0, "3", ts), rec("messages", 0, "4", ts), rec("messages", 0, "9", ts))
	t.Run("timestamps", func(t *testing.T) {
		f.t = t
		f.ob = &config.Outbox{Table: "public.outbox_ts", ID: "id", CreatedAt: "created_at", PublishedAt: "published_at", DeadAt: "dead_at"}
		a := f.auditor(1, "header:event_id")
		waitRecords(t, a, 4)
		r := compare(t, a)
		wantIDs(t, "missing", r.Missing, "2")
		wantIDs(t, "unmarked", r.Unmarked, "3")
	})
	t.Run("delete on publish", func(t *testing.T) {
		f.t = t
		f.ob = &config.Outbox{Table: "public.outbox_ts", ID: "id", CreatedAt: "created_at"}
		a := f.auditor(1, "header:event_id")
		waitRecords(t, a, 4)
		r := compare(t, a)
		// Every row present is unpublished: 1, 3 and 4 are on the topic.
		wantIDs(t, "unmarked", r.Unmarked, "1", "3", "4")
		if len(r.Missing) != 0 {
			t.Errorf("missing %v, want none", ids(r.Missing))
		}
	})
	t.Run("status without published_at", func(t *testing.T) {
		f.t = t
		f.db.Exec(t, `CREATE TABLE public.outbox_st (id text, created_at timestamptz, state int)`)
		f.db.Exec(t, `INSERT INTO public.outbox_st VALUES ('1', $1, 2), ('2', $1, 2), ('3', $1, 0)`, now.Add(-10*time.Minute))
		f.ob = &config.Outbox{Table: "public.outbox_st", ID: "id", CreatedAt: "created_at", Status: "state", Pending: []string{"0"}, Published: []string{"2"}}
		a := f.auditor(1, "header:event_id")
		waitRecords(t, a, 4)
		var offset atomic.Int64
		a.setClock(func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })
		// Row 2 was first seen published now: judged only after grace.
		if r := compare(t, a); len(r.Missing) != 0 {
			t.Errorf("missing %v before grace since first seen", ids(r.Missing))
		}
		offset.Store(int64(2 * time.Minute))
		r := compare(t, a)
		wantIDs(t, "missing", r.Missing, "2")
		wantIDs(t, "unmarked", r.Unmarked, "3")
	})
}

func TestHandler(t *testing.T) {
	f := newFixture(t)
	f.row("gone", "PUBLISHED", time.Now().Add(-10*time.Minute), func() *time.Time { t := time.Now().Add(-9 * time.Minute); return &t }())
	a := f.auditor(1, "header:event_id")
	compare(t, a)
	h := Handler(func(name string) *Auditor {
		if name == "messages" {
			return a
		}
		return nil
	})
	for _, tt := range []struct {
		url  string
		code int
		has  string
	}{
		{"/api/v1/audit?outbox=messages", 200, `"id": "gone"`},
		{"/api/v1/audit?outbox=nope", 404, "no audit"},
		{"/api/v1/audit", 400, "required"},
	} {
		rr := httptest.NewRecorder()
		h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, tt.url, nil))
		if rr.Code != tt.code || !strings.Contains(rr.Body.String(), tt.has) {
			t.Errorf("%s: %d %s, want %d containing %q", tt.url, rr.Code, rr.Body.String(), tt.code, tt.has)
		}
	}
}
