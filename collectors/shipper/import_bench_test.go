package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"testing"
)

// BenchmarkImportFile: the importer's CPU per file without Kafka (bench/import.py
// times the whole command against nfdump): decode, sampling resolution, time checks,
// flow digest and FlowBatch encoding. Needs a real nfcapd file and the
// FLOW schema (`flowlake ship` writes it):
//
//	FLOWLAKE_BENCH_NFCAPD=FILE FLOWLAKE_BENCH_SCHEMA=flow.avsc FLOWLAKE_BENCH_FINGERPRINT=HEX \
//	  [FLOWLAKE_BENCH_CODEC=lz4] go test -run - -bench ImportFile -cpuprofile cpu.out
func BenchmarkImportFile(b *testing.B) {
	path, schema := os.Getenv("FLOWLAKE_BENCH_NFCAPD"), os.Getenv("FLOWLAKE_BENCH_SCHEMA")
	if path == "" || schema == "" {
		b.Skip("set FLOWLAKE_BENCH_NFCAPD, FLOWLAKE_BENCH_SCHEMA and FLOWLAKE_BENCH_FINGERPRINT")
	}
	enc, err := LoadEncoder(schema, os.Getenv("FLOWLAKE_BENCH_FINGERPRINT"))
	if err != nil {
		b.Fatal(err)
	}
	codec := os.Getenv("FLOWLAKE_BENCH_CODEC") // zstd (default) or lz4
	if codec == "" {
		codec = "zstd"
	}
	batch, err := NewBatchEncoder(enc, 16384, codec)
	if err != nil {
		b.Fatal(err)
	}
	res, err := NewResolver("", "")
	if err != nil {
		b.Fatal(err)
	}
	defer debug.SetGCPercent(debug.SetGCPercent(400)) // as startProfile sets it
	var wire int
	dump := os.Getenv("FLOWLAKE_BENCH_DUMP") // write the first message here (to read it with pyarrow)
	emit := func(_, _, _ int, value []byte) error {
		if wire == 0 && dump != "" {
			if err := os.WriteFile(dump, value, 0o644); err != nil {
				return err
			}
		}
		wire += len(value)
		batch.reuse(value) // as the producer's promise does
		return nil
	}
	var flows uint64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dig := newFlowDigest()
		batch.Start(enc, 4)
		rules := TimeRules{}
		st, err := ReadFile(path, func(f *Flow) error {
			res.Resolve(f)
			rules.checkTimes(f)
			dig.add(f)
			return batch.Add(f, conversationHash(f), path, emit)
		})
		if err != nil {
			b.Fatal(err)
		}
		if err := batch.Flush(emit); err != nil {
			b.Fatal(err)
		}
		dig.sum()
		flows += st.Flows
	}
	b.ReportMetric(float64(flows)/b.Elapsed().Seconds(), "flows/s")
	b.ReportMetric(float64(wire)/float64(flows), "wireB/flow")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.NumGC), "GCs")
	b.ReportMetric(float64(ms.TotalAlloc)/float64(flows), "allocB/flow")
}
