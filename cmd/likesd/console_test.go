package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/etcdepoch"
	"github.com/likes-dev/likes/internal/console"
)

// The console test drives Debian's chromium through the Chrome DevTools
// protocol (github.com/chromedp/chromedp): it loads the page as an operator
// would, and reads the DOM the page's script built from the JSON it polls.

// chromiumPath finds the browser, or skips the test (fails it under CI).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed and CI is set: `make tools` installs Debian's chromium package")
	}
	t.Skip("chromium is not installed (apt-get install chromium, or `make tools`); skipping the operator console's browser test")
	return ""
}

// syncBuffer is a bytes.Buffer safe for the command's writes and the test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// freeBase finds n consecutive free loopback ports (likesd dev puts region i
// on port+i).
func freeBase(t *testing.T, n int, taken map[int]bool) int {
	t.Helper()
	for try := 0; try < 200; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if base+n > 65535 {
			continue
		}
		ok := true
		var held []net.Listener
		for i := 0; i < n && ok; i++ {
			if taken[base+i] {
				ok = false
				break
			}
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				ok = false
				break
			}
			held = append(held, l)
		}
		for _, l := range held {
			_ = l.Close()
		}
		if ok {
			for i := 0; i < n; i++ {
				taken[base+i] = true
			}
			return base
		}
	}
	t.Fatal("no free consecutive ports")
	return 0
}

// waitFor polls cond every 100ms until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last: %s", within, what, state)
		}
		<-tick.C
	}
}

