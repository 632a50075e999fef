package kafka

// probeTable indexes the probe cache's entries by key: open addressing
// with linear probing over pointers to the entries, which hold their own
// keys. A slot is 8 bytes and the table at most three quarters full; the
// map[probeKey]*cachedProbe it replaces took 24 bytes a slot and control
// bytes besides (850 KB of a 5.5 MB heap at 1000 groups). Lookups that
// miss a partition's hint are few after the first collection, so reading
// an entry to compare its key costs little. Entries are never deleted one
// by one: keep rebuilds the table from the entries that stay.
type probeTable struct {
	slots []*cachedProbe // len is 0 or a power of two
	n     int
}

// len is how many entries the table holds.
func (t *probeTable) len() int { return t.n }

// hash mixes a key's fields (splitmix64's finalizer).
func (k probeKey) hash() uint64 {
	x := uint64(k.from) ^ (uint64(uint32(k.topicIso))<<32|uint64(uint32(k.part)))*0x9e3779b97f4a7c15
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// get returns the entry under k, or nil.
func (t *probeTable) get(k probeKey) *cachedProbe {
	if t.n == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := k.hash() & mask; ; i = (i + 1) & mask {
		cp := t.slots[i]
		if cp == nil || cp.key == k {
			return cp
		}
	}
}

// put makes cp the entry under cp.key, replacing any other.
func (t *probeTable) put(cp *cachedProbe) {
	t.reserve(t.n + 1)
	mask := uint64(len(t.slots) - 1)
	for i := cp.key.hash() & mask; ; i = (i + 1) & mask {
		switch old := t.slots[i]; {
		case old == nil:
			t.slots[i] = cp
			t.n++
			return
		case old.key == cp.key:
			t.slots[i] = cp
			return
		}
	}
}

// reserve makes room for n entries without growing again.
func (t *probeTable) reserve(n int) {
	if 4*n <= 3*len(t.slots) {
		return
	}
	size := 8
	for 4*n > 3*size {
		size *= 2
	}
	old := t.slots
	t.slots, t.n = make([]*cachedProbe, size), 0
	for _, cp := range old {
		if cp != nil {
			t.insert(cp)
		}
	}
}

// insert adds cp, whose key the table does not hold, with room for it.
func (t *probeTable) insert(cp *cachedProbe) {
	mask := uint64(len(t.slots) - 1)
	i := cp.key.hash() & mask
	for t.slots[i] != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = cp
	t.n++
}

// keep rebuilds the table from the entries stay reports true for.
func (t *probeTable) keep(stay func(*cachedProbe) bool) {
	kept := make([]*cachedProbe, 0, t.n)
	for _, cp := range t.slots {
		if cp != nil && stay(cp) {
			kept = append(kept, cp)
		}
	}
	*t = probeTable{}
	if len(kept) == 0 {
		return
	}
	t.reserve(len(kept))
	for _, cp := range kept {
		t.insert(cp)
	}
}

// each calls f with every entry.
func (t *probeTable) each(f func(*cachedProbe)) {
	for _, cp := range t.slots {
		if cp != nil {
			f(cp)
		}
	}
}
