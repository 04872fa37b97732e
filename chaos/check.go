package chaos

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/likes-dev/likes/edge"
)

// LogEvent is one committed log event as GET /v1/admin/log returns it
// (edge.Event's JSON).
type LogEvent struct {
	Partition uint32
	Pos       uint64
	Item      string
	User      string
	Bucket    uint32
	Version   struct{ Epoch, Op uint64 }
	State     uint8
	Delta     int32
	EventTime int64
	Kind      uint8
	Idem      *struct{ Key string }
}

func (e LogEvent) kind() edge.Kind { return edge.Kind(e.Kind) }

// FinalItem is one item as a region reports it after quiescing.
type FinalItem struct {
	Count  int64    `json:"count"`
	Likers []string `json:"likers"`
}

// Check names.
const (
	CheckConvergence = "convergence"        // the cluster did not quiesce after healing
	CheckCountAgree  = "count-agreement"    // regions report different counts
	CheckLikersAgree = "likers-agreement"   // regions report different who-liked sets
	CheckNodesAgree  = "nodes-agreement"    // a node answers otherwise than its region
	CheckCountEdges  = "count-vs-edges"     // count != number of LIKED edges
	CheckCountLog    = "count-vs-log"       // count != sum of the logs' deltas
	CheckAcked       = "acknowledged-write" // final state contradicts acknowledged writes
	CheckDurable     = "ack-durable"        // an acknowledged write's key is in no region's log
	CheckErasure     = "erasure"            // an erased user still has a LIKED edge
	CheckPin         = "pin"                // a write without a valid pin
	CheckPlanned     = "planned-move-clean" // a planned move's new owner started before catching up
	CheckAsOf        = "asof"               // a count claims more freshness than it has
	CheckSession     = "session-read"       // a button read with a session token was older than the token
	CheckGraceful    = "graceful-stop"      // a graceful stop (restart) caused an unplanned failover
	CheckReconcile   = "reconcile"          // a region's recount found cells that disagree with its edges
)

// Violation is one broken guarantee.
type Violation struct {
	Check  string `json:"check"`
	Region string `json:"region,omitempty"`
	Item   string `json:"item,omitempty"`
	User   string `json:"user,omitempty"`
	Detail string `json:"detail"`
}

func (v Violation) String() string {
	s := v.Check
	for _, kv := range [][2]string{{"region", v.Region}, {"item", v.Item}, {"user", v.User}} {
		if kv[1] != "" {
			s += " " + kv[0] + "=" + kv[1]
		}
	}
	return s + ": " + v.Detail
}

// CheckInput is everything the checker judges, gathered after quiescing.
type CheckInput struct {
	Regions []string
	Ranges  int
	TTL     time.Duration
	MaxSkew time.Duration
	Ops     []*Op
	Nemesis []NemesisEvent
	Pins    []PinVersion
	Planned map[PlannedMove]bool
	Final   map[string]map[string]FinalItem // region → item
	// NodeFinal are the final reads at each node of a region of several
	// (node → item); Nodes maps those nodes to their regions.
	NodeFinal map[string]map[string]FinalItem
	Nodes     map[string]string
	// Reconcile is what each region's recount (no healing) found mismatched
	// after quiescing; a region missing was not reconciled.
	Reconcile map[string][]Recount
	Logs      map[string][]LogEvent // region → its whole log
	Samples   []Sample
	Buttons   []ButtonRead
	Converge  error // non-nil when quiescing failed
}

// FailoverWindow is an unplanned move's window: writes of the range acknowledged
// in it may be overtaken (DESIGN section 5) and are judged as concurrent.
type FailoverWindow struct {
	Range     uint32    `json:"range"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	Epoch     uint64    `json:"epoch"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	Triggered string    `json:"triggeredBy,omitempty"`
}

// CheckResult is the checker's verdict.
type CheckResult struct {
	Violations      []Violation      `json:"violations"`
	ByCheck         map[string]int   `json:"byCheck"`
	Windows         []FailoverWindow `json:"-"`
	UnplannedMoves  int              `json:"unplannedMoves"`
	PlannedMoves    int              `json:"plannedMoves"`
	ExcusedOps      int              `json:"excusedOps"`
	EdgesChecked    int              `json:"edgesChecked"`
	ItemsChecked    int              `json:"itemsChecked"`
	EventsChecked   int              `json:"pinEventsChecked"`
	SamplesChecked  int              `json:"asOfSamplesChecked"`
	SessionReads    int              `json:"sessionReadsChecked"`
	ErasedUsers     int              `json:"erasedUsers"`
	FinalLikedEdges int              `json:"finalLikedEdges"`
	Reconciled      int              `json:"regionsReconciled"`
	// Corrections counts branch-correction events in every region's log (an
	// unplanned move overtook a write; planned moves make none).
	Corrections int `json:"corrections"`
}

