package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/likes-dev/likes/pipeline"
)

// Relay publishes a region's committed outbox (any pipeline.Log) to the log
// topic, partition p to partition p, in source order, with an idempotent
// producer and acks=all. Its source position per partition lives in Kafka: the
// src-pos header of the partition's last record.
type Relay struct {
	cfg   Config
	src   pipeline.Log
	cl    *kgo.Client
	f     *fetcher
	parts []*relayPart

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

type relayPart struct {
	p      uint32
	kick   chan struct{}
	active bool // Config.RelayPartitions names it (or is nil): this Relay publishes it

	mu       sync.Mutex // serializes publishing of this partition (loop and Flush)
	resumed  bool       // pos and lastWM are known from Kafka
	pos      uint64     // source position published through
	lastWM   int64      // last watermark published
	lastWMAt time.Time

	published  atomic.Uint64
	wmPub      atomic.Int64
	events     atomic.Uint64
	heartbeats atomic.Uint64
	errors     atomic.Uint64
	resumes    atomic.Uint64
	// failingSince is when produces to this partition started failing
	// (Unix ns; 0 while they succeed); producingSince is when the produce in
	// flight began (0: none). A broker that answers retriable errors (a full
	// disk: KAFKA_STORAGE_ERROR) keeps an idempotent produce in flight rather
	// than failing it, so a produce that does not finish counts too.
	failingSince   atomic.Int64
	producingSince atomic.Int64
}

// RelayStats is one partition's relay progress.
type RelayStats struct {
	Partition  uint32
	SourcePos  uint64 // source position published through (acked by Kafka, or the source's floor: resume)
	Watermark  int64  // last watermark published
	Events     uint64 // event records produced by this process
	Heartbeats uint64 // heartbeat records produced by this process
	Errors     uint64
	Resumes    uint64 // times the position was (re)loaded from Kafka
}

// NewRelay ensures the topics exist and starts one publishing loop per
// partition of src. Close stops them.
func NewRelay(ctx context.Context, cfg Config, src pipeline.Log) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if src == nil {
		return nil, fmt.Errorf("kafkalog: NewRelay needs a source log")
	}
	if src.Partitions() != cfg.Partitions {
		return nil, fmt.Errorf("kafkalog: source log has %d partitions, Config.Partitions is %d", src.Partitions(), cfg.Partitions)
	}
	cl, err := kgo.NewClient(cfg.clientOpts("relay",
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(cfg.ProduceTimeout),
		kgo.MaxBufferedRecords(max(10_000, 2*cfg.MaxBatch)),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafkalog: relay client: %w", err)
	}
	f := newFetcher(cl, cfg.Topic, cfg.Partitions, cfg.FetchMaxBytes)
	if err := ensureTopics(ctx, cl, cfg); err != nil {
		cl.Close()
		return nil, err
	}
	r := &Relay{cfg: cfg, src: src, cl: cl, f: f}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	for p := range cfg.Partitions {
		r.parts = append(r.parts, &relayPart{p: uint32(p), kick: make(chan struct{}, 1), active: cfg.relays(uint32(p))})
	}
	for _, rp := range r.parts {
		if !rp.active {
			continue
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.loop(rp)
		}()
	}
	return r, nil
}

// Close stops every loop, waits for them, and closes the client. Idempotent.
func (r *Relay) Close() error {
	r.once.Do(func() {
		r.cancel()
		r.wg.Wait()
		r.cl.Close()
	})
	return nil
}

// Kick makes partition p's loop look at the source now instead of at its next
// poll (a hint from the writer; never needed for correctness).
func (r *Relay) Kick(p uint32) {
	if int(p) < len(r.parts) && r.parts[p].active { // on every write: no search
		select {
		case r.parts[p].kick <- struct{}{}:
		default:
		}
	}
}

// Stats returns each partition's progress.
func (r *Relay) Stats() []RelayStats {
	out := make([]RelayStats, 0, len(r.parts))
	for _, rp := range r.parts {
		if !rp.active {
			continue
		}
		out = append(out, RelayStats{
			Partition: rp.p, SourcePos: rp.published.Load(), Watermark: rp.wmPub.Load(),
			Events: rp.events.Load(), Heartbeats: rp.heartbeats.Load(),
			Errors: rp.errors.Load(), Resumes: rp.resumes.Load(),
		})
	}
	return out
}

// Flush publishes everything every source partition it relays holds at the
// call (and is acked by Kafka) before returning.
func (r *Relay) Flush(ctx context.Context) error {
	for p, rp := range r.parts {
		if !rp.active {
			continue
		}
		if err := r.FlushPartition(ctx, uint32(p)); err != nil {
			return err
		}
	}
	return nil
}

// FlushPartition publishes everything source partition p holds at the call.
func (r *Relay) FlushPartition(ctx context.Context, p uint32) error {
	if int(p) >= len(r.parts) {
		return fmt.Errorf("kafkalog: partition %d out of range", p)
	}
	ctx, cancel := mergeCancel(ctx, r.ctx)
	defer cancel()
	backoff := r.cfg.RetryBackoff
	for {
		if r.ctx.Err() != nil {
			return ErrClosed
		}
		reached, err := r.step(ctx, r.parts[p])
		switch {
		case r.ctx.Err() != nil:
			return ErrClosed
		case err != nil && transient(err) && ctx.Err() == nil:
			// Leadership moving, a topic not served yet: wait and retry
			// within ctx, as the loop does.
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
			case <-t.C:
			}
			backoff = min(2*backoff, 5*time.Second)
		case err != nil:
			return err
		case reached:
			return nil
		}
	}
}

