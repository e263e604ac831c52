package main

import (
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// sample is one sFlow v5 sample: format and body.
type sample struct {
	format uint32
	body   []byte
}

func be32(vs ...uint32) []byte {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.BigEndian.PutUint32(b[4*i:], v)
	}
	return b
}

// datagram builds an sFlow v5 datagram from agent 192.0.2.5.
func datagram(sub, seq, uptime uint32, samples ...sample) []byte {
	p := be32(5, 1)
	p = append(p, 192, 0, 2, 5)
	p = append(p, be32(sub, seq, uptime, uint32(len(samples)))...)
	for _, s := range samples {
		p = append(p, be32(s.format, uint32(len(s.body)))...)
		p = append(p, s.body...)
	}
	return p
}

// ifCounters builds a counter sample (0:2) with one generic interface counters record.
func ifCounters(seq, idx uint32, inOctets, outOctets uint64, inPkts, outPkts, inErr uint32) sample {
	r := make([]byte, sflowIfCountersLen)
	be := binary.BigEndian
	be.PutUint32(r[0:], idx)
	be.PutUint32(r[4:], 6)
	be.PutUint64(r[8:], 1_000_000_000) // 1 Gbit/s
	be.PutUint32(r[20:], 3)            // admin and oper up
	be.PutUint64(r[24:], inOctets)
	be.PutUint32(r[32:], inPkts)
	be.PutUint32(r[48:], inErr)
	be.PutUint64(r[56:], outOctets)
	be.PutUint32(r[64:], outPkts)
	body := be32(seq, idx, 1)
	body = append(body, be32(1, uint32(len(r)))...)
	return sample{2, append(body, r...)}
}

// flowSample builds a compact flow sample (0:1) at 1:rate with these input/output words, no records.
func flowSample(rate, in, out uint32) sample {
	return sample{1, be32(1, 7, rate, 100, 0, in, out, 0)}
}

func newTapState() *SFlowTapState {
	return &SFlowTapState{Malformed: map[string]uint64{}, Agents: map[string]*SFlowAgent{}, CounterState: map[string]*sflowIfPrev{}}
}

var sender = netip.MustParseAddr("198.51.100.1")

func TestSFlowCounterDeltas(t *testing.T) {
	st := newTapState()
	t0 := time.UnixMilli(1_764_000_000_000)
	st.sflowDatagram(sender, datagram(0, 1, 10_000, ifCounters(1, 4, 1000, 5000, 0xFFFFFFF0, 7, 0xFFFFFFFF)), t0)
	st.sflowDatagram(sender, datagram(0, 2, 30_000, ifCounters(2, 4, 251000, 5100, 0x10, 9, 0xFFFFFFFF)), t0.Add(20*time.Second))
	if len(st.Pending) != 2 {
		t.Fatalf("%d rows, want 2", len(st.Pending))
	}
	first, r := st.Pending[0], st.Pending[1]
	if first.HasInterval || first.HasDelta[0] || first.Reset {
		t.Errorf("first sample of an interface has deltas: %+v", first)
	}
	if !r.HasInterval || r.Interval != 20 || r.Reset {
		t.Errorf("interval %v (has %v), reset %v; want 20 s from the agent's uptime", r.Interval, r.HasInterval, r.Reset)
	}
	want := map[int]int64{0: 250000, 1: 100, 2: 0x20, 3: 2} // in_ucast_pkts wrapped at 32 bits
	for i, w := range want {
		if !r.HasDelta[i] || r.Delta[i] != w {
			t.Errorf("%s delta %d (has %v), want %d", sflowCounterNames[i], r.Delta[i], r.HasDelta[i], w)
		}
	}
	if r.HasDelta[4] {
		t.Errorf("in_errors unsupported (all ones) but has delta %d", r.Delta[4])
	}
	if r.Exporter != "192.0.2.5" || r.IfIndex != 4 || r.SpeedMbps != 1000 || r.Oper != 1 || r.UptimeCs != 3000 {
		t.Errorf("row identity %+v", r)
	}
	// the agent restarts: uptime back, counters from zero: no deltas, reset
	st.sflowDatagram(sender, datagram(0, 1, 2_000, ifCounters(1, 4, 10, 10, 1, 1, 0)), t0.Add(40*time.Second))
	if r := st.Pending[2]; !r.Reset || r.HasDelta[0] || r.HasInterval {
		t.Errorf("after a restart: %+v, want reset and null deltas", r)
	}
	// a new agent process: datagram numbering restarts, its first counter sample has the
	// same sequence number and uptime as the old process's last one: a new series, not a duplicate
	// (the old process's datagram 100 repeats its last counter sample: a duplicate, dropped)
	st.sflowDatagram(sender, datagram(0, 100, 2_000, ifCounters(1, 4, 10, 10, 1, 1, 0)), t0.Add(50*time.Second))
	st.sflowDatagram(sender, datagram(0, 1, 2_000, ifCounters(1, 4, 10, 10, 1, 1, 0)), t0.Add(60*time.Second))
	if len(st.Pending) != 4 || !st.Pending[3].Reset {
		t.Errorf("rows %d; a restarted agent's first sample: %+v", len(st.Pending), st.Pending[len(st.Pending)-1])
	}
	a := st.Agents["192.0.2.5/0"]
	if a.IfCounters != 5 || a.CountSamples != 5 || a.Restarts != 2 || a.Bad[sflowRestart] != 2 {
		t.Errorf("agent counts: records %d samples %d restarts %d bad %v", a.IfCounters, a.CountSamples, a.Restarts, a.Bad)
	}
}

