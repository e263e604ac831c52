// Flow times checked against when nfcapd received them (issue 20, "Timestamps").
//
// v5/v9 carry times as router uptime (ms, 32 bits); nfcapd 1.7.1 turns them into epoch
// ms per datagram, from the header's unix time and sysUptime, so a reboot (uptime starts
// again) lands right. Measured where it does not:
//   - a record exported just after the uptime wrapped (2^32 ms, ~49.7 days) whose First
//     and Last are from before the wrap lands 2^32 ms in the future: corrected here;
//   - a record whose First is after its Last lands ~49.7 days long (nfcapd reads it
//     as a wrap): the router's data is wrong, the flow is quarantined with the reason;
//   - softflowd's IPFIX records end up to 1 ms before they start (rounding): start := end;
//   - an IPFIX record timed by uptime (21/22) without systemInitTimeMilliseconds has no
//     time at all (0, 1970): set to its arrival, counted as corrected.
//
// Anything else far in the future or the past of its arrival is quarantined.
package main

import (
	"fmt"
	"time"
)

const uptimeWrapMs = int64(1) << 32

// roundingSlack: an end this much before the start is the exporter's rounding.
const roundingSlack = time.Second

// wrapSlack: how long before its arrival a flow moved back by an uptime wrap may end.
const wrapSlack = 24 * time.Hour

// TimeRules bound how far a flow's times may lie from its arrival.
type TimeRules struct {
	MaxFuture time.Duration // end after arrival by more than this: impossible
	// start before arrival by more than this: impossible; 0 = no bound (a replayed
	// capture reaches nfcapd long after its flows, with times consistent with its export)
	MaxAge time.Duration
}

// checkTimes corrects f's times where the cause is known and returns what it did
// (corrected, "" if nothing), or why the flow must be quarantined (reject).
func (t TimeRules) checkTimes(f *Flow) (corrected, reject string) {
	r := f.Received
	if r <= 0 {
		return "", ""
	}
	future, age := t.MaxFuture.Milliseconds(), t.MaxAge.Milliseconds()
	if f.TimeStart == 0 && f.TimeEnd == 0 {
		f.TimeStart, f.TimeEnd = r, r
		return "no time in the record (uptime-relative without the router's boot time): set to its arrival", ""
	}
	// the wrap's signature: 2^32 ms earlier, the flow ended just before it arrived (a
	// router exports a record within its active timeout). Anything else ahead is not
	// explained (a capture replayed with uptimes beyond 32 bits, a clock): quarantined.
	if end := f.TimeEnd - uptimeWrapMs; f.TimeEnd > r+future && end <= r+future && end >= r-wrapSlack.Milliseconds() {
		corrected = "router uptime wrapped (2^32 ms) between the flow and its export: 2^32 ms earlier"
		f.TimeEnd = end
		if f.TimeStart > r+future {
			f.TimeStart -= uptimeWrapMs
		}
	}
	if d := f.TimeEnd - f.TimeStart; d < 0 && d >= -roundingSlack.Milliseconds() {
		// an exporter keeping start and end at different precision (softflowd's IPFIX
		// rounds one up, the other down): a flow of no measurable length
		f.TimeStart = f.TimeEnd
		corrected = "ends up to 1 s before it starts (the exporter's rounding): start set to its end"
	}
	switch d := f.TimeEnd - f.TimeStart; {
	case d < 0:
		return corrected, fmt.Sprintf("ends before it starts (by %.3f s)", float64(-d)/1000)
	case d > uptimeWrapMs/2:
		return corrected, fmt.Sprintf("ends before it starts: the router's First is after its Last (nfcapd read it as an uptime wrap: %.1f days long)",
			float64(d)/86_400_000)
	case f.TimeEnd > r+future:
		return corrected, fmt.Sprintf("ends %.0f s after it arrived (more than %s in the future)", float64(f.TimeEnd-r)/1000, t.MaxFuture)
	case age > 0 && f.TimeStart < r-age:
		return corrected, fmt.Sprintf("starts %.0f s before it arrived (more than %s in the past)", float64(r-f.TimeStart)/1000, t.MaxAge)
	}
	return corrected, ""
}

// timeTally counts corrected flows per exporter and reason in runs: a flow like the
// one before adds one (a map update per flow was 2 % of the importer's CPU).
type timeTally struct {
	m      map[string]*ExporterTimeCounts
	exp    *Exporter
	reason string
	n      uint64
}

func (t *timeTally) add(e *Exporter, reason string) {
	if e != t.exp || reason != t.reason {
		t.flush()
		t.exp, t.reason = e, reason
	}
	t.n++
}

// flush adds the current run to m.
func (t *timeTally) flush() {
	if t.n > 0 {
		countTime(t.m, t.exp.Addr, t.reason, false, t.n)
		t.n = 0
	}
}
