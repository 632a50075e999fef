package outbox

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// ClockTolerance is how far the newest row's time may lie ahead of the
// server's clock (writers' clocks drift) before check calls it a misread.
const ClockTolerance = time.Minute

// clockItems compares the newest value of the creation and publish time
// columns with the server's clock, as the queries read them. A value in
// the future, or a `timestamp without time zone` column whose newest
// value is whole hours off the clock in the session's TimeZone but on it
// in UTC, means the times are written in another zone than they are read
// in: every age and latency would be off by those hours, so check fails
// naming the column. It reads one aggregate per column, never a row.
func clockItems(ctx context.Context, tx pgx.Tx, r *CheckReport, s *outboxsql.Spec) error {
	o := s.O
	for _, c := range []struct{ key, col string }{{"created_at", o.CreatedAt}, {"published_at", o.PublishedAt}} {
		if c.col == "" {
			continue
		}
		utc := "NULL::float8"
		if s.Zoned(c.col) {
			utc = "extract(epoch from max(t." + pg.Ident(c.col) + ") - (now() AT TIME ZONE 'UTC'))::float8"
		}
		q := fmt.Sprintf("SELECT extract(epoch from max(%s) - now())::float8, %s FROM %s t",
			s.AsTimestamptz(c.col, "t."+pg.Ident(c.col)), utc, s.Table())
		var ahead, aheadUTC *float64
		if err := tx.QueryRow(ctx, q).Scan(&ahead, &aheadUTC); err != nil {
			return fmt.Errorf("compare %s with the server's clock: %w", c.col, err)
		}
		what := fmt.Sprintf("clock %s = %s", c.key, c.col)
		if ahead == nil {
			continue // an empty table or no value yet
		}
		if msg := clockProblem(*ahead, aheadUTC, s.Zoned(c.col) && o.TimeZone == ""); msg != "" {
			r.add(false, what, "%s", msg)
			continue
		}
		r.add(true, what, "the newest value is not ahead of the server's clock")
	}
	return nil
}

// clockProblem judges the newest value of a column, ahead seconds ahead of
// the server's clock as the queries read it; aheadUTC is the same read as
// UTC, for a zoned column read in the session's TimeZone (nil otherwise).
// "" when nothing looks misread.
func clockProblem(ahead float64, aheadUTC *float64, sessionZone bool) string {
	tol := ClockTolerance.Seconds()
	hour := time.Hour.Seconds()
	if sessionZone && aheadUTC != nil && *aheadUTC <= tol && *aheadUTC > -hour && ahead <= -(hour-tol) {
		return fmt.Sprintf("the newest value is %s old read in the session's TimeZone but %s old read as UTC: "+
			"the writers store UTC (set time_zone: UTC), unless no row was written for that long",
			time.Duration(math.Round(-ahead))*time.Second, time.Duration(math.Round(math.Max(0, -*aheadUTC)))*time.Second)
	}
	if ahead > tol {
		h := math.Round(ahead / 3600)
		whole := ""
		if h >= 1 && math.Abs(ahead-h*3600) <= tol {
			whole = fmt.Sprintf(" (%.0f whole hours: written in another time zone than it is read in? see time_zone)", h)
		}
		return fmt.Sprintf("the newest value lies %s in the future%s", time.Duration(math.Round(ahead))*time.Second, whole)
	}
	return ""
}
