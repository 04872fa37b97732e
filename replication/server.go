package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/internal/peertls"
)

// ServerConfig configures the receiving side.
type ServerConfig struct {
	// Region is this region's name; pushes claiming to come from it are refused.
	// Required.
	Region string
	// Partitions is this region's log partition count; pushes from a region
	// with another count are refused with codes.FailedPrecondition. Required (> 0).
	Partitions int
	// Sink applies what peers push. Required.
	Sink Sink
	// Fencer answers Heads (the planned-move barrier). Nil: Heads answers
	// codes.Unimplemented.
	Fencer Fencer
	// MaxEpoch, when set, bounds the epoch of a replicated edge version of a
	// user (the newest pin of the user's range this region has seen, plus a
	// slack for a pin table that lags): a version past it is refused
	// (retryably), so no sender can plant a version that would outrank every
	// real write of the user forever.
	MaxEpoch func(user string) uint64
	// Regions are the configured regions: on a mutual-TLS server a caller's
	// certificate must name one of them (empty: any the CA vouches for).
	Regions []string
	// RegionsFunc, when set, replaces Regions and is asked at every call
	// (the region registry names regions added to a running cluster).
	RegionsFunc func() []string
	// Logger receives refusals and store errors. Default: discard.
	Logger *slog.Logger
	// MinProtocol and MaxProtocol bound the protocol versions this region
	// accepts (defaults: the package's MinProtocol and MaxProtocol); a call
	// of another version is refused with codes.FailedPrecondition naming
	// both ranges. A region limited to MaxProtocol 1 serves only version 1.
	MinProtocol, MaxProtocol int
}

func (c ServerConfig) withDefaults() (ServerConfig, error) {
	switch {
	case c.Region == "":
		return c, errors.New("replication: ServerConfig.Region is required")
	case c.Partitions <= 0:
		return c, fmt.Errorf("replication: ServerConfig.Partitions must be > 0, got %d", c.Partitions)
	case c.Sink == nil:
		return c, errors.New("replication: ServerConfig.Sink is required")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Server is the receiving side of replication: it applies peers' pushes to a
// Sink and answers digests. Register it on a *grpc.Server built with
// ServerOptions. Pushes from one sender are applied one at a time, in arrival
// order; pushes from different senders run concurrently.
type Server struct {
	cfg ServerConfig

	mu      sync.Mutex
	senders map[string]chan struct{} // per-sender lock (a channel so waits honour ctx)

	refusedProtocol atomic.Uint64
}

// NewServer validates cfg and returns a Server.
func NewServer(cfg ServerConfig) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, senders: make(map[string]chan struct{})}, nil
}

// Register adds the Replication service to r (normally a *grpc.Server).
// Version 1 is always registered (a caller outside the range is refused
// with a clear error, not Unimplemented); version 2 only when the range
// includes it, so a caller limited to 2 learns of a region that is not.
func (s *Server) Register(r grpc.ServiceRegistrar) {
	r.RegisterService(&serviceDesc, s)
	if _, hi := s.protocolRange(); hi >= 2 {
		r.RegisterService(&serviceDescV2, s)
	}
}

