package config

import (
	"net/url"
	"regexp"
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

var kvPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

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
	return kvPassword.ReplaceAllString(dsn, "${1}xxxxx")
}
