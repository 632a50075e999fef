package reconcile

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// keyType is how a key column's values are compared and carried.
type keyType int

const (
	// keyInt: smallint, integer, bigint. Go's int64 order is Postgres's.
	keyInt keyType = iota
	// keyUUID: carried as the canonical lower-case text, whose byte order
	// is uuid's order in Postgres.
	keyUUID
	// keyText: text, varchar, char. Postgres orders them by collation,
	// which Go cannot reproduce, so every chunk is sorted in Go before the
	// merge: both databases select the same set for a key range when their
	// collations agree, and the re-check removes any finding caused by
	// collations that do not.
	keyText
)

// Type OIDs of the key columns supported.
const (
	oidInt2    = 21
	oidInt4    = 23
	oidInt8    = 20
	oidText    = 25
	oidVarchar = 1043
	oidBpchar  = 1042
	oidUUID    = 2950
)

func keyTypeOf(oid uint32) (keyType, error) {
	switch oid {
	case oidInt2, oidInt4, oidInt8:
		return keyInt, nil
	case oidUUID:
		return keyUUID, nil
	case oidText, oidVarchar, oidBpchar:
		return keyText, nil
	}
	return 0, fmt.Errorf("key column type oid %d is not supported: use smallint, integer, bigint, text, varchar or uuid", oid)
}

// key is one key value: i for integer keys, s for the others.
type key struct {
	i int64
	s string
}

func compareKeys(a, b key) int {
	switch {
	case a.i < b.i:
		return -1
	case a.i > b.i:
		return 1
	}
	return strings.Compare(a.s, b.s)
}

// String renders the key for findings and logs.
func (k key) render(t keyType) string {
	if t == keyInt {
		return strconv.FormatInt(k.i, 10)
	}
	return k.s
}

// arg is the key as a query argument.
func (k key) arg(t keyType) any {
	if t == keyInt {
		return k.i
	}
	return k.s
}

// decodeKey reads a raw key column value in the format Postgres sent it.
func decodeKey(t keyType, fd pgconn.FieldDescription, raw []byte) (key, error) {
	if raw == nil {
		return key{}, fmt.Errorf("key is NULL")
	}
	switch t {
	case keyInt:
		n, err := decodeInt(fd, raw)
		return key{i: n}, err
	case keyUUID:
		if fd.Format == pgtype.BinaryFormatCode {
			if len(raw) != 16 {
				return key{}, fmt.Errorf("uuid of %d bytes", len(raw))
			}
			return key{s: formatUUID(raw)}, nil
		}
		return key{s: strings.ToLower(string(raw))}, nil
	}
	return key{s: string(raw)}, nil
}

func formatUUID(b []byte) string {
	var buf [36]byte
	hex.Encode(buf[0:8], b[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], b[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], b[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], b[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:36], b[10:16])
	return string(buf[:])
}

// decodeInt reads an integer column in either format.
func decodeInt(fd pgconn.FieldDescription, raw []byte) (int64, error) {
	if fd.Format == pgtype.BinaryFormatCode {
		switch len(raw) {
		case 8:
			return int64(binary.BigEndian.Uint64(raw)), nil
		case 4:
			return int64(int32(binary.BigEndian.Uint32(raw))), nil
		case 2:
			return int64(int16(binary.BigEndian.Uint16(raw))), nil
		}
		return 0, fmt.Errorf("integer of %d bytes", len(raw))
	}
	return strconv.ParseInt(string(raw), 10, 64)
}

// decodeBool reads a boolean column in either format; NULL is false.
func decodeBool(fd pgconn.FieldDescription, raw []byte) bool {
	if len(raw) == 0 {
		return false
	}
	if fd.Format == pgtype.BinaryFormatCode {
		return raw[0] != 0
	}
	return raw[0] == 't'
}

// ver is a version value; NULL is a value of its own (compareVersions).
type ver struct {
	n    int64
	null bool
}

