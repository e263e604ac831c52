// Exporter health (issue 20): per exporter and nfcapd file, what the file itself says.
//
// nfcapd 1.7.1 (src/collector/collector.c FlushExporterStats) appends to every file it
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
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
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

// ---- Avro: a small generic encoder (a few rows per file, so speed does not matter) -----

type rowEncoder struct {
	header []byte
	fields []struct {
		name, typ string
		nullable  bool
	}
}

func newRowEncoder(schemaFile, fingerprintHex string, known map[string]any) (*rowEncoder, error) {
	data, err := os.ReadFile(schemaFile)
	if err != nil {
		return nil, fmt.Errorf("health schema file: %v", err)
	}
	fp, err := hex.DecodeString(fingerprintHex)
	if err != nil || len(fp) != 8 {
		return nil, fmt.Errorf("health fingerprint %q: want 16 hex digits (8 bytes)", fingerprintHex)
	}
	var schema struct {
		Fields []struct {
			Name string          `json:"name"`
			Type json.RawMessage `json:"type"`
		} `json:"fields"`
	}
	if err := json.Unmarshal(data, &schema); err != nil || len(schema.Fields) == 0 {
		return nil, fmt.Errorf("health schema %s: not a record schema (%v)", schemaFile, err)
	}
	enc := &rowEncoder{header: append([]byte{0xC3, 0x01}, fp...)}
	for _, f := range schema.Fields {
		t, nullable, err := avroType(f.Type)
		if err != nil {
			return nil, fmt.Errorf("health schema field %s: %v", f.Name, err)
		}
		if _, ok := known[f.Name]; !ok && !nullable {
			return nil, fmt.Errorf("health schema field %s (%s) is unknown to the shipper and not nullable: update collectors/shipper/health.go", f.Name, t)
		}
		enc.fields = append(enc.fields, struct {
			name, typ string
			nullable  bool
		}{f.Name, t, nullable})
	}
	return enc, nil
}

func (e *rowEncoder) encode(v map[string]any) ([]byte, error) {
	out := append([]byte(nil), e.header...)
	for _, f := range e.fields {
		val := v[f.name]
		if f.nullable {
			if val == nil {
				out = append(out, 0)
				continue
			}
			out = append(out, 2)
		}
		switch x := val.(type) {
		case int64:
			if f.typ != "long" && f.typ != "int" {
				return nil, fmt.Errorf("field %s: integer for Avro %s", f.name, f.typ)
			}
			out = appendLong(out, x)
		case float64:
			if f.typ != "double" {
				return nil, fmt.Errorf("field %s: float for Avro %s", f.name, f.typ)
			}
			out = binary.LittleEndian.AppendUint64(out, math.Float64bits(x))
		case string:
			out = appendString(out, []byte(x))
		case bool:
			b := byte(0)
			if x {
				b = 1
			}
			out = append(out, b)
		default:
			return nil, fmt.Errorf("field %s: no value for Avro %s", f.name, f.typ)
		}
	}
	return out, nil
}

// ---- across files: the shipper's memory of each exporter ----------------------------

// HealthOptions are the shipper's health flags (`flowlake ship` fills them in).
type HealthOptions struct {
	Topic, Schema, Fingerprint, State string
	SilentAfter, ForgetAfter          time.Duration
}

func addHealthFlags(fset *flag.FlagSet, o *HealthOptions) {
	fset.StringVar(&o.Topic, "health-topic", "", "exporter health topic (empty: no health rows)")
	fset.StringVar(&o.Schema, "health-schema", "", "Avro schema JSON of the ExporterHealth record")
	fset.StringVar(&o.Fingerprint, "health-fingerprint", "", "CRC-64-AVRO fingerprint of the health schema, 16 hex digits")
	fset.StringVar(&o.State, "health-state", "", "per-exporter state JSON for `flowlake status` (written atomically)")
	fset.DurationVar(&o.SilentAfter, "silent-after", 5*time.Minute, "an exporter without flows this long is flagged silent")
	fset.DurationVar(&o.ForgetAfter, "forget-after", 7*24*time.Hour, "exporters silent this long leave the state (its bound)")
}

// ExporterState is what the shipper remembers of one exporter (and status shows).
type ExporterState struct {
	Exporter          string          `json:"exporter"`
	ObservationDomain uint32          `json:"observation_domain"`
	Version           uint32          `json:"version"`
	FirstSeen         int64           `json:"first_seen_ms"` // interval_start of its first file
	LastSeen          int64           `json:"last_seen_ms"`  // latest flow arrival, 0 = no flow yet
	Files             uint64          `json:"files"`
	FlowsTotal        uint64          `json:"flows_total"`
	BytesTotal        uint64          `json:"bytes_total"`
	PacketsTotal      uint64          `json:"packets_total"`
	DatagramsTotal    uint64          `json:"datagrams_total"`
	SeqFailuresTotal  uint64          `json:"sequence_failures_total"`
	LastEnd           int64           `json:"last_interval_end_ms"`
	Last              json.RawMessage `json:"last_interval"` // the latest row (an archive's older files never replace it)
}

type healthState struct {
	UpdatedAt       string           `json:"updated_at"`
	SilentAfterS    float64          `json:"silent_after_seconds"`
	ForgetAfterS    float64          `json:"forget_after_seconds"`
	ExportersForgot uint64           `json:"exporters_forgotten"`
	Exporters       []*ExporterState `json:"exporters"`
}

type healthTracker struct {
	o       HealthOptions
	enc     *rowEncoder
	known   map[string]*ExporterState
	forgot  uint64
	pending []*ExporterHealth
}

