package reconcile

import (
	"context"
	"testing"
	"time"
)

const (
	old    = 5 * 24 * time.Hour // outside the 24h window
	recent = time.Hour          // inside it
)

// seedGaps writes a clean population at base+1..base+60 created age ago,
// with one gap of each kind and the rows that must not count, and returns
// the gaps injected.
func seedGaps(t *testing.T, p *pair, base int, age time.Duration) map[Kind][]int {
	t.Helper()
	skip := map[int]bool{}
	for _, i := range []int{10, 20, 21, 22, 30, 31, 32, 40, 50, 55} {
		skip[base+i] = true
	}
	for i := base + 1; i <= base+60; i++ {
		if skip[i] {
			continue
		}
		v := int64(1)
		if i%3 == 0 {
			// An earlier version's outbox row stays next to the current one.
			v = 2
			p.outbox(t, i, 1, age, "PUBLISHED")
		}
		p.add(t, i, v, age, "PUBLISHED", v)
	}
	p.add(t, base+10, 1, age, "", 1)                                   // missing_outbox
	p.add(t, base+20, 1, age, "PUBLISHED", 0)                          // missing_target
	p.add(t, base+21, 1, age, "PENDING", 0)                            // unpublished: no gap
	p.add(t, base+22, 1, age, "ABANDONED", 0)                          // dead: no target gap
	p.add(t, base+30, 2, age, "PUBLISHED", 1)                          // stale_target
	p.add(t, base+31, 2, age, "PENDING", 1)                            // stale but unpublished: no gap
	p.add(t, base+32, 2, age, "", 1)                                   // stale, but version 2 ...
	p.outbox(t, base+32, 2, 0, "PUBLISHED")                            // ... was written within grace: no gap
	p.add(t, base+40, 1, age, "PUBLISHED", 3)                          // orphan_target, version ahead
	p.b.Exec(t, `INSERT INTO search_index VALUES (k($1), 1)`, base+50) // orphan_target, no authority row
	p.add(t, base+55, 1, age, "PENDING", 1)                            // two outbox rows for one version ...
	p.outbox(t, base+55, 1, age, "PUBLISHED")                          // ... the published one counts
	return map[Kind][]int{MissingOutbox: {base + 10}, MissingTarget: {base + 20}, StaleTarget: {base + 30}, OrphanTarget: {base + 40, base + 50}}
}

// seedGrace writes rows younger than grace that would be gaps if judged.
func seedGrace(t *testing.T, p *pair) {
	p.add(t, 201, 1, 0, "", 0)
	p.add(t, 202, 1, 0, "PUBLISHED", 0)
	p.add(t, 203, 2, 0, "PUBLISHED", 1)
}