func (s *Server) lock(ctx context.Context, from string) (unlock func(), err error) {
	s.mu.Lock()
	ch, ok := s.senders[from]
	if !ok {
		ch = make(chan struct{}, 1)
		s.senders[from] = ch
	}
	s.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func (s *Server) checkPeer(ctx context.Context, from string, partitions int) error {
	// On a mutual-TLS server the sender is who its certificate says; a
	// message that claims another region is refused before it is read.
	regions := s.cfg.Regions
	if s.cfg.RegionsFunc != nil {
		regions = s.cfg.RegionsFunc()
	}
	if err := peertls.CheckCaller(ctx, from, regions); err != nil {
		return status.Errorf(codes.PermissionDenied, "replication: %v", err)
	}
	if from == "" {
		return status.Error(codes.InvalidArgument, "replication: message has no sender region")
	}
	if from == s.cfg.Region {
		return status.Errorf(codes.InvalidArgument, "replication: region %q received a push from itself (peer list includes self?)", from)
	}
	if partitions != s.cfg.Partitions {
		return status.Errorf(codes.FailedPrecondition,
			"replication: partition count mismatch: region %q has %d log partitions, region %q has %d; every region must be created with the same partition count",
			from, partitions, s.cfg.Region, s.cfg.Partitions)
	}
	return nil
}

// Push applies one batch and returns what the Sink has applied from the sender
// afterwards. An empty batch is the handshake: it changes nothing and returns
// the cursor. Errors are gRPC statuses.
func (s *Server) Push(ctx context.Context, b Batch) (Cursor, error) {
	if err := s.checkPeer(ctx, b.From, b.Partitions); err != nil {
		s.cfg.Logger.Warn("replication: push refused", "from", b.From, "err", err)
		return Cursor{}, err
	}
	if err := validateBatch(b); err != nil {
		s.cfg.Logger.Warn("replication: push refused", "from", b.From, "err", err)
		return Cursor{}, err
	}
	if err := s.checkRebuild(ctx, b.From); err != nil {
		return Cursor{}, err // snapshot.go
	}
	if err := s.checkEpochs(b); err != nil {
		s.cfg.Logger.Warn("replication: push refused", "from", b.From, "err", err)
		return Cursor{}, err
	}
	unlock, err := s.lock(ctx, b.From)
	if err != nil {
		return Cursor{}, err
	}
	defer unlock()

	sink := s.cfg.Sink
	cur, err := sink.Cursor(ctx, b.From)
	if err != nil {
		return Cursor{}, sinkError(ctx, "cursor", err)
	}
	cur = normalize(cur, s.cfg.Partitions)
	var parts []RemotePart
	for _, pb := range b.Parts {
		at := cur.Log[pb.Partition]
		if pb.After > at || pb.Through <= at {
			// A gap (the sender believes we are further than we are) or
			// nothing new: apply nothing; the returned cursor corrects the sender.
			continue
		}
		evs := pb.Events
		for len(evs) > 0 && evs[0].Pos <= at {
			evs = evs[1:]
		}
		parts = append(parts, RemotePart{Partition: pb.Partition, Events: evs, Through: pb.Through})
	}
	if ps, ok := sink.(PartsSink); ok && len(parts) > 0 {
		if err := ps.ApplyRemoteParts(ctx, b.From, parts); err != nil {
			return Cursor{}, sinkError(ctx, "apply remote events", err)
		}
	} else {
		for _, p := range parts {
			if err := sink.ApplyRemote(ctx, b.From, p.Partition, p.Events, p.Through); err != nil {
				return Cursor{}, sinkError(ctx, "apply remote events", err)
			}
		}
	}
	through, wm := cur.Cells, int64(0)
	if b.CellsAfter <= cur.Cells {
		through, wm = max(cur.Cells, b.CellsThrough), b.Watermark
	}
	if len(b.Cells) > 0 || through != cur.Cells || wm != 0 {
		if err := sink.MergeCells(ctx, b.From, b.Cells, through, wm); err != nil {
			return Cursor{}, sinkError(ctx, "merge cells", err)
		}
	}
	out, err := sink.Cursor(ctx, b.From)
	if err != nil {
		return Cursor{}, sinkError(ctx, "cursor", err)
	}
	return normalize(out, s.cfg.Partitions), nil
}

// checkEpochs refuses edge versions newer than any pin of their range.
func (s *Server) checkEpochs(b Batch) error {
	if s.cfg.MaxEpoch == nil {
		return nil
	}
	for _, pb := range b.Parts {
		for _, ev := range pb.Events {
			switch ev.Kind {
			case edge.KindFlip, edge.KindRetraction, edge.KindErasure, edge.KindRecord:
			default:
				continue // no edge version
			}
			if m := s.cfg.MaxEpoch(ev.User); ev.Version.Epoch > m {
				return status.Errorf(codes.Unavailable,
					"replication: batch from %q carries an edge version at epoch %d, past the newest pin this region has seen for the user's range (%d); retry once the pin table has caught up",
					b.From, ev.Version.Epoch, m)
			}
		}
	}
	return nil
}

// validateBatch checks the shape a correct sender always produces.
func validateBatch(b Batch) error {
	bad := func(format string, args ...any) error {
		return status.Errorf(codes.InvalidArgument, "replication: invalid batch from %q: "+format, append([]any{b.From}, args...)...)
	}
	seen := make(map[uint32]bool, len(b.Parts))
	for _, pb := range b.Parts {
		if int(pb.Partition) >= b.Partitions {
			return bad("partition %d out of range [0,%d)", pb.Partition, b.Partitions)
		}
		if seen[pb.Partition] {
			return bad("partition %d appears twice", pb.Partition)
		}
		seen[pb.Partition] = true
		if pb.Through < pb.After {
			return bad("partition %d: through %d < after %d", pb.Partition, pb.Through, pb.After)
		}
		prev := pb.After
		for _, ev := range pb.Events {
			if ev.Partition != pb.Partition {
				return bad("partition %d carries an event of partition %d", pb.Partition, ev.Partition)
			}
			if ev.Pos <= prev || ev.Pos > pb.Through {
				return bad("partition %d: event position %d not in (%d, %d] or out of order", pb.Partition, ev.Pos, prev, pb.Through)
			}
			if err := edge.ValidateEvent(ev, b.Partitions); err != nil {
				return bad("%v", err)
			}
			prev = ev.Pos
		}
		// A sender's run ends at its last event: a Through past it would
		// move the receiver's cursor over events it never received.
		if prev != pb.Through {
			return bad("partition %d: through %d is past the last event sent (%d)", pb.Partition, pb.Through, prev)
		}
	}
	if b.CellsThrough < b.CellsAfter {
		return bad("cells through %d < after %d", b.CellsThrough, b.CellsAfter)
	}
	for _, c := range b.Cells {
		if c.Key.Region != b.From {
			return bad("cell %v is not the sender's own (each region ships only its own cells)", c.Key)
		}
		if err := checkCell(c, b.Partitions); err != nil {
			return bad("%v", err)
		}
	}
	return nil
}

// Digest compares the sender's per-bucket hashes with this region's copy of
// the sender's cells and returns the buckets that differ.
func (s *Server) Digest(ctx context.Context, req DigestRequest) (DigestResponse, error) {
	if err := s.checkPeer(ctx, req.From, req.Partitions); err != nil {
		return DigestResponse{}, err
	}
	if len(req.Buckets) != DigestBuckets {
		return DigestResponse{}, status.Errorf(codes.InvalidArgument,
			"replication: digest from %q has %d buckets, want %d", req.From, len(req.Buckets), DigestBuckets)
	}
	var local Digest
	err := s.cfg.Sink.ScanCells(ctx, req.From, func(c CellState) error {
		if c.Key.Region == req.From {
			local.Add(c)
		}
		return nil
	})
	if err != nil {
		return DigestResponse{}, sinkError(ctx, "scan cells", err)
	}
	var theirs Digest
	copy(theirs[:], req.Buckets)
	cur, err := s.cfg.Sink.Cursor(ctx, req.From)
	if err != nil {
		return DigestResponse{}, sinkError(ctx, "cursor", err)
	}
	return DigestResponse{Mismatched: theirs.Mismatched(&local), Cursor: normalize(cur, s.cfg.Partitions)}, nil
}

// Heads answers a planned move's new owner with this region's own-log heads
// (see Fencer).
func (s *Server) Heads(ctx context.Context, req HeadsRequest) (HeadsResponse, error) {
	if err := s.checkPeer(ctx, req.From, req.Partitions); err != nil {
		return HeadsResponse{}, err
	}
	if s.cfg.Fencer == nil {
		return HeadsResponse{}, status.Errorf(codes.Unimplemented, "replication: region %q answers no heads", s.cfg.Region)
	}
	heads, err := s.cfg.Fencer.Heads(ctx, req.Pins)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return HeadsResponse{}, status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, ErrPinNotSeen):
		return HeadsResponse{}, status.Errorf(codes.Unavailable, "%v", err)
	default:
		return HeadsResponse{}, sinkError(ctx, "heads", err)
	}
	if len(heads) != s.cfg.Partitions {
		return HeadsResponse{}, status.Errorf(codes.Internal, "replication: fencer returned %d heads for %d partitions", len(heads), s.cfg.Partitions)
	}
	return HeadsResponse{Log: heads}, nil
}

// normalize returns c with exactly n log positions (a Sink that has never
// heard from a sender may answer an empty cursor). The result never aliases c.
func normalize(c Cursor, n int) Cursor {
	log := make([]uint64, n)
	copy(log, c.Log)
	return Cursor{Log: log, Cells: c.Cells}
}
