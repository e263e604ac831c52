// What nfcapd 1.7.1 cannot decode, decoded by flowlake (issue 32 part 2, docs/design/nfcapd-gaps.md).
//
// The tap (tap.go) marks templates in forms nfcapd stores incompletely (gapsOf) and, per
// record of such a template, writes a correction to DIR/fix/YYYYMMDDhhmm.bin keyed by the
// fingerprint of what nfcapd stores of that record. The shipper (Resolver.Complete, called
// by the file reader before biflow expansion, sampling and time checks) looks a record up
// only when it shows the symptom and its exporter is one the tap saw sending that form.
// nfcapd's files stay the spool of record: nothing is shipped that nfcapd did not write,
// except the reverse half of a record whose RFC 5103 elements nfcapd dropped (keyed
// -(file_seq+1), as nfcapd's own biflows are).
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"time"
)

const (
	ieStartMicro, ieEndMicro = 154, 155 // flowStart/EndMicroseconds (dateTimeMicroseconds, NTP 32.32)
	ieObsTimeMs              = 323      // observationTimeMilliseconds
	ieDataLinkFrame          = 315      // dataLinkFrameSection
	iePhysIn, iePhysOut      = 252, 253 // ingress/egressPhysicalInterface
	penReverse               = 29305    // RFC 5103 reverse information elements
	ntpEpochOffset           = 2208988800
)

// gap forms of a template
const (
	gapMicro   uint16 = 1 << iota // timed only by 154/155
	gapObsTime                    // timed only by 323
	gapICMP                       // ICMP type*256+code in L4_DST_PORT (no 32/139)
	gapFrame                      // addresses only in a packet section 315
	gapReverse                    // RFC 5103 reverse elements
	gapPhysIf                     // interfaces only as ingress/egressPhysicalInterface 252/253
)

// what a correction carries
const (
	fixTimes   uint16 = 1 << iota // from 154/155
	fixObsTime                    // from 323
	fixICMP
	fixAddr
	fixReverse // reverse counters (nfcapd lost them)
	fixForward // the forward tcp flags and times, which nfcapd overwrites with reverse elements
	fixRevFlags
	fixIf       // input/output interface from 252/253
	fixSFlowOut // sFlow: the output interface and forwarding status of a discard or multiple-output code
)

// Names of what was completed (status) and of the reasons a record was not.
const (
	doneMicro   = "times from flowStart/EndMicroseconds 154/155"
	doneObs     = "time from observationTimeMilliseconds 323"
	doneICMP    = "ICMP type/code from the destination port"
	doneFrame   = "addresses from packet section 315"
	doneReverse = "reverse elements (RFC 5103)"
	donePhysIf  = "interfaces from physical interfaces 252/253"
	doneDiscard = "forwarding status from an sFlow discard code"
	doneMulti   = "output interface from an sFlow multiple-interfaces code"
	whyFrame    = "packet section is not a parseable frame"
	whyReverse  = "truncated reverse element"
	whyNATAddr  = "NAT event without addresses"
	whyNoFix    = "no record of it from the tap"
)

// gapsOf: the forms of a data template nfcapd 1.7.1 stores incompletely.
func gapsOf(tm *ttemplate) uint16 {
	has := map[uint16]bool{}
	var g uint16
	for _, f := range tm.fields {
		if f.enterprise {
			if f.pen == penReverse {
				g |= gapReverse
			}
			continue
		}
		has[f.id] = true
	}
	otherTimes := has[21] || has[22] || has[150] || has[151] || has[152] || has[153] || has[156] || has[157]
	if (has[ieStartMicro] || has[ieEndMicro]) && !otherTimes {
		g |= gapMicro
	}
	if has[ieObsTimeMs] && !otherTimes && !has[ieStartMicro] && !has[ieEndMicro] {
		g |= gapObsTime
	}
	if has[ieDstPort] && has[ieProto] && !has[32] && !has[139] {
		g |= gapICMP
	}
	if (has[iePhysIn] || has[iePhysOut]) && !has[ieInIf] && !has[ieOutIf] {
		g |= gapPhysIf
	}
	if has[ieDataLinkFrame] && !has[ieSrcV4] && !has[ieDstV4] && !has[ieSrcV6] && !has[ieDstV6] {
		g |= gapFrame
	}
	return g
}

