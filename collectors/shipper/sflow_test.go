package main

import (
	"encoding/binary"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// sfcapd's record of one sFlow sample at 1:rate of a frame (FCS included), as read.
func sflowRecord(rate, frame uint64) *Flow {
	return &Flow{NfVersion: 0x85, Packets: rate, Bytes: rate * frame, SamplingRate: 99, NfcapdSetting: true,
		SrcMAC: 0x020000000001, DstMAC: 0x020000000002, Proto: 6, SrcAddr: [16]byte{10, 0, 0, 1},
		DstAddr: [16]byte{10, 0, 0, 2}, Exporter: &Exporter{Addr: "192.0.2.1"}}
}

func TestSFlowFixupBytesAtLayer3(t *testing.T) {
	cases := []struct {
		name             string
		srcVlan, dstVlan uint32
		noMAC            bool
		frame, want      uint64
	}{
		{"untagged: header 14 + FCS 4", 0, 0, false, 58, 40},
		{"802.1Q tag: 4 more", 100, 0, false, 250, 228},
		{"extended switch VLANs: the tag is not known", 77, 88, false, 62, 44},
		{"IP header_protocol (no MACs): already layer 3", 0, 0, true, 40, 40},
		{"shorter than its own overhead: left alone", 0, 0, false, 10, 10},
	}
	for _, c := range cases {
		f := sflowRecord(7, c.frame)
		f.SrcVlan, f.DstVlan = c.srcVlan, c.dstVlan
		if c.noMAC {
			f.SrcMAC, f.DstMAC = 0, 0
		}
		f.sflowFixup()
		if f.Bytes != 7*c.want || f.Packets != 7 || f.SamplingRate != 7 || f.NfcapdSetting {
			t.Errorf("%s: bytes %d packets %d rate %d nfcapd-setting %v, want bytes %d packets 7 rate 7",
				c.name, f.Bytes, f.Packets, f.SamplingRate, f.NfcapdSetting, 7*c.want)
		}
	}
}

func TestSFlowFixupICMPAndHeaderless(t *testing.T) {
	f := sflowRecord(1, 102)
	f.Proto, f.SrcPort, f.DstPort = 1, 3, 1 // sfcapd: type in src_port, code in dst_port
	f.sflowFixup()
	if f.SrcPort != 0 || f.DstPort != 3<<8|1 {
		t.Errorf("ICMP ports %d/%d, want 0/%d", f.SrcPort, f.DstPort, 3<<8|1)
	}
	empty := &Flow{NfVersion: 0x85, Packets: 1, Exporter: &Exporter{Addr: "192.0.2.1"}}
	empty.sflowFixup()
	if empty.Reject == "" {
		t.Error("a record without addresses and bytes was not rejected")
	}
	netflow := &Flow{NfVersion: 9, Packets: 1, Proto: 1, SrcPort: 3, Exporter: &Exporter{Addr: "192.0.2.1"}}
	if netflow.NfVersion&nfVersionSFlow != 0 {
		t.Fatal("NetFlow v9 taken for sFlow")
	}
}

// The resolver keeps each sFlow record's own rate (never the sampler record's, never the
// configured default) and applies it once; force_sampling still wins.
func TestResolveSFlowOwnRateOnce(t *testing.T) {
	r, err := NewResolver("", "")
	if err != nil {
		t.Fatal(err)
	}
	r.settings.Exporters = map[string]ExporterSampling{"192.0.2.1": {Sampling: 1000}}
	for _, rate := range []uint64{100, 50, 1} {
		f := sflowRecord(rate, 58)
		f.sflowFixup()
		r.Resolve(f)
		if f.SamplingRate != uint32(rate) || f.Packets != rate || f.Bytes != rate*40 {
			t.Errorf("1:%d: rate %d packets %d bytes %d", rate, f.SamplingRate, f.Packets, f.Bytes)
		}
	}
	r.settings.Exporters["192.0.2.2"] = ExporterSampling{Force: 10}
	f := sflowRecord(100, 58)
	f.Exporter = &Exporter{Addr: "192.0.2.2"}
	f.sflowFixup()
	r.Resolve(f)
	if f.SamplingRate != 10 || f.Packets != 10 || f.Bytes != 400 {
		t.Errorf("forced 1:10: rate %d packets %d bytes %d", f.SamplingRate, f.Packets, f.Bytes)
	}
}

func sflowTestDatagram(agent [4]byte, sub, seq, uptime uint32, samples ...[]byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, 5)
	b = binary.BigEndian.AppendUint32(b, 1)
	b = append(b, agent[:]...)
	for _, v := range []uint32{sub, seq, uptime, uint32(len(samples))} {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	for _, s := range samples {
		b = append(b, s...)
	}
	return b
}

func sflowTestSample(format, rate, drops uint32) []byte {
	body := make([]byte, 32)
	binary.BigEndian.PutUint32(body[8:], rate)
	binary.BigEndian.PutUint32(body[16:], drops)
	b := binary.BigEndian.AppendUint32(nil, format)
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	return append(b, body...)
}

// Sequence accounting per agent/sub-agent: gaps lost, a late datagram taken back from the
// lost, a duplicate, a restart (uptime back to near 0) not counted as loss; samples by kind,
// rates and the agent's drops; malformed datagrams by reason, without touching the counts.
func TestSFlowTapSequencesAndSamples(t *testing.T) {
	st := &SFlowTapState{Malformed: map[string]uint64{}, Agents: map[string]*SFlowAgent{}}
	sender := netip.MustParseAddr("198.51.100.1")
	agent := [4]byte{192, 0, 2, 50}
	now := time.Now()
	feed := []struct{ seq, uptime uint32 }{{1, 100010}, {2, 100020}, {3, 100030}, {7, 100070}, {6, 100060}, {8, 100080},
		{8, 100080}, {1, 5}, {2, 15}}
	for _, d := range feed {
		st.sflowDatagram(sender, sflowTestDatagram(agent, 0, d.seq, d.uptime, sflowTestSample(1, 100, 2), sflowTestSample(2, 0, 0)), now)
	}
	st.sflowDatagram(sender, sflowTestDatagram(agent, 1, 1, 1, sflowTestSample(3, 0, 0), sflowTestSample(99, 0, 0)), now)
	st.sflowDatagram(sender, []byte{0, 0, 0, 5, 0, 0}, now)
	st.sflowDatagram(sender, append(sflowTestDatagram(agent, 2, 1, 1, sflowTestSample(1, 10, 0)), 0, 0, 0, 1, 0, 0, 0, 200), now)
	a := st.Agents["192.0.2.50/0"]
	if a == nil || a.Datagrams != 9 || a.Lost != 2 || a.Reordered != 2 || a.Restarts != 1 {
		t.Fatalf("agent 0: %+v", a)
	}
	if a.FlowSamples != 9 || a.CountSamples != 9 || a.AgentDrops != 18 || a.Rates["100"] != 9 || a.Senders["198.51.100.1"] != 9 {
		t.Errorf("agent 0 samples: %+v", a)
	}
	if b := st.Agents["192.0.2.50/1"]; b == nil || b.FlowSamples != 1 || b.OtherSamples != 1 || b.Rates["0"] != 1 {
		t.Errorf("agent 1: %+v", b)
	}
	if st.Datagrams != 12 || st.Malformed["truncated header"] != 1 || len(st.Malformed) != 1 {
		t.Errorf("datagrams %d malformed %v", st.Datagrams, st.Malformed)
	}
}

// sfcapd's exporter (sender, sub-agent id as domain) takes the agent address the tap read;
// a sender/sub-agent pair seen with two agent addresses stays the sender.
func TestSFlowAgentMap(t *testing.T) {
	dir := t.TempDir()
	st := &SFlowTapState{Malformed: map[string]uint64{}, Agents: map[string]*SFlowAgent{}}
	relay := netip.MustParseAddr("198.51.100.1")
	st.sflowDatagram(relay, sflowTestDatagram([4]byte{192, 0, 2, 50}, 3, 1, 1), time.Now())
	st.sflowDatagram(relay, sflowTestDatagram([4]byte{192, 0, 2, 60}, 4, 1, 1), time.Now())
	st.sflowDatagram(relay, sflowTestDatagram([4]byte{192, 0, 2, 61}, 4, 1, 1), time.Now())
	data, _ := json.Marshal(st)
	if err := os.WriteFile(filepath.Join(dir, "sflow.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	var m sflowAgentMap
	m.load(filepath.Join(dir, "sflow.json"))
	one := &Exporter{Addr: "198.51.100.1", Domain: 3, Version: 9999}
	two := &Exporter{Addr: "198.51.100.1", Domain: 4, Version: 9999}
	m.apply(one)
	m.apply(two)
	m.apply(one) // once per exporter
	if one.Addr != "192.0.2.50" || string(one.addrRaw) != string([]byte{192, 0, 2, 50}) {
		t.Errorf("sub-agent 3: %q %v", one.Addr, one.addrRaw)
	}
	if two.Addr != "198.51.100.1" {
		t.Errorf("ambiguous sub-agent 4 renamed to %q", two.Addr)
	}
}
