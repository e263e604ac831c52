package main

import (
	"testing"
	"time"
)

// BenchmarkResolve: the shipper's per-flow cost of sampling resolution (fingerprint hit).
func BenchmarkResolve(b *testing.B) {
	now := time.Now()
	datagrams := make([][]byte, 2000)
	for i := range datagrams {
		datagrams[i] = ipfixTwoSamplers([2]uint32{4000, 2000})
	}
	r, _ := NewResolver("", tapDatagrams(b, now, datagrams...))
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
