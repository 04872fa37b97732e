package region_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/likes-dev/likes/chaos/proxy"
	"github.com/likes-dev/likes/epoch/epochtest"
	"github.com/likes-dev/likes/region"
)

// TestHealRefusesWhileInboundBehind: reconcile --heal at us proves every
// inbound stream caught up first. With the eu→us link halted and a like
// written at eu, us's edges lack it, so healing would write a wrong count:
// the heal is refused with a clear error and heals nothing. Once the link is
// back the same heal succeeds (the check passes on a converged cluster).
func TestHealRefusesWhileInboundBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three regions")
	}
	usGRPC := epochtest.FreeAddr(t)
	px, err := proxy.New("eu->us", "127.0.0.1:0", usGRPC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	c := startTriWith(t, triOpts{region: func(name string, cfg *region.Config) {
		switch name {
		case "us":
			cfg.Cluster.GRPCListen = usGRPC
		case "eu":
			cfg.Cluster.PeerAddrs = map[string]string{"us": px.Addr()}
		}
	}})
	us, eu := c.byName["us"], c.byName["eu"]
	heal := func() triResp {
		return c.do("POST", us.srv.URL+"/v1/admin/reconcile", c.token("ops", true), "", []byte(`{"heal":true}`))
	}
	c.poll(t, 30*time.Second, "a heal on the converged cluster to pass", func() (bool, string) {
		r := heal()
		return r.code == http.StatusOK, r.String()
	})

	pins := c.mustPins(t)
	user := ""
	for i := 0; user == ""; i++ {
		if u := fmt.Sprintf("heal-user-%d", i); triOwner(pins, u).Region == "eu" {
			user = u
		}
	}
	px.SetMode(proxy.Mode{Kind: proxy.Reset})
	if r := c.set(eu, user, "healed-item", "k1", true); r.code != http.StatusOK {
		t.Fatalf("like at eu: %s", r)
	}
	r := heal()
	if r.code != http.StatusConflict || r.errCode() != "not_quiescent" || !strings.Contains(string(r.body), "inbound replication from eu") {
		t.Fatalf("heal with eu→us halted: %s", r)
	}
	t.Logf("refused: %s", r.body)
	rep, err := c.reconcile(us)
	if err != nil || rep.Healed != 0 {
		t.Fatalf("reconcile without heal: %+v %v", rep, err)
	}

	px.SetMode(proxy.Mode{Kind: proxy.Pass})
	c.poll(t, 30*time.Second, "the heal to pass once eu→us is back", func() (bool, string) {
		r := heal()
		return r.code == http.StatusOK, r.String()
	})
}
