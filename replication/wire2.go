package replication

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/likes-dev/likes/internal/peerpb"
)

// Protocol versions (the memberlist ProtocolVersionMin/Max pattern). A
// region speaks every version in [MinProtocol, MaxProtocol]; a caller talks
// the highest version both sides support. Version 1 is the JSON encoding of
// this package's Go structs (service likes.replication.v1.Replication),
// version 2 the protobuf messages of internal/peerpb/peer.proto (service
// likes.peer.v2.Replication).
const (
	MinProtocol = 1
	MaxProtocol = 2
)

const (
	serviceV2      = "likes.peer.v2.Replication"
	methodPushV2   = "/" + serviceV2 + "/Push"
	methodDigestV2 = "/" + serviceV2 + "/Digest"
	methodHeadsV2  = "/" + serviceV2 + "/Heads"
)

var serviceDescV2 = grpc.ServiceDesc{
	ServiceName: serviceV2,
	HandlerType: (*replicationHandler)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Push", Handler: unaryV2(methodPushV2, func(s *Server, ctx context.Context, in *peerpb.PushRequest) (*peerpb.PushResponse, error) {
			if err := s.checkProtocol(in.GetProtocol()); err != nil {
				return nil, err
			}
			b, err := batchFromPB(in.GetBatch())
			if err != nil {
				return nil, err
			}
			cur, err := s.Push(ctx, b)
			if err != nil {
				return nil, err
			}
			return &peerpb.PushResponse{Protocol: 2, Cursor: cursorToPB(cur)}, nil
		})},
		{MethodName: "Digest", Handler: unaryV2(methodDigestV2, func(s *Server, ctx context.Context, in *peerpb.DigestRequest) (*peerpb.DigestResponse, error) {
			if err := s.checkProtocol(in.GetProtocol()); err != nil {
				return nil, err
			}
			resp, err := s.Digest(ctx, DigestRequest{From: in.GetFrom(), Partitions: int(in.GetPartitions()), Buckets: in.GetBuckets()})
			if err != nil {
				return nil, err
			}
			return &peerpb.DigestResponse{Protocol: 2, Mismatched: resp.Mismatched, Cursor: cursorToPB(resp.Cursor)}, nil
		})},
		{MethodName: "Heads", Handler: unaryV2(methodHeadsV2, func(s *Server, ctx context.Context, in *peerpb.HeadsRequest) (*peerpb.HeadsResponse, error) {
			if err := s.checkProtocol(in.GetProtocol()); err != nil {
				return nil, err
			}
			req := HeadsRequest{From: in.GetFrom(), Partitions: int(in.GetPartitions())}
			for _, p := range in.GetPins() {
				req.Pins = append(req.Pins, PinRef{Range: p.GetRange(), Epoch: p.GetEpoch()})
			}
			resp, err := s.Heads(ctx, req)
			if err != nil {
				return nil, err
			}
			return &peerpb.HeadsResponse{Protocol: 2, Log: resp.Log}, nil
		})},
		{MethodName: "Snapshot", Handler: unaryV2(methodSnapshotV2, handleSnapshotV2)}, // snapshot2.go
	},
	Streams:  []grpc.StreamDesc{},
	Metadata: "internal/peerpb/peer.proto",
}

// unaryV2 adapts a typed handler of the v2 service to grpc's MethodDesc.
func unaryV2[In, Out any, PIn interface {
	*In
	proto.Message
}](method string, h func(*Server, context.Context, PIn) (Out, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := PIn(new(In))
		if err := dec(in); err != nil {
			return nil, err
		}
		s := srv.(*Server)
		if interceptor == nil {
			return h(s, ctx, in)
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: method}
		return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
			return h(s, ctx, req.(PIn))
		})
	}
}

// checkProtocol refuses a caller's version outside this region's range.
func (s *Server) checkProtocol(v uint32) error {
	lo, hi := s.protocolRange()
	if int(v) < lo || int(v) > hi {
		s.refusedProtocol.Add(1)
		return status.Errorf(codes.FailedPrecondition,
			"replication: the peer speaks protocol %d; this region speaks protocols %d..%d", v, lo, hi)
	}
	return nil
}

func (s *Server) protocolRange() (int, int) {
	lo, hi := s.cfg.MinProtocol, s.cfg.MaxProtocol
	if lo == 0 {
		lo = MinProtocol
	}
	if hi == 0 {
		hi = MaxProtocol
	}
	return lo, hi
}

// RefusedProtocol counts calls refused for a protocol version outside this
// region's range (likes_peer_protocol_refused_total).
func (s *Server) RefusedProtocol() uint64 { return s.refusedProtocol.Load() }

// batchToPB encodes b compactly: positions as deltas within a run, event
// times as deltas from the batch's first.
func batchToPB(b Batch) *peerpb.Batch {
	out := &peerpb.Batch{From: b.From, Partitions: uint32(b.Partitions), CellsThrough: b.CellsThrough,
		CellsAfter: b.CellsAfter, Watermark: b.Watermark}
	base := int64(0)
	for _, pb := range b.Parts {
		if len(pb.Events) > 0 && base == 0 {
			base = pb.Events[0].EventTime
		}
	}
	out.BaseTime = base
	for _, pb := range b.Parts {
		p := &peerpb.Part{Partition: pb.Partition, After: pb.After, Through: pb.Through}
		prev := pb.After
		for _, ev := range pb.Events {
			p.Events = append(p.Events, peerpb.FromEvent(ev, prev, base))
			prev = ev.Pos
		}
		out.Parts = append(out.Parts, p)
	}
	out.Cells = cellsToPB(b.Cells, b.From)
	return out
}

// errBadV2 is an undecodable v2 message (the receiver then validates the
// decoded batch exactly as a v1 one).
func errBadV2(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "replication: bad v2 message: "+format, args...)
}

// batchFromPB decodes a v2 batch; overflowing positions or times are refused.
func batchFromPB(in *peerpb.Batch) (Batch, error) {
	if in == nil {
		return Batch{}, errBadV2("no batch")
	}
	b := Batch{From: in.GetFrom(), Partitions: int(in.GetPartitions()), CellsThrough: in.GetCellsThrough(),
		CellsAfter: in.GetCellsAfter(), Watermark: in.GetWatermark()}
	base := in.GetBaseTime()
	for _, p := range in.GetParts() {
		pb := PartBatch{Partition: p.GetPartition(), After: p.GetAfter(), Through: p.GetThrough()}
		pos := p.GetAfter()
		for _, e := range p.GetEvents() {
			ev, err := e.ToEvent(p.GetPartition(), pos, base)
			if err != nil {
				return Batch{}, status.Error(codes.InvalidArgument, "replication: "+err.Error())
			}
			pos = ev.Pos
			pb.Events = append(pb.Events, ev)
		}
		b.Parts = append(b.Parts, pb)
	}
	b.Cells = cellsFromPB(in.GetCells(), b.From)
	return b, nil
}

func cursorToPB(c Cursor) *peerpb.Cursor { return &peerpb.Cursor{Log: c.Log, Cells: c.Cells} }

func cursorFromPB(c *peerpb.Cursor) Cursor {
	return Cursor{Log: c.GetLog(), Cells: c.GetCells()}
}
