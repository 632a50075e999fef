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
