// The sampling tap: a copy of every NetFlow v5/v9/IPFIX datagram sent to the collector
// port, read through a raw socket, so flowlake decides each flow's sampling rate itself.
//
// Why: nfcapd 1.7.1 records and applies only some sampling forms (measured, see
// collectors/sampling.py), so nfcapd runs with `-s -1` (it scales nothing) and this tap
// reads the announcements nfcapd drops. Why a raw socket and not nfcapd's `-R`
// repeater: the repeater re-sends from nfcapd's own socket, so every copy comes from
// 127.0.0.1 and the exporter's address (what tells routers apart) is lost.
//
// The tap follows each exporter (source address, observation domain / source id) in
// datagram order: templates, sampler announcements (options data: 34, 48/302 + 34, 50,
// 305/306, 309/310, 311; v5 header interval) and data records carrying a sampler id or
// a rate field. It writes
//
//	DIR/rates.jsonl           one line per change of a sampler's rate, with the time
//	DIR/fp/YYYYMMDDhhmm.bin   per data record of a sampled exporter: 8-byte fingerprint
//	                          of what nfcapd stores of it + the rate resolved in stream
//	                          order (0 = its sampler is unknown); one file per minute
//	DIR/tap.json              counters and the samplers in use, for `flowlake status`
//	DIR/fix/YYYYMMDDhhmm.bin  per record of a form nfcapd 1.7.1 stores incompletely
//	                          (gaps.go): the values it loses, keyed by the same fingerprint
//
// The shipper (sampling.go) looks every flow of a sampled exporter up by the same
// fingerprint, so a rate change takes effect exactly at the datagram that announced it.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// IPFIX / v9 information elements the tap reads.
const (
	ieBytes, iePackets              = 1, 2
	ieProto, ieSrcPort              = 4, 7
	ieSrcV4, ieInIf                 = 8, 10
	ieDstPort, ieDstV4              = 11, 12
	ieOutIf                         = 14
	ieSrcV6, ieDstV6                = 27, 28
	ieSamplingInterval              = 34
	ieSamplerID                     = 48
	ieSamplerRandomInterval         = 50
	ieBytesTotal, iePktsTotal       = 85, 86
	ieSelectorID                    = 302
	iePacketInterval, iePacketSpace = 305, 306
	ieSamplingSize, iePopulation    = 309, 310
	ieProbability                   = 311
)

// samplerExporterWide keys a rate announced for the whole exporter (no sampler id).
const samplerExporterWide = -1

type tfield struct {
	id, length uint16
	enterprise bool
	pen        uint32 // enterprise number (enterprise fields)
	slot       int8   // where decodeRecord keeps its value (-1: not used)
}

// value slots of a record: the information elements the tap reads, as numbers
const (
	sBytes = iota
	sPackets
	sProto
	sSrcPort
	sDstPort
	sInIf
	sOutIf
	sInterval34
	sSamplerID48
	sRandom50
	sBytesTotal
	sPktsTotal
	sSelector302
	sPacketInterval305
	sPacketSpace306
	sSize309
	sPopulation310
	sScopeInterface // v9 options scope Interface (type 2): a rate per input interface
	nSlots
)

// samplerInterface keys a rate announced for one input interface (no sampler id).
const samplerInterface = int64(1) << 40

var slotOf = map[uint16]int8{
	ieBytes: sBytes, iePackets: sPackets, ieProto: sProto, ieSrcPort: sSrcPort, ieDstPort: sDstPort,
	ieInIf: sInIf, ieOutIf: sOutIf, ieSamplingInterval: sInterval34, ieSamplerID: sSamplerID48,
	ieSamplerRandomInterval: sRandom50, ieBytesTotal: sBytesTotal, iePktsTotal: sPktsTotal,
	ieSelectorID: sSelector302, iePacketInterval: sPacketInterval305, iePacketSpace: sPacketSpace306,
	ieSamplingSize: sSize309, iePopulation: sPopulation310,
}

type ttemplate struct {
	fields  []tfield
	scope   int // options templates: the first `scope` fields are scope fields
	options bool
	rates   bool   // a data template with a sampler id or rate field per record
	gap     uint16 // forms nfcapd cannot decode (gaps.go): its records get correction records
}