func newHealthTracker(o HealthOptions) (*healthTracker, error) {
	if o.Topic == "" {
		return nil, nil
	}
	if o.Schema == "" || o.Fingerprint == "" {
		return nil, fmt.Errorf("--health-topic needs --health-schema and --health-fingerprint (`flowlake ship` passes them)")
	}
	enc, err := newRowEncoder(o.Schema, o.Fingerprint, (&ExporterHealth{}).values())
	if err != nil {
		return nil, err
	}
	t := &healthTracker{o: o, enc: enc, known: map[string]*ExporterState{}}
	t.load()
	return t, nil
}

// load continues from the state a previous shipper saved (last seen, totals).
func (t *healthTracker) load() {
	data, err := os.ReadFile(t.o.State)
	if t.o.State == "" || err != nil {
		return
	}
	var st healthState
	if json.Unmarshal(data, &st) == nil {
		t.forgot = st.ExportersForgot
		for _, e := range st.Exporters {
			t.known[fmt.Sprintf("%s/%d/%d", e.Exporter, e.ObservationDomain, e.Version)] = e
		}
	}
}

// checkTopic creates the health topic when missing (a stack upgraded while its broker
// ran: `flowlake up` creates topics only when it starts the broker).
func (t *healthTracker) checkTopic(ctx context.Context, cl *kgo.Client) error {
	if t == nil {
		return nil
	}
	adm := kadm.NewClient(cl)
	details, err := adm.ListTopics(ctx, t.o.Topic)
	if err != nil {
		return err
	}
	if d, ok := details[t.o.Topic]; ok && d.Err == nil {
		return nil
	}
	resp, err := adm.CreateTopic(ctx, 1, -1, nil, t.o.Topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating health topic %s: %v", t.o.Topic, err)
	}
	return nil
}

// prepare completes a file's rows (last seen across files, silent) without changing the
// memory: that happens in commit, once the file's transaction committed.
func (t *healthTracker) prepare(name string, rows []*ExporterHealth) {
	for _, r := range rows {
		r.SourceFile = name
		ref := r.IntervalStart
		if prev := t.known[r.key()]; prev != nil {
			ref = prev.FirstSeen
			if prev.LastSeen > 0 {
				ref = prev.LastSeen
			}
			if r.LastSeen == nil && prev.LastSeen > 0 {
				seen := prev.LastSeen
				r.LastSeen = &seen
			}
		}
		if r.LastSeen != nil && *r.LastSeen > ref {
			ref = *r.LastSeen
		}
		r.Silent = r.IntervalEnd-ref >= t.o.SilentAfter.Milliseconds()
	}
	t.pending = rows
}

// produce sends the prepared rows inside the open transaction.
func (t *healthTracker) produce(ctx context.Context, cl *kgo.Client, promise func(*kgo.Record, error)) error {
	for _, r := range t.pending {
		value, err := t.enc.encode(r.values())
		if err != nil {
			return fmt.Errorf("health row %s: %v", r.key(), err)
		}
		cl.Produce(ctx, &kgo.Record{Topic: t.o.Topic, Key: []byte(r.key()), Value: value}, promise)
	}
	return nil
}

// commit folds the committed file's rows into the memory and saves it for status.
func (t *healthTracker) commit() {
	var newest int64
	for _, r := range t.pending {
		e := t.known[r.key()]
		if e == nil {
			e = &ExporterState{Exporter: r.Exporter, ObservationDomain: r.ObservationDomain, Version: r.Version,
				FirstSeen: r.IntervalStart}
			t.known[r.key()] = e
		}
		if r.LastSeen != nil && *r.LastSeen > e.LastSeen {
			e.LastSeen = *r.LastSeen
		}
		e.Files++
		e.FlowsTotal += r.Flows
		e.BytesTotal += r.Bytes
		e.PacketsTotal += r.Packets
		e.DatagramsTotal += r.Datagrams
		e.SeqFailuresTotal += r.SeqFailures
		if r.IntervalEnd >= e.LastEnd || e.Last == nil {
			e.Last, _ = json.Marshal(r)
			e.LastEnd = r.IntervalEnd
		}
		newest = max(newest, r.IntervalEnd)
	}
	t.pending = nil
	for key, e := range t.known { // the bound: exporters silent longer than forget-after go
		if ref := max(e.LastSeen, e.FirstSeen); newest-ref > t.o.ForgetAfter.Milliseconds() {
			delete(t.known, key)
			t.forgot++
		}
	}
	t.save()
}

func (t *healthTracker) save() {
	if t.o.State == "" {
		return
	}
	st := healthState{UpdatedAt: now(), SilentAfterS: t.o.SilentAfter.Seconds(), ForgetAfterS: t.o.ForgetAfter.Seconds(),
		ExportersForgot: t.forgot, Exporters: make([]*ExporterState, 0, len(t.known))}
	for _, e := range t.known {
		st.Exporters = append(st.Exporters, e)
	}
	sort.Slice(st.Exporters, func(i, j int) bool {
		a, b := st.Exporters[i], st.Exporters[j]
		return fmt.Sprintf("%s/%d/%d", a.Exporter, a.ObservationDomain, a.Version) < fmt.Sprintf("%s/%d/%d", b.Exporter, b.ObservationDomain, b.Version)
	})
	data, _ := json.MarshalIndent(&st, "", "  ")
	_ = os.MkdirAll(filepath.Dir(t.o.State), 0o755)
	tmp := t.o.State + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err == nil {
		_ = os.Rename(tmp, t.o.State)
	}
}
