package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/likes-dev/likes/epoch"
	"github.com/likes-dev/likes/epoch/etcdepoch"
	"github.com/likes-dev/likes/internal/backupfmt"
	"github.com/likes-dev/likes/pipeline"
	"github.com/likes-dev/likes/store/pebblestore"
)

// A backup folder: MANIFEST.json, one <region>/db (a Pebble checkpoint) and
// <region>/LIKES-IDENTITY per region, and etcd.snapshot (unless skipped).
const (
	manifestFile    = "MANIFEST.json"
	identityName    = "LIKES-IDENTITY" // region.identityFile
	etcdSnapName    = "etcd.snapshot"
	maxManifestSize = 1 << 20
)

// backupManifest describes a backup folder.
type backupManifest struct {
	Format     int            `json:"format"`
	CreatedMs  int64          `json:"createdMs"`
	Partitions int            `json:"partitions"`
	Regions    []backupRegion `json:"regions"`
	Etcd       string         `json:"etcd,omitempty"` // the etcd snapshot's file name
}

type backupRegion struct {
	Name string `json:"name"`
	// Heads are the region's log heads at the checkpoint, by partition.
	Heads []uint64 `json:"heads"`
}

// backup writes a consistent Pebble checkpoint of each region's folder (its
// likesd stopped: the database's lock refuses a running one), the regions'
// identity files, an etcd snapshot and a manifest.
func backup(ctx context.Context, args []string, e *env) error {
	stdout := e.stdout
	fs := flag.NewFlagSet("likectl backup", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	data := fs.String("data", "./likes-data", "the data folder (one subfolder per region, as likesd --data): an offline backup of stopped regions")
	list := fs.String("regions", "", "regions to back up offline, comma-separated (with --data)")
	urls := fs.String("url", "", "regions' HTTP addresses, comma-separated: an online backup of running regions (GET /v1/admin/backup, an admin token)")
	var ac adminClient
	ac.signer.warn = e.stderr
	ac.register(fs)
	out := fs.String("out", "", "the backup folder to create (required; must not exist)")
	parts := fs.Int("partitions", 16, "log partitions of the regions (as likesd --partitions)")
	snapEtcd := fs.Bool("etcd-snapshot", true, "also save an etcd snapshot (pins, epochs, cluster id, data sets)")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	var ef etcdFlags
	ef.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	online := *urls != ""
	switch {
	case *out == "":
		return errors.New("backup: --out is required")
	case online && *list != "":
		return errors.New("backup: --url (online) and --regions (offline) exclude each other")
	case !online && *list == "":
		return errors.New("backup: --regions (offline, with --data) or --url (online) is required")
	}
	var names []string
	if !online {
		var err error
		if names, err = regionList(*list); err != nil {
			return fmt.Errorf("backup: %w", err)
		}
	}
	if _, err := os.Stat(*out); err == nil {
		return fmt.Errorf("backup: %s exists; a backup goes to a new folder", *out)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	m := backupManifest{Format: 1, CreatedMs: time.Now().UnixMilli(), Partitions: *parts}
	pr := newProgress(e, *quiet, "backup")
	if online {
		if err := backupOnline(ctx, &ac, strings.Split(*urls, ","), *out, &m, pr, stdout); err != nil {
			return err
		}
	}
	for i, name := range names {
		start := e.clock.Now()
		pr.step(i, len(names), true, "regions checkpointed; "+name+" next")
		stop := pr.ticking() // one checkpoint is one long call: say it is still running
		br, err := backupRegionFolder(filepath.Join(*data, name), filepath.Join(*out, name), name, *parts)
		stop()
		if err != nil {
			return fmt.Errorf("backup %s: %w", name, err)
		}
		m.Regions = append(m.Regions, br)
		size, _ := dirSize(filepath.Join(*out, name))
		pr.step(i+1, len(names), true, fmt.Sprintf("regions checkpointed (%s: %d bytes)", name, size))
		fmt.Fprintf(stdout, "region %s: checkpoint in %v\n", name, e.clock.Now().Sub(start).Round(time.Millisecond))
	}
	if *snapEtcd {
		cli, err := etcdepoch.NewClientWith(ef.config())
		if err != nil {
			return fmt.Errorf("backup: etcd: %w", err)
		}
		defer cli.Close()
		rc, err := cli.Snapshot(ctx)
		if err != nil {
			return fmt.Errorf("backup: etcd snapshot: %w", err)
		}
		defer rc.Close()
		f, err := os.Create(filepath.Join(*out, etcdSnapName))
		if err != nil {
			return err
		}
		ep := newProgress(e, *quiet, "backup: etcd snapshot")
		n, err := io.Copy(&progressWriter{w: f, pr: ep}, rc)
		ep.step(int(n), -1, true, "bytes")
		if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
			return fmt.Errorf("backup: etcd snapshot: %w", err)
		}
		m.Etcd = etcdSnapName
		fmt.Fprintf(stdout, "etcd snapshot: %d bytes\n", n)
	}
	b, _ := json.MarshalIndent(m, "", "  ") // cannot fail: plain struct
	if err := writeSynced(filepath.Join(*out, manifestFile), append(b, '\n')); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backup of %d regions in %s\n", len(m.Regions), *out)
	return nil
}

// backupOnline asks each running region for a checkpoint stream and
// unpacks it as an offline backup would have written it: <out>/<region>/db
// and its identity. The stream is validated (internal/backupfmt) before
// anything is taken for a backup; the regions must agree on the partitions.
func backupOnline(ctx context.Context, ac *adminClient, urls []string, out string, m *backupManifest, pr *progress, stdout io.Writer) error {
	hc, err := ac.client()
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, u := range urls {
		u = strings.TrimRight(strings.TrimSpace(u), "/")
		start := time.Now()
		pr.step(i, len(urls), true, "regions streamed; "+u+" next")
		incoming := filepath.Join(out, fmt.Sprintf(".incoming-%d", i))
		reg, n, err := fetchBackup(ctx, ac, hc, u, incoming, pr)
		if err != nil {
			_ = os.RemoveAll(incoming) // a refused stream is not a backup
			return fmt.Errorf("backup %s: %w", u, err)
		}
		if seen[reg.Name] {
			return fmt.Errorf("backup %s: region %s twice (two addresses of one region?)", u, reg.Name)
		}
		seen[reg.Name] = true
		if len(m.Regions) == 0 {
			m.Partitions = reg.Partitions
		} else if reg.Partitions != m.Partitions {
			return fmt.Errorf("backup %s: region %s has %d partitions, the others %d", u, reg.Name, reg.Partitions, m.Partitions)
		}
		if err := os.Rename(incoming, filepath.Join(out, reg.Name)); err != nil {
			return fmt.Errorf("backup %s: %w", u, err)
		}
		m.Regions = append(m.Regions, backupRegion{Name: reg.Name, Heads: reg.Heads})
		pr.step(i+1, len(urls), true, fmt.Sprintf("regions streamed (%s: %d bytes)", reg.Name, n))
		fmt.Fprintf(stdout, "region %s: online checkpoint from %s in %v\n", reg.Name, u, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

func fetchBackup(ctx context.Context, ac *adminClient, hc *http.Client, url, dst string, pr *progress) (backupfmt.Region, int64, error) {
	var reg backupfmt.Region
	// The token is checked when the request starts, not while it streams.
	tok, err := ac.sign("likectl", true, time.Minute)
	if err != nil {
		return reg, 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/admin/backup", nil)
	if err != nil {
		return reg, 0, usagef("--url %s: %v", url, err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := hc.Do(req)
	if err != nil {
		return reg, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return reg, 0, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-tar" {
		return reg, 0, fmt.Errorf("answered %q, not a backup stream (application/x-tar)", ct)
	}
	var total int64
	reg, err = backupfmt.Extract(resp.Body, dst, func(files int, bytes int64) {
		total = bytes
		pr.step(files, -1, false, fmt.Sprintf("files received (%d bytes)", bytes))
	})
	return reg, total, err
}

func backupRegionFolder(src, dst, name string, parts int) (backupRegion, error) {
	br := backupRegion{Name: name}
	if _, err := os.Stat(src); err != nil {
		return br, fmt.Errorf("no data folder: %w", err)
	}
	st, err := pebblestore.Open(pebblestore.Options{Dir: src, Region: name, Partitions: parts, CacheBytes: 8 << 20})
	if err != nil {
		return br, fmt.Errorf("open (is its likesd stopped?): %w", err)
	}
	defer st.Close()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return br, err
	}
	if err := st.Checkpoint(filepath.Join(dst, "db")); err != nil {
		return br, err
	}
	for p := 0; p < parts; p++ {
		_, h, err := st.Read(context.Background(), uint32(p), ^uint64(0)-1, 1)
		if err != nil {
			return br, err
		}
		br.Heads = append(br.Heads, h.Pos)
	}
	id, err := os.ReadFile(filepath.Join(src, identityName))
	if err == nil {
		err = writeSynced(filepath.Join(dst, identityName), id)
	} else if errors.Is(err, os.ErrNotExist) {
		err = nil // a folder from before identities: restored without one
	}
	return br, err
}

// restore installs one region's folder from a backup into an empty data
// folder, folds its restored log and marks it to rebuild from its peers: its
// likesd, once started, refuses writes until every peer has sent it a rebuild
// snapshot (the peers hold what it did after the backup), then converges.
func restore(args []string, e *env) error {
	stdout := e.stdout
	fs := flag.NewFlagSet("likectl restore", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	from := fs.String("from", "", "the backup folder (required)")
	data := fs.String("data", "./likes-data", "the data folder to restore into (as likesd --data)")
	name := fs.String("region", "", "the region to restore (required)")
	peerList := fs.String("peers", "", "the regions it rebuilds from, comma-separated (default: the backup's other regions)")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *from == "" || *name == "" {
		return errors.New("restore: --from and --region are required")
	}
	m, err := readManifest(filepath.Join(*from, manifestFile))
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	found := false
	var peers []string
	for _, r := range m.Regions {
		if r.Name == *name {
			found = true
		} else {
			peers = append(peers, r.Name)
		}
	}
	if !found {
		return fmt.Errorf("restore: the backup has no region %q", *name)
	}
	if *peerList != "" {
		if peers, err = regionList(*peerList); err != nil {
			return fmt.Errorf("restore: --peers: %w", err)
		}
	}
	dst := filepath.Join(*data, *name)
	if ents, err := os.ReadDir(dst); err == nil && len(ents) > 0 {
		return fmt.Errorf("restore: %s is not empty; restore into an empty folder (move the old one away)", dst)
	}
	src := filepath.Join(*from, *name)
	if err := copyDir(filepath.Join(src, "db"), dst, newProgress(e, *quiet, "restore: copy")); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if id, err := os.ReadFile(filepath.Join(src, identityName)); err == nil {
		if err := writeSynced(filepath.Join(dst, identityName), id); err != nil {
			return err
		}
	}
	st, err := pebblestore.Open(pebblestore.Options{Dir: dst, Region: *name, Partitions: m.Partitions, CacheBytes: 8 << 20})
	if err != nil {
		return fmt.Errorf("restore: open the restored folder: %w", err)
	}
	defer st.Close()
	if err := foldLog(st, newProgress(e, *quiet, "restore: fold log partitions")); err != nil {
		return fmt.Errorf("restore: fold the restored log: %w", err)
	}
	if len(peers) > 0 {
		if err := st.MarkRebuild(peers); err != nil {
			return fmt.Errorf("restore: %w", err)
		}
	}
	if err := st.MarkRestored(); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	fmt.Fprintf(stdout, "restored region %s into %s from a backup of %s; it rebuilds from %s once started (writes refused until then)\n",
		*name, dst, time.UnixMilli(m.CreatedMs).UTC().Format(time.RFC3339), strings.Join(peers, ","))
	if m.Etcd != "" {
		fmt.Fprintf(stdout, "the etcd snapshot %s is not restored: a live cluster keeps its etcd; restore it with etcdutl only if etcd was lost too\n",
			filepath.Join(*from, m.Etcd))
	}
	return nil
}

// foldLog runs the store's aggregators to its log head (a restored
// checkpoint may hold events its aggregators had not folded yet).
func foldLog(st *pebblestore.Store, pr *progress) error {
	events := 0
	for p := 0; p < st.Partitions(); p++ {
		a, err := pipeline.NewAggregator(pipeline.Config{Region: st.Region(), Log: st, Cells: st}, uint32(p))
		if err != nil {
			return err
		}
		for i := 0; ; i++ {
			if i > 1<<20 {
				return fmt.Errorf("partition %d never caught up", p)
			}
			n, caught, err := a.Step(context.Background())
			if err != nil {
				return err
			}
			events += n
			if caught {
				break
			}
		}
		pr.step(p+1, st.Partitions(), p+1 == st.Partitions(), fmt.Sprintf("(%d events folded)", events))
	}
	return nil
}

func readManifest(path string) (backupManifest, error) {
	var m backupManifest
	f, err := os.Open(path)
	if err != nil {
		return m, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxManifestSize+1))
	if err != nil {
		return m, err
	}
	if len(b) > maxManifestSize {
		return m, fmt.Errorf("%s is larger than %d bytes: not a manifest", path, maxManifestSize)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, fmt.Errorf("%s is not a valid manifest: %w", path, err)
	}
	if m.Format != 1 || m.Partitions < 1 || m.Partitions > 4096 || len(m.Regions) == 0 {
		return m, fmt.Errorf("%s: format %d, %d partitions, %d regions: not a backup this likectl restores", path, m.Format, m.Partitions, len(m.Regions))
	}
	for _, r := range m.Regions {
		if err := epoch.ValidRegion(r.Name); err != nil || strings.ContainsAny(r.Name, `\.`) {
			return m, fmt.Errorf("%s: region %q is not a valid name", path, r.Name)
		}
	}
	if m.Etcd != "" && m.Etcd != etcdSnapName {
		return m, fmt.Errorf("%s: etcd snapshot %q is not %q", path, m.Etcd, etcdSnapName)
	}
	return m, nil
}

func regionList(s string) ([]string, error) {
	var out []string
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if err := epoch.ValidRegion(n); err != nil || strings.ContainsAny(n, `\.`) {
			return nil, fmt.Errorf("region %q is not a valid name", n)
		}
		out = append(out, n)
	}
	return out, nil
}

// copyDir copies the regular files of src into dst (created; a checkpoint
// has no subfolders), each synced, then dst synced; pr hears files and bytes.
func copyDir(src, dst string, pr *progress) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	var bytes int64
	for i, e := range ents {
		if !e.Type().IsRegular() {
			return fmt.Errorf("%s: unexpected entry %s in a checkpoint", src, e.Name())
		}
		n, err := copySynced(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()))
		if err != nil {
			return err
		}
		bytes += n
		pr.step(i+1, len(ents), i+1 == len(ents), fmt.Sprintf("files (%d bytes)", bytes))
	}
	d, err := os.Open(dst)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// copySynced streams one file to a new one (never a whole SSTable in
// memory), synced.
func copySynced(src, dst string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	return n, errors.Join(err, out.Sync(), out.Close())
}

// dirSize sums the sizes of a folder's regular files, recursively.
func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	return n, err
}

// progressWriter reports the bytes written through it (by time only).
type progressWriter struct {
	w  io.Writer
	pr *progress
	n  int
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.n += n
	p.pr.step(p.n, -1, false, "bytes")
	return n, err
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return errors.Join(err, f.Sync(), f.Close())
}

// backupCommand dispatches `likectl backup` and `likectl restore`.
func backupCommand(ctx context.Context, args []string, e *env) error {
	if args[0] == "restore" {
		return restore(args[1:], e)
	}
	return backup(ctx, args[1:], e)
}

func init() {
	for _, c := range []struct{ name, summary, usage string }{
		{"backup", "a consistent copy of regions' stores and etcd, with a manifest: running regions (--url) or stopped ones (--data --regions)",
			"backup --url URL1,URL2 --out DIR [--etcd URL] [--etcd-snapshot=false] [--quiet]\n       likectl backup --data DIR --regions R1,R2 --out DIR [--etcd URL] [--etcd-snapshot=false] [--quiet]"},
		{"restore", "restore one region's folder from a backup; it then rebuilds from its peers (--from --data --region)",
			"restore --from DIR --data DIR --region NAME [--peers R1,R2] [--quiet]"},
	} {
		name, summary, usage := c.name, c.summary, c.usage
		extraCommands = append(extraCommands, &command{
			name:     name,
			summary:  summary,
			rawFlags: []string{"data", "regions", "out", "from", "region", "partitions", "etcd", "etcd-snapshot", "dial-timeout", "quiet", "peers", "url", "private-key", "iss", "aud", "kid", "http-cacert"},
			raw: func(ctx context.Context, args []string, e *env) error {
				full := append([]string{name}, args...)
				if hasHelp(args) { // help on stdout, exit 0, no network
					fmt.Fprintf(e.stdout, "Usage: likectl %s\n\n%s\n\nFlags:\n", usage, summary)
					err := backupCommand(ctx, []string{name, "-h"}, &env{stdout: e.stdout, stderr: e.stdout, clock: e.clock})
					if err != nil && !errors.Is(err, flag.ErrHelp) {
						return err
					}
					return nil
				}
				err := backupCommand(ctx, full, e)
				if err != nil && isFlagError(err) {
					return usagef("%v (see likectl %s -h)", err, name)
				}
				return err
			},
		})
	}
}