func (r *CheckResult) add(v Violation) {
	r.Violations = append(r.Violations, v)
	r.ByCheck[v.Check]++
}

// Check runs every check.
func Check(in CheckInput) *CheckResult {
	res := &CheckResult{ByCheck: map[string]int{}}
	if in.Converge != nil {
		res.add(Violation{Check: CheckConvergence, Detail: in.Converge.Error()})
	}
	in.Planned = plannedMoves(in)
	for _, evs := range in.Logs {
		for _, ev := range evs {
			if ev.kind() == edge.KindCorrection {
				res.Corrections++
			}
		}
	}
	res.Windows = failoverWindows(in, res)
	checkGraceful(in, res)
	excused := excuse(in, res, res.Windows)
	res.ExcusedOps = len(excused)
	checkFinal(in, res, excused)
	res.Reconciled = len(in.Reconcile)
	for _, r := range sortedKeys(in.Reconcile) {
		for _, m := range in.Reconcile[r] {
			res.add(Violation{Check: CheckReconcile, Region: r, Item: m.Item,
				Detail: fmt.Sprintf("%d LIKED edges but cells sum to %d", m.Liked, m.Cells)})
		}
	}
	checkPins(in, res)
	checkPlanned(in, res)
	checkAsOf(in, res)
	checkSessions(in, res)
	sort.SliceStable(res.Violations, func(i, j int) bool { return res.Violations[i].Check < res.Violations[j].Check })
	return res
}

// plannedMoves is every planned move: those the runner wrote and those a
// region made (a graceful stop's hand-off, failback), whose pin was stored
// catching up.
func plannedMoves(in CheckInput) map[PlannedMove]bool {
	out := map[PlannedMove]bool{}
	for k, v := range in.Planned {
		out[k] = v
	}
	for _, v := range in.Pins {
		if v.CatchUp {
			out[PlannedMove{v.Range, v.Epoch}] = true
		}
	}
	return out
}

// checkGraceful: a graceful stop hands its ranges off as planned moves, so no
// unplanned move may follow one (a failover whose latest fault at the old
// owner was a restart).
func checkGraceful(in CheckInput, res *CheckResult) {
	for _, w := range res.Windows {
		moved := w.End.Add(-time.Second - in.TTL - in.MaxSkew)
		var latest *NemesisEvent
		for i := range in.Nemesis {
			e := &in.Nemesis[i]
			if e.affects(w.From) && !e.Start.After(moved) && (latest == nil || e.Start.After(latest.Start)) {
				latest = e
			}
		}
		if latest != nil && (latest.Kind == NemRestart || latest.Kind == NemRollingRestart) {
			res.add(Violation{Check: CheckGraceful, Region: w.From,
				Detail: fmt.Sprintf("range %d failed over %s→%s at epoch %d (unplanned) after a %s of %s", w.Range, w.From, w.To, w.Epoch, latest.Kind, w.From)})
		}
	}
}

