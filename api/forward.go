package api

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/internal/peerpb"
	"github.com/likes-dev/likes/internal/peertls"
	"github.com/likes-dev/likes/internal/rpcjson"
)

// The forwarding service: a region that does not own a user's range sends the
// write to the owner with the same idempotency key. The owner applies it locally
// (never forwarding again, so a stale pin cannot bounce a write around) and
// answers with the edge's register so the ingress region writes the overlay.
//
// The user was authenticated at the ingress region; the ingress region is
// authenticated by its certificate (mutual TLS, internal/peertls), and the
// owner trusts it with nothing more than a user's like or unlike, an admin's
// retraction, and one edge of a user whose erasure has already started here
// (the eraser of the region that runs the job tombstones late edges through
// the owner). Everything else in the request is the owner's to compute: the
// fingerprint, the epoch, the time and the record's expiry.
const (
	forwardService = "likes.forward.v1.Forward"
	forwardMethod  = "/" + forwardService + "/Set"
	forwardProto   = 1
)

type forwardRequest struct {
	Proto int `json:"proto"`
	// From is the ingress region; on mutual TLS it must be the caller's
	// certificate's region.
	From    string       `json:"from"`
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
	read(ctx context.Context, in *readRequest) (*readResponse, error)
	erasure(ctx context.Context, in *erasureRequest) (*erasureResponse, error)
}

// regions are the regions a caller's certificate may name now.
func (p ForwardPolicy) regions() []string {
	if p.RegionsFunc != nil {
		return p.RegionsFunc()
	}
	return p.Regions
}

// ForwardPolicy is what the owner checks of a forwarded write.
type ForwardPolicy struct {
	// Regions are the configured regions; a caller's certificate must name
	// one (empty: any the CA vouches for).
	Regions []string
	// RegionsFunc, when set, replaces Regions and is asked at every call
	// (the region registry names regions added to a running cluster).
	RegionsFunc func() []string
	// Jobs tells whether a user's erasure has started here; without it a
	// forwarded erasure write is refused.
	Jobs edge.JobStore
	// Eraser returns the region's eraser (nil until it runs), which starts
	// and reports erasures relayed from other regions.
	Eraser func() *edge.Eraser
	// MaxProtocol 1 serves only the version-1 service (a region limited for
	// a rolling upgrade); 0 serves both.
	MaxProtocol int
}

type forwardHandler struct {
	svc    *edge.Service
	policy ForwardPolicy
}

// checkForward validates a forwarded request and returns the request the owner
// applies: only the fields a client chose survive.
func (h *forwardHandler) checkForward(ctx context.Context, in *forwardRequest) (edge.Request, error) {
	bad := func(format string, args ...any) (edge.Request, error) {
		return edge.Request{}, status.Errorf(codes.InvalidArgument, "api: forwarded request: "+format, args...)
	}
	if in.Proto != forwardProto {
		return edge.Request{}, status.Errorf(codes.FailedPrecondition, "api: forward protocol %d, this region speaks %d", in.Proto, forwardProto)
	}
	if err := peertls.CheckCaller(ctx, in.From, h.policy.regions()); err != nil {
		return edge.Request{}, status.Errorf(codes.PermissionDenied, "api: forward: %v", err)
	}
	r := in.Request
	if err := ValidateID("itemId", r.Item); err != nil {
		return bad("%v", err)
	}
	if err := ValidateID("userId", r.User); err != nil {
		return bad("%v", err)
	}
	out := edge.Request{Item: r.Item, User: r.User, Target: r.Target, Kind: r.Kind}
	switch {
	case r.Kind == edge.KindFlip && (r.Target == crdt.Liked || r.Target == crdt.Unliked):
		if err := ValidateID("Idempotency-Key", r.IdemKey); err != nil {
			return bad("%v", err)
		}
		op := "unlike"
		if r.Target == crdt.Liked {
			op = "like"
		}
		out.IdemKey, out.Fingerprint = r.IdemKey, edge.Fingerprint(op, r.Item, r.User)
	case r.Kind == edge.KindRetraction && r.Target == crdt.Unliked && r.IdemKey == "":
	case r.Kind == edge.KindErasure && r.Target == crdt.Erased && r.IdemKey == "":
		if h.policy.Jobs == nil {
			return bad("erasure writes are not accepted here")
		}
		_, started, err := h.policy.Jobs.Erasure(ctx, r.User)
		if err != nil {
			return edge.Request{}, status.Errorf(codes.Unavailable, "api: forward: erasure status: %v", err)
		}
		if !started {
			return bad("an erasure write for %q, whose erasure has not started here", r.User)
		}
	default:
		return bad("kind %s to %v is not forwarded", r.Kind, r.Target)
	}
	return out, nil
}

