// Native reader for nfdump 1.7 files (LAYOUT_VERSION_2, V3 records).
//
// Layout (nfdump src/lib/nffileV2.h, nfxV3.h, exporter.h), all little endian:
//
//	file header (40 bytes) | data block 0 | ... | data block n-1 | appendix blocks
//	data block: NumRecords u32, size u32, type u16, flags u16, then `size` bytes
//	            (compressed with the file's method unless flags bit 0 is set)
//	record:     type u16, size u16 (including the header), body
//
// Flows are V3 records (type 11): a 12-byte header then extension elements
// (type u16, length u16 including the header). Exporter info (type 7) and sampler
// (type 15) records come before the flows that reference them.
package main

import (
	"bytes"
	"compress/bzip2"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

const (
	nfMagic        = 0xA50C
	layoutV1       = 1
	layoutV2       = 2
	fileHeaderSize = 40
	blockHeaderLen = 12

	compNone = 0
	compLZO  = 1
	compBZ2  = 2
	compLZ4  = 3
	compZSTD = 4

	blockType3           = 3
	flagBlockUncompressd = 0x1

	recExporterInfo = 7
	recExporterStat = 8
	recSampler      = 15
	recV3           = 11

	v3FlagSampled = 2

	samplerNfcapdDefault = -2 // nfdump's SAMPLER_DEFAULT (-s N); -3 is SAMPLER_OVERWRITE (-s -N)

	exGenericFlow = 1
	exIPv4Flow    = 2
	exIPv6Flow    = 3
	exFlowMisc    = 4 // EXflowMisc: input, output u32, srcMask, dstMask, dir, dstTos, biFlowDir, flowEndReason u8 ...
	exCntFlow     = 5 // EXcntFlow: flows, outPackets, outBytes u64 (v9/IPFIX OUT_PKTS 24 / OUT_BYTES 23)
	exVlan        = 6 // EXvLan: srcVlan u32, dstVlan u32 (nfcapd 1.7.1 maps v9/IPFIX 58 and 59 here)
	exASRouting   = 7
	exBGPNextV4   = 8  // EXbgpNextHopV4: u32 (IE 18)
	exBGPNextV6   = 9  // EXbgpNextHopV6: 2 x u64 (IE 63)
	exIPNextV4    = 10 // EXipNextHopV4: u32 (IE 15)
	exIPNextV6    = 11 // EXipNextHopV6: 2 x u64 (IE 62)
	exIPRecvV4    = 12
	exIPRecvV6    = 13
	exMPLS        = 14 // EXmplsLabel: 10 x u32, each the 3 bytes of IE 70-79 (label<<4 | exp<<1 | bottom of stack)
	exMAC         = 15 // EXmacAddr: inSrcMac (IE 56), outDstMac (57), inDstMac (80), outSrcMac (81), u64 each
	exSamplerInfo = 18
	exNSELXlate4  = 20 // EXnselXlateIPv4: xlateSrcAddr, xlateDstAddr u32 (IE 225, 226)
	exNSELXlate6  = 21 // EXnselXlateIPv6: 2 x (2 x u64) (IE 281, 282; nfcapd 1.7.1 drops them from IPFIX)
	exNSELXlatePt = 22 // EXnselXlatePort: xlateSrcPort, xlateDstPort u16 (IE 227, 228)
	exNELCommon   = 25 // EXnelCommon: msecEvent u64, natPoolID u32, natEvent u8 (IE 230), fill
	exVRF         = 36 // EXvrf: egressVrf, ingressVrf u32 (IE 235, 234)

	mplsLabels = 10 // EXmplsLabel's slots

	// nfdump never writes a block bigger than a few MB; anything beyond is garbage.
	maxBlockBytes = 64 << 20
)

// CorruptError says what is wrong with a file and where; such a file is quarantined.
type CorruptError struct {
	File   string
	Offset int64
	Msg    string
}

func (e *CorruptError) Error() string {
	if e.Offset >= 0 {
		return fmt.Sprintf("%s: %s (at byte offset %d)", e.File, e.Msg, e.Offset)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// IsCorrupt reports whether err means the file itself is bad (as opposed to I/O trouble).
func IsCorrupt(err error) bool {
	var ce *CorruptError
	return errors.As(err, &ce)
}

// Flow is one decoded flow, as the FLOW Avro record needs it.
type Flow struct {
	TimeStart, TimeEnd int64 // ms since epoch, UTC
	Exporter           *Exporter
	InputIf, OutputIf  uint32
	SrcAddr, DstAddr   [16]byte // IPv4 in the first 4 bytes when !V6
	V6                 bool
	SrcPort, DstPort   uint16
	Proto, TCPFlags    uint8
	Tos                uint8
	Packets, Bytes     uint64
	SamplingRate       uint32 // as read: the rate nfcapd applied; after resolve: flowlake's
	SrcAS, DstAS       uint32
	SrcVlan, DstVlan   uint32 // 0: the exporter sent none
	// Flow record revision 3 (issue 32): which of these the record carried is in Layout
	// (one bit per element type, has()); all fixed-size, so decoding stays allocation-free.
	FlowDir, SrcMask, DstMask uint8 // EXflowMisc
	BiFlowDir, FwdStatus      uint8 // EXflowMisc's biFlowDir (IE 239), EXgenericFlow's fwdStatus (IE 89)
	NextHop, BGPNextHop       [16]byte
	NextHopV6, BGPNextHopV6   bool
	SrcMAC, DstMAC            uint64             // 48-bit MAC in the low bytes; 0: none
	MPLS                      [mplsLabels]uint32 // label values, top of stack first
	NMPLS                     uint8
	IngressVRF, EgressVRF     uint32
	HasVRF                    bool // EXvrf, or VRFs inside an earlier layout's EXnelCommon
	SrcNAT, DstNAT            [16]byte
	NATV6                     bool
	SrcPortNAT, DstPortNAT    uint16
	NATEvent                  uint8
	OutPackets, OutBytes      uint64 // EXcntFlow: the reverse direction of a biflow (as nfcapd applied sampling)
	RevTCPFlags               uint8  // reverseTcpControlBits from flowlake's own decode (gaps.go)
	HasRevTCPFlags            bool   // RevTCPFlags is set: the reverse half takes it
	BiflowHalf                uint8  // 0 one-way, 1 a biflow's initiator half, 2 its reverse half (reverse())
	Received                  int64  // ms since epoch: when nfcapd received the datagram
	NfcapdSetting             bool   // SamplingRate came from nfcapd's -s, not from the router
	Seq                       int64  // position of the record in its file, from 0; a reverse half: -(position+1)
	Layout                    uint64 // bit per extension element type present (health: template layouts)
	NfVersion                 uint8  // NetFlow version of the record (5, 9, 10; 0x85 sFlow v5 from sfcapd)
	L2Corrected               bool   // an sFlow record whose bytes were brought from frame to layer 3 (sflowFixup)
	SFlowFrame                uint64 // an sFlow record's frame_length as sfcapd stored it (bytes / packets before sflowFixup)
	Reject                    string // why the record cannot be a flow (sflowFixup): quarantined like impossible times
	Dropped                   bool   // set by a ReadFile callback that does not pass the flow on (quarantined)
}

// Exporter is an exporter info record: the router's address as text.
type Exporter struct {
	SysID   uint16
	Version uint32
	Domain  uint32 // observation domain (IPFIX), source id (v9), engine type/id (v5)
	Addr    string
	addrRaw []byte // 4 or 16 bytes, for the Kafka key hash
}

type sampler struct {
	id       int64
	interval uint32 // 1:N
}

// Header is the parsed file header.
type Header struct {
	Version     uint16
	NfdVersion  uint32
	Created     int64
	Compression uint8
	Encryption  uint8
	Appendix    uint16
	Creator     uint32
	OffAppendix int64
	BlockSize   uint32
	NumBlocks   uint32
}

// Stats are per-file totals, the same figures `nfdump -I` prints.
type Stats struct {
	File         string `json:"file"`
	Compression  string `json:"compression"`
	Blocks       uint32 `json:"blocks"`
	Flows        uint64 `json:"flows"`
	Packets      uint64 `json:"packets"`
	Bytes        uint64 `json:"bytes"`
	FlowsTCP     uint64 `json:"flows_tcp"`
	FlowsUDP     uint64 `json:"flows_udp"`
	FlowsICMP    uint64 `json:"flows_icmp"`
	FlowsOther   uint64 `json:"flows_other"`
	PacketsTCP   uint64 `json:"packets_tcp"`
	PacketsUDP   uint64 `json:"packets_udp"`
	PacketsICMP  uint64 `json:"packets_icmp"`
	PacketsOther uint64 `json:"packets_other"`
	BytesTCP     uint64 `json:"bytes_tcp"`
	BytesUDP     uint64 `json:"bytes_udp"`
	BytesICMP    uint64 `json:"bytes_icmp"`
	BytesOther   uint64 `json:"bytes_other"`
	FirstMs      int64  `json:"first_ms"`
	LastMs       int64  `json:"last_ms"`
	Exporters    int    `json:"exporters"`
	Samplers     int    `json:"samplers"`
	Unfinished   bool   `json:"unfinished"`    // never closed by nfcapd (killed)
	DroppedBytes int64  `json:"dropped_bytes"` // unfinished: partly written last block
	Created      int64  `json:"created"`       // header: when nfcapd opened the file, s since epoch
	ModTime      int64  `json:"mtime_ms"`      // when it was last written (closed), ms since epoch

	Health []*ExporterHealth `json:"exporter_health"` // one per exporter in the file (health.go)
}

func (s *Stats) add(f *Flow) {
	s.Flows++
	s.Packets += f.Packets
	s.Bytes += f.Bytes
	switch f.Proto {
	case 6:
		s.FlowsTCP++
		s.PacketsTCP += f.Packets
		s.BytesTCP += f.Bytes
	case 17:
		s.FlowsUDP++
		s.PacketsUDP += f.Packets
		s.BytesUDP += f.Bytes
	case 1, 58:
		s.FlowsICMP++
		s.PacketsICMP += f.Packets
		s.BytesICMP += f.Bytes
	default:
		s.FlowsOther++
		s.PacketsOther += f.Packets
		s.BytesOther += f.Bytes
	}
	if s.FirstMs == 0 || f.TimeStart < s.FirstMs {
		s.FirstMs = f.TimeStart
	}
	if f.TimeEnd > s.LastMs {
		s.LastMs = f.TimeEnd
	}
}

var compressionNames = map[uint8]string{compNone: "none", compLZO: "lzo", compBZ2: "bz2", compLZ4: "lz4", compZSTD: "zstd"}

// ReadFile decodes every flow of an nfcapd file, calling fn for each in file order.
// The whole file is validated as it goes; the first problem ends the read with a
// *CorruptError naming the file, the problem and the byte offset. Callers that must
// not act on part of a bad file (the shipper) undo what fn did when an error comes back.
func ReadFile(path string, fn func(*Flow) error) (*Stats, error) {
	return ReadFileWith(path, nil, fn)
}

// ReadFileWith is ReadFile with pre called on every record as read, before its biflow
// halves are made and fn sees them (Resolver.Complete: what nfcapd lost, gaps.go).
func ReadFileWith(path string, pre func(*Flow), fn func(*Flow) error) (*Stats, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	r := &reader{path: path, size: st.Size(), exporters: map[uint16]*Exporter{}, samplers: map[uint16][]sampler{}, pre: pre}
	r.stats.ModTime = st.ModTime().UnixMilli()
	return r.read(fh, fn)
}

type reader struct {
	path      string
	size      int64
	hdr       Header
	exporters map[uint16]*Exporter
	unknown   map[uint16]*Exporter
	samplers  map[uint16][]sampler
	health    fileHealth
	stats     Stats
	seq       int64
	rev       Flow   // the reverse half of the current biflow record
	raw       []byte // one block as stored
	plain     []byte // one block decompressed
	zstdDec   *zstd.Decoder
	lastSys   uint16    // exporterFor's last answer
	lastExp   *Exporter // (nil when an exporter record changed the map)
	pre       func(*Flow)
}

func (r *reader) corrupt(off int64, format string, args ...any) error {
	return &CorruptError{File: r.path, Offset: off, Msg: fmt.Sprintf(format, args...)}
}

func (r *reader) read(fh io.Reader, fn func(*Flow) error) (*Stats, error) {
	var hb [fileHeaderSize]byte
	n, err := io.ReadFull(fh, hb[:])
	if n >= 4 && binary.LittleEndian.Uint16(hb[0:]) != nfMagic {
		return nil, r.corrupt(0, "bad magic 0x%04X, not an nfdump file (want 0xA50C)", binary.LittleEndian.Uint16(hb[0:]))
	}
	if err != nil {
		if n < 2 {
			return nil, r.corrupt(-1, "empty or too short to be an nfdump file (%d bytes)", n)
		}
		if binary.LittleEndian.Uint16(hb[0:]) != nfMagic {
			return nil, r.corrupt(0, "bad magic 0x%04X, not an nfdump file (want 0xA50C)", binary.LittleEndian.Uint16(hb[0:]))
		}
		return nil, r.corrupt(int64(n), "truncated file header: %d of %d bytes", n, fileHeaderSize)
	}
	h := &r.hdr
	h.Version = binary.LittleEndian.Uint16(hb[2:])
	h.NfdVersion = binary.LittleEndian.Uint32(hb[4:])
	h.Created = int64(binary.LittleEndian.Uint64(hb[8:]))
	h.Compression = hb[16]
	h.Encryption = hb[17]
	h.Appendix = binary.LittleEndian.Uint16(hb[18:])
	h.Creator = binary.LittleEndian.Uint32(hb[20:])
	h.OffAppendix = int64(binary.LittleEndian.Uint64(hb[24:]))
	h.BlockSize = binary.LittleEndian.Uint32(hb[32:])
	h.NumBlocks = binary.LittleEndian.Uint32(hb[36:])
	switch {
	case h.Version == layoutV1:
		return nil, r.corrupt(2, "layout version 1 (nfdump 1.6) is not supported: rewrite it with `nfdump -r FILE -w NEWFILE`")
	case h.Version != layoutV2:
		return nil, r.corrupt(2, "unknown layout version %d (want 2)", h.Version)
	case h.Encryption != 0:
		return nil, r.corrupt(17, "encrypted files are not supported (encryption %d)", h.Encryption)
	}
	if _, ok := compressionNames[h.Compression]; !ok {
		return nil, r.corrupt(16, "unknown compression method %d", h.Compression)
	}
	if h.OffAppendix < 0 || h.OffAppendix > r.size {
		return nil, r.corrupt(24, "truncated: appendix offset %d is beyond the end of the file (%d bytes)", h.OffAppendix, r.size)
	}
	r.stats.File = r.path
	r.stats.Compression = compressionNames[h.Compression]
	r.stats.Blocks = h.NumBlocks

	// A file nfcapd never closed (killed; renamed by collectors/nfcapd.py to
	// *.recoveredPID) has no block count and no appendix yet: read its complete
	// blocks up to the end and drop a partly written last one.
	unfinished := h.NumBlocks == 0 && h.OffAppendix == 0 && r.size > fileHeaderSize
	r.stats.Unfinished = unfinished
	off := int64(fileHeaderSize)
	var bh [blockHeaderLen]byte
	for b := uint32(0); b < h.NumBlocks || unfinished; b++ {
		if unfinished {
			if left := r.size - off; left < blockHeaderLen {
				r.stats.DroppedBytes = left
				break
			}
		}
		if n, err := io.ReadFull(fh, bh[:]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, r.corrupt(off, "truncated: block %d of %d header missing (%d of 12 bytes)", b+1, h.NumBlocks, n)
			}
			return nil, err
		}
		numRecords := binary.LittleEndian.Uint32(bh[0:])
		size := binary.LittleEndian.Uint32(bh[4:])
		btype := binary.LittleEndian.Uint16(bh[8:])
		flags := binary.LittleEndian.Uint16(bh[10:])
		if size > maxBlockBytes {
			return nil, r.corrupt(off, "block %d claims %d bytes (more than %d): corrupt block header", b+1, size, maxBlockBytes)
		}
		if left := r.size - off - blockHeaderLen; int64(size) > left && unfinished {
			r.stats.DroppedBytes = left + blockHeaderLen
			break
		}
		if left := r.size - off - blockHeaderLen; int64(size) > left {
			return nil, r.corrupt(off, "truncated block %d of %d: header says %d bytes, %d left in the file", b+1, h.NumBlocks, size, left)
		}
		if cap(r.raw) < int(size) {
			r.raw = make([]byte, size, size+size/4)
		}
		r.raw = r.raw[:size]
		if _, err := io.ReadFull(fh, r.raw); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, r.corrupt(off, "truncated block %d of %d", b+1, h.NumBlocks)
			}
			return nil, err
		}
		data := r.raw
		if h.Compression != compNone && flags&flagBlockUncompressd == 0 {
			if data, err = r.decompress(r.raw); err != nil {
				return nil, r.corrupt(off, "block %d of %d: %s decompression failed: %v", b+1, h.NumBlocks, compressionNames[h.Compression], err)
			}
		}
		if btype == blockType3 {
			if err := r.records(data, numRecords, off, b+1, fn); err != nil {
				return nil, err
			}
		} else if btype != 2 && btype != 4 {
			return nil, r.corrupt(off, "block %d of %d has unknown type %d", b+1, h.NumBlocks, btype)
		}
		off += blockHeaderLen + int64(size)
		if unfinished {
			r.stats.Blocks = b + 1
		}
	}
	if h.OffAppendix > 0 {
		if off > h.OffAppendix {
			return nil, r.corrupt(off, "data blocks run past the appendix offset %d", h.OffAppendix)
		}
		if err := r.checkAppendix(); err != nil {
			return nil, err
		}
	}
	r.stats.Exporters = len(r.exporters)
	for _, s := range r.samplers {
		r.stats.Samplers += len(s)
	}
	r.stats.Created = int64(h.Created)
	r.stats.Health = r.health.rows(r)
	return &r.stats, nil
}

