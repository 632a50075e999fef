package reconcile

import (
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// An oracle case is one generated state of an authority, its outbox and
// its target, and the run to make over it. genCase draws every choice
// from the seed, so a seed is a state: a failing seed is kept as a
// regression case (regressionSeeds).
type ocase struct {
	seed         uint64
	aType, tType string // SQL key types: bigint, integer, text, uuid
	dist         string // integer keys: dense, sparse, negative, extreme, folded
	// style is how the outbox stores state: status (no published_at),
	// status-dated, timestamps, dop (delete on publish), none (no outbox).
	style      string
	keepOld    bool // the outbox keeps older versions' rows
	filter     bool // the outbox has a filter that leaves rows out
	target     bool
	updatedAt  bool
	full       bool
	production bool // production chunk and bucket sizes, else tiny ones
	// writer: a writer commits during the run in pipeline order (commit,
	// publish, consume, apply) on keys of its own; only where publication
	// or change is dated, since its rows are then young and not judged.
	writer bool
	stream bool

	msgs    []omsg
	outbox  []orow
	targets []otgt
}

// omsg is one authority row; ages are seconds before the insert.
type omsg struct {
	k          string
	v          *int64
	created    float64
	updated    *float64
	inTargetOK bool // the key is a value of the target's key type
}

type orow struct {
	k       string
	v       *int64
	status  string
	pub     *float64
	blocked bool
}

type otgt struct {
	k string
	v *int64
}

// Ages, against grace 10m and window 24h.
const (
	ageOld    = 2 * 86400.0 // outside the window
	ageRecent = 2 * 3600.0  // inside the window, past grace
	ageYoung  = 20.0        // within grace
)

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

func chance(r *rand.Rand, p float64) bool { return r.Float64() < p }

func genCase(seed uint64) *ocase {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	c := &ocase{seed: seed}
	switch x := r.IntN(20); {
	case x < 2:
		c.aType, c.tType = "text", "uuid"
	case x < 4:
		c.aType, c.tType = "uuid", "text"
	case x < 5:
		c.aType, c.tType = pick(r, [2]string{"integer", "bigint"}, [2]string{"bigint", "integer"})[0], ""
		if c.aType == "integer" {
			c.tType = "bigint"
		} else {
			c.tType = "integer"
		}
	default:
		c.aType = pick(r, "bigint", "bigint", "bigint", "integer", "text", "text", "uuid", "uuid")
		c.tType = c.aType
	}
	if c.aType == "bigint" || c.aType == "integer" {
		c.dist = pick(r, "dense", "sparse", "negative", "extreme", "folded")
		if c.aType == "integer" || c.tType == "integer" {
			c.dist = pick(r, "dense", "negative", "extreme32")
		}
	}
	c.style = pick(r, "status", "status-dated", "timestamps", "dop", "none")
	c.keepOld = c.style != "dop" && chance(r, 0.4)
	c.filter = c.style != "none" && chance(r, 0.3)
	c.target = c.style == "none" || chance(r, 0.85)
	c.updatedAt = chance(r, 0.3)
	c.full = c.aType != c.tType || chance(r, 0.7)
	c.production = chance(r, 0.3)
	c.stream = chance(r, 0.2)
	c.writer = c.full && c.target && c.aType == c.tType && c.aType != "integer" &&
		(c.style == "status-dated" || c.style == "timestamps" || c.style == "none" && c.updatedAt) && chance(r, 0.5)
	n := 20 + r.IntN(180)
	if c.production && chance(r, 0.5) {
		n = 1500 + r.IntN(1500)
	}
	keys := genKeys(r, c, n)
	for _, k := range keys {
		c.addMessage(r, k)
	}
	for range 1 + n/20 {
		c.addOrphan(r)
	}
	if c.dist == "folded" {
		c.addFoldedPartners(r)
	}
	return c
}

// addFoldedPartners gives some authority keys a that the target lacks an
// orphan in their place whose 32-bit fold is a's, at a's version: the
// pair a hash of the folded key cannot tell from a clean one.
func (c *ocase) addFoldedPartners(r *rand.Rand) {
	inTarget := map[string]bool{}
	for _, x := range c.targets {
		inTarget[x.k] = true
	}
	inAuthority := map[string]bool{}
	for _, m := range c.msgs {
		inAuthority[m.k] = true
	}
	for _, m := range c.msgs {
		a, err := strconv.ParseInt(m.k, 10, 64)
		if err != nil || a < 0 || a >= 1<<61 || inTarget[m.k] || !c.target || !chance(r, 0.7) {
			continue
		}
		h, l := a>>32, a&(1<<32-1)
		k := strconv.FormatInt((h+1)<<32|(l^h^(h+1)), 10)
		if !inAuthority[k] && !inTarget[k] {
			c.targets = append(c.targets, otgt{k: k, v: m.v})
			inTarget[k] = true
		}
	}
}

// genKeys draws n distinct authority keys, in the text form the key
// type's ::text gives.
func genKeys(r *rand.Rand, c *ocase, n int) []string {
	seen := map[string]bool{}
	var out []string
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	base := r.Int64N(1 << 40)
	for i := 0; len(out) < n; i++ {
		switch {
		case c.aType == "uuid" || c.aType == "text" && c.tType == "uuid":
			if c.aType == "text" && chance(r, 0.1) {
				// Text keys that no uuid equals: an upper-case uuid, a name.
				add(pick(r, strings.ToUpper(randUUID(r)), "key-"+strconv.Itoa(i)))
				continue
			}
			add(randUUID(r))
		case c.aType == "text":
			add(pick(r, "k"+strconv.Itoa(r.IntN(10*n)), strings.ToUpper(hex.EncodeToString([]byte{byte(r.IntN(256)), byte(i)})),
				"a b "+strconv.Itoa(i), "ä"+strconv.Itoa(i), "Z-"+strconv.Itoa(i)))
		default:
			add(strconv.FormatInt(genIntKey(r, c.dist, base, i), 10))
		}
	}
	return out
}

func genIntKey(r *rand.Rand, dist string, base int64, i int) int64 {
	switch dist {
	case "dense":
		return base%1000 + int64(i)
	case "sparse":
		return r.Int64N(math.MaxInt64)
	case "negative":
		return -1 - r.Int64N(math.MaxInt32)
	case "extreme":
		return pick(r, math.MinInt64+int64(i), math.MaxInt64-int64(i), int64(i)-3, r.Int64())
	case "extreme32":
		return pick(r, math.MinInt32+int64(i), math.MaxInt32-int64(i), int64(i)-3)
	case "folded":
		// Keys whose 32-bit folds (low half xor high half) are equal, near
		// each other: hashint8extended would hash them alike.
		h, l := r.Int64N(1<<29), r.Int64N(1<<32)
		if i%2 == 0 {
			return h<<32 | l
		}
		return (h+1)<<32 | (l ^ h ^ (h + 1))
	}
	panic(dist)
}

func randUUID(r *rand.Rand) string {
	var b [16]byte
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	return formatUUID(b[:])
}

func i64(v int64) *int64 { return &v }

func f64(v float64) *float64 { return &v }

func genVersion(r *rand.Rand) *int64 {
	switch x := r.IntN(100); {
	case x < 6:
		return nil
	case x < 16:
		return i64(1<<58 + r.Int64N(1<<62))
	case x < 19:
		return i64(math.MaxInt64 - r.Int64N(2))
	case x < 22:
		return i64(-r.Int64N(1000))
	}
	return i64(1 + r.Int64N(5))
}

// lower is a version behind v (NULL is behind every integer).
func lower(v *int64) *int64 {
	if v == nil || *v == math.MinInt64 {
		return nil
	}
	return i64(*v - 1)
}

// higher is a version ahead of v, or v itself if none is.
func higher(v *int64) *int64 {
	switch {
	case v == nil:
		return i64(1)
	case *v == math.MaxInt64:
		return v
	}
	return i64(*v + 1)
}

// inTargetType reports whether the text k is a value of the target's key
// type that ::text renders as k.
func (c *ocase) inTargetType(k string) bool {
	if c.tType == "uuid" && c.aType != "uuid" {
		return isCanonicalUUID(k)
	}
	if c.tType == "integer" {
		n, err := strconv.ParseInt(k, 10, 64)
		return err == nil && n >= math.MinInt32 && n <= math.MaxInt32
	}
	return true
}

func (c *ocase) addMessage(r *rand.Rand, k string) {
	m := omsg{k: k, v: genVersion(r), created: pick(r, ageOld, ageOld, ageRecent, ageRecent, ageYoung), inTargetOK: c.inTargetType(k)}
	if c.updatedAt && chance(r, 0.6) {
		m.updated = f64(min(m.created, pick(r, ageOld, ageRecent, ageYoung)))
	}
	c.msgs = append(c.msgs, m)
	c.addOutbox(r, m)
	if c.target && m.inTargetOK {
		c.addTarget(r, m)
	}
}

func (c *ocase) addOutbox(r *rand.Rand, m omsg) {
	if c.style == "none" {
		return
	}
	row := func(v *int64, status string) orow {
		o := orow{k: m.k, v: v, status: status, blocked: c.filter && chance(r, 0.15)}
		if status == "PUBLISHED" && (c.style != "status" || chance(r, 0.5)) {
			o.pub = f64(pick(r, ageRecent, ageRecent, ageYoung))
			if c.style == "status-dated" && chance(r, 0.1) {
				o.pub = nil // marked published, published_at never set
			}
		}
		if c.style == "timestamps" && status != "PUBLISHED" {
			o.status = "PENDING"
		}
		return o
	}
	if c.keepOld && m.v != nil && chance(r, 0.4) {
		c.outbox = append(c.outbox, row(lower(m.v), "PUBLISHED"))
	}
	if c.style == "dop" {
		// Published rows were deleted by the relay: what is left is pending.
		if chance(r, 0.15) {
			c.outbox = append(c.outbox, orow{k: m.k, v: m.v, status: "PENDING", blocked: c.filter && chance(r, 0.15)})
		}
		return
	}
	if chance(r, 0.08) {
		return // missing_outbox
	}
	status := pick(r, "PUBLISHED", "PUBLISHED", "PUBLISHED", "PUBLISHED", "PUBLISHED", "PUBLISHED", "PENDING", "ABANDONED", "WEIRD")
	c.outbox = append(c.outbox, row(m.v, status))
	if chance(r, 0.05) {
		c.outbox = append(c.outbox, row(m.v, "PENDING"))
	}
}

func (c *ocase) addTarget(r *rand.Rand, m omsg) {
	add := func(v *int64) { c.targets = append(c.targets, otgt{k: m.k, v: v}) }
	switch x := r.IntN(100); {
	case x < 70:
		add(m.v)
	case x < 78:
	case x < 84:
		add(lower(m.v))
	case x < 89:
		add(higher(m.v))
	case x < 93:
		add(nil)
	case x < 97:
		add(m.v)
		add(m.v)
	default:
		add(m.v)
		add(lower(m.v))
	}
}

// addOrphan adds a target row whose key the authority lacks (or, for a
// text target beside uuid keys, a key no uuid equals).
func (c *ocase) addOrphan(r *rand.Rand) {
	if !c.target {
		return
	}
	var k string
	switch {
	case c.tType == "uuid":
		k = randUUID(r)
	case c.tType == "text" && c.aType == "uuid":
		k = pick(r, randUUID(r), strings.ToUpper(c.msgs[r.IntN(len(c.msgs))].k), "not-a-uuid")
	case c.tType == "text":
		k = "orphan-" + strconv.Itoa(r.IntN(1000))
	case c.tType == "integer" || c.dist == "extreme32":
		k = strconv.FormatInt(int64(int32(r.Uint32())), 10)
	default:
		k = strconv.FormatInt(genIntKey(r, c.dist, 0, r.IntN(1000)), 10)
	}
	for _, m := range c.msgs {
		if m.k == k {
			return
		}
	}
	c.targets = append(c.targets, otgt{k: k, v: genVersion(r)})
}

func (c *ocase) String() string {
	return fmt.Sprintf("seed %d: keys %s/%s %s, outbox %s (keep old %v, filter %v), target %v, updated_at %v, full %v, production %v, stream %v, writer %v, %d rows, %d outbox rows, %d target rows",
		c.seed, c.aType, c.tType, c.dist, c.style, c.keepOld, c.filter, c.target, c.updatedAt, c.full, c.production, c.stream, c.writer, len(c.msgs), len(c.outbox), len(c.targets))
}
