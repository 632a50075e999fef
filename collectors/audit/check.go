package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/checktext"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkaclient"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// Check levels.
const (
	CheckOK   = "ok"
	CheckWarn = "WARN"
	CheckFail = "FAIL"
)

// CheckItem is one thing `check` verified for an audit.
type CheckItem struct {
	Level  string `json:"level"`
	What   string `json:"what"`
	Detail string `json:"detail,omitempty"`
}

// CheckReport is what `check` found for one audit. OK is false when an
// item failed; warnings do not fail it.
type CheckReport struct {
	Audit      string      `json:"audit"`
	Items      []CheckItem `json:"items"`
	Statements []string    `json:"statements,omitempty"`
	OK         bool        `json:"ok"`
}

func (r *CheckReport) add(level, what, format string, args ...any) {
	r.Items = append(r.Items, CheckItem{Level: level, What: what, Detail: fmt.Sprintf(format, args...)})
	if level == CheckFail {
		r.OK = false
	}
}

// Report is the report in the form every check prints.
func (r *CheckReport) Report() checktext.Report {
	items := make([]checktext.Item, len(r.Items))
	for i, it := range r.Items {
		items[i] = checktext.Item{What: it.What, OK: it.Level != CheckFail, Warn: it.Level == CheckWarn, Detail: it.Detail}
	}
	return checktext.Report{Heading: "audit " + r.Audit, OK: r.OK, Items: items, Statements: r.Statements}
}

// Text renders the report for a person at a terminal.
func (r *CheckReport) Text() string { return r.Report().String() }

// checkConfig judges what the configuration alone lets the audit see.
func checkConfig(r *CheckReport, a *config.Audit, o *config.Outbox) {
	if a.Grace >= a.Window {
		r.add(CheckFail, "grace", "%v is not shorter than window %v: no row would ever be judged", a.Grace, a.Window)
	}
	switch {
	case o.Style() == config.StyleDeleteOnPublish:
		r.add(CheckWarn, "silent loss", "the outbox deletes rows when they are published, so a row marked published that never reached the broker cannot be seen: the audit reports only lost acknowledgements (unpublished rows already on the topics) and duplicates")
	case o.PublishedAt == "":
		r.add(CheckWarn, "published_at", "without a published_at column the audit chooses published rows by created_at and takes a row as marked when it first sees it published: a backlog row created more than window ago and published now is not judged")
	}
	if o.Style() == config.StyleStatus && len(o.Dead) > 0 && o.DeadAt == "" {
		r.add(CheckOK, "dead rows", "chosen by created_at inside the window (there is no dead_at column)")
	}
}

// auditIndexes are the columns the audit query's branches range over.
func auditIndexes(o *config.Outbox) []string {
	var cols []string
	seen := map[string]bool{}
	for _, b := range branches(o) {
		var c string
		switch {
		case b.class == Published && o.PublishedAt != "":
			c = o.PublishedAt
		case b.class == Dead && o.DeadAt != "":
			c = o.DeadAt
		case b.class == Unpublished && o.Style() == config.StyleStatus:
			c = o.Status
		case b.class == Unpublished:
			continue // published_at IS NULL, or every row
		default:
			c = o.CreatedAt
		}
		if !seen[c] {
			seen[c] = true
			cols = append(cols, c)
		}
	}
	return cols
}

const leadingIndex = `
SELECT EXISTS (
  SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
  WHERE i.indrelid = to_regclass($1) AND i.indisvalid AND a.attname = $2)`

const columnType = `
SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND NOT a.attisdropped`

