package config

import (
	"reflect"
	"slices"
	"strings"
)

// Preset is what an outbox library decides about its table: the table's
// default name, the id and time columns, the states, the attempts column
// and the natural labels. `preset: NAME` on an outbox fills these in; a
// key written beside it wins.
type Preset struct {
	Name    string
	Library string
	// Generations are the library's schema generations, newest first.
	// The newest whose Markers are all columns of the table applies; the
	// last one has no markers and is applied when the file is read, so
	// that the outbox is whole before its table is seen.
	Generations []Generation
}

// Generation is one schema generation of a library's table.
type Generation struct {
	// Name is how check reports it, e.g. "2.x".
	Name string
	// Markers are columns only this generation's table has.
	Markers []string
	// Fill holds the keys the library decides (only the keys listed in
	// presetKeys are read from it).
	Fill Outbox
	// Blind says what the exporter cannot see on this library's table.
	Blind string
}

// presetKeys are the outbox keys a preset may fill in.
var presetKeys = []string{
	"table", "id", "created_at", "labels", "status", "pending", "in_flight", "published", "dead", "unknown",
	"published_at", "dead_at", "lease_until", "claimed_at", "lease_ttl", "attempts", "last_error", "time_zone",
	"attempts_on_insert", "null_status", "epoch_unit",
}

// presets are the libraries served. Each fill is taken from the
// library's own schema and code: see docs/libraries/ for the versions
// tried and what each signal means there.
var presets = []*Preset{
	{
		Name: "spring-modulith", Library: "Spring Modulith event publication registry (JDBC, JPA)",
		Generations: []Generation{
			{
				Name: "2.x", Markers: []string{"status", "completion_attempts"},
				Fill: Outbox{
					Table: "event_publication", ID: "id", CreatedAt: "publication_date",
					Labels: []Label{{Name: "listener", Column: "listener_id"}},
					Status: "status", Pending: []string{"PUBLISHED", "RESUBMITTED"}, InFlight: []string{"PROCESSING"},
					Published: []string{"COMPLETED"}, Dead: []string{"FAILED"},
					PublishedAt: "completion_date", Attempts: "completion_attempts",
					// 2.x writes 1 attempt when it inserts a row; a row
					// written by 1.x before the upgrade has no status and
					// waits like a new one.
					AttemptsOnInsert: 1, NullStatus: "pending",
				},
				Blind: "the listener's error text is not stored",
			},
			{
				Name: "1.x",
				Fill: Outbox{
					Table: "event_publication", ID: "id", CreatedAt: "publication_date",
					Labels:      []Label{{Name: "listener", Column: "listener_id"}},
					PublishedAt: "completion_date",
				},
				Blind: "no attempts, no failed state: a publication that keeps failing stays pending",
			},
		},
	},
	{
		Name: "namastack", Library: "namastack outbox (JDBC, JPA)",
		Generations: []Generation{{
			Name: "1.x",
			Fill: Outbox{
				Table: "outbox_record", ID: "id", CreatedAt: "created_at",
				Labels: []Label{{Name: "handler", Column: "handler_id"}},
				Status: "status", Pending: []string{"NEW"}, Published: []string{"COMPLETED"}, Dead: []string{"FAILED"},
				PublishedAt: "completed_at", Attempts: "failure_count", LastError: "failure_reason",
			},
			Blind: "no claim column: a record being handled reads as pending",
		}},
	},
	{
		Name: "eventuate-tram", Library: "Eventuate Tram (transactional messaging, CDC reader)",
		Generations: []Generation{{
			Name: "0.x",
			Fill: Outbox{
				Table: "message", ID: "id", CreatedAt: "creation_time", EpochUnit: "ms",
				Labels: []Label{{Name: "destination", Column: "destination"}},
				Status: "published", Pending: []string{"0"}, Published: []string{"1"},
			},
			Blind: "no publish time: no publish latency and no published count; no failed state; the CDC reader's own position (cdc_monitoring, offset_store) is not read",
		}},
	},
	{
		// watermill-sql never deletes a message: each consumer group's
		// acked offset (offsets_table) says which it has consumed.
		Name: "watermill-sql", Library: "Watermill SQL Pub/Sub (PostgreSQL, default schema and offsets adapters)",
		Generations: []Generation{{
			Name: "v4",
			Fill: Outbox{
				ID: "offset", CreatedAt: "created_at",
				Labels: []Label{{Name: OffsetsGroupColumn, Column: OffsetsGroupColumn}},
			},
			Blind: "when a group consumed a message is not stored: no publish latency and no published count; a group appears once it has a message waiting",
		}},
	},
	{
		Name: "masstransit", Library: "MassTransit transactional outbox (Entity Framework Core, PostgreSQL)",
		Generations: []Generation{{
			Name: "EF Core",
			Fill: Outbox{
				Table: "OutboxMessage", ID: "SequenceNumber", CreatedAt: "SentTime", TimeZone: "UTC",
			},
			Blind: "delivered messages are deleted: no publish latency, no published count, no dead rows",
		}},
	},
	{
		Name: "debezium-outbox", Library: "Debezium outbox event router (its default table)",
		Generations: []Generation{{
			Name: "3.x",
			// The router's table has no time column: CreatedAt stays
			// empty unless written beside the preset.
			Fill: Outbox{
				Table: "outbox", ID: "id",
				Labels: []Label{{Name: "aggregatetype", Column: "aggregatetype"}, {Name: "type", Column: "type"}},
			},
			Blind: "no time column: only the rows present are counted (0 while the application deletes each row after writing it, as the router expects); with a created_at column written beside the preset and a cdc entry linking the slot, the rows written after the slot's confirmed position are the pending ones, with their age",
		}},
	},
	{
		Name: "nservicebus", Library: "NServiceBus SQL persistence outbox (PostgreSQL)",
		Generations: []Generation{{
			Name: "SQL persistence",
			// OutboxData keeps no creation time: CreatedAt stays empty.
			// DispatchedAt is written from UTC into a timestamp column.
			Fill: Outbox{
				Table: "OutboxData", ID: "MessageId",
				Status: "Dispatched", Pending: []string{"false"}, Published: []string{"true"},
				PublishedAt: "DispatchedAt", TimeZone: "UTC",
			},
			Blind: "no creation time: no age of the oldest pending message, no past-deadline count, no publish latency (only counts); no failed state; no destination column to label by",
		}},
	},
}