func count(t *testing.T, p *pair, where string) int64 {
	t.Helper()
	var n int64
	if err := p.a.Admin.QueryRow(context.Background(), `SELECT count(*) FROM messages WHERE `+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestGapsFullAndWindowed(t *testing.T) {
	for _, c := range []struct {
		name, keyType string
		opts          []Option
	}{
		{"bigint checksums", "bigint", nil},
		{"bigint streamed", "bigint", []Option{StreamRuns()}},
		{"uuid checksums", "uuid", nil},
		{"uuid streamed", "uuid", []Option{StreamRuns()}},
		{"text", "text", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, c.keyType)
			oldGaps := seedGaps(t, p, 0, old)
			newGaps := seedGaps(t, p, 100, recent)
			seedGrace(t, p)
			p.b.Exec(t, `INSERT INTO search_index VALUES (k(1000), 1)`) // orphan_target
			s := scheduler(t, p.yaml(""), nil, c.opts...)
			ctx := context.Background()

			res, err := s.Run(ctx, "search_index", true)
			if err != nil {
				t.Fatal(err)
			}
			all := map[Kind][]int{}
			for _, g := range []map[Kind][]int{oldGaps, newGaps, {OrphanTarget: {1000}}} {
				for k, ids := range g {
					all[k] = append(all[k], ids...)
				}
			}
			sameLines(t, "full sweep findings", found(res), want(p, t, all))
			for _, k := range Kinds {
				if res.Gaps[k] != int64(len(all[k])) {
					t.Errorf("full sweep: %s = %d, want %d", k, res.Gaps[k], len(all[k]))
				}
			}
			if w := count(t, p, "created_at < now() - interval '2 minutes'"); res.RowsChecked != w {
				t.Errorf("full sweep checked %d rows, want %d", res.RowsChecked, w)
			}
			if res.Chunks < 5 {
				t.Errorf("full sweep read %d chunks; the test wants many", res.Chunks)
			}
			for _, f := range res.Findings {
				switch {
				case f.Kind == StaleTarget && (f.AuthorityVersion == nil || *f.AuthorityVersion != 2 || f.TargetVersion == nil || *f.TargetVersion != 1 || f.OutboxState != "published"):
					t.Errorf("stale finding %+v", f)
				case f.Kind == MissingTarget && (f.AuthorityVersion == nil || f.TargetVersion != nil || f.OutboxState != "published"):
					t.Errorf("missing_target finding %+v", f)
				case f.Kind == MissingOutbox && f.OutboxState != "absent":
					t.Errorf("missing_outbox finding %+v", f)
				}
			}

			// The windowed run judges rows created in the last 24h; orphans
			// without an authority row are found within the window's key
			// range only.
			res, err = s.Run(ctx, "search_index", false)
			if err != nil {
				t.Fatal(err)
			}
			windowed := map[Kind][]int{MissingOutbox: {110}, MissingTarget: {120}, StaleTarget: {130}, OrphanTarget: {140}}
			for _, i := range []int{50, 150, 1000} {
				var in bool
				err := p.a.Admin.QueryRow(ctx, `WITH w AS (SELECT id FROM messages
					WHERE created_at >= now() - interval '24 hours' AND created_at < now() - interval '2 minutes')
					SELECT k($1) >= (SELECT id FROM w ORDER BY id LIMIT 1) AND k($1) <= (SELECT id FROM w ORDER BY id DESC LIMIT 1)`, i).Scan(&in)
				if err != nil {
					t.Fatal(err)
				}
				if in {
					windowed[OrphanTarget] = append(windowed[OrphanTarget], i)
				}
			}
			sameLines(t, "windowed findings", found(res), want(p, t, windowed))
			if w := count(t, p, "created_at >= now() - interval '24 hours' AND created_at < now() - interval '2 minutes'"); res.RowsChecked != w {
				t.Errorf("windowed run checked %d rows, want %d", res.RowsChecked, w)
			}
		})
	}
}

func TestCleanPairReportsNothing(t *testing.T) {
	for _, keyType := range []string{"bigint", "uuid"} {
		t.Run(keyType, func(t *testing.T) { cleanPair(t, keyType) })
	}
}

func cleanPair(t *testing.T, keyType string) {
	p := newPair(t, keyType)
	for i := 1; i <= 80; i++ {
		p.add(t, i, int64(1+i%4), old, "PUBLISHED", int64(1+i%4))
	}
	p.add(t, 81, 1, recent, "PENDING", 0)
	seedGrace(t, p)
	s := scheduler(t, p.yaml(""), nil)
	for _, full := range []bool{true, false} {
		res, err := s.Run(context.Background(), "search_index", full)
		if err != nil {
			t.Fatal(err)
		}
		if res.TotalGaps() != 0 || len(res.Findings) != 0 {
			t.Errorf("full=%v: clean pair reported %v %v", full, res.Gaps, found(res))
		}
		if full && res.RowsChecked != 81 {
			t.Errorf("full sweep checked %d rows, want 81", res.RowsChecked)
		}
		// Only ranges holding rows not yet decided (the pending row, the
		// rows within grace) are read row by row.
		if full && res.RowsRead > 20 {
			t.Errorf("full sweep of a clean pair read %d rows one by one; checksums should have decided most", res.RowsRead)
		}
	}
}
