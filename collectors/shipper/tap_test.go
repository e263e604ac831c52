package main

import (
	"encoding/binary"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestRateOfEveryForm(t *testing.T) {
	f64 := func(p float64) *recvals {
		return &recvals{prob: p}
	}
	vals := func(m map[uint16]uint64) *recvals {
		v := &recvals{}
		for id, x := range m {
			v.set(slotOf[id], x)
		}
		return v
	}
	cases := []struct {
		name string
		v    *recvals
		want uint32
	}{
		{"305+306", vals(map[uint16]uint64{iePacketInterval: 1, iePacketSpace: 999}), 1000},
		{"305+306 n>1", vals(map[uint16]uint64{iePacketInterval: 2, iePacketSpace: 98}), 50},
		{"309/310 (cisco)", vals(map[uint16]uint64{iePacketInterval: 1, ieSamplingSize: 1, iePopulation: 256}), 256},
		{"311", f64(0.001), 1000},
		{"34", vals(map[uint16]uint64{ieSamplingInterval: 4000}), 4000},
		{"50", vals(map[uint16]uint64{ieSamplerRandomInterval: 2000}), 2000},
		{"305 alone", vals(map[uint16]uint64{iePacketInterval: 64}), 64},
		{"none", vals(map[uint16]uint64{ieSamplerID: 3}), 0},
	}
	for _, c := range cases {
		if got, _ := rateOf(c.v); got != c.want {
			t.Errorf("%s: rate %d, want %d", c.name, got, c.want)
		}
	}
	if r, _ := rateOf(f64(math.NaN())); r != 0 {
		t.Errorf("NaN probability gave rate %d", r)
	}
}

// an IPFIX message: options template (scope selectorId, samplingInterval), two samplers,
// a data template naming its sampler per record, four records.
func ipfixTwoSamplers(rates [2]uint32) []byte {
	be := binary.BigEndian
	var m []byte
	set := func(id uint16, body []byte) {
		h := make([]byte, 4)
		be.PutUint16(h, id)
		be.PutUint16(h[2:], uint16(4+len(body)))
		m = append(append(m, h...), body...)
	}
	u16 := func(b []byte, v ...uint16) []byte {
		for _, x := range v {
			b = be.AppendUint16(b, x)
		}
		return b
	}
	set(3, u16(nil, 300, 2, 1, ieSelectorID, 4, ieSamplingInterval, 4))
	var od []byte
	for i, r := range rates {
		od = be.AppendUint32(be.AppendUint32(od, uint32(i+1)), r)
	}
	set(300, od)
	set(2, u16(nil, 256, 6, ieSrcV4, 4, ieDstV4, 4, iePackets, 4, ieBytes, 4, ieProto, 1, ieSelectorID, 4))
	var dd []byte
	for i := 0; i < 4; i++ {
		dd = be.AppendUint32(dd, 0x0A000001+uint32(i))
		dd = be.AppendUint32(dd, 0xC0000201)
		dd = be.AppendUint32(dd, 3)
		dd = be.AppendUint32(dd, 300)
		dd = append(dd, 17)
		dd = be.AppendUint32(dd, uint32(1+i%2))
	}
	set(256, dd)
	hdr := make([]byte, 16)
	be.PutUint16(hdr, 10)
	be.PutUint16(hdr[2:], uint16(16+len(m)))
	be.PutUint32(hdr[12:], 7)
	return append(hdr, m...)
}

// tapDatagrams runs a tap (no socket) over datagrams from 192.0.2.9 into a fresh directory.
func tapDatagrams(tb testing.TB, now time.Time, datagrams ...[]byte) string {
	dir := tb.TempDir()
	os.MkdirAll(filepath.Join(dir, "fp"), 0o755)
	rates, _ := os.Create(filepath.Join(dir, "rates.jsonl"))
	tp := &tap{o: tapOptions{dir: dir, keep: time.Hour}, exporters: map[string]*texporter{}, rates: rates}
	for _, d := range datagrams {
		tp.datagram(netip.MustParseAddr("192.0.2.9"), d, now)
	}
	tp.flushFP()
	rates.Close()
	return dir
}

func TestTapResolvesEachRecordsSamplerAndRateChanges(t *testing.T) {
	now := time.Now()
	dir := tapDatagrams(t, now, ipfixTwoSamplers([2]uint32{4000, 2000}),
		ipfixTwoSamplers([2]uint32{4000, 500})) // sampler 2 changes
	changes := readRateChanges(filepath.Join(dir, "rates.jsonl"))
	if len(changes) != 3 || changes[2].Sampler != 2 || changes[2].Rate != 500 {
		t.Fatalf("rate changes: %+v", changes)
	}
	r, err := NewResolver("", dir)
	if err != nil {
		t.Fatal(err)
	}
	// records as the shipper reads them from nfcapd's file, in the same order
	var total [2]uint64
	for round := 0; round < 2; round++ {
		for i := 0; i < 4; i++ {
			f := &Flow{Exporter: &Exporter{Addr: "192.0.2.9", Domain: 7}, Proto: 17, Packets: 3, Bytes: 300,
				SamplingRate: 1, Received: now.UnixMilli()}
			copy(f.SrcAddr[:], []byte{10, 0, 0, byte(1 + i)})
			copy(f.DstAddr[:], []byte{192, 0, 2, 1})
			r.Resolve(f)
			want := map[int]uint32{0: 4000, 1: 2000}[i%2]
			if round == 1 && i%2 == 1 {
				want = 500
			}
			if f.SamplingRate != want || f.Packets != 3*uint64(want) || f.Bytes != 300*uint64(want) {
				t.Errorf("round %d record %d: rate %d packets %d bytes %d, want rate %d", round, i, f.SamplingRate, f.Packets, f.Bytes, want)
			}
			total[round] += f.Packets
		}
	}
	if c := r.Counts["192.0.2.9"]; c.Flows != 8 || c.Sources["announced"] != 8 || c.Unknown != 0 {
		t.Errorf("counts %+v", c)
	}
}

func TestResolverUndoesWhatNfcapdAppliedAndHonoursSettings(t *testing.T) {
	dir := t.TempDir()
	settings := filepath.Join(dir, "s.json")
	os.WriteFile(settings, []byte(`{"exporters": {"192.0.2.1": {"sampling": 100}, "192.0.2.2": {"force_sampling": 10}}, "unannounced": 0}`), 0o644)
	r, err := NewResolver(settings, "")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		addr                 string
		applied              uint32
		packets, wantPackets uint64
		wantRate             uint32
	}{
		{"192.0.2.1", 1, 5, 500, 100},               // announces nothing: the configured default
		{"192.0.2.1", 50, 250, 250, 50},             // nfcapd applied the v5 header's 50: kept, not doubled
		{"192.0.2.2", 50, 250, 50, 10},              // forced: nfcapd's 50 divided out, 10 applied
		{"192.0.2.3", 1, 7, 7, 0},                   // nothing known, unannounced = 0: unknown
		{"192.0.2.3", 4294967295, 4294967295, 1, 1}, // nfcapd -s -1 on IPFIX (x 2^32-1): undone, 1:1
		{"192.0.2.3", 10, 70, 70, 10},               // nfcapd -s 10 (an archive's setting): kept
	}
	for _, c := range cases {
		f := &Flow{Exporter: &Exporter{Addr: c.addr}, Packets: c.packets, Bytes: c.packets * 100, SamplingRate: c.applied,
			NfcapdSetting: c.addr == "192.0.2.3" && c.applied > 1}
		r.Resolve(f)
		if f.SamplingRate != c.wantRate || f.Packets != c.wantPackets || f.Bytes != c.wantPackets*100 {
			t.Errorf("%+v: got rate %d packets %d bytes %d", c, f.SamplingRate, f.Packets, f.Bytes)
		}
	}
	if r.Counts["192.0.2.3"].Unknown != 1 {
		t.Errorf("unknown not counted: %+v", r.Counts["192.0.2.3"])
	}
}