// failoverWindows finds the unplanned moves: pin versions with epoch > 1 the
// runner did not write. The window of a move from A runs from the start of the
// latest fault that hit A before the move (or TTL+1s before the move when none
// did) to the new epoch's notBefore plus a second.
func failoverWindows(in CheckInput, res *CheckResult) []FailoverWindow {
	byRange := map[uint32]map[uint64]PinVersion{}
	for _, v := range in.Pins {
		if byRange[v.Range] == nil {
			byRange[v.Range] = map[uint64]PinVersion{}
		}
		byRange[v.Range][v.Epoch] = v
	}
	var out []FailoverWindow
	counted := map[PlannedMove]bool{} // a planned move has two versions: catching up, settled
	for _, v := range in.Pins {
		if v.Epoch <= 1 || counted[PlannedMove{v.Range, v.Epoch}] {
			continue
		}
		counted[PlannedMove{v.Range, v.Epoch}] = true
		if in.Planned[PlannedMove{v.Range, v.Epoch}] {
			res.PlannedMoves++
			continue
		}
		res.UnplannedMoves++
		prev, ok := byRange[v.Range][v.Epoch-1]
		if !ok {
			continue // reported by the pin check if any write used it
		}
		moved := v.NotBefore.Add(-in.TTL - in.MaxSkew)
		w := FailoverWindow{Range: v.Range, From: prev.Region, To: v.Region, Epoch: v.Epoch,
			Start: moved.Add(-in.TTL - time.Second), End: v.NotBefore.Add(time.Second)}
		var latest *NemesisEvent
		for i := range in.Nemesis {
			e := &in.Nemesis[i]
			if e.affects(prev.Region) && !e.Start.After(moved) && (latest == nil || e.Start.After(latest.Start)) {
				latest = e
			}
		}
		if latest != nil && latest.Start.Before(w.Start) {
			w.Start = latest.Start
			w.Triggered = latest.Kind
		}
		out = append(out, w)
	}
	return out
}

// keyEvent is where an idempotency key was applied: the event that carries it.
type keyEvent struct {
	region string
	epoch  uint64
	time   int64
}

// excuse returns the acknowledged ops that an unplanned failover may have
// overtaken. A like or unlike is excused when the first event carrying its
// Idempotency-Key was written by the old owner of a range, under the epoch the
// failover ended, inside the failover's window: that is exactly "acknowledged
// by the old region and maybe not replicated". A retraction (no key) is excused
// when its span meets a window of its user's range. An acknowledged like or
// unlike whose key no region logged is reported (ack-durable).
func excuse(in CheckInput, res *CheckResult, windows []FailoverWindow) map[int64]bool {
	byRange := map[uint32][]FailoverWindow{}
	for _, w := range windows {
		byRange[w.Range] = append(byRange[w.Range], w)
	}
	first := map[string]keyEvent{}
	for r, evs := range in.Logs {
		for _, ev := range evs {
			if ev.Idem == nil || ev.Idem.Key == "" {
				continue
			}
			k := ev.User + "\x00" + ev.Idem.Key
			if cur, ok := first[k]; !ok || ev.EventTime < cur.time {
				first[k] = keyEvent{region: r, epoch: ev.Version.Epoch, time: ev.EventTime}
			}
		}
	}
	out := map[int64]bool{}
	missing := 0
	for _, op := range in.Ops {
		if op.Outcome != OutcomeAck || op.Kind == KindErase {
			continue
		}
		ws := byRange[edge.RangeOf(op.User, in.Ranges)]
		if op.Key == "" {
			for _, w := range ws {
				if !op.Invoke.After(w.End) && !op.Ack.Before(w.Start) {
					out[op.ID] = true
				}
			}
			continue
		}
		ke, ok := first[op.User+"\x00"+op.Key]
		if !ok {
			if in.Logs != nil {
				missing++
				if missing <= 20 {
					res.add(Violation{Check: CheckDurable, Item: op.Item, User: op.User,
						Detail: fmt.Sprintf("%s #%d (key %s) was acknowledged by %s at %s but no region's log carries its key",
							op.Kind, op.ID, op.Key, op.AckRegion, op.Ack.Format("15:04:05.000"))})
				} else {
					res.ByCheck[CheckDurable]++
				}
			}
			continue
		}
		for _, w := range ws {
			if ke.region == w.From && ke.epoch+1 == w.Epoch &&
				ke.time >= w.Start.UnixMilli() && ke.time <= w.End.UnixMilli() {
				out[op.ID] = true
			}
		}
	}
	return out
}

