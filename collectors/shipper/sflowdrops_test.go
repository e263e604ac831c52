package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// ethFrame: Ethernet (with an 802.1Q tag when vlan > 0), IPv4 (ToS 0x28), TCP SYN|ACK or UDP.
func ethFrame(vlan uint16, proto uint8, src, dst [4]byte, sport, dport uint16, payload int) []byte {
	f := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1}
	if vlan > 0 {
		f = append(f, 0x81, 0x00, byte(vlan>>8), byte(vlan))
	}
	f = append(f, 0x08, 0x00)
	return append(f, ipv4Packet(proto, src, dst, sport, dport, payload)...)
}

func ipv4Packet(proto uint8, src, dst [4]byte, sport, dport uint16, payload int) []byte {
	l4 := make([]byte, 8)
	if proto == 6 {
		l4 = make([]byte, 20)
		l4[12], l4[13] = 0x50, 0x12
	}
	if proto == 1 { // ICMP: type 3 code 13 in sport's bytes
		l4[0], l4[1] = byte(sport), byte(dport)
	} else {
		binary.BigEndian.PutUint16(l4, sport)
		binary.BigEndian.PutUint16(l4[2:], dport)
	}
	ip := []byte{0x45, 0x28, 0, 0, 0, 0, 0, 0, 64, proto, 0, 0}
	ip = append(append(append(ip, src[:]...), dst[:]...), l4...)
	ip = append(ip, make([]byte, payload)...)
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	return ip
}

// dropSample: a discarded packet sample (0:5) with one raw packet header record.
func dropSample(seq, input, reason, headerProto, frameLen uint32, header []byte) sample {
	pad := append(append([]byte(nil), header...), make([]byte, (4-len(header)%4)%4)...)
	rec := append(be32(headerProto, frameLen, 4, uint32(len(header))), pad...)
	body := append(be32(seq, 0, 5, 2, input, 0, reason, 1, 1, uint32(len(rec))), rec...)
	return sample{5, body}
}

