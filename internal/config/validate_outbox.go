package config

import (
	"regexp"
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