// checkAppendix verifies the appendix blocks (ident, stat record) are all present,
// so a file cut short after its data blocks is still caught.
func (r *reader) checkAppendix() error {
	fh, err := os.Open(r.path)
	if err != nil {
		return err
	}
	defer fh.Close()
	off := r.hdr.OffAppendix
	var bh [blockHeaderLen]byte
	for i := uint16(0); i < r.hdr.Appendix; i++ {
		if _, err := fh.ReadAt(bh[:], off); err != nil {
			return r.corrupt(off, "truncated: appendix block %d of %d missing", i+1, r.hdr.Appendix)
		}
		size := int64(binary.LittleEndian.Uint32(bh[4:]))
		if off+blockHeaderLen+size > r.size {
			return r.corrupt(off, "truncated appendix block %d of %d: header says %d bytes, %d left", i+1, r.hdr.Appendix, size, r.size-off-blockHeaderLen)
		}
		off += blockHeaderLen + size
	}
	return nil
}

func (r *reader) decompress(in []byte) ([]byte, error) {
	switch r.hdr.Compression {
	case compLZ4:
		// nfcapd blocks hold at most 5 MB (nfdump BUFFSIZE); start at 2 MB, grow on demand
		if cap(r.plain) < 2<<20 {
			r.plain = make([]byte, 2<<20)
		}
		for {
			r.plain = r.plain[:cap(r.plain)]
			n, err := lz4.UncompressBlock(in, r.plain)
			if err == nil {
				return r.plain[:n], nil
			}
			if errors.Is(err, lz4.ErrInvalidSourceShortBuffer) && cap(r.plain) < 16<<20 {
				r.plain = make([]byte, 2*cap(r.plain))
				continue
			}
			return nil, err
		}
	case compLZO:
		out, err := lzo1xDecompress(in, r.plain[:0], maxBlockBytes)
		if err != nil {
			return nil, err
		}
		r.plain = out
		return out, nil
	case compBZ2:
		var buf bytes.Buffer
		if _, err := io.Copy(&buf, io.LimitReader(bzip2.NewReader(bytes.NewReader(in)), maxBlockBytes)); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	case compZSTD:
		if r.zstdDec == nil {
			d, err := zstd.NewReader(nil)
			if err != nil {
				return nil, err
			}
			r.zstdDec = d
		}
		out, err := r.zstdDec.DecodeAll(in, r.plain[:0])
		if err != nil {
			return nil, err
		}
		r.plain = out
		return out, nil
	}
	return nil, fmt.Errorf("unknown compression %d", r.hdr.Compression)
}

