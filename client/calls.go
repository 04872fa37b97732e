package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// WriteAnswer is the answer of a like or unlike.
type WriteAnswer struct {
	ItemID  string `json:"itemId"`
	UserID  string `json:"userId"`
	Liked   bool   `json:"liked"`   // the edge's state after the write
	Changed bool   `json:"changed"` // false for a repeat (or a replayed key)
	// Key is the Idempotency-Key every attempt of the call sent.
	Key string `json:"-"`
	// Session is the Likes-Session token the answer carried ("" none).
	Session string `json:"-"`
}

// Like likes item as the token's user. Every attempt sends the same
// Idempotency-Key (IdempotencyKey, or one generated for this call).
func (c *Client) Like(ctx context.Context, item string, o ...CallOption) (WriteAnswer, error) {
	if err := validID("item id", item); err != nil {
		return WriteAnswer{}, err
	}
	return c.write(ctx, "like", http.MethodPost, itemPath(item)+"/likes", opts(o))
}

// Unlike unlikes item as user (who must be the token's user).
func (c *Client) Unlike(ctx context.Context, item, user string, o ...CallOption) (WriteAnswer, error) {
	if err := validID("item id", item); err != nil {
		return WriteAnswer{}, err
	}
	if err := validID("user id", user); err != nil {
		return WriteAnswer{}, err
	}
	return c.write(ctx, "unlike", http.MethodDelete, itemPath(item)+"/likes/"+escape(user), opts(o))
}

func (c *Client) write(ctx context.Context, op, method, path string, co callOpts) (WriteAnswer, error) {
	key := co.key
	if key == "" {
		key = c.newKey()
	}
	if err := validID("Idempotency-Key", key); err != nil {
		return WriteAnswer{}, err
	}
	res, err := c.do(ctx, request{op: op, method: method, path: path, key: key, authed: true}, co)
	if err != nil {
		return WriteAnswer{Key: key}, err
	}
	var a WriteAnswer
	if err := decode(op, res, &a); err != nil {
		return WriteAnswer{Key: key}, err
	}
	a.Key, a.Session = key, res.header.Get("Likes-Session")
	return a, nil
}

// Count is an item's like count.
type Count struct {
	ItemID string    `json:"itemId"`
	Count  int64     `json:"count"`
	AsOf   time.Time `json:"asOf"` // every write committed before it is in Count
	// StalenessMs is now − asOf at the origin when the body was made; a
	// cached copy's is frozen: use Staleness.
	StalenessMs int64  `json:"stalenessMs"`
	Liked       *bool  `json:"liked,omitempty"`       // BatchGet with a token only
	LikedSource string `json:"likedSource,omitempty"` // "owner", "session" or ""
}

// Staleness is how old the count is at now (from AsOf, right for a cached
// answer too).
func (c Count) Staleness(now time.Time) time.Duration { return now.Sub(c.AsOf) }

// CountAnswer is Count's answer with its cache validator.
type CountAnswer struct {
	Count
	ETag string
	// NotModified: the IfNoneMatch ETag still holds (Count is empty).
	NotModified bool
	// CacheControl is the answer's Cache-Control.
	CacheControl string
}

// Count reads an item's count (public, CDN-cacheable).
func (c *Client) Count(ctx context.Context, item string, o ...CallOption) (CountAnswer, error) {
	if err := validID("item id", item); err != nil {
		return CountAnswer{}, err
	}
	res, err := c.do(ctx, request{op: "count", method: http.MethodGet, path: itemPath(item) + "/count"}, opts(o))
	if err != nil {
		return CountAnswer{}, err
	}
	out := CountAnswer{ETag: res.header.Get("ETag"), CacheControl: res.header.Get("Cache-Control")}
	if res.status == http.StatusNotModified {
		out.NotModified = true
		return out, nil
	}
	if err := decode("count", res, &out.Count); err != nil {
		return CountAnswer{}, err
	}
	return out, nil
}

// Button is whether a user likes an item.
type Button struct {
	ItemID string `json:"itemId"`
	UserID string `json:"userId"`
	Liked  bool   `json:"liked"`
	Source string `json:"source,omitempty"` // "owner", "session" or "" (the local replica)
}

// Liked reads user's button on item, with the client's session token (so it
// is never older than the client's own acknowledged writes).
func (c *Client) Liked(ctx context.Context, item, user string, o ...CallOption) (Button, error) {
	if err := validID("item id", item); err != nil {
		return Button{}, err
	}
	if err := validID("user id", user); err != nil {
		return Button{}, err
	}
	res, err := c.do(ctx, request{op: "button", method: http.MethodGet, path: itemPath(item) + "/likes/" + escape(user)}, opts(o))
	if err != nil {
		return Button{}, err
	}
	var b Button
	return b, decode("button", res, &b)
}

// LikersPage is one page of who liked an item.
type LikersPage struct {
	ItemID     string   `json:"itemId"`
	UserIDs    []string `json:"userIds"`
	NextCursor string   `json:"nextCursor"` // "" on the last page
}

// MaxLikersLimit bounds a Likers page.
const MaxLikersLimit = 500

// Likers reads one page of the users who like item: cursor "" is the first
// page, then the previous page's NextCursor; limit 0 takes the server's
// default (50), else 1..MaxLikersLimit.
func (c *Client) Likers(ctx context.Context, item, cursor string, limit int, o ...CallOption) (LikersPage, error) {
	if err := validID("item id", item); err != nil {
		return LikersPage{}, err
	}
	if limit < 0 || limit > MaxLikersLimit {
		return LikersPage{}, fmt.Errorf("%w: limit %d not in [1, %d]", ErrInvalidArgument, limit, MaxLikersLimit)
	}
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := itemPath(item) + "/likes"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	res, err := c.do(ctx, request{op: "likers", method: http.MethodGet, path: path}, opts(o))
	if err != nil {
		return LikersPage{}, err
	}
	var p LikersPage
	return p, decode("likers", res, &p)
}

