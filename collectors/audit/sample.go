package audit

import (
	"crypto/md5" //nolint:gosec // a sampling hash, not a security boundary
	"encoding/binary"
	"fmt"
)

// Sampler picks the audited share of event ids by a hash of the id, so the
// outbox side (in SQL) and the broker side (in Go) pick the same ids.
//
// The hash is MD5 of the id's text, because PostgreSQL computes it natively
// (md5(text)) and Go does too (crypto/md5), with no port of PostgreSQL's
// internal hash functions. The first 4 bytes of the digest, read big-endian,
// decide the sample; the next bytes make the 60-bit fingerprint the window
// stores (see window), so the sampling bits and the stored bits are
// independent.
type Sampler struct {
	// threshold is sample·2³²: an id is sampled when its 32-bit hash is
	// below it. 1<<32 samples every id.
	threshold uint64
}

// NewSampler returns a sampler for a share in (0, 1].
func NewSampler(sample float64) Sampler {
	if sample >= 1 {
		return Sampler{threshold: 1 << 32}
	}
	if sample <= 0 {
		return Sampler{}
	}
	return Sampler{threshold: uint64(sample * (1 << 32))}
}

// All reports whether every id is sampled.
func (s Sampler) All() bool { return s.threshold >= 1<<32 }

// Sampled reports whether an id whose Digest gave h is audited.
func (s Sampler) Sampled(h uint32) bool { return uint64(h) < s.threshold }

// SQL returns a predicate on the text expression idText that is true for
// exactly the ids Sampled accepts, or "" when every id is sampled. It costs
// one md5 of the id per row scanned.
func (s Sampler) SQL(idText string) string {
	if s.All() {
		return ""
	}
	return fmt.Sprintf("('x' || substr(md5(%s), 1, 8))::bit(32)::bigint < %d", idText, s.threshold)
}

// Digest hashes an event id: h decides the sample, fp is the 60-bit
// fingerprint kept in the window for a sampled id.
func Digest(id []byte) (h uint32, fp uint64) {
	sum := md5.Sum(id) //nolint:gosec // see Sampler
	return binary.BigEndian.Uint32(sum[0:4]), binary.BigEndian.Uint64(sum[4:12]) >> 4
}
