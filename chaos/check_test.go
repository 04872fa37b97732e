package chaos

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/likes-dev/likes/edge"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func op(id int64, target, outcome string, invoke, ack int) *Op {
	o := &Op{ID: id, Target: target, Outcome: outcome, Invoke: at(invoke)}
	if outcome == OutcomeAck {
		o.Ack = at(ack)
	}
	return o
}

func TestAllowedFinal(t *testing.T) {
	cases := []struct {
		name    string
		ops     []*Op
		excused map[int64]bool
		want    []string
	}{
		{"nothing acknowledged", []*Op{op(1, TargetLiked, OutcomeReject, 0, 0)}, nil, []string{TargetUnliked}},
		{"like then unlike", []*Op{op(1, TargetLiked, OutcomeAck, 0, 10), op(2, TargetUnliked, OutcomeAck, 20, 30)}, nil, []string{TargetUnliked}},
		{"indeterminate like may land last", []*Op{op(1, TargetUnliked, OutcomeAck, 0, 10), op(2, TargetLiked, OutcomeIndeterminate, 20, 0)}, nil,
			[]string{TargetLiked, TargetUnliked}},
		{"indeterminate before an acknowledged op may still land after it",
			[]*Op{op(1, TargetLiked, OutcomeIndeterminate, 0, 0), op(2, TargetUnliked, OutcomeAck, 20, 30)}, nil,
			[]string{TargetLiked, TargetUnliked}},
		{"overlapping acknowledged ops are concurrent",
			[]*Op{op(1, TargetLiked, OutcomeAck, 0, 25), op(2, TargetUnliked, OutcomeAck, 20, 30)}, nil,
			[]string{TargetLiked, TargetUnliked}},
		{"excused op is concurrent with later ops",
			[]*Op{op(1, TargetLiked, OutcomeAck, 0, 10), op(2, TargetUnliked, OutcomeAck, 20, 30)}, map[int64]bool{1: true},
			[]string{TargetLiked, TargetUnliked}},
	}
	for _, c := range cases {
		got := keys(allowedFinal(c.ops, c.excused))
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: allowed %v, want %v", c.name, got, c.want)
		}
	}
}

// A tiny consistent world: one item, user "u" liked once by region "us" at
// epoch 1, counted everywhere.
func world() CheckInput {
	ev := LogEvent{Partition: 0, Pos: 1, Item: "i", User: "u", Delta: 1, EventTime: at(100).UnixMilli(), Kind: uint8(edge.KindFlip)}
	ev.Version.Epoch, ev.Version.Op = 1, 1
	ev.Idem = &struct{ Key string }{"k1"}
	g := edge.RangeOf("u", 8)
	final := FinalItem{Count: 1, Likers: []string{"u"}}
	return CheckInput{
		Regions: []string{"us", "eu"}, Ranges: 8, TTL: 2 * time.Second, MaxSkew: 500 * time.Millisecond,
		Ops:   []*Op{{ID: 1, User: "u", Item: "i", Kind: KindLike, Key: "k1", Target: TargetLiked, Outcome: OutcomeAck, Invoke: at(90), Ack: at(110), AckRegion: "us"}},
		Pins:  []PinVersion{{Range: g, Region: "us", Epoch: 1}},
		Final: map[string]map[string]FinalItem{"us": {"i": final}, "eu": {"i": final}},
		Logs:  map[string][]LogEvent{"us": {ev}},
		Samples: []Sample{
			{Region: "eu", Item: "i", Count: 0, AsOf: at(50), Recv: at(60)},
			{Region: "eu", Item: "i", Count: 1, AsOf: at(50), Recv: at(200)}, // a later event may be included
			{Region: "eu", Item: "i", Count: 1, AsOf: at(150), Recv: at(200)},
		},
	}
}

func TestCheckConsistentWorld(t *testing.T) {
	in := world()
	in.Buttons = []ButtonRead{{Op: 1, User: "u", Item: "i", Region: "eu", Want: true, Liked: true, Source: "owner"}}
	res := Check(in)
	if len(res.Violations) != 0 {
		t.Fatalf("violations in a consistent world: %v", res.Violations)
	}
	if res.EventsChecked != 1 || res.SamplesChecked != 3 || res.EdgesChecked != 1 || res.SessionReads != 1 {
		t.Fatalf("checked %+v", res)
	}
}