// TestConsoleInChromium starts a real `likesd dev` (two regions, in
// process), loads /ui from its admin listener in headless chromium, waits for
// the pin map, moves a pin through the etcd directory (the `likectl pins
// move` code path) and checks that the page shows the range's new owner and
// epoch and the move in its recent events. It also checks that pprof and the
// console are on the admin listener only, never on the public port.
func TestConsoleInChromium(t *testing.T) {
	browser := chromiumPath(t)
	taken := map[int]bool{}
	httpBase, grpcBase, gossipBase, etcdBase := freeBase(t, 2, taken), freeBase(t, 2, taken), freeBase(t, 2, taken), freeBase(t, 2, taken)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"dev", "--regions", "us,eu", "--data", t.TempDir(), "--ranges", "8", "--partitions", "2",
			"--http-port", fmt.Sprint(httpBase), "--grpc-port", fmt.Sprint(grpcBase), "--gossip-port", fmt.Sprint(gossipBase),
			"--etcd-port", fmt.Sprint(etcdBase), "--admin-listen", "127.0.0.1:0", "--lease-ttl", "2s", "--log-format", "json"}, &stdout, &stderr)
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("likesd dev: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("likesd dev did not stop within 30s")
		}
	}
	defer stop()
	defer func() {
		if t.Failed() {
			t.Logf("likesd stdout:\n%s\nstderr (tail):\n%s", stdout.String(), tail(stderr.String(), 4000))
		}
	}()
	consoleRe := regexp.MustCompile(`operator console: (http://[0-9.:]+)/ui/`)
	var admin string
	waitFor(t, 60*time.Second, "likesd dev to print its console address and serve", func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("likesd dev ended: %v", err)
		default:
		}
		m := consoleRe.FindStringSubmatch(stdout.String())
		if m == nil || !strings.Contains(stdout.String(), "Ctrl-C stops cleanly") {
			return false, "no console line yet"
		}
		admin = m[1]
		return true, ""
	})
	hc := &http.Client{Timeout: 5 * time.Second}
	get := func(url string) (int, string) {
		res, err := hc.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	var snap console.Snapshot
	waitFor(t, 30*time.Second, "the console's JSON to list 8 pins and both regions live", func() (bool, string) {
		code, body := get(admin + "/ui/api/state")
		if code != 200 {
			return false, body
		}
		snap = console.Snapshot{}
		if err := json.Unmarshal([]byte(body), &snap); err != nil {
			return false, err.Error()
		}
		live := 0
		for _, r := range snap.Regions {
			if r.Live && r.Detailed {
				live++
			}
		}
		return len(snap.Pins) == 8 && live == 2, body
	})
	if code, body := get(admin + "/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("pprof on the admin listener: %d %.100s", code, body)
	}
	public := fmt.Sprintf("http://127.0.0.1:%d", httpBase)
	for _, p := range []string{"/ui/", "/ui/api/state", "/debug/pprof/"} {
		if code, _ := get(public + p); code != http.StatusNotFound {
			t.Errorf("public port answers %s with %d, want 404", p, code)
		}
	}

	// The browser.
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.Flag("headless", true))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	if _, err := chromedp.Run(bctx, chromedp.Navigate(admin+"/ui/")); err != nil {
		t.Fatalf("chromium: load %s/ui/: %v", admin, err)
	}
	type pinRow struct {
		Loaded, Region, Epoch, Events string
	}
	read := func(rng uint32) (pinRow, error) {
		js := fmt.Sprintf(`(() => {
			const row = document.getElementById("pin-%d");
			const cell = (c) => row ? (row.querySelector("."+c) || {}).textContent || "" : "";
			return {Loaded: document.body.dataset.loaded || "", Region: cell("region"), Epoch: cell("epoch"),
				Events: Array.from(document.querySelectorAll("#events li.event")).map(li => li.dataset.range+"→"+li.dataset.to+"@"+li.dataset.epoch+" "+li.textContent).join("\n")};
		})()`, rng)
		rctx, rcancel := context.WithTimeout(bctx, 5*time.Second)
		defer rcancel()
		return chromedp.Run(rctx, chromedp.Evaluate[pinRow](js))
	}
	const rng = 3
	var before pinRow
	waitFor(t, 20*time.Second, "the page to show range 3's pin", func() (bool, string) {
		var err error
		if before, err = read(rng); err != nil {
			return false, err.Error()
		}
		return before.Loaded == "1" && before.Region != "" && before.Epoch != "", fmt.Sprintf("%+v", before)
	})
	if before.Region != snap.Pins[rng].Region || before.Epoch != fmt.Sprint(snap.Pins[rng].Epoch) {
		t.Fatalf("the page shows range %d at %s epoch %s; the JSON says %s epoch %d", rng, before.Region, before.Epoch, snap.Pins[rng].Region, snap.Pins[rng].Epoch)
	}

	// Move the pin as `likectl pins move` does.
	to := "eu"
	if before.Region == "eu" {
		to = "us"
	}
	cli, err := etcdepoch.NewClient([]string{fmt.Sprintf("http://127.0.0.1:%d", etcdBase)})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ecfg, err := (epoch.Config{Ranges: 8, TTL: 2 * time.Second, MaxSkew: 500 * time.Millisecond}).WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := etcdepoch.NewDirectory(cli, ecfg)
	if err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithTimeout(ctx, 10*time.Second)
	cur, err := dir.Pin(mctx, rng)
	if err == nil {
		_, err = dir.Move(mctx, rng, cur.Epoch, to, ecfg.NotBefore(time.Now()), etcdepoch.Planned())
	}
	mcancel()
	if err != nil {
		t.Fatalf("move range %d to %s: %v", rng, to, err)
	}
	want := fmt.Sprint(cur.Epoch + 1)
	waitFor(t, 20*time.Second, "the page to show the move", func() (bool, string) {
		now, err := read(rng)
		if err != nil {
			return false, err.Error()
		}
		// The failback controller may move the range home again a few
		// seconds later (it is that region's home): then the page must list
		// the move and show a later epoch.
		listed := strings.Contains(now.Events, fmt.Sprintf("%d→%s@%s", rng, to, want))
		moved := now.Region == to && now.Epoch == want
		var ep uint64
		_, _ = fmt.Sscan(now.Epoch, &ep)
		movedOn := ep > cur.Epoch+1
		return listed && (moved || movedOn), fmt.Sprintf("%+v", now)
	})
	stop()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
