// Sampling resolution: every flow leaves the shipper with flowlake's `sampling_rate` and
// packets/bytes scaled by it, whatever nfcapd did (never unscaled, never twice).
//
// Order (first that applies):
//  1. force_sampling of the exporter in flowlake.toml ([exporters."ADDR"], "*" = all)
//     (sFlow records from sfcapd: else the sample's own rate, which sfcapd applied)
//  2. the tap's fingerprint of this very record (tap.go): the rate its sampler had when
//     the record arrived, resolved in datagram order, so mid-file changes are exact
//  3. the tap's rate history (rates.jsonl) at the flow's receive time: the exporter-wide
//     rate, or its only sampler (fingerprints pruned, or the tap missed the datagram)
//  4. the rate nfcapd applied itself (files from an nfcapd run without -s -1: archives)
//  5. sampling = N of the exporter in flowlake.toml (routers that announce nothing),
//     else nfcapd's own -s N if the file was written with one
//  6. unknown: the record names a sampler never announced, or several could apply:
//     sampling_rate 0, wire counts, counted per exporter in status
//  7. nothing announced, nothing configured: [sampling] unannounced (default 1; 0 = unknown)
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// SamplingSettings come from flowlake.toml (collectors/sampling.py writes them as JSON).
type SamplingSettings struct {
	Exporters   map[string]ExporterSampling `json:"exporters"`
	Unannounced uint32                      `json:"unannounced"`
}

// ExporterSampling is one [exporters."ADDR"] table.
type ExporterSampling struct {
	Sampling uint32 `json:"sampling"`
	Force    uint32 `json:"force_sampling"`
}

// ExporterSamplingCounts are per-exporter figures for `flowlake status`.
type ExporterSamplingCounts struct {
	Flows   uint64            `json:"flows"`
	Unknown uint64            `json:"unknown"`
	Sources map[string]uint64 `json:"sources"` // forced, sflow, announced, history, nfcapd, configured, unannounced, unknown
	Rates   map[string]uint64 `json:"rates"`   // rate -> flows
	rates   map[uint32]uint64 // while resolving (folded into Rates by MergeCounts)
}

type fpKey struct {
	minute int64 // ms since epoch / 60000
	fp     uint64
}

// exporterInfo is what Resolve needs of an exporter, computed once per file.
type exporterInfo struct {
	ip     netip.Addr
	ipOK   bool
	key    string
	set    ExporterSampling
	counts *ExporterSamplingCounts
	tapped bool // the tap saw this exporter sample: look its records up
}

// Resolver decides each flow's rate. Not safe for concurrent use.
type Resolver struct {
	dir      string
	settings SamplingSettings
	history  map[string][]RateChange // "addr/domain" -> changes in time order
	histMod  time.Time
	fps      map[fpKey]uint64   // rate | count<<32: one rate for every record with this fingerprint
	fpMixed  map[fpKey][]uint32 // the rare fingerprint seen with different rates, in order
	loaded   map[int64]bool
	info     map[*Exporter]*exporterInfo
	Counts   map[string]*ExporterSamplingCounts
	agents   sflowAgentMap // sFlow: the agent address behind each UDP sender (sflowtap.go)
	fix      completer     // gaps.go: the tap's corrections of what nfcapd lost
}

// NewResolver reads the settings file (may be "") and the tap's directory (may be "").
func NewResolver(settingsFile, tapDir string) (*Resolver, error) {
	r := &Resolver{dir: tapDir, settings: SamplingSettings{Unannounced: 1}, Counts: map[string]*ExporterSamplingCounts{}}
	if settingsFile != "" {
		data, err := os.ReadFile(settingsFile)
		if err != nil {
			return nil, fmt.Errorf("sampling settings: %v", err)
		}
		if err := json.Unmarshal(data, &r.settings); err != nil {
			return nil, fmt.Errorf("sampling settings %s: %v", settingsFile, err)
		}
	}
	r.reset()
	return r, nil
}