type texporter struct {
	addr        netip.Addr
	domain      uint32
	templates   map[uint16]*ttemplate
	samplers    map[int64]uint32
	forms       map[int64]string
	sampled     bool // any sampling announced: fingerprint every data record
	Records     uint64
	Unknown     uint64
	Decoded     map[string]uint64 // gaps.go: records completed from the tap's own decode, by what
	Undecodable map[string]uint64 // gaps.go: records of a gap template it could not decode, by reason
}

// RateChange is one line of rates.jsonl.
type RateChange struct {
	T        int64  `json:"t"`
	Exporter string `json:"exporter"`
	Domain   uint32 `json:"domain"`
	Sampler  int64  `json:"sampler"`
	Rate     uint32 `json:"rate"`
	Form     string `json:"form"`
}

type tapOptions struct {
	bind string
	port int
	dir  string
	keep time.Duration
}

type tap struct {
	o         tapOptions
	exporters map[string]*texporter
	rates     *os.File
	fpMinute  string
	fp        *bufio.Writer
	fpFile    *os.File
	fix       fixWriter // gaps.go: DIR/fix/YYYYMMDDhhmm.bin
	state     TapState
	lastSave  time.Time
	wm        watermark // watermark.go: written after the files it covers
	dirty     bool      // datagrams read since the last save
}

// TapState is DIR/tap.json.
type TapState struct {
	PID       int                    `json:"pid"`
	Port      int                    `json:"port"`
	Datagrams uint64                 `json:"datagrams"`
	Malformed uint64                 `json:"malformed"`
	LastError string                 `json:"last_error"`
	Exporters map[string]TapExporter `json:"exporters"`
	UpdatedAt string                 `json:"updated_at"`
}

// TapExporter is one exporter's line of tap.json.
type TapExporter struct {
	Address  string            `json:"address"`
	Domain   uint32            `json:"domain"`
	Samplers map[string]uint32 `json:"samplers"` // sampler id ("-1" exporter-wide) -> rate
	Forms    map[string]string `json:"forms"`
	Records  uint64            `json:"sampled_records"`
	Unknown  uint64            `json:"unknown_sampler_records"`
	// gaps.go: records of forms nfcapd cannot decode: corrections written (by what),
	// and records the tap could not decode either (by reason)
	Decoded     map[string]uint64 `json:"decoded,omitempty"`
	Undecodable map[string]uint64 `json:"undecodable,omitempty"`
}

func cmdTap(args []string) error {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds | log.LUTC)
	fs := flag.NewFlagSet("tap", flag.ContinueOnError)
	var o tapOptions
	fs.StringVar(&o.bind, "bind", "127.0.0.1", "the collector's listen address (nfcapd -b)")
	fs.IntVar(&o.port, "port", 2055, "the collector's UDP port (nfcapd -p)")
	fs.StringVar(&o.dir, "dir", "", "where rates.jsonl, fp/ and tap.json go")
	fs.DurationVar(&o.keep, "keep", 6*time.Hour, "fingerprint files older than this are deleted")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.dir == "" {
		return fmt.Errorf("tap: --dir is required")
	}
	for _, sub := range []string{"fp", "fix"} {
		if err := os.MkdirAll(filepath.Join(o.dir, sub), 0o755); err != nil {
			return err
		}
	}
	network, laddr := "ip4:udp", &net.IPAddr{}
	if ip := net.ParseIP(o.bind); ip != nil && ip.To4() == nil {
		network = "ip6:udp"
	}
	if ip := net.ParseIP(o.bind); ip != nil && !ip.IsUnspecified() {
		laddr.IP = ip
	}
	conn, err := net.ListenIP(network, laddr)
	if err != nil {
		return fmt.Errorf("tap: raw socket for %s (needs root or CAP_NET_RAW): %v", network, err)
	}
	_ = conn.SetReadBuffer(8 << 20)
	if err := attachPortFilter(conn, network == "ip6:udp", o.port); err != nil {
		log.Printf("WARNING no socket filter (every UDP datagram of this host is read and dropped here): %v", err)
	}
	t := &tap{o: o, exporters: map[string]*texporter{}, wm: watermark{path: filepath.Join(o.dir, tapWatermarkFile)}}
	t.state = TapState{PID: os.Getpid(), Port: o.port, Exporters: map[string]TapExporter{}}
	if t.rates, err = os.OpenFile(filepath.Join(o.dir, "rates.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return err
	}
	t.restore()
	ctx := make(chan os.Signal, 1)
	signal.Notify(ctx, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-ctx; conn.Close() }()
	log.Printf("INFO sampling tap on %s port %d -> %s", network, o.port, o.dir)
	t.save()
	buf := make([]byte, 1<<16)
	rd := newRawReader(conn)
	for {
		began := time.Now()
		_ = conn.SetReadDeadline(began.Add(250 * time.Millisecond))
		n, src, at, err := rd.read(buf)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.wm.read(began) // the queue was empty when this read began
				t.tick(true)
				continue
			}
			break // closed by the signal
		}
		t.dirty = true
		if n >= 8 && int(binary.BigEndian.Uint16(buf[2:])) == o.port {
			ulen := int(binary.BigEndian.Uint16(buf[4:]))
			if ulen < 8 || ulen > n {
				ulen = n
			}
			addr, _ := netip.AddrFromSlice(src.IP)
			t.datagram(addr.Unmap(), buf[8:ulen], at)
		}
		t.wm.read(at)
		t.tick(false)
	}
	t.flushFP()
	t.save()
	t.wm.write()
	log.Printf("INFO sampling tap stopped")
	return nil
}

