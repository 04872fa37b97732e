package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/likes-dev/likes/internal/peertls"
)

const certsUsage = `usage:
  likectl certs init  --dir DIR [--days 3650]
      a CA (ca.crt, ca.key) and a gossip key (gossip.key) for a new cluster
  likectl certs issue --dir DIR --region NAME [--host H,...] [--days 825]
      NAME.crt and NAME.key, signed by DIR's CA, for likesd run --tls-cert/--tls-key
Keys are written with mode 0600; nothing is overwritten. Keep ca.key offline.`

// certs makes the files of the region-to-region plane's mutual TLS.
func certs(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "init" && args[0] != "issue") {
		fmt.Fprintln(stderr, certsUsage)
		return errors.New("certs: want init or issue")
	}
	fs := flag.NewFlagSet("likectl certs "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "folder of the CA and the certificates (required)")
	days := fs.Int("days", 0, "validity in days (init: 3650, issue: 825)")
	region := fs.String("region", "", "issue: the region the certificate names")
	hosts := fs.String("host", "", "issue: comma-separated DNS names or IPs to add as SANs (informational; peers check the region name)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("certs: --dir is required")
	}
	if *days < 0 {
		return fmt.Errorf("certs: --days %d < 0", *days)
	}
	caCert, caKey := peertls.Files(*dir, "ca")
	switch args[0] {
	case "init":
		if *region != "" || *hosts != "" {
			return errors.New("certs init: --region and --host belong to certs issue")
		}
		valid := daysOr(*days, 3650)
		if err := os.MkdirAll(*dir, 0o700); err != nil {
			return err
		}
		c, k, err := peertls.NewCA("likes CA", valid)
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
		gk := *dir + string(os.PathSeparator) + "gossip.key"
		if err := peertls.WriteNew(gk, []byte(base64.StdEncoding.EncodeToString(g)+"\n"), 0o600); err != nil {
			return fmt.Errorf("certs init: %w", err)
		}
		fmt.Fprintf(stdout, "wrote %s, %s (keep it offline) and %s (give it to every region: --gossip-key-file)\n", caCert, caKey, gk)
	case "issue":
		if *region == "" {
			return errors.New("certs issue: --region is required")
		}
		cp, err := os.ReadFile(caCert)
		if err != nil {
			return fmt.Errorf("certs issue: %w (run likectl certs init first)", err)
		}
		kp, err := os.ReadFile(caKey)
		if err != nil {
			return fmt.Errorf("certs issue: %w", err)
		}
		var hl []string
		if *hosts != "" {
			hl = strings.Split(*hosts, ",")
		}
		c, k, err := peertls.Issue(cp, kp, *region, hl, daysOr(*days, 825))
		if err != nil {
			return fmt.Errorf("certs issue: %w", err)
		}
		cf, kf := peertls.Files(*dir, *region)
		if err := peertls.WriteNew(kf, k, 0o600); err != nil {
			return fmt.Errorf("certs issue: %w", err)
		}
		if err := peertls.WriteNew(cf, c, 0o644); err != nil {
			return fmt.Errorf("certs issue: %w", err)
		}
		if _, err := peertls.Load(cf, kf, caCert); err != nil {
			return fmt.Errorf("certs issue: the new files do not load: %w", err)
		}
		fmt.Fprintf(stdout, "wrote %s and %s: likesd run --region %s --tls-cert %s --tls-key %s --tls-ca %s\n", cf, kf, *region, cf, kf, caCert)
	}
	return nil
}

func daysOr(d, def int) time.Duration {
	if d == 0 {
		d = def
	}
	return time.Duration(d) * 24 * time.Hour
}