func (h *forwardHandler) set(ctx context.Context, in *forwardRequest) (*forwardResponse, error) {
	req, err := h.checkForward(ctx, in)
	if err != nil {
		return nil, err
	}
	res, err := h.svc.ApplyLocal(ctx, req)
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

// The erasure relay: account erasure runs at the owner of the user's range
// (where the user's writes are serialized and the erasure mark blocks them),
// so another region relays a user's or an admin's erasure request, already
// authorized there, over this authenticated service.
const erasureMethod = "/" + forwardService + "/Erasure"

type erasureRequest struct {
	Proto int    `json:"proto"`
	From  string `json:"from"`
	User  string `json:"user"`
	// Start begins the erasure; false reads its job.
	Start bool `json:"start"`
}

type erasureResponse struct {
	Job     edge.ErasureJob `json:"job"`
	Found   bool            `json:"found"`
	Refusal string          `json:"refusal,omitempty"`
	Message string          `json:"message,omitempty"`
}

func (h *forwardHandler) erasure(ctx context.Context, in *erasureRequest) (*erasureResponse, error) {
	if in.Proto != forwardProto {
		return nil, status.Errorf(codes.FailedPrecondition, "api: erasure relay protocol %d, this region speaks %d", in.Proto, forwardProto)
	}
	if err := peertls.CheckCaller(ctx, in.From, h.policy.regions()); err != nil {
		return nil, status.Errorf(codes.PermissionDenied, "api: erasure relay: %v", err)
	}
	if err := ValidateID("userId", in.User); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "api: erasure relay: %v", err)
	}
	var er *edge.Eraser
	if h.policy.Eraser != nil {
		er = h.policy.Eraser()
	}
	if er == nil {
		return nil, status.Error(codes.Unavailable, "api: erasure relay: this region's eraser is not running")
	}
	if !in.Start {
		job, ok, err := er.Status(ctx, in.User)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "api: erasure status: %v", err)
		}
		return &erasureResponse{Job: job, Found: ok}, nil
	}
	job, err := er.Start(ctx, in.User)
	if err != nil && job.User == "" {
		for name, sentinel := range refusals {
			if errors.Is(err, sentinel) {
				return &erasureResponse{Refusal: name, Message: err.Error()}, nil
			}
		}
		return nil, status.Errorf(codes.Unavailable, "api: erasure: %v", err)
	}
	return &erasureResponse{Job: job, Found: true}, nil
}

// The session read: a region whose replica is older than an actor's session
// token asks the owner of the user's range for the edge (read-your-writes at
// any region, issue 16).
const readMethod = "/" + forwardService + "/Read"

type readRequest struct {
	Proto int    `json:"proto"`
	From  string `json:"from"`
	User  string `json:"user"`
	Item  string `json:"item"`
}

type readResponse struct {
	Register crdt.Register `json:"register"`
}

func (h *forwardHandler) read(ctx context.Context, in *readRequest) (*readResponse, error) {
	if in.Proto != forwardProto {
		return nil, status.Errorf(codes.FailedPrecondition, "api: read protocol %d, this region speaks %d", in.Proto, forwardProto)
	}
	if err := peertls.CheckCaller(ctx, in.From, h.policy.regions()); err != nil {
		return nil, status.Errorf(codes.PermissionDenied, "api: read: %v", err)
	}
	for _, f := range [][2]string{{"userId", in.User}, {"itemId", in.Item}} {
		if err := ValidateID(f[0], f[1]); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "api: read: %v", err)
		}
	}
	reg, err := h.svc.Button(ctx, in.User, in.Item)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "api: read: %v", err)
	}
	return &readResponse{Register: reg}, nil
}

// unary is a method of the forwarding service: it decodes a Req and calls
// handle on the registered forwardServer, through the interceptor if any.
func unary[Req any, Resp any](name, full string, handle func(forwardServer, context.Context, *Req) (*Resp, error)) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(Req)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := srv.(forwardServer)
			if ic == nil {
				return handle(h, ctx, in)
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: full}
			return ic(ctx, in, info, func(ctx context.Context, req any) (any, error) {
				return handle(h, ctx, req.(*Req))
			})
		},
	}
}