// restore reloads the last known rate of every sampler, so a restarted tap keeps
// resolving flows of exporters that announce rarely.
func (t *tap) restore() {
	for _, c := range readRateChanges(filepath.Join(t.o.dir, "rates.jsonl")) {
		addr, err := netip.ParseAddr(c.Exporter)
		if err != nil {
			continue
		}
		e := t.exporter(addr, c.Domain)
		e.samplers[c.Sampler] = c.Rate
		e.forms[c.Sampler] = c.Form
		e.sampled = true
	}
}

// tick writes the files, the state and then the watermark: once a second while busy, and
// as soon as the socket falls idle after datagrams (nfcapd's file may be closing now).
func (t *tap) tick(idle bool) {
	if time.Since(t.lastSave) > watermarkEvery || (idle && t.dirty) {
		t.flushFP()
		t.save()
		t.wm.write()
		t.dirty = false
	}
}

func (t *tap) save() {
	t.lastSave = time.Now()
	t.state.UpdatedAt = time.Now().UTC().Format(time.RFC3339Nano)
	for k, e := range t.exporters {
		te := TapExporter{Address: e.addr.String(), Domain: e.domain, Samplers: map[string]uint32{},
			Forms: map[string]string{}, Records: e.Records, Unknown: e.Unknown,
			Decoded: copyCounts(e.Decoded), Undecodable: copyCounts(e.Undecodable)}
		for id, r := range e.samplers {
			te.Samplers[fmt.Sprint(id)] = r
			te.Forms[fmt.Sprint(id)] = e.forms[id]
		}
		t.state.Exporters[k] = te
	}
	data, _ := json.MarshalIndent(&t.state, "", "  ")
	tmp := filepath.Join(t.o.dir, "tap.json.tmp")
	if os.WriteFile(tmp, data, 0o644) == nil {
		_ = os.Rename(tmp, filepath.Join(t.o.dir, "tap.json"))
	}
	t.prune()
}

// prune deletes fingerprint files older than --keep (the bound on the tap's disk use).
func (t *tap) prune() {
	cut := time.Now().Add(-t.o.keep).UTC().Format("200601021504")
	files, _ := filepath.Glob(filepath.Join(t.o.dir, "fp", "*.bin"))
	fixes, _ := filepath.Glob(filepath.Join(t.o.dir, "fix", "*.bin"))
	for _, f := range append(files, fixes...) {
		if strings.TrimSuffix(filepath.Base(f), ".bin") < cut {
			_ = os.Remove(f)
		}
	}
}

func (t *tap) exporter(addr netip.Addr, domain uint32) *texporter {
	key := fmt.Sprintf("%s/%d", addr, domain)
	e := t.exporters[key]
	if e == nil {
		e = &texporter{addr: addr, domain: domain, templates: map[uint16]*ttemplate{},
			samplers: map[int64]uint32{}, forms: map[int64]string{}}
		t.exporters[key] = e
	}
	return e
}

func (t *tap) malformed(addr netip.Addr, format string, args ...any) {
	t.state.Malformed++
	t.state.LastError = fmt.Sprintf("%s: %s", addr, fmt.Sprintf(format, args...))
}

