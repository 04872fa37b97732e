package api

import (
	"context"
	"fmt"
	"math"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/internal/peerpb"
)

// Protocol version 2 of the forwarding service: the protobuf messages of
// internal/peerpb (service likes.peer.v2.Forward). The handlers convert to
// the version-1 requests and run the same checks; a caller tries version 2
// and steps down to 1 when the owner answers Unimplemented (a region of the
// previous release, or one limited by ForwardPolicy.MaxProtocol).
const (
	forwardServiceV2 = "likes.peer.v2.Forward"
	forwardMethodV2  = "/" + forwardServiceV2 + "/Set"
	erasureMethodV2  = "/" + forwardServiceV2 + "/Erasure"
	readMethodV2     = "/" + forwardServiceV2 + "/Read"
	forwardProtoV2   = 2
)

// checkV2 refuses a version-2 message that claims another version.
func checkV2(what string, v uint32) error {
	if v != forwardProtoV2 {
		return status.Errorf(codes.FailedPrecondition, "api: %s protocol %d on the version-2 service (this region speaks 1..2)", what, v)
	}
	return nil
}

func small(v uint32) (uint8, error) {
	if v > math.MaxUint8 {
		return 0, status.Errorf(codes.InvalidArgument, "api: forwarded request: value %d out of range", v)
	}
	return uint8(v), nil
}

func (h *forwardHandler) setV2(ctx context.Context, in *peerpb.ForwardRequest) (*peerpb.ForwardResponse, error) {
	if err := checkV2("forward", in.GetProtocol()); err != nil {
		return nil, err
	}
	target, err := small(in.GetTarget())
	if err != nil {
		return nil, err
	}
	kind, err := small(in.GetKind())
	if err != nil {
		return nil, err
	}
	out, err := h.set(ctx, &forwardRequest{Proto: forwardProto, From: in.GetFrom(), Request: edge.Request{
		Item: in.GetItem(), User: in.GetUser(), Target: crdt.State(target), Kind: edge.Kind(kind), IdemKey: in.GetIdemKey()}})
	if err != nil {
		return nil, err
	}
	r := out.Result
	return &peerpb.ForwardResponse{Protocol: forwardProtoV2, Item: r.Answer.Item, User: r.Answer.User, Liked: r.Answer.Liked,
		Changed: r.Answer.Changed, State: uint32(r.State), Epoch: r.Version.Epoch, Op: r.Version.Op,
		Refusal: out.Refusal, Message: out.Message}, nil
}

func (h *forwardHandler) erasureV2(ctx context.Context, in *peerpb.ErasureRequest) (*peerpb.ErasureResponse, error) {
	if err := checkV2("erasure relay", in.GetProtocol()); err != nil {
		return nil, err
	}
	out, err := h.erasure(ctx, &erasureRequest{Proto: forwardProto, From: in.GetFrom(), User: in.GetUser(), Start: in.GetStart()})
	if err != nil {
		return nil, err
	}
	j := out.Job
	return &peerpb.ErasureResponse{Protocol: forwardProtoV2, Found: out.Found, Refusal: out.Refusal, Message: out.Message,
		Job: &peerpb.ErasureJob{User: j.User, State: j.State, Edges: int64(j.Edges), Unliked: int64(j.Unliked),
			StartedAt: j.StartedAt, FinishedAt: j.FinishedAt, Remote: j.Remote, Late: int64(j.Late)}}, nil
}

func (h *forwardHandler) readV2(ctx context.Context, in *peerpb.ReadRequest) (*peerpb.ReadResponse, error) {
	if err := checkV2("read", in.GetProtocol()); err != nil {
		return nil, err
	}
	out, err := h.read(ctx, &readRequest{Proto: forwardProto, From: in.GetFrom(), User: in.GetUser(), Item: in.GetItem()})
	if err != nil {
		return nil, err
	}
	r := out.Register
	return &peerpb.ReadResponse{Protocol: forwardProtoV2, Epoch: r.Version.Epoch, Op: r.Version.Op, State: uint32(r.State)}, nil
}

// unaryV2 is a method of the version-2 forwarding service.
func unaryV2[Req any, Resp any, PReq interface {
	*Req
	proto.Message
}](name, full string, handle func(*forwardHandler, context.Context, PReq) (Resp, error)) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := PReq(new(Req))
			if err := dec(in); err != nil {
				return nil, err
			}
			h := srv.(*forwardHandler)
			if ic == nil {
				return handle(h, ctx, in)
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: full}
			return ic(ctx, in, info, func(ctx context.Context, req any) (any, error) {
				return handle(h, ctx, req.(PReq))
			})
		},
	}
}

var forwardDescV2 = grpc.ServiceDesc{
	ServiceName: forwardServiceV2,
	HandlerType: (*forwardServer)(nil),
	Methods: []grpc.MethodDesc{
		unaryV2("Set", forwardMethodV2, (*forwardHandler).setV2),
		unaryV2("Erasure", erasureMethodV2, (*forwardHandler).erasureV2),
		unaryV2("Read", readMethodV2, (*forwardHandler).readV2),
	},
	Metadata: "internal/peerpb/peer.proto",
}

// v2 reports whether to try version 2 with owner's address.
func (f *Forwarder) v2(addr string) bool {
	if f.MaxProtocol == 1 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.v1Only[addr]
}

// callV2 invokes the version-2 method; on Unimplemented it remembers that
// the owner speaks only version 1 and reports fallBack.
func (f *Forwarder) callV2(ctx context.Context, owner, method, what string, in, out proto.Message) (fallBack bool, err error) {
	addr, ok := f.resolve(owner)
	if !ok || !f.v2(addr) {
		return true, nil
	}
	c, err := f.conn(owner, addr)
	if err != nil {
		return false, fmt.Errorf("%w: dial %s: %v", edge.ErrFailClosed, owner, err)
	}
	err = c.Invoke(ctx, method, in, out)
	switch {
	case err == nil:
		return false, nil
	case status.Code(err) == codes.Unimplemented:
		f.mu.Lock()
		f.v1Only[addr] = true
		f.mu.Unlock()
		return true, nil
	}
	return false, fmt.Errorf("%w: %s %s: %v", edge.ErrFailClosed, what, owner, err)
}