// checkFinal compares the regions with each other, with the logs, and with
// the acknowledged writes.
func checkFinal(in CheckInput, res *CheckResult, excused map[int64]bool) {
	if len(in.Regions) == 0 || in.Final == nil {
		return
	}
	ref := in.Regions[0]
	// Sum of counted deltas per item over every region's log.
	logSum := map[string]int64{}
	for _, evs := range in.Logs {
		for _, ev := range evs {
			if ev.kind().Counted() {
				logSum[ev.Item] += int64(ev.Delta)
			}
		}
	}
	items := map[string]bool{}
	for _, r := range in.Regions {
		for it := range in.Final[r] {
			items[it] = true
		}
	}
	liked := map[[2]string]bool{} // (item, user) LIKED at the reference region
	for _, it := range sortedKeys(items) {
		res.ItemsChecked++
		refItem := in.Final[ref][it]
		for _, r := range in.Regions {
			fi, ok := in.Final[r][it]
			if !ok {
				res.add(Violation{Check: CheckCountAgree, Region: r, Item: it, Detail: "no final read"})
				continue
			}
			if fi.Count != refItem.Count {
				res.add(Violation{Check: CheckCountAgree, Region: r, Item: it,
					Detail: fmt.Sprintf("count %d at %s, %d at %s", fi.Count, r, refItem.Count, ref)})
			}
			if d := diff(fi.Likers, refItem.Likers); d != "" {
				res.add(Violation{Check: CheckLikersAgree, Region: r, Item: it, Detail: fmt.Sprintf("who-liked differs from %s: %s", ref, d)})
			}
			if fi.Count != int64(len(fi.Likers)) {
				res.add(Violation{Check: CheckCountEdges, Region: r, Item: it,
					Detail: fmt.Sprintf("count %d but %d LIKED edges", fi.Count, len(fi.Likers))})
			}
		}
		for _, n := range sortedKeys(in.Nodes) {
			fi, ok := in.NodeFinal[n][it]
			want := in.Final[in.Nodes[n]][it]
			switch {
			case !ok:
				res.add(Violation{Check: CheckNodesAgree, Region: n, Item: it, Detail: "no final read"})
			case fi.Count != want.Count:
				res.add(Violation{Check: CheckNodesAgree, Region: n, Item: it,
					Detail: fmt.Sprintf("count %d at node %s, %d at its region %s", fi.Count, n, want.Count, in.Nodes[n])})
			case diff(fi.Likers, want.Likers) != "":
				res.add(Violation{Check: CheckNodesAgree, Region: n, Item: it,
					Detail: fmt.Sprintf("who-liked at node %s differs from its region %s: %s", n, in.Nodes[n], diff(fi.Likers, want.Likers))})
			}
		}
		if in.Logs != nil && refItem.Count != logSum[it] {
			res.add(Violation{Check: CheckCountLog, Item: it,
				Detail: fmt.Sprintf("count %d but the logs' deltas sum to %d", refItem.Count, logSum[it])})
		}
		for _, u := range refItem.Likers {
			liked[[2]string{it, u}] = true
		}
		res.FinalLikedEdges += len(refItem.Likers)
	}

	// The model: per edge, its ops in order; per user, the erasure.
	type edgeKey = [2]string
	perEdge := map[edgeKey][]*Op{}
	erasure := map[string][]*Op{}
	for _, op := range in.Ops {
		switch op.Kind {
		case KindErase:
			erasure[op.User] = append(erasure[op.User], op)
		default:
			k := edgeKey{op.Item, op.User}
			perEdge[k] = append(perEdge[k], op)
		}
	}
	erasedAck := map[string]bool{}
	erasedMaybe := map[string]bool{}
	for u, ops := range erasure {
		for _, op := range ops {
			switch op.Outcome {
			case OutcomeAck:
				erasedAck[u] = true
			case OutcomeIndeterminate:
				erasedMaybe[u] = true
			}
		}
	}
	res.ErasedUsers = len(erasedAck)
	for k := range liked {
		if erasedAck[k[1]] {
			res.add(Violation{Check: CheckErasure, Item: k[0], User: k[1],
				Detail: "the user's erasure was acknowledged but the edge is LIKED" + postErasureNote(perEdge[k])})
		}
	}
	for _, k := range sortedEdgeKeys(perEdge) {
		ops := perEdge[k]
		if erasedAck[k[1]] {
			continue // judged above: no LIKED edge at all
		}
		res.EdgesChecked++
		allowed := allowedFinal(ops, excused)
		if erasedMaybe[k[1]] {
			allowed[TargetUnliked] = true
		}
		final := TargetUnliked
		if liked[k] {
			final = TargetLiked
		}
		if !allowed[final] {
			res.add(Violation{Check: CheckAcked, Item: k[0], User: k[1],
				Detail: fmt.Sprintf("final state %s, but the acknowledged history allows only %v: %s", final, keys(allowed), describeOps(ops, excused))})
		}
	}
}

