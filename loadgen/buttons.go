package loadgen

import (
	"context"
	"time"

	"github.com/likes-dev/likes/client"
)

// The actor's Likes-Session token (see internal/sessiontok) is kept per user
// from the write answers and sent on every later request, as a client SDK
// does (client.SessionToken).

// ButtonReport is how the button reads after writes went (Config.ButtonURL).
type ButtonReport struct {
	Reads int64 `json:"reads"`
	// Wrong counts reads that did not show the write just made (must be 0).
	Wrong  int64 `json:"wrong"`
	Errors int64 `json:"errors"`
	// BySource counts where the region answered from: local (its replica had
	// caught up), owner (it asked the owner), session (the token alone).
	BySource map[string]int64   `json:"bySource"`
	Latency  map[string]Latency `json:"latencyBySource"`
	hists    map[string]*Histogram
}

func (b *ButtonReport) hist(src string) *Histogram {
	if b.hists == nil {
		b.hists = map[string]*Histogram{}
	}
	if b.hists[src] == nil {
		b.hists[src] = &Histogram{}
	}
	return b.hists[src]
}

type buttonResult struct {
	reads, wrong, errs int64
	by                 map[string]int64
	lat                map[string]*Histogram
}

// readButton reads u's button on item at ButtonURL with tok and checks it
// shows the write (liked).
func (r *runner) readButton(ctx context.Context, u user, item, tok string, liked bool, res *buttonResult) {
	if res.by == nil {
		res.by, res.lat = map[string]int64{}, map[string]*Histogram{}
	}
	t0 := time.Now()
	b, err := r.buttons.Liked(ctx, item, u.id, client.SessionToken(tok))
	if err != nil {
		res.errs++
		return
	}
	d := time.Since(t0)
	src := b.Source
	if src == "" {
		src = "local"
	}
	res.reads++
	res.by[src]++
	if res.lat[src] == nil {
		res.lat[src] = &Histogram{}
	}
	res.lat[src].Record(d)
	if b.Liked != liked {
		res.wrong++
	}
}

// mergeButtons folds one worker's button reads into the phase's report.
func mergeButtons(into *ButtonReport, res *buttonResult) *ButtonReport {
	if res.reads == 0 && res.errs == 0 {
		return into
	}
	if into == nil {
		into = &ButtonReport{BySource: map[string]int64{}, Latency: map[string]Latency{}}
	}
	into.Reads += res.reads
	into.Wrong += res.wrong
	into.Errors += res.errs
	for k, v := range res.by {
		into.BySource[k] += v
	}
	for k, h := range res.lat {
		into.hist(k).Merge(h)
		into.Latency[k] = summarize(into.hist(k))
	}
	return into
}
