package main

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkResolve: the shipper's per-flow cost of sampling resolution (fingerprint hit).
func BenchmarkResolve(b *testing.B) {
	dir := b.TempDir()
	os.MkdirAll(filepath.Join(dir, "fp"), 0o755)
	rates, _ := os.Create(filepath.Join(dir, "rates.jsonl"))
	tp := &tap{o: tapOptions{dir: dir, keep: time.Hour}, exporters: map[string]*texporter{}, rates: rates}
	addr := netip.MustParseAddr("192.0.2.9")
	now := time.Now()
	for i := 0; i < 2000; i++ {
		tp.datagram(addr, ipfixTwoSamplers([2]uint32{4000, 2000}), now)
	}
	tp.flushFP()
	rates.Close()
	r, _ := NewResolver("", dir)
	e := &Exporter{Addr: "192.0.2.9", Domain: 7}
	flows := make([]Flow, 8000)
	for i := range flows {
		f := &flows[i]
		*f = Flow{Exporter: e, Proto: 17, Packets: 3, Bytes: 300, SamplingRate: 1, Received: now.UnixMilli()}
		copy(f.SrcAddr[:], []byte{10, 0, 0, byte(1 + i%4)})
		copy(f.DstAddr[:], []byte{192, 0, 2, 1})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f := flows[i%len(flows)]
		r.Resolve(&f)
	}
}
