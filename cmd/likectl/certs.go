package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/likes-dev/likes/internal/peertls"
)

func certsCommand() *command {
	flags := func(fs *flag.FlagSet, issue bool) (dir *string, days *int, region, hosts *string) {
		dir = fs.String("dir", "", "folder of the CA and the certificates (required)")
		if issue {
			days = fs.Int("days", 825, "validity in days")
			region = fs.String("region", "", "the region the certificate names (required)")
			hosts = fs.String("host", "", "comma-separated DNS names or IPs to add as SANs (informational; peers check the region name)")
		} else {
			days = fs.Int("days", 3650, "validity in days")
		}
		return
	}
	return &command{
		name:    "certs",
		summary: "init (a CA and a gossip key) | issue --region NAME (a region certificate)",
		long:    "The files of the region-to-region plane's mutual TLS. Keys are written with mode 0600;\nnothing is overwritten. Keep ca.key offline.",
		subs: []*command{{
			name:    "init",
			summary: "a CA (ca.crt, ca.key) and a gossip key (gossip.key) for a new cluster",
			usage:   "certs init --dir DIR [--days 3650]",
			setup: func(fs *flag.FlagSet, e *env) runFunc {
				dir, days, _, _ := flags(fs, false)
				return func(ctx context.Context, args []string) error {
					if err := noArgs("certs init", args); err != nil {
						return err
					}
					return certsInit(*dir, *days, e.stdout)
				}
			},
		}, {
			name:    "issue",
			summary: "NAME.crt and NAME.key, signed by DIR's CA, for likesd run --tls-cert/--tls-key",
			usage:   "certs issue --dir DIR --region NAME [--host H,...] [--days 825]",
			setup: func(fs *flag.FlagSet, e *env) runFunc {
				dir, days, region, hosts := flags(fs, true)
				return func(ctx context.Context, args []string) error {
					if err := noArgs("certs issue", args); err != nil {
						return err
					}
					return certsIssue(*dir, *days, *region, *hosts, e.stdout)
				}
			},
		}},
	}
}

func certsInit(dir string, days int, stdout io.Writer) error {
	if dir == "" {
		return usagef("certs init: --dir is required")
	}
	if days <= 0 {
		return usagef("certs init: --days %d must be positive", days)
	}
	caCert, caKey := peertls.Files(dir, "ca")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	c, k, err := peertls.NewCA("likes CA", daysOr(days, 3650))
	if err != nil {
		return err
	}
	if err := peertls.WriteNew(caKey, k, 0o600); err != nil {
		return fmt.Errorf("certs init: %w", err)
	}
	if err := peertls.WriteNew(caCert, c, 0o644); err != nil {
		return fmt.Errorf("certs init: %w", err)
	}
	g := make([]byte, 32)
	if _, err := rand.Read(g); err != nil {
		return err
	}
	gk := dir + string(os.PathSeparator) + "gossip.key"
	if err := peertls.WriteNew(gk, []byte(base64.StdEncoding.EncodeToString(g)+"\n"), 0o600); err != nil {
		return fmt.Errorf("certs init: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %s, %s (keep it offline) and %s (give it to every region: --gossip-key-file)\n", caCert, caKey, gk)
	return nil
}

func certsIssue(dir string, days int, region, hosts string, stdout io.Writer) error {
	if dir == "" || region == "" {
		return usagef("certs issue: --dir and --region are required")
	}
	if days <= 0 {
		return usagef("certs issue: --days %d must be positive", days)
	}
	caCert, caKey := peertls.Files(dir, "ca")
	cp, err := os.ReadFile(caCert)
	if err != nil {
		return fmt.Errorf("certs issue: %w (run likectl certs init first)", err)
	}
	kp, err := os.ReadFile(caKey)
	if err != nil {
		return fmt.Errorf("certs issue: %w", err)
	}
	var hl []string
	if hosts != "" {
		hl = strings.Split(hosts, ",")
	}
	c, k, err := peertls.Issue(cp, kp, region, hl, daysOr(days, 825))
	if err != nil {
		return fmt.Errorf("certs issue: %w", err)
	}
	cf, kf := peertls.Files(dir, region)
	if err := peertls.WriteNew(kf, k, 0o600); err != nil {
		return fmt.Errorf("certs issue: %w", err)
	}
	if err := peertls.WriteNew(cf, c, 0o644); err != nil {
		return fmt.Errorf("certs issue: %w", err)
	}
	if _, err := peertls.Load(cf, kf, caCert); err != nil {
		return fmt.Errorf("certs issue: the new files do not load: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %s and %s: likesd run --region %s --tls-cert %s --tls-key %s --tls-ca %s\n", cf, kf, region, cf, kf, caCert)
	return nil
}

func daysOr(d, def int) time.Duration {
	if d == 0 {
		d = def
	}
	return time.Duration(d) * 24 * time.Hour
}