func (t *tap) announce(e *texporter, sampler int64, rate uint32, form string, now time.Time) {
	if rate == 0 {
		return
	}
	e.sampled = true
	if old, ok := e.samplers[sampler]; ok && old == rate {
		return
	}
	e.samplers[sampler] = rate
	e.forms[sampler] = form
	line, _ := json.Marshal(RateChange{T: now.UnixMilli(), Exporter: e.addr.String(), Domain: e.domain,
		Sampler: sampler, Rate: rate, Form: form})
	_, _ = t.rates.Write(append(line, '\n'))
	log.Printf("INFO %s domain %d sampler %d: 1:%d (%s)", e.addr, e.domain, sampler, rate, form)
}

func (t *tap) datagram(addr netip.Addr, p []byte, now time.Time) {
	t.state.Datagrams++
	if len(p) < 4 {
		t.malformed(addr, "datagram of %d bytes", len(p))
		return
	}
	switch binary.BigEndian.Uint16(p) {
	case 5:
		t.v5(addr, p, now)
	case 9:
		if len(p) < 20 {
			t.malformed(addr, "v9 header of %d bytes", len(p))
			return
		}
		t.sets(t.exporter(addr, binary.BigEndian.Uint32(p[16:])), p[20:], false, now)
	case 10:
		if len(p) < 16 {
			t.malformed(addr, "IPFIX header of %d bytes", len(p))
			return
		}
		if l := int(binary.BigEndian.Uint16(p[2:])); l >= 16 && l < len(p) {
			p = p[:l]
		}
		t.sets(t.exporter(addr, binary.BigEndian.Uint32(p[12:])), p[16:], true, now)
	}
}

// v5: the header's sampling_interval (2 bits mode, 14 bits interval) covers every record.
func (t *tap) v5(addr netip.Addr, p []byte, now time.Time) {
	if len(p) < 24 {
		t.malformed(addr, "v5 header of %d bytes", len(p))
		return
	}
	count := int(binary.BigEndian.Uint16(p[2:]))
	if count == 0 || count > 30 || len(p) < 24+48*count {
		t.malformed(addr, "v5 datagram of %d bytes for %d records", len(p), count)
		return
	}
	e := t.exporter(addr, uint32(p[20])<<8|uint32(p[21]))
	si := binary.BigEndian.Uint16(p[22:])
	rate := uint32(si & 0x3FFF)
	if rate == 0 {
		rate = 1
	}
	if rate > 1 || e.sampled {
		t.announce(e, samplerExporterWide, rate, "v5 header sampling_interval", now)
	}
	if !e.sampled {
		return
	}
	for i := 0; i < count; i++ {
		r := p[24+48*i:]
		var src, dst [16]byte
		copy(src[12:], r[0:4])
		copy(dst[12:], r[4:8])
		fp := fingerprint(e.addr, e.domain, false, &src, &dst, binary.BigEndian.Uint16(r[32:]), binary.BigEndian.Uint16(r[34:]),
			r[38], uint32(binary.BigEndian.Uint16(r[12:])), uint32(binary.BigEndian.Uint16(r[14:])),
			uint64(binary.BigEndian.Uint32(r[16:])), uint64(binary.BigEndian.Uint32(r[20:])))
		t.record(e, fp, rate, now)
	}
}

func (t *tap) sets(e *texporter, p []byte, ipfix bool, now time.Time) {
	for len(p) >= 4 {
		id := binary.BigEndian.Uint16(p)
		l := int(binary.BigEndian.Uint16(p[2:]))
		if l < 4 || l > len(p) {
			t.malformed(e.addr, "set %d of length %d, %d bytes left", id, l, len(p))
			return
		}
		body := p[4:l]
		switch {
		case (!ipfix && id == 0) || (ipfix && id == 2):
			t.templates(e, body, ipfix, false)
		case (!ipfix && id == 1) || (ipfix && id == 3):
			t.templates(e, body, ipfix, true)
		case id >= 256:
			if tm := e.templates[id]; tm != nil && (tm.options || tm.rates || e.sampled || tm.gap != 0) {
				t.data(e, tm, body, now)
			}
		}
		p = p[l:]
	}
}

