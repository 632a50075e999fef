package config

import (
	"net/url"
	"regexp"
	"strings"
)

// Secret is a string that never prints itself: fmt, JSON and YAML all show
// "<secret>". Use Reveal where the value is really needed.
type Secret string

const redacted = "<secret>"

// Reveal returns the secret value.
func (s Secret) Reveal() string { return string(s) }

// String implements fmt.Stringer.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString implements fmt.GoStringer so %#v does not leak either.
func (s Secret) GoString() string { return `"` + s.String() + `"` }

// MarshalText implements encoding.TextMarshaler (JSON, YAML, slog).
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

var (
	kvPassword  = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)
	urlPassword = regexp.MustCompile(`(?i)^([a-z][a-z0-9+.-]*://[^:@/]*:)[^/]*@`)
	qPassword   = regexp.MustCompile(`(?i)([?&]password=)[^&]*`)
)

// RedactDSN returns a libpq URL or key=value DSN with its password
// replaced, fit for a log line or an error message.
func RedactDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	if urlPassword.MatchString(dsn) || strings.Contains(dsn, "://") {
		// A URL that does not parse (a bad port, say) may still hold a password.
		dsn = urlPassword.ReplaceAllString(dsn, "${1}xxxxx@")
		return qPassword.ReplaceAllString(dsn, "${1}xxxxx")
	}
	return kvPassword.ReplaceAllString(dsn, "${1}xxxxx")
}
