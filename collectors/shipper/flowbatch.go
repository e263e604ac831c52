package main

// FlowBatch messages (wire format 2 of the flows topic, declared in schemas/messages.py):
// many flows per Kafka message as an Arrow IPC stream, so the ingest decodes a column at
// a time instead of one Avro record per flow (66k flows/s row by row in Spark).
//
//	"FLAR" | version byte 2 | 8-byte CRC-64-AVRO fingerprint of the FLOW record | Arrow IPC stream
//
// (record batch bodies zstd- or LZ4-compressed, as the Arrow IPC format allows)
//
// The columns are the FLOW record's fields in schema order (the same program the Avro
// encoder follows), so the one declaration in schemas/flow.py stays the truth.
//
// The columns are gathered straight into reused little-endian byte slices and the
// record batch message is written by flowbatch_ipc.go; arrow-go writes the schema
// message and reads every message back in the tests. arrow-go's builders and IPC writer
// cost the importer 0.6 of its 1.3 CPU-s per million flows (pprof, bench/import.py):
// per-value appends through validity bitmaps, fresh zeroed buffers per message and a
// zstd stream encoder at its default level with a frame checksum, none of it settable.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	batchMagic   = "FLAR"
	batchVersion = 2
)

// colKind is how a column's values are laid out in its Arrow buffers.
type colKind uint8

const (
	kindInt64  colKind = iota // int64 and timestamp[ms]: 8 bytes a value
	kindInt32                 // 4 bytes a value
	kindString                // int32 offsets (n+1) and the bytes
	kindList                  // list<int32>: int32 offsets (n+1) and the int32 items
	// lists of another item type the shipper never fills (the routing columns of Flow
	// revision 4, filled at ingest): always null, so their child arrays are empty
	kindNullListLong   // list<int64>
	kindNullListString // list<string>
)

var kindWidth = [...]int{kindInt64: 8, kindInt32: 4, kindString: 4, kindList: 4, kindNullListLong: 4,
	kindNullListString: 4}

// isList: the column is a list (int32 offsets in values).
func (k colKind) isList() bool {
	return k == kindList || k == kindNullListLong || k == kindNullListString
}

// colData is one column of a batch being gathered.
type colData struct {
	values []byte // fixed-width values, or a string column's offsets (from 0)
	data   []byte // a string column's bytes
	valid  []byte // validity bitmap of a column that may hold nulls (mark), bit per flow
	nulls  int    // nulls so far (a field the shipper does not know: every value)
	// exporter and source_file: one value for the whole batch, mostly (one file, one
	// router), kept once and written whole at encoding until a flow differs (mixed)
	constant string
	mixed    bool
}

func (c *colData) appendString(s string) {
	c.data = append(c.data, s...)
	c.values = binary.LittleEndian.AppendUint32(c.values, uint32(len(c.data)))
}

// mark records whether flow n of a column that may hold nulls has a value.
func (c *colData) mark(n int, ok bool) {
	if n&7 == 0 {
		c.valid = append(c.valid, 0)
	}
	if ok {
		c.valid[n>>3] |= 1 << (n & 7)
	} else {
		c.nulls++
	}
}

// appendShared appends the value of flow n of a column whose flows mostly share one.
func (c *colData) appendShared(s string, n int) {
	switch {
	case c.mixed:
		c.appendString(s)
	case n == 0:
		c.constant = s
	case s != c.constant:
		for k := 0; k < n; k++ {
			c.appendString(c.constant)
		}
		c.mixed = true
		c.appendString(s)
	}
}

// colBatch is one message's worth of flows, column by column; reused once encoded.
type colBatch struct {
	cols []colData
	n    int
}

// BatchEncoder gathers a file's flows per Kafka partition and cuts them into messages
// of at most perMsg flows.
type BatchEncoder struct {
	header    []byte
	schemaMsg []byte // the stream's schema message (arrow-go), the start of every message's stream
	perMsg    int
	ids       []fieldID
	kinds     []colKind
	parts     []*partBatch
	ipc       *ipcBatchWriter // the encoding worker's
	freeMu    sync.Mutex
	free      []*colBatch // encoded batches, their buffers kept for the next ones
	msgs      [][]byte    // messages the producer is done with (freeMu): fresh ones cost page faults
	// Compression and producing run on a goroutine of their own, beside the file's
	// decoding: a bounded queue, messages in order.
	queue chan batchJob
	done  chan error
	drop  atomic.Bool // Abort: the queued messages are dropped, not produced
}

