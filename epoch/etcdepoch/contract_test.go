package etcdepoch_test

import (
	"testing"

	"github.com/likes-dev/likes/epoch/epochtest"
)

// TestContractEmbedded runs the contract suite against an embedded etcd.
func TestContractEmbedded(t *testing.T) {
	e := epochtest.StartEmbedded(t)
	clients := epochtest.Clients(e.Endpoints())
	t.Run("Directory", func(t *testing.T) { epochtest.RunDirectory(t, clients) })
	t.Run("Authority", func(t *testing.T) { epochtest.RunAuthority(t, clients) })
	t.Run("Controller", func(t *testing.T) { epochtest.RunController(t, clients) })
	t.Run("Failback", func(t *testing.T) { epochtest.RunFailback(t, clients) })
	t.Run("Nodes", func(t *testing.T) { epochtest.RunNodes(t, clients) })
}

// TestContractExternal runs the same suite against the etcd named by
// LIKES_TEST_ETCD_ENDPOINTS, and skips when it is unset.
func TestContractExternal(t *testing.T) {
	clients := epochtest.Clients(epochtest.EndpointsFromEnv(t))
	t.Run("Directory", func(t *testing.T) { epochtest.RunDirectory(t, clients) })
	t.Run("Authority", func(t *testing.T) { epochtest.RunAuthority(t, clients) })
	t.Run("Controller", func(t *testing.T) { epochtest.RunController(t, clients) })
	t.Run("Failback", func(t *testing.T) { epochtest.RunFailback(t, clients) })
	t.Run("Nodes", func(t *testing.T) { epochtest.RunNodes(t, clients) })
}