// gapvals: the values of a record nfcapd cannot decode.
type gapvals struct {
	startNTP, endNTP, obsMs uint64
	frame                   []byte // points into the datagram: used before the next read
	revPackets, revBytes    uint64
	revSeen, revTruncated   bool
	// forward values nfcapd 1.7.1 overwrites with a reverse element of the same id
	// (it ignores the enterprise number of reverseTcpControlBits, reverseFlowStart..., measured)
	startMs, endMs    uint64
	flags, revFlags   uint8
	hasFlags, hasRevF bool
	physIn, physOut   uint32
}

func beUint(b []byte) uint64 {
	var x uint64
	for _, c := range b {
		x = x<<8 | uint64(c)
	}
	return x
}

func (g *gapvals) element(id uint16, val []byte) {
	switch id {
	case ieStartMicro:
		if len(val) == 8 {
			g.startNTP = binary.BigEndian.Uint64(val)
		}
	case ieEndMicro:
		if len(val) == 8 {
			g.endNTP = binary.BigEndian.Uint64(val)
		}
	case ieObsTimeMs:
		if len(val) <= 8 {
			g.obsMs = beUint(val)
		}
	case ieDataLinkFrame:
		g.frame = val
	case iePhysIn:
		g.physIn = uint32(beUint(val))
	case iePhysOut:
		g.physOut = uint32(beUint(val))
	case 152:
		g.startMs = beUint(val)
	case 153:
		g.endMs = beUint(val)
	case 6:
		if len(val) >= 1 {
			g.flags, g.hasFlags = val[len(val)-1], true
		}
	}
}

// reverse reads reverseOctetDeltaCount (1) and reversePacketDeltaCount (2) and their
// total-count forms (85, 86); l is the element's length on the wire (0: truncated).
func (g *gapvals) reverse(id uint16, val []byte, l int) {
	if id == 6 && l >= 1 && l <= 2 { // reverseTcpControlBits
		g.revFlags, g.hasRevF = val[l-1], true
		return
	}
	if id != ieBytes && id != iePackets && id != ieBytesTotal && id != iePktsTotal {
		return
	}
	g.revSeen = true
	if l == 0 || l > 8 {
		g.revTruncated = true
		return
	}
	if id == ieBytes || id == ieBytesTotal {
		g.revBytes = beUint(val)
	} else {
		g.revPackets = beUint(val)
	}
}

// ntpMs: IPFIX dateTimeMicroseconds (seconds since 1900, 32-bit fraction) as epoch ms.
func ntpMs(x uint64) int64 {
	secs := int64(x>>32) - ntpEpochOffset
	return secs*1000 + int64(((x&0xFFFFFFFF)*1000)>>32)
}

// parsedFrame: what a packet section gives.
type parsedFrame struct {
	src, dst     [16]byte
	v6           bool
	sport, dport uint16
	proto        uint8
}

// parseFrame reads Ethernet (with 802.1Q/802.1ad tags), IPv4 or IPv6, and the first bytes
// of TCP/UDP/SCTP (ports) or ICMP/ICMPv6 (type, code as dport type*256+code).
func parseFrame(b []byte) (parsedFrame, bool) {
	var p parsedFrame
	if len(b) < 14 {
		return p, false
	}
	et, pos := binary.BigEndian.Uint16(b[12:]), 14
	for et == 0x8100 || et == 0x88A8 {
		if len(b) < pos+4 {
			return p, false
		}
		et, pos = binary.BigEndian.Uint16(b[pos+2:]), pos+4
	}
	var l4 []byte
	switch et {
	case 0x0800:
		ip := b[pos:]
		if len(ip) < 20 || ip[0]>>4 != 4 || int(ip[0]&0xF)*4 < 20 || len(ip) < int(ip[0]&0xF)*4 {
			return p, false
		}
		copy(p.src[12:], ip[12:16])
		copy(p.dst[12:], ip[16:20])
		p.proto = ip[9]
		l4 = ip[int(ip[0]&0xF)*4:]
	case 0x86DD:
		ip := b[pos:]
		if len(ip) < 40 || ip[0]>>4 != 6 {
			return p, false
		}
		copy(p.src[:], ip[8:24])
		copy(p.dst[:], ip[24:40])
		p.proto, p.v6 = ip[6], true
		l4 = ip[40:]
	default:
		return p, false
	}
	switch p.proto {
	case 6, 17, 132:
		if len(l4) < 4 {
			return p, false
		}
		p.sport, p.dport = binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
	case 1, 58:
		if len(l4) < 2 {
			return p, false
		}
		p.dport = uint16(l4[0])<<8 | uint16(l4[1])
	}
	return p, true
}

