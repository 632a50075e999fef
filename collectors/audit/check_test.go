package audit

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// item finds a report's item by what it is about.
func item(r *CheckReport, what string) CheckItem {
	for _, it := range r.Items {
		if it.What == what {
			return it
		}
	}
	return CheckItem{}
}

func runCheck(t *testing.T, f *fixture, cfg *config.Audit) *CheckReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := Check(ctx, f.pool, f.kcfg, "messages", cfg, f.ob)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + r.Text())
	return r
}

// TestCheckAudit is check's part of items 11 and 12: it names an id-format
// mismatch from the last records of the topics, wants the index the
// comparison ranges over, and warns where silent loss cannot be seen.
func TestCheckAudit(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	var recs []*kgo.Record
	for i := 0; i < 10; i++ {
		id := newUUID()
		f.row(id, "PUBLISHED", now.Add(-time.Minute), ptrTime(now))
		recs = append(recs, rec("messages", int32(i%2), id, now))
	}
	f.produce(recs...)
	cfg := auditCfg("messages", "messages.retry")

	r := runCheck(t, f, cfg)
	if it := item(r, "event ids"); it.Level != CheckOK || !strings.Contains(it.Detail, "10 of the last 10") {
		t.Errorf("matching ids: %+v", it)
	}
	if it := item(r, "indexes"); it.Level != CheckFail || r.OK ||
		!strings.Contains(strings.Join(r.Statements, "\n"), `ON "public"."outbox" ("published_at")`) {
		t.Errorf("no index on published_at: %+v, statements %v", it, r.Statements)
	}
	// The statements it prints, or partial indexes like the outbox
	// collector's, serve the query.
	f.db.Exec(t, `CREATE INDEX ON public.outbox (published_at)`)
	if r = runCheck(t, f, cfg); r.OK {
		t.Errorf("with an index on published_at only: OK:\n%s", r.Text())
	}
	f.db.Exec(t, `CREATE INDEX ON public.outbox (created_at) WHERE status IN ('PENDING', 'CLAIMED');
		CREATE INDEX ON public.outbox (event_id) WHERE status IN ('ABANDONED')`)
	if r = runCheck(t, f, cfg); !r.OK || item(r, "indexes").Level != CheckOK {
		t.Errorf("with the indexes: not OK:\n%s", r.Text())
	}

	// The relays write the same UUIDs in upper case.
	recs = recs[:0]
	for i := 0; i < 40; i++ {
		id := newUUID()
		f.row(id, "PUBLISHED", now.Add(-time.Minute), ptrTime(now))
		recs = append(recs, rec("messages", int32(i%2), strings.ToUpper(id), now))
	}
	f.produce(recs...)
	r = runCheck(t, f, cfg)
	if it := item(r, "event ids"); it.Level != CheckFail || r.OK || !strings.Contains(it.Detail, "upper case") {
		t.Errorf("upper-case ids: %+v", it)
	}

	// A uuid column and ids that are not even UUIDs: not rows, no error.
	f.db.Exec(t, `CREATE TABLE public.outbox_u (id uuid PRIMARY KEY, created_at timestamptz NOT NULL, published_at timestamptz)`)
	f.db.Exec(t, `INSERT INTO public.outbox_u VALUES (gen_random_uuid(), now(), now())`)
	f.ob = &config.Outbox{Table: "public.outbox_u", ID: "id", CreatedAt: "created_at", PublishedAt: "published_at"}
	recs = recs[:0]
	for i := 0; i < 60; i++ {
		recs = append(recs, rec("messages.retry", 0, fmt.Sprintf("evt-%d", i), now))
	}
	f.produce(recs...)
	r = runCheck(t, f, auditCfg("messages.retry"))
	if it := item(r, "event ids"); it.Level != CheckFail || !strings.Contains(it.Detail, "0 of the last 20") || !strings.Contains(it.Detail, `"evt-`) {
		t.Errorf("ids not of the column's type: %+v", it)
	}
}

func TestCheckAuditConfig(t *testing.T) {
	for _, tt := range []struct {
		name  string
		a     config.Audit
		o     config.Outbox
		what  string
		level string
	}{
		{"delete on publish", config.Audit{Grace: time.Minute, Window: time.Hour}, config.Outbox{}, "silent loss", CheckWarn},
		{"status without published_at", config.Audit{Grace: time.Minute, Window: time.Hour},
			config.Outbox{Status: "s", Pending: []string{"P"}, Published: []string{"D"}}, "published_at", CheckWarn},
		{"grace not shorter than window", config.Audit{Grace: time.Hour, Window: time.Hour}, config.Outbox{PublishedAt: "p"}, "grace", CheckFail},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &CheckReport{OK: true}
			checkConfig(r, &tt.a, &tt.o)
			if it := item(r, tt.what); it.Level != tt.level || it.Detail == "" {
				t.Errorf("%s: %+v, want level %s", tt.what, r.Items, tt.level)
			}
			if r.OK != (tt.level != CheckFail) {
				t.Errorf("OK = %v", r.OK)
			}
		})
	}
	r := &CheckReport{OK: true}
	checkConfig(r, &config.Audit{Grace: time.Minute, Window: time.Hour}, &config.Outbox{Status: "s", Published: []string{"D"}, PublishedAt: "p"})
	if len(r.Items) != 0 {
		t.Errorf("a status outbox with published_at: %+v, want nothing to say", r.Items)
	}
}