func TestSFlowBadInputPerAgent(t *testing.T) {
	st := newTapState()
	now := time.UnixMilli(1_764_000_000_000)
	good := flowSample(100, 3, 5)
	p := datagram(2, 1, 1000, good, sample{0x1234, be32(1, 2)}, good)
	st.sflowDatagram(sender, p, now)
	// a datagram cut inside its second sample: the first still counts
	q := datagram(2, 2, 1100, good, good)
	st.sflowDatagram(sender, q[:len(q)-10], now)
	// a counter sample whose generic counters record is cut short
	short := sample{2, append(be32(1, 4, 1, 1, 40), make([]byte, 40)...)}
	st.sflowDatagram(sender, datagram(2, 3, 1200, short), now)
	// a datagram shorter than its header: no agent known, counted for the tap only
	st.sflowDatagram(sender, []byte{0, 0, 0, 5}, now)
	a := st.Agents["192.0.2.5/2"]
	if a.FlowSamples != 3 || a.OtherSamples != 1 || a.Datagrams != 3 || a.Lost != 0 {
		t.Errorf("flow %d other %d datagrams %d lost %d, want 3 1 3 0", a.FlowSamples, a.OtherSamples, a.Datagrams, a.Lost)
	}
	want := map[string]uint64{"unknown sample format 1:564": 1, "sample longer than the datagram": 1,
		"generic interface counters record too short": 1}
	for k, v := range want {
		if a.Bad[k] != v {
			t.Errorf("agent bad %q = %d, want %d (all: %v)", k, a.Bad[k], v, a.Bad)
		}
	}
	if st.Malformed["truncated header"] != 1 || st.Malformed["unknown sample format 1:564"] != 0 || len(a.Bad) != len(want) {
		t.Errorf("tap malformed %v, agent bad %v", st.Malformed, a.Bad)
	}
	if a.Interval.Samples != 5 || a.Interval.Bad["sample longer than the datagram"] != 1 {
		t.Errorf("interval samples %d bad %v", a.Interval.Samples, a.Interval.Bad)
	}
}

func TestSFlowDiscardsInternalMultiple(t *testing.T) {
	st := newTapState()
	now := time.UnixMilli(1_764_000_000_000)
	expanded := sample{3, be32(1, 0, 9, 100, 1000, 0, 0, 4, 1, 258, 0)} // output format 1: discard, reason ACL
	discarded := sample{5, be32(1, 0, 9, 0, 4, 0, 257, 0)}              // discarded packet sample: TTL exceeded
	st.sflowDatagram(sender, datagram(0, 1, 1000,
		flowSample(10, 0x3fffffff, 5),      // internal input
		flowSample(10, 3, 0x80000003),      // three output interfaces
		flowSample(10, 3, 0x40000000|4),    // discarded: fragmentation needed and DF
		flowSample(10, 3, 0x40000000|9999), // discarded, a reason this table does not know
		expanded, discarded), now)
	a := st.Agents["192.0.2.5/0"]
	want := map[string]uint64{"133": 1, "128": 1, "129": 1, "137": 1}
	for k, v := range want {
		if a.Discards[k] != v {
			t.Errorf("forwarding_status %s: %d discards, want %d (all %v)", k, a.Discards[k], v, a.Discards)
		}
	}
	noHeader := map[string]uint64{"discarded packet sample without a raw packet header record": 1} // no row: counted
	if a.Internal != 1 || a.Multiple != 1 || a.DiscardSamp != 4 || a.FlowSamples != 5 || !reflect.DeepEqual(a.Bad, noHeader) {
		t.Errorf("internal %d multiple %d discards %d flow %d bad %v", a.Internal, a.Multiple, a.DiscardSamp, a.FlowSamples, a.Bad)
	}
}

func TestSFlowFlushWritesOnceAndSkipsSNMP(t *testing.T) {
	dir := t.TempDir()
	snmp := filepath.Join(dir, "interfaces.json")
	if err := os.WriteFile(snmp, []byte(`{"version":1,"exporters":{"192.0.2.9":{}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	st := newTapState()
	t0 := time.UnixMilli(1_764_000_000_000)
	st.sflowDatagram(sender, datagram(0, 1, 10_000, ifCounters(1, 4, 1, 1, 1, 1, 0), flowSample(100, 1, 2)), t0)
	st.Pending = append(st.Pending, sflowCounterRow{TimeMs: t0.UnixMilli(), Exporter: "192.0.2.9"}) // an SNMP-polled agent
	again := append([]sflowCounterRow(nil), st.Pending...)
	if err := st.flushLake(dir, snmp, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "interface_counters", "date=*", "*.parquet"))
	health, _ := filepath.Glob(filepath.Join(dir, "sflow_agent_health", "date=*", "*.parquet"))
	if len(files) != 1 || filepath.Base(files[0]) != "sflow_192.0.2.5-1764000000000.parquet" || len(health) != 1 {
		t.Fatalf("files %v health %v", files, health)
	}
	if st.SkippedSNMP != 1 || len(st.Pending) != 0 || st.Agents["192.0.2.5/0"].Interval.Datagrams != 0 {
		t.Errorf("skipped %d pending %d", st.SkippedSNMP, len(st.Pending))
	}
	// a crash before the state was saved: the same rows again land in the same file
	st.Pending = again
	if err := st.flushLake(dir, snmp, t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	files, _ = filepath.Glob(filepath.Join(dir, "interface_counters", "date=*", "*.parquet"))
	if len(files) != 1 {
		t.Errorf("rows written twice: %v", files)
	}
}