func (r *reader) records(data []byte, numRecords uint32, blockOff int64, blockNo uint32, fn func(*Flow) error) error {
	pos := 0
	var f Flow
	for i := uint32(0); i < numRecords; i++ {
		if len(data)-pos < 4 {
			return r.corrupt(blockOff, "block %d: record %d of %d starts past the block's end", blockNo, i+1, numRecords)
		}
		rtype := binary.LittleEndian.Uint16(data[pos:])
		rsize := int(binary.LittleEndian.Uint16(data[pos+2:]))
		if rsize < 4 || rsize > len(data)-pos {
			return r.corrupt(blockOff, "block %d: record %d of %d (type %d) has size %d, %d bytes left in the block", blockNo, i+1, numRecords, rtype, rsize, len(data)-pos)
		}
		rec := data[pos : pos+rsize]
		switch rtype {
		case recV3:
			if err := r.v3(rec, &f, blockOff, blockNo); err != nil {
				return err
			}
			f.Seq = r.seq
			r.seq++
			if r.pre != nil {
				r.pre(&f)
			}
			r.stats.add(&f)
			biflow := f.Biflow()
			if biflow { // two one-way rows: the initiator as recorded, then the reverse half
				f.BiflowHalf = 1
				f.reverse(&r.rev)
			}
			if err := r.pass(&f, fn); err != nil {
				return err
			}
			if biflow {
				if err := r.pass(&r.rev, fn); err != nil {
					return err
				}
			}
		case recExporterInfo:
			if rsize < 32 {
				return r.corrupt(blockOff, "block %d: exporter record of %d bytes (want 32)", blockNo, rsize)
			}
			r.exporter(rec)
		case recExporterStat:
			if err := r.health.exporterStats(rec); err != nil {
				return r.corrupt(blockOff, "block %d: %v", blockNo, err)
			}
		case recSampler:
			if rsize < 24 {
				return r.corrupt(blockOff, "block %d: sampler record of %d bytes (want 24)", blockNo, rsize)
			}
			sys := binary.LittleEndian.Uint16(rec[4:])
			id := int64(binary.LittleEndian.Uint64(rec[8:]))
			pi := binary.LittleEndian.Uint32(rec[16:])
			si := binary.LittleEndian.Uint32(rec[20:])
			// nfcapd's own arithmetic (uint32), so this is exactly the factor it applied
			// (its -s -1 writes space 0xFFFFFFFE for IPFIX and multiplies by 2^32-1)
			rate := uint32(1)
			if pi > 0 {
				rate = (pi + si) / pi
			}
			r.addSampler(sys, sampler{id: id, interval: rate})
			r.health.sampler(sys, id, rate)
		case 1, 5, 6, 10:
			return r.corrupt(blockOff, "block %d: record type %d is the nfdump 1.6 layout: rewrite the file with nfdump 1.7 (`nfdump -r FILE -w NEWFILE`)", blockNo, rtype)
		}
		pos += rsize
	}
	return nil
}

