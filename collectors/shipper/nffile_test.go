package main

import (
	"bytes"
	"encoding/binary"
	"math/rand"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pierrec/lz4/v4"
)

// synthetic nfdump 1.7 file: one exporter (192.0.2.1, sysid 1), a 1:100 sampler, and
// n V3 flows alternating IPv4 / IPv6. Real-file checks against nfdump live in
// tests/collectors/test_shipper.py; these pin the layout and the error paths.
func buildFile(t *testing.T, n int, compression uint8) []byte {
	t.Helper()
	le := binary.LittleEndian
	var recs bytes.Buffer
	put16 := func(v uint16) { binary.Write(&recs, le, v) }
	put32 := func(v uint32) { binary.Write(&recs, le, v) }
	put64 := func(v uint64) { binary.Write(&recs, le, v) }
	// exporter info: type 7, size 32, version 9, ip[2], family 2, sysid 1, id 0
	put16(recExporterInfo)
	put16(32)
	put32(9)
	put64(0)
	put64(0xC0000201)
	put16(2)
	put16(1)
	put32(0)
	// sampler: type 15, size 24, sysid 1, algorithm 0, id -2, packet interval 1, space 99
	put16(recSampler)
	put16(24)
	put16(1)
	put16(0)
	put64(uint64(0xFFFFFFFFFFFFFFFE))
	put32(1)
	put32(99)
	for i := 0; i < n; i++ {
		v6 := i%2 == 1
		size := 12 + 52 + 20 + 12
		if v6 {
			size = 12 + 52 + 20 + 36
		}
		put16(recV3)
		put16(uint16(size))
		put16(3)
		recs.WriteByte(0)
		recs.WriteByte(0)
		put16(1)
		recs.WriteByte(v3FlagSampled)
		recs.WriteByte(9)
		put16(exGenericFlow)
		put16(52)
		put64(uint64(1_700_000_000_000 + i))
		put64(uint64(1_700_000_000_500 + i))
		put64(0)
		put64(uint64(100 * (i + 1)))
		put64(uint64(6400 * (i + 1)))
		put16(uint16(1000 + i))
		put16(443)
		recs.WriteByte(6)
		recs.WriteByte(0x12)
		recs.WriteByte(0)
		recs.WriteByte(8)
		put16(exFlowMisc)
		put16(20)
		put32(uint32(i))
		put32(7)
		put64(0)
		if v6 {
			put16(exIPv6Flow)
			put16(36)
			put64(0x20010db800000000)
			put64(uint64(i))
			put64(0xfe80000000000000)
			put64(1)
		} else {
			put16(exIPv4Flow)
			put16(12)
			put32(0x0a000000 | uint32(i))
			put32(0xc0000263)
		}
	}
	payload := recs.Bytes()
	flags := uint16(0)
	if compression == compLZ4 {
		dst := make([]byte, lz4.CompressBlockBound(len(payload)))
		m, err := lz4.CompressBlock(payload, dst, nil)
		if err != nil || m == 0 {
			t.Fatalf("lz4: %v", err)
		}
		payload = dst[:m]
	}
	var out bytes.Buffer
	binary.Write(&out, le, uint16(nfMagic))
	binary.Write(&out, le, uint16(2))
	binary.Write(&out, le, uint32(0x01070100))
	binary.Write(&out, le, uint64(1_700_000_000))
	out.WriteByte(compression)
	out.WriteByte(0)
	binary.Write(&out, le, uint16(0)) // no appendix
	binary.Write(&out, le, uint32(1))
	binary.Write(&out, le, uint64(0))
	binary.Write(&out, le, uint32(0))
	binary.Write(&out, le, uint32(1)) // one block
	binary.Write(&out, le, uint32(2+n))
	binary.Write(&out, le, uint32(len(payload)))
	binary.Write(&out, le, uint16(blockType3))
	binary.Write(&out, le, flags)
	out.Write(payload)
	return out.Bytes()
}

var tempDirs = map[*testing.T]string{}

