// Exporter health (issue 20): per exporter and nfcapd file, what the file itself says.
//
// nfcapd 1.7.1 (nfdump collector.c, FlushExporterStats) appends to every file it
// closes an exporter stat record (type 8) with, per exporter sysid, the datagrams and flow
// records received and the sequence failures counted since the previous file, then resets
// them; exporter info (7) and sampler (15) records name the exporters and samplers. Layout:
//
//	type u16 | size u16 | stat_count u32 | stat_count x { sysid u32, sequence_failure u32, packets u64, flows u64 }
//
// Flows add what no record holds: counts and volumes after sampling, the rates applied,
// the record layouts decoded (one per data template: nfcapd 1.7.1 logs no template
// events, even with -v -v -v), and arrival (msecReceived) against flow end for clock skew.
//
// Transport: the rows go to Kafka (health.v1) in the same transaction as the file's flows
// and ledger entry. That is the simplest path that keeps exactly once: a file shipped
// twice after a crash had its first transaction aborted, health rows included, and the
// ingest (read_committed) lands health.v1 like flows.v1 with the same idempotent writer.
package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strconv"
	"strings"
)

// ---- per file: what the reader collects ----------------------------------------------

type healthAcc struct {
	flows, packets, bytes uint64
	lead                  int64 // max(time_end - received) over flows with an arrival time
	hasLead               bool
	lastRecv              int64
	layouts               map[uint64]uint8 // element mask -> NetFlow version
	lastLayout            uint64
	rates                 map[uint32]bool
	lastRate              uint32
	datagrams, seqFail    uint64
	samplers              []string
}

type fileHealth struct {
	acc  map[uint16]*healthAcc
	last *healthAcc
	lid  uint16
}

func (h *fileHealth) get(sysid uint16) *healthAcc {
	if h.last != nil && h.lid == sysid {
		return h.last
	}
	if h.acc == nil {
		h.acc = map[uint16]*healthAcc{}
	}
	a, ok := h.acc[sysid]
	if !ok {
		a = &healthAcc{layouts: map[uint64]uint8{}, rates: map[uint32]bool{}}
		h.acc[sysid] = a
	}
	h.last, h.lid = a, sysid
	return a
}

// flow adds one decoded flow (called for every flow: kept to a few compares and adds).
func (h *fileHealth) flow(f *Flow) {
	a := h.get(f.Exporter.SysID)
	a.flows++
	a.packets += f.Packets
	a.bytes += f.Bytes
	if f.Received > 0 {
		if lead := f.TimeEnd - f.Received; !a.hasLead || lead > a.lead {
			a.lead, a.hasLead = lead, true
		}
		if f.Received > a.lastRecv {
			a.lastRecv = f.Received
		}
	}
	if f.Layout != a.lastLayout || len(a.layouts) == 0 {
		a.layouts[f.Layout] = f.NfVersion
		a.lastLayout = f.Layout
	}
	if f.SamplingRate != a.lastRate || len(a.rates) == 0 {
		a.rates[f.SamplingRate] = true
		a.lastRate = f.SamplingRate
	}
}

func (h *fileHealth) exporterStats(rec []byte) error {
	if len(rec) < 8 {
		return fmt.Errorf("exporter stat record of %d bytes", len(rec))
	}
	n := int(binary.LittleEndian.Uint32(rec[4:]))
	if 8+24*n > len(rec) {
		return fmt.Errorf("exporter stat record of %d bytes cannot hold its %d entries", len(rec), n)
	}
	for i := 0; i < n; i++ {
		e := rec[8+24*i:]
		a := h.get(uint16(binary.LittleEndian.Uint32(e[0:])))
		a.seqFail += uint64(binary.LittleEndian.Uint32(e[4:]))
		a.datagrams += binary.LittleEndian.Uint64(e[8:])
	}
	return nil
}

func (h *fileHealth) sampler(sysid uint16, id int64, rate uint32) {
	a := h.get(sysid)
	a.samplers = append(a.samplers, fmt.Sprintf("%d=1:%d", id, rate))
}

