// Discarded packet samples (sFlow v5 format 0:5, drop notifications) as flows (issue 35).
//
// sfcapd 1.7.1 skips these samples. The sFlow tap writes each one as one flow record into
// nfcapd files of its own in the spool (SPOOL/sflow-drops/, `--drops-dir`), in the layout
// sfcapd gives its flow samples' records: nfdump 1.7 files (LAYOUT_VERSION_2, uncompressed
// blocks, V3 records marked sFlow v5, exporter info records naming the agent address with
// the sub-agent id as observation domain). The shipper therefore ships them exactly once
// as it ships nfcapd's and sfcapd's files (ledger key `sflow-drops/nfcapd.YYYYMMDDhhmmss`,
// the file's flows and ledger record in one Kafka transaction), makes the same columns of
// them (nffile.go sflowFixup: bytes at layer 3), and the spool's retention deletes them
// once they are in the lake (pipelines/retention/spool.py).
//
// A record: the agent as exporter, the sampled header's addresses, ports, protocol, ToS,
// TCP flags, MAC addresses and first 802.1Q/802.1ad VLAN id; 1 packet of frame_length
// bytes (the drop sample carries no sampling rate: each notification is one dropped packet,
// so the rate is 1, applied as sfcapd applies a flow sample's); the sample's input
// ifIndex, output 0 and forwarding_status 128 + the mapped reason (sflowDiscardStatus);
// time start = end = when the tap received the datagram.
//
// The current file is nfcapd.current.PID, one block appended per flush (every second, a
// block of at most dropBlockBytes); it is closed (block count in the header) and renamed
// to nfcapd.YYYYMMDDhhmmss (its opening time, UTC) after --drops-rotate and when the tap
// stops. A killed tap leaves nfcapd.current.PID: the next tap (or nfcapd's and sfcapd's
// start, collectors/nfcapd.py recover_orphans) renames it nfcapd.STAMP.recoveredPID, which
// the reader reads up to its last complete block. Records of the last second before a kill
// are lost, as sfcapd's own unwritten buffer would be; none is ever written twice.
package main

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const (
	dropBlockBytes   = 1 << 20 // a block is written when its records reach this size
	sfcapdExpVersion = 9999    // what sfcapd 1.7.1 writes as an sFlow exporter's version
	nfVersionSFlow5  = nfVersionSFlow | 5
)

// dropWriter appends drop records to the current file of --drops-dir.
type dropWriter struct {
	dir    string
	rotate time.Duration
	pid    int
	f      *os.File
	opened time.Time
	blocks uint32
	buf    []byte            // records of the next block
	nrec   uint32            // records in buf
	sysids map[string]uint16 // "agent/sub-agent" -> exporter sysid in the current file
}

func newDropWriter(dir string, rotate time.Duration) (*dropWriter, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	w := &dropWriter{dir: dir, rotate: rotate, pid: os.Getpid()}
	w.recover()
	return w, nil
}

// recover renames the current files of taps that are gone, as nfcapd.py recover_orphans does.
func (w *dropWriter) recover() {
	files, _ := filepath.Glob(filepath.Join(w.dir, "nfcapd.current.*"))
	for _, f := range files {
		pid := strings.TrimPrefix(filepath.Base(f), "nfcapd.current.")
		if n, err := strconv.Atoi(pid); err != nil || n == w.pid {
			continue
		} else if _, err := os.Stat(fmt.Sprintf("/proc/%d", n)); err == nil {
			continue // a live process owns it
		}
		info, err := os.Stat(f)
		if err != nil {
			continue
		}
		_ = os.Rename(f, filepath.Join(w.dir, "nfcapd."+info.ModTime().UTC().Format("20060102150405")+".recovered"+pid))
	}
}

// sampledPacket is what a raw packet header record says of one packet.
type sampledPacket struct {
	parsedFrame
	srcMAC, dstMAC uint64
	vlan           uint32
	tos, flags     uint8
}

// parseSampledPacket reads a raw packet header record's header (header_protocol 1
// Ethernet, 11 IPv4, 12 IPv6): parseFrame's fields, the MACs and first VLAN tag of an
// Ethernet header, the IP ToS (traffic class) and TCP flags.
func parseSampledPacket(proto uint32, h []byte) (sampledPacket, bool) {
	var s sampledPacket
	p, ok := parseSampledHeader(proto, h)
	if !ok {
		return s, false
	}
	s.parsedFrame = p
	ip := h
	if proto == 1 {
		mac := func(b []byte) uint64 {
			return uint64(b[0])<<40 | uint64(b[1])<<32 | uint64(b[2])<<24 | uint64(b[3])<<16 | uint64(b[4])<<8 | uint64(b[5])
		}
		s.dstMAC, s.srcMAC = mac(h[0:6]), mac(h[6:12])
		pos := 14
		for et := binary.BigEndian.Uint16(h[12:]); et == 0x8100 || et == 0x88A8; et = binary.BigEndian.Uint16(h[pos-2:]) {
			if s.vlan == 0 {
				s.vlan = uint32(binary.BigEndian.Uint16(h[pos:]) & 0x0fff)
			}
			pos += 4
		}
		ip = h[pos:]
	}
	l4 := 40
	if p.v6 {
		s.tos = ip[0]<<4 | ip[1]>>4
	} else {
		s.tos, l4 = ip[1], int(ip[0]&0xF)*4
	}
	if p.proto == 6 && len(ip) >= l4+14 {
		s.flags = ip[l4+13]
	}
	return s, true
}

