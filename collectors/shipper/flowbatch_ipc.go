package main

// The record batch message of a FlowBatch (Arrow IPC, format.Message.fbs and the
// columnar format's "Compression" section), written for flat columns of fixed-width
// values and strings: arrow-go's writer cannot be given a zstd level or reused buffers
// (flowbatch.go says what that cost). What arrow-go's reader and pyarrow read back is
// pinned by flowbatch_test.go and the ingest's tests.
//
//	0xFFFFFFFF | int32 metadata length | Message flatbuffer (RecordBatch header), padded to 8 | body
//
// Body: per column its buffers in order (validity, then values, or offsets and data),
// each "int64 uncompressed length | zstd or LZ4 frame", padded to 8; an empty buffer is empty
// (no prefix), as arrow-go and Arrow C++ write it.

import (
	"encoding/binary"
	"fmt"
	"slices"

	flatbuffers "github.com/google/flatbuffers/go"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

const (
	fbMetadataV5        = 4 // MetadataVersion.V5
	fbHeaderRecordBatch = 3 // MessageHeader.RecordBatch
	fbCodecZstd         = 1 // CompressionType.ZSTD (LZ4_FRAME is 0, the default)
)

// ipcEOS ends an Arrow IPC stream: continuation marker, zero length.
var ipcEOS = []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}

type ipcSpan struct{ a, b int64 } // FieldNode (length, null_count) or Buffer (offset, length)

// ipcBatchWriter encodes record batch messages; one per encoding goroutine.
type ipcBatchWriter struct {
	// zstd SpeedFastest: 28.4 bytes a flow on the wire (27.9 at its default level) for
	// about half the compression CPU; no frame checksum (Kafka's record batches have a
	// CRC). LZ4 frames (`import.message_compression`): 41.5 bytes a flow for 16 % less of
	// the importer's CPU (BenchmarkImportFile).
	zstd  *zstd.Encoder
	fb    *flatbuffers.Builder
	body  []byte
	nodes []ipcSpan
	bufs  []ipcSpan
	lz4   *lz4.Compressor
	// per column, a string shared by every flow of a message (source_file, mostly the
	// exporter): its offsets and bytes compressed once per value and length (a quarter
	// of the raw bytes otherwise)
	consts []constColumn
}

// newIPCBatchWriter compresses bodies with codec: "zstd" or "lz4" (LZ4 frames).
func newIPCBatchWriter(codec string) (*ipcBatchWriter, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false))
	if err != nil {
		return nil, fmt.Errorf("zstd: %v", err)
	}
	w := &ipcBatchWriter{zstd: enc, fb: flatbuffers.NewBuilder(1024)}
	switch codec {
	case "zstd":
	case "lz4":
		w.lz4 = &lz4.Compressor{}
	default:
		return nil, fmt.Errorf("message compression %q: want zstd or lz4", codec)
	}
	return w, nil
}

// compress is raw as a body buffer: its length, then the zstd frame (empty: nothing).
func (w *ipcBatchWriter) compress(dst, raw []byte) []byte {
	if len(raw) == 0 {
		return dst
	}
	dst = binary.LittleEndian.AppendUint64(dst, uint64(len(raw)))
	if w.lz4 != nil {
		return w.lz4Frame(dst, raw)
	}
	return w.zstd.EncodeAll(raw, dst)
}

// lz4FrameHeader opens an LZ4 frame as pierrec/lz4's Writer does with 4 MB blocks and
// no checksums (TestLZ4FrameHeader): magic, FLG 0x60 (version 1, independent blocks),
// BD 0x70 (4 MB blocks), the descriptor's checksum byte.
var lz4FrameHeader = []byte{0x04, 0x22, 0x4d, 0x18, 0x60, 0x70, 0x73}

const lz4MaxBlock = 4 << 20

// lz4Frame appends raw as one LZ4 frame, its blocks compressed straight into dst
// (the frame Writer copies every byte into a block buffer first: 5 % of the CPU).
func (w *ipcBatchWriter) lz4Frame(dst, raw []byte) []byte {
	dst = append(dst, lz4FrameHeader...)
	for len(raw) > 0 {
		chunk := raw[:min(len(raw), lz4MaxBlock)]
		raw = raw[len(chunk):]
		at := len(dst)
		dst = slices.Grow(append(dst, 0, 0, 0, 0), lz4.CompressBlockBound(len(chunk)))
		n, err := w.lz4.CompressBlock(chunk, dst[len(dst):cap(dst)])
		if err != nil || n == 0 || n >= len(chunk) { // incompressible: stored as it is
			dst = append(dst, chunk...)
			binary.LittleEndian.PutUint32(dst[at:], uint32(len(chunk))|0x80000000)
			continue
		}
		dst = dst[:len(dst)+n]
		binary.LittleEndian.PutUint32(dst[at:], uint32(n))
	}
	return append(dst, 0, 0, 0, 0) // end mark
}

// buffer appends one compressed body buffer.
func (w *ipcBatchWriter) buffer(raw []byte) {
	start := int64(len(w.body))
	w.body = w.compress(w.body, raw)
	w.pad(start)
}