// ExporterHealth is one row of lake/exporter_health (schemas/health.py).
type ExporterHealth struct {
	IntervalStart, IntervalEnd int64 // ms
	Exporter                   string
	ObservationDomain          uint32
	Version                    uint32
	Flows, Packets, Bytes      uint64
	Datagrams, SeqFailures     uint64
	Layouts, Samplers          []string
	Rates                      []uint32
	ClockSkew                  *int64
	LastSeen                   *int64 // this file's latest arrival; the shipper carries it across files
	Silent                     bool
	SourceFile                 string
	addrRaw                    []byte
}

// rows: one per exporter the file knows (info record, stat entry or flows).
func (h *fileHealth) rows(r *reader) []*ExporterHealth {
	start := r.stats.Created * 1000
	end := r.stats.ModTime
	if end < start || end-start > 86_400_000 { // a copied archive file: mtime says nothing
		end = start
	}
	ids := map[uint16]bool{}
	for id := range r.exporters {
		ids[id] = true
	}
	for id := range h.acc {
		ids[id] = true
	}
	out := make([]*ExporterHealth, 0, len(ids))
	for id := range ids {
		a := h.acc[id]
		if a == nil {
			a = &healthAcc{}
		}
		e := r.exporters[id]
		if e == nil {
			e = r.exporterFor(id)
		}
		row := &ExporterHealth{IntervalStart: start, IntervalEnd: max(end, a.lastRecv), Exporter: e.Addr,
			ObservationDomain: e.Domain, Version: e.Version, Flows: a.flows, Packets: a.packets, Bytes: a.bytes,
			Datagrams: a.datagrams, SeqFailures: a.seqFail, Samplers: a.samplers, addrRaw: e.addrRaw}
		for mask, ver := range a.layouts {
			row.Layouts = append(row.Layouts, layoutName(ver, mask))
			if row.Version == 0 {
				row.Version = uint32(ver)
			}
		}
		sort.Strings(row.Layouts)
		sort.Strings(row.Samplers)
		for rate := range a.rates {
			row.Rates = append(row.Rates, rate)
		}
		sort.Slice(row.Rates, func(i, j int) bool { return row.Rates[i] < row.Rates[j] })
		if a.hasLead {
			lead := a.lead
			row.ClockSkew = &lead
		}
		if a.lastRecv > 0 {
			seen := a.lastRecv
			row.LastSeen = &seen
		}
		out = append(out, row)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out
}

func layoutName(version uint8, mask uint64) string {
	var ids []string
	for m := mask; m != 0; m &= m - 1 {
		ids = append(ids, strconv.Itoa(bits.TrailingZeros64(m)))
	}
	return fmt.Sprintf("v%d:%s", version, strings.Join(ids, "."))
}

func (h *ExporterHealth) key() string {
	return fmt.Sprintf("%s/%d/%d", h.Exporter, h.ObservationDomain, h.Version)
}

// values names each field as schemas/health.py does (Avro encoding and JSON output).
func (h *ExporterHealth) values() map[string]any {
	secs := math.Max(float64(h.IntervalEnd-h.IntervalStart)/1000, 1)
	rates := make([]string, len(h.Rates))
	for i, r := range h.Rates {
		rates[i] = strconv.FormatUint(uint64(r), 10)
	}
	v := map[string]any{
		"interval_start": h.IntervalStart, "interval_end": h.IntervalEnd, "exporter": h.Exporter,
		"observation_domain": int64(h.ObservationDomain), "version": int64(h.Version),
		"flows": int64(h.Flows), "packets": int64(h.Packets), "bytes": int64(h.Bytes),
		"flows_per_s": float64(h.Flows) / secs, "bytes_per_s": float64(h.Bytes) / secs,
		"datagrams": int64(h.Datagrams), "sequence_failures": int64(h.SeqFailures),
		"templates": int64(len(h.Layouts)), "template_layouts": strings.Join(h.Layouts, " "),
		"samplers": int64(len(h.Samplers)), "sampler_rates": strings.Join(h.Samplers, " "),
		"sampling_rates": strings.Join(rates, ","), "clock_skew_ms": nil, "last_seen": nil,
		"silent": h.Silent, "source_file": h.SourceFile,
	}
	if h.ClockSkew != nil {
		v["clock_skew_ms"] = *h.ClockSkew
	}
	if h.LastSeen != nil {
		v["last_seen"] = *h.LastSeen
	}
	return v
}

func (h *ExporterHealth) MarshalJSON() ([]byte, error) { return json.Marshal(h.values()) }
