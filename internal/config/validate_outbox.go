package config

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// timeZoneRe is the shape of an IANA zone name such as "UTC" or
// "Europe/Berlin"; it keeps the value safe to inline as an SQL literal.
// Bare offsets ("+02:00") are refused: PostgreSQL reads them with the
// POSIX sign (positive west of Greenwich), the opposite of ISO 8601.
var timeZoneRe = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_+/-]{0,63}$`)

// outboxTimeZone checks time_zone: a zone both Go and PostgreSQL know by
// that name, so that a typo is an error here rather than a scrape error.
func (v *validator) outboxTimeZone(p string, o *Outbox) {
	if o.TimeZone == "" {
		return
	}
	if !timeZoneRe.MatchString(o.TimeZone) {
		v.fail(p+".time_zone", "%q is not a time zone name (e.g. UTC, Europe/Berlin)", o.TimeZone)
		return
	}
	if _, err := time.LoadLocation(o.TimeZone); err != nil {
		v.fail(p+".time_zone", "%q is not a known time zone (e.g. UTC, Europe/Berlin): %v", o.TimeZone, err)
	}
}

// outboxLabels checks the label columns' names.
func (v *validator) outboxLabels(p string, o *Outbox) {
	for _, l := range o.Labels {
		lp := p + ".labels." + l.Name
		if !labelRe.MatchString(l.Name) || strings.HasPrefix(l.Name, "__") {
			v.fail(lp, "%q is not a valid Prometheus label name", l.Name)
		} else if reservedLabels[l.Name] {
			v.fail(lp, "label %q is reserved by the exporter", l.Name)
		}
		if v.required(lp, l.Column) {
			v.column(lp, l.Column)
		}
	}
}

// outboxStatuses checks the status values: each listed once, pending and
// published given with a status column, none without one.
func (v *validator) outboxStatuses(p string, o *Outbox) {
	if o.Status != "" {
		if len(o.Pending) == 0 {
			v.fail(p+".pending", "is required with status: the status values of rows not yet claimed")
		}
		if len(o.Published) == 0 {
			// With a status column the status decides; published_at alone
			// would leave published rows in no state.
			msg := "is required with status: the status values of published rows"
			if o.PublishedAt != "" {
				msg += " (with a status column the status decides whether a row is published; published_at only times it)"
			}
			v.fail(p+".published", "%s", msg)
		}
		seen := map[string]string{}
		for _, set := range []struct {
			key  string
			vals []string
		}{{"pending", o.Pending}, {"in_flight", o.InFlight}, {"published", o.Published}, {"dead", o.Dead}, {"unknown", o.Unknown}} {
			for i, s := range set.vals {
				sp := fmt.Sprintf("%s.%s[%d]", p, set.key, i)
				if s == "" {
					v.fail(sp, "status value is empty")
				}
				if other, dup := seen[s]; dup && set.key != "unknown" {
					v.fail(sp, "status %q is also listed under %s", s, other)
				}
				if set.key != "unknown" {
					seen[s] = set.key
				}
			}
		}
		for i, s := range o.Unknown {
			if k := seen[s]; k != "in_flight" && k != "pending" && k != "" {
				v.fail(fmt.Sprintf("%s.unknown[%d]", p, i), "status %q is listed under %s; unknown results are unpublished rows", s, k)
			}
		}
	} else {
		for k, vals := range map[string][]string{"pending": o.Pending, "in_flight": o.InFlight, "published": o.Published, "dead": o.Dead, "unknown": o.Unknown} {
			if len(vals) > 0 {
				v.fail(p+"."+k, "status values need a status column")
			}
		}
	}
}