// pass hands one row to fn; health counts the rows passed on (resolved, time-corrected).
func (r *reader) pass(f *Flow, fn func(*Flow) error) error {
	if fn != nil {
		if err := fn(f); err != nil {
			return err
		}
	}
	if !f.Dropped {
		r.health.flow(f)
	}
	return nil
}

func (r *reader) exporter(rec []byte) {
	e := &Exporter{Version: binary.LittleEndian.Uint32(rec[4:]), SysID: binary.LittleEndian.Uint16(rec[26:]),
		Domain: binary.LittleEndian.Uint32(rec[28:])}
	family := binary.LittleEndian.Uint16(rec[24:])
	// ip is two host-order u64 (high, low); IPv4 sits in the low 32 bits of the second.
	hi := binary.LittleEndian.Uint64(rec[8:])
	lo := binary.LittleEndian.Uint64(rec[16:])
	if family == 10 || (family != 2 && hi != 0) {
		var a [16]byte
		binary.BigEndian.PutUint64(a[0:], hi)
		binary.BigEndian.PutUint64(a[8:], lo)
		e.addrRaw = a[:]
		e.Addr = string(appendIPv6(nil, &a))
	} else {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], uint32(lo))
		e.addrRaw = a[:]
		e.Addr = string(appendIPv4(nil, a[:]))
	}
	r.exporters[e.SysID] = e
	r.lastExp = nil
}

