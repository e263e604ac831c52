package main

// FlowBatch messages (wire format 2 of the flows topic, declared in schemas/messages.py):
// many flows per Kafka message as an Arrow IPC stream, so the ingest decodes a column at
// a time instead of one Avro record per flow (66k flows/s row by row in Spark).
//
//	"FLAR" | version byte 2 | 8-byte CRC-64-AVRO fingerprint of the FLOW record | Arrow IPC stream
//
// (record batch bodies zstd-compressed, as the Arrow IPC format allows)
//
// The columns are the FLOW record's fields in schema order (the same program the Avro
// encoder follows), so the one declaration in schemas/flow.py stays the truth.

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	batchMagic   = "FLAR"
	batchVersion = 2
)

// column is one field's typed builder (only one pointer is set).
type column struct {
	id  fieldID
	i64 *array.Int64Builder
	i32 *array.Int32Builder
	ts  *array.TimestampBuilder
	str *array.StringBuilder
	nul array.Builder // a nullable field the shipper does not know: always null
}

// BatchEncoder gathers a file's flows per Kafka partition and cuts them into messages
// of at most perMsg flows.
type BatchEncoder struct {
	header []byte
	schema *arrow.Schema
	perMsg int
	mem    memory.Allocator
	parts  []*partBatch
	// One IPC writer for every message (see emit): its zstd encoders are made once. A
	// fresh writer per message built a zstd encoder per column, each with its history
	// window: a fifth of the importer's CPU went to clearing that memory (pprof).
	w         *ipc.Writer
	sink      *sliceWriter
	schemaMsg []byte // the stream's schema message, the start of every message's stream
	// Compression and producing run on a goroutine of their own, beside the file's
	// decoding (a third of the CPU each): a bounded queue, messages in order.
	queue chan batchJob
	done  chan error
	drop  atomic.Bool // Abort: the queued messages are dropped, not produced
}

type batchJob struct {
	rec             arrow.RecordBatch
	part, seq, rows int
	emit            Emit
}

// sliceWriter appends to a slice the caller swaps per message.
type sliceWriter struct{ buf []byte }

func (s *sliceWriter) Write(p []byte) (int, error) { s.buf = append(s.buf, p...); return len(p), nil }

// ipcEOS ends an Arrow IPC stream: continuation marker, zero length.
var ipcEOS = []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}

type partBatch struct {
	rb   *array.RecordBuilder
	cols []column
	n    int
	seq  int // messages emitted for this partition in the current file
}

// Emit hands one finished message to the producer: its partition, the message's index
// within that partition for this file, the flows in it and the bytes.
type Emit func(partition, seq, flows int, value []byte) error

// NewBatchEncoder derives the Arrow schema from the Avro encoder's field program.
func NewBatchEncoder(enc *Encoder, perMsg int) (*BatchEncoder, error) {
	if perMsg < 1 {
		return nil, fmt.Errorf("flows per message must be at least 1, got %d", perMsg)
	}
	fields := make([]arrow.Field, len(enc.fields))
	for i, fd := range enc.fields {
		var t arrow.DataType
		switch {
		case enc.Logical[i] == "timestamp-millis":
			t = &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}
		case enc.Base[i] == "string":
			t = arrow.BinaryTypes.String
		case enc.Base[i] == "int":
			t = arrow.PrimitiveTypes.Int32
		case enc.Base[i] == "long":
			t = arrow.PrimitiveTypes.Int64
		default:
			return nil, fmt.Errorf("schema field %s: type %s has no Arrow column in the shipper", enc.Names[i], enc.Base[i])
		}
		fields[i] = arrow.Field{Name: enc.Names[i], Type: t, Nullable: fd.nullable || fd.id == fNull}
	}
	header := append([]byte(batchMagic), batchVersion)
	header = append(header, enc.header[2:]...) // the fingerprint, after Avro's C3 01
	return &BatchEncoder{header: header, schema: arrow.NewSchema(fields, nil), perMsg: perMsg,
		mem: memory.NewGoAllocator()}, nil
}