type batchJob struct {
	cols            *colBatch
	part, seq, rows int
	emit            Emit
}

type partBatch struct {
	cur *colBatch
	seq int // messages emitted for this partition in the current file
}

// Emit hands one finished message to the producer: its partition, the message's index
// within that partition for this file, the flows in it and the bytes.
type Emit func(partition, seq, flows int, value []byte) error

// NewBatchEncoder derives the Arrow schema from the Avro encoder's field program;
// codec compresses the bodies: "zstd" or "lz4".
func NewBatchEncoder(enc *Encoder, perMsg int, codec string) (*BatchEncoder, error) {
	if perMsg < 1 {
		return nil, fmt.Errorf("flows per message must be at least 1, got %d", perMsg)
	}
	fields := make([]arrow.Field, len(enc.fields))
	b := &BatchEncoder{perMsg: perMsg, ids: make([]fieldID, len(enc.fields)), kinds: make([]colKind, len(enc.fields))}
	for i, fd := range enc.fields {
		var t arrow.DataType
		switch {
		case enc.Logical[i] == "timestamp-millis":
			t, b.kinds[i] = &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}, kindInt64
		case enc.Base[i] == "string":
			t, b.kinds[i] = arrow.BinaryTypes.String, kindString
		case enc.Base[i] == "int":
			t, b.kinds[i] = arrow.PrimitiveTypes.Int32, kindInt32
		case enc.Base[i] == "long":
			t, b.kinds[i] = arrow.PrimitiveTypes.Int64, kindInt64
		case enc.Base[i] == "array" && enc.Items[i] == "long" && fd.id == fNull: // an unknown nullable array: null
			t, b.kinds[i] = arrow.ListOf(arrow.PrimitiveTypes.Int64), kindNullListLong
		case enc.Base[i] == "array" && enc.Items[i] == "string" && fd.id == fNull:
			t, b.kinds[i] = arrow.ListOf(arrow.BinaryTypes.String), kindNullListString
		case enc.Base[i] == "array" && enc.Items[i] == "int": // mpls_labels; an unknown nullable array: null
			t, b.kinds[i] = arrow.ListOf(arrow.PrimitiveTypes.Int32), kindList
		default:
			return nil, fmt.Errorf("schema field %s: type %s has no Arrow column in the shipper", enc.Names[i], enc.Base[i])
		}
		fields[i] = arrow.Field{Name: enc.Names[i], Type: t, Nullable: fd.nullable || fd.id == fNull}
		b.ids[i] = fd.id
	}
	// The schema message as a writer of no batches writes it (Close: schema, then EOS).
	var schema bytes.Buffer
	sw := ipc.NewWriter(&schema, ipc.WithSchema(arrow.NewSchema(fields, nil)), ipc.WithAllocator(memory.NewGoAllocator()))
	if err := sw.Close(); err != nil {
		return nil, fmt.Errorf("arrow schema: %v", err)
	}
	b.schemaMsg = bytes.Clone(schema.Bytes()[:schema.Len()-len(ipcEOS)])
	b.header = append([]byte(batchMagic), batchVersion)
	b.header = append(b.header, enc.header[2:]...) // the fingerprint, after Avro's C3 01
	var err error
	if b.ipc, err = newIPCBatchWriter(codec); err != nil {
		return nil, err
	}
	return b, nil
}