// addSampler keeps one entry per sampler id: a later record (a rate changed mid-file)
// replaces the earlier one for the flows that follow it.
func (r *reader) addSampler(sys uint16, s sampler) {
	for i := range r.samplers[sys] {
		if r.samplers[sys][i].id == s.id {
			r.samplers[sys][i] = s
			return
		}
	}
	r.samplers[sys] = append(r.samplers[sys], s)
}

// samplingRate picks the sampler that applies to a sampled flow: the one the flow
// names, else the exporter's default (negative id), else the exporter's only one.
// The id says why nfcapd applied it: >= 0 or -1 (generic, v5) announced by the router,
// -2/-3 nfcapd's own -s default/overwrite.
func (r *reader) samplingRate(sysid uint16, selector int64, hasSelector bool) (uint32, int64) {
	list := r.samplers[sysid]
	if len(list) == 0 {
		return 1, 0
	}
	if hasSelector {
		for _, s := range list {
			if s.id == selector {
				return s.interval, s.id
			}
		}
	}
	for _, s := range list {
		if s.id < 0 {
			return s.interval, s.id
		}
	}
	return list[0].interval, list[0].id
}

// exporterFor returns the exporter info for a sysid; one without an info record has
// an empty address (the flow's exporter field is then ""). The last one is kept: flows
// of one exporter come in runs (a map lookup per flow was 4 % of the importer's CPU).
func (r *reader) exporterFor(sysid uint16) *Exporter {
	if r.lastExp == nil || r.lastSys != sysid {
		r.lastSys, r.lastExp = sysid, r.lookupExporter(sysid)
	}
	return r.lastExp
}