// reset drops fingerprints loaded for the previous file and rereads the rate history
// when the tap appended to it.
func (r *Resolver) reset() {
	r.fps, r.fpMixed = map[fpKey]uint64{}, map[fpKey][]uint32{}
	r.loaded, r.info = map[int64]bool{}, map[*Exporter]*exporterInfo{}
	r.fix.reset(r.dir)
	if r.dir == "" {
		return
	}
	r.agents.load(filepath.Join(r.dir, "sflow.json"))
	path := filepath.Join(r.dir, "rates.jsonl")
	info, err := os.Stat(path)
	if err != nil || (r.history != nil && !info.ModTime().After(r.histMod)) {
		return
	}
	r.histMod = info.ModTime()
	r.history = map[string][]RateChange{}
	for _, c := range readRateChanges(path) {
		k := fmt.Sprintf("%s/%d", c.Exporter, c.Domain)
		r.history[k] = append(r.history[k], c)
	}
}

func (r *Resolver) setting(addr string) ExporterSampling {
	if s, ok := r.settings.Exporters[addr]; ok {
		return s
	}
	return r.settings.Exporters["*"]
}

// loadMinute reads one minute of the tap's fingerprints (once per shipped file).
func (r *Resolver) loadMinute(minute int64) {
	if r.loaded[minute] || r.dir == "" {
		return
	}
	r.loaded[minute] = true
	name := time.UnixMilli(minute * 60_000).UTC().Format("200601021504")
	fh, err := os.Open(filepath.Join(r.dir, "fp", name+".bin"))
	if err != nil {
		return
	}
	defer fh.Close()
	br := bufio.NewReaderSize(fh, 1<<16)
	var rec [12]byte
	for {
		if _, err := io.ReadFull(br, rec[:]); err != nil {
			return
		}
		k := fpKey{minute, binary.LittleEndian.Uint64(rec[:])}
		rate := binary.LittleEndian.Uint32(rec[8:])
		if mixed, ok := r.fpMixed[k]; ok {
			r.fpMixed[k] = append(mixed, rate)
		} else if v, ok := r.fps[k]; !ok {
			r.fps[k] = uint64(rate) | 1<<32
		} else if uint32(v) == rate {
			r.fps[k] = v + 1<<32
		} else {
			list := make([]uint32, 0, v>>32+1)
			for i := uint64(0); i < v>>32; i++ {
				list = append(list, uint32(v))
			}
			r.fpMixed[k] = append(list, rate)
			delete(r.fps, k)
		}
	}
}

// fromTap pops the rate the tap recorded for this record: its minute, then the minutes
// beside it (the tap and nfcapd read the same datagram at nearly the same instant).
func (r *Resolver) fromTap(f *Flow, fp uint64) (uint32, bool) {
	for _, d := range [3]int64{0, -1, 1} {
		m := f.Received/60_000 + d
		r.loadMinute(m)
		k := fpKey{m, fp}
		if v, ok := r.fps[k]; ok {
			if v>>32 <= 1 {
				delete(r.fps, k)
			} else {
				r.fps[k] = v - 1<<32
			}
			return uint32(v), true
		}
		if q := r.fpMixed[k]; len(q) > 0 {
			r.fpMixed[k] = q[1:]
			return q[0], true
		}
	}
	return 0, false
}

// fromHistory: the rate in force at the flow's receive time, when it is unambiguous.
func (r *Resolver) fromHistory(key string, at int64) (uint32, bool) {
	changes := r.history[key]
	if len(changes) == 0 {
		return 0, false
	}
	cur := make(map[int64]uint32, 4)
	for _, c := range changes {
		if c.T > at {
			break
		}
		cur[c.Sampler] = c.Rate
	}
	if rate, ok := cur[samplerExporterWide]; ok {
		return rate, true
	}
	if len(cur) == 1 {
		for _, rate := range cur {
			return rate, true
		}
	}
	return 0, len(cur) > 1 // several samplers: unknown without the record's own id
}

