package outboxsql_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// byComboSchema has label columns of several types: text (NOT NULL,
// with an empty value), integer, an enum and a nullable char(n), whose
// values hold quotes, backslashes and non-ASCII letters.
const byComboSchema = `CREATE TYPE mood AS ENUM ('calm', 'it''s', 'ünï');
	CREATE TABLE bc (id serial PRIMARY KEY, created_at timestamptz NOT NULL, status text NOT NULL,
	  k text NOT NULL, n int, e mood, c char(4), lease_until timestamptz);`

// TestProbeReadsEachCombination: the reads of several label combinations
// at once (ProbeQuery and ClaimedProbeQuery, which send the plain ones as
// one set of rows typed by the table) return, for every combination,
// exactly the rows a brute force over the whole table finds for it, at
// most k each, for label columns of every type and values that need
// quoting, NULL read as "", and with a filter that names columns
// unqualified.
func TestProbeReadsEachCombination(t *testing.T) {
	db := pgtest.New(t)
	db.Exec(t, byComboSchema)
	rng := rand.New(rand.NewPCG(29, 1))
	ks := []string{"a", "it's", `back\slash`, "ünï", "", "x y"}
	es := []string{"calm", "it's", "ünï"}
	cs := []string{"ab", `q'\`, "é"}
	for i := 0; i < 600; i++ {
		n, e, c := any(rng.IntN(4)), any(es[rng.IntN(3)]), any(cs[rng.IntN(3)])
		if rng.IntN(5) == 0 {
			n = nil
		}
		if rng.IntN(6) == 0 {
			e = nil
		}
		if rng.IntN(4) == 0 {
			c = nil
		}
		status := []string{"PENDING", "CLAIMED", "PUBLISHED"}[rng.IntN(3)]
		var lease any
		if status == "CLAIMED" && rng.IntN(3) > 0 {
			lease = time.Now().Add(time.Duration(rng.IntN(7200)-3600) * time.Second)
		}
		db.Exec(t, `INSERT INTO bc (created_at, status, k, n, e, c, lease_until) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			time.Now().Add(-time.Duration(rng.IntN(3600))*time.Second), status, ks[rng.IntN(len(ks))], n, e, c, lease)
	}
	for _, labels := range [][]string{{"k", "n"}, {"e", "c"}, {"k", "e", "c"}} {
		t.Run(strings.Join(labels, ","), func(t *testing.T) { checkProbe(t, db, labels) })
	}
}

// checkProbe compares the probes of every combination of labels (and of
// half of them) with the brute force.
func checkProbe(t *testing.T, db *pgtest.DB, labels []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o := &config.Outbox{Table: "bc", ID: "id", CreatedAt: "created_at", Status: "status", Pending: []string{"PENDING"},
		InFlight: []string{"CLAIMED"}, Published: []string{"PUBLISHED"}, LeaseUntil: "lease_until",
		Filter: "id > 0 AND k IS NOT NULL", Deadline: time.Minute, MaxCount: 1000, MaxLabelValues: 10}
	var texts []string
	for _, l := range labels {
		o.Labels = append(o.Labels, config.Label{Name: l, Column: l})
		texts = append(texts, fmt.Sprintf("coalesce(%s::text, '')", l))
	}
	cols, err := outboxsql.Introspect(ctx, db.Admin, "bc")
	if err != nil {
		t.Fatal(err)
	}
	s, err := outboxsql.NewSpec("bc", o, cols)
	if err != nil {
		t.Fatal(err)
	}
	// The brute force: every unpublished row's labels as the state
	// query returns them, its order and lease.
	type row struct {
		labels  string
		claimed bool
		created time.Time
		lease   *time.Time
	}
	var all []row
	rows, err := db.Admin.Query(ctx, fmt.Sprintf(`SELECT %s, status = 'CLAIMED', created_at, lease_until FROM bc WHERE status <> 'PUBLISHED'`,
		strings.Join(texts, " || E'\\x01' || ")))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.labels, &r.claimed, &r.created, &r.lease); err != nil {
			t.Fatal(err)
		}
		all = append(all, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	combos := map[string]bool{}
	for _, r := range all {
		combos[r.labels] = true
	}
	var list [][]string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range combos {
			if !yield(k) {
				return
			}
		}
	}) {
		list = append(list, strings.Split(k, "\x01"))
	}
	if len(list) < 10 {
		t.Fatalf("only %d combinations: the table is too small to test", len(list))
	}
	const k = 3
	for _, set := range [][][]string{list, list[:len(list)/2], list[:1]} {
		want := map[string]int64{}
		claimedWant := map[string]int64{}
		for _, c := range set {
			key := strings.Join(c, "\x01")
			var n, nc int64
			for _, r := range all {
				if r.labels == key {
					n++
					if r.claimed && r.lease == nil {
						nc++
					}
				}
			}
			want[key], claimedWant[key] = min(n, k), min(nc, k)
		}
		compareGroups(t, db, s.ProbeQuery(set, k, true), len(labels), want, "ProbeQuery")
		compareGroups(t, db, s.ClaimedProbeQuery(set, nil, s.ClaimedParts()[2], k), len(labels), claimedWant, "ClaimedProbeQuery (lease absent)")
	}
}

// compareGroups runs a state-shaped query and compares its rows per
// label combination with want.
func compareGroups(t *testing.T, db *pgtest.DB, q string, nl int, want map[string]int64, name string) {
	t.Helper()
	rows, err := db.Admin.Query(context.Background(), q)
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, q)
	}
	defer rows.Close()
	got := map[string]int64{}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		var ls []string
		for _, v := range vals[2 : 2+nl] {
			// The state shape returns NULL as NULL; the scan reads it "".
			s, _ := v.(string)
			ls = append(ls, s)
		}
		got[strings.Join(ls, "\x01")] += vals[2+nl].(int64)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for key, n := range want {
		if got[key] != n {
			t.Errorf("%s: combination %q read %d rows, want %d", name, strings.Split(key, "\x01"), got[key], n)
		}
	}
	for key, n := range got {
		if _, ok := want[key]; !ok {
			t.Errorf("%s: combination %q not asked for read %d rows", name, strings.Split(key, "\x01"), n)
		}
	}
}