func (r *reader) lookupExporter(sysid uint16) *Exporter {
	if e, ok := r.exporters[sysid]; ok {
		return e
	}
	if e, ok := r.unknown[sysid]; ok {
		return e
	}
	if r.unknown == nil {
		r.unknown = map[uint16]*Exporter{}
	}
	e := &Exporter{SysID: sysid}
	r.unknown[sysid] = e
	return e
}

func (r *reader) v3(rec []byte, f *Flow, blockOff int64, blockNo uint32) error {
	if len(rec) < 12 {
		return r.corrupt(blockOff, "block %d: V3 record of %d bytes, shorter than its header", blockNo, len(rec))
	}
	*f = Flow{}
	numElements := int(binary.LittleEndian.Uint16(rec[4:]))
	sysid := binary.LittleEndian.Uint16(rec[8:])
	flags := rec[10]
	f.NfVersion = rec[11]
	var received []byte
	var selector int64
	hasSelector := false
	pos := 12
	for e := 0; e < numElements; e++ {
		if len(rec)-pos < 4 {
			return r.corrupt(blockOff, "block %d: flow %d: element %d of %d starts past the record's end", blockNo, r.seq, e+1, numElements)
		}
		etype := binary.LittleEndian.Uint16(rec[pos:])
		elen := int(binary.LittleEndian.Uint16(rec[pos+2:]))
		if elen < 4 || elen > len(rec)-pos {
			return r.corrupt(blockOff, "block %d: flow %d: element %d (type %d) has length %d, %d bytes left in the record", blockNo, r.seq, e+1, etype, elen, len(rec)-pos)
		}
		el := rec[pos+4 : pos+elen]
		f.Layout |= 1 << min(etype, 63)
		need := 0
		switch etype {
		case exGenericFlow:
			need = 48
		case exIPv4Flow:
			need = 8
		case exIPv6Flow:
			need = 32
		case exASRouting, exVlan, exVRF, exNSELXlate4:
			need = 8
		case exFlowMisc:
			need = 8 // interfaces; masks, dir and biFlowDir when the element has them (16 bytes)
		case exIPRecvV4, exIPNextV4, exBGPNextV4, exNSELXlatePt:
			need = 4
		case exIPRecvV6, exIPNextV6, exBGPNextV6:
			need = 16
		case exSamplerInfo:
			need = 8
		case exCntFlow:
			need = 24
		case exMPLS:
			need = 4 * mplsLabels
		case exMAC:
			need = 32
		case exNSELXlate6:
			need = 32
		case exNELCommon:
			need = 13
		}
		if len(el) < need {
			return r.corrupt(blockOff, "block %d: flow %d: element type %d has %d bytes (want %d)", blockNo, r.seq, etype, len(el), need)
		}
		switch etype {
		case exGenericFlow:
			f.TimeStart = int64(binary.LittleEndian.Uint64(el[0:]))
			f.TimeEnd = int64(binary.LittleEndian.Uint64(el[8:]))
			f.Received = int64(binary.LittleEndian.Uint64(el[16:]))
			f.Packets = binary.LittleEndian.Uint64(el[24:])
			f.Bytes = binary.LittleEndian.Uint64(el[32:])
			f.SrcPort = binary.LittleEndian.Uint16(el[40:])
			f.DstPort = binary.LittleEndian.Uint16(el[42:])
			f.Proto = el[44]
			f.TCPFlags = el[45]
			f.FwdStatus = el[46]
			f.Tos = el[47]
		case exIPv4Flow:
			copy(f.SrcAddr[:4], []byte{el[3], el[2], el[1], el[0]})
			copy(f.DstAddr[:4], []byte{el[7], el[6], el[5], el[4]})
		case exIPv6Flow:
			f.V6 = true
			binary.BigEndian.PutUint64(f.SrcAddr[0:], binary.LittleEndian.Uint64(el[0:]))
			binary.BigEndian.PutUint64(f.SrcAddr[8:], binary.LittleEndian.Uint64(el[8:]))
			binary.BigEndian.PutUint64(f.DstAddr[0:], binary.LittleEndian.Uint64(el[16:]))
			binary.BigEndian.PutUint64(f.DstAddr[8:], binary.LittleEndian.Uint64(el[24:]))
		case exFlowMisc:
			f.InputIf = binary.LittleEndian.Uint32(el[0:])
			f.OutputIf = binary.LittleEndian.Uint32(el[4:])
			if len(el) >= 13 {
				f.SrcMask, f.DstMask, f.FlowDir, f.BiFlowDir = el[8], el[9], el[10], el[12]
			}
		case exCntFlow:
			f.OutPackets = binary.LittleEndian.Uint64(el[8:])
			f.OutBytes = binary.LittleEndian.Uint64(el[16:])
		case exIPNextV4:
			putIPv4(&f.NextHop, el)
		case exIPNextV6:
			putIPv6(&f.NextHop, el)
			f.NextHopV6 = true
		case exBGPNextV4:
			putIPv4(&f.BGPNextHop, el)
		case exBGPNextV6:
			putIPv6(&f.BGPNextHop, el)
			f.BGPNextHopV6 = true
		case exMPLS:
			// top of stack first; the stack ends at the label with the bottom-of-stack bit
			// or at an empty slot (nfcapd leaves labels the record did not carry zero)
			for k := 0; k < mplsLabels; k++ {
				v := binary.LittleEndian.Uint32(el[4*k:])
				if v == 0 {
					break
				}
				f.MPLS[f.NMPLS] = v >> 4
				f.NMPLS++
				if v&1 != 0 {
					break
				}
			}
		case exMAC:
			// src_mac: the ingress source MAC (IE 56), else the egress one (81); dst_mac: the
			// ingress destination MAC (80), else the egress one (57): Cisco-style v9 exports
			// only IN_SRC_MAC 56 and OUT_DST_MAC 57 (docs/guide/flow-record.md)
			f.SrcMAC = binary.LittleEndian.Uint64(el[0:]) & 0xFFFFFFFFFFFF
			if f.SrcMAC == 0 {
				f.SrcMAC = binary.LittleEndian.Uint64(el[24:]) & 0xFFFFFFFFFFFF
			}
			f.DstMAC = binary.LittleEndian.Uint64(el[16:]) & 0xFFFFFFFFFFFF
			if f.DstMAC == 0 {
				f.DstMAC = binary.LittleEndian.Uint64(el[8:]) & 0xFFFFFFFFFFFF
			}
		case exVRF:
			f.HasVRF = true
			f.EgressVRF = binary.LittleEndian.Uint32(el[0:])
			f.IngressVRF = binary.LittleEndian.Uint32(el[4:])
		case exNSELXlate4:
			putIPv4(&f.SrcNAT, el[0:])
			putIPv4(&f.DstNAT, el[4:])
		case exNSELXlate6:
			putIPv6(&f.SrcNAT, el[0:])
			putIPv6(&f.DstNAT, el[16:])
			f.NATV6 = true
		case exNSELXlatePt:
			f.SrcPortNAT = binary.LittleEndian.Uint16(el[0:])
			f.DstPortNAT = binary.LittleEndian.Uint16(el[2:])
		case exNELCommon:
			if len(el) >= 24 { // the earlier 1.7 layout with the VRFs inside (EXnelCommonCompat)
				f.HasVRF = true
				f.EgressVRF = binary.LittleEndian.Uint32(el[8:])
				f.IngressVRF = binary.LittleEndian.Uint32(el[12:])
				f.NATEvent = el[20]
			} else {
				f.NATEvent = el[12]
			}
		case exASRouting:
			f.SrcAS = binary.LittleEndian.Uint32(el[0:])
			f.DstAS = binary.LittleEndian.Uint32(el[4:])
		case exVlan:
			f.SrcVlan = binary.LittleEndian.Uint32(el[0:])
			f.DstVlan = binary.LittleEndian.Uint32(el[4:])
		case exIPRecvV4, exIPRecvV6:
			received = el
		case exSamplerInfo:
			selector = int64(binary.LittleEndian.Uint64(el[0:]))
			hasSelector = true
		}
		pos += elen
	}
	f.Exporter = r.exporterFor(sysid)
	if f.Exporter.Addr == "" && received != nil {
		f.Exporter = r.receivedExporter(sysid, received)
	}
	f.SamplingRate = 1
	if flags&v3FlagSampled != 0 {
		var id int64
		f.SamplingRate, id = r.samplingRate(sysid, selector, hasSelector)
		f.NfcapdSetting = id <= samplerNfcapdDefault
	}
	if f.NfVersion&nfVersionSFlow != 0 {
		f.sflowFixup()
	}
	return nil
}