// sflowDropSample reads one discarded packet sample (0:5) of agent a and, when its sampled
// header can be read, writes its record. Returns a reason when the sample cannot become a
// row (counted per agent; the datagram's other samples are read on).
//
//	sequence u32 · source id type, index u32 · drops u32 · input u32 · output u32 ·
//	reason u32 · flow records <> (as a flow sample's)
func (st *SFlowTapState) sflowDropSample(a *SFlowAgent, iv *sflowInterval, body []byte, now time.Time) string {
	be := binary.BigEndian
	if len(body) < 28 {
		return "discarded packet sample too short"
	}
	input, reason := be.Uint32(body[16:]), be.Uint32(body[24:])
	a.discard(iv, reason)
	a.DropNotesLost += uint64(be.Uint32(body[12:]))
	if len(body) < 32 {
		return "discarded packet sample without a raw packet header record"
	}
	n := be.Uint32(body[28:])
	off := 32
	var pkt sampledPacket
	var frameLen uint32
	found := false
	for i := uint32(0); i < n && !found; i++ {
		if len(body) < off+8 {
			return "discarded packet sample: flow record longer than its sample"
		}
		rf, rl := be.Uint32(body[off:]), int(be.Uint32(body[off+4:]))
		off += 8
		if rl < 0 || len(body) < off+rl {
			return "discarded packet sample: flow record longer than its sample"
		}
		rec := body[off : off+rl]
		off += rl
		if rf != 1 {
			continue // extended data, a function name, ...: not the packet
		}
		if len(rec) < 16 {
			return "discarded packet sample: raw packet header record too short"
		}
		proto, hl := be.Uint32(rec), int(be.Uint32(rec[12:]))
		if hl < 0 || len(rec) < 16+hl {
			return "discarded packet sample: raw packet header record too short"
		}
		var ok bool
		if pkt, ok = parseSampledPacket(proto, rec[16:16+hl]); !ok {
			return "discarded packet sample: sampled header is not Ethernet, IPv4 or IPv6 flowlake can read"
		}
		frameLen, found = be.Uint32(rec[4:]), true
	}
	if !found {
		return "discarded packet sample without a raw packet header record"
	}
	if st.drops == nil {
		a.DropsUnwritten++
		return ""
	}
	agent, err := netip.ParseAddr(a.Agent)
	if err != nil {
		return "discarded packet sample: agent address unreadable"
	}
	if err := st.drops.add(agent, a.SubAgent, &pkt, input, frameLen, uint8(sflowDiscardStatus(reason)), now); err != nil {
		a.DropsUnwritten++
		return ""
	}
	a.DropRecords++
	return ""
}

