package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

const testSecret = "0123456789abcdef0123456789abcdef-test-only"

// clusteredRun are the flags of a clustered `likesd run` that plans
// without files (plaintext peers).
func clusteredRun(data string, extra ...string) []string {
	return append([]string{"--region", "us", "--regions", "us,eu", "--etcd", "http://127.0.0.1:1", "--insecure-plaintext-peers", "--data", data}, extra...)
}

func planRun(t *testing.T, args []string) (*runPlan, error) {
	t.Helper()
	rc := newRunCmd()
	if err := parseCommand(rc.fs, args, io.Discard, ""); err != nil {
		return nil, err
	}
	return rc.plan(io.Discard)
}

// TestAdvertise: the advertised addresses default to the listen addresses,
// reach the region's Cluster (gossip and etcd registration) and status, and
// a listener on 0.0.0.0 or :: without an advertised address is refused
// before anything listens, naming the flag to give.
func TestAdvertise(t *testing.T) {
	clearLikesEnv(t)
	t.Setenv("LIKES_AUTH_SECRET", testSecret)
	data := t.TempDir()

	p, err := planRun(t, clusteredRun(data, "--http", "127.0.0.1:8080", "--grpc", "127.0.0.1:9080", "--gossip", "127.0.0.1:7946"))
	if err != nil {
		t.Fatal(err)
	}
	cl := p.rc.Cluster
	if p.httpAdvertise != "" || cl.GRPCAdvertise != "" || cl.GossipAdvertise != "" || cl.GossipBind != "127.0.0.1" || cl.GossipPort != 7946 {
		t.Fatalf("defaults: http %q grpc %q gossip %q bind %s:%d (want the listeners' own addresses)", p.httpAdvertise, cl.GRPCAdvertise, cl.GossipAdvertise, cl.GossipBind, cl.GossipPort)
	}

	p, err = planRun(t, clusteredRun(data, "--http", "0.0.0.0:8080", "--grpc", "0.0.0.0:9080", "--gossip", "[::]:7946",
		"--advertise-http", "https://us.likes.example/", "--advertise-grpc", "likes-us-0.likes-us:9080", "--advertise-gossip", "10.1.2.3"))
	if err != nil {
		t.Fatal(err)
	}
	cl = p.rc.Cluster
	if p.httpAdvertise != "https://us.likes.example" || cl.HTTPAdvertise != p.httpAdvertise || cl.GRPCAdvertise != "likes-us-0.likes-us:9080" ||
		cl.GossipAdvertise != "10.1.2.3:7946" || cl.GRPCListen != "0.0.0.0:9080" || cl.GossipBind != "::" {
		t.Fatalf("advertised: http %q grpc %q gossip %q; listen grpc %q gossip %q", p.httpAdvertise, cl.GRPCAdvertise, cl.GossipAdvertise, cl.GRPCListen, cl.GossipBind)
	}
	if p, err := planRun(t, clusteredRun(data, "--advertise-http", "10.0.0.1:8080")); err != nil || p.httpAdvertise != "http://10.0.0.1:8080" {
		t.Fatalf("--advertise-http host:port: %v, %v", p, err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{clusteredRun(data, "--http", "0.0.0.0:8080"), "give --advertise-http"},
		{clusteredRun(data, "--http", ":8080"), "give --advertise-http"},
		{clusteredRun(data, "--grpc", "0.0.0.0:9080"), "give --advertise-grpc"},
		{clusteredRun(data, "--grpc", "[::]:9080"), "give --advertise-grpc"},
		{clusteredRun(data, "--gossip", "0.0.0.0:7946"), "give --advertise-gossip"},
		{clusteredRun(data, "--advertise-grpc", "0.0.0.0:9080"), "peers can dial"},
		{clusteredRun(data, "--advertise-grpc", "host-without-port"), "want host:port"},
		{clusteredRun(data, "--advertise-grpc", "h:0"), "bad port"},
		{clusteredRun(data, "--node", "us-2"), "need --store cassandra"},
		{clusteredRun(data, "--node", "us/2"), "invalid node name"},
		{[]string{"--region", "us", "--data", data, "--node", "us-2"}, "--node need --etcd"},
		{clusteredRun(data, "--advertise-gossip", "[::]:1"), "peers can dial"},
		{clusteredRun(data, "--advertise-http", "ftp://x"), "http(s)://"},
		{clusteredRun(data, "--advertise-http", "https://x/path"), "no path"},
		{clusteredRun(data, "--advertise-http", "https://0.0.0.0"), "no path"},
		{[]string{"--region", "us", "--data", data, "--advertise-grpc", "h:1"}, "--advertise-grpc need --etcd"},
		{[]string{"--region", "us", "--data", data, "--lease-ttl", "9s", "--drain-timeout", "1s"}, "--drain-timeout, --lease-ttl need --etcd"},
	} {
		_, err := planRun(t, tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("likesd run %s: %v, want an error mentioning %q", strings.Join(tc.args, " "), err, tc.want)
		}
		if strings.Contains(tc.want, "give --advertise") && !errors.Is(err, errAdvertise) {
			t.Errorf("likesd run %s: %v is not an errAdvertise", strings.Join(tc.args, " "), err)
		}
	}

	// A standalone region has no peers: 0.0.0.0 is fine (it prints what it serves).
	if _, err := planRun(t, []string{"--region", "us", "--data", data, "--http", "0.0.0.0:8080"}); err != nil {
		t.Fatalf("standalone on 0.0.0.0: %v", err)
	}
}

// flagBase is a command line a command plans from, in an environment.
type flagBase struct {
	args []string
	env  map[string]string
}

// usedOutsidePlan lists flags whose effect is not part of a command's plan
// (consumed by code that runs after it), with where they are used; each must
// be tested there. Empty: every flag so far shapes the plan.
var usedOutsidePlan = map[string]string{}

// TestEveryFlagIsUsed lists every flag of every command and proves it does
// something there: setting it to another value changes the command's plan
// (what it would listen on, dial and open) or its verdict (a refusal), for
// at least one of the command's typical command lines. A flag that changes
// nothing is a flag that lies (as --host did on `likesd run`).
func TestEveryFlagIsUsed(t *testing.T) {
	clearLikesEnv(t)
	data := t.TempDir()
	// A changed --data (e.g. "x"+data) is relative: planning dev makes its
	// certificates there, so run where that lands in a temporary folder.
	t.Chdir(t.TempDir())
	secret := map[string]string{"LIKES_AUTH_SECRET": testSecret}
	engines := []string{"--store", "cassandra", "--cassandra", "h", "--log", "kafka", "--kafka", "h:1", "--cache", "redis", "--redis", "h:1"}
	cases := map[string]struct {
		bases []flagBase
		plan  func(args []string) (any, error)
		alt   map[string]string // values for flags the generic change does not fit
	}{
		"likesd dev": {
			bases: []flagBase{
				{args: []string{"--data", data, "--regions", "us,eu"}},
				{args: append([]string{"--data", data, "--regions", "us"}, engines...)},
			},
			plan: func(args []string) (any, error) {
				d := newDevCmd()
				if err := parseCommand(d.fs, args, io.Discard, ""); err != nil {
					return nil, err
				}
				return d.plan(io.Discard)
			},
			alt: map[string]string{"config": writeFile(t, "dev.yaml", "window: 1s\n"), "data": t.TempDir()},
		},
		"likesd run": {
			bases: []flagBase{
				{args: clusteredRun(data), env: secret},
				{args: clusteredRun(data)}, // no secret: --insecure-dev-secret decides
				{args: append([]string{"--region", "us", "--data", data}, engines...), env: secret},
			},
			plan: func(args []string) (any, error) {
				rc := newRunCmd()
				if err := parseCommand(rc.fs, args, io.Discard, ""); err != nil {
					return nil, err
				}
				return rc.plan(io.Discard)
			},
			alt: map[string]string{"config": writeFile(t, "run.yaml", "window: 1s\n"), "unsafe-break": "fence", "data": t.TempDir()},
		},
		"likesd etcd": {
			bases: []flagBase{
				{args: []string{"--data", data}},
				{args: []string{"--data", data, "--host", "10.0.0.1"}},
			},
			plan: func(args []string) (any, error) {
				e := newEtcdCmd()
				if err := parseCommand(e.fs, args, io.Discard, ""); err != nil {
					return nil, err
				}
				return e.plan()
			},
			alt: map[string]string{"config": writeFile(t, "etcd.yaml", "client-port: 2400\n"), "data": t.TempDir()},
		},
	}
	for _, fs := range commandFlagSets() {
		tc, ok := cases[fs.Name()]
		if !ok {
			t.Errorf("no case for %s", fs.Name())
			continue
		}
		outcome := func(b flagBase, extra ...string) any {
			for k, v := range b.env {
				t.Setenv(k, v)
			}
			defer func() {
				for k := range b.env {
					t.Setenv(k, "")
				}
			}()
			p, err := tc.plan(append(append([]string(nil), b.args...), extra...))
			if err != nil {
				return "error: " + err.Error()
			}
			return p
		}
		baseOut := make([]any, len(tc.bases))
		for i, b := range tc.bases {
			baseOut[i] = outcome(b)
			if !sameValue(reflect.ValueOf(baseOut[i]), reflect.ValueOf(outcome(b)), 0) {
				t.Fatalf("%s %v: two plans of the same command line differ", fs.Name(), b.args)
			}
		}
		fs.VisitAll(func(f *flag.Flag) {
			if where, ok := usedOutsidePlan[f.Name]; ok {
				t.Logf("%s --%s: used outside the plan (%s)", fs.Name(), f.Name, where)
				return
			}
			alt, ok := tc.alt[f.Name]
			if !ok {
				alt = otherValue(f)
			}
			for i, b := range tc.bases {
				if !sameValue(reflect.ValueOf(baseOut[i]), reflect.ValueOf(outcome(b, "--"+f.Name+"="+alt)), 0) {
					return
				}
			}
			t.Errorf("%s --%s=%s changes nothing in any of its typical command lines: make it do something or remove it (or, if it is used after the plan, list it in usedOutsidePlan)", fs.Name(), f.Name, alt)
		})
	}
}

// otherValue is a value of f's type different from its default.
func otherValue(f *flag.Flag) string {
	switch kindOf(f) {
	case kindBool:
		if f.DefValue == "true" {
			return "false"
		}
		return "true"
	case kindInt:
		n, _ := strconv.Atoi(f.DefValue)
		return strconv.Itoa(n + 1)
	case kindFloat:
		x, _ := strconv.ParseFloat(f.DefValue, 64)
		return fmt.Sprint(x + 1.5)
	case kindDuration:
		d, _ := time.ParseDuration(f.DefValue)
		return (d + time.Second).String()
	case kindText:
		return "1%"
	}
	return "x" + f.DefValue
}

// sameValue compares two plans deeply: funcs (and channels) are equal when
// both are nil or both are not, since a plan's callbacks cannot be compared.
func sameValue(a, b reflect.Value, depth int) bool {
	if depth > 50 {
		return true
	}
	if !a.IsValid() || !b.IsValid() {
		return a.IsValid() == b.IsValid()
	}
	if a.Type() != b.Type() {
		return false
	}
	switch a.Kind() {
	case reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return a.IsNil() == b.IsNil()
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return sameValue(a.Elem(), b.Elem(), depth+1)
	case reflect.Struct:
		for i := range a.NumField() {
			if !sameValue(a.Field(i), b.Field(i), depth+1) {
				return false
			}
		}
		return true
	case reflect.Slice, reflect.Array:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !sameValue(a.Index(i), b.Index(i), depth+1) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		it := a.MapRange()
		for it.Next() {
			bv := b.MapIndex(it.Key())
			if !bv.IsValid() || !sameValue(it.Value(), bv, depth+1) {
				return false
			}
		}
		return true
	case reflect.String:
		return a.String() == b.String()
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return a.Uint() == b.Uint()
	case reflect.Float32, reflect.Float64:
		return a.Float() == b.Float()
	case reflect.Complex64, reflect.Complex128:
		return a.Complex() == b.Complex()
	}
	return true
}
