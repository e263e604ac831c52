// What the sFlow tap lands in the lake (issue 35): interface counters from the agents'
// counter samples, beside SNMP's, and the agents' health per interval.
//
// Counters: sfcapd 1.7.1 reads counter samples and drops them. The tap decodes the
// generic interface counters record (sFlow v5 counter record enterprise 0, format 1,
// in counter samples 0:2 and expanded counter samples 0:4) and writes, every flush,
// one Parquet file per agent into lake/interface_counters/date=D/ with exactly the SNMP
// poller's schema (schemas/snmp.py INTERFACE_COUNTERS, collectors/snmp/store.py), so the
// interface_capacity job (utilisation, daily p95, flow coverage) reads sFlow-only agents
// as it reads polled ones. if_name is the port name record (0:1005, host-sflow and Open
// vSwitch send it beside the generic counters), else the interface's last one, else ""
// (unknown). The exporter is the agent address (the flows' exporter);
// the previous raw values are kept per agent, sub-agent and ifIndex. sFlow has 32-bit
// packet, error and discard counters and 64-bit octet counters: deltas wrap at those
// widths. An agent restart (its uptime going back, or the counter sample's sequence
// number going back) gives null deltas and reset = true, as SNMP's sysUpTime does. A
// counter the agent marks unsupported (all ones) has a null delta. Agents SNMP polls
// (state/snmp/interfaces.json) are skipped: SNMP's counters win, never both.
//
// Health: one row per agent/sub-agent and flush interval in lake/sflow_agent_health/
// (schemas/sflow.py SFLOW_AGENT_HEALTH): datagrams, lost (sequence gaps), restarts,
// samples by kind and per second, sampling rates in use, bad input by reason.
//
// Files are written to a hidden temporary name and renamed (readers' *.parquet globs skip
// it); the tap's state (sflow.json) is saved right after, with the raw values.
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// sflowCounterNames: INTERFACE_COUNTERS' counters in schema order, with sFlow's widths.
var sflowCounterNames = [8]string{"in_octets", "out_octets", "in_ucast_pkts", "out_ucast_pkts",
	"in_errors", "out_errors", "in_discards", "out_discards"}
var sflowCounterBits = [8]uint{64, 64, 32, 32, 32, 32, 32, 32}

const sflowIfCountersLen = 88 // generic interface counters record body

// sflowIfPrev: the last counter sample of one agent/sub-agent/ifIndex.
type sflowIfPrev struct {
	UptimeMs uint32    `json:"uptime_ms"`
	Seq      uint32    `json:"seq"`
	TimeMs   int64     `json:"time_ms"`
	Raw      [8]uint64 `json:"raw"`
	// the agent restarted its datagram numbering since: its counters started again
	// (a new process may send the same sample sequence number and uptime as the old one)
	Restarted bool   `json:"restarted,omitempty"`
	Name      string `json:"name,omitempty"` // the last port name the agent sent for it (counter record 0:1005)
}

// agentRestarted marks the agent's interfaces: their next sample starts a new series.
func (st *SFlowTapState) agentRestarted(a *SFlowAgent) {
	prefix := fmt.Sprintf("%s/%d/", a.Agent, a.SubAgent)
	for k, p := range st.CounterState {
		if strings.HasPrefix(k, prefix) {
			p.Restarted = true
		}
	}
}

// sflowCounterRow is one row of interface_counters (kept in sflow.json until written).
type sflowCounterRow struct {
	TimeMs      int64     `json:"time_ms"`
	Exporter    string    `json:"exporter"`
	IfIndex     uint32    `json:"if_index"`
	IfName      string    `json:"if_name,omitempty"`
	SpeedMbps   int64     `json:"speed_mbps"`
	Oper        int32     `json:"oper_status"`
	UptimeCs    int64     `json:"sys_uptime_cs"`
	Interval    float64   `json:"interval_s"`
	HasInterval bool      `json:"has_interval"`
	Reset       bool      `json:"reset"`
	Delta       [8]int64  `json:"delta"`
	HasDelta    [8]bool   `json:"has_delta"`
	Raw         [8]uint64 `json:"raw"`
}

