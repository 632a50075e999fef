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
// broker's retry wait) plus a fixed slack for stalls, its size is
// taken, and once three answers at it came back, the next trial doubles
// again, up to the most a request may name. A trial that comes back
// later, or not by then (its time limit is that same bound), fails: its
// groups are asked again at the proven size in the same collection. Any answer at a size above one that comes back
// slow brings the size back to one group: on Apache Kafka 4.4 two groups
// asked together now and then do not meet in its queue, so a trial can
// pass by luck, and every later batch then waits seconds (1,000 share
// groups took 7-15 s a scrape where one group a request took 2.3-2.8 s).
// After either failure no trial is made for the rest of the collection
// and the next 0, 1, 2, 4, ... 64 collections, the wait doubling with each
// failure until 16 answers in a row at a size above one came back fast;
// the first trial after a slow answer tries the size it had at once. So a broker where batches wait costs a short wait now and then,
// and a long stall of the machine on kfake part of a collection in
// smaller requests.
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
	// (a ring of shareSamples; next is where the next one goes).
	perGroup []time.Duration
	next     int
	// med is perGroup's median, computed as each answer comes in.
	med time.Duration
	// wait is how many collections are left without a trial; backoff
	// is the wait after the next failure.
	wait, backoff int
	// trialOut is set while a trial is asked; noTrial once one failed
	// in this collection, or while waiting.
	trialOut, noTrial bool
	// trials and failed count the trials made and failed, for tests and
	// benchmarks.
	trials, failed int
	// since counts the answers at the size since it was taken (a
	// trial only follows shareMinSamples of them).
	since int
	// good is the size last taken before a slow answer brought it back
	// to one: the next trial tries it at once (0: none).
	good int
	// clean is whether this collection has had no failure yet.
	clean bool
	// fastRun counts the answers in a row at a size above one that came
	// back fast; shareFastRun of them end the backoff.
	fastRun int
}

const (
	// shareSamples is how many answers the reference time is the median
	// of; shareMinSamples must be in before a trial.
	shareSamples    = 16
	shareMinSamples = 3
	// shareTolerance and shareSlack: a batch is as fast as the proven
	// size when it answers within shareTolerance times the proven
	// size's time per group, times its groups, plus shareSlack. The
	// slack is above the stalls of a loaded machine (100-300 ms) and
	// well below Apache Kafka's retry wait (2 s).
	shareTolerance = 2
	shareSlack     = 500 * time.Millisecond
	// shareFastRun is how many answers in a row at a size above one
	// must come back fast before a failure waits from 0 collections
	// again: more than luck gives on a broker where batches wait.
	shareFastRun = 16
	// shareMaxBackoff is the most collections without a trial.
	shareMaxBackoff = 64
)

func newShareBatcher(most int) *shareBatcher {
	return &shareBatcher{most: max(most, 1), size: 1}
}

// begin starts a collection: a trial is allowed unless waiting.
func (b *shareBatcher) begin() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.trialOut, b.clean = false, true
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
	if t := min(max(2*b.size, b.good), b.most); !b.noTrial && !b.trialOut && b.since >= shareMinSamples && t > b.size && left >= t {
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
			b.good = 0
			b.fail()
			return !ok
		}
		b.size, b.since = n, 0
		b.sample(d, n)
	case n != b.size || !ok:
		// A tail smaller than the size says nothing of the size; a
		// failed request is the groups' own (missed as before).
	case n > 1 && known && !fast:
		b.good, b.size, b.since = b.size, 1, 0
		b.fail()
	default:
		if n > 1 {
			if b.fastRun++; b.fastRun >= shareFastRun {
				b.backoff = 0
			}
		}
		b.since++
		b.sample(d, n)
	}
	return false
}

// fail stops trials for this collection and the next backoff ones; the
// first failure of a collection doubles the backoff.
func (b *shareBatcher) fail() {
	b.fastRun = 0
	if !b.clean {
		b.noTrial = true
		return
	}
	b.clean, b.noTrial = false, true
	b.wait = b.backoff
	b.backoff = min(max(2*b.backoff, 1), shareMaxBackoff)
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

// stats is the proven size and the trials made and failed so far.
func (b *shareBatcher) stats() (size, trials, failed int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.size, b.trials, b.failed
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