// add appends one record (and the agent's exporter record, first in each file).
func (w *dropWriter) add(agent netip.Addr, sub uint32, p *sampledPacket, input, frameLen uint32, fwd uint8, now time.Time) error {
	le := binary.LittleEndian
	key := fmt.Sprintf("%s/%d", agent, sub)
	if w.sysids == nil {
		w.sysids = map[string]uint16{}
	}
	sys, ok := w.sysids[key]
	if !ok {
		sys = uint16(len(w.sysids) + 1)
		w.sysids[key] = sys
		var e [32]byte
		le.PutUint16(e[0:], recExporterInfo)
		le.PutUint16(e[2:], 32)
		le.PutUint32(e[4:], sfcapdExpVersion)
		if agent.Is4() {
			a := agent.As4()
			le.PutUint64(e[16:], uint64(binary.BigEndian.Uint32(a[:])))
			le.PutUint16(e[24:], 2)
		} else {
			a := agent.As16()
			le.PutUint64(e[8:], binary.BigEndian.Uint64(a[0:]))
			le.PutUint64(e[16:], binary.BigEndian.Uint64(a[8:]))
			le.PutUint16(e[24:], 10)
		}
		le.PutUint16(e[26:], sys)
		le.PutUint32(e[28:], sub)
		w.buf = append(w.buf, e[:]...)
		w.nrec++
	}
	ipLen := 12
	if p.v6 {
		ipLen = 36
	}
	elements := 3
	size := 12 + 52 + ipLen + 20
	if p.srcMAC != 0 || p.dstMAC != 0 {
		elements++
		size += 36
	}
	if p.vlan != 0 {
		elements++
		size += 12
	}
	start := len(w.buf)
	w.buf = append(w.buf, make([]byte, size)...)
	r := w.buf[start:]
	le.PutUint16(r[0:], recV3)
	le.PutUint16(r[2:], uint16(size))
	le.PutUint16(r[4:], uint16(elements))
	le.PutUint16(r[8:], sys)
	r[11] = nfVersionSFlow5
	pos := 12
	el := func(etype uint16, n int) []byte {
		le.PutUint16(r[pos:], etype)
		le.PutUint16(r[pos+2:], uint16(n))
		b := r[pos+4 : pos+n]
		pos += n
		return b
	}
	ms := uint64(now.UnixMilli())
	sport, dport := p.sport, p.dport
	if p.proto == 1 { // sfcapd's way: the type in src_port, the code in dst_port (sflowFixup undoes it)
		sport, dport = p.dport>>8, p.dport&0xff
	}
	g := el(exGenericFlow, 52)
	le.PutUint64(g[0:], ms)
	le.PutUint64(g[8:], ms)
	le.PutUint64(g[16:], ms)
	le.PutUint64(g[24:], 1)
	le.PutUint64(g[32:], uint64(frameLen))
	le.PutUint16(g[40:], sport)
	le.PutUint16(g[42:], dport)
	g[44], g[45], g[46], g[47] = p.proto, p.flags, fwd, p.tos
	if p.v6 {
		b := el(exIPv6Flow, 36)
		le.PutUint64(b[0:], binary.BigEndian.Uint64(p.src[0:]))
		le.PutUint64(b[8:], binary.BigEndian.Uint64(p.src[8:]))
		le.PutUint64(b[16:], binary.BigEndian.Uint64(p.dst[0:]))
		le.PutUint64(b[24:], binary.BigEndian.Uint64(p.dst[8:]))
	} else {
		b := el(exIPv4Flow, 12)
		le.PutUint32(b[0:], binary.BigEndian.Uint32(p.src[12:]))
		le.PutUint32(b[4:], binary.BigEndian.Uint32(p.dst[12:]))
	}
	m := el(exFlowMisc, 20)
	le.PutUint32(m[0:], input) // output 0: the packet went nowhere
	if p.srcMAC != 0 || p.dstMAC != 0 {
		b := el(exMAC, 36)
		le.PutUint64(b[0:], p.srcMAC)  // inSrcMac
		le.PutUint64(b[16:], p.dstMAC) // inDstMac
	}
	if p.vlan != 0 {
		b := el(exVlan, 12)
		le.PutUint32(b[0:], p.vlan)
	}
	w.nrec++
	if len(w.buf) >= dropBlockBytes {
		return w.flush(now)
	}
	return nil
}

// flush writes the pending records as one block of the current file (opening it first),
// then closes the file once it is --drops-rotate old.
func (w *dropWriter) flush(now time.Time) error {
	if w.nrec > 0 {
		if w.f == nil {
			f, err := os.OpenFile(filepath.Join(w.dir, fmt.Sprintf("nfcapd.current.%d", w.pid)), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			var h [fileHeaderSize]byte
			le := binary.LittleEndian
			le.PutUint16(h[0:], nfMagic)
			le.PutUint16(h[2:], layoutV2)
			le.PutUint32(h[4:], 0xF1070100) // nfdump 1.7.1's NFDVERSION
			le.PutUint64(h[8:], uint64(now.Unix()))
			if _, err := f.Write(h[:]); err != nil {
				f.Close()
				return err
			}
			w.f, w.opened, w.blocks = f, now, 0
		}
		blk := make([]byte, blockHeaderLen, blockHeaderLen+len(w.buf))
		binary.LittleEndian.PutUint32(blk[0:], w.nrec)
		binary.LittleEndian.PutUint32(blk[4:], uint32(len(w.buf)))
		binary.LittleEndian.PutUint16(blk[8:], blockType3)
		if _, err := w.f.Write(append(blk, w.buf...)); err != nil {
			return err // the records stay in buf: written with the next block
		}
		w.blocks++
		w.buf, w.nrec = w.buf[:0], 0
	}
	if w.f != nil && now.Sub(w.opened) >= w.rotate {
		return w.close()
	}
	return nil
}

// close writes the block count into the header and renames the file to its closed name.
func (w *dropWriter) close() error {
	if w.f == nil {
		return nil
	}
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], w.blocks)
	_, err := w.f.WriteAt(n[:], 36)
	if err == nil {
		err = w.f.Sync()
	}
	cur := w.f.Name()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.f, w.sysids = nil, nil
	if err != nil {
		return err
	}
	for t := w.opened.UTC(); ; t = t.Add(time.Second) { // a restarted tap may open a file in the same second
		name := filepath.Join(w.dir, "nfcapd."+t.Format("20060102150405"))
		if _, err := os.Stat(name); os.IsNotExist(err) {
			return os.Rename(cur, name)
		}
	}
}