// sfcapd (nfdump's sFlow collector, 1.7.1) marks its records with nfversion 0x80|5 (sFlow
// v5) and stores each flow sample as one record: packets = the sample's own sampling rate
// (one sampled packet scaled by it), bytes = rate x the sampled frame_length. Its sampler
// record holds only the agent's first rate, so the record's own packets are its rate.
const nfVersionSFlow = 0x80

// Layer-2 overhead in an sFlow frame_length (sFlow v5: for a layer-2 header_protocol,
// "total number of octets received on the network ... including FCS octets").
const (
	ethHeaderLen = 14 // destination MAC, source MAC, EtherType
	vlanTagLen   = 4  // one 802.1Q tag
	ethFCSLen    = 4
)

// sflowFixup brings an sfcapd record to what flowlake's columns mean:
//   - bytes at layer 3: sfcapd stores frame_length (Ethernet header, 802.1Q tag, FCS
//     included). It decodes MAC addresses (and the tag's VLAN) only from an Ethernet
//     sampled header, so a record with a MAC address had one: per packet subtract the
//     Ethernet header and FCS, and 4 more for an 802.1Q tag. A record without MACs
//     came from an IP header_protocol sample, whose frame_length is the IP packet already.
//     (A tag is subtracted only where the record's VLAN must be the header's: see below.)
//   - ICMP: sfcapd stores the type in src_port and the code in dst_port; flowlake keeps
//     dst_port = type*256+code with src_port 0, as for NetFlow (icmp_type/icmp_code follow).
func (f *Flow) sflowFixup() {
	if f.Packets > 0 {
		f.SFlowFrame = f.Bytes / f.Packets // the tap's corrections are keyed by it (gaps.go completeSFlow)
	}
	if f.Packets > 0 && f.Packets <= math.MaxUint32 {
		f.SamplingRate = uint32(f.Packets) // as applied: the resolver takes wire counts 1 packet, 1 frame
		f.NfcapdSetting = false
	}
	if f.Proto == 1 {
		f.DstPort = f.SrcPort<<8 | f.DstPort&0xff
		f.SrcPort = 0
	}
	if f.Bytes == 0 && f.SrcAddr == ([16]byte{}) && f.DstAddr == ([16]byte{}) {
		// a flow sample whose records sfcapd could not decode (an unknown record format, no
		// sampled header): it still writes a record, 0.0.0.0 -> 0.0.0.0, 0 bytes
		f.Reject = "sFlow flow sample without a sampled header sfcapd decoded (no addresses, 0 bytes)"
		return
	}
	if (f.SrcMAC == 0 && f.DstMAC == 0) || f.Packets == 0 {
		return
	}
	over := uint64(ethHeaderLen + ethFCSLen)
	if f.SrcVlan != 0 && f.DstVlan == 0 {
		// the VLAN can only have come from a tag in the sampled header. With a dst_vlan the
		// agent sent extended switch data, whose src_vlan sfcapd stores over the tag's:
		// the frame may or may not carry a tag (access port), so none is subtracted.
		over += vlanTagLen
	}
	// a frame no longer than its own layer-2 overhead is not Ethernet as described: leave it
	if f.Bytes > f.Packets*over {
		f.Bytes -= f.Packets * over
		f.L2Corrected = true
	}
}

