package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// Real nfcapd files with dropped datagrams, silent exporters and skewed clocks are checked
// in tests/collectors/test_health.py; these pin the record layout, the silent rule and the bound.

func TestHealthRowsFromASyntheticFile(t *testing.T) {
	_, st, err := readAll(t, writeTemp(t, buildFile(t, 10, compNone)))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Health) != 1 {
		t.Fatalf("want one exporter row, got %d", len(st.Health))
	}
	h := st.Health[0]
	if h.Exporter != "192.0.2.1" || h.Version != 9 || h.Flows != 10 || h.Packets != st.Packets || h.Bytes != st.Bytes {
		t.Fatalf("row %+v does not add up to the file's %d flows", h, st.Flows)
	}
	// IPv4 flows carry elements 1, 2 (IPv4), 4; IPv6 flows 1, 3, 4: two layouts
	if want := []string{"v9:1.2.4", "v9:1.3.4"}; !reflect.DeepEqual(h.Layouts, want) {
		t.Fatalf("layouts %v, want %v", h.Layouts, want)
	}
	if !reflect.DeepEqual(h.Samplers, []string{"-2=1:100"}) || !reflect.DeepEqual(h.Rates, []uint32{100}) {
		t.Fatalf("samplers %v rates %v", h.Samplers, h.Rates)
	}
	if h.ClockSkew != nil || h.LastSeen != nil || h.Datagrams != 0 {
		t.Fatalf("no arrival times and no stat record in the file: %+v", h)
	}
}

func TestExporterStatRecord(t *testing.T) {
	le := binary.LittleEndian
	var rec bytes.Buffer
	for _, v := range []any{uint16(recExporterStat), uint16(8 + 2*24), uint32(2),
		uint32(1), uint32(3), uint64(22), uint64(84), // sysid 1: 3 failures, 22 datagrams, 84 flows
		uint32(2), uint32(0), uint64(0), uint64(0)} {
		binary.Write(&rec, le, v)
	}
	var h fileHealth
	if err := h.exporterStats(rec.Bytes()); err != nil {
		t.Fatal(err)
	}
	if a := h.acc[1]; a.seqFail != 3 || a.datagrams != 22 {
		t.Fatalf("sysid 1: %+v", a)
	}
	if a := h.acc[2]; a == nil || a.seqFail != 0 {
		t.Fatal("sysid 2 (silent) must get a row too")
	}
	if err := h.exporterStats(rec.Bytes()[:40]); err == nil {
		t.Fatal("a stat record shorter than its count says must be an error")
	}
}

func TestSilentAfterAndForget(t *testing.T) {
	state := filepath.Join(t.TempDir(), "health.json")
	o := HealthOptions{Topic: "h", State: state, SilentAfter: 3 * time.Second, ForgetAfter: time.Minute}
	tr := &healthTracker{o: o, known: map[string]*ExporterState{}}
	row := func(start, end int64, seen int64) *ExporterHealth {
		r := &ExporterHealth{IntervalStart: start, IntervalEnd: end, Exporter: "192.0.2.9", Version: 10, Flows: 1}
		if seen > 0 {
			r.LastSeen = &seen
		} else {
			r.Flows = 0
		}
		return r
	}
	step := func(name string, r *ExporterHealth) *ExporterHealth {
		tr.prepare(name, []*ExporterHealth{r})
		tr.commit()
		return r
	}
	if r := step("a", row(0, 2000, 1500)); r.Silent {
		t.Fatal("flows in the interval: not silent")
	}
	if r := step("b", row(2000, 4000, 0)); r.Silent || *r.LastSeen != 1500 {
		t.Fatalf("2.5 s without a flow is not yet silent, last seen carried: %+v", r)
	}
	if r := step("c", row(4000, 6000, 0)); !r.Silent {
		t.Fatal("4.5 s without a flow (silent after 3 s) must be silent")
	}
	tr2 := &healthTracker{o: o, known: map[string]*ExporterState{}}
	tr2.load()
	if e := tr2.known[row(0, 0, 0).key()]; e == nil || e.LastSeen != 1500 || e.Files != 3 {
		t.Fatalf("state not reloaded: %+v", tr2.known)
	}
	other := &ExporterHealth{IntervalStart: 100_000, IntervalEnd: 102_000, Exporter: "192.0.2.10", Version: 9}
	step("d", other)
	if _, ok := tr.known[row(0, 0, 0).key()]; ok || tr.forgot != 1 {
		t.Fatal("an exporter silent longer than forget-after leaves the state")
	}
	if _, err := os.Stat(state); err != nil {
		t.Fatal(err)
	}
}
