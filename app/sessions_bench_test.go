package app

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// BenchmarkFleetScrape measures one whole scrape of 500 outboxes over 50
// databases on one server with the default session budget, against one
// outbox on one database and against the same fleet with a budget too
// large to bind (every database keeps its own sessions, as before the
// budget), all on one throwaway server in one run. Each scrape is checked
// against the tables' counts.
//
//	go test ./app -run '^$' -bench BenchmarkFleetScrape -benchtime 20x
func BenchmarkFleetScrape(b *testing.B) {
	f := startFleet(b, 50, 10, 29, 200)
	for _, c := range []struct {
		name     string
		sessions int
		only     string // the one outbox of a one-outbox configuration
	}{
		{"one_outbox_one_database", 0, "d0_t0"},
		{"500_outboxes_50_databases_budget_4", 0, ""},
		{"500_outboxes_50_databases_budget_100", 100, ""},
	} {
		b.Run(c.name, func(b *testing.B) {
			cfg := f.config(b, c.sessions)
			if c.only != "" {
				for name := range cfg.Outboxes {
					if name != c.only {
						delete(cfg.Outboxes, name)
					}
				}
				for name := range cfg.Databases {
					if name != "d0" {
						delete(cfg.Databases, name)
					}
				}
			}
			a, err := Build(context.Background(), cfg, testutil.Quiet())
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			scrape := func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				s := scraped(a.Exporter.Collect(ctx))
				b.StopTimer()
				success, pending := indexScrape(b, s)
				for name := range cfg.Outboxes {
					if success[name] != 1 || int(pending[name]) != f.rows[name] {
						b.Fatalf("outbox %s: success %v, %v pending, the table holds %d", name, success[name], pending[name], f.rows[name])
					}
				}
				b.StartTimer()
			}
			scrape() // the first scrape opens the sessions and reads the catalogs
			b.ResetTimer()
			for range b.N {
				scrape()
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/scrape")
		})
	}
}
