package api

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"likes/edge"
	"likes/internal/rpcjson"
)

// The forwarding service: a region that does not own a user's range sends the
// write to the owner with the same idempotency key. The owner applies it locally
// (never forwarding again, so a stale pin cannot bounce a write around) and
// answers with the edge's register so the ingress region writes the overlay.
//
// The gRPC listener is internal: in a deployment it must be reachable only by
// other regions (mTLS or a private network); the user was authenticated at the
// ingress region.
const (
	forwardService = "likes.forward.v1.Forward"
	forwardMethod  = "/" + forwardService + "/Set"
	forwardProto   = 1
)

type forwardRequest struct {
	Proto   int          `json:"proto"`
	Request edge.Request `json:"request"`
}

type forwardResponse struct {
	Result edge.ForwardResult `json:"result"`
	// Refusal names a sentinel error of the edge package ("" on success).
	Refusal string `json:"refusal,omitempty"`
	Message string `json:"message,omitempty"`
}

var refusals = map[string]error{
	"conflict":    edge.ErrKeyConflict,
	"erased":      edge.ErrErased,
	"stale_epoch": edge.ErrStaleEpoch,
	"not_owner":   edge.ErrNotOwner,
	"fail_closed": edge.ErrFailClosed,
	// The owner's storage refuses writes: the ingress answers 503 too.
	"storage_unavailable": edge.ErrStorageUnavailable,
}

type forwardServer interface {
	set(ctx context.Context, in *forwardRequest) (*forwardResponse, error)
}

type forwardHandler struct{ svc *edge.Service }

func (h *forwardHandler) set(ctx context.Context, in *forwardRequest) (*forwardResponse, error) {
	if in.Proto != forwardProto {
		return nil, fmt.Errorf("api: forward protocol %d, this region speaks %d", in.Proto, forwardProto)
	}
	if err := ValidateID("itemId", in.Request.Item); err != nil {
		return nil, err
	}
	if err := ValidateID("userId", in.Request.User); err != nil {
		return nil, err
	}
	res, err := h.svc.ApplyLocal(ctx, in.Request)
	if err != nil {
		for name, sentinel := range refusals {
			if errors.Is(err, sentinel) {
				return &forwardResponse{Refusal: name, Message: err.Error()}, nil
			}
		}
		return nil, err
	}
	return &forwardResponse{Result: res}, nil
}

var forwardDesc = grpc.ServiceDesc{
	ServiceName: forwardService,
	HandlerType: (*forwardServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Set",
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(forwardRequest)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := srv.(forwardServer)
			if ic == nil {
				return h.set(ctx, in)
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: forwardMethod}
			return ic(ctx, in, info, func(ctx context.Context, req any) (any, error) {
				return h.set(ctx, req.(*forwardRequest))
			})
		},
	}},
	Metadata: "likes/forward",
}

// RegisterForward serves forwarded writes for svc on s. The server must use the
// rpcjson codec (grpc.ForceServerCodecV2(rpcjson.Codec{})).
func RegisterForward(s *grpc.Server, svc *edge.Service) {
	s.RegisterService(&forwardDesc, &forwardHandler{svc: svc})
}

// Forwarder is the gRPC client side: it implements edge.Forwarder.
type Forwarder struct {
	// Resolve maps a region name to its gRPC address.
	resolve func(region string) (addr string, ok bool)
	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn
}

var _ edge.Forwarder = (*Forwarder)(nil)

// NewForwarder returns a Forwarder that finds owners with resolve.
func NewForwarder(resolve func(region string) (string, bool)) *Forwarder {
	return &Forwarder{resolve: resolve, conns: map[string]*grpc.ClientConn{}}
}

func (f *Forwarder) conn(addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		rpcjson.Reconnect(),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rpcjson.Codec{})))
	if err != nil {
		return nil, err
	}
	f.conns[addr] = c
	return c, nil
}

// Forward implements edge.Forwarder. Transport failures fail closed
// (edge.ErrFailClosed): the caller answers 503 and the client retries with the
// same key, which the owner's idempotency record makes safe.
func (f *Forwarder) Forward(ctx context.Context, owner string, req edge.Request) (edge.ForwardResult, error) {
	addr, ok := f.resolve(owner)
	if !ok {
		return edge.ForwardResult{}, fmt.Errorf("%w: owner region %q is not reachable (unknown address)", edge.ErrFailClosed, owner)
	}
	c, err := f.conn(addr)
	if err != nil {
		return edge.ForwardResult{}, fmt.Errorf("%w: dial %s: %v", edge.ErrFailClosed, owner, err)
	}
	var out forwardResponse
	if err := c.Invoke(ctx, forwardMethod, &forwardRequest{Proto: forwardProto, Request: req}, &out); err != nil {
		return edge.ForwardResult{}, fmt.Errorf("%w: forward to %s: %v", edge.ErrFailClosed, owner, err)
	}
	if out.Refusal != "" {
		sentinel, ok := refusals[out.Refusal]
		if !ok {
			sentinel = edge.ErrFailClosed
		}
		return edge.ForwardResult{}, fmt.Errorf("%w (at owner %s: %s)", sentinel, owner, out.Message)
	}
	return out.Result, nil
}

// Close closes every connection. Idempotent.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for a, c := range f.conns {
		errs = append(errs, c.Close())
		delete(f.conns, a)
	}
	return errors.Join(errs...)
}