// fixRecLen: one correction in DIR/fix/*.bin (little-endian):
//
//	0 what u16 · 2 sport u16 · 4 dport u16 · 6 proto u8 · 7 v6 u8 · 8 fingerprint u64 ·
//	16 start ms i64 · 24 end ms i64 · 32 src [16] · 48 dst [16] · 64 reverse packets u64 ·
//	72 reverse bytes u64 · 80 tcp flags u8 · 81 reverse tcp flags u8 · 82 forwarding status u8 · 83 pad [5] ·
//	88 input interface u32 · 92 output interface u32
const fixRecLen = 96

type fixRec struct {
	what         uint16
	sport, dport uint16
	proto        uint8
	v6           bool
	start, end   int64
	src, dst     [16]byte
	revP, revB   uint64
	flags, revF  uint8
	fwd          uint8 // IE 89 (fixSFlowOut)
	inIf, outIf  uint32
}

func (c *fixRec) marshal(fp uint64, b *[fixRecLen]byte) {
	*b = [fixRecLen]byte{}
	le := binary.LittleEndian
	le.PutUint16(b[0:], c.what)
	le.PutUint16(b[2:], c.sport)
	le.PutUint16(b[4:], c.dport)
	b[6] = c.proto
	if c.v6 {
		b[7] = 1
	}
	le.PutUint64(b[8:], fp)
	le.PutUint64(b[16:], uint64(c.start))
	le.PutUint64(b[24:], uint64(c.end))
	copy(b[32:], c.src[:])
	copy(b[48:], c.dst[:])
	le.PutUint64(b[64:], c.revP)
	le.PutUint64(b[72:], c.revB)
	b[80], b[81], b[82] = c.flags, c.revF, c.fwd
	le.PutUint32(b[88:], c.inIf)
	le.PutUint32(b[92:], c.outIf)
}

func unmarshalFix(b []byte) (uint64, fixRec) {
	le := binary.LittleEndian
	c := fixRec{what: le.Uint16(b[0:]), sport: le.Uint16(b[2:]), dport: le.Uint16(b[4:]), proto: b[6], v6: b[7] == 1,
		start: int64(le.Uint64(b[16:])), end: int64(le.Uint64(b[24:])), revP: le.Uint64(b[64:]), revB: le.Uint64(b[72:]),
		flags: b[80], revF: b[81], fwd: b[82], inIf: le.Uint32(b[88:]), outIf: le.Uint32(b[92:])}
	copy(c.src[:], b[32:48])
	copy(c.dst[:], b[48:64])
	return le.Uint64(b[8:]), c
}

// fixWriter appends corrections to the file of the current minute.
type fixWriter struct {
	dir    string
	sub    string // the folder under dir: "fix" (the NetFlow tap), "sflowfix" (the sFlow tap; its own, as appends of two writers would interleave)
	minute string
	w      *bufio.Writer
	f      *os.File
}