// writeTemp (re)writes the test's one scratch file.
func writeTemp(t *testing.T, data []byte) string {
	if tempDirs[t] == "" {
		tempDirs[t] = t.TempDir()
	}
	p := filepath.Join(tempDirs[t], "nfcapd.202601010000")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func readAll(t *testing.T, path string) ([]Flow, *Stats, error) {
	var flows []Flow
	st, err := ReadFile(path, func(f *Flow) error { flows = append(flows, *f); return nil })
	return flows, st, err
}

func TestDecodeFields(t *testing.T) {
	for _, comp := range []uint8{compNone, compLZ4} {
		flows, st, err := readAll(t, writeTemp(t, buildFile(t, 10, comp)))
		if err != nil {
			t.Fatal(err)
		}
		if len(flows) != 10 || st.Flows != 10 {
			t.Fatalf("compression %d: %d flows", comp, len(flows))
		}
		var pk, by uint64
		for i, f := range flows {
			pk += f.Packets
			by += f.Bytes
			if f.Seq != int64(i) || f.TimeStart != int64(1_700_000_000_000+i) || f.SrcPort != uint16(1000+i) ||
				f.DstPort != 443 || f.Proto != 6 || f.TCPFlags != 0x12 || f.Tos != 8 || f.InputIf != uint32(i) ||
				f.OutputIf != 7 || f.SamplingRate != 100 || f.Exporter.Addr != "192.0.2.1" {
				t.Fatalf("flow %d decoded wrong: %+v", i, f)
			}
			src := string(appendAddr(nil, &f.SrcAddr, f.V6))
			want := "10.0.0." + string(rune('0'+i))
			if f.V6 {
				want = "2001:db8::" + string(rune('0'+i))
			}
			if src != want {
				t.Fatalf("flow %d src %s want %s", i, src, want)
			}
		}
		if pk != st.Packets || by != st.Bytes {
			t.Fatalf("stats %d/%d, sum %d/%d", st.Packets, st.Bytes, pk, by)
		}
	}
}

func TestEveryTruncationIsANamedError(t *testing.T) {
	full := buildFile(t, 5, compNone)
	for cut := 0; cut < len(full); cut++ {
		p := writeTemp(t, full[:cut])
		_, _, err := readAll(t, p)
		if err == nil {
			t.Fatalf("cut at %d of %d: no error", cut, len(full))
		}
		if !IsCorrupt(err) || !strings.Contains(err.Error(), p) {
			t.Fatalf("cut at %d: want a CorruptError naming the file, got %v", cut, err)
		}
	}
}

func TestRandomDamageNeverPanics(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, comp := range []uint8{compNone, compLZ4, compLZO} {
		full := buildFile(t, 20, comp)
		for i := 0; i < 300; i++ {
			data := append([]byte(nil), full...)
			for k := 0; k < 1+rng.Intn(8); k++ {
				data[40+rng.Intn(len(data)-40)] = byte(rng.Intn(256))
			}
			readAll(t, writeTemp(t, data)) // an error is fine; a panic fails the test
		}
	}
}

func TestBadMagic(t *testing.T) {
	_, _, err := readAll(t, writeTemp(t, []byte("this is not an nfdump file at all, not even close......")))
	if err == nil || !strings.Contains(err.Error(), "bad magic") {
		t.Fatalf("want bad magic, got %v", err)
	}
}

func TestLZOGarbageIsAnError(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for i := 0; i < 2000; i++ {
		in := make([]byte, rng.Intn(64))
		rng.Read(in)
		lzo1xDecompress(in, nil, 1<<20) // must return, error or not
	}
	// literal run of 3 bytes then end-of-stream marker (0x11 0x00 0x00)
	out, err := lzo1xDecompress([]byte{17 + 3, 'a', 'b', 'c', 0x11, 0, 0}, nil, 100)
	if err != nil || string(out) != "abc" {
		t.Fatalf("got %q %v", out, err)
	}
}

func TestIPv6TextLikePython(t *testing.T) {
	cases := map[[16]byte]string{
		{0x20, 0x01, 0x0d, 0xb8, 15: 1}:                  "2001:db8::1",
		{10: 0xff, 11: 0xff, 12: 1, 13: 2, 14: 3, 15: 4}: "::ffff:102:304", // Python 3.11 ipaddress
		{}:                  "::",
		{0xfe, 0x80, 15: 1}: "fe80::1",
		{0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1}: "1::1:0:0:1",
	}
	for a, want := range cases {
		if got := string(appendIPv6(nil, &a)); got != want {
			t.Errorf("%v: got %s want %s", a, got, want)
		}
	}
}

func TestAvroEncodingFollowsSchema(t *testing.T) {
	schema := `{"type":"record","name":"Flow","fields":[
		{"name":"bytes","type":"long"},{"name":"src_addr","type":"string"},
		{"name":"time_start","type":{"type":"long","logicalType":"timestamp-millis"}},
		{"name":"extra","type":["null","string"],"default":null},
		{"name":"proto","type":["null","int"]}]}`
	enc, err := NewEncoder([]byte(schema), "0102030405060708")
	if err != nil {
		t.Fatal(err)
	}
	f := &Flow{Bytes: 64, TimeStart: -1, Proto: 6, Exporter: &Exporter{}}
	copy(f.SrcAddr[:], []byte{10, 0, 0, 1})
	got := enc.Append(nil, f, nil)
	want := []byte{0xC3, 0x01, 1, 2, 3, 4, 5, 6, 7, 8,
		0x80, 0x01, // zig-zag 64 = 128
		16, '1', '0', '.', '0', '.', '0', '.', '1',
		0x01, // zig-zag -1
		0x00, // null branch
		0x02, 0x0C}
	if !bytes.Equal(got, want) {
		t.Fatalf("got % x\nwant % x", got, want)
	}
	if _, err := NewEncoder([]byte(`{"type":"record","fields":[{"name":"nope","type":"long"}]}`), "0102030405060708"); err == nil {
		t.Fatal("an unknown non-nullable field must be refused")
	}
	if _, err := NewEncoder([]byte(`{"type":"record","fields":[{"name":"bytes","type":"string"}]}`), "0102030405060708"); err == nil {
		t.Fatal("a type mismatch must be refused")
	}
}

// A file nfcapd never closed (killed): block count 0, no appendix. Complete blocks are
// read, a partly written last block is dropped and counted.
func TestUnfinishedFile(t *testing.T) {
	full := buildFile(t, 6, compNone)
	binary.LittleEndian.PutUint32(full[36:], 0) // NumBlocks as nfcapd leaves it while writing
	second := append([]byte(nil), full[fileHeaderSize:]...)
	data := append(append([]byte(nil), full...), second[:len(second)/2]...)
	flows, st, err := readAll(t, writeTemp(t, data))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Unfinished || len(flows) != 6 || st.Blocks != 1 || st.DroppedBytes != int64(len(second)/2) {
		t.Fatalf("unfinished=%v flows=%d blocks=%d dropped=%d", st.Unfinished, len(flows), st.Blocks, st.DroppedBytes)
	}
}

// every octet value in every position, against net/netip's text
func TestIPv4Text(t *testing.T) {
	for v := 0; v < 256; v++ {
		a := [4]byte{byte(v), byte(255 - v), byte(v / 3), byte(v * 7)}
		if got, want := string(appendIPv4([]byte("x"), a[:])), "x"+netip.AddrFrom4(a).String(); got != want {
			t.Fatalf("%v: got %s want %s", a, got, want)
		}
	}
}

// random addresses, zero groups frequent (runs to compress, ties), against net/netip's
// RFC 5952 text (which differs only for IPv4-mapped addresses, pinned above)
func TestIPv6TextIsRFC5952(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for n := 0; n < 20000; n++ {
		var a [16]byte
		for g := 0; g < 8; g++ {
			if rng.Intn(2) == 0 {
				v := rng.Intn(1 << (4 * (1 + rng.Intn(4))))
				a[2*g], a[2*g+1] = byte(v>>8), byte(v)
			}
		}
		ip := netip.AddrFrom16(a)
		if ip.Is4In6() {
			continue
		}
		if got := string(appendIPv6(nil, &a)); got != ip.String() {
			t.Fatalf("%v: got %s want %s", a, got, ip.String())
		}
	}
}