// pad records the buffer that started at start and pads the body to 8 bytes.
func (w *ipcBatchWriter) pad(start int64) {
	w.bufs = append(w.bufs, ipcSpan{start, int64(len(w.body)) - start})
	for len(w.body)%8 != 0 {
		w.body = append(w.body, 0)
	}
}

// recordBatch compresses c's columns into the body and returns it with the message's
// flatbuffer; both stay valid until the next call.
func (w *ipcBatchWriter) recordBatch(c *colBatch, kinds []colKind, ids []fieldID) (body, meta []byte) {
	w.body, w.nodes, w.bufs = w.body[:0], w.nodes[:0], w.bufs[:0]
	n := int64(c.n)
	for i := range c.cols {
		col := &c.cols[i]
		w.nodes = append(w.nodes, ipcSpan{n, int64(col.nulls)})
		if col.nulls > 0 {
			w.buffer(col.valid[:(c.n+7)/8])
		} else {
			w.buffer(nil) // no nulls: no validity bitmap
		}
		if kinds[i] == kindNullListLong || kinds[i] == kindNullListString { // every list null: an empty child
			w.buffer(col.values)
			w.nodes = append(w.nodes, ipcSpan{0, 0})
			w.buffer(nil) // the child's validity
			if kinds[i] == kindNullListString {
				w.buffer(zeroOffset) // its one offset
			}
			w.buffer(nil) // its values (bytes)
			continue
		}
		if kinds[i] == kindList { // offsets, then the child: its node, no validity, the items
			w.buffer(col.values)
			w.nodes = append(w.nodes, ipcSpan{int64(len(col.data) / 4), 0})
			w.buffer(nil)
			w.buffer(col.data)
			continue
		}
		if kinds[i] == kindString && !col.mixed && (ids[i] == fSourceFile || ids[i] == fExporter) {
			w.constant(i, col.constant, c.n)
			continue
		}
		w.buffer(col.values)
		if kinds[i] == kindString {
			w.buffer(col.data)
		}
	}
	return w.body, w.message(n)
}

var zeroOffset = []byte{0, 0, 0, 0}

type constColumn struct {
	s         string
	n         int
	off, data []byte // compressed buffers
}

// constant appends the offsets and bytes buffers of string column i holding s n times.
func (w *ipcBatchWriter) constant(i int, s string, n int) {
	for len(w.consts) <= i {
		w.consts = append(w.consts, constColumn{})
	}
	cc := &w.consts[i]
	if s != cc.s || n != cc.n || cc.off == nil {
		off := make([]byte, 0, 4*(n+1))
		data := make([]byte, 0, len(s)*n)
		off = binary.LittleEndian.AppendUint32(off, 0)
		for k := 0; k < n; k++ {
			data = append(data, s...)
			off = binary.LittleEndian.AppendUint32(off, uint32(len(data)))
		}
		*cc = constColumn{s: s, n: n, off: w.compress([]byte{}, off), data: w.compress(nil, data)}
	}
	for _, b := range [][]byte{cc.off, cc.data} {
		start := int64(len(w.body))
		w.body = append(w.body, b...)
		w.pad(start)
	}
}

// message builds the Message flatbuffer of a RecordBatch of n rows.
func (w *ipcBatchWriter) message(n int64) []byte {
	b := w.fb
	b.Reset()
	b.StartObject(2) // BodyCompression
	if w.lz4 == nil {
		b.PrependInt8Slot(0, fbCodecZstd, 0)
	} // else the default, LZ4_FRAME
	b.PrependInt8Slot(1, 0, 0) // method BUFFER
	comp := b.EndObject()
	spans := func(s []ipcSpan) flatbuffers.UOffsetT {
		b.StartVector(16, len(s), 8)
		for i := len(s) - 1; i >= 0; i-- { // structs are prepended: last first, second field first
			b.Prep(8, 16)
			b.PrependInt64(s[i].b)
			b.PrependInt64(s[i].a)
		}
		return b.EndVector(len(s))
	}
	nodes := spans(w.nodes)
	bufs := spans(w.bufs)
	b.StartObject(5) // RecordBatch
	b.PrependInt64Slot(0, n, 0)
	b.PrependUOffsetTSlot(1, nodes, 0)
	b.PrependUOffsetTSlot(2, bufs, 0)
	b.PrependUOffsetTSlot(3, comp, 0)
	rb := b.EndObject()
	b.StartObject(5) // Message
	b.PrependInt16Slot(0, fbMetadataV5, 0)
	b.PrependByteSlot(1, fbHeaderRecordBatch, 0)
	b.PrependUOffsetTSlot(2, rb, 0)
	b.PrependInt64Slot(3, int64(len(w.body)), 0)
	b.Finish(b.EndObject())
	return b.FinishedBytes()
}

// appendIPCMessage frames one encapsulated IPC message: its metadata padded so the body
// starts 8-aligned, then the body.
func appendIPCMessage(dst, meta, body []byte) []byte {
	padded := (len(meta) + 8 + 7) &^ 7
	dst = append(dst, 0xff, 0xff, 0xff, 0xff)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(padded-8))
	dst = append(dst, meta...)
	for i := len(meta) + 8; i < padded; i++ {
		dst = append(dst, 0)
	}
	return append(dst, body...)
}