func (t *tap) templates(e *texporter, b []byte, ipfix, options bool) {
	for len(b) >= 4 {
		tid := binary.BigEndian.Uint16(b)
		tm := &ttemplate{options: options}
		var nfields int
		switch {
		case !options:
			nfields = int(binary.BigEndian.Uint16(b[2:]))
			b = b[4:]
		case ipfix:
			if len(b) < 6 {
				return
			}
			nfields = int(binary.BigEndian.Uint16(b[2:]))
			tm.scope = int(binary.BigEndian.Uint16(b[4:]))
			b = b[6:]
		default: // v9 options: scope and option lengths in bytes, 4 bytes per field
			if len(b) < 6 {
				return
			}
			tm.scope = int(binary.BigEndian.Uint16(b[2:])) / 4
			nfields = tm.scope + int(binary.BigEndian.Uint16(b[4:]))/4
			b = b[6:]
		}
		if nfields == 0 { // withdrawal (IPFIX) or padding
			delete(e.templates, tid)
			continue
		}
		for i := 0; i < nfields; i++ {
			if len(b) < 4 {
				return
			}
			f := tfield{id: binary.BigEndian.Uint16(b), length: binary.BigEndian.Uint16(b[2:])}
			b = b[4:]
			if ipfix && f.id&0x8000 != 0 {
				f.id &= 0x7FFF
				f.enterprise = true
				if len(b) < 4 {
					return
				}
				f.pen = binary.BigEndian.Uint32(b)
				b = b[4:]
			}
			if options && !ipfix && i < tm.scope {
				f.id |= 0x4000 // v9 scope types (1 system, 2 interface, ...) are not IEs
			}
			if !f.enterprise && !options {
				switch f.id {
				case ieSamplerID, ieSelectorID, ieSamplingInterval, ieSamplerRandomInterval, iePacketInterval,
					iePacketSpace, ieSamplingSize, iePopulation, ieProbability:
					tm.rates = true
				}
			}
			f.slot = -1
			if sl, ok := slotOf[f.id]; ok && !f.enterprise {
				f.slot = sl
			}
			if f.id == 0x4002 || (options && ipfix && i < tm.scope && f.id == ieInIf) {
				f.slot = sScopeInterface // v9 scope Interface, IPFIX scope ingressInterface
			}
			tm.fields = append(tm.fields, f)
		}
		if !options {
			tm.gap = gapsOf(tm)
		}
		if tid >= 256 {
			e.templates[tid] = tm
		}
	}
}

// values of one record: the fields the tap uses, as numbers, plus addresses.
type recvals struct {
	val      [nSlots]uint64
	has      uint32 // bit per slot
	prob     float64
	src, dst [16]byte
	v6       bool
	g        gapvals // gaps.go: what nfcapd cannot decode
}

func (v *recvals) set(slot int8, x uint64) { v.val[slot], v.has = x, v.has|1<<uint(slot) }

func (v *recvals) get(slot int) (uint64, bool) { return v.val[slot], v.has&(1<<uint(slot)) != 0 }

func (v *recvals) hasSampler() bool { return v.has&(1<<sSamplerID48|1<<sSelector302) != 0 }

func (t *tap) data(e *texporter, tm *ttemplate, b []byte, now time.Time) {
	for {
		var v recvals
		n, ok := decodeRecord(tm, b, &v)
		if !ok {
			return // what is left is padding
		}
		b = b[n:]
		if tm.options {
			t.optionRecord(e, &v, now)
		} else {
			if tm.rates || e.sampled {
				t.flowRecord(e, &v, now)
			}
			if tm.gap != 0 {
				t.gapRecord(e, tm, &v, now)
			}
		}
	}
}

func decodeRecord(tm *ttemplate, b []byte, v *recvals) (int, bool) {
	pos := 0
	for _, f := range tm.fields {
		l := int(f.length)
		if l == 0xFFFF { // IPFIX variable length
			if pos >= len(b) {
				return 0, false
			}
			l = int(b[pos])
			pos++
			if l == 255 {
				if pos+2 > len(b) {
					return 0, false
				}
				l = int(binary.BigEndian.Uint16(b[pos:]))
				pos += 2
			}
		}
		if pos+l > len(b) {
			return 0, false
		}
		val := b[pos : pos+l]
		pos += l
		if f.enterprise {
			if f.pen == penReverse {
				v.g.reverse(f.id, val, l)
			}
			continue
		}
		switch f.id {
		case ieStartMicro, ieEndMicro, ieObsTimeMs, ieDataLinkFrame, iePhysIn, iePhysOut, 152, 153, 6:
			v.g.element(f.id, val)
		case ieSrcV4:
			if l == 4 {
				copy(v.src[12:], val)
			}
		case ieDstV4:
			if l == 4 {
				copy(v.dst[12:], val)
			}
		case ieSrcV6:
			if l == 16 {
				copy(v.src[:], val)
				v.v6 = true
			}
		case ieDstV6:
			if l == 16 {
				copy(v.dst[:], val)
				v.v6 = true
			}
		case ieProbability:
			switch l {
			case 8:
				v.prob = math.Float64frombits(binary.BigEndian.Uint64(val))
			case 4:
				v.prob = float64(math.Float32frombits(binary.BigEndian.Uint32(val)))
			}
		default:
			if f.slot >= 0 && l <= 8 {
				var x uint64
				for _, c := range val {
					x = x<<8 | uint64(c)
				}
				v.set(f.slot, x)
			}
		}
	}
	return pos, pos > 0 && pos <= len(b)
}