var forwardDesc = grpc.ServiceDesc{
	ServiceName: forwardService,
	HandlerType: (*forwardServer)(nil),
	Methods: []grpc.MethodDesc{
		unary("Set", forwardMethod, forwardServer.set),
		unary("Erasure", erasureMethod, forwardServer.erasure),
		unary("Read", readMethod, forwardServer.read),
	},
	Metadata: "github.com/likes-dev/likes/forward",
}

// RegisterForward serves forwarded writes for svc on s under policy. The
// server must use the rpcjson codec (grpc.ForceServerCodecV2(rpcjson.Codec{})).
func RegisterForward(s *grpc.Server, svc *edge.Service, policy ForwardPolicy) {
	h := &forwardHandler{svc: svc, policy: policy}
	s.RegisterService(&forwardDesc, h)
	if policy.MaxProtocol != 1 {
		s.RegisterService(&forwardDescV2, h)
	}
}

// Forwarder is the gRPC client side: it implements edge.Forwarder.
type Forwarder struct {
	self string
	// resolve maps a region name to its gRPC address.
	resolve func(region string) (addr string, ok bool)
	creds   func(region string) credentials.TransportCredentials
	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn
	v1Only  map[string]bool // owners' addresses that answered Unimplemented to version 2

	// MaxProtocol 1 makes the Forwarder speak only version 1 (set before
	// use); 0 tries version 2 first.
	MaxProtocol int
	// DialOptions are added to every connection (set before use): tracing
	// and the request id (tracing.DialOptions).
	DialOptions []grpc.DialOption
}

var _ edge.Forwarder = (*Forwarder)(nil)

// NewForwarder returns a Forwarder of region self that finds owners with
// resolve and calls them with creds(owner) (mutual TLS that accepts only the
// owner's certificate; nil: plaintext).
func NewForwarder(self string, resolve func(region string) (string, bool), creds func(region string) credentials.TransportCredentials) *Forwarder {
	return &Forwarder{self: self, resolve: resolve, creds: creds, conns: map[string]*grpc.ClientConn{}, v1Only: map[string]bool{}}
}

func (f *Forwarder) conn(owner, addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := owner + "|" + addr
	if c, ok := f.conns[key]; ok {
		return c, nil
	}
	creds := insecure.NewCredentials()
	if f.creds != nil {
		creds = f.creds(owner)
	}
	c, err := grpc.NewClient(addr, append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		rpcjson.Reconnect(),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rpcjson.Codec{}))}, f.DialOptions...)...)
	if err != nil {
		return nil, err
	}
	f.conns[key] = c
	return c, nil
}

// Forward implements edge.Forwarder. Transport failures fail closed
// (edge.ErrFailClosed): the caller answers 503 and the client retries with the
// same key, which the owner's idempotency record makes safe.
func (f *Forwarder) Forward(ctx context.Context, owner string, req edge.Request) (edge.ForwardResult, error) {
	var o2 peerpb.ForwardResponse
	in2 := &peerpb.ForwardRequest{Protocol: forwardProtoV2, From: f.self, Item: req.Item, User: req.User,
		Target: uint32(req.Target), Kind: uint32(req.Kind), IdemKey: req.IdemKey}
	if v1, err := f.callV2(ctx, owner, forwardMethodV2, "forward to", in2, &o2); err != nil {
		return edge.ForwardResult{}, err
	} else if !v1 {
		if err := refusal(owner, o2.GetRefusal(), o2.GetMessage()); err != nil {
			return edge.ForwardResult{}, err
		}
		if o2.GetState() > uint32(crdt.Erased) {
			return edge.ForwardResult{}, fmt.Errorf("%w: %s answered state %d", edge.ErrFailClosed, owner, o2.GetState())
		}
		return edge.ForwardResult{
			Answer: edge.Answer{Item: o2.GetItem(), User: o2.GetUser(), Liked: o2.GetLiked(), Changed: o2.GetChanged()},
			State:  crdt.State(o2.GetState()), Version: crdt.Version{Epoch: o2.GetEpoch(), Op: o2.GetOp()},
		}, nil
	}
	var out forwardResponse
	if err := f.call(ctx, owner, forwardMethod, "forward to", &forwardRequest{Proto: forwardProto, From: f.self, Request: req}, &out); err != nil {
		return edge.ForwardResult{}, err
	}
	if err := refusal(owner, out.Refusal, out.Message); err != nil {
		return edge.ForwardResult{}, err
	}
	return out.Result, nil
}

