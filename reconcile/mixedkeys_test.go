package reconcile

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// TestMixedKeysAndVersions: keys of a uuid and a text side compare as
// text (a target key no uuid equals is an orphan, never a failed run);
// versions span the whole bigint range and NULL is a value (compared,
// reported, never a crash); a key the target holds twice is
// duplicate_target.
func TestMixedKeysAndVersions(t *testing.T) {
	for _, c := range []struct{ aType, tType string }{{"uuid", "text"}, {"text", "uuid"}, {"bigint", "bigint"}, {"uuid", "uuid"}} {
		t.Run(c.aType+"/"+c.tType, func(t *testing.T) {
			a, b := pgtest.New(t), pgtest.New(t)
			a.Exec(t, fmt.Sprintf(`CREATE TABLE messages (id %s PRIMARY KEY, version bigint, created_at timestamptz NOT NULL)`, c.aType))
			a.Exec(t, fmt.Sprintf(`CREATE TABLE outbox (event_id bigserial PRIMARY KEY, message_id %s NOT NULL, message_version bigint,
				created_at timestamptz NOT NULL, status text NOT NULL, published_at timestamptz)`, c.aType))
			b.Exec(t, fmt.Sprintf(`CREATE TABLE search_index (message_id %s NOT NULL, version bigint)`, c.tType))
			key := func(i int) string {
				if c.aType == "bigint" {
					return fmt.Sprint(int64(i) << 33)
				}
				return fmt.Sprintf("%08x-0000-4000-a000-%012x", i, i)
			}
			versions := map[int]*int64{1: i64(1), 2: i64(math.MaxInt64), 3: i64(1 << 60), 4: nil, 5: nil, 6: i64(math.MinInt64 + 1), 7: i64(7), 8: i64(1 << 59)}
			targets := map[int][]*int64{1: {i64(1)}, 2: {i64(math.MaxInt64)}, 3: {i64(1<<60 - 1)}, 4: {nil}, 5: {i64(1)}, 6: {nil}, 7: {i64(7), i64(7)}}
			for i := 1; i <= 8; i++ {
				a.Exec(t, `INSERT INTO messages VALUES ($1, $2, now() - interval '1 day')`, key(i), versions[i])
				a.Exec(t, `INSERT INTO outbox (message_id, message_version, created_at, status, published_at) VALUES ($1, $2, now() - interval '1 day', 'PUBLISHED', now() - interval '1 day')`, key(i), versions[i])
				for _, v := range targets[i] {
					b.Exec(t, `INSERT INTO search_index VALUES ($1, $2)`, key(i), v)
				}
			}
			var want []string
			if c.tType == "text" {
				// Target keys no uuid key equals: an orphan each.
				b.Exec(t, `INSERT INTO search_index VALUES ('not-a-uuid', 1), (upper($1), 1)`, key(1))
				want = append(want, "orphan_target not-a-uuid", "orphan_target "+strings.ToUpper(key(1)))
			}
			if c.aType == "text" {
				// An authority key no uuid equals: missing from a uuid target.
				a.Exec(t, `INSERT INTO messages VALUES ('key-9', 9, now() - interval '1 day')`)
				a.Exec(t, `INSERT INTO outbox (message_id, message_version, created_at, status, published_at) VALUES ('key-9', 9, now() - interval '1 day', 'PUBLISHED', now() - interval '1 day')`)
				want = append(want, "missing_target key-9")
			}
			want = append(want, "stale_target "+key(3), "orphan_target "+key(5), "stale_target "+key(6), "duplicate_target "+key(7), "missing_target "+key(8))
			yml := fmt.Sprintf(`
databases:
  main: {dsn: %q}
  search: {dsn: %q}
outboxes:
  messages: {database: main, table: public.outbox, id: event_id, created_at: created_at, status: status, pending: [PENDING], published: [PUBLISHED], published_at: published_at, deadline: 5m}
reconcile:
  search_index:
    schedule: "@every 1h"
    authority: {database: main, table: public.messages, key: id, version: version, created_at: created_at}
    outbox: {name: messages, key: message_id, version: message_version}
    target: {database: search, table: public.search_index, key: message_id, version: version}
`, a.URL, b.URL)
			for _, opts := range [][]Option{nil, {StreamRuns()}} {
				s := scheduler(t, yml, nil, opts...)
				res, err := s.Run(context.Background(), "search_index", true)
				if err != nil {
					t.Fatal(err)
				}
				got := found(res)
				sameLines(t, fmt.Sprintf("stream %v", opts != nil), got, sortedCopy(want))
				for _, f := range res.Findings {
					if f.Key == key(6) && (!f.TargetVersionNull || f.AuthorityVersion == nil || *f.AuthorityVersion != math.MinInt64+1) {
						t.Errorf("stale NULL target version: %+v", f)
					}
					if f.Key == key(5) && (!f.AuthorityVersionNull || f.TargetVersion == nil) {
						t.Errorf("orphan ahead of a NULL version: %+v", f)
					}
					if f.Kind == DuplicateTarget && f.TargetRows != 2 {
						t.Errorf("duplicate: %+v", f)
					}
				}
			}
		})
	}
}

func sortedCopy(xs []string) []string {
	out := append([]string(nil), xs...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}