// rateOf reads a rate from a record's sampling fields, most specific first; "" when none.
func rateOf(v *recvals) (uint32, string) {
	pi, hasPI := v.get(sPacketInterval305)
	if space, ok := v.get(sPacketSpace306); ok && pi > 0 {
		return clampRate((pi + space) / pi), "samplingPacketInterval 305 + samplingPacketSpace 306"
	}
	if pop, ok := v.get(sPopulation310); ok && v.val[sSize309] > 0 {
		return clampRate(pop / v.val[sSize309]), "samplingSize 309 / samplingPopulation 310"
	}
	if v.prob > 0 && v.prob <= 1 {
		return clampRate(uint64(math.Round(1 / v.prob))), "samplingProbability 311"
	}
	if r, ok := v.get(sInterval34); ok && r > 0 {
		return clampRate(r), "samplingInterval 34"
	}
	if r, ok := v.get(sRandom50); ok && r > 0 {
		return clampRate(r), "samplerRandomInterval 50"
	}
	if hasPI && pi > 0 { // alone: vendors put N of 1:N here
		return clampRate(pi), "samplingPacketInterval 305"
	}
	return 0, ""
}

func clampRate(r uint64) uint32 {
	if r == 0 {
		return 0
	}
	if r > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(r)
}

func samplerOf(v *recvals) int64 {
	if id, ok := v.get(sSelector302); ok {
		return int64(id)
	}
	if id, ok := v.get(sSamplerID48); ok {
		return int64(id)
	}
	return samplerExporterWide
}

func (t *tap) optionRecord(e *texporter, v *recvals, now time.Time) {
	rate, form := rateOf(v)
	if rate == 0 {
		return
	}
	sampler := samplerOf(v)
	if ifindex, ok := v.get(sScopeInterface); ok && sampler == samplerExporterWide {
		sampler, form = samplerInterface|int64(ifindex), form+" (per input interface)"
	}
	t.announce(e, sampler, rate, "options "+form, now)
}

func (t *tap) flowRecord(e *texporter, v *recvals, now time.Time) {
	rate, form := rateOf(v)
	if rate > 0 { // the rate travels in the data record itself
		t.announce(e, samplerOf(v), rate, "data record "+form, now)
	} else {
		rate = e.rateFor(v)
		if rate == 0 && v.hasSampler() && samplerOf(v) != 0 {
			// it names a sampler (0 = none) never announced: unknown, said once in rates.jsonl
			if _, said := e.forms[samplerOf(v)]; !said {
				e.forms[samplerOf(v)] = "named in data records, never announced"
				line, _ := json.Marshal(RateChange{T: now.UnixMilli(), Exporter: e.addr.String(), Domain: e.domain,
					Sampler: samplerOf(v), Rate: 0, Form: e.forms[samplerOf(v)]})
				_, _ = t.rates.Write(append(line, '\n'))
			}
			e.sampled = true
		}
	}
	if !e.sampled {
		return
	}
	n := &v.val
	fp := fingerprint(e.addr, e.domain, v.v6, &v.src, &v.dst, uint16(n[sSrcPort]), uint16(n[sDstPort]), uint8(n[sProto]),
		uint32(n[sInIf]), uint32(n[sOutIf]), firstOf(v, sPackets, sPktsTotal), firstOf(v, sBytes, sBytesTotal))
	if rate == 0 {
		e.Unknown++
	}
	t.record(e, fp, rate, now)
}

func firstOf(v *recvals, a, b int) uint64 {
	if x, ok := v.get(a); ok {
		return x
	}
	return v.val[b]
}

