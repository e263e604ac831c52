// The shipper's side of exporter health: its flags, its memory of each exporter across
// files (last flow seen, silent, totals for `flowlake status`) and the rows' place in each
// file's Kafka transaction (see health.go for why they travel there).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

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
