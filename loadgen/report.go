package loadgen

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the outcome of a Run. It marshals to JSON as is.
type Report struct {
	URL            string        `json:"url"`
	RunID          string        `json:"runId"`
	Workers        int           `json:"workers"`
	Users          int           `json:"users"`
	Items          int           `json:"items"`
	ViralItem      string        `json:"viralItem"`
	PhaseDurationS float64       `json:"phaseDurationS"`
	Started        time.Time     `json:"started"`
	Finished       time.Time     `json:"finished"`
	Interrupted    bool          `json:"interrupted"`
	Phases         []PhaseReport `json:"phases"`
}

// PhaseReport is one phase's figures. Throughput counts successful (2xx)
// requests per second of the phase's wall time; Latency covers successful
// requests only (errors are counted in Errors, keyed by HTTP status or by
// "timeout"/"transport"/"body" for failures without a usable status).
type PhaseReport struct {
	Name       string           `json:"name"`
	DurationS  float64          `json:"durationS"`
	Partial    bool             `json:"partial"`
	Requests   int64            `json:"requests"`
	OK         int64            `json:"ok"`
	Errors     map[string]int64 `json:"errors"`
	Throughput float64          `json:"throughputPerS"`
	// Changed counts write answers with "changed":true (the edge really flipped).
	Changed   int64      `json:"changed,omitempty"`
	Latency   Latency    `json:"latency"`
	Staleness *Staleness `json:"staleness,omitempty"`
	// Buttons are the reads after writes through Config.ButtonURL.
	Buttons *ButtonReport `json:"buttons,omitempty"`
	// CPU spent during the phase by the server (when Config.ServerCPU is set)
	// and by this process (the load generator itself), in all and per
	// successful request.
	ServerCPUS        float64 `json:"serverCpuS,omitempty"`
	ServerCPUPerReqUs float64 `json:"serverCpuPerReqUs,omitempty"`
	ClientCPUS        float64 `json:"clientCpuS,omitempty"`
	ClientCPUPerReqUs float64 `json:"clientCpuPerReqUs,omitempty"`
}

// Latency summarizes a histogram in milliseconds.
type Latency struct {
	Samples uint64  `json:"samples"`
	MeanMs  float64 `json:"meanMs"`
	P50Ms   float64 `json:"p50Ms"`
	P90Ms   float64 `json:"p90Ms"`
	P99Ms   float64 `json:"p99Ms"`
	P999Ms  float64 `json:"p999Ms"`
	MaxMs   float64 `json:"maxMs"`
}

// Staleness summarizes the sampler of a write phase: P50Ms/P99Ms/MaxMs are
// now − asOf measured by the client; ServerP50Ms/ServerP99Ms are the server's
// own stalenessMs. FirstReadP99Ms covers only the first read of each item by
// the sampler (no earlier read could have left a cached entry behind; in the
// viral phase that is one sample). Unproven counts answers whose asOf was the
// Unix epoch (no watermark yet); they are not in the quantiles.
type Staleness struct {
	Samples        int64            `json:"samples"`
	Unproven       int64            `json:"unproven,omitempty"`
	FirstReads     int64            `json:"firstReads"`
	FirstReadP99Ms float64          `json:"firstReadP99Ms"`
	Errors         map[string]int64 `json:"errors,omitempty"`
	P50Ms          float64          `json:"p50Ms"`
	P99Ms          float64          `json:"p99Ms"`
	MaxMs          float64          `json:"maxMs"`
	ServerP50Ms    float64          `json:"serverP50Ms"`
	ServerP99Ms    float64          `json:"serverP99Ms"`
}

// ErrorCount is the total of p.Errors.
func (p *PhaseReport) ErrorCount() int64 {
	var n int64
	for _, v := range p.Errors {
		n += v
	}
	return n
}

// Phase returns the named phase, or nil.
func (r *Report) Phase(name string) *PhaseReport {
	for i := range r.Phases {
		if r.Phases[i].Name == name {
			return &r.Phases[i]
		}
	}
	return nil
}

func summarize(h *Histogram) Latency {
	return Latency{
		Samples: h.Count(), MeanMs: ms(h.Mean()),
		P50Ms: ms(h.Quantile(0.50)), P90Ms: ms(h.Quantile(0.90)), P99Ms: ms(h.Quantile(0.99)),
		P999Ms: ms(h.Quantile(0.999)), MaxMs: ms(h.Max()),
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func errString(m map[string]int64) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// WriteTable prints the report as a human-readable table.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "likes bench  %s  workers=%d users=%d items=%d phase=%gs run=%s\n",
		r.URL, r.Workers, r.Users, r.Items, r.PhaseDurationS, r.RunID)
	if r.Interrupted {
		fmt.Fprintln(w, "INTERRUPTED: partial report")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tsecs\trequests\tok\treq/s\tp50 ms\tp90 ms\tp99 ms\tmax ms\tstale p50 ms\tstale p99 ms\terrors\t")
	for _, p := range r.Phases {
		name := p.Name
		if p.Partial {
			name += "*"
		}
		sp50, sp99 := "-", "-"
		if p.Staleness != nil && p.Staleness.Samples > 0 {
			sp50, sp99 = fmt.Sprintf("%.0f", p.Staleness.P50Ms), fmt.Sprintf("%.0f", p.Staleness.P99Ms)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%d\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%s\t%s\t\n",
			name, p.DurationS, p.Requests, p.OK, p.Throughput, p.Latency.P50Ms, p.Latency.P90Ms,
			p.Latency.P99Ms, p.Latency.MaxMs, sp50, sp99, errString(p.Errors))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range r.Phases {
		if s := p.Staleness; s != nil {
			fmt.Fprintf(w, "staleness %-15s samples=%d  now-asOf p50/p99/max = %.0f/%.0f/%.0f ms  server stalenessMs p50/p99 = %.0f/%.0f ms  first-read p99 = %.0f ms (%d)  unproven=%d  errors=%s\n",
				p.Name, s.Samples, s.P50Ms, s.P99Ms, s.MaxMs, s.ServerP50Ms, s.ServerP99Ms, s.FirstReadP99Ms, s.FirstReads, s.Unproven, errString(s.Errors))
		}
	}
	for _, p := range r.Phases {
		if p.ClientCPUPerReqUs <= 0 {
			continue
		}
		srv := "not measured (no --server-pid)"
		if p.ServerCPUS > 0 {
			srv = fmt.Sprintf("%.1f s = %.0f µs/req", p.ServerCPUS, p.ServerCPUPerReqUs)
		}
		fmt.Fprintf(w, "cpu       %-15s server %s   load generator %.1f s = %.0f µs/req\n",
			p.Name, srv, p.ClientCPUS, p.ClientCPUPerReqUs)
	}
	u, v := r.Phase(PhaseUniform), r.Phase(PhaseViral)
	if u != nil && v != nil && u.Throughput > 0 {
		fmt.Fprintf(w, "viral/uniform write throughput = %.2f\n", v.Throughput/u.Throughput)
	}
	return nil
}
