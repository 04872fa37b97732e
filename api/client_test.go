package api_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/likes-dev/likes/client"
)

// TestClientAgainstServer drives every call of the client package against a
// real server (each response also checked against api/openapi.yaml by
// e.client's contract transport).
func TestClientAgainstServer(t *testing.T) {
	e := newRegionEnv(t, nil)
	ctx := context.Background()
	newClient := func(tok string, opts ...client.Option) *client.Client {
		t.Helper()
		c, err := client.New(e.srv.URL, append([]client.Option{client.WithHTTPClient(checkRequests(t, e.client)), client.WithToken(tok)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	alice := newClient(e.token("alice", false))
	admin := newClient(e.token("root", true))
	if err := alice.Health(ctx); err != nil {
		t.Fatal(err)
	}

	a, err := alice.Like(ctx, "doc/1", client.IdempotencyKey("tap-1"))
	if err != nil || !a.Liked || !a.Changed || a.Key != "tap-1" || a.UserID != "alice" || a.ItemID != "doc/1" {
		t.Fatalf("like: %+v %v", a, err)
	}
	// The same key again (a retry the caller makes itself) replays the answer.
	if r, err := alice.Like(ctx, "doc/1", client.IdempotencyKey("tap-1")); err != nil || r != a {
		t.Fatalf("replay: %+v %v, want %+v", r, err, a)
	}
	// A new tap on a liked edge: unchanged.
	if r, err := alice.Like(ctx, "doc/1"); err != nil || r.Changed || r.Key == "tap-1" || r.Key == "" {
		t.Fatalf("second tap: %+v %v", r, err)
	}
	if b, err := alice.Liked(ctx, "doc/1", "alice"); err != nil || !b.Liked {
		t.Fatalf("button: %+v %v", b, err)
	}

	// The count catches up; an ETag answers NotModified.
	var cnt client.CountAnswer
	deadline := time.Now().Add(pollTimeout)
	for {
		cnt, err = alice.Count(ctx, "doc/1")
		if err != nil {
			t.Fatal(err)
		}
		if cnt.Count.Count == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("count never reached 1: %+v", cnt)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if cnt.ETag == "" || cnt.AsOf.IsZero() || cnt.Staleness(time.Now()) < 0 {
		t.Fatalf("count: %+v", cnt)
	}
	if nm, err := alice.Count(ctx, "doc/1", client.IfNoneMatch(cnt.ETag)); err != nil || !nm.NotModified {
		t.Fatalf("If-None-Match: %+v %v", nm, err)
	}

	anon, err := alice.BatchGet(ctx, []string{"doc/1", "other"}, client.Anonymous())
	if err != nil || len(anon.Items) != 2 || anon.Items[0].Liked != nil || anon.ETag == "" {
		t.Fatalf("anonymous batchGet: %+v %v", anon, err)
	}
	mine, err := alice.BatchGet(ctx, []string{"doc/1", "other"})
	if err != nil || len(mine.Items) != 2 || mine.Items[0].Liked == nil || !*mine.Items[0].Liked || *mine.Items[1].Liked || mine.CacheControl != "private, no-store" {
		t.Fatalf("authenticated batchGet: %+v %v", mine, err)
	}

	for _, u := range []string{"bob", "carol"} {
		if _, err := newClient(e.token(u, false)).Like(ctx, "doc/1"); err != nil {
			t.Fatal(err)
		}
	}
	var users []string
	cursor := ""
	for range 10 {
		p, err := alice.Likers(ctx, "doc/1", cursor, 2)
		if err != nil {
			t.Fatal(err)
		}
		users = append(users, p.UserIDs...)
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	if len(users) != 3 {
		t.Fatalf("likers %v, want alice, bob, carol", users)
	}

	// Typed errors: not yours (403), not an admin (403), erased (410).
	var ae *client.Error
	if _, err := alice.Unlike(ctx, "doc/1", "bob"); !errors.As(err, &ae) || ae.Status != http.StatusForbidden || ae.Code != client.CodeForbidden {
		t.Fatalf("unlike as another user: %v", err)
	}
	if _, err := alice.Retract(ctx, "doc/1", []string{"bob"}); !errors.As(err, &ae) || ae.Code != client.CodeForbidden {
		t.Fatalf("retract without admin: %v", err)
	}
	rr, err := admin.Retract(ctx, "doc/1", []string{"bob"})
	if err != nil || rr.Retracted != 1 || len(rr.Results) != 1 || !rr.Results[0].Changed {
		t.Fatalf("retract: %+v %v", rr, err)
	}
	if u, err := alice.Unlike(ctx, "doc/1", "alice"); err != nil || u.Liked || !u.Changed {
		t.Fatalf("unlike: %+v %v", u, err)
	}

	if _, err := alice.ErasureStatus(ctx, "alice"); !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
		t.Fatalf("status before erasure: %v", err)
	}
	job, err := alice.EraseUser(ctx, "alice")
	if err != nil || job.UserID != "alice" || (job.Status != 200 && job.Status != 202) {
		t.Fatalf("erase: %+v %v", job, err)
	}
	deadline = time.Now().Add(pollTimeout)
	for !job.Done() {
		if job, err = alice.ErasureStatus(ctx, "alice"); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("erasure never finished: %+v", job)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := alice.Like(ctx, "doc/2"); !errors.As(err, &ae) || ae.Status != http.StatusGone || ae.Code != client.CodeUserErased {
		t.Fatalf("like after erasure: %v", err)
	}
}

// TestClientSessionReadYourWrites: the client keeps the Likes-Session token
// of its writes and sends it, so its button reads come with it.
func TestClientSessionReadYourWrites(t *testing.T) {
	e := newRegionEnv(t, nil)
	ctx := context.Background()
	c, err := client.New(e.srv.URL, client.WithHTTPClient(checkRequests(t, e.client)), client.WithToken(e.token("dana", false)))
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Like(ctx, "song")
	if err != nil {
		t.Fatal(err)
	}
	if a.Session == "" {
		t.Skip("this region signs no Likes-Session tokens")
	}
	if c.Session().Token() != a.Session {
		t.Fatalf("client session %q, answer %q", c.Session().Token(), a.Session)
	}
	if b, err := c.Liked(ctx, "song", "dana"); err != nil || !b.Liked {
		t.Fatalf("button after own like: %+v %v", b, err)
	}
}
