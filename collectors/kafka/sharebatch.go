package kafka

import (
	"slices"
	"sync"
	"time"
)

// shareBatcher chooses how many share groups one DescribeShareGroupOffsets
// names, per cluster, from how the broker answers. Brokers differ: kfake
// (and a broker computing a share group's lag without a queue) answers
// 200 groups in one request about as fast per group as one, so asking
// one group a request only costs requests; Apache Kafka 4.4 makes groups
// asked together wait seconds (shareoffsets.go), so there one group a
// request is the fast way.
//
// So requests start at one group, the size proven for the cluster. While
// a collection runs, one request at a time (a trial) names twice the
// proven size; when it comes back within twice the time per group of the
// proven size's answers (their median, robust to a request that met a
// broker's retry wait) plus a fixed slack for timer noise, its size is
// proven and the next trial doubles again, up to the most a request
// may name. A trial that comes back later, or not by then (its time limit
// is that same bound), fails: its groups are asked again at the proven
// size in the same collection, and no trial is made for the next 1, 2, 4,
// ... 64 collections (the wait doubling with each failed trial in a row),
// so a broker where batches wait costs one short wait now and then. Two
// answers in a row at a proven size above one that come back slow halve
// the size (a broker that changed, or a trial passed by luck); one alone
// may be a stall of the machine.
//
// The batcher only decides sizes; whatever the size, every group is
// asked, and a group left unanswered is missed, as before.
type shareBatcher struct {
	mu sync.Mutex
	// most is the most groups one request names.
	most int
	// size is the proven size, at least 1.
	size int
	// perGroup is the recent answers at the proven size, time per group
	// (a ring of sampleN; next is where the next one goes).
	perGroup []time.Duration
	next     int
	// med is perGroup's median, computed as each answer comes in.
	med time.Duration
	// wait is how many collections are left without a trial; backoff
	// is the wait after the next failed trial.
	wait, backoff int
	// trialOut is set while a trial is asked; noTrial once one failed
	// in this collection, or while waiting.
	trialOut, noTrial bool
	// trials and failed count the trials made and failed, for tests and
	// benchmarks.
	trials, failed int
	// slow counts the answers in a row at the proven size that came
	// back slow.
	slow int
}

const (
	// shareSamples is how many answers the reference time is the median
	// of; shareMinSamples must be in before a trial.
	shareSamples    = 16
	shareMinSamples = 3
	// shareTolerance and shareSlack: a batch is as fast as the proven
	// size when it answers within shareTolerance times the proven
	// size's time per group, times its groups, plus shareSlack.
	shareTolerance = 2
	shareSlack     = 100 * time.Millisecond
	// shareMaxBackoff is the most collections without a trial.
	shareMaxBackoff = 64
)

func newShareBatcher(most int) *shareBatcher {
	return &shareBatcher{most: max(most, 1), size: 1, backoff: 1}
}

// begin starts a collection: a trial is allowed unless waiting.
func (b *shareBatcher) begin() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.trialOut = false
	b.noTrial = b.wait > 0
	if b.wait > 0 {
		b.wait--
	}
}

// take returns how many of left groups the next request names, whether it
// is a trial and, for a trial, its time limit (0 otherwise).
func (b *shareBatcher) take(left int) (n int, trial bool, limit time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := min(2*b.size, b.most); !b.noTrial && !b.trialOut && t > b.size && left >= t {
		if ref, ok := b.ref(); ok {
			b.trialOut = true
			b.trials++
			return t, true, bound(ref, t)
		}
	}
	return min(b.size, left), false, 0
}

// done records the answer to a request of n groups taken with take, which
// took d; ok is false when it failed or was late. It reports whether the
// request's groups are to be asked again: a failed trial's.
func (b *shareBatcher) done(n int, trial bool, d time.Duration, ok bool) (again bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ref, known := b.ref()
	fast := ok && known && d <= bound(ref, n)
	switch {
	case trial:
		b.trialOut = false
		if !fast {
			b.failed++
			b.fail()
			return !ok
		}
		b.size, b.backoff = n, 1
		b.sample(d, n)
	case n != b.size || !ok:
		// A tail smaller than the size says nothing of the size; a
		// failed request is the groups' own (missed as before).
	case n > 1 && known && !fast:
		// Two slow answers in a row, not one stall, halve the size;
		// no trial follows in this collection.
		if b.slow++; b.slow >= 2 {
			b.size, b.slow = max(1, b.size/2), 0
		}
		b.noTrial = true
	default:
		b.slow = 0
		b.sample(d, n)
	}
	return false
}

// fail stops trials for this collection and the next backoff ones.
func (b *shareBatcher) fail() {
	b.noTrial = true
	b.wait = b.backoff
	b.backoff = min(2*b.backoff, shareMaxBackoff)
}

func (b *shareBatcher) sample(d time.Duration, n int) {
	if len(b.perGroup) < shareSamples {
		b.perGroup = append(b.perGroup, d/time.Duration(n))
	} else {
		b.perGroup[b.next] = d / time.Duration(n)
		b.next = (b.next + 1) % shareSamples
	}
	var s [shareSamples]time.Duration
	m := s[:copy(s[:], b.perGroup)]
	slices.Sort(m)
	b.med = m[len(m)/2]
}

// ref is the median time per group of the recent answers at the proven
// size; false until shareMinSamples are in.
func (b *shareBatcher) ref() (time.Duration, bool) {
	return b.med, len(b.perGroup) >= shareMinSamples
}

// bound is the longest a request of n groups may take and still be as
// fast per group as ref.
func bound(ref time.Duration, n int) time.Duration {
	return shareTolerance*time.Duration(n)*ref + shareSlack
}

// proven is the size proven for the cluster.
func (b *shareBatcher) proven() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.size
}

// shareQueue hands out one collection's share groups to the connections
// asking their offsets: b's sizes (nil: chunk each), and first the groups
// of a failed trial, asked again.
type shareQueue struct {
	mu     sync.Mutex
	groups []string
	i      int
	again  []string
	chunk  int
	b      *shareBatcher
}

// take returns the groups the next request names (nil: none left),
// whether it is a trial and a trial's time limit.
func (q *shareQueue) take() (part []string, trial bool, limit time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.again) > 0 {
		n := 1
		if q.b != nil {
			n = min(q.b.proven(), len(q.again))
		}
		part, q.again = q.again[:n:n], q.again[n:]
		return part, false, 0
	}
	left := len(q.groups) - q.i
	if left == 0 {
		return nil, false, 0
	}
	n := min(q.chunk, left)
	if q.b != nil {
		n, trial, limit = q.b.take(left)
	}
	part = q.groups[q.i : q.i+n : q.i+n]
	q.i += n
	return part, trial, limit
}

// done records the answer to part (shareBatcher.done) and reports whether
// its groups were put back to be asked again.
func (q *shareQueue) done(part []string, trial bool, d time.Duration, ok bool) bool {
	if q.b == nil || !q.b.done(len(part), trial, d, ok) {
		return false
	}
	q.mu.Lock()
	q.again = append(q.again, part...)
	q.mu.Unlock()
	return true
}