// batch returns an empty batch, reusing an encoded one's buffers when there is one.
func (b *BatchEncoder) batch() *colBatch {
	b.freeMu.Lock()
	var c *colBatch
	if n := len(b.free); n > 0 {
		c, b.free = b.free[n-1], b.free[:n-1]
	}
	b.freeMu.Unlock()
	if c == nil {
		c = &colBatch{cols: make([]colData, len(b.ids))}
		for i := range c.cols {
			c.cols[i].values = make([]byte, 0, (b.perMsg+1)*kindWidth[b.kinds[i]])
		}
	}
	c.n = 0
	for i := range c.cols {
		col := &c.cols[i]
		col.values, col.data, col.valid, col.nulls, col.constant, col.mixed = col.values[:0], col.data[:0], col.valid[:0], 0, "", false
		if b.kinds[i] == kindString || b.kinds[i].isList() {
			col.values = append(col.values, 0, 0, 0, 0) // offset of the first value
		}
	}
	return c
}

// reuse takes back a message the producer is done with, for a later one.
func (b *BatchEncoder) reuse(msg []byte) {
	b.freeMu.Lock()
	if len(b.msgs) < 64 { // bounded: a few files' worth of messages
		b.msgs = append(b.msgs, msg[:0])
	}
	b.freeMu.Unlock()
}

// message returns an empty buffer of at least size bytes.
func (b *BatchEncoder) message(size int) []byte {
	b.freeMu.Lock()
	defer b.freeMu.Unlock()
	for i := len(b.msgs) - 1; i >= 0; i-- {
		if m := b.msgs[i]; cap(m) >= size {
			b.msgs[i] = b.msgs[len(b.msgs)-1]
			b.msgs = b.msgs[:len(b.msgs)-1]
			return m
		}
	}
	return make([]byte, 0, size+size/8)
}

func (b *BatchEncoder) recycle(c *colBatch) {
	b.freeMu.Lock()
	b.free = append(b.free, c)
	b.freeMu.Unlock()
}

// Start readies the encoder for a file whose topic has `partitions` partitions,
// dropping whatever an aborted file left behind.
func (b *BatchEncoder) Start(_ *Encoder, partitions int) {
	if partitions < 1 {
		partitions = 1
	}
	b.Abort() // an unfinished file's messages are never produced (its transaction aborts)
	for len(b.parts) < partitions {
		b.parts = append(b.parts, &partBatch{})
	}
	for _, p := range b.parts[partitions:] {
		if p.cur != nil {
			b.recycle(p.cur)
			p.cur = nil
		}
	}
	b.parts = b.parts[:partitions]
	for _, p := range b.parts {
		if p.cur != nil {
			b.recycle(p.cur)
		}
		p.cur, p.seq = b.batch(), 0
	}
	b.queue, b.done = make(chan batchJob, 2), make(chan error, 1)
	go b.work(b.queue, b.done)
}

// Add appends one flow to the batch of partition hash % partitions; a full batch is
// encoded and emitted.
func (b *BatchEncoder) Add(f *Flow, hash uint64, sourceFile string, emit Emit) error {
	part := int(hash % uint64(len(b.parts)))
	p := b.parts[part]
	c := p.cur
	le := binary.LittleEndian
	for i, id := range b.ids {
		col := &c.cols[i]
		switch id {
		case fTimeStart:
			col.values = le.AppendUint64(col.values, uint64(f.TimeStart))
		case fTimeEnd:
			col.values = le.AppendUint64(col.values, uint64(f.TimeEnd))
		case fExporter:
			col.appendShared(f.Exporter.Addr, c.n)
		case fSrcAddr:
			col.data = appendAddr(col.data, &f.SrcAddr, f.V6)
			col.values = le.AppendUint32(col.values, uint32(len(col.data)))
		case fDstAddr:
			col.data = appendAddr(col.data, &f.DstAddr, f.V6)
			col.values = le.AppendUint32(col.values, uint32(len(col.data)))
		case fSourceFile:
			col.appendShared(sourceFile, c.n)
		case fNull:
			col.mark(c.n, false)
			b.appendNull(col, i)
		default:
			if id.optional() {
				b.addOptional(col, f, id, i, c.n)
				continue
			}
			if v := flowInt(f, id); b.kinds[i] == kindInt64 {
				col.values = le.AppendUint64(col.values, uint64(v))
			} else {
				col.values = le.AppendUint32(col.values, uint32(int32(v)))
			}
		}
	}
	c.n++
	if c.n >= b.perMsg {
		return b.emit(part, emit)
	}
	return nil
}