// putIPv4 stores nfcapd's little-endian IPv4 word as the address's 4 bytes.
func putIPv4(a *[16]byte, el []byte) {
	a[0], a[1], a[2], a[3] = el[3], el[2], el[1], el[0]
}

// putIPv6 stores nfcapd's two little-endian words as the address's 16 bytes.
func putIPv6(a *[16]byte, el []byte) {
	binary.BigEndian.PutUint64(a[0:], binary.LittleEndian.Uint64(el[0:]))
	binary.BigEndian.PutUint64(a[8:], binary.LittleEndian.Uint64(el[8:]))
}

// has reports whether the record carried an element of this type.
func (f *Flow) has(etype uint16) bool { return f.Layout&(1<<min(etype, 63)) != 0 }

// Biflow reports whether the record is a biflow: reverse (out) counters above zero
// (RFC 5103 style, softflowd -b; nfcapd 1.7.1 stores v9/IPFIX OUT_PKTS/OUT_BYTES there).
func (f *Flow) Biflow() bool { return f.OutPackets > 0 || f.OutBytes > 0 }

// reverse makes rev the reverse half of biflow f (f as read, before resolving): the
// reverse direction's addresses, ports, interfaces, MACs, masks, ASes and VLANs swapped,
// packets and bytes from the out counters (nfcapd scaled them as it scaled the in
// counters, so resolving rev applies the same sampling). Its file_seq is -(f.Seq+1):
// (source_file, file_seq) stays unique per lake row, the initiator keeps its record's
// position and the pair is told apart by the sign (docs/guide/flow-record.md).
func (f *Flow) reverse(rev *Flow) {
	*rev = *f
	rev.SrcAddr, rev.DstAddr = f.DstAddr, f.SrcAddr
	rev.SrcPort, rev.DstPort = f.DstPort, f.SrcPort
	rev.InputIf, rev.OutputIf = f.OutputIf, f.InputIf
	rev.SrcMAC, rev.DstMAC = f.DstMAC, f.SrcMAC
	rev.SrcMask, rev.DstMask = f.DstMask, f.SrcMask
	rev.SrcAS, rev.DstAS = f.DstAS, f.SrcAS
	rev.SrcVlan, rev.DstVlan = f.DstVlan, f.SrcVlan
	rev.Packets, rev.Bytes = f.OutPackets, f.OutBytes
	rev.OutPackets, rev.OutBytes = 0, 0
	if f.HasRevTCPFlags {
		rev.TCPFlags = f.RevTCPFlags
	}
	rev.BiflowHalf = 2
	rev.Seq = -(f.Seq + 1)
}

// receivedExporter names an exporter without an info record by the address nfcapd
// received its packets from (the EXipReceived element).
func (r *reader) receivedExporter(sysid uint16, el []byte) *Exporter {
	e := &Exporter{SysID: sysid}
	if len(el) >= 16 {
		var a [16]byte
		binary.BigEndian.PutUint64(a[0:], binary.LittleEndian.Uint64(el[0:]))
		binary.BigEndian.PutUint64(a[8:], binary.LittleEndian.Uint64(el[8:]))
		e.addrRaw, e.Addr = a[:], string(appendIPv6(nil, &a))
	} else {
		a := []byte{el[3], el[2], el[1], el[0]}
		e.addrRaw, e.Addr = a, string(appendIPv4(nil, a))
	}
	r.exporters[sysid] = e
	r.lastExp = nil
	return e
}
