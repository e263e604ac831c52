package main

import (
	"strings"
	"testing"
	"time"
)

func TestCheckTimesCorrectsKnownCausesAndRejectsTheRest(t *testing.T) {
	rules := TimeRules{MaxFuture: 10 * time.Minute, MaxAge: 7 * 24 * time.Hour}
	const r = int64(1_795_000_000_000)
	cases := []struct {
		name                string
		start, end          int64
		wantStart, wantEnd  int64
		corrected, rejected string
	}{
		{"normal", r - 8000, r - 2000, r - 8000, r - 2000, "", ""},
		{"both before the wrap, exported after (nfcapd: +2^32)", r + uptimeWrapMs - 12000, r + uptimeWrapMs - 10000,
			r - 12000, r - 10000, "uptime wrapped", ""},
		{"no time (IPFIX uptime without init time)", 0, 0, r, r, "no time in the record", ""},
		{"First after Last (nfcapd: -2^32 start)", r - 400 - uptimeWrapMs + 300, r - 400, 0, 0, "", "First is after its Last"},
		{"ends before it starts", r - 1000, r - 5000, 0, 0, "", "ends before it starts"},
		{"ends 1 ms before it starts (rounding)", r - 1000, r - 1001, r - 1001, r - 1001, "rounding", ""},
		{"a day in the future", r + 86_400_000, r + 86_400_000, 0, 0, "", "in the future"},
		{"a month ahead, 2^32 ms back would be weeks ago: no wrap", r + uptimeWrapMs - 21*86_400_000,
			r + uptimeWrapMs - 21*86_400_000, 0, 0, "", "in the future"},
		{"a year in the past", r - 365*86_400_000, r - 365*86_400_000 + 1, 0, 0, "", "in the past"},
	}
	for _, c := range cases {
		f := &Flow{TimeStart: c.start, TimeEnd: c.end, Received: r}
		corrected, reject := rules.checkTimes(f)
		if !strings.Contains(corrected, c.corrected) || (c.corrected == "" && corrected != "") {
			t.Errorf("%s: corrected %q, want %q", c.name, corrected, c.corrected)
		}
		if !strings.Contains(reject, c.rejected) || (c.rejected == "" && reject != "") {
			t.Errorf("%s: rejected %q, want %q", c.name, reject, c.rejected)
		}
		if c.rejected == "" && (f.TimeStart != c.wantStart || f.TimeEnd != c.wantEnd) {
			t.Errorf("%s: times %d..%d, want %d..%d", c.name, f.TimeStart-r, f.TimeEnd-r, c.wantStart-r, c.wantEnd-r)
		}
	}
}
