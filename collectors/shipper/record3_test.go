package main

import (
	"bytes"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
)

const rev3Schema = `{"type":"record","name":"Flow","fields":[
	{"name":"file_seq","type":"long"},{"name":"proto","type":"int"},{"name":"dst_port","type":"int"},
	{"name":"next_hop","type":["null","string"],"default":null},
	{"name":"src_mac","type":["null","string"],"default":null},
	{"name":"mpls_labels","type":["null",{"type":"array","items":"int"}],"default":null},
	{"name":"ingress_vrf","type":["null","long"],"default":null},
	{"name":"icmp_type","type":["null","int"],"default":null},
	{"name":"biflow_half","type":["null","int"],"default":null},
	{"name":"later","type":["null",{"type":"array","items":"int"}],"default":null}]}`

// rev3Flow: even flows carry next hop, MAC, VRF and 1-3 MPLS labels; odd ones none (null).
func rev3Flow(i int) *Flow {
	f := &Flow{Seq: int64(i), Proto: 6, DstPort: 443, Exporter: &Exporter{Addr: "192.0.2.1"}}
	if i%2 == 0 {
		f.Layout = 1<<exIPNextV4 | 1<<exMPLS
		f.NextHop = [16]byte{10, 255, 0, byte(i)}
		f.SrcMAC = 0x0a0000000000 + uint64(i)
		f.HasVRF, f.IngressVRF = true, uint32(i)
		for k := 0; k <= i%3; k++ {
			f.MPLS[k] = uint32(16 + k)
			f.NMPLS++
		}
	} else {
		f.Proto, f.DstPort = 1, 0x0803
	}
	return f
}

// Revision 3's columns in a FlowBatch: values where the record had the element, nulls
// where not (a validity bitmap per column), MPLS stacks as list<int32>, an unknown
// nullable array all null; arrow-go reads it back.
func TestFlowBatchRevision3Columns(t *testing.T) {
	enc, err := NewEncoder([]byte(rev3Schema), "0102030405060708")
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBatchEncoder(enc, 100, "zstd")
	if err != nil {
		t.Fatal(err)
	}
	var msg []byte
	emit := func(_, _, _ int, value []byte) error { msg = bytes.Clone(value); return nil }
	b.Start(enc, 1)
	for i := 0; i < 11; i++ {
		if err := b.Add(rev3Flow(i), 0, "f", emit); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush(emit); err != nil {
		t.Fatal(err)
	}
	r, err := ipc.NewReader(bytes.NewReader(msg[13:]))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	if !r.Next() {
		t.Fatal("no record batch")
	}
	rec := r.RecordBatch()
	nh, mac := rec.Column(3).(*array.String), rec.Column(4).(*array.String)
	mpls, vrf, icmp := rec.Column(5).(*array.List), rec.Column(6).(*array.Int64), rec.Column(7).(*array.Int32)
	half, later := rec.Column(8).(*array.Int32), rec.Column(9)
	items := mpls.ListValues().(*array.Int32)
	for i := 0; i < 11; i++ {
		if later.IsValid(i) || !half.IsValid(i) || half.Value(i) != 0 {
			t.Fatalf("flow %d: an unknown field is null, biflow_half 0", i)
		}
		if i%2 == 1 {
			if nh.IsValid(i) || mac.IsValid(i) || mpls.IsValid(i) || vrf.IsValid(i) {
				t.Fatalf("flow %d lacks the elements: want nulls", i)
			}
			if !icmp.IsValid(i) || icmp.Value(i) != 8 {
				t.Fatalf("flow %d: ICMP type 8 from dst_port 0x0803", i)
			}
			continue
		}
		if icmp.IsValid(i) || nh.Value(i) != "10.255.0."+itoa(i) || vrf.Value(i) != int64(i) {
			t.Fatalf("flow %d: next hop %q vrf %d", i, nh.Value(i), vrf.Value(i))
		}
		if want := "0a:00:00:00:00:" + hex2(i); mac.Value(i) != want {
			t.Fatalf("flow %d: src_mac %q, want %q", i, mac.Value(i), want)
		}
		start, end := mpls.ValueOffsets(i)
		if int(end-start) != i%3+1 || items.Value(int(start)) != 16 || items.Value(int(end-1)) != int32(16+i%3) {
			t.Fatalf("flow %d: labels %d..%d", i, start, end)
		}
	}
}

func itoa(i int) string { return string(appendOctet(nil, byte(i))) }

func hex2(i int) string { return string(appendMAC(nil, uint64(i))[15:]) }

// The shipper's hot loop stays allocation-free with revision 3's columns.
func TestFlowBatchAddAllocatesNothing(t *testing.T) {
	enc, err := NewEncoder([]byte(rev3Schema), "0102030405060708")
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBatchEncoder(enc, 1<<20, "zstd")
	if err != nil {
		t.Fatal(err)
	}
	emit := func(_, _, _ int, _ []byte) error { return nil }
	b.Start(enc, 1)
	flows := []*Flow{rev3Flow(0), rev3Flow(1), rev3Flow(2)}
	for i := 0; i < 4096; i++ { // grow the buffers once
		_ = b.Add(flows[i%3], 0, "f", emit)
	}
	b.Start(enc, 1)
	i := 0
	if n := testing.AllocsPerRun(1000, func() { _ = b.Add(flows[i%3], 0, "f", emit); i++ }); n != 0 {
		t.Fatalf("Add allocates %.1f times per flow", n)
	}
	var dst []byte
	dst = enc.Append(dst, flows[0], EncodeSourceFile("f"))
	if n := testing.AllocsPerRun(1000, func() { dst = enc.Append(dst[:0], flows[i%3], nil); i++ }); n != 0 {
		t.Fatalf("the Avro encoder allocates %.1f times per flow", n)
	}
}
