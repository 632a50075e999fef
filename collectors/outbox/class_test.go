package outbox

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// TestClassExprAgreesWithClassify: the class the server computes with
// ClassExpr is the class of the state Classify decides, for every status
// and timestamp combination, with text and integer statuses, timestamps
// and a delete-on-publish table.
func TestClassExprAgreesWithClassify(t *testing.T) {
	_, pool := setup(t, `CREATE TABLE t_text (status text, published_at timestamptz, dead_at timestamptz);
		CREATE TABLE t_int (status int, published_at timestamptz, dead_at timestamptz);
		INSERT INTO t_text SELECT s, p, d FROM unnest(ARRAY['PENDING','CLAIMED','PUBLISHED','ABANDONED','MAYBE','WEIRD']) s,
			unnest(ARRAY[NULL, now()]::timestamptz[]) p, unnest(ARRAY[NULL, now()]::timestamptz[]) d;
		INSERT INTO t_int SELECT s, p, d FROM unnest(ARRAY[0, 1, 2, 3, 4, 9]) s,
			unnest(ARRAY[NULL, now()]::timestamptz[]) p, unnest(ARRAY[NULL, now()]::timestamptz[]) d;`)
	vals := ClassValues{10, 11, 12, 13}
	cases := []struct {
		name, table string
		intStatus   bool
		o           config.Outbox
	}{
		{"text status", "t_text", false, config.Outbox{Status: "status", Pending: []string{"PENDING"}, InFlight: []string{"CLAIMED"},
			Published: []string{"PUBLISHED"}, Dead: []string{"ABANDONED"}, Unknown: []string{"MAYBE"}, PublishedAt: "published_at"}},
		{"integer status", "t_int", true, config.Outbox{Status: "status", Pending: []string{"0"}, InFlight: []string{"01"},
			Published: []string{"2"}, Dead: []string{"3"}}},
		{"status without dead", "t_text", false, config.Outbox{Status: "status", Pending: []string{"PENDING"}, Published: []string{"PUBLISHED"}}},
		{"timestamps", "t_text", false, config.Outbox{PublishedAt: "published_at", DeadAt: "dead_at"}},
		{"published_at only", "t_text", false, config.Outbox{PublishedAt: "published_at"}},
		{"delete on publish", "t_text", false, config.Outbox{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rules, err := NewRules(&c.o, c.intStatus)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rows, err := pool.Query(ctx, fmt.Sprintf(`SELECT coalesce(t.status::text, ''), t.published_at IS NOT NULL, t.dead_at IS NOT NULL, %s FROM %s t`,
				ClassExpr(&c.o, "t.", vals), c.table))
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			n, seen := 0, map[Class]bool{}
			for rows.Next() {
				var f Facts
				var got int
				if err := rows.Scan(&f.Status, &f.PublishedSet, &f.DeadSet, &got); err != nil {
					t.Fatal(err)
				}
				want := ClassOf(rules.Classify(f))
				if got != vals[want] {
					t.Errorf("%+v: SQL class %d, Classify says %v (%d)", f, got, rules.Classify(f), vals[want])
				}
				seen[want] = true
				n++
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if n != 24 {
				t.Fatalf("%d rows compared, want 24", n)
			}
			t.Logf("classes seen: %v", seen)
		})
	}
}