// PresetNames are the served presets' names, sorted.
func PresetNames() []string {
	out := make([]string, len(presets))
	for i, p := range presets {
		out[i] = p.Name
	}
	slices.Sort(out)
	return out
}

// LookupPreset returns the served preset called name.
func LookupPreset(name string) (*Preset, bool) {
	for _, p := range presets {
		if p.Name == name {
			return p, true
		}
	}
	return nil, false
}

// Presets returns every served preset.
func Presets() []*Preset { return slices.Clone(presets) }

// Base is the generation applied when the file is read: the oldest.
func (p *Preset) Base() *Generation { return &p.Generations[len(p.Generations)-1] }

// Match is the newest generation whose markers are all columns of the
// table, as has reports them.
func (p *Preset) Match(has func(col string) bool) *Generation {
	for i := range p.Generations {
		g := &p.Generations[i]
		if !slices.ContainsFunc(g.Markers, func(c string) bool { return !has(c) }) {
			return g
		}
	}
	return p.Base()
}

// Columns are the columns generation g reads.
func (g *Generation) Columns() []string {
	f := &g.Fill
	var out []string
	for _, c := range []string{f.ID, f.CreatedAt, f.Status, f.PublishedAt, f.DeadAt, f.LeaseUntil, f.ClaimedAt, f.Attempts, f.LastError} {
		if c != "" {
			out = append(out, c)
		}
	}
	for _, l := range f.Labels {
		out = append(out, l.Column)
	}
	return out
}

// ClosestPreset is the preset generation whose columns a table lacks the
// fewest of, as has reports the table's columns, and those it lacks.
func ClosestPreset(has func(string) bool) (*Preset, *Generation, []string) {
	var bp *Preset
	var bg *Generation
	var bm []string
	for _, p := range presets {
		for i := range p.Generations {
			g := &p.Generations[i]
			var m []string
			for _, c := range g.Columns() {
				if !has(c) && !slices.Contains(m, c) {
					m = append(m, c)
				}
			}
			if bp == nil || len(m) < len(bm) {
				bp, bg, bm = p, g, m
			}
		}
	}
	return bp, bg, bm
}

// presetUse is an outbox's preset and the keys written beside it.
type presetUse struct {
	p       *Preset
	written map[string]bool
	gen     *Generation
}

// fill copies the keys of g the file left out into o.
func (u *presetUse) fill(o *Outbox, g *Generation) {
	ov, fv := reflect.ValueOf(o).Elem(), reflect.ValueOf(&g.Fill).Elem()
	for i := 0; i < ov.NumField(); i++ {
		key := strings.Split(ov.Type().Field(i).Tag.Get("yaml"), ",")[0]
		if !slices.Contains(presetKeys, key) || u.written[key] || fv.Field(i).IsZero() {
			continue
		}
		ov.Field(i).Set(fv.Field(i))
	}
	u.gen = g
}

// applyPresets fills each outbox with a known preset from its base
// generation; an unknown one is left for validate to name.
func (c *Config) applyPresets() {
	for name, o := range c.Outboxes {
		p, ok := LookupPreset(o.Preset)
		if !ok {
			continue
		}
		prefix := "outboxes." + name + "."
		u := &presetUse{p: p, written: map[string]bool{}}
		for _, k := range presetKeys {
			u.written[k] = c.Line(prefix+k) > 0
		}
		o.preset = u
		u.fill(o, p.Base())
		o.fillOffsetsTable()
	}
}

// outboxPreset checks the preset's name.
func (v *validator) outboxPreset(p string, o *Outbox) {
	if o.Preset == "" || o.preset != nil {
		return
	}
	v.fail(p+".preset", "is not a known preset; known: %s", strings.Join(PresetNames(), ", "))
}

// ForColumns is the outbox as its table's columns decide: with a preset
// of several schema generations, the newest generation whose marker
// columns the table has fills the keys the file left out. gen names the
// generation matched ("" without a preset); o itself is never changed.
func (o *Outbox) ForColumns(has func(col string) bool) (out *Outbox, gen *Generation) {
	if o.preset == nil {
		return o, nil
	}
	g := o.preset.p.Match(has)
	if g == o.preset.gen {
		return o, g
	}
	c := *o
	u := *o.preset
	c.preset = &u
	u.fill(&c, g)
	return &c, g
}

// PresetUsed is the preset the outbox names, nil without one.
func (o *Outbox) PresetUsed() *Preset {
	if o.preset == nil {
		return nil
	}
	return o.preset.p
}

// Generation is the schema generation the outbox's keys were filled
// from, nil without a preset.
func (o *Outbox) Generation() *Generation {
	if o.preset == nil {
		return nil
	}
	return o.preset.gen
}
