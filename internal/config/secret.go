package config

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