func TestCheckCatches(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(in *CheckInput)
		want   string
	}{
		{"double count", func(in *CheckInput) {
			in.Final["us"]["i"] = FinalItem{Count: 2, Likers: []string{"u"}}
			in.Final["eu"]["i"] = FinalItem{Count: 2, Likers: []string{"u"}}
		}, CheckCountEdges},
		{"regions disagree", func(in *CheckInput) { in.Final["eu"]["i"] = FinalItem{Count: 0, Likers: []string{}} }, CheckCountAgree},
		{"acknowledged like lost", func(in *CheckInput) {
			for _, r := range in.Regions {
				in.Final[r]["i"] = FinalItem{Count: 0, Likers: []string{}}
			}
			in.Logs["us"][0].Delta = 0
		}, CheckAcked},
		{"key never logged", func(in *CheckInput) { in.Logs["us"][0].Idem = nil }, CheckDurable},
		{"write under another region's pin", func(in *CheckInput) { in.Pins[0].Region = "eu" }, CheckPin},
		{"write after the next epoch started", func(in *CheckInput) {
			in.Pins = append(in.Pins, PinVersion{Range: in.Pins[0].Range, Region: "eu", Epoch: 2, NotBefore: at(100)})
		}, CheckPin},
		{"count above what its asOf allows", func(in *CheckInput) { in.Samples[1].Count = 2 }, CheckAsOf},
		{"count older than its asOf", func(in *CheckInput) { in.Samples[2].Count = 0 }, CheckAsOf},
		{"asOf in the future", func(in *CheckInput) { in.Samples[0].AsOf = at(5000) }, CheckAsOf},
		{"erased user still liked", func(in *CheckInput) {
			in.Ops = append(in.Ops, &Op{ID: 2, User: "u", Kind: KindErase, Target: TargetErased, Outcome: OutcomeAck, Invoke: at(300), Ack: at(310)})
		}, CheckErasure},
		{"new owner of a planned move branched from a stale edge", func(in *CheckInput) {
			g := in.Pins[0].Range
			in.Pins = append(in.Pins, PinVersion{Range: g, Region: "eu", Epoch: 2, NotBefore: at(5000)})
			in.Planned = map[PlannedMove]bool{{g, 2}: true}
			// eu's first write at epoch 2 is op 1: it never saw us's op 1.
			w := LogEvent{Partition: 0, Pos: 1, Item: "i", User: "u", Delta: 0, EventTime: at(6000).UnixMilli(), Kind: uint8(edge.KindFlip)}
			w.Version.Epoch, w.Version.Op = 2, 1
			in.Logs["eu"] = append(in.Logs["eu"], w)
		}, CheckPlanned},
		{"button read with the session token older than the write", func(in *CheckInput) {
			in.Buttons = append(in.Buttons, ButtonRead{Op: 1, User: "u", Item: "i", Region: "eu", Want: true, Liked: false})
		}, CheckSession},
		{"a node of a region answers otherwise than its region", func(in *CheckInput) {
			in.Nodes = map[string]string{"us-1": "us", "us-2": "us"}
			in.NodeFinal = map[string]map[string]FinalItem{"us-1": {"i": in.Final["us"]["i"]}, "us-2": {"i": {Count: 0, Likers: []string{}}}}
		}, CheckNodesAgree},
		{"a node of a region was not read", func(in *CheckInput) {
			in.Nodes = map[string]string{"us-1": "us", "us-2": "us"}
			in.NodeFinal = map[string]map[string]FinalItem{"us-1": {"i": in.Final["us"]["i"]}}
		}, CheckNodesAgree},
		{"a recount finds cells that disagree with the edges", func(in *CheckInput) {
			in.Reconcile = map[string][]Recount{"us": nil, "eu": {{Item: "i", Liked: 1, Cells: 2, Mismatch: -1}}}
		}, CheckReconcile},
	}
	for _, c := range cases {
		in := world()
		c.mutate(&in)
		res := Check(in)
		if res.ByCheck[c.want] == 0 {
			t.Errorf("%s: want a %s violation, got %v", c.name, c.want, res.Violations)
		}
	}
}