// Resolve sets f.SamplingRate and scales f.Packets/f.Bytes; f.SamplingRate holds the
// rate nfcapd applied on entry (1 when it applied none).
func (r *Resolver) Resolve(f *Flow) {
	if f.NfVersion&nfVersionSFlow != 0 {
		r.agents.apply(f.Exporter) // before anything keyed by the exporter's address
	}
	applied := f.SamplingRate
	if applied == 0 {
		applied = 1
	}
	wireP, wireB := f.Packets/uint64(applied), f.Bytes/uint64(applied)
	ex := r.exporterInfo(f.Exporter)
	set := ex.set
	rate, source := uint32(0), ""
	unknown := false
	if set.Force > 0 {
		rate, source = set.Force, "forced"
	}
	if source == "" && f.NfVersion&nfVersionSFlow != 0 {
		// sFlow: every sample carries its rate (1 included) and sfcapd applied it; the tap
		// reads NetFlow/IPFIX only, its history must not reach an sFlow agent's records
		rate, source = applied, "sflow"
	}
	if source == "" && ex.tapped {
		if ex.ipOK {
			fp := fingerprint(ex.ip, f.Exporter.Domain, f.V6, flowAddr16(&f.SrcAddr, f.V6), flowAddr16(&f.DstAddr, f.V6),
				f.SrcPort, f.DstPort, f.Proto, f.InputIf, f.OutputIf, wireP, wireB)
			if got, ok := r.fromTap(f, fp); ok {
				if got > 0 {
					rate, source = got, "announced"
				} else {
					unknown = true
				}
			}
		}
		if source == "" && !unknown {
			if got, ok := r.fromHistory(ex.key, f.Received); ok {
				if got > 0 {
					rate, source = got, "history"
				} else {
					unknown = true
				}
			}
		}
	}
	if source == "" && applied > 1 && !f.NfcapdSetting {
		rate, source = applied, "nfcapd"
	}
	if source == "" && set.Sampling > 0 {
		rate, source = set.Sampling, "configured"
	}
	if source == "" && f.NfcapdSetting && f.SamplingRate > 1 {
		// nfcapd's own -s N (archives, old spools): the operator's default then. -s -1
		// on IPFIX wrote 2^32-1 (nfcapd 1.7.1's arithmetic on -1): it meant 1:1.
		rate, source = f.SamplingRate, "nfcapd -s"
		if rate >= 1<<31 {
			rate = 1
		}
	}
	if source == "" && !unknown && r.settings.Unannounced > 0 {
		rate, source = r.settings.Unannounced, "unannounced"
	}
	if source == "" {
		rate, source = 0, "unknown"
	}
	f.SamplingRate = rate
	mult := uint64(rate)
	if mult == 0 {
		mult = 1 // unknown: the lake keeps the wire counts, sampling_rate 0 says so
	}
	f.Packets, f.Bytes = wireP*mult, wireB*mult
	c := ex.counts
	c.Flows++
	c.Sources[source]++
	c.rates[rate]++
	if rate == 0 {
		c.Unknown++
	}
}

func (r *Resolver) exporterInfo(e *Exporter) *exporterInfo {
	if x := r.info[e]; x != nil {
		return x
	}
	x := &exporterInfo{key: fmt.Sprintf("%s/%d", e.Addr, e.Domain), set: r.setting(e.Addr)}
	x.tapped = len(r.history[x.key]) > 0
	if ip, err := netip.ParseAddr(e.Addr); err == nil {
		x.ip, x.ipOK = ip, true
	}
	c := r.Counts[e.Addr]
	if c == nil {
		c = &ExporterSamplingCounts{Sources: map[string]uint64{}, Rates: map[string]uint64{}, rates: map[uint32]uint64{}}
		r.Counts[e.Addr] = c
	}
	x.counts = c
	r.info[e] = x
	return x
}

// flowAddr16 returns the address as the tap hashes it: IPv4 in the last 4 bytes.
func flowAddr16(a *[16]byte, v6 bool) *[16]byte {
	if v6 {
		return a
	}
	var out [16]byte
	copy(out[12:], a[:4])
	return &out
}

// MergeCounts adds one file's counts into the running totals (kept across files).
func MergeCounts(into map[string]*ExporterSamplingCounts, from map[string]*ExporterSamplingCounts) {
	for k, c := range from {
		t := into[k]
		if t == nil {
			t = &ExporterSamplingCounts{Sources: map[string]uint64{}, Rates: map[string]uint64{}}
			into[k] = t
		}
		t.Flows += c.Flows
		t.Unknown += c.Unknown
		for s, n := range c.Sources {
			t.Sources[s] += n
		}
		for s, n := range c.Rates {
			t.Rates[s] += n
		}
		for rate, n := range c.rates {
			t.Rates[fmt.Sprint(rate)] += n
		}
	}
}

// sortedKeys is for stable output in logs.
func sortedKeys(m map[string]*ExporterSamplingCounts) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