// rateFor: the record's sampler if it names one, else the exporter-wide rate, else the
// exporter's only sampler; 0 = unknown (a sampler never announced, or several to choose from).
func (e *texporter) rateFor(v *recvals) uint32 {
	if v.hasSampler() {
		return e.samplers[samplerOf(v)]
	}
	if r, ok := e.samplers[samplerInterface|int64(v.val[sInIf])]; ok {
		return r
	}
	if r, ok := e.samplers[samplerExporterWide]; ok {
		return r
	}
	if len(e.samplers) == 1 {
		for _, r := range e.samplers {
			return r
		}
	}
	return 0
}

func (t *tap) record(e *texporter, fp uint64, rate uint32, now time.Time) {
	e.Records++
	minute := now.UTC().Format("200601021504")
	if minute != t.fpMinute || t.fp == nil {
		t.flushFP()
		if t.fpFile != nil {
			t.fpFile.Close()
		}
		f, err := os.OpenFile(filepath.Join(t.o.dir, "fp", minute+".bin"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.state.LastError = err.Error()
			return
		}
		t.fpFile, t.fp, t.fpMinute = f, bufio.NewWriterSize(f, 1<<16), minute
	}
	var rec [12]byte
	binary.LittleEndian.PutUint64(rec[:], fp)
	binary.LittleEndian.PutUint32(rec[8:], rate)
	_, _ = t.fp.Write(rec[:])
}

func (t *tap) flushFP() {
	if t.fp != nil {
		_ = t.fp.Flush()
	}
	t.fix.flush()
}

// fingerprint of a flow record from what both the tap (wire record) and the shipper
// (nfcapd's V3 record) know. ICMP ports are left out: nfcapd moves type/code into them.
func fingerprint(exporter netip.Addr, domain uint32, v6 bool, src, dst *[16]byte, sport, dport uint16, proto uint8,
	inIf, outIf uint32, packets, bytes uint64) uint64 {
	a := exporter.As16()
	var b [16 + 8 + 16 + 16 + 4 + 1 + 8 + 16]byte
	copy(b[:], a[:])
	h := b[16:]
	binary.BigEndian.PutUint32(h[0:], domain)
	if v6 {
		h[4] = 6
	}
	copy(h[8:], src[:])
	copy(h[24:], dst[:])
	if proto != 1 && proto != 58 {
		binary.BigEndian.PutUint16(h[40:], sport)
		binary.BigEndian.PutUint16(h[42:], dport)
	}
	h[44] = proto
	binary.BigEndian.PutUint32(h[45:], inIf)
	binary.BigEndian.PutUint32(h[49:], outIf)
	binary.BigEndian.PutUint64(h[53:], packets)
	binary.BigEndian.PutUint64(h[61:], bytes)
	// FNV-1a 64 over exporter (16 bytes) + the record's fields, without allocating
	x := uint64(14695981039346656037)
	for _, c := range b[:16+69] {
		x ^= uint64(c)
		x *= 1099511628211
	}
	return x
}

// attachPortFilter has the kernel hand the tap only datagrams to the collector port (a
// raw UDP socket otherwise gets a copy of every UDP datagram this host receives).
// IPv4 raw sockets see the IP header first, IPv6 ones the UDP header.
func attachPortFilter(conn *net.IPConn, v6 bool, port int) error {
	prog := []syscall.SockFilter{
		{Code: 0xb1, K: 0},                          // ldxb 4*([0]&0xf): IPv4 header length
		{Code: 0x48, K: 2},                          // ldh [x+2]: UDP destination port
		{Code: 0x15, Jt: 0, Jf: 1, K: uint32(port)}, // jeq #port
		{Code: 0x06, K: 0xFFFF},                     // ret: keep
		{Code: 0x06, K: 0},                          // ret: drop
	}
	if v6 {
		prog = append([]syscall.SockFilter{{Code: 0x01, K: 0}}, prog[1:]...) // ldx #0: no IP header
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = syscall.AttachLsf(int(fd), prog) }); err != nil {
		return err
	}
	return serr
}

func readRateChanges(path string) []RateChange {
	fh, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer fh.Close()
	var out []RateChange
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		var c RateChange
		if json.Unmarshal(sc.Bytes(), &c) == nil {
			out = append(out, c)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].T < out[j].T })
	return out
}