// mergeCancel returns a context cancelled when either a or b is.
func mergeCancel(a, b context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(a)
	stop := context.AfterFunc(b, cancel)
	return ctx, func() { stop(); cancel() }
}

func (r *Relay) loop(rp *relayPart) {
	backoff := r.cfg.RetryBackoff
	for {
		began := time.Now()
		reached, err := r.step(r.ctx, rp)
		if r.ctx.Err() != nil {
			return
		}
		var wait time.Duration
		switch {
		case err != nil:
			rp.errors.Add(1)
			r.cfg.OnError(rp.p, err)
			wait = backoff
			backoff = min(2*backoff, 5*time.Second)
		case !reached:
			backoff = r.cfg.RetryBackoff
			continue // a backlog: keep going
		default:
			backoff = r.cfg.RetryBackoff
			wait = r.cfg.PollInterval
		}
		t := time.NewTimer(wait)
		kicked := false
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-rp.kick:
			kicked = true
		case <-t.C:
		}
		t.Stop()
		// The linger never delays a look past when the poll would have
		// made it: with PollInterval below Linger, polling sets the pace.
		if rest := min(r.cfg.Linger, r.cfg.PollInterval) - time.Since(began); kicked && rest > 0 && err == nil {
			// A write woke us soon after the last look: let the writes
			// around it land too, and take them in one read.
			t := time.NewTimer(rest)
			select {
			case <-r.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// step publishes one batch of partition rp (or a heartbeat when it is idle) and
// reports whether it reached the source head.
func (r *Relay) step(ctx context.Context, rp *relayPart) (reached bool, err error) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if !rp.resumed {
		if err := r.resume(ctx, rp); err != nil {
			return false, err
		}
	}
	evs, head, err := r.src.Read(ctx, rp.p, rp.pos, r.cfg.MaxBatch)
	if err != nil {
		if errors.Is(err, pipeline.ErrTruncated) {
			// The source was truncated above our position: another relay
			// published past us (retention cuts below Log.Relayed), or the
			// source was rebuilt with a raised floor. Reload from Kafka and
			// the source's floor (resume).
			rp.resumed = false
		}
		return false, fmt.Errorf("kafkalog: relay read source partition %d after %d: %w", rp.p, rp.pos, err)
	}
	reached = len(evs) == 0 || evs[len(evs)-1].Pos >= head.Pos
	if len(evs) == 0 {
		if head.CompleteThrough > rp.lastWM && time.Since(rp.lastWMAt) >= r.cfg.HeartbeatInterval {
			rec := heartbeatRecord(r.cfg.Topic, rp.p, rp.pos, head.CompleteThrough)
			if err := r.produce(ctx, rp, []*kgo.Record{rec}); err != nil {
				return false, err
			}
			rp.lastWM, rp.lastWMAt = head.CompleteThrough, time.Now()
			rp.wmPub.Store(rp.lastWM)
			rp.heartbeats.Add(1)
		}
		return true, nil
	}
	recs := make([]*kgo.Record, len(evs))
	prev := rp.pos
	for i, ev := range evs {
		if ev.Partition != rp.p || ev.Pos <= prev {
			return false, fmt.Errorf("kafkalog: source partition %d returned event %d/%d after %d: not a partition-ordered log",
				rp.p, ev.Partition, ev.Pos, prev)
		}
		prev = ev.Pos
		recs[i] = eventRecord(r.cfg.Topic, ev)
	}
	wm := int64(math.MinInt64)
	if reached {
		// Everything with EventTime <= head.CompleteThrough is in this batch
		// or before it, so the batch's last record may carry it.
		wm = head.CompleteThrough
		withWM(recs[len(recs)-1], wm)
	}
	if err := r.produce(ctx, rp, recs); err != nil {
		return false, err
	}
	rp.pos = prev
	rp.published.Store(prev)
	rp.events.Add(uint64(len(recs)))
	if wm > rp.lastWM {
		rp.lastWM, rp.lastWMAt = wm, time.Now()
		rp.wmPub.Store(wm)
	}
	return reached, nil
}

// produce writes recs and waits for every ack. On any failure the partition's
// position is reloaded from Kafka before the next step, since some of recs may
// have been written.
func (r *Relay) produce(ctx context.Context, rp *relayPart, recs []*kgo.Record) error {
	rp.producingSince.Store(time.Now().UnixNano())
	err := r.cl.ProduceSync(ctx, recs...).FirstErr()
	rp.producingSince.Store(0)
	if err != nil {
		rp.resumed = false
		if ctx.Err() == nil {
			rp.failingSince.CompareAndSwap(0, time.Now().UnixNano())
		}
		return fmt.Errorf("kafkalog: produce to %s/%d: %w", r.cfg.Topic, rp.p, err)
	}
	rp.failingSince.Store(0)
	return nil
}

// StuckSince is when the oldest run of failed produces still going on, or
// the oldest produce still in flight, began (the broker refuses or does not
// ack writes); false while no partition has a produce failing or in flight.
// Callers judge the age (a healthy produce is in flight for milliseconds). A
// few atomic loads: cheap enough for every write.
func (r *Relay) StuckSince() (time.Time, bool) {
	var oldest int64
	for _, rp := range r.parts {
		for _, t := range []int64{rp.failingSince.Load(), rp.producingSince.Load()} {
			if t != 0 && (oldest == 0 || t < oldest) {
				oldest = t
			}
		}
	}
	if oldest == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, oldest), true
}

// flooredSource is a source log with a truncation point: Read after a
// position below LogFloor fails with pipeline.ErrTruncated. Both stores
// implement it.
type flooredSource interface {
	LogFloor(ctx context.Context, p uint32) (uint64, error)
}

// resume loads the partition's source position from the last record in Kafka
// that carries a src-pos header, raised to the source's floor when the
// source has one.
//
// Rule: a store's floor never passes a source event the relay has not
// published. Retention cuts only below Log.Relayed (what Kafka holds), and a
// rebuild raises the floor of an empty log, before any event is appended. So
// the positions between the topic's src-pos and the floor hold no unpublished
// event, and resuming at the floor skips nothing; resuming at the src-pos
// instead would read below the floor, fail with ErrTruncated, and resume at
// the same src-pos again, forever.
func (r *Relay) resume(ctx context.Context, rp *relayPart) error {
	pos, wm, err := r.f.lastPublished(ctx, rp.p)
	if err != nil {
		return err
	}
	if fs, ok := r.src.(flooredSource); ok {
		floor, err := fs.LogFloor(ctx, rp.p)
		if err != nil {
			return fmt.Errorf("kafkalog: relay read source floor of partition %d: %w", rp.p, err)
		}
		pos = max(pos, floor)
	}
	_, head, err := r.src.Read(ctx, rp.p, math.MaxUint64, 1)
	if err != nil {
		return fmt.Errorf("kafkalog: relay read source head of partition %d: %w", rp.p, err)
	}
	if pos > head.Pos {
		return fmt.Errorf("kafkalog: %s/%d says the relay published through source position %d, but the source head is %d: "+
			"the topic belongs to another source (or the source lost data); refusing to publish", r.cfg.Topic, rp.p, pos, head.Pos)
	}
	rp.pos, rp.lastWM, rp.lastWMAt, rp.resumed = pos, wm, time.Now(), true
	rp.published.Store(pos)
	rp.wmPub.Store(wm)
	rp.resumes.Add(1)
	return nil
}
