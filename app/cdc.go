package app

import (
	"context"
	"maps"
	"slices"

	"github.com/outbox-exporter/outbox_exporter/collectors/cdc"
	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// cdcs builds the change data capture collectors, one per database. One
// whose entries and database did not change is kept across a reload with
// its WAL history, so that the lag seconds stay exact instead of reading
// as a marked lower bound until a new history spans them.
func (b *builder) cdcs(context.Context) error {
	cfg := b.a.Config
	byDB := cdc.ByDatabase(cfg.CDC)
	for _, db := range slices.Sorted(maps.Keys(byDB)) {
		key := "cdc/" + db
		if b.keep(key, cdcDeps(b.pcfg, db), cdcDeps(cfg, db)) {
			b.a.cdc[db] = b.prev.cdc[db]
		} else {
			b.a.cdc[db] = cdc.NewCollector(db, byDB[db], b.a.Pools[db], b.a.logger)
			// Nothing to close; owned so that keep can hand it over.
			b.a.own(key, func() {})
		}
		b.cs = append(b.cs, b.a.cdc[db])
	}
	return nil
}

// cdcDeps is what the cdc collector of database db reads: its entries
// and the database.
func cdcDeps(cfg *config.Config, db string) []any {
	return []any{cdc.ByDatabase(cfg.CDC)[db], cfg.Databases[db]}
}

// publishedBySlot links the collector of outbox name to the slot that
// publishes it, if the cdc section names one: its pending rows are then
// the ones committed after the time the slot has confirmed, as the slot's
// collector last read it.
func (b *builder) publishedBySlot(name string, c *outbox.Collector) {
	entry, e, ok := b.a.Config.CDCFor(name)
	if !ok {
		return
	}
	cc := b.a.cdc[e.Database]
	c.PublishedBySlot(func(ctx context.Context) (outbox.Confirmed, error) {
		st, err := cc.State(ctx, entry)
		if err != nil {
			return outbox.Confirmed{}, err
		}
		return outbox.Confirmed{At: st.ConfirmedAt, LowerBound: st.LowerBound, Slot: e.Slot}, nil
	}, outbox.DefaultBehindLookback)
}