// allowedFinal is the set of final states the ops of one edge allow. An op's
// effect lands somewhere between its first send and its first
// acknowledgement (forever after, for an indeterminate or excused op); a
// final state is allowed if it is the target of an op that may have landed
// last, i.e. no acknowledged (non-excused) op was sent after that op was
// acknowledged. The initial state (no like) is allowed when no op was
// acknowledged.
func allowedFinal(ops []*Op, excused map[int64]bool) map[string]bool {
	allowed := map[string]bool{}
	var acked []*Op
	for _, op := range ops {
		if op.Outcome == OutcomeAck && !excused[op.ID] {
			acked = append(acked, op)
		}
	}
	if len(acked) == 0 {
		allowed[TargetUnliked] = true
	}
	for _, x := range ops {
		if x.Outcome != OutcomeAck && x.Outcome != OutcomeIndeterminate {
			continue
		}
		end := time.Unix(math.MaxInt32, 0)
		if x.Outcome == OutcomeAck && !excused[x.ID] {
			end = x.Ack
		}
		last := true
		for _, y := range acked {
			if y != x && y.Invoke.After(end) {
				last = false
				break
			}
		}
		if last {
			allowed[x.Target] = true
		}
	}
	return allowed
}

func describeOps(ops []*Op, excused map[int64]bool) string {
	s := ""
	for i, op := range ops {
		if i > 0 {
			s += "; "
		}
		s += fmt.Sprintf("#%d %s %s [%s..", op.ID, op.Kind, op.Outcome, op.Invoke.Format("15:04:05.000"))
		if !op.Ack.IsZero() {
			s += op.Ack.Format("15:04:05.000") + "@" + op.AckRegion
		}
		s += "]"
		if excused[op.ID] {
			s += " excused"
		}
		if op.StaleRetries > 0 {
			s += fmt.Sprintf(" stale-retried×%d", op.StaleRetries)
		}
	}
	return s
}

func postErasureNote(ops []*Op) string {
	for _, op := range ops {
		if op.PostErasure && op.Outcome == OutcomeAck {
			return fmt.Sprintf(" (post-erasure like #%d was acknowledged by %s)", op.ID, op.AckRegion)
		}
	}
	return ""
}

// checkPins checks every user write in every region's log against the pin
// history: the pin of the user's range named the region at the event's epoch,
// the event is not before that pin's notBefore, and not at or after the
// notBefore of the next epoch.
func checkPins(in CheckInput, res *CheckResult) {
	if in.Pins == nil {
		return
	}
	byRange := map[uint32]map[uint64]PinVersion{}
	for _, v := range in.Pins {
		if byRange[v.Range] == nil {
			byRange[v.Range] = map[uint64]PinVersion{}
		}
		byRange[v.Range][v.Epoch] = v
	}
	const maxPerRegion = 20
	for _, r := range in.Regions {
		reported := 0
		for _, ev := range in.Logs[r] {
			switch ev.kind() {
			case edge.KindFlip, edge.KindRetraction, edge.KindErasure:
			default:
				continue
			}
			res.EventsChecked++
			g := edge.RangeOf(ev.User, in.Ranges)
			e := ev.Version.Epoch
			v, ok := byRange[g][e]
			var why string
			switch {
			case !ok:
				why = fmt.Sprintf("range %d never had epoch %d", g, e)
			case v.Region != r:
				why = fmt.Sprintf("range %d epoch %d was pinned to %s", g, e, v.Region)
			case !v.NotBefore.IsZero() && ev.EventTime < v.NotBefore.UnixMilli():
				why = fmt.Sprintf("written %dms before epoch %d of range %d started (notBefore %s)",
					v.NotBefore.UnixMilli()-ev.EventTime, e, g, v.NotBefore.UTC().Format(time.RFC3339Nano))
			default:
				if nx, ok := byRange[g][e+1]; ok && ev.EventTime >= nx.NotBefore.UnixMilli() {
					why = fmt.Sprintf("written %dms after epoch %d of range %d (→ %s) started (notBefore %s)",
						ev.EventTime-nx.NotBefore.UnixMilli(), e+1, g, nx.Region, nx.NotBefore.UTC().Format(time.RFC3339Nano))
				}
			}
			if why == "" {
				continue
			}
			reported++
			if reported > maxPerRegion {
				res.ByCheck[CheckPin]++
				continue
			}
			res.add(Violation{Check: CheckPin, Region: r, Item: ev.Item, User: ev.User,
				Detail: fmt.Sprintf("%s event p%d/%d at %s epoch %d: %s", ev.kind(), ev.Partition, ev.Pos,
					time.UnixMilli(ev.EventTime).UTC().Format("15:04:05.000"), e, why)})
		}
		if reported > maxPerRegion {
			res.Violations = append(res.Violations, Violation{Check: CheckPin, Region: r,
				Detail: fmt.Sprintf("… and %d more pin violations at %s", reported-maxPerRegion, r)})
		}
	}
}