// call invokes method at owner; every transport failure fails closed
// (edge.ErrFailClosed).
func (f *Forwarder) call(ctx context.Context, owner, method, what string, in, out any) error {
	addr, ok := f.resolve(owner)
	if !ok {
		return fmt.Errorf("%w: owner region %q is not reachable (unknown address)", edge.ErrFailClosed, owner)
	}
	c, err := f.conn(owner, addr)
	if err != nil {
		return fmt.Errorf("%w: dial %s: %v", edge.ErrFailClosed, owner, err)
	}
	if err := c.Invoke(ctx, method, in, out); err != nil {
		return fmt.Errorf("%w: %s %s: %v", edge.ErrFailClosed, what, owner, err)
	}
	return nil
}

// refusal is the owner's refusal (a sentinel of the edge package by name;
// an unknown name fails closed), or nil.
func refusal(owner, name, message string) error {
	if name == "" {
		return nil
	}
	sentinel, ok := refusals[name]
	if !ok {
		sentinel = edge.ErrFailClosed
	}
	return fmt.Errorf("%w (at owner %s: %s)", sentinel, owner, message)
}

// Erasure implements ErasureRelay: it starts (start) or reads the user's
// erasure at owner. Transport failures fail closed (edge.ErrFailClosed).
func (f *Forwarder) Erasure(ctx context.Context, owner, user string, start bool) (edge.ErasureJob, bool, error) {
	var o2 peerpb.ErasureResponse
	in2 := &peerpb.ErasureRequest{Protocol: forwardProtoV2, From: f.self, User: user, Start: start}
	if v1, err := f.callV2(ctx, owner, erasureMethodV2, "erasure relay to", in2, &o2); err != nil {
		return edge.ErasureJob{}, false, err
	} else if !v1 {
		if err := refusal(owner, o2.GetRefusal(), o2.GetMessage()); err != nil {
			return edge.ErasureJob{}, false, err
		}
		j := o2.GetJob()
		job := edge.ErasureJob{User: j.GetUser(), State: j.GetState(), Edges: int(j.GetEdges()), Unliked: int(j.GetUnliked()),
			StartedAt: j.GetStartedAt(), FinishedAt: j.GetFinishedAt(), Remote: j.GetRemote(), Late: int(j.GetLate())}
		if o2.GetFound() && job.User != user {
			return edge.ErasureJob{}, false, fmt.Errorf("%w: owner %s answered the erasure of %q", edge.ErrFailClosed, owner, job.User)
		}
		return job, o2.GetFound(), nil
	}
	var out erasureResponse
	if err := f.call(ctx, owner, erasureMethod, "erasure relay to", &erasureRequest{Proto: forwardProto, From: f.self, User: user, Start: start}, &out); err != nil {
		return edge.ErasureJob{}, false, err
	}
	if err := refusal(owner, out.Refusal, out.Message); err != nil {
		return edge.ErasureJob{}, false, err
	}
	if out.Found && out.Job.User != user {
		return edge.ErasureJob{}, false, fmt.Errorf("%w: owner %s answered the erasure of %q", edge.ErrFailClosed, owner, out.Job.User)
	}
	return out.Job, out.Found, nil
}

// Read implements OwnerReader: the register of (user, item) at owner.
func (f *Forwarder) Read(ctx context.Context, owner, user, item string) (crdt.Register, error) {
	var o2 peerpb.ReadResponse
	in2 := &peerpb.ReadRequest{Protocol: forwardProtoV2, From: f.self, User: user, Item: item}
	if v1, err := f.callV2(ctx, owner, readMethodV2, "read at", in2, &o2); err != nil {
		return crdt.Register{}, err
	} else if !v1 {
		if o2.GetState() > uint32(crdt.Erased) {
			return crdt.Register{}, fmt.Errorf("%w: %s answered state %d", edge.ErrFailClosed, owner, o2.GetState())
		}
		return crdt.Register{Version: crdt.Version{Epoch: o2.GetEpoch(), Op: o2.GetOp()}, State: crdt.State(o2.GetState())}, nil
	}
	var out readResponse
	if err := f.call(ctx, owner, readMethod, "read at", &readRequest{Proto: forwardProto, From: f.self, User: user, Item: item}, &out); err != nil {
		return crdt.Register{}, err
	}
	if out.Register.State > crdt.Erased {
		return crdt.Register{}, fmt.Errorf("%w: %s answered state %d", edge.ErrFailClosed, owner, out.Register.State)
	}
	return out.Register, nil
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