// plannedSeqScan EXPLAINs the comparison's query with sequential scans
// disabled and reports whether one remains on the outbox table: then no
// index can serve some branch. A partial index whose predicate the branch
// implies serves it as well as a plain one.
func plannedSeqScan(ctx context.Context, tx pgx.Tx, o *config.Outbox) (bool, error) {
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
		return false, fmt.Errorf("explain the audit query: %w", err)
	}
	q := outboxQuery(o, NewSampler(1))
	var args []any
	if strings.Contains(q, "$1") {
		args = append(args, time.Now())
	}
	var plan []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+q, args...).Scan(&plan); err != nil {
		return false, fmt.Errorf("explain the audit query: %w", err)
	}
	var doc []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &doc); err != nil || len(doc) == 0 {
		return false, fmt.Errorf("explain the audit query: unreadable plan: %v", err)
	}
	return doc[0].Plan.seqScan(), nil
}

type planNode struct {
	Type  string     `json:"Node Type"`
	Plans []planNode `json:"Plans"`
}

func (p planNode) seqScan() bool {
	if p.Type == "Seq Scan" {
		return true
	}
	for _, c := range p.Plans {
		if c.seqScan() {
			return true
		}
	}
	return false
}

// Check verifies an audit: what its configuration lets it see, the
// indexes its query ranges over, and that the ids on the topics are ids
// of the table, written the same way: it reads the last
// records of each topic partition, looks each id up in the table, and
// names the likely mismatch when few are found.
func Check(ctx context.Context, pool *pgxpool.Pool, k *config.Kafka, name string, a *config.Audit, o *config.Outbox) (*CheckReport, error) {
	r := &CheckReport{Audit: name, OK: true}
	checkConfig(r, a, o)
	var idType string
	err := pg.ReadOnly(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, columnType, pg.Table(o.Table), o.ID).Scan(&idType); err != nil {
			return fmt.Errorf("type of %s.%s: %w", o.Table, o.ID, err)
		}
		seq, err := plannedSeqScan(ctx, tx, o)
		if err != nil {
			return err
		}
		if !seq {
			r.add(CheckOK, "indexes", "every branch of the comparison's query can use an index")
			return nil
		}
		r.add(CheckFail, "indexes", "the comparison's query reads the whole of %s at every comparison (a sequential scan, even with enable_seqscan off)", o.Table)
		for _, c := range auditIndexes(o) {
			var ok bool
			if err := tx.QueryRow(ctx, leadingIndex, pg.Table(o.Table), c).Scan(&ok); err != nil {
				return fmt.Errorf("indexes of %s: %w", o.Table, err)
			}
			if !ok {
				r.Statements = append(r.Statements, fmt.Sprintf("CREATE INDEX CONCURRENTLY IF NOT EXISTS %s ON %s (%s);",
					pg.Ident("outbox_exporter_audit_"+name+"_"+c), pg.Table(o.Table), pg.Ident(c)))
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check audit %q: %w", name, err)
	}
	ext, err := ParseEventID(a.EventID)
	if err != nil {
		return nil, fmt.Errorf("check audit %q: %w", name, err)
	}
	ids, malformed, err := recentIDsOf(ctx, k, a.Topics, ext)
	if err != nil {
		r.add(CheckFail, "topics", "%v", err)
		return r, nil
	}
	return r, checkIDs(ctx, r, pool, o, idType, ids, malformed)
}

// checkIDs looks the topics' recent ids up in the table.
func checkIDs(ctx context.Context, r *CheckReport, pool *pgxpool.Pool, o *config.Outbox, idType string, ids []string, malformed int) error {
	if len(ids) == 0 {
		level := CheckWarn
		if malformed > 0 {
			level = CheckFail
		}
		r.add(level, "event ids", "none of the last %d records carries an event id where event_id says (the event_id setting?)", malformed)
		return nil
	}
	if o.Style() == config.StyleDeleteOnPublish {
		r.add(CheckOK, "event ids", "%d recent records carry an id; not looked up, the outbox deletes published rows", len(ids))
		return nil
	}
	found := 0
	for _, id := range ids {
		ok, err := rowExists(ctx, pool, o, idType, id)
		if err != nil {
			return fmt.Errorf("check audit %q: %w", r.Audit, err)
		}
		if ok {
			found++
		}
	}
	var table []string
	err := pg.ReadOnly(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, fmt.Sprintf("SELECT %s::text FROM %s ORDER BY %s DESC LIMIT 3", pg.Ident(o.ID), pg.Table(o.Table), pg.Ident(o.CreatedAt)))
		if err != nil {
			return err
		}
		table, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return fmt.Errorf("check audit %q: newest ids of %s: %w", r.Audit, o.Table, err)
	}
	detail := fmt.Sprintf("%d of the last %d ids on the topics are rows of %s", found, len(ids), o.Table)
	switch {
	case len(table) == 0:
		r.add(CheckWarn, "event ids", "%s is empty: cannot compare id formats", o.Table)
	case found*10 < len(ids) && len(ids) >= minRecent:
		r.add(CheckFail, "event ids", "%s: %s", detail, Diagnose(table, ids, false))
	case found*2 < len(ids):
		r.add(CheckWarn, "event ids", "%s (table ids look like %q, topic ids like %q)", detail, table[0], ids[0])
	default:
		r.add(CheckOK, "event ids", "%s", detail)
	}
	return nil
}

