package config

import (
	"fmt"
	"regexp"
	"slices"
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
		v.fail(p+".time_zone", "is not a time zone name (e.g. UTC, Europe/Berlin)")
		return
	}
	if _, err := time.LoadLocation(o.TimeZone); err != nil {
		v.fail(p+".time_zone", "is not a time zone Go knows (e.g. UTC, Europe/Berlin)")
	}
}

// ReservedLabelPrefix is put before a label name the exporter sets itself
// (topic, group, state, ...): a library's natural label column such as
// topic becomes the label event_topic instead of being refused.
const ReservedLabelPrefix = "event_"

// renameReservedLabels renames each label whose name is reserved,
// keeping the name written in Outbox.renamed.
func (c *Config) renameReservedLabels() {
	for _, o := range c.Outboxes {
		for i, l := range o.Labels {
			if reservedLabels[l.Name] {
				if o.renamed == nil {
					o.renamed = map[string]string{}
				}
				o.Labels[i].Name = ReservedLabelPrefix + l.Name
				o.renamed[o.Labels[i].Name] = l.Name
			}
		}
	}
}

// outboxLabels checks the label columns' names.
func (v *validator) outboxLabels(p string, o *Outbox) {
	seen := map[string]bool{}
	for _, l := range o.Labels {
		lp := p + ".labels." + l.Name
		if w, ok := o.renamed[l.Name]; ok {
			lp = p + ".labels." + w
		}
		if seen[l.Name] {
			v.fail(lp, "label %q is given twice (a name the exporter sets itself is renamed with the prefix %s)", l.Name, ReservedLabelPrefix)
		}
		seen[l.Name] = true
		if !labelRe.MatchString(l.Name) || strings.HasPrefix(l.Name, "__") {
			v.fail(lp, "is not a valid Prometheus label name")
		}
		if v.required(lp, l.Column) {
			v.column(lp, l.Column)
		}
	}
}

// NullStatusValue stands for a NULL status among an outbox's status
// values once null_status is applied (collectors/outbox/outboxsql): a
// value no writer stores, as it starts with a control character.
const NullStatusValue = "\x01NULL"

// nullStatusStates are the states null_status may name.
var nullStatusStates = []string{"pending", "in_flight", "published", "dead"}

// outboxNullStatus checks null_status and attempts_on_insert.
func (v *validator) outboxNullStatus(p string, o *Outbox) {
	if o.NullStatus != "" {
		switch {
		case o.Status == "":
			v.fail(p+".null_status", "needs a status column")
		case !slices.Contains(nullStatusStates, o.NullStatus):
			v.fail(p+".null_status", "%q is not one of %s", o.NullStatus, strings.Join(nullStatusStates, ", "))
		}
	}
	if o.EpochUnit != "" && !slices.Contains([]string{"s", "ms", "us"}, o.EpochUnit) {
		v.fail(p+".epoch_unit", "%q is not s, ms or us", o.EpochUnit)
	}
	if o.AttemptsOnInsert < 0 {
		v.fail(p+".attempts_on_insert", "must be 0 or more, got %d", o.AttemptsOnInsert)
	} else if o.AttemptsOnInsert > 0 && o.Attempts == "" {
		v.fail(p+".attempts_on_insert", "needs attempts")
	}
}

// WithNullStatus is o with NullStatusValue added to the status values of
// the state null_status names, so that the rules and the queries read a
// NULL status as that state; o itself without null_status.
func (o *Outbox) WithNullStatus() *Outbox {
	if o.NullStatus == "" || o.Status == "" {
		return o
	}
	c := *o
	add := func(vals []string) []string {
		if slices.Contains(vals, NullStatusValue) {
			return vals
		}
		return append(slices.Clone(vals), NullStatusValue)
	}
	switch o.NullStatus {
	case "pending":
		c.Pending = add(c.Pending)
	case "in_flight":
		c.InFlight = add(c.InFlight)
	case "published":
		c.Published = add(c.Published)
	case "dead":
		c.Dead = add(c.Dead)
	}
	return &c
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
					v.fail(sp, "the status value is also listed under %s", other)
				}
				if set.key != "unknown" {
					seen[s] = set.key
				}
			}
		}
		for i, s := range o.Unknown {
			if k := seen[s]; k != "in_flight" && k != "pending" && k != "" {
				v.fail(fmt.Sprintf("%s.unknown[%d]", p, i), "the status value is listed under %s; unknown results are unpublished rows", k)
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

// outboxCreated checks created_at. It may be absent only when the file
// says so, `created_at: ""`, or a preset whose library keeps no creation
// time leaves it out: then the outbox's rows are counted by state, but
// no age is exported and deadline is ignored (NoCreatedAt).
func (v *validator) outboxCreated(p string, o *Outbox) {
	if o.CreatedAt != "" {
		v.column(p+".created_at", o.CreatedAt)
		return
	}
	if v.c.Line(p+".created_at") > 0 || o.preset != nil {
		return
	}
	v.fail(p+".created_at", `is required (write created_at: "" for a table with no creation time: then no age is exported)`)
}
