package cassandra

import (
	"context"
	"time"

	"github.com/gocql/gocql"
)

// Relay intents of finished relays are deleted off the write path: a relay
// hands its intent's key to the reaper, whose one goroutine deletes the keys
// gathered over reapEvery in one unlogged batch per intent bucket (a bucket
// is one Cassandra partition, so a batch is one mutation). A like's intent
// delete used to be a request of its own on the write path; now it is a
// share of a batch, about a tenth of a request at a few hundred likes per
// second (BENCHMARKS.md).
//
// Losing a key is harmless: an intent whose edge no longer holds that pending
// event is what the sweeper deletes anyway (sweep.go), one edge read each. So
// a crash, a full queue (the key is then deleted at once, by its relay) or a
// failed batch costs at most some sweeper reads. Sweep hands the reaper's
// keys to Cassandra first, so it does not re-read edges whose intents were
// about to go; Close does the same with what is left, bounded by
// reapCloseTimeout.

const (
	// reapEvery is how long the reaper gathers keys before it deletes them.
	reapEvery = 250 * time.Millisecond
	// reapBatch bounds the deletes of one batch: about 3 KiB, under
	// Cassandra's batch_size_warn_threshold (5 KiB).
	reapBatch = 32
	// reapQueue bounds the keys waiting for the reaper.
	reapQueue = 8192
	// reapCloseTimeout bounds Close's last deletes.
	reapCloseTimeout = 2 * time.Second
)

// intentKey is a relay intent's primary key.
type intentKey struct {
	part        int
	minute      int64
	item, user  string
	eseq, nonce int64
}

func (k intentKey) args() []any {
	return []any{k.part, k.minute, k.item, k.user, k.eseq, k.nonce}
}

type bucketKey struct {
	part   int
	minute int64
}

// reaper owns the intent deletes waiting to be sent. Its loop is the only
// goroutine that sends them; forget and flush talk to it by channels.
type reaper struct {
	s       *Store
	keys    chan intentKey
	flushes chan chan struct{}
}

func newReaper(s *Store) *reaper {
	return &reaper{s: s, keys: make(chan intentKey, reapQueue), flushes: make(chan chan struct{})}
}

// forget hands the intent of a finished relay to the reaper.
func (r *reaper) forget(ctx context.Context, k intentKey) {
	select {
	case r.keys <- k:
	default:
		// The reaper is behind: delete it here rather than queue it.
		_ = r.s.write(ctx, r.s.q.intentDelete, k.args()...).Exec()
	}
}

// flush returns once every key handed to the reaper before the call was sent
// (or the store is closing).
func (r *reaper) flush(ctx context.Context) {
	done := make(chan struct{})
	select {
	case r.flushes <- done:
	case <-r.s.closing:
		return
	case <-ctx.Done():
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (r *reaper) loop() {
	defer r.s.wg.Done()
	t := r.s.opts.Clock.NewTicker(reapEvery)
	defer t.Stop()
	var pending []intentKey
	drain := func() {
		for {
			select {
			case k := <-r.keys:
				pending = append(pending, k)
			default:
				return
			}
		}
	}
	for {
		select {
		case k := <-r.keys:
			if pending = append(pending, k); len(pending) < reapQueue {
				continue
			}
		case done := <-r.flushes:
			drain()
			r.delete(r.s.ctx, pending)
			pending = pending[:0]
			close(done)
			continue
		case <-t.C():
		case <-r.s.closing:
			drain()
			ctx, cancel := context.WithTimeout(context.Background(), reapCloseTimeout)
			r.delete(ctx, pending)
			cancel()
			return
		}
		r.delete(r.s.ctx, pending)
		pending = pending[:0]
	}
}

// delete sends keys, one unlogged batch per bucket and reapBatch keys. A
// failure is left to the sweeper.
func (r *reaper) delete(ctx context.Context, keys []intentKey) {
	byBucket := map[bucketKey][]intentKey{}
	var order []bucketKey
	for _, k := range keys {
		b := bucketKey{k.part, k.minute}
		if _, ok := byBucket[b]; !ok {
			order = append(order, b)
		}
		byBucket[b] = append(byBucket[b], k)
	}
	for _, b := range order {
		ks := byBucket[b]
		for len(ks) > 0 {
			n := min(len(ks), reapBatch)
			chunk := ks[:n]
			ks = ks[n:]
			if len(chunk) == 1 {
				_ = r.s.write(ctx, r.s.q.intentDelete, chunk[0].args()...).Exec()
				continue
			}
			batch := r.s.newBatch(ctx, gocql.UnloggedBatch, false, "BATCH relay_intents deletes")
			for _, k := range chunk {
				batch.Query(r.s.q.intentDelete, k.args()...)
			}
			_ = r.s.s.ExecuteBatch(batch)
		}
	}
}