// checkPlanned: a planned move is clean (DESIGN section 5: the old owner
// stops, its log is replicated, the new owner catches up, then starts). So
// when the new owner B of a planned epoch e+1 first writes an edge, it has
// every version of that edge the old owner A wrote in epoch e: B's first
// version (e+1, op) must have op greater than every op A logged for the edge
// in epoch e (ops continue across epochs: a write is the local version's op
// plus one). Otherwise B branched from a stale edge (and later needs a
// correction, and A's acknowledged writes can be overtaken).
func checkPlanned(in CheckInput, res *CheckResult) {
	pins := map[uint32]map[uint64]PinVersion{}
	for _, v := range in.Pins {
		if pins[v.Range] == nil {
			pins[v.Range] = map[uint64]PinVersion{}
		}
		pins[v.Range][v.Epoch] = v
	}
	type key struct {
		region, item, user string
		epoch              uint64
	}
	type span struct {
		minOp, maxOp uint64
		minAt        int64
	}
	ops := map[key]span{}
	for r, evs := range in.Logs {
		for _, ev := range evs {
			switch ev.kind() {
			case edge.KindFlip, edge.KindRetraction, edge.KindErasure:
			default:
				continue
			}
			k := key{r, ev.Item, ev.User, ev.Version.Epoch}
			sp, ok := ops[k]
			if !ok {
				sp = span{minOp: ev.Version.Op, maxOp: ev.Version.Op, minAt: ev.EventTime}
			}
			if ev.Version.Op < sp.minOp {
				sp.minOp, sp.minAt = ev.Version.Op, ev.EventTime
			}
			sp.maxOp = max(sp.maxOp, ev.Version.Op)
			ops[k] = sp
		}
	}
	const maxReported = 20
	reported := 0
	for _, k := range sortedPlannedKeys(ops, func(k key) (string, string, string, uint64) { return k.region, k.item, k.user, k.epoch }) {
		b := ops[k]
		g := edge.RangeOf(k.user, in.Ranges)
		if k.epoch < 2 || !in.Planned[PlannedMove{g, k.epoch}] {
			continue
		}
		next, ok := pins[g][k.epoch]
		prev, ok2 := pins[g][k.epoch-1]
		if !ok || !ok2 || next.Region != k.region {
			continue
		}
		a, ok := ops[key{prev.Region, k.item, k.user, k.epoch - 1}]
		if !ok || a.maxOp < b.minOp {
			continue
		}
		reported++
		if reported > maxReported {
			res.ByCheck[CheckPlanned]++
			continue
		}
		res.add(Violation{Check: CheckPlanned, Region: k.region, Item: k.item, User: k.user,
			Detail: fmt.Sprintf("range %d moved %s→%s at epoch %d by a planned move (notBefore %s); %s's first write of the edge at %s is op %d, but %s had written it up to op %d in epoch %d: the new owner started without the old owner's writes",
				g, prev.Region, k.region, k.epoch, next.NotBefore.UTC().Format("15:04:05.000"), k.region,
				time.UnixMilli(b.minAt).UTC().Format("15:04:05.000"), b.minOp, prev.Region, a.maxOp, k.epoch-1)})
	}
}

// sortedPlannedKeys orders map keys by their fields, for stable reports.
func sortedPlannedKeys[K comparable, V any](m map[K]V, f func(K) (string, string, string, uint64)) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		a1, a2, a3, a4 := f(out[i])
		b1, b2, b3, b4 := f(out[j])
		if a1 != b1 {
			return a1 < b1
		}
		if a2 != b2 {
			return a2 < b2
		}
		if a3 != b3 {
			return a3 < b3
		}
		return a4 < b4
	})
	return out
}