// v9: options scoped by interface (type 2) with SAMPLING_INTERVAL, a rate per input
// interface; data records without a sampler id take their input interface's rate.
func TestTapRatePerInterfaceScope(t *testing.T) {
	be := binary.BigEndian
	var m []byte
	set := func(id uint16, body []byte) {
		m = be.AppendUint16(be.AppendUint16(m, id), uint16(4+len(body)))
		m = append(m, body...)
	}
	u16 := func(v ...uint16) (b []byte) {
		for _, x := range v {
			b = be.AppendUint16(b, x)
		}
		return b
	}
	set(1, u16(300, 4, 4, 2, 4, ieSamplingInterval, 4)) // scope Interface (4 bytes), 34
	set(300, be.AppendUint32(be.AppendUint32(be.AppendUint32(be.AppendUint32(nil, 3), 100), 5), 1000))
	set(0, u16(256, 4, ieSrcV4, 4, iePackets, 4, ieBytes, 4, ieInIf, 2))
	var d []byte
	for _, inIf := range []uint16{3, 5} {
		d = be.AppendUint16(be.AppendUint32(be.AppendUint32(be.AppendUint32(d, 0x0A000001), 2), 200), inIf)
	}
	set(256, d)
	hdr := be.AppendUint32(be.AppendUint32(be.AppendUint32(be.AppendUint32(u16(9, 4), 0), 0), 0), 1)
	now := time.Now()
	r, _ := NewResolver("", tapDatagrams(t, now, append(hdr, m...)))
	for _, c := range []struct {
		inIf uint32
		rate uint32
	}{{3, 100}, {5, 1000}} {
		f := &Flow{Exporter: &Exporter{Addr: "192.0.2.9", Domain: 1}, Packets: 2, Bytes: 200, SamplingRate: 1,
			Received: now.UnixMilli(), InputIf: c.inIf}
		copy(f.SrcAddr[:], []byte{10, 0, 0, 1})
		r.Resolve(f)
		if f.SamplingRate != c.rate || f.Packets != 2*uint64(c.rate) {
			t.Errorf("input interface %d: rate %d packets %d, want rate %d", c.inIf, f.SamplingRate, f.Packets, c.rate)
		}
	}
}