func TestPlanSchedule(t *testing.T) {
	regions := []string{"us", "eu", "ap"}
	a := PlanSchedule(5, 80*time.Second, regions, nil, ciNemeses(), 2*time.Second)
	b := PlanSchedule(5, 80*time.Second, regions, nil, ciNemeses(), 2*time.Second)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed planned two schedules")
	}
	kinds := map[string]bool{}
	for _, e := range a {
		kinds[e.Kind] = true
		if e.At >= 80*time.Second {
			t.Errorf("episode %s starts after the schedule", e)
		}
	}
	if len(kinds) != len(ciNemeses()) {
		t.Errorf("80s schedule of seed 5 covers %d kinds %v, want all %d", len(kinds), kinds, len(ciNemeses()))
	}
	if c := PlanSchedule(6, 80*time.Second, regions, nil, ciNemeses(), 2*time.Second); reflect.DeepEqual(a, c) {
		t.Error("seeds 5 and 6 planned the same schedule")
	}
}

// TestPlanScheduleNodes: node nemeses act on a node of a region of several,
// and are left out when every region is one process.
func TestPlanScheduleNodes(t *testing.T) {
	regions := []string{"us", "eu", "ap"}
	kinds := append([]string{NemPartition}, NodeNemeses...)
	sched := PlanSchedule(3, 60*time.Second, regions, map[string]int{"eu": 2}, kinds, 2*time.Second)
	seen := map[string]bool{}
	for _, e := range sched {
		if slices.Contains(NodeNemeses, e.Kind) {
			seen[e.Kind] = true
			if e.Region != "eu" || (e.Target != "eu-1" && e.Target != "eu-2") {
				t.Errorf("episode %s: want a node of eu", e)
			}
		}
	}
	if len(seen) != len(NodeNemeses) {
		t.Errorf("schedule %v lacks node nemeses", sched)
	}
	for _, e := range PlanSchedule(3, 60*time.Second, regions, nil, kinds, 2*time.Second) {
		if e.Kind != NemPartition {
			t.Errorf("one node per region, yet episode %s", e)
		}
	}
	if s := PlanSchedule(3, 60*time.Second, regions, nil, NodeNemeses, 2*time.Second); s != nil {
		t.Errorf("only node nemeses and no region of several nodes: schedule %v, want none", s)
	}
}

// TestNodesOptions: --nodes is parsed strictly, and a run that cannot be
// carried out (several nodes on the embedded store, an unknown region, a node
// nemesis without a region of several nodes) is refused before anything
// starts.
func TestNodesOptions(t *testing.T) {
	got, err := ParseNodes("us=2, eu=1")
	if err != nil || got["us"] != 2 || got["eu"] != 1 || len(got) != 2 {
		t.Fatalf("ParseNodes: %v, %v", got, err)
	}
	if NodesFlag(got) != "us=2" {
		t.Fatalf("NodesFlag(%v) = %q, want us=2", got, NodesFlag(got))
	}
	for _, bad := range []string{"", "us", "us=", "=2", "us=x", "us=2,us=3"} {
		if _, err := ParseNodes(bad); err == nil {
			t.Errorf("ParseNodes(%q) accepted", bad)
		}
	}
	eng := &Engines{Cassandra: []string{"c"}, Kafka: []string{"k"}, Redis: "r"}
	for name, o := range map[string]Options{
		"several nodes, embedded": {Nodes: map[string]int{"us": 2}},
		"unknown region":          {Nodes: map[string]int{"xx": 2}, Engines: eng},
		"too many nodes":          {Nodes: map[string]int{"us": 5}, Engines: eng},
		"zero nodes":              {Nodes: map[string]int{"us": 0}, Engines: eng},
		"node nemesis, no nodes":  {Kinds: []string{NemKillNode}, Engines: eng},
	} {
		o.defaults()
		if err := o.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	ok := Options{Nodes: map[string]int{"us": 2}, Kinds: NodeNemeses, Engines: eng}
	ok.defaults()
	if err := ok.validate(); err != nil {
		t.Fatalf("a valid run refused: %v", err)
	}
}