// sflowInterval: what one agent did since the last flush (a health row).
type sflowInterval struct {
	StartMs        int64             `json:"start_ms"`
	Senders        map[string]uint64 `json:"senders"`
	Datagrams      uint64            `json:"datagrams"`
	Samples        uint64            `json:"samples"` // samples of every kind
	Lost           uint64            `json:"lost"`
	Restarts       uint64            `json:"restarts"`
	Reordered      uint64            `json:"reordered"`
	FlowSamples    uint64            `json:"flow_samples"`
	CountSamples   uint64            `json:"counter_samples"`
	DiscardSamples uint64            `json:"discard_samples"`
	OtherSamples   uint64            `json:"other_samples"`
	AgentDrops     uint64            `json:"agent_drops"`
	Rates          map[string]uint64 `json:"rates"`
	Bad            map[string]uint64 `json:"bad"`
}

func newInterval(ms int64) *sflowInterval {
	return &sflowInterval{StartMs: ms, Senders: map[string]uint64{}, Rates: map[string]uint64{}, Bad: map[string]uint64{}}
}

// sflowIfCounters decodes a generic interface counters record into a row (no deltas yet).
func sflowIfCounters(b []byte) (idx uint32, speed uint64, status uint32, raw [8]uint64) {
	be := binary.BigEndian
	idx, speed, status = be.Uint32(b[0:]), be.Uint64(b[8:]), be.Uint32(b[20:])
	raw[0], raw[2], raw[4], raw[6] = be.Uint64(b[24:]), uint64(be.Uint32(b[32:])), uint64(be.Uint32(b[48:])), uint64(be.Uint32(b[44:]))
	raw[1], raw[3], raw[5], raw[7] = be.Uint64(b[56:]), uint64(be.Uint32(b[64:])), uint64(be.Uint32(b[80:])), uint64(be.Uint32(b[76:]))
	return
}

// sflowCounterSample reads one counter sample (format 2 or 4) of agent a; uptime is the
// datagram's. Returns a reason when the sample is bad (the datagram's other samples stay).
func (st *SFlowTapState) sflowCounterSample(a *SFlowAgent, format uint32, body []byte, uptime uint32, now time.Time) string {
	hdr := 12
	if format == 4 {
		hdr = 16
	}
	if len(body) < hdr {
		return "counter sample too short"
	}
	seq := binary.BigEndian.Uint32(body)
	n := binary.BigEndian.Uint32(body[hdr-4:])
	off := hdr
	var generic [][]byte
	name, reason := "", ""
	for i := uint32(0); i < n && reason == ""; i++ {
		if len(body) < off+8 {
			reason = "counter record longer than its sample"
			break
		}
		rf, rl := binary.BigEndian.Uint32(body[off:]), int(binary.BigEndian.Uint32(body[off+4:]))
		off += 8
		if rl < 0 || len(body) < off+rl {
			reason = "counter record longer than its sample"
			break
		}
		rec := body[off : off+rl]
		off += rl
		switch rf {
		case 1:
			if len(rec) < sflowIfCountersLen {
				reason = "generic interface counters record too short"
				continue
			}
			generic = append(generic, rec)
		case 1005: // port name (host-sflow, Open vSwitch): string name<255>
			if len(rec) < 4 || int(binary.BigEndian.Uint32(rec)) > len(rec)-4 || binary.BigEndian.Uint32(rec) > 255 {
				reason = "port name record longer than its record"
				continue
			}
			name = sflowPortName(rec[4 : 4+binary.BigEndian.Uint32(rec)])
		} // other counter structures (ethernet, processor, ...): not interface counters
	}
	for _, rec := range generic { // the records read whole land, whatever came after them
		a.IfCounters++
		st.counterRow(a, seq, uptime, rec, name, now)
	}
	return reason
}

// sflowPortName: a port name record's string as if_name (valid UTF-8, no control characters).
func sflowPortName(b []byte) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, strings.ToValidUTF8(string(b), ""))
}