// rowExists looks one id up through the id column's own type, so the
// primary key serves it; an id that is not even of that type is not a row.
func rowExists(ctx context.Context, pool *pgxpool.Pool, o *config.Outbox, idType, id string) (bool, error) {
	var ok bool
	q := fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM %s WHERE %s = $1::text::%s)", pg.Table(o.Table), pg.Ident(o.ID), idType)
	err := pg.ReadOnly(ctx, pool, func(tx pgx.Tx) error { return tx.QueryRow(ctx, q, id).Scan(&ok) })
	var pgErr interface{ SQLState() string }
	if errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.SQLState(), "22")) {
		return false, nil // invalid text for the type, out of range
	}
	return ok, err
}

// checkRecords is how many of the last records of each partition check
// reads.
const checkRecords = 20

// recentIDsOf reads the last checkRecords records of every partition of
// topics and returns the ids they carry and how many carry none.
func recentIDsOf(ctx context.Context, k *config.Kafka, topics []string, ext Extractor) (ids []string, malformed int, err error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	adm, err := kafkaclient.New(k)
	if err != nil {
		return nil, 0, err
	}
	defer adm.Close()
	ka := kadm.NewClient(adm)
	starts, err := ka.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, 0, fmt.Errorf("list start offsets of %v: %w", topics, err)
	}
	ends, err := ka.ListCommittedOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, 0, fmt.Errorf("list end offsets of %v: %w", topics, err)
	}
	from := map[string]map[int32]kgo.Offset{}
	want := map[topicPartition]int64{}
	ends.Each(func(e kadm.ListedOffset) {
		s, _ := starts.Lookup(e.Topic, e.Partition)
		if e.Offset <= s.Offset {
			return
		}
		if from[e.Topic] == nil {
			from[e.Topic] = map[int32]kgo.Offset{}
		}
		from[e.Topic][e.Partition] = kgo.NewOffset().At(max(s.Offset, e.Offset-checkRecords))
		want[topicPartition{e.Topic, e.Partition}] = e.Offset
	})
	if len(want) == 0 {
		return nil, 0, nil
	}
	cl, err := kafkaclient.New(k, kgo.ConsumePartitions(from), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return nil, 0, err
	}
	defer cl.Close()
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return ids, malformed, fmt.Errorf("read the last records of %v: %w", topics, ctx.Err())
		}
		fs.EachRecord(func(rec *kgo.Record) {
			tp := topicPartition{rec.Topic, rec.Partition}
			if end, ok := want[tp]; ok && rec.Offset+1 >= end {
				delete(want, tp)
			}
			if rec.Attrs.IsControl() {
				return
			}
			if id, err := ext.ID(rec); err == nil {
				ids = append(ids, string(id))
			} else {
				malformed++
			}
		})
	}
	return ids, malformed, nil
}