// checkAsOf: a count read with asOf T includes every counted event (of any
// region's log) with event time <= T, and of the later ones at most a prefix
// of each (region, partition) log, none after the read returned. So
// count − Σ{delta : time <= T} must lie within the sum over (region,
// partition) of the min and max prefix sums of the later events up to the
// read's end (plus a second of slack for clock granularity). asOf must not be
// after the read's end either.
func checkAsOf(in CheckInput, res *CheckResult) {
	if in.Logs == nil {
		return
	}
	type seq struct{ times, deltas []int64 }
	perItem := map[string]map[string]*seq{} // item → "region/partition" → events in log order
	for r, evs := range in.Logs {
		for _, ev := range evs {
			if !ev.kind().Counted() {
				continue
			}
			if perItem[ev.Item] == nil {
				perItem[ev.Item] = map[string]*seq{}
			}
			k := fmt.Sprintf("%s/%d", r, ev.Partition)
			s := perItem[ev.Item][k]
			if s == nil {
				s = &seq{}
				perItem[ev.Item][k] = s
			}
			s.times = append(s.times, ev.EventTime)
			s.deltas = append(s.deltas, int64(ev.Delta))
		}
	}
	const maxReported = 20
	reported := 0
	for _, s := range in.Samples {
		res.SamplesChecked++
		t := s.AsOf.UnixMilli()
		end := s.Recv.UnixMilli() + 1000
		var why string
		if s.AsOf.After(s.Recv.Add(50 * time.Millisecond)) {
			why = fmt.Sprintf("asOf %s is after the read returned (%s)", s.AsOf.Format("15:04:05.000"), s.Recv.Format("15:04:05.000"))
		} else {
			var base, lo, hi int64
			for _, sq := range perItem[s.Item] {
				var p, mn, mx int64
				for i, tm := range sq.times {
					switch {
					case tm <= t:
						base += sq.deltas[i]
					case tm <= end:
						p += sq.deltas[i]
						mn, mx = min(mn, p), max(mx, p)
					}
				}
				lo += mn
				hi += mx
			}
			if s.Count < base+lo || s.Count > base+hi {
				why = fmt.Sprintf("count %d asOf %s, but the logs give %d through asOf and allow only [%d, %d] with later events",
					s.Count, s.AsOf.Format("15:04:05.000"), base, base+lo, base+hi)
			}
		}
		if why == "" {
			continue
		}
		reported++
		if reported > maxReported {
			res.ByCheck[CheckAsOf]++
			continue
		}
		res.add(Violation{Check: CheckAsOf, Region: s.Region, Item: s.Item,
			Detail: fmt.Sprintf("read at %s: %s", s.Recv.Format("15:04:05.000"), why)})
	}
}

func diff(a, b []string) string {
	as, bs := map[string]bool{}, map[string]bool{}
	for _, x := range a {
		as[x] = true
	}
	for _, x := range b {
		bs[x] = true
	}
	var extra, missing []string
	for x := range as {
		if !bs[x] {
			extra = append(extra, x)
		}
	}
	for x := range bs {
		if !as[x] {
			missing = append(missing, x)
		}
	}
	if len(extra) == 0 && len(missing) == 0 {
		return ""
	}
	sort.Strings(extra)
	sort.Strings(missing)
	return fmt.Sprintf("extra %v, missing %v", extra, missing)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedEdgeKeys[V any](m map[[2]string]V) [][2]string {
	out := make([][2]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i][0] != out[j][0] {
			return out[i][0] < out[j][0]
		}
		return out[i][1] < out[j][1]
	})
	return out
}

func keys(m map[string]bool) []string {
	var out []string
	for k, v := range m {
		if v {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// checkSessions: every button read that carried the session token of an
// acknowledged write, sent right after it (the client sends nothing else in
// between, so nothing newer of the edge exists from this user), shows that
// write, at whichever region it was sent to (issue 16).
func checkSessions(in CheckInput, res *CheckResult) {
	for _, b := range in.Buttons {
		res.SessionReads++
		if b.Liked != b.Want {
			res.add(Violation{Check: CheckSession, Item: b.Item, User: b.User,
				Detail: fmt.Sprintf("op %d set liked=%v; the button read at %s with its session token right after (source %q) answered liked=%v",
					b.Op, b.Want, b.Region, b.Source, b.Liked)})
		}
	}
}