func (b *BatchEncoder) newPart(enc *Encoder) *partBatch {
	rb := array.NewRecordBuilder(b.mem, b.schema)
	p := &partBatch{rb: rb, cols: make([]column, len(enc.fields))}
	for i, fd := range enc.fields {
		c := column{id: fd.id}
		switch bld := rb.Field(i).(type) {
		case *array.Int64Builder:
			c.i64 = bld
		case *array.Int32Builder:
			c.i32 = bld
		case *array.TimestampBuilder:
			c.ts = bld
		case *array.StringBuilder:
			c.str = bld
		}
		if fd.id == fNull {
			c = column{id: fNull, nul: rb.Field(i)}
		}
		p.cols[i] = c
	}
	rb.Reserve(b.perMsg)
	return p
}

// Start readies the encoder for a file whose topic has `partitions` partitions,
// dropping whatever an aborted file left behind.
func (b *BatchEncoder) Start(enc *Encoder, partitions int) {
	if partitions < 1 {
		partitions = 1
	}
	for len(b.parts) < partitions {
		b.parts = append(b.parts, b.newPart(enc))
	}
	b.parts = b.parts[:partitions]
	b.Abort() // an unfinished file's messages are never produced (its transaction aborts)
	b.queue, b.done = make(chan batchJob, 2), make(chan error, 1)
	go b.work(b.queue, b.done)
	for _, p := range b.parts {
		if p.n > 0 {
			p.rb.NewRecordBatch().Release()
			p.rb.Reserve(b.perMsg)
		}
		p.n, p.seq = 0, 0
	}
}

// Add appends one flow to the batch of partition hash % partitions; a full batch is
// encoded and emitted.
func (b *BatchEncoder) Add(f *Flow, hash uint64, sourceFile string, emit Emit) error {
	part := int(hash % uint64(len(b.parts)))
	p := b.parts[part]
	var tmp [48]byte
	for i := range p.cols {
		c := &p.cols[i]
		switch c.id {
		case fTimeStart:
			c.ts.Append(arrow.Timestamp(f.TimeStart))
		case fTimeEnd:
			c.ts.Append(arrow.Timestamp(f.TimeEnd))
		case fExporter:
			c.str.Append(f.Exporter.Addr)
		case fSrcAddr:
			c.str.BinaryBuilder.Append(appendAddr(tmp[:0], &f.SrcAddr, f.V6))
		case fDstAddr:
			c.str.BinaryBuilder.Append(appendAddr(tmp[:0], &f.DstAddr, f.V6))
		case fSourceFile:
			c.str.Append(sourceFile)
		case fNull:
			c.nul.AppendNull()
		default:
			v := flowInt(f, c.id)
			if c.i64 != nil {
				c.i64.Append(v)
			} else {
				c.i32.Append(int32(v))
			}
		}
	}
	p.n++
	if p.n >= b.perMsg {
		return b.emit(part, emit)
	}
	return nil
}

// flowInt is the integer value of a numeric FLOW field.
func flowInt(f *Flow, id fieldID) int64 {
	switch id {
	case fInputIf:
		return int64(f.InputIf)
	case fOutputIf:
		return int64(f.OutputIf)
	case fSrcPort:
		return int64(f.SrcPort)
	case fDstPort:
		return int64(f.DstPort)
	case fProto:
		return int64(f.Proto)
	case fTCPFlags:
		return int64(f.TCPFlags)
	case fTos:
		return int64(f.Tos)
	case fPackets:
		return int64(f.Packets)
	case fBytes:
		return int64(f.Bytes)
	case fSamplingRate:
		return int64(f.SamplingRate)
	case fSrcAS:
		return int64(f.SrcAS)
	case fDstAS:
		return int64(f.DstAS)
	case fFileSeq:
		return f.Seq
	case fSrcVlan:
		return int64(f.SrcVlan)
	case fDstVlan:
		return int64(f.DstVlan)
	}
	return 0
}

// Flush emits every partition's partial batch (the end of a file) and waits until
// every message of the file went to the producer.
func (b *BatchEncoder) Flush(emit Emit) error {
	for part, p := range b.parts {
		if p.n > 0 {
			if err := b.emit(part, emit); err != nil {
				_ = b.finish()
				return err
			}
		}
	}
	return b.finish()
}

