package kafka

import (
	"context"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
)

// view is what one collection read of the topics of interest, apart from
// records: partitions and leaders, and the log start and high watermark
// of every partition, listed in the same round. The log start is always
// listed, not only for uncommitted partitions: a commit retention has
// overtaken is only seen against it (and the time lag of such a partition
// is the age of its oldest retained record).
type view struct {
	meta   kadm.TopicDetails
	starts kadm.ListedOffsets
	ends   kadm.ListedOffsets
}

// readOffsets reads metadata, start and end offsets of topics at once.
// What fails is added to partial; the view holds what answered.
func (c *Collector) readOffsets(ctx context.Context, topics []string, partial *[]error) view {
	var v view
	if len(topics) == 0 {
		return v
	}
	var (
		wg                        sync.WaitGroup
		metaErr, startErr, endErr error
		meta                      kadm.Metadata
	)
	wg.Add(3)
	go func() { defer wg.Done(); meta, metaErr = c.adm.Metadata(ctx, topics...) }()
	go func() { defer wg.Done(); v.starts, startErr = c.adm.ListStartOffsets(ctx, topics...) }()
	go func() { defer wg.Done(); v.ends, endErr = c.adm.ListEndOffsets(ctx, topics...) }()
	wg.Wait()
	v.meta = meta.Topics
	if metaErr != nil {
		// No lag without partitions; members and deadlines still go.
		*partial = append(*partial, fmt.Errorf("metadata of %d topics: %w", len(topics), metaErr))
	}
	if startErr != nil {
		*partial = append(*partial, fmt.Errorf("list start offsets: %w", startErr))
	}
	if endErr != nil {
		*partial = append(*partial, fmt.Errorf("list end offsets: %w", endErr))
	}
	return v
}