// decodeVersion reads a version column: an integer of any width, or NULL.
func decodeVersion(fd pgconn.FieldDescription, raw []byte) (ver, error) {
	if raw == nil {
		return ver{null: true}, nil
	}
	n, err := decodeInt(fd, raw)
	return ver{n: n}, err
}

// argFor is the key, carried as from, as a query argument for a column of
// type to; ok is false when no value of to can equal it (a text key that
// is not a uuid's canonical text, against a uuid column). Keys of a uuid
// and a text column are compared as text, the uuid in its canonical
// lower-case form.
func (k key) argFor(from, to keyType) (any, bool) {
	switch {
	case from == keyInt && to == keyInt:
		return k.i, true
	case to == keyUUID && from != keyUUID:
		return k.s, isCanonicalUUID(k.s)
	}
	return k.s, true
}

// uuidPattern is the canonical text of a uuid: 'x' a lower-case hex digit.
const uuidPattern = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"

func isCanonicalUUID(s string) bool {
	if len(s) != len(uuidPattern) {
		return false
	}
	for i := range len(s) {
		if !uuidCharOK(i, s[i]) {
			return false
		}
	}
	return true
}

func uuidCharOK(i int, c byte) bool {
	if uuidPattern[i] == '-' {
		return c == '-'
	}
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f'
}

// uuidChars are the characters allowed at position i, in byte order.
func uuidChars(i int) string {
	if uuidPattern[i] == '-' {
		return "-"
	}
	return "0123456789abcdef"
}

// uuidPrefix is how many leading bytes of s can begin a canonical uuid.
func uuidPrefix(s string) int {
	m := 0
	for m < len(s) && m < len(uuidPattern) && uuidCharOK(m, s[m]) {
		m++
	}
	return m
}

// uuidComplete fills prefix up to a canonical uuid with the smallest
// character each place allows (the largest when highest).
func uuidComplete(prefix string, highest bool) string {
	b := []byte(prefix)
	for i := len(b); i < len(uuidPattern); i++ {
		cs := uuidChars(i)
		if highest {
			b = append(b, cs[len(cs)-1])
		} else {
			b = append(b, cs[0])
		}
	}
	return string(b)
}

// uuidAbove is the smallest canonical uuid text above s in byte order
// (at or above when !strict); ok is false when there is none. It maps a
// bound on text keys to a bound on a uuid column.
func uuidAbove(s string, strict bool) (string, bool) {
	m := uuidPrefix(s)
	complete := func(prefix string) string { return uuidComplete(prefix, false) }
	switch {
	case m == len(s) && m == len(uuidPattern):
		if !strict {
			return s, true
		}
	case m == len(s):
		// s is a proper prefix: its smallest completion is above it.
		return complete(s), true
	case m < len(uuidPattern):
		for _, c := range []byte(uuidChars(m)) {
			if c > s[m] {
				return complete(s[:m] + string(c)), true
			}
		}
	}
	for j := min(m, len(uuidPattern)) - 1; j >= 0; j-- {
		for _, c := range []byte(uuidChars(j)) {
			if c > s[j] {
				return complete(s[:j] + string(c)), true
			}
		}
	}
	return "", false
}

// uuidBelow is the largest canonical uuid text at or below s in byte
// order; ok is false when there is none.
func uuidBelow(s string) (string, bool) {
	m := uuidPrefix(s)
	complete := func(prefix string) string { return uuidComplete(prefix, true) }
	switch {
	case m == len(uuidPattern):
		// s is a uuid, or one followed by more bytes: above it either way.
		return s[:m], true
	case m < len(s):
		cs := []byte(uuidChars(m))
		for i := len(cs) - 1; i >= 0; i-- {
			if cs[i] < s[m] {
				return complete(s[:m] + string(cs[i])), true
			}
		}
	}
	for j := m - 1; j >= 0; j-- {
		cs := []byte(uuidChars(j))
		for i := len(cs) - 1; i >= 0; i-- {
			if cs[i] < s[j] {
				return complete(s[:j] + string(cs[i])), true
			}
		}
	}
	return "", false
}
