package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"sort"
	"sync"
	"time"

	"github.com/likes-dev/likes/internal/console"
	"github.com/likes-dev/likes/region"
)

// adminFlags are the admin listener's: pprof and the operator console, never
// on the public HTTP port.
type adminFlags struct {
	listen, cert, key string
}

// devAdminListen is `likesd dev`'s admin address (run: off unless given).
const devAdminListen = "127.0.0.1:6060"

func (a *adminFlags) register(fs *flag.FlagSet, dev bool) {
	def, what := "", "off"
	if dev {
		def, what = devAdminListen, devAdminListen
	}
	fs.StringVar(&a.listen, "admin-listen", def, "address of the admin listener: /debug/pprof/ and the operator console /ui (default "+what+"; empty: off). It has no authentication: keep it on loopback or a private network")
	fs.StringVar(&a.cert, "admin-tls-cert", "", "PEM certificate of the admin listener (with --admin-tls-key it serves HTTPS only)")
	fs.StringVar(&a.key, "admin-tls-key", "", "PEM private key of --admin-tls-cert")
}

func (a *adminFlags) validate() error {
	if (a.cert == "") != (a.key == "") {
		return fmt.Errorf("%w: --admin-tls-cert and --admin-tls-key go together", errObs)
	}
	if a.listen == "" {
		if a.cert != "" {
			return fmt.Errorf("%w: --admin-tls-cert needs --admin-listen", errObs)
		}
		return nil
	}
	if _, _, err := net.SplitHostPort(a.listen); err != nil {
		return fmt.Errorf("%w: --admin-listen %q: want host:port: %v", errObs, a.listen, err)
	}
	return nil
}

// adminServer is the running admin listener and its console.
type adminServer struct {
	srv     *http.Server
	console *console.Console
	done    chan struct{}
	url     string
	once    sync.Once
}

// serveAdmin starts the admin listener over regs (nothing when
// --admin-listen is empty) and prints its address to stdout.
func (ob *observability) serveAdmin(a adminFlags, regs []*region.Region, stdout io.Writer) error {
	if a.listen == "" {
		return nil
	}
	var tc *tls.Config
	if a.cert != "" {
		kp, err := tls.LoadX509KeyPair(a.cert, a.key)
		if err != nil {
			return fmt.Errorf("%w: --admin-tls-cert/--admin-tls-key: %w", errObs, err)
		}
		tc = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{kp}}
	}
	host, _, _ := net.SplitHostPort(a.listen)
	if tc == nil && !isLoopback(host) {
		ob.logger.Warn("the admin listener (pprof, operator console) is beyond loopback without TLS and has no authentication; anyone who reaches it reads this process's state", "admin", a.listen)
	}
	cons, err := console.Start(console.Config{Source: clusterSource(regs), Logger: ob.logger})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", a.listen)
	if err != nil {
		cons.Close()
		return fmt.Errorf("admin listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/ui", cons.Handler())
	mux.Handle("/ui/", cons.Handler())
	mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
	s := &adminServer{console: cons, done: make(chan struct{}),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: maxHeaderBytes}}
	scheme := "http"
	if tc != nil {
		scheme = "https"
		s.srv.TLSConfig = tc
		ln = tls.NewListener(ln, tc)
	}
	s.url = scheme + "://" + ln.Addr().String()
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			ob.logger.Warn("admin listener stopped", "err", err)
		}
	}()
	ob.admin = s
	fmt.Fprintf(stdout, "  operator console: %s/ui/   profiles: %s/debug/pprof/\n", s.url, s.url)
	return nil
}

// close stops the console, then the listener. Idempotent.
func (s *adminServer) close() {
	s.once.Do(func() {
		s.console.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(ctx)
		<-s.done
	})
}

// clusterSource is the console's view of this process's regions: each in
// detail, the pin map from the first with a cluster, and the other regions
// of the cluster from their registrations in etcd.
func clusterSource(regs []*region.Region) console.Source {
	return console.SourceFunc(func(ctx context.Context) console.State {
		var st console.State
		var live map[string]bool
		var info map[string]bool // draining, by region
		for _, r := range regs {
			pins, regsLive, err := r.ConsolePins(ctx)
			if err != nil {
				st.Errors = append(st.Errors, fmt.Sprintf("region %s: pins: %v", r.Name(), err))
				continue
			}
			if pins == nil {
				continue
			}
			st.Pins = pins
			if regsLive != nil {
				live, info = map[string]bool{}, map[string]bool{}
				for name, ri := range regsLive {
					live[name], info[name] = true, ri.Draining
				}
			}
			break
		}
		st.Live = live
		seen := map[string]bool{}
		for _, r := range regs {
			v := r.ConsoleView(ctx)
			if live != nil {
				v.Live, v.Draining = live[v.Name], info[v.Name]
			}
			seen[v.Name] = true
			st.Regions = append(st.Regions, v)
		}
		// Regions known from the pins or etcd but not run by this process.
		others := map[string]bool{}
		for _, p := range st.Pins {
			others[p.Region], others[p.Home] = true, true
		}
		for name := range live {
			others[name] = true
		}
		var names []string
		for name := range others {
			if name != "" && !seen[name] {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		for _, name := range names {
			v := console.RegionView{Name: name, Live: live[name], Draining: info[name], LeaseAgeMs: -1}
			for _, p := range st.Pins {
				if p.Region == name {
					v.PinsOwned++
					if p.CatchingUp {
						v.CatchingUp++
					}
				}
			}
			st.Regions = append(st.Regions, v)
		}
		return st
	})
}

// regionsOf lists the served regions.
func regionsOf(all []*served) []*region.Region {
	out := make([]*region.Region, 0, len(all))
	for _, s := range all {
		out = append(out, s.r)
	}
	return out
}