func TestSFlowDropSamplesBecomeRecords(t *testing.T) {
	dir := t.TempDir()
	st := newTapState()
	w, err := newDropWriter(dir, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	st.drops = w
	now := time.UnixMilli(1_764_000_000_000)
	tcp := ethFrame(100, 6, [4]byte{10, 0, 0, 1}, [4]byte{10, 0, 0, 2}, 40000, 443, 0)
	icmp := ipv4Packet(1, [4]byte{10, 0, 0, 3}, [4]byte{10, 0, 0, 4}, 3, 13, 20)
	truncated := dropSample(3, 7, 258, 1, 64, tcp)
	truncated.body = truncated.body[:40]          // its raw packet header record is cut
	unknown := dropSample(4, 7, 258, 13, 64, tcp) // MPLS header protocol: not read
	st.sflowDatagram(sender, datagram(2, 1, 1000,
		dropSample(1, 7, 258, 1, uint32(len(tcp)+4), tcp),  // ACL, Ethernet with FCS
		flowSample(10, 3, 4),                               // an ordinary flow sample beside them
		dropSample(2, 8, 257, 11, uint32(len(icmp)), icmp), // TTL exceeded, an IPv4 header
		truncated, unknown), now)
	a := st.Agents["192.0.2.5/2"]
	wantBad := map[string]uint64{
		"discarded packet sample: flow record longer than its sample":                             1,
		"discarded packet sample: sampled header is not Ethernet, IPv4 or IPv6 flowlake can read": 1,
	}
	if !reflect.DeepEqual(a.Bad, wantBad) || a.DropRecords != 2 || a.DiscardSamp != 4 || a.FlowSamples != 1 || a.DropNotesLost != 8 {
		t.Fatalf("bad %v records %d discards %d flow samples %d lost notes %d", a.Bad, a.DropRecords, a.DiscardSamp, a.FlowSamples, a.DropNotesLost)
	}
	if err := w.flush(now); err != nil {
		t.Fatal(err)
	}
	// a killed tap: its current file stays; the next tap renames it for the shipper
	w.pid, w.f = 999_999_999, nil
	if err := os.Rename(filepath.Join(dir, "nfcapd.current."+itoaPID(os.Getpid())), filepath.Join(dir, "nfcapd.current.999999999")); err != nil {
		t.Fatal(err)
	}
	w2, err := newDropWriter(dir, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	recovered, _ := filepath.Glob(filepath.Join(dir, "nfcapd.*.recovered999999999"))
	if len(recovered) != 1 {
		t.Fatalf("recovered %v", recovered)
	}
	// the restarted tap writes its own file; closed, it gets a name of its own
	st.drops = w2
	st.sflowDatagram(sender, datagram(2, 2, 2000, dropSample(5, 9, 261, 1, uint32(len(tcp)+4), tcp)), now)
	if err := w2.flush(now); err != nil {
		t.Fatal(err)
	}
	if err := w2.close(); err != nil {
		t.Fatal(err)
	}
	closed, _ := filepath.Glob(filepath.Join(dir, "nfcapd.20251124160000"))
	if len(closed) != 1 {
		all, _ := filepath.Glob(filepath.Join(dir, "*"))
		t.Fatalf("closed file: %v", all)
	}
	var flows []Flow
	for _, f := range append(recovered, closed...) {
		got, stats, err := readAll(t, f)
		if err != nil {
			t.Fatal(err)
		}
		if f == closed[0] && (stats.Unfinished || stats.Blocks != 1) {
			t.Errorf("%s: stats %+v", f, stats)
		}
		flows = append(flows, got...)
	}
	if len(flows) != 3 {
		t.Fatalf("%d flows: %+v", len(flows), flows)
	}
	type row struct {
		exporter            string
		domain              uint32
		in, out             uint32
		fwd, proto, flags   uint8
		tos                 uint8
		sport, dport        uint16
		packets, bytes      uint64
		rate                uint32
		srcMAC, dstMAC      uint64
		vlan                uint32
		src, dst            string
		start, end, receive int64
	}
	got := make([]row, len(flows))
	for i, f := range flows {
		got[i] = row{f.Exporter.Addr, f.Exporter.Domain, f.InputIf, f.OutputIf, f.FwdStatus, f.Proto, f.TCPFlags, f.Tos,
			f.SrcPort, f.DstPort, f.Packets, f.Bytes, f.SamplingRate, f.SrcMAC, f.DstMAC, f.SrcVlan,
			string(appendIPv4(nil, f.SrcAddr[:4])), string(appendIPv4(nil, f.DstAddr[:4])), f.TimeStart, f.TimeEnd, f.Received}
	}
	ms := now.UnixMilli()
	l3 := uint64(len(tcp) - 18)
	want := []row{
		{"192.0.2.5", 2, 7, 0, 129, 6, 0x12, 0x28, 40000, 443, 1, l3, 1, 0x020000000001, 0x020000000002, 100, "10.0.0.1", "10.0.0.2", ms, ms, ms},
		{"192.0.2.5", 2, 8, 0, 137, 1, 0, 0x28, 0, 3*256 + 13, 1, uint64(len(icmp)), 1, 0, 0, 0, "10.0.0.3", "10.0.0.4", ms, ms, ms},
		{"192.0.2.5", 2, 9, 0, 138, 6, 0x12, 0x28, 40000, 443, 1, l3, 1, 0x020000000001, 0x020000000002, 100, "10.0.0.1", "10.0.0.2", ms, ms, ms},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%+v\nwant\n%+v", got, want)
	}
	for _, f := range flows {
		if !f.L2Corrected && f.SrcMAC != 0 {
			t.Errorf("not corrected to layer 3: %+v", f)
		}
	}
}

func itoaPID(pid int) string { return string(appendDecimal(nil, pid)) }

func appendDecimal(dst []byte, v int) []byte {
	if v >= 10 {
		dst = appendDecimal(dst, v/10)
	}
	return append(dst, byte('0'+v%10))
}

func TestSFlowPortNameIsIfName(t *testing.T) {
	st := newTapState()
	t0 := time.UnixMilli(1_764_000_000_000)
	named := func(s sample, name string) sample {
		rec := append(be32(uint32(len(name))), append([]byte(name), make([]byte, (4-len(name)%4)%4)...)...)
		body := append([]byte(nil), s.body...)
		binary.BigEndian.PutUint32(body[8:], 2) // two records
		body = append(append(body, be32(1005, uint32(len(rec)))...), rec...)
		return sample{s.format, body}
	}
	st.sflowDatagram(sender, datagram(0, 1, 10_000, named(ifCounters(1, 4, 1000, 5000, 1, 1, 0), "eth4"),
		ifCounters(1, 5, 1000, 5000, 1, 1, 0)), t0)
	st.sflowDatagram(sender, datagram(0, 2, 20_000, ifCounters(2, 4, 2000, 6000, 2, 2, 0)), t0.Add(10*time.Second))
	bad := ifCounters(3, 4, 3000, 7000, 3, 3, 0)
	bad.body = append(bad.body[:8], append(be32(2), append(bad.body[12:], be32(1005, 4, 200)...)...)...) // name longer than its record
	st.sflowDatagram(sender, datagram(0, 3, 30_000, bad), t0.Add(20*time.Second))
	var names []string
	for _, r := range st.Pending {
		names = append(names, r.IfName)
	}
	// the name sent once stays the interface's; an interface never named stays unknown
	if want := []string{"eth4", "", "eth4", "eth4"}; !reflect.DeepEqual(names, want) {
		t.Errorf("names %v, want %v", names, want)
	}
	a := st.Agents["192.0.2.5/0"]
	if a.Bad["port name record longer than its record"] != 1 || a.IfCounters != 4 {
		t.Errorf("bad %v, records %d", a.Bad, a.IfCounters)
	}
	rec := sflowCountersRecord(st.Pending)
	defer rec.Release()
	if got := rec.Column(3).ValueStr(0); got != "eth4" {
		t.Errorf("if_name column %q", got)
	}
}
