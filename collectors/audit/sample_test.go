package audit

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

func TestSamplerShare(t *testing.T) {
	for _, share := range []float64{0.01, 0.1, 0.5} {
		s := NewSampler(share)
		n, hit := 200000, 0
		for i := 0; i < n; i++ {
			h, _ := Digest([]byte(fmt.Sprint("evt-", i)))
			if s.Sampled(h) {
				hit++
			}
		}
		got := float64(hit) / float64(n)
		if math.Abs(got-share) > 4*math.Sqrt(share*(1-share)/float64(n)) {
			t.Errorf("sample %v picked %v of ids", share, got)
		}
	}
	if s := NewSampler(1); !s.All() || s.SQL("x") != "" || !s.Sampled(math.MaxUint32) {
		t.Error("sample 1 must pick every id with no SQL predicate")
	}
}

// TestSamplerSQLMatchesGo proves PostgreSQL's predicate picks exactly the
// ids the Go side picks.
func TestSamplerSQLMatchesGo(t *testing.T) {
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := NewSampler(0.1)
	q := fmt.Sprintf(`SELECT id FROM (SELECT 'evt-' || g || CASE WHEN g %% 3 = 0 THEN '-ü' ELSE '' END AS id FROM generate_series(1, 20000) g) t WHERE %s`, s.SQL("id"))
	rows, err := db.Admin.Query(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	fromSQL := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		fromSQL[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	fromGo := 0
	for g := 1; g <= 20000; g++ {
		id := fmt.Sprint("evt-", g)
		if g%3 == 0 {
			id += "-ü"
		}
		h, _ := Digest([]byte(id))
		if s.Sampled(h) {
			fromGo++
			if !fromSQL[id] {
				t.Errorf("%s sampled in Go, not in SQL", id)
			}
		}
	}
	if fromGo != len(fromSQL) {
		t.Errorf("Go sampled %d ids, SQL %d", fromGo, len(fromSQL))
	}
	if fromGo < 1500 || fromGo > 2500 {
		t.Errorf("sampled %d of 20000 at 0.1", fromGo)
	}
}
