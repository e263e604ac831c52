package main

import (
	"bytes"
	"io"
	"math/rand"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/pierrec/lz4/v4"
)

// FlowBatch messages: the header, the schema's columns and types, partition by hash,
// at most perMsg flows per message, the rest at Flush, nothing left after Start.
func TestFlowBatchFollowsSchema(t *testing.T) {
	for _, codec := range []string{"zstd", "lz4"} {
		t.Run(codec, func(t *testing.T) { flowBatchFollowsSchema(t, codec) })
	}
}

func flowBatchFollowsSchema(t *testing.T, codec string) {
	schema := `{"type":"record","name":"Flow","fields":[
		{"name":"time_start","type":{"type":"long","logicalType":"timestamp-millis"}},
		{"name":"src_addr","type":"string"},{"name":"proto","type":"int"},{"name":"bytes","type":"long"},
		{"name":"source_file","type":"string"},{"name":"file_seq","type":"long"},
		{"name":"extra","type":["null","string"],"default":null},{"name":"exporter","type":"string"},
		{"name":"path","type":["null",{"type":"array","items":"long"}],"default":null},
		{"name":"comms","type":["null",{"type":"array","items":"string"}],"default":null}]}`
	enc, err := NewEncoder([]byte(schema), "0102030405060708")
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBatchEncoder(enc, 3, codec)
	if err != nil {
		t.Fatal(err)
	}
	type msg struct {
		part, seq, flows int
		value            []byte
	}
	var got []msg
	emit := func(part, seq, flows int, value []byte) error {
		got = append(got, msg{part, seq, flows, value})
		return nil
	}
	b.Start(enc, 2)
	for i := 0; i < 7; i++ {
		// a second router from flow 5 on: partition 1's first message (flows 1, 3, 5) mixes them
		f := &Flow{TimeStart: int64(1000 * i), Proto: 6, Bytes: uint64(100 + i), Seq: int64(i), Exporter: &Exporter{Addr: exporterOf(i)}}
		copy(f.SrcAddr[:], []byte{10, 0, 0, byte(i)})
		if err := b.Add(f, uint64(i%2), "spool/nfcapd.1", emit); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush(emit); err != nil { // messages are encoded on the encoder's worker: wait for them
		t.Fatal(err)
	}
	if len(got) < 2 || got[0].part != 0 || got[0].flows != 3 || got[1].part != 1 || got[1].flows != 3 {
		t.Fatalf("after 7 flows in 2 partitions, want a full message of each first, got %d", len(got))
	}
	if len(got) != 3 || got[2].part != 0 || got[2].seq != 1 || got[2].flows != 1 {
		t.Fatalf("flush: want the rest of partition 0 as its message 1, got %d messages", len(got))
	}
	seqs := map[int][]int64{}
	for _, m := range got {
		if !bytes.Equal(m.value[:13], []byte{'F', 'L', 'A', 'R', 2, 1, 2, 3, 4, 5, 6, 7, 8}) {
			t.Fatalf("header % x", m.value[:13])
		}
		r, err := ipc.NewReader(bytes.NewReader(m.value[13:]))
		if err != nil {
			t.Fatal(err)
		}
		s := r.Schema()
		wantTypes := []arrow.DataType{&arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}, arrow.BinaryTypes.String,
			arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64, arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64,
			arrow.BinaryTypes.String, arrow.BinaryTypes.String,
			// unknown nullable arrays of other items (revision 4's routing columns): null, typed by their items
			arrow.ListOf(arrow.PrimitiveTypes.Int64), arrow.ListOf(arrow.BinaryTypes.String)}
		for i, f := range s.Fields() {
			if !arrow.TypeEqual(f.Type, wantTypes[i]) || f.Name != enc.Names[i] {
				t.Fatalf("column %d: %s %s", i, f.Name, f.Type)
			}
		}
		for r.Next() {
			rec := r.RecordBatch()
			if int(rec.NumRows()) != m.flows {
				t.Fatalf("rows %d, want %d", rec.NumRows(), m.flows)
			}
			for i := 0; i < int(rec.NumRows()); i++ {
				seq := rec.Column(5).(*array.Int64).Value(i)
				if int(seq)%2 != m.part {
					t.Fatalf("flow %d in partition %d", seq, m.part)
				}
				if ip := rec.Column(1).(*array.String).Value(i); ip != "10.0.0."+string(rune('0'+seq)) {
					t.Fatalf("src_addr %q for flow %d", ip, seq)
				}
				if ts := rec.Column(0).(*array.Timestamp).Value(i); int64(ts) != 1000*seq {
					t.Fatalf("time_start %d for flow %d", ts, seq)
				}
				if !rec.Column(6).IsNull(i) || rec.Column(4).(*array.String).Value(i) != "spool/nfcapd.1" {
					t.Fatal("extra must be null, source_file the file")
				}
				if !rec.Column(8).IsNull(i) || !rec.Column(9).IsNull(i) {
					t.Fatal("path and comms must be null")
				}
				if e := rec.Column(7).(*array.String).Value(i); e != exporterOf(int(seq)) {
					t.Fatalf("exporter %q for flow %d", e, seq)
				}
				seqs[m.part] = append(seqs[m.part], seq)
			}
		}
		r.Release()
	}
	if len(seqs[0]) != 4 || len(seqs[1]) != 3 {
		t.Fatalf("partitions got %v", seqs)
	}
	b.Start(enc, 4) // a new file: nothing of the last one left over
	if err := b.Flush(emit); err != nil || len(got) != 3 {
		t.Fatalf("Start must drop leftovers: %d messages", len(got))
	}
}

func exporterOf(i int) string {
	if i < 5 {
		return "192.0.2.1"
	}
	return "2001:db8::2"
}

// the frame header flowbatch_ipc.go writes is the one pierrec/lz4 writes for its options
func TestLZ4FrameHeader(t *testing.T) {
	var buf bytes.Buffer
	w := lz4.NewWriter(&buf)
	if err := w.Apply(lz4.BlockSizeOption(lz4.Block4Mb), lz4.ChecksumOption(false)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := buf.Bytes()[:len(lz4FrameHeader)]; !bytes.Equal(got, lz4FrameHeader) {
		t.Fatalf("pierrec/lz4 opens a frame with % x, flowbatch_ipc.go with % x", got, lz4FrameHeader)
	}
	// and its frames decode: compressible, incompressible, more than one block
	rng := rand.New(rand.NewSource(1))
	noise := make([]byte, 9<<20)
	rng.Read(noise)
	wr, _ := newIPCBatchWriter("lz4")
	for _, raw := range [][]byte{bytes.Repeat([]byte("flowlake "), 1000), noise[:1000], noise} {
		frame := wr.lz4Frame([]byte("x"), raw)[1:]
		got, err := io.ReadAll(lz4.NewReader(bytes.NewReader(frame)))
		if err != nil || !bytes.Equal(got, raw) {
			t.Fatalf("%d bytes: frame of %d bytes decodes to %d bytes, %v", len(raw), len(frame), len(got), err)
		}
	}
}
