package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Reasons a record carries no usable event id. They are counted as
// malformed records and the record is skipped.
var (
	ErrNoHeader   = errors.New("record has no event id header")
	ErrNoKey      = errors.New("record has no key")
	ErrNoField    = errors.New("record value has no such JSON field")
	ErrBadJSON    = errors.New("record value is not a JSON object")
	ErrBadIDValue = errors.New("event id field is not a string or number")
	ErrEmptyID    = errors.New("event id is empty")
)

type idSource int

const (
	fromKey idSource = iota
	fromHeader
	fromJSON
)

// Extractor reads the event id from a record, as configured by an audit's
// event_id: "key", "header:NAME" or "json:PATH" (a field of the value, a
// string or a number; PATH may be dotted, "payload.id", to reach into
// nested objects such as a Debezium envelope). It never keeps the value.
type Extractor struct {
	source idSource
	name   string
	path   []string // json: the field names, outermost first
}

// InKey reports whether the id is the record key (compaction keeps the
// newest record of each key, so it keeps every id).
func (e Extractor) InKey() bool { return e.source == fromKey }

// ParseEventID parses an audit's event_id setting.
func ParseEventID(spec string) (Extractor, error) {
	switch {
	case spec == "key":
		return Extractor{source: fromKey}, nil
	case strings.HasPrefix(spec, "header:") && len(spec) > len("header:"):
		return Extractor{source: fromHeader, name: spec[len("header:"):]}, nil
	case strings.HasPrefix(spec, "json:") && len(spec) > len("json:"):
		path := strings.Split(spec[len("json:"):], ".")
		for _, f := range path {
			if f == "" {
				return Extractor{}, fmt.Errorf("event_id %q: a json: path is field names separated by single dots, with none empty", spec)
			}
		}
		return Extractor{source: fromJSON, name: spec[len("json:"):], path: path}, nil
	}
	return Extractor{}, fmt.Errorf("event_id %q is not key, header:NAME or json:PATH", spec)
}

// ID returns the record's event id. The slice may alias the record; use it
// before the record is dropped.
func (e Extractor) ID(r *kgo.Record) ([]byte, error) {
	var id []byte
	switch e.source {
	case fromKey:
		if r.Key == nil {
			return nil, ErrNoKey
		}
		id = r.Key
	case fromHeader:
		found := false
		for _, h := range r.Headers {
			if h.Key == e.name {
				id, found = h.Value, true
				break
			}
		}
		if !found {
			return nil, ErrNoHeader
		}
	case fromJSON:
		var err error
		if id, err = jsonPath(r.Value, e.path); err != nil {
			return nil, err
		}
	}
	if len(id) == 0 {
		return nil, ErrEmptyID
	}
	return id, nil
}

// jsonPath returns the field at path in the JSON object v: a string's
// contents, or a number's text. Each step but the last must be an object.
func jsonPath(v []byte, path []string) ([]byte, error) {
	for _, f := range path[:len(path)-1] {
		i, err := jsonValue(v, f)
		if err != nil {
			return nil, err
		}
		end, ok := skipValue(v, i)
		if !ok {
			return nil, ErrBadJSON
		}
		if v[i] != '{' {
			return nil, ErrNoField
		}
		v = v[i:end]
	}
	i, err := jsonValue(v, path[len(path)-1])
	if err != nil {
		return nil, err
	}
	return scalar(v, i)
}

// jsonField returns a top-level field of the JSON object v: a string's
// contents, or a number's text.
func jsonField(v []byte, field string) ([]byte, error) {
	i, err := jsonValue(v, field)
	if err != nil {
		return nil, err
	}
	return scalar(v, i)
}

// jsonValue returns the index where the value of the top-level field of
// the JSON object v begins. It scans only until the field is found and
// does not validate the rest of the value; it allocates only when a key
// holds escapes.
func jsonValue(v []byte, field string) (int, error) {
	i := skipSpace(v, 0)
	if i >= len(v) || v[i] != '{' {
		return 0, ErrBadJSON
	}
	i++
	for {
		i = skipSpace(v, i)
		if i >= len(v) {
			return 0, ErrBadJSON
		}
		if v[i] == '}' {
			return 0, ErrNoField
		}
		if v[i] != '"' {
			return 0, ErrBadJSON
		}
		end, escaped, ok := scanString(v, i)
		if !ok {
			return 0, ErrBadJSON
		}
		match := keyEquals(v[i:end], escaped, field)
		i = skipSpace(v, end)
		if i >= len(v) || v[i] != ':' {
			return 0, ErrBadJSON
		}
		i = skipSpace(v, i+1)
		if i >= len(v) {
			return 0, ErrBadJSON
		}
		if match {
			return i, nil
		}
		if i, ok = skipValue(v, i); !ok {
			return 0, ErrBadJSON
		}
		i = skipSpace(v, i)
		if i >= len(v) {
			return 0, ErrBadJSON
		}
		switch v[i] {
		case ',':
			i++
		case '}':
			return 0, ErrNoField
		default:
			return 0, ErrBadJSON
		}
	}
}

// scalar returns the string contents or number text starting at v[i].
func scalar(v []byte, i int) ([]byte, error) {
	switch c := v[i]; {
	case c == '"':
		end, escaped, ok := scanString(v, i)
		if !ok {
			return nil, ErrBadJSON
		}
		if !escaped {
			return v[i+1 : end-1], nil
		}
		var s string
		if err := json.Unmarshal(v[i:end], &s); err != nil {
			return nil, ErrBadJSON
		}
		return []byte(s), nil
	case c == '-' || (c >= '0' && c <= '9'):
		j := i
		for j < len(v) && isNumberByte(v[j]) {
			j++
		}
		return v[i:j], nil
	case c == '{' || c == '[' || c == 't' || c == 'f' || c == 'n':
		return nil, ErrBadIDValue
	}
	return nil, ErrBadJSON
}

func keyEquals(quoted []byte, escaped bool, field string) bool {
	if !escaped {
		return string(quoted[1:len(quoted)-1]) == field
	}
	var s string
	if err := json.Unmarshal(quoted, &s); err != nil {
		return false
	}
	return s == field
}

func isNumberByte(c byte) bool {
	return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

func skipSpace(v []byte, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == '\n' || v[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the index just past the string that starts with the
// quote at v[i], and whether it holds escapes.
func scanString(v []byte, i int) (end int, escaped, ok bool) {
	for j := i + 1; j < len(v); j++ {
		switch v[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return j + 1, escaped, true
		}
	}
	return 0, false, false
}

// skipValue returns the index just past the value that starts at v[i].
func skipValue(v []byte, i int) (int, bool) {
	switch v[i] {
	case '"':
		end, _, ok := scanString(v, i)
		return end, ok
	case '{', '[':
		depth := 0
		for j := i; j < len(v); j++ {
			switch v[j] {
			case '"':
				end, _, ok := scanString(v, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	}
	j := i
	for j < len(v) && v[j] != ',' && v[j] != '}' && v[j] != ']' && v[j] != ' ' && v[j] != '\t' && v[j] != '\n' && v[j] != '\r' {
		j++
	}
	return j, j > i
}