// finish closes the file's queue and waits for its worker; its first error.
func (b *BatchEncoder) finish() error {
	if b.queue == nil {
		return nil
	}
	close(b.queue)
	err := <-b.done
	b.queue, b.done = nil, nil
	return err
}

// Abort drops the file's queued messages and stops its worker: call it before aborting
// the file's transaction, so none of them can be produced after (into the next one).
func (b *BatchEncoder) Abort() {
	b.drop.Store(true)
	_ = b.finish()
	b.drop.Store(false)
}

func (b *BatchEncoder) work(queue <-chan batchJob, done chan<- error) {
	var first error
	for j := range queue {
		if first == nil && !b.drop.Load() {
			first = b.encode(j)
		}
		j.rec.Release()
	}
	done <- first
}

// emit cuts partition part's batch and queues it (inline without a worker: tests).
func (b *BatchEncoder) emit(part int, emit Emit) error {
	p := b.parts[part]
	j := batchJob{rec: p.rb.NewRecordBatch(), part: part, seq: p.seq, rows: p.n, emit: emit}
	p.n = 0
	p.seq++
	p.rb.Reserve(b.perMsg)
	if b.queue == nil {
		defer j.rec.Release()
		return b.encode(j)
	}
	select {
	case b.queue <- j:
		return nil
	case err := <-b.done: // the worker stopped on an error: the file fails
		b.queue, b.done = nil, nil
		j.rec.Release()
		return err
	}
}

// encode writes one message (an Arrow IPC stream) and hands it to the producer.
func (b *BatchEncoder) encode(j batchJob) error {
	rec, n := j.rec, j.rows
	if b.w == nil {
		// The schema message as a writer of no batches writes it (Close: schema, then EOS).
		var schema bytes.Buffer
		sw := ipc.NewWriter(&schema, ipc.WithSchema(b.schema), ipc.WithAllocator(b.mem))
		if err := sw.Close(); err != nil {
			return fmt.Errorf("arrow schema: %v", err)
		}
		b.schemaMsg = bytes.Clone(schema.Bytes()[:schema.Len()-len(ipcEOS)])
		// Columns zstd-compressed inside the message (Kafka compression is off for FlowBatch):
		// the ingest's JVM then moves ~40 bytes a flow instead of ~200, and Arrow in the
		// Python task decompresses them.
		b.sink = &sliceWriter{}
		b.w = ipc.NewWriter(b.sink, ipc.WithSchema(b.schema), ipc.WithAllocator(b.mem), ipc.WithZstd())
		b.sink.buf = nil
		empty := rec.NewSlice(0, 0)
		err := b.w.Write(empty) // the writer's schema, written once, dropped
		empty.Release()
		if err != nil {
			b.w = nil
			return fmt.Errorf("arrow batch: %v", err)
		}
	}
	// Every message is a whole IPC stream: schema, this batch, end of stream (the same
	// bytes a writer of its own would give). A fresh buffer per message: the producer
	// holds it until the broker acknowledged; ~40 bytes a flow once compressed.
	buf := make([]byte, 0, len(b.header)+len(b.schemaMsg)+4096+n*64)
	buf = append(append(buf, b.header...), b.schemaMsg...)
	b.sink.buf = buf
	if err := b.w.Write(rec); err != nil {
		b.w = nil // a failed writer stays failed: make a new one for the next message
		return fmt.Errorf("arrow batch: %v", err)
	}
	buf = append(b.sink.buf, ipcEOS...)
	b.sink.buf = nil
	return j.emit(j.part, j.seq, n, buf)
}

// batchEmitter produces each FlowBatch message of file `name` into its partition, keyed
// "file#partition#index" (a quarantined message then says where it came from).
func (s *Shipper) batchEmitter(ctx context.Context, name string, promise func(*kgo.Record, error)) Emit {
	return func(part, seq, flows int, value []byte) error {
		rec := &kgo.Record{Topic: s.o.FlowsTopic, Partition: int32(part), Value: value,
			Key: []byte(fmt.Sprintf("%s#%d#%d", name, part, seq))}
		s.cl.Produce(ctx, rec, promise)
		if s.o.Throttle > 0 { // testing: the file's time spent after each message, so a kill finds it open
			time.Sleep(time.Duration(flows) * time.Second / time.Duration(s.o.Throttle))
		}
		return nil
	}
}