// appendNull appends the placeholder of a null value to column i (its bit is clear).
func (b *BatchEncoder) appendNull(col *colData, i int) {
	switch b.kinds[i] {
	case kindString:
		col.values = binary.LittleEndian.AppendUint32(col.values, uint32(len(col.data)))
	case kindList, kindNullListLong, kindNullListString:
		col.values = binary.LittleEndian.AppendUint32(col.values, uint32(len(col.data)/4))
	default:
		col.values = append(col.values, make([]byte, kindWidth[b.kinds[i]])...)
	}
}

// addOptional appends flow n's value of a revision-3 field, null when the record lacks it.
func (b *BatchEncoder) addOptional(col *colData, f *Flow, id fieldID, i, n int) {
	le := binary.LittleEndian
	ok := false
	switch {
	case id == fMPLSLabels:
		if ok = f.NMPLS > 0; ok {
			for _, v := range f.MPLS[:f.NMPLS] {
				col.data = le.AppendUint32(col.data, v)
			}
			col.values = le.AppendUint32(col.values, uint32(len(col.data)/4))
		}
	case id.isString():
		if col.data, ok = flowOptString(col.data, f, id); ok {
			col.values = le.AppendUint32(col.values, uint32(len(col.data)))
		}
	default:
		var v int64
		if v, ok = flowOptInt(f, id); ok {
			if b.kinds[i] == kindInt64 {
				col.values = le.AppendUint64(col.values, uint64(v))
			} else {
				col.values = le.AppendUint32(col.values, uint32(int32(v)))
			}
		}
	}
	col.mark(n, ok)
	if !ok {
		b.appendNull(col, i)
	}
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
		if p.cur != nil && p.cur.n > 0 {
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
		b.recycle(j.cols)
	}
	done <- first
}

// emit cuts partition part's batch and queues it (inline without a worker: tests).
func (b *BatchEncoder) emit(part int, emit Emit) error {
	p := b.parts[part]
	j := batchJob{cols: p.cur, part: part, seq: p.seq, rows: p.cur.n, emit: emit}
	p.cur = b.batch()
	p.seq++
	if b.queue == nil {
		defer b.recycle(j.cols)
		return b.encode(j)
	}
	select {
	case b.queue <- j:
		return nil
	case err := <-b.done: // the worker stopped on an error: the file fails
		b.queue, b.done = nil, nil
		b.recycle(j.cols)
		return err
	}
}

// encode writes one message (a whole Arrow IPC stream: schema, this batch, end of
// stream) and hands it to the producer, which holds it until the broker acknowledged
// (then reuse takes it back).
func (b *BatchEncoder) encode(j batchJob) error {
	body, meta := b.ipc.recordBatch(j.cols, b.kinds, b.ids)
	msg := b.message(len(b.header) + len(b.schemaMsg) + len(meta) + 16 + len(body) + len(ipcEOS))
	msg = append(append(msg, b.header...), b.schemaMsg...)
	msg = appendIPCMessage(msg, meta, body)
	msg = append(msg, ipcEOS...)
	return j.emit(j.part, j.seq, j.rows, msg)
}

// batchEmitter produces each FlowBatch message of file `name` into its partition, keyed
// "file#partition#index" (a quarantined message then says where it came from).
func (s *Shipper) batchEmitter(ctx context.Context, name string, promise func(*kgo.Record, error)) Emit {
	return func(part, seq, flows int, value []byte) error {
		rec := &kgo.Record{Topic: s.o.FlowsTopic, Partition: int32(part), Value: value,
			Key: []byte(fmt.Sprintf("%s#%d#%d", name, part, seq))}
		s.cl.Produce(ctx, rec, func(r *kgo.Record, err error) {
			promise(r, err)
			s.batch.reuse(r.Value) // acknowledged or failed: the client is done with it
		})
		if s.o.Throttle > 0 { // testing: the file's time spent after each message, so a kill finds it open
			time.Sleep(time.Duration(flows) * time.Second / time.Duration(s.o.Throttle))
		}
		return nil
	}
}