// counterRow turns one generic interface counters record into a pending row. name: the
// sample's port name record ("": none; the interface's last known name then, else unknown).
func (st *SFlowTapState) counterRow(a *SFlowAgent, seq, uptime uint32, rec []byte, name string, now time.Time) {
	idx, speed, status, raw := sflowIfCounters(rec)
	key := fmt.Sprintf("%s/%d/%d", a.Agent, a.SubAgent, idx)
	ms := now.UnixMilli()
	prev := st.CounterState[key]
	if name == "" && prev != nil {
		name = prev.Name
	}
	row := sflowCounterRow{TimeMs: ms, Exporter: a.Agent, IfIndex: idx, IfName: name, SpeedMbps: int64(speed / 1_000_000),
		Oper: 2, UptimeCs: int64(uptime / 10), Raw: raw}
	if status&2 != 0 {
		row.Oper = 1
	}
	if prev != nil {
		elapsed := float64(ms-prev.TimeMs) / 1000
		wrappedUptime := uptime < prev.UptimeMs && prev.UptimeMs > math.MaxUint32/10*9 &&
			math.Abs(float64(uptime+(math.MaxUint32-prev.UptimeMs)+1)/1000-elapsed) < math.Max(60, elapsed/2)
		switch {
		case prev.Restarted || (uptime < prev.UptimeMs && !wrappedUptime) || (seq < prev.Seq && prev.Seq-seq < 1<<31):
			row.Reset = true
		case seq == prev.Seq && uptime == prev.UptimeMs: // the same sample again (a duplicated datagram)
			prev.Name = name
			return
		default:
			row.Interval, row.HasInterval = float64(uptime-prev.UptimeMs)/1000, true
			if row.Interval <= 0 {
				row.Interval = elapsed
			}
			for i := range raw {
				full := uint64(1)<<sflowCounterBits[i] - 1
				if sflowCounterBits[i] == 64 {
					full = math.MaxUint64
				}
				if raw[i] == full || prev.Raw[i] == full { // unsupported by the agent
					continue
				}
				d := raw[i] - prev.Raw[i]
				if sflowCounterBits[i] < 64 {
					d &= full
				}
				row.Delta[i], row.HasDelta[i] = int64(d), true
			}
		}
	}
	st.CounterState[key] = &sflowIfPrev{UptimeMs: uptime, Seq: seq, TimeMs: ms, Raw: raw, Name: name}
	st.Pending = append(st.Pending, row)
}

// ---- discards, internal and multiple interfaces ------------------------------------

// sflowDiscardStatus maps an sFlow v5 discard reason (the output "0x40000000 + reason"
// code, or a discarded packet sample's reason) to IPFIX forwardingStatus (IE 89, RFC 7270):
// 128 + the IANA "dropped" reason (128 unknown, 129 ACL deny, 131 unroutable, 133
// fragmentation and DF set, 137 bad TTL, 138 policer, 139 WRED...).
func sflowDiscardStatus(reason uint32) int {
	switch reason {
	case 0, 1, 5, 6, 7, 8, 11, 12: // ICMP unreachable: net/host unreachable or unknown, source route failed, isolated, for ToS
		return 131
	case 4, 262: // fragmentation needed and DF set; packet too big
		return 133
	case 9, 10, 13, 258: // administratively prohibited; ACL
		return 129
	case 257: // TTL exceeded
		return 137
	case 269, 281: // blackhole route, non-routable packet
		return 131
	case 279: // unresolved neighbour
		return 132
	case 280: // multicast reverse-path forwarding
		return 140
	case 261: // rate limit
		return 138
	case 260: // RED
		return 139
	}
	return 128 // 256 unknown, 2/3 protocol/port unreachable, 259 no buffer space, and anything else
}

// sflowIfs reads a flow sample's input and output (compact: the top 2 bits of the word
// are the format; expanded: separate format words) and where its flow records start.
func sflowIfs(format uint32, body []byte) (inFmt, inVal, outFmt, outVal uint32, records int, ok bool) {
	be := binary.BigEndian
	if format == 1 {
		if len(body) < 32 {
			return
		}
		in, out := be.Uint32(body[20:]), be.Uint32(body[24:])
		return in >> 30, in & 0x3fffffff, out >> 30, out & 0x3fffffff, 28, true
	}
	if len(body) < 44 {
		return
	}
	return be.Uint32(body[24:]), be.Uint32(body[28:]), be.Uint32(body[32:]), be.Uint32(body[36:]), 40, true
}

