package discover

import (
	"slices"
	"strings"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// Found is one table recognised as an outbox.
type Found struct {
	Table Table
	// Preset and Gen are the library's preset and schema generation the
	// table matched; nil for a table of a generic outbox shape.
	Preset *config.Preset
	Gen    *config.Generation
	// Keys are the outbox keys to write, in order, as "key: value" lines
	// (labels as a flow mapping): with a preset only those it cannot
	// know, such as a table under another name.
	Keys []string
	// Notes say what was guessed or cannot be seen.
	Notes []string
}

// Miss is a table named as a library's whose columns lack some that every
// generation of its preset reads: the closest generation and what it lacks.
type Miss struct {
	Table   Table
	Preset  *config.Preset
	Gen     *config.Generation
	Missing []string
}

// Match sorts the tables into those recognised as outboxes and those named
// as a library's table that lack columns (and have no outbox shape of
// their own). A table matches a preset's
// generation when it has every column the generation reads, its creation
// time is a timestamp, and its name holds the library's table name.
func Match(tables []Table) ([]Found, []Miss) {
	var found []Found
	var misses []Miss
	all := byName(tables)
	for _, t := range tables {
		if isTopicOffsets(t) {
			continue
		}
		if f, ok := matchTopic(t, all); ok {
			found = append(found, f)
			continue
		}
		if f, ok := matchPreset(t); ok {
			found = append(found, f)
			continue
		}
		if f, ok := Generic(t); ok {
			found = append(found, f)
			continue
		}
		if m, ok := closestMiss(t); ok {
			misses = append(misses, m)
		}
	}
	return found, misses
}

// namedAs reports whether t's name holds the preset's table name; a
// preset whose table is named per topic (watermill-sql) names none.
func namedAs(t Table, p *config.Preset) bool {
	if p.Base().Fill.Table == "" {
		return false
	}
	return strings.Contains(strings.ToLower(t.Name), strings.ToLower(p.Base().Fill.Table))
}

func matchPreset(t Table) (Found, bool) {
	for _, p := range config.Presets() {
		if !namedAs(t, p) {
			continue
		}
		g := p.Match(func(c string) bool { _, ok := t.Cols[c]; return ok })
		if c := t.Cols[g.Fill.CreatedAt]; len(missing(t, g)) > 0 || g.Fill.CreatedAt != "" && !c.IsTimestamp() && !(g.Fill.EpochUnit != "" && c.IsInteger()) {
			continue
		}
		f := Found{Table: t, Preset: p, Gen: g}
		if t.Name != g.Fill.Table || t.Schema != "public" {
			f.Keys = append(f.Keys, "table: "+t.QualifiedName())
		}
		f.Notes = append(f.Notes, "cannot see: "+g.Blind)
		return f, true
	}
	return Found{}, false
}

// missing are the columns generation g reads that t lacks.
func missing(t Table, g *config.Generation) []string {
	var out []string
	for _, c := range g.Columns() {
		if _, ok := t.Cols[c]; !ok && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// closestMiss is, for a table named as a library's that matches none of
// its generations, the generation it lacks the fewest columns of.
func closestMiss(t Table) (Miss, bool) {
	var best Miss
	for _, p := range config.Presets() {
		if !namedAs(t, p) {
			continue
		}
		for i := range p.Generations {
			g := &p.Generations[i]
			m := missing(t, g)
			if len(m) == 0 {
				m = []string{g.Fill.CreatedAt + " (as a timestamp)"}
			}
			if best.Preset == nil || len(m) < len(best.Missing) {
				best = Miss{Table: t, Preset: p, Gen: g, Missing: m}
			}
		}
	}
	return best, best.Preset != nil
}