// MaxBatchItems bounds a BatchGet.
const MaxBatchItems = 100

// BatchAnswer is BatchGet's answer.
type BatchAnswer struct {
	Items        []Count `json:"items"` // in the order asked
	ETag         string  `json:"-"`
	NotModified  bool    `json:"-"`
	CacheControl string  `json:"-"`
}

// BatchGet reads the counts of 1..MaxBatchItems items; with the client's
// token (unless Anonymous) each also carries the caller's Liked.
func (c *Client) BatchGet(ctx context.Context, items []string, o ...CallOption) (BatchAnswer, error) {
	if len(items) == 0 || len(items) > MaxBatchItems {
		return BatchAnswer{}, fmt.Errorf("%w: %d items, want 1..%d", ErrInvalidArgument, len(items), MaxBatchItems)
	}
	for _, it := range items {
		if err := validID("item id", it); err != nil {
			return BatchAnswer{}, err
		}
	}
	body, _ := json.Marshal(map[string]any{"itemIds": items})
	res, err := c.do(ctx, request{op: "batchGet", method: http.MethodPost, path: "/v1/likes:batchGet", body: body, authed: true}, opts(o))
	if err != nil {
		return BatchAnswer{}, err
	}
	out := BatchAnswer{ETag: res.header.Get("ETag"), CacheControl: res.header.Get("Cache-Control")}
	if res.status == http.StatusNotModified {
		out.NotModified = true
		return out, nil
	}
	if err := decode("batchGet", res, &out); err != nil {
		return BatchAnswer{}, err
	}
	return out, nil
}

// ErasureJob is the state of a user's erasure.
type ErasureJob struct {
	UserID       string `json:"userId"`
	State        string `json:"state"` // "running" or "done"
	EdgesErased  int    `json:"edgesErased"`
	LikesRemoved int    `json:"likesRemoved"`
	StartedAtMs  int64  `json:"startedAtMs"`
	FinishedAtMs int64  `json:"finishedAtMs,omitempty"`
	Remote       bool   `json:"remote,omitempty"`
	LateArrivals int    `json:"lateArrivals,omitempty"`
	// Status is the HTTP status: 202 while running, 200 once done.
	Status int `json:"-"`
}

// Done reports whether the erasure has finished.
func (j ErasureJob) Done() bool { return j.State == "done" }

// EraseUser starts (or re-starts) the erasure of user's account (the user
// themself or an admin token). Idempotent.
func (c *Client) EraseUser(ctx context.Context, user string, o ...CallOption) (ErasureJob, error) {
	return c.erasure(ctx, "eraseUser", http.MethodDelete, user, "", o)
}

// ErasureStatus reads the state of user's erasure (404 *Error: none).
func (c *Client) ErasureStatus(ctx context.Context, user string, o ...CallOption) (ErasureJob, error) {
	return c.erasure(ctx, "erasureStatus", http.MethodGet, user, "/erasure", o)
}

func (c *Client) erasure(ctx context.Context, op, method, user, suffix string, o []CallOption) (ErasureJob, error) {
	if err := validID("user id", user); err != nil {
		return ErasureJob{}, err
	}
	res, err := c.do(ctx, request{op: op, method: method, path: "/v1/users/" + escape(user) + suffix, authed: true}, opts(o))
	if err != nil {
		return ErasureJob{}, err
	}
	var j ErasureJob
	if err := decode(op, res, &j); err != nil {
		return ErasureJob{}, err
	}
	j.Status = res.status
	return j, nil
}

// RetractResult is one user's outcome of a retraction.
type RetractResult struct {
	UserID  string `json:"userId"`
	Changed bool   `json:"changed"`
	Error   string `json:"error,omitempty"` // an error code
}

// RetractAnswer is Retract's answer.
type RetractAnswer struct {
	ItemID    string          `json:"itemId"`
	Retracted int             `json:"retracted"`
	Results   []RetractResult `json:"results"`
}

// MaxRetractUsers bounds a Retract.
const MaxRetractUsers = 1000

// Retract retracts users' likes of item (an admin token).
func (c *Client) Retract(ctx context.Context, item string, users []string, o ...CallOption) (RetractAnswer, error) {
	if err := validID("item id", item); err != nil {
		return RetractAnswer{}, err
	}
	if len(users) == 0 || len(users) > MaxRetractUsers {
		return RetractAnswer{}, fmt.Errorf("%w: %d users, want 1..%d", ErrInvalidArgument, len(users), MaxRetractUsers)
	}
	for _, u := range users {
		if err := validID("user id", u); err != nil {
			return RetractAnswer{}, err
		}
	}
	body, _ := json.Marshal(map[string]any{"itemId": item, "userIds": users})
	res, err := c.do(ctx, request{op: "retract", method: http.MethodPost, path: "/v1/admin/retractions", body: body, authed: true}, opts(o))
	if err != nil {
		return RetractAnswer{}, err
	}
	var a RetractAnswer
	return a, decode("retract", res, &a)
}

// Health checks GET /healthz.
func (c *Client) Health(ctx context.Context, o ...CallOption) error {
	_, err := c.do(ctx, request{op: "healthz", method: http.MethodGet, path: "/healthz"}, opts(o))
	return err
}