// sflowPorts counts the interface formats of a flow sample: internal (input 0x3FFFFFFF),
// multiple output interfaces, and discards with their forwarding status.
func (a *SFlowAgent) sflowPorts(iv *sflowInterval, format uint32, body []byte) {
	inFmt, inVal, outFmt, outVal, _, ok := sflowIfs(format, body)
	if !ok {
		return
	}
	if inFmt == 0 && inVal == 0x3fffffff {
		a.Internal++
	}
	switch outFmt {
	case 1:
		a.discard(iv, outVal)
	case 2:
		a.Multiple++
	}
}

// sflowOutputFix: a flow sample whose output is a discard or "multiple" code loses its
// format bits in sfcapd 1.7.1's record (it stores the low 30 bits as the output ifIndex).
// Written here: a correction keyed by what sfcapd stores of that sample (gaps.go
// completeSFlow): a discard gets output 0 and forwarding_status (sflowDiscardStatus), a
// multiple output 0x80000000 + N (sFlow's own encoding: N interfaces, 0 unknown). The
// addresses, ports and protocol are the sampled header's (raw packet header record 0:1,
// Ethernet, IPv4 or IPv6), as sfcapd decodes them.
func (st *SFlowTapState) sflowOutputFix(a *SFlowAgent, format uint32, body []byte, now time.Time) {
	_, inVal, outFmt, outVal, off, ok := sflowIfs(format, body)
	if !ok || (outFmt != 1 && outFmt != 2) || st.fix == nil {
		return
	}
	be := binary.BigEndian
	n := be.Uint32(body[off:])
	off += 4
	var p parsedFrame
	var frameLen uint32
	found := false
	for i := uint32(0); i < n && !found && len(body) >= off+8; i++ {
		rf, rl := be.Uint32(body[off:]), int(be.Uint32(body[off+4:]))
		off += 8
		if rl < 0 || len(body) < off+rl {
			break
		}
		rec := body[off : off+rl]
		off += rl
		if rf != 1 || len(rec) < 16 {
			continue
		}
		proto, hl := be.Uint32(rec), int(be.Uint32(rec[12:]))
		if hl < 0 || len(rec) < 16+hl {
			break
		}
		frameLen, found = be.Uint32(rec[4:]), true
		p, ok = parseSampledHeader(proto, rec[16:16+hl])
		found = found && ok
	}
	if !found {
		a.OutUnfixed++
		return
	}
	c := fixRec{what: fixSFlowOut}
	if outFmt == 1 {
		c.fwd = uint8(sflowDiscardStatus(outVal))
	} else {
		c.outIf = 0x80000000 | outVal
	}
	fp := fingerprint(netip.MustParseAddr(a.Agent), a.SubAgent, p.v6, &p.src, &p.dst, p.sport, p.dport, p.proto,
		inVal, outVal, 1, uint64(frameLen))
	if err := st.fix.write(now, fp, &c); err != nil {
		a.OutUnfixed++
		return
	}
	a.OutCodes++
}

// parseSampledHeader: a raw packet header record's header as parseFrame reads it
// (header_protocol 1 Ethernet, 11 IPv4, 12 IPv6).
func parseSampledHeader(proto uint32, h []byte) (parsedFrame, bool) {
	switch proto {
	case 1:
		return parseFrame(h)
	case 11, 12:
		et := []byte{0x08, 0x00}
		if proto == 12 {
			et = []byte{0x86, 0xDD}
		}
		eth := make([]byte, 14, 14+len(h))
		copy(eth[12:], et)
		return parseFrame(append(eth, h...))
	}
	return parsedFrame{}, false
}

func (a *SFlowAgent) discard(iv *sflowInterval, reason uint32) {
	if a.Discards == nil {
		a.Discards = map[string]uint64{}
	}
	a.Discards[strconv.Itoa(sflowDiscardStatus(reason))]++
	a.DiscardSamp++
	iv.DiscardSamples++
}

// ---- the lake ----------------------------------------------------------------------

func tsField(name string) arrow.Field {
	return arrow.Field{Name: name, Type: &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}}
}

