package reconcile

import (
	"context"
	"strings"
	"testing"
)

// TestOutboxStyles runs one data set under each way an outbox can store
// state, and without an outbox: what counts as published, and so what is a
// target gap, follows the outbox configuration.
func TestOutboxStyles(t *testing.T) {
	p := newPair(t, "bigint")
	p.addInSync(t, 1, 20)
	p.add(t, 21, 1, old, "PUBLISHED", 0) // published (status and published_at), not in target
	p.add(t, 22, 1, old, "PENDING", 0)   // unpublished, row present, not in target
	p.add(t, 23, 1, old, "", 0)          // no outbox row, not in target
	p.add(t, 24, 2, old, "", 1)          // no outbox row, target behind
	// A delete-on-publish relay would have deleted the published rows.
	p.a.Exec(t, `CREATE TABLE outbox_dop AS SELECT * FROM outbox WHERE status <> 'PUBLISHED'`)

	// The same target, kept in the authority's database.
	p.a.Exec(t, `CREATE TABLE search_index (message_id bigint PRIMARY KEY, version bigint NOT NULL)`)
	p.a.Exec(t, `INSERT INTO search_index SELECT k(g), 1 FROM generate_series(1, 20) g UNION ALL SELECT k(24), 1`)

	base := p.yaml("")
	timestamps := strings.Replace(base, `    status: status
    pending: [PENDING]
    published: [PUBLISHED]
    dead: [ABANDONED]
    published_at: published_at
`, `    published_at: published_at
`, 1)
	deleteOnPublish := strings.Replace(strings.Replace(timestamps, `    published_at: published_at
`, `    published_at: ""
`, 1), "table: public.outbox\n", "table: public.outbox_dop\n", 1)
	noOutbox := strings.Replace(base, "    outbox: {name: messages, key: message_id, version: message_version}\n", "", 1)
	noTarget := strings.Replace(base, "    target: {database: search, table: public.search_index, key: message_id, version: version}\n", "", 1)
	sameDB := strings.Replace(base, "target: {database: search,", "target: {database: main,", 1)
	cases := []struct {
		name, yaml string
		want       map[Kind][]int
	}{
		{"status", base, map[Kind][]int{MissingTarget: {21}, MissingOutbox: {23, 24}}},
		{"published_at", timestamps, map[Kind][]int{MissingTarget: {21}, MissingOutbox: {23, 24}}},
		// Absent rows are published rows: every row but the pending one
		// should be in the target, and missing_outbox cannot be told.
		{"delete on publish", deleteOnPublish, map[Kind][]int{MissingTarget: {21, 23}, StaleTarget: {24}}},
		{"no outbox", noOutbox, map[Kind][]int{MissingTarget: {21, 22, 23}, StaleTarget: {24}}},
		{"no target", noTarget, map[Kind][]int{MissingOutbox: {23, 24}}},
		{"target in the authority's database", sameDB, map[Kind][]int{MissingTarget: {21}, MissingOutbox: {23, 24}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.yaml == base && c.name != "status" {
				t.Fatal("the config edit did not apply")
			}
			s := scheduler(t, c.yaml, nil)
			res, err := s.Run(context.Background(), "search_index", true)
			if err != nil {
				t.Fatal(err)
			}
			sameLines(t, c.name, found(res), want(p, t, c.want))
		})
	}
}

// TestFindingsCap keeps max_findings findings of a kind and the true count.
func TestFindingsCap(t *testing.T) {
	p := newPair(t, "bigint")
	for i := 1; i <= 10; i++ {
		p.add(t, i, 1, old, "PUBLISHED", 0)
	}
	p.add(t, 11, 2, old, "PUBLISHED", 1)
	s := scheduler(t, strings.Replace(p.yaml(""), "max_findings: 100", "max_findings: 3", 1), nil)
	res, err := s.Run(context.Background(), "search_index", true)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[Kind]int{}
	for _, f := range res.Findings {
		kinds[f.Kind]++
	}
	if res.Gaps[MissingTarget] != 10 || kinds[MissingTarget] != 3 || kinds[StaleTarget] != 1 || !res.Truncated {
		t.Errorf("gaps %v, findings by kind %v, truncated %v; want 10 missing_target with 3 kept, 1 stale_target, truncated", res.Gaps, kinds, res.Truncated)
	}
}