func (w *fixWriter) write(now time.Time, fp uint64, c *fixRec) error {
	minute := now.UTC().Format("200601021504")
	if minute != w.minute || w.w == nil {
		w.flush()
		if w.f != nil {
			w.f.Close()
		}
		sub := w.sub
		if sub == "" {
			sub = "fix"
		}
		f, err := os.OpenFile(filepath.Join(w.dir, sub, minute+".bin"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			w.w = nil
			return err
		}
		w.f, w.w, w.minute = f, bufio.NewWriterSize(f, 1<<16), minute
	}
	var b [fixRecLen]byte
	c.marshal(fp, &b)
	_, err := w.w.Write(b[:])
	return err
}

func (w *fixWriter) flush() {
	if w.w != nil {
		_ = w.w.Flush()
	}
}

func count(m *map[string]uint64, key string) {
	if *m == nil {
		*m = map[string]uint64{}
	}
	(*m)[key]++
}

func copyCounts(m map[string]uint64) map[string]uint64 {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]uint64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// gapRecord: the correction of one record of a gap template, keyed by the fingerprint of
// what nfcapd stores of it (the wire's own fields; zero where the record has none).
func (t *tap) gapRecord(e *texporter, tm *ttemplate, v *recvals, now time.Time) {
	var c fixRec
	g := &v.g
	n := &v.val
	proto := uint8(n[sProto])
	if tm.gap&gapMicro != 0 && (g.startNTP != 0 || g.endNTP != 0) {
		s, en := g.startNTP, g.endNTP
		if s == 0 {
			s = en
		}
		if en == 0 {
			en = s
		}
		c.what, c.start, c.end = c.what|fixTimes, ntpMs(s), ntpMs(en)
		count(&e.Decoded, doneMicro)
	}
	if tm.gap&gapObsTime != 0 && g.obsMs != 0 {
		c.what, c.start, c.end = c.what|fixObsTime, int64(g.obsMs), int64(g.obsMs)
		count(&e.Decoded, doneObs)
		if v.src == [16]byte{} && v.dst == [16]byte{} {
			count(&e.Undecodable, whyNATAddr) // its time is completed, its addresses stay 0.0.0.0
		}
	}
	if tm.gap&gapICMP != 0 && (proto == 1 || proto == 58) {
		c.what, c.dport = c.what|fixICMP, uint16(n[sDstPort])
		count(&e.Decoded, doneICMP)
	}
	if tm.gap&gapPhysIf != 0 && (g.physIn != 0 || g.physOut != 0) {
		c.what, c.inIf, c.outIf = c.what|fixIf, g.physIn, g.physOut
		count(&e.Decoded, donePhysIf)
	}
	if tm.gap&gapFrame != 0 {
		if p, ok := parseFrame(g.frame); ok {
			c.what |= fixAddr
			c.src, c.dst, c.v6, c.sport, c.dport, c.proto = p.src, p.dst, p.v6, p.sport, p.dport, p.proto
			count(&e.Decoded, doneFrame)
		} else {
			count(&e.Undecodable, whyFrame)
		}
	}
	if tm.gap&gapReverse != 0 {
		if g.revSeen && g.revTruncated {
			count(&e.Undecodable, whyReverse) // the forward values and the other reverse elements still count
		} else if g.revPackets > 0 || g.revBytes > 0 {
			c.what, c.revP, c.revB = c.what|fixReverse, g.revPackets, g.revBytes
		}
		if g.startMs != 0 || g.endMs != 0 || g.hasFlags {
			c.what, c.flags = c.what|fixForward, g.flags
			if c.what&(fixTimes|fixObsTime) == 0 {
				c.start, c.end = int64(g.startMs), int64(g.endMs)
			}
		}
		if g.hasRevF {
			c.what, c.revF = c.what|fixRevFlags, g.revFlags
		}
		count(&e.Decoded, doneReverse)
	}
	if c.what == 0 {
		return
	}
	fp := fingerprint(e.addr, e.domain, v.v6, &v.src, &v.dst, uint16(n[sSrcPort]), uint16(n[sDstPort]), proto,
		uint32(n[sInIf]), uint32(n[sOutIf]), firstOf(v, sPackets, sPktsTotal), firstOf(v, sBytes, sBytesTotal))
	t.fix.dir = t.o.dir
	if err := t.fix.write(now, fp, &c); err != nil {
		t.state.LastError = err.Error()
	}
}

// --- the shipper's side -----------------------------------------------------------------

// ExporterDecodeCounts: one exporter's records completed from flowlake's own decode (by
// what) and records with a symptom it could not complete (by reason), per shipped file
// and in the shipper's totals.
type ExporterDecodeCounts struct {
	Completed    map[string]uint64 `json:"completed"`
	NotCompleted map[string]uint64 `json:"not_completed"`
}

// MergeDecodeCounts adds one file's counts into the running totals.
func MergeDecodeCounts(into, from map[string]*ExporterDecodeCounts) {
	for k, c := range from {
		t := into[k]
		if t == nil {
			t = &ExporterDecodeCounts{Completed: map[string]uint64{}, NotCompleted: map[string]uint64{}}
			into[k] = t
		}
		for s, n := range c.Completed {
			t.Completed[s] += n
		}
		for s, n := range c.NotCompleted {
			t.NotCompleted[s] += n
		}
	}
}

// completer holds one shipped file's view of the tap's corrections.
type completer struct {
	dir    string
	forms  map[string]uint16 // "addr/domain" -> gap forms the tap decoded for it (tap.json)
	sflow  map[string]bool   // "agent/sub-agent" -> the sFlow tap wrote output-code corrections for it (sflow.json)
	fixes  map[fpKey][]fixRec
	loaded map[int64]bool
	Counts map[string]*ExporterDecodeCounts
}

func (c *completer) reset(dir string) {
	c.dir, c.forms, c.fixes, c.loaded = dir, map[string]uint16{}, map[fpKey][]fixRec{}, map[int64]bool{}
	c.Counts, c.sflow = map[string]*ExporterDecodeCounts{}, map[string]bool{}
	if dir == "" {
		return
	}
	if data, err := os.ReadFile(filepath.Join(dir, "sflow.json")); err == nil {
		var st SFlowTapState
		if json.Unmarshal(data, &st) == nil {
			for key, a := range st.Agents {
				if a.OutCodes > 0 {
					c.sflow[key] = true
				}
			}
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "tap.json"))
	if err != nil {
		return
	}
	var st TapState
	if json.Unmarshal(data, &st) != nil {
		return
	}
	for key, e := range st.Exporters {
		var g uint16
		for what := range e.Decoded {
			switch what {
			case doneMicro, doneObs:
				g |= gapMicro | gapObsTime
			case doneICMP:
				g |= gapICMP
			case doneFrame:
				g |= gapFrame
			case doneReverse:
				g |= gapReverse
			case donePhysIf:
				g |= gapPhysIf
			}
		}
		if e.Undecodable[whyFrame] > 0 {
			g |= gapFrame
		}
		if g != 0 {
			c.forms[key] = g
		}
	}
}

func (c *completer) loadMinute(m int64) {
	if c.loaded[m] {
		return
	}
	c.loaded[m] = true
	name := time.UnixMilli(m * 60_000).UTC().Format("200601021504")
	for _, sub := range [2]string{"fix", "sflowfix"} { // fingerprints carry the exporter: one table
		fh, err := os.Open(filepath.Join(c.dir, sub, name+".bin"))
		if err != nil {
			continue
		}
		br := bufio.NewReaderSize(fh, 1<<16)
		var b [fixRecLen]byte
		for {
			if _, err := io.ReadFull(br, b[:]); err != nil {
				break
			}
			fp, rec := unmarshalFix(b[:])
			k := fpKey{m, fp}
			c.fixes[k] = append(c.fixes[k], rec)
		}
		fh.Close()
	}
}

func (c *completer) take(received int64, fp uint64) (fixRec, bool) {
	for _, d := range [3]int64{0, -1, 1} {
		m := received/60_000 + d
		c.loadMinute(m)
		k := fpKey{m, fp}
		if q := c.fixes[k]; len(q) > 0 {
			c.fixes[k] = q[1:]
			return q[0], true
		}
	}
	return fixRec{}, false
}

func (c *completer) counts(addr string) *ExporterDecodeCounts {
	x := c.Counts[addr]
	if x == nil {
		x = &ExporterDecodeCounts{Completed: map[string]uint64{}, NotCompleted: map[string]uint64{}}
		c.Counts[addr] = x
	}
	return x
}

// Complete fills in, from the tap's corrections, what nfcapd lost of record f (as read:
// before biflow expansion, sampling resolution and time checks).
func (r *Resolver) Complete(f *Flow) {
	c := &r.fix
	if f.NfVersion&nfVersionSFlow != 0 {
		r.completeSFlow(f)
		return
	}
	if len(c.forms) == 0 || f.Exporter == nil {
		return
	}
	g := c.forms[r.exporterInfo(f.Exporter).key]
	if g == 0 {
		return
	}
	var symptom []string
	if g&(gapMicro|gapObsTime) != 0 && f.TimeStart == 0 && f.TimeEnd == 0 {
		symptom = append(symptom, "time 0")
	}
	if g&gapICMP != 0 && (f.Proto == 1 || f.Proto == 58) && f.DstPort == 0 {
		symptom = append(symptom, "ICMP destination port 0")
	}
	if g&gapFrame != 0 && f.SrcAddr == [16]byte{} && f.DstAddr == [16]byte{} {
		symptom = append(symptom, "addresses 0")
	}
	if g&gapPhysIf != 0 && f.InputIf == 0 && f.OutputIf == 0 {
		symptom = append(symptom, "interfaces 0")
	}
	if g&gapReverse != 0 { // nfcapd's record looks whole: every record is looked up
		symptom = append(symptom, "reverse elements")
	}
	if len(symptom) == 0 {
		return
	}
	ex := r.exporterInfo(f.Exporter)
	if !ex.ipOK {
		return
	}
	ip := ex.ip
	applied := uint64(f.SamplingRate)
	if applied == 0 {
		applied = 1
	}
	fp := fingerprint(ip, f.Exporter.Domain, f.V6, flowAddr16(&f.SrcAddr, f.V6), flowAddr16(&f.DstAddr, f.V6),
		f.SrcPort, f.DstPort, f.Proto, f.InputIf, f.OutputIf, f.Packets/applied, f.Bytes/applied)
	fix, ok := c.take(f.Received, fp)
	counts := c.counts(f.Exporter.Addr)
	if !ok {
		for _, s := range symptom {
			counts.NotCompleted[whyNoFix+" ("+s+")"]++
		}
		return
	}
	if fix.what&(fixTimes|fixObsTime) != 0 {
		f.TimeStart, f.TimeEnd = fix.start, fix.end
		if fix.what&fixObsTime != 0 {
			counts.Completed[doneObs]++
		} else {
			counts.Completed[doneMicro]++
		}
	}
	if fix.what&fixAddr != 0 {
		f.V6, f.SrcPort, f.DstPort, f.Proto = fix.v6, fix.sport, fix.dport, fix.proto
		if fix.v6 {
			f.SrcAddr, f.DstAddr = fix.src, fix.dst
		} else { // the Flow keeps IPv4 in its first 4 bytes
			f.SrcAddr, f.DstAddr = [16]byte{}, [16]byte{}
			copy(f.SrcAddr[:4], fix.src[12:])
			copy(f.DstAddr[:4], fix.dst[12:])
		}
		counts.Completed[doneFrame]++
	}
	if fix.what&fixIf != 0 {
		f.InputIf, f.OutputIf = fix.inIf, fix.outIf
		counts.Completed[donePhysIf]++
	}
	if fix.what&fixICMP != 0 {
		f.DstPort = fix.dport
		counts.Completed[doneICMP]++
	}
	if fix.what&fixReverse != 0 && !f.Biflow() {
		f.OutPackets, f.OutBytes = fix.revP*applied, fix.revB*applied // as nfcapd scales its own out counters
	}
	if fix.what&fixForward != 0 {
		f.TCPFlags = fix.flags
		if fix.start != 0 || fix.end != 0 {
			f.TimeStart, f.TimeEnd = fix.start, fix.end
		}
	}
	if fix.what&fixRevFlags != 0 {
		f.RevTCPFlags, f.HasRevTCPFlags = fix.revF, true
	}
	if g&gapReverse != 0 {
		counts.Completed[doneReverse]++
	}
}

// completeSFlow: sfcapd 1.7.1 keeps only the low 30 bits of a flow sample's output, so a
// discard ("0x40000000 + reason") reads as ifIndex = reason and "multiple" (0x80000000 + N)
// as ifIndex N. The sFlow tap wrote a correction for each such sample of an agent
// (sflowtap.go sflowOutputFix), keyed by the fingerprint of what sfcapd stores: the agent,
// sub-agent, addresses, ports, protocol, interfaces as stored, 1 packet and the frame
// length. Only agents the tap saw send such codes are looked up; a record without a
// correction is an ordinary sample (every other sample has none), so none is counted missing.
func (r *Resolver) completeSFlow(f *Flow) {
	c := &r.fix
	if len(c.sflow) == 0 || f.Exporter == nil || f.FwdStatus != 0 { // a forwarding status already: the tap's drop records (sflowdrops.go)
		return
	}
	r.agents.apply(f.Exporter) // the tap keys by the agent address, as the rows name the exporter
	ex := r.exporterInfo(f.Exporter)
	if !c.sflow[ex.key] || !ex.ipOK {
		return
	}
	fp := fingerprint(ex.ip, f.Exporter.Domain, f.V6, flowAddr16(&f.SrcAddr, f.V6), flowAddr16(&f.DstAddr, f.V6),
		f.SrcPort, f.DstPort, f.Proto, f.InputIf, f.OutputIf, 1, f.SFlowFrame)
	fix, ok := c.take(f.Received, fp)
	if !ok || fix.what&fixSFlowOut == 0 {
		return
	}
	f.OutputIf = fix.outIf
	counts := c.counts(f.Exporter.Addr)
	if fix.fwd != 0 {
		f.FwdStatus = fix.fwd
		counts.Completed[doneDiscard]++
	} else {
		counts.Completed[doneMulti]++
	}
}