func sflowCountersSchema() *arrow.Schema {
	f := []arrow.Field{tsField("time"),
		{Name: "exporter", Type: arrow.BinaryTypes.String}, {Name: "if_index", Type: arrow.PrimitiveTypes.Int64},
		{Name: "if_name", Type: arrow.BinaryTypes.String}, {Name: "speed_mbps", Type: arrow.PrimitiveTypes.Int64},
		{Name: "oper_status", Type: arrow.PrimitiveTypes.Int32}, {Name: "sys_uptime_cs", Type: arrow.PrimitiveTypes.Int64},
		{Name: "interval_s", Type: arrow.PrimitiveTypes.Float64, Nullable: true}, {Name: "reset", Type: arrow.FixedWidthTypes.Boolean}}
	for _, n := range sflowCounterNames {
		f = append(f, arrow.Field{Name: n, Type: arrow.PrimitiveTypes.Int64, Nullable: true})
	}
	for _, n := range sflowCounterNames {
		f = append(f, arrow.Field{Name: n + "_counter", Type: arrow.PrimitiveTypes.Int64})
	}
	return arrow.NewSchema(f, nil)
}

func sflowCountersRecord(rows []sflowCounterRow) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, sflowCountersSchema())
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.TimestampBuilder).Append(arrow.Timestamp(r.TimeMs))
		b.Field(1).(*array.StringBuilder).Append(r.Exporter)
		b.Field(2).(*array.Int64Builder).Append(int64(r.IfIndex))
		b.Field(3).(*array.StringBuilder).Append(r.IfName) // the port name record's, "" unknown (as SNMP's before its inventory)
		b.Field(4).(*array.Int64Builder).Append(r.SpeedMbps)
		b.Field(5).(*array.Int32Builder).Append(r.Oper)
		b.Field(6).(*array.Int64Builder).Append(r.UptimeCs)
		if r.HasInterval {
			b.Field(7).(*array.Float64Builder).Append(r.Interval)
		} else {
			b.Field(7).AppendNull()
		}
		b.Field(8).(*array.BooleanBuilder).Append(r.Reset)
		for i := range sflowCounterNames {
			if r.HasDelta[i] {
				b.Field(9 + i).(*array.Int64Builder).Append(r.Delta[i])
			} else {
				b.Field(9 + i).AppendNull()
			}
			b.Field(17 + i).(*array.Int64Builder).Append(int64(r.Raw[i])) // modulo 2^64, as signed (store.py)
		}
	}
	return b.NewRecordBatch()
}

func sflowHealthSchema() *arrow.Schema {
	i64 := arrow.PrimitiveTypes.Int64
	str := arrow.BinaryTypes.String
	return arrow.NewSchema([]arrow.Field{tsField("interval_start"), tsField("interval_end"),
		{Name: "agent", Type: str}, {Name: "sub_agent", Type: i64}, {Name: "senders", Type: str},
		{Name: "datagrams", Type: i64}, {Name: "lost", Type: i64}, {Name: "restarts", Type: i64},
		{Name: "reordered", Type: i64}, {Name: "flow_samples", Type: i64}, {Name: "counter_samples", Type: i64},
		{Name: "discard_samples", Type: i64}, {Name: "other_samples", Type: i64}, {Name: "agent_drops", Type: i64},
		{Name: "samples_per_s", Type: arrow.PrimitiveTypes.Float64}, {Name: "sampling_rates", Type: str},
		{Name: "bad", Type: i64}, {Name: "bad_reasons", Type: str}}, nil)
}

// joinCounts renders {key: n} as "key=n, ..." sorted by key.
func joinCounts(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func sflowHealthRecord(agents []*SFlowAgent, endMs int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, sflowHealthSchema())
	defer b.Release()
	for _, a := range agents {
		iv := a.Interval
		secs := float64(endMs-iv.StartMs) / 1000
		samples := iv.Samples
		senders := make([]string, 0, len(iv.Senders))
		for s := range iv.Senders {
			senders = append(senders, s)
		}
		sort.Strings(senders)
		rates := make([]int, 0, len(iv.Rates))
		for r := range iv.Rates {
			n, _ := strconv.Atoi(r)
			rates = append(rates, n)
		}
		sort.Ints(rates)
		rs := make([]string, len(rates))
		for i, r := range rates {
			rs[i] = strconv.Itoa(r)
		}
		var bad uint64
		for _, n := range iv.Bad {
			bad += n
		}
		b.Field(0).(*array.TimestampBuilder).Append(arrow.Timestamp(iv.StartMs))
		b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(endMs))
		b.Field(2).(*array.StringBuilder).Append(a.Agent)
		b.Field(3).(*array.Int64Builder).Append(int64(a.SubAgent))
		b.Field(4).(*array.StringBuilder).Append(strings.Join(senders, " "))
		for i, v := range []uint64{iv.Datagrams, iv.Lost, iv.Restarts, iv.Reordered, iv.FlowSamples, iv.CountSamples,
			iv.DiscardSamples, iv.OtherSamples, iv.AgentDrops} {
			b.Field(5 + i).(*array.Int64Builder).Append(int64(v))
		}
		sps := 0.0
		if secs > 0 {
			sps = float64(samples) / secs
		}
		b.Field(14).(*array.Float64Builder).Append(sps)
		b.Field(15).(*array.StringBuilder).Append(strings.Join(rs, ","))
		b.Field(16).(*array.Int64Builder).Append(int64(bad))
		b.Field(17).(*array.StringBuilder).Append(joinCounts(iv.Bad))
	}
	return b.NewRecordBatch()
}

