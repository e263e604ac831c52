package main

import (
	"encoding/binary"
	"testing"
)

func TestGapsOfTemplates(t *testing.T) {
	tm := func(ids ...uint16) *ttemplate {
		x := &ttemplate{}
		for _, id := range ids {
			x.fields = append(x.fields, tfield{id: id, length: 4})
		}
		return x
	}
	cases := []struct {
		name string
		tm   *ttemplate
		want uint16
	}{
		{"ms times, ICMP element", tm(1, 2, 152, 153, 8, 12, 7, 11, 4, 32), 0},
		{"micro times only", tm(1, 2, 154, 155, 8, 12, 7, 11, 4, 32), gapMicro},
		{"micro beside ms", tm(1, 2, 152, 153, 154, 155, 8, 12, 4, 32), 0},
		{"NAT event", tm(323, 8, 12, 7, 11, 4, 230), gapObsTime | gapICMP},
		{"cisco ICMP", tm(1, 2, 21, 22, 8, 12, 7, 11, 4), gapICMP},
		{"frame only", tm(1, 2, 152, 153, 10, 14, 315), gapFrame},
		{"frame beside addresses", tm(1, 2, 152, 153, 8, 12, 315), 0},
		{"physical interfaces", tm(1, 2, 152, 153, 8, 12, 252, 253, 7, 11, 4, 32), gapPhysIf},
		{"physical beside logical", tm(1, 2, 152, 153, 8, 12, 10, 14, 252, 253, 4, 32), 0},
	}
	for _, c := range cases {
		if got := gapsOf(c.tm); got != c.want {
			t.Errorf("%s: gaps %b, want %b", c.name, got, c.want)
		}
	}
	rev := tm(1, 2, 152, 153, 8, 12, 7, 11, 4, 32)
	rev.fields = append(rev.fields, tfield{id: 1, length: 8, enterprise: true, pen: penReverse})
	if gapsOf(rev) != gapReverse {
		t.Errorf("reverse elements not seen: %b", gapsOf(rev))
	}
}

func TestNtpMs(t *testing.T) {
	for _, ms := range []int64{0, 1, 999, 1795857279588} {
		micro := uint64(ms%1000) * 1000
		x := uint64(ms/1000+ntpEpochOffset)<<32 | ((micro<<32)/1_000_000 + 1)
		if got := ntpMs(x); got != ms {
			t.Errorf("ntpMs(%d) = %d", ms, got)
		}
	}
}

func TestParseFrame(t *testing.T) {
	eth := func(et uint16, vlan bool) []byte {
		b := make([]byte, 12)
		if vlan {
			b = binary.BigEndian.AppendUint16(b, 0x8100)
			b = binary.BigEndian.AppendUint16(b, 100)
		}
		return binary.BigEndian.AppendUint16(b, et)
	}
	v4 := append(eth(0x0800, true), 0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 192, 0, 2, 7,
		0x30, 0x39, 0, 53, 0, 8, 0, 0)
	p, ok := parseFrame(v4)
	if !ok || p.v6 || p.proto != 17 || p.sport != 12345 || p.dport != 53 || p.src[12] != 10 || p.dst[15] != 7 {
		t.Fatalf("IPv4/UDP in 802.1Q: %+v %v", p, ok)
	}
	v6 := append(eth(0x86DD, false), 0x60, 0, 0, 0, 0, 8, 58, 64)
	v6 = append(v6, make([]byte, 32)...)
	v6[len(v6)-1] = 1
	v6 = append(v6, 3, 4, 0, 0)
	p, ok = parseFrame(v6)
	if !ok || !p.v6 || p.proto != 58 || p.dport != 3*256+4 || p.dst[15] != 1 {
		t.Fatalf("IPv6/ICMPv6: %+v %v", p, ok)
	}
	for name, bad := range map[string][]byte{
		"short":         {1, 2, 3},
		"ARP":           eth(0x0806, false),
		"cut IPv4":      append(eth(0x0800, false), 0x45, 0, 0, 60, 0, 0),
		"not version 4": append(eth(0x0800, false), make([]byte, 20)...),
		"cut ports":     append(append(eth(0x0800, false), v4[18:38]...), 1),
	} {
		if _, ok := parseFrame(bad); ok {
			t.Errorf("%s: parsed", name)
		}
	}
}

func TestFixRecordRoundTrip(t *testing.T) {
	c := fixRec{what: fixTimes | fixAddr | fixReverse, sport: 1, dport: 2, proto: 6, v6: true, start: 10, end: 20,
		revP: 3, revB: 400, flags: 0x12, revF: 0x18, inIf: 7, outIf: 1 << 30}
	c.src[0], c.dst[15] = 0x20, 9
	var b [fixRecLen]byte
	c.marshal(0xDEADBEEF, &b)
	fp, got := unmarshalFix(b[:])
	if fp != 0xDEADBEEF || got != c {
		t.Fatalf("round trip: %x %+v", fp, got)
	}
}
