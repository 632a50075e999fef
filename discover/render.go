package discover

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// Database is what discover found in one configured database.
type Database struct {
	// Name is the databases entry the outboxes refer to.
	Name   string
	Found  []Found
	Misses []Miss
}

// DefaultDeadline is written for every outbox found: the delivery promise
// is the team's to set, and the comment beside it says so.
const DefaultDeadline = "5m"

// DSNVariable is the environment variable the configuration written for
// --dsn reads its DSN from: a DSN may hold a password and is never printed.
const DSNVariable = "OUTBOX_DSN"

// Render writes a configuration for the outboxes found, with the indexes
// check will ask for and what each cannot see as comments; the tables named
// as a library's that lack columns are listed at the end. With fromFile
// set the databases are those of that file and no databases section is
// written. The configuration is checked by loading it before it is written.
func Render(dbs []Database, fromFile string) (string, error) {
	names := outboxNames(dbs)
	var b strings.Builder
	b.WriteString("# Written by outbox_exporter discover from the catalog alone (no row was read).\n")
	b.WriteString("# Set each deadline to your delivery promise, create the indexes listed, then run check.\n")
	if fromFile == "" {
		fmt.Fprintf(&b, "databases:\n  %s:\n    dsn: ${%s}  # the DSN given to discover, from the environment\n", dbs[0].Name, DSNVariable)
	} else {
		fmt.Fprintf(&b, "# databases: as in %s\n", fromFile)
	}
	body, err := outboxesYAML(dbs, names)
	if err != nil {
		return "", err
	}
	b.WriteString(body)
	for _, db := range dbs {
		for _, m := range db.Misses {
			fmt.Fprintf(&b, "# %s (database %s) is named as a %s table but lacks %s of its %s schema: not written\n",
				m.Table.QualifiedName(), db.Name, m.Preset.Name, strings.Join(m.Missing, ", "), m.Gen.Name)
		}
	}
	return b.String(), nil
}

// outboxesYAML is the outboxes section, with the indexes each needs.
func outboxesYAML(dbs []Database, names map[*Found]string) (string, error) {
	entries := map[string]string{}
	for _, db := range dbs {
		for i := range db.Found {
			f := &db.Found[i]
			entries[names[f]] = entry(names[f], db.Name, f)
		}
	}
	cfg, err := load(dbs, entries)
	if err != nil {
		return "", fmt.Errorf("the configuration written does not load: %w", err)
	}
	if len(entries) == 0 {
		return "", nil
	}
	var b strings.Builder
	b.WriteString("outboxes:\n")
	for _, db := range dbs {
		for i := range db.Found {
			f := &db.Found[i]
			name := names[f]
			b.WriteString(entries[name])
			ixs, err := indexes(name, cfg.Outboxes[name], f.Table)
			if err != nil {
				return "", err
			}
			if len(ixs) > 0 {
				b.WriteString("    # check asks for these indexes where missing (the primary key may serve the id):\n")
				for _, ix := range ixs {
					b.WriteString("    #   " + ix + "\n")
				}
			}
		}
	}
	return b.String(), nil
}

// entry is one outbox's keys.
func entry(name, db string, f *Found) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %s:\n    database: %s\n", name, db)
	if f.Preset != nil {
		fmt.Fprintf(&b, "    preset: %s  # %s, schema %s\n", f.Preset.Name, f.Preset.Library, f.Gen.Name)
	}
	for _, k := range f.Keys {
		b.WriteString("    " + k + "\n")
	}
	if f.Preset != nil && f.Gen.Fill.CreatedAt == "" {
		b.WriteString("    # no creation time: counts only, no age, so no deadline to set\n")
	} else {
		fmt.Fprintf(&b, "    deadline: %s  # your delivery promise\n", DefaultDeadline)
	}
	for _, n := range f.Notes {
		b.WriteString("    # " + n + "\n")
	}
	return b.String()
}

// load parses the outboxes written, under placeholder databases, as the
// exporter would: what discover writes must load.
func load(dbs []Database, entries map[string]string) (*config.Config, error) {
	var b strings.Builder
	b.WriteString("databases:\n")
	for _, db := range dbs {
		fmt.Fprintf(&b, "  %s:\n    dsn: postgres://discover@127.0.0.1/discover\n", db.Name)
	}
	if len(entries) > 0 {
		b.WriteString("outboxes:\n")
	}
	for _, name := range slices.Sorted(maps.Keys(entries)) {
		b.WriteString(entries[name])
	}
	return config.Parse([]byte(b.String()), func(string) (string, bool) { return "", false })
}

// indexes are the CREATE INDEX statements the outbox's queries want on t.
func indexes(name string, o *config.Outbox, t Table) ([]string, error) {
	if o.OffsetsTable != "" {
		// Each group's range is read by the messages table's primary
		// key; check asks for no index (collectors/outbox, check.go).
		return nil, nil
	}
	o, _ = o.ForColumns(func(c string) bool { _, ok := t.Cols[c]; return ok })
	spec, err := outboxsql.NewSpec(name, o, t.Cols)
	if err != nil {
		return nil, fmt.Errorf("outbox %q: %w", name, err)
	}
	ixs := spec.Indexes()
	for k, ix := range spec.OrderIndexes() {
		ixs[k] = ix
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(ixs)) {
		out = append(out, ixs[k].SQL(o.Table))
	}
	return out, nil
}

var nonName = regexp.MustCompile(`[^a-z0-9_]+`)
var camel = regexp.MustCompile(`([a-z0-9])([A-Z])`)

// outboxNames names each outbox after its table (OutboxMessage:
// outbox_message), with the schema, then the database, added where two
// would share a name.
func outboxNames(dbs []Database) map[*Found]string {
	base := func(f *Found) string {
		return strings.Trim(nonName.ReplaceAllString(strings.ToLower(camel.ReplaceAllString(f.Table.Name, "${1}_${2}")), "_"), "_")
	}
	count := map[string]int{}
	for _, db := range dbs {
		for i := range db.Found {
			count[base(&db.Found[i])]++
		}
	}
	out := map[*Found]string{}
	taken := map[string]bool{}
	for _, db := range dbs {
		for i := range db.Found {
			f := &db.Found[i]
			n := base(f)
			if n == "" || n[0] >= '0' && n[0] <= '9' {
				n = "outbox_" + n
			}
			if count[base(f)] > 1 {
				n = strings.Trim(nonName.ReplaceAllString(strings.ToLower(db.Name+"_"+f.Table.Schema), "_"), "_") + "_" + n
			}
			for taken[n] {
				n += "_"
			}
			taken[n] = true
			out[f] = n
		}
	}
	return out
}