// writeParquet commits one record batch as DIR/name by a rename from a hidden temporary file.
func writeParquet(dir, name string, rec arrow.RecordBatch) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+name+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	tbl := array.NewTableFromRecords(rec.Schema(), []arrow.RecordBatch{rec})
	defer tbl.Release()
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd))
	err = pqarrow.WriteTable(tbl, f, 1<<20, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if cerr := f.Close(); err == nil && !errors.Is(cerr, os.ErrClosed) { // pqarrow closes its sink
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

func utcDay(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02") }

// safeName: an address as a file name (IPv6 ':' as '_'), as collectors/snmp/store.py names them.
func safeName(addr string) string { return strings.ReplaceAll(addr, ":", "_") }

// snmpPolled: the exporters the SNMP poller polls (its interfaces.json); their counters come from SNMP.
func snmpPolled(path string) map[string]bool {
	out := map[string]bool{}
	if path == "" {
		return out
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	var doc struct {
		Exporters map[string]json.RawMessage `json:"exporters"`
	}
	if json.Unmarshal(data, &doc) == nil {
		for e := range doc.Exporters {
			out[e] = true
		}
	}
	return out
}

// flushLake writes the pending counter rows (a file per agent and day) and one health
// row per agent seen in the interval, then starts the next interval. lake "" keeps them
// in memory only (counted in sflow.json). File names come from the rows (the first row's
// time, the interval's start): after a crash between a file and the state's save, the
// same rows are written again under the same name, replacing the file, never twice.
func (st *SFlowTapState) flushLake(lake, snmpFile string, now time.Time) error {
	endMs := now.UnixMilli()
	if lake == "" {
		st.Pending = nil
		return nil
	}
	polled := snmpPolled(snmpFile)
	type part struct{ exporter, day string }
	groups := map[part][]sflowCounterRow{}
	var order []part
	for _, r := range st.Pending {
		if polled[r.Exporter] {
			st.SkippedSNMP++
			continue
		}
		k := part{r.Exporter, utcDay(r.TimeMs)}
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	var keep []sflowCounterRow
	var firstErr error
	for _, k := range order {
		rows := groups[k]
		rec := sflowCountersRecord(rows)
		err := writeParquet(filepath.Join(lake, "interface_counters", "date="+k.day),
			fmt.Sprintf("sflow_%s-%d.parquet", safeName(k.exporter), rows[0].TimeMs), rec)
		rec.Release()
		if err != nil {
			keep = append(keep, rows...)
			if firstErr == nil {
				firstErr = fmt.Errorf("interface counters of %s: %w", k.exporter, err)
			}
		}
	}
	st.Pending = keep
	var active []*SFlowAgent
	keys := make([]string, 0, len(st.Agents))
	for k := range st.Agents {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	startMs := endMs
	for _, k := range keys {
		if a := st.Agents[k]; a.Interval != nil && a.Interval.Datagrams > 0 {
			active = append(active, a)
			startMs = min(startMs, a.Interval.StartMs)
		}
	}
	if len(active) > 0 {
		rec := sflowHealthRecord(active, endMs)
		err := writeParquet(filepath.Join(lake, "sflow_agent_health", "date="+utcDay(startMs)),
			fmt.Sprintf("sflow-%d.parquet", startMs), rec)
		rec.Release()
		if err != nil {
			return fmt.Errorf("sFlow agent health: %w", err)
		}
		for _, a := range active {
			a.Interval = newInterval(endMs)
		}
	}
	return firstErr
}
