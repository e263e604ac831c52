package main

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ShipOptions are the flags of `ship` and `serve`.
type ShipOptions struct {
	Kafka           KafkaConf
	FlowsTopic      string
	LedgerTopic     string
	Spool           string
	SchemaFile      string
	Fingerprint     string
	TxnID           string
	StateFile       string
	QuarantineDir   string
	LockFile        string
	Poll            time.Duration
	Linger          time.Duration
	MaxBuffered     int
	Compression     string
	TxnTimeout      time.Duration
	DeliveryTimeout time.Duration
	ConnectTimeout  time.Duration
	DeleteAfterShip bool
	Force           bool
	Pending         bool
	Throttle        int // flows/s per file, 0 = unlimited (tests use it to be killed mid-file)
	Events          bool
	CPUProfile      string
	SpoolWarnBytes  int64
	BatchBytes      int
	SamplingFile    string // JSON settings from flowlake.toml (collectors/sampling.py)
	Times           TimeRules
	FlowQuarantine  string // flows with impossible times go here, one JSON lines file per nfcapd file
	TapDir          string // the sampling tap's output (rates.jsonl, fp/)
	Health          HealthOptions
	Format          string // "arrow": FlowBatch messages (format 2); "avro": one record per flow (1)
	FlowsPerMessage int
	BodyCodec       string // arrow: "zstd" or "lz4" message bodies
}

// closed nfcapd files: nfcapd.YYYYMMDDhhmm[ss], and .recoveredPID for files of a killed
// nfcapd (collectors/nfcapd.py renames them); nfcapd.current.* is still being written
var closedName = regexp.MustCompile(`^nfcapd\.(\d{12}(\d{2})?)(\.recovered\d+)?$`)

func parseShipFlags(args []string, serve bool) (*ShipOptions, []string, error) {
	name := "ship"
	if serve {
		name = "serve"
	}
	fset := flag.NewFlagSet(name, flag.ContinueOnError)
	o := &ShipOptions{}
	brokers := fset.String("brokers", "127.0.0.1:9092", "Kafka bootstrap servers, comma separated")
	fset.StringVar(&o.Kafka.SecurityProto, "security-protocol", "PLAINTEXT", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
	fset.StringVar(&o.Kafka.SASLMechanism, "sasl-mechanism", "PLAIN", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (password from $FLOWLAKE_KAFKA_SASL_PASSWORD)")
	fset.StringVar(&o.Kafka.SASLUser, "sasl-username", "", "SASL user")
	fset.StringVar(&o.Kafka.CAFile, "ssl-cafile", "", "CA bundle for TLS")
	fset.StringVar(&o.FlowsTopic, "topic", "flows.v1", "flows topic")
	fset.StringVar(&o.LedgerTopic, "ledger-topic", "flowlake.ledger", "ledger topic (compacted)")
	fset.StringVar(&o.Spool, "spool", "", "nfcapd output directory; ledger keys and source_file are paths below it")
	fset.StringVar(&o.SchemaFile, "schema", "", "Avro schema JSON of the FLOW record (flowlake ship writes it)")
	fset.StringVar(&o.Fingerprint, "fingerprint", "", "CRC-64-AVRO fingerprint of the schema, 16 hex digits")
	fset.StringVar(&o.TxnID, "transactional-id", "", "Kafka transactional.id (default: derived from the spool path)")
	fset.StringVar(&o.StateFile, "state", "", "counters JSON for `flowlake status` (written atomically)")
	fset.StringVar(&o.QuarantineDir, "quarantine", "", "where corrupt spool files are moved with a .reason file")
	fset.StringVar(&o.LockFile, "lock", "", "lock file: one shipper per spool (default: beside --state)")
	fset.DurationVar(&o.Poll, "poll", time.Second, "spool polling interval (serve)")
	fset.DurationVar(&o.Linger, "linger", 20*time.Millisecond, "producer linger")
	fset.IntVar(&o.MaxBuffered, "max-buffered", 65536, "records buffered before Produce blocks")
	fset.IntVar(&o.BatchBytes, "batch-bytes", 1<<20, "max bytes of one record batch (the broker's message.max.bytes must allow it)")
	fset.StringVar(&o.Format, "format", "arrow", "message format: arrow (FlowBatch, many flows per message) or avro (one record per flow, format 1)")
	fset.IntVar(&o.FlowsPerMessage, "flows-per-message", 16384, "arrow: at most this many flows per Kafka message")
	fset.StringVar(&o.BodyCodec, "message-compression", "zstd", "arrow: zstd (smaller) or lz4 (less CPU) message bodies")
	fset.StringVar(&o.Compression, "compression", "lz4", "lz4, zstd, snappy, gzip or none")
	fset.DurationVar(&o.TxnTimeout, "txn-timeout", 5*time.Minute, "transaction timeout (one file must ship within it)")
	fset.DurationVar(&o.DeliveryTimeout, "delivery-timeout", 2*time.Minute, "give up a file's transaction when Kafka does not ack for this long (retried later)")
	fset.DurationVar(&o.ConnectTimeout, "connect-timeout", 30*time.Second, "one connection attempt's limit (ship gives up, serve retries with backoff)")
	fset.Int64Var(&o.SpoolWarnBytes, "spool-warn-bytes", 1<<30, "serve: log a WARNING while unshipped files exceed this many bytes")
	fset.BoolVar(&o.DeleteAfterShip, "delete-after-ship", false, "delete a file from the spool once its transaction committed")
	fset.BoolVar(&o.Force, "force", false, "ship: ship files even if the ledger has them")
	fset.BoolVar(&o.Pending, "pending", false, "ship: every closed file under --spool not in the ledger")
	fset.IntVar(&o.Throttle, "throttle", 0, "testing: at most this many flows/s")
	fset.BoolVar(&o.Events, "events", false, "print progress events as JSON lines on stdout")
	fset.StringVar(&o.CPUProfile, "cpuprofile", "", "write a Go CPU profile here (benchmarks)")
	fset.StringVar(&o.SamplingFile, "sampling-settings", "", "per-exporter sampling settings (JSON, written by flowlake from flowlake.toml)")
	fset.StringVar(&o.TapDir, "tap-dir", "", "the sampling tap's directory: announced rates and per-record fingerprints")
	fset.DurationVar(&o.Times.MaxFuture, "max-future", time.Hour, "a flow ending this long after it arrived is quarantined")
	fset.DurationVar(&o.Times.MaxAge, "max-age", 0, "a flow starting this long before it arrived is quarantined (0: no bound)")
	fset.StringVar(&o.FlowQuarantine, "flow-quarantine", "", "where flows with impossible times go (default: beside --quarantine, in flows/)")
	addHealthFlags(fset, &o.Health)
	if err := fset.Parse(args); err != nil {
		return nil, nil, err
	}
	o.Kafka.Brokers = strings.Split(*brokers, ",")
	o.Kafka.SASLPassword = os.Getenv("FLOWLAKE_KAFKA_SASL_PASSWORD")
	if o.Spool == "" {
		return nil, nil, fmt.Errorf("%s: --spool DIR is required", name)
	}
	if o.Format != "arrow" && o.Format != "avro" {
		return nil, nil, fmt.Errorf("%s: --format %q: want arrow or avro", name, o.Format)
	}
	if o.BodyCodec != "zstd" && o.BodyCodec != "lz4" {
		return nil, nil, fmt.Errorf("%s: --message-compression %q: want zstd or lz4", name, o.BodyCodec)
	}
	if o.SchemaFile == "" || o.Fingerprint == "" {
		return nil, nil, fmt.Errorf("%s: --schema FILE and --fingerprint HEX are required (`flowlake ship` passes them)", name)
	}
	abs, err := filepath.Abs(o.Spool)
	if err != nil {
		return nil, nil, err
	}
	o.Spool = abs
	if o.TxnID == "" {
		sum := sha1.Sum([]byte(abs))
		o.TxnID = "flowlake-shipper-" + hex.EncodeToString(sum[:6])
	}
	if o.FlowQuarantine == "" && o.QuarantineDir != "" {
		o.FlowQuarantine = filepath.Join(filepath.Dir(o.QuarantineDir), "flows")
	}
	if o.LockFile == "" {
		dir := filepath.Dir(o.StateFile)
		if o.StateFile == "" {
			dir = os.TempDir()
		}
		o.LockFile = filepath.Join(dir, o.TxnID+".lock")
	}
	if serve && fset.NArg() > 0 {
		return nil, nil, fmt.Errorf("serve takes no files (it watches --spool)")
	}
	if !serve && fset.NArg() == 0 && !o.Pending {
		return nil, nil, fmt.Errorf("ship: give files or --pending")
	}
	return o, fset.Args(), nil
}

// Counters are written to the state file for `flowlake status`.
type Counters struct {
	PID               int    `json:"pid"`
	State             string `json:"state"`
	Spool             string `json:"spool"`
	FilesShipped      uint64 `json:"files_shipped"`
	FlowsShipped      uint64 `json:"flows_shipped"`
	PacketsShipped    uint64 `json:"packets_shipped"`
	BytesShipped      uint64 `json:"bytes_shipped"`
	FilesQuarantined  uint64 `json:"files_quarantined"`
	FilesPending      int    `json:"files_pending"`
	SpoolBytesPending int64  `json:"spool_bytes_pending"`
	LastFile          string `json:"last_file"`
	LastError         string `json:"last_error"`
	LastErrorAt       string `json:"last_error_at"`
	UpdatedAt         string `json:"updated_at"`
	// per exporter: flows by how their sampling rate was decided, unknown rates, rates in use
	Sampling map[string]*ExporterSamplingCounts `json:"sampling"`
	// per exporter: flows whose times were corrected / quarantined, by reason
	Times map[string]*ExporterTimeCounts `json:"times"`
	// per exporter: records completed from flowlake's own decode of what nfcapd lost (gaps.go)
	OwnDecode map[string]*ExporterDecodeCounts `json:"own_decode"`
	// files that waited for the sampling taps to read their datagrams (watermark.go)
	TapWait TapWait `json:"tap_wait"`
}

// ExporterTimeCounts are one exporter's corrected and quarantined flows by reason.
type ExporterTimeCounts struct {
	Corrected   map[string]uint64 `json:"corrected"`
	Quarantined map[string]uint64 `json:"quarantined"`
}

func countTime(m map[string]*ExporterTimeCounts, exporter, reason string, quarantined bool, n uint64) {
	c := m[exporter]
	if c == nil {
		c = &ExporterTimeCounts{Corrected: map[string]uint64{}, Quarantined: map[string]uint64{}}
		m[exporter] = c
	}
	if quarantined {
		c.Quarantined[reason] += n
	} else {
		c.Corrected[reason] += n
	}
}

// Shipper ships files, one Kafka transaction each.
type Shipper struct {
	o       *ShipOptions
	enc     *Encoder
	batch   *BatchEncoder // nil: one Avro record per flow
	parts   int           // partitions of the flows topic
	cl      *kgo.Client
	ledger  map[string]LedgerEntry
	count   Counters
	events  *json.Encoder
	eventMu sync.Mutex
	res     *Resolver
	origin  string         // ledger entries of this kind count in its state ("" live, "import")
	copyBad bool           // quarantine a copy and leave the file (import: the archive is the operator's)
	health  *healthTracker // nil: no health rows (health.go)
}

func now() string { return time.Now().UTC().Format(time.RFC3339Nano) }

func (s *Shipper) event(v map[string]any) {
	if s.events == nil {
		return
	}
	s.eventMu.Lock()
	defer s.eventMu.Unlock()
	_ = s.events.Encode(v)
}

func (s *Shipper) saveState() {
	if s.o.StateFile == "" {
		return
	}
	s.count.UpdatedAt = now()
	data, _ := json.MarshalIndent(&s.count, "", "  ")
	tmp := s.o.StateFile + ".tmp"
	_ = os.MkdirAll(filepath.Dir(s.o.StateFile), 0o755)
	if err := os.WriteFile(tmp, data, 0o644); err == nil {
		_ = os.Rename(tmp, s.o.StateFile) // atomic for readers
	}
}

func (s *Shipper) loadState() {
	if s.o.StateFile == "" {
		return
	}
	if data, err := os.ReadFile(s.o.StateFile); err == nil {
		_ = json.Unmarshal(data, &s.count) // counters continue across restarts
	}
	s.count.PID = os.Getpid()
	s.count.Spool = s.o.Spool
}

func (s *Shipper) fail(err error) {
	s.count.LastError = err.Error()
	s.count.LastErrorAt = now()
	log.Printf("ERROR %v", err)
}

// relName is the ledger key and source_file: the path below the spool, or the
// absolute path for a file outside it.
func (s *Shipper) relName(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	if rel, err := filepath.Rel(s.o.Spool, abs); err == nil && !strings.HasPrefix(rel, "..") {
		return filepath.ToSlash(rel)
	}
	return abs
}

// connect (re)creates the producer, fences predecessors and reads the ledger.
func (s *Shipper) connect(ctx context.Context) error {
	if s.cl != nil {
		s.cl.Close()
		s.cl = nil
	}
	cl, err := newProducer(ctx, &s.o.Kafka, s.o.TxnID, s.o)
	if err != nil {
		return err
	}
	parts, err := ensureTopics(ctx, cl, s.o.FlowsTopic, s.o.LedgerTopic)
	if err != nil {
		cl.Close()
		return err
	}
	if err := s.health.checkTopic(ctx, cl); err != nil {
		cl.Close()
		return err
	}
	s.parts = parts
	barrier, err := writeBarrier(ctx, cl, s.o.LedgerTopic, s.o.TxnID)
	if err != nil {
		cl.Close()
		return fmt.Errorf("ledger barrier: %v", err)
	}
	ledger, err := readLedger(ctx, &s.o.Kafka, s.o.LedgerTopic, barrier)
	if err != nil {
		cl.Close()
		return err
	}
	s.cl, s.ledger = cl, ledger
	// Totals over the spool's whole life (not this process's) come from the ledger.
	s.count.FilesShipped, s.count.FlowsShipped, s.count.PacketsShipped, s.count.BytesShipped = 0, 0, 0, 0
	for _, e := range ledger {
		if e.Origin != s.origin { // the live shipper and `import` each count their own
			continue
		}
		s.count.FilesShipped++
		s.count.FlowsShipped += e.Flows
		s.count.PacketsShipped += e.Packets
		s.count.BytesShipped += e.Bytes
	}
	return nil
}

// errKafka marks failures of Kafka (retry later) as opposed to a bad file.
type errKafka struct{ err error }

func (e errKafka) Error() string { return "kafka: " + e.err.Error() }
func (e errKafka) Unwrap() error { return e.err }

const recordChunk = 4096

// fileID says under which ledger key a file ships, what its flows carry as
// source_file and what its ledger record holds besides the totals. A spool file is
// known by its path below the spool (shipFile); `import` knows archive files by
// their content (import.go).
type fileID struct {
	Key    string      // ledger key
	Source string      // source_file of its flows, and the name in events and logs
	Read   string      // the file to decode, when not the file itself (import: nfdump's rewrite)
	Entry  LedgerEntry // extra ledger fields (content hash, origin, ...)
	// optional: OnFlow sees every flow shipped; Seal runs once the file is read, before
	// its ledger record, and may rename the key or refuse the file (the transaction aborts)
	OnFlow func(*Flow)
	Seal   func(id *fileID, st *Stats) error
}

// shipFile sends one file's flows and its ledger entry in one transaction.
func (s *Shipper) shipFile(ctx context.Context, path string) (*Stats, error) {
	name := s.relName(path)
	return s.shipAs(ctx, path, fileID{Key: name, Source: name})
}

// shipAs ships a file under the identity id: its flows and its ledger record in one transaction.
func (s *Shipper) shipAs(ctx context.Context, path string, id fileID) (*Stats, error) {
	name := id.Key
	srcFile := EncodeSourceFile(id.Source)
	read := path
	if id.Read != "" {
		read = id.Read
	}
	if err := s.cl.BeginTransaction(); err != nil {
		return nil, errKafka{err}
	}
	var (
		prodErr  error
		errOnce  sync.Once
		failed   = make(chan struct{})
		slab     []byte
		recs     []kgo.Record
		started  = time.Now()
		lastNote = started
	)
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			errOnce.Do(func() { prodErr = err; close(failed) })
		}
	}
	s.res.Counts = map[string]*ExporterSamplingCounts{}
	if info, err := os.Stat(path); err == nil { // the spool file as nfcapd closed it (import: the archive)
		waitForTaps(s.res.dir, info.ModTime(), name, &s.count.TapWait)
	}
	s.res.reset()
	var packets, bytes, shipped uint64
	times := map[string]*ExporterTimeCounts{}
	tally := timeTally{m: times}
	var rejected []byte // JSON lines of quarantined flows, written once the file committed
	emit := s.batchEmitter(ctx, id.Source, promise)
	if s.batch != nil {
		s.batch.Start(s.enc, s.parts)
	}
	stats, readErr := ReadFileWith(read, s.res.Complete, func(f *Flow) error {
		if f.Seq%1024 == 0 { // a select per flow was 5 % of the importer's CPU (pprof)
			select {
			case <-failed:
				return errKafka{prodErr}
			case <-ctx.Done():
				return ctx.Err()
			default:
			}
		}
		s.res.Resolve(f)
		corrected, reject := s.o.Times.checkTimes(f)
		if reject == "" {
			reject = f.Reject
		}
		if corrected != "" {
			tally.add(f.Exporter, corrected)
		}
		if reject != "" {
			f.Dropped = true // not in the lake: not in its exporter's health row either
			countTime(times, f.Exporter.Addr, reject, true, 1)
			line := appendFlowJSON(nil, f, id.Source)
			rejected = append(append(append(rejected, line[:len(line)-2]...), `,"reason":`...), fmt.Sprintf("%q}\n", reject)...)
			return nil
		}
		shipped++
		packets += f.Packets
		bytes += f.Bytes
		if len(recs) == 0 {
			recs = make([]kgo.Record, recordChunk)
		}
		if cap(slab)-len(slab) < 1024+len(srcFile) { // a flow with every revision-3 field is up to ~500 bytes of Avro
			slab = make([]byte, 0, 1<<20)
		}
		hash := conversationHash(f)
		if s.batch != nil {
			if err := s.batch.Add(f, hash, id.Source, emit); err != nil {
				return err
			}
		} else {
			start := len(slab)
			slab = binary.BigEndian.AppendUint64(slab, hash)
			keyEnd := len(slab)
			slab = s.enc.Append(slab, f, srcFile)
			rec := &recs[0]
			recs = recs[1:]
			rec.Topic = s.o.FlowsTopic
			rec.Key = slab[start:keyEnd:keyEnd]
			rec.Value = slab[keyEnd:len(slab):len(slab)]
			s.cl.Produce(ctx, rec, promise)
		}
		if id.OnFlow != nil {
			id.OnFlow(f)
		}
		if s.o.Throttle > 0 && s.batch == nil { // FlowBatch: after each message (batchEmitter)
			time.Sleep(time.Second / time.Duration(s.o.Throttle))
		}
		if s.events != nil && (f.Seq+1)%100000 == 0 && time.Since(lastNote) > 200*time.Millisecond {
			lastNote = time.Now()
			s.event(map[string]any{"event": "progress", "file": id.Source, "flows": f.Seq + 1})
		}
		return nil
	})
	abort := func() {
		if s.batch != nil {
			s.batch.Abort() // its queued messages must not reach the producer after the abort
		}
		actx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.cl.AbortBufferedRecords(actx)
		_ = s.cl.EndTransaction(actx, kgo.TryAbort)
	}
	tally.flush()
	if readErr == nil && s.batch != nil {
		readErr = s.batch.Flush(emit)
	}
	if readErr != nil {
		abort()
		return nil, readErr
	}
	if s.health != nil { // the file's exporter health rows ride in its transaction
		s.health.prepare(id.Source, stats.Health) // named as its flows' source_file
		if err := s.health.produce(ctx, s.cl, promise); err != nil {
			abort()
			return nil, err
		}
	}
	// the lake's figures: packets and bytes after sampling resolution
	quarantined := stats.Flows - shipped
	stats.Flows, stats.Packets, stats.Bytes = shipped, packets, bytes
	if id.Seal != nil {
		if err := id.Seal(&id, stats); err != nil {
			abort()
			return nil, err
		}
		name = id.Key
	}
	entry := id.Entry
	entry.File, entry.Flows, entry.Packets, entry.Bytes, entry.ShippedAt = id.Source, stats.Flows, stats.Packets, stats.Bytes, now()
	entry.Quarantined = quarantined
	value, _ := json.Marshal(entry)
	s.cl.Produce(ctx, &kgo.Record{Topic: s.o.LedgerTopic, Key: []byte(name), Value: value}, promise)
	if err := s.cl.Flush(ctx); err != nil {
		abort()
		return nil, errKafka{err}
	}
	if prodErr != nil {
		abort()
		return nil, errKafka{prodErr}
	}
	if err := s.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		abort()
		return nil, errKafka{fmt.Errorf("commit: %v", err)}
	}
	s.ledger[name] = entry
	if s.count.Sampling == nil {
		s.count.Sampling = map[string]*ExporterSamplingCounts{}
	}
	MergeCounts(s.count.Sampling, s.res.Counts)
	if s.count.OwnDecode == nil {
		s.count.OwnDecode = map[string]*ExporterDecodeCounts{}
	}
	MergeDecodeCounts(s.count.OwnDecode, s.res.fix.Counts)
	if s.count.Times == nil {
		s.count.Times = map[string]*ExporterTimeCounts{}
	}
	for addr, c := range times {
		for reason, n := range c.Corrected {
			countTime(s.count.Times, addr, reason, false, n)
		}
		for reason, n := range c.Quarantined {
			countTime(s.count.Times, addr, reason, true, n)
		}
	}
	if len(rejected) > 0 && s.o.FlowQuarantine != "" {
		// one file per nfcapd file, replaced whole: a re-ship after a crash writes it again, never twice
		_ = os.MkdirAll(s.o.FlowQuarantine, 0o755)
		dst := filepath.Join(s.o.FlowQuarantine, strings.ReplaceAll(id.Source, "/", "_")+".jsonl")
		if err := os.WriteFile(dst+".tmp", rejected, 0o644); err == nil {
			_ = os.Rename(dst+".tmp", dst)
		}
		log.Printf("WARNING %s: %d flows with impossible times quarantined to %s", id.Source, quarantined, dst)
	}
	for _, k := range sortedKeys(s.res.Counts) {
		if c := s.res.Counts[k]; c.Unknown > 0 {
			log.Printf("WARNING %s: %d flows of exporter %s have an unknown sampling rate (sampling_rate 0, wire counts): "+
				"set [exporters.\"%s\"] sampling = N in flowlake.toml if it announces none", id.Source, c.Unknown, k, k)
		}
	}
	if s.health != nil {
		s.health.commit()
	}
	s.count.FilesShipped++
	s.count.FlowsShipped += stats.Flows
	s.count.PacketsShipped += stats.Packets
	s.count.BytesShipped += stats.Bytes
	s.count.LastFile = id.Source
	secs := time.Since(started).Seconds()
	s.event(map[string]any{"event": "shipped", "file": id.Source, "flows": stats.Flows, "packets": stats.Packets,
		"bytes": stats.Bytes, "seconds": secs})
	log.Printf("INFO shipped %s: %d flows, %d packets, %d bytes in %.2fs", id.Source, stats.Flows, stats.Packets, stats.Bytes, secs)
	if stats.Unfinished {
		log.Printf("WARNING %s was never closed by nfcapd (killed): shipped its %d complete blocks, dropped %d bytes of a partly written one",
			id.Source, stats.Blocks, stats.DroppedBytes)
	}
	if s.o.DeleteAfterShip {
		if err := os.Remove(path); err != nil {
			log.Printf("WARNING shipped %s but cannot delete it: %v", path, err)
		}
	}
	return stats, nil
}

// quarantine moves a bad spool file aside with a .reason file next to it.
func (s *Shipper) quarantine(path string, cause error) (reasonFile string) {
	s.count.FilesQuarantined++
	s.fail(fmt.Errorf("quarantined: %v", cause))
	s.event(map[string]any{"event": "quarantined", "file": s.relName(path), "error": cause.Error()})
	if s.o.QuarantineDir == "" {
		return ""
	}
	if err := os.MkdirAll(s.o.QuarantineDir, 0o755); err != nil {
		log.Printf("ERROR cannot create quarantine dir %s: %v", s.o.QuarantineDir, err)
		return ""
	}
	base := filepath.Base(path)
	dst := filepath.Join(s.o.QuarantineDir, base)
	for i := 1; ; i++ {
		if _, err := os.Stat(dst); errors.Is(err, fs.ErrNotExist) {
			break
		}
		dst = filepath.Join(s.o.QuarantineDir, fmt.Sprintf("%s.%d", base, i))
	}
	reason := fmt.Sprintf("file: %s\nquarantined_at: %s\nreason: %v\n", path, now(), cause)
	_ = os.WriteFile(dst+".reason", []byte(reason), 0o644)
	place := os.Rename
	if s.copyBad {
		place = copyFile
	}
	if err := place(path, dst); err != nil {
		log.Printf("ERROR cannot move %s to quarantine: %v", path, err)
	}
	return dst + ".reason"
}

// pendingFiles lists closed nfcapd files under the spool not in the ledger, oldest first.
func (s *Shipper) pendingFiles() ([]string, int64) {
	type item struct {
		stamp, path string
		size        int64
	}
	var items []item
	_ = filepath.WalkDir(s.o.Spool, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if p != s.o.Spool && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		m := closedName.FindStringSubmatch(d.Name())
		if m == nil {
			return nil
		}
		if _, done := s.ledger[s.relName(p)]; done {
			return nil
		}
		stamp := m[1]
		if len(stamp) == 12 {
			stamp += "00"
		}
		var size int64
		if info, err := d.Info(); err == nil {
			size = info.Size()
		}
		items = append(items, item{stamp, p, size})
		return nil
	})
	sort.Slice(items, func(i, j int) bool {
		if items[i].stamp != items[j].stamp {
			return items[i].stamp < items[j].stamp
		}
		return items[i].path < items[j].path
	})
	out := make([]string, len(items))
	var total int64
	for i, it := range items {
		out[i] = it.path
		total += it.size
	}
	return out, total
}

// lock takes an exclusive flock so two shippers never ship the same spool at once.
func lock(path string) (*os.File, error) {
	_ = os.MkdirAll(filepath.Dir(path), 0o755)
	fh, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock file %s: %v", path, err)
	}
	if err := syscall.Flock(int(fh.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		owner, _ := os.ReadFile(path)
		fh.Close()
		return nil, errLocked{strings.TrimSpace(string(owner)), path}
	}
	_ = fh.Truncate(0)
	_, _ = fh.WriteAt([]byte(fmt.Sprintf("%d\n", os.Getpid())), 0)
	return fh, nil
}

// startShipper does what every shipping command does first: load the encoder, take the
// lock, start the profile and the signal handling, load the counters; done undoes it.
func startShipper(o *ShipOptions) (s *Shipper, ctx context.Context, done func(), err error) {
	enc, err := LoadEncoder(o.SchemaFile, o.Fingerprint)
	if err != nil {
		return nil, nil, nil, err
	}
	lk, err := lock(o.LockFile)
	if err != nil {
		return nil, nil, nil, err
	}
	stopProfile, err := startProfile(o)
	if err != nil {
		lk.Close()
		return nil, nil, nil, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	res, err := NewResolver(o.SamplingFile, o.TapDir)
	if err != nil {
		stop()
		stopProfile()
		lk.Close()
		return nil, nil, nil, err
	}
	s = &Shipper{o: o, enc: enc, res: res}
	if s.health, err = newHealthTracker(o.Health); err != nil {
		stop()
		stopProfile()
		lk.Close()
		return nil, nil, nil, err
	}
	if o.Format == "arrow" {
		if s.batch, err = NewBatchEncoder(enc, o.FlowsPerMessage, o.BodyCodec); err != nil {
			stop()
			stopProfile()
			lk.Close()
			return nil, nil, nil, err
		}
	}
	if o.Events {
		s.events = json.NewEncoder(os.Stdout)
	}
	s.loadState()
	return s, ctx, func() { stop(); stopProfile(); lk.Close() }, nil
}

// errLocked: another process holds the lock (its pid is in the file).
type errLocked struct{ owner, path string }

func (e errLocked) Error() string {
	return fmt.Sprintf("another shipper (pid %s) holds %s and ships this spool; stop it first (flowlake down) or let it ship the files", e.owner, e.path)
}

// startProfile starts the CPU profile (--cpuprofile) and tunes the GC for shipping.
func startProfile(o *ShipOptions) (stop func(), err error) {
	// Flow records are short-lived but numerous: trade memory for fewer GC cycles.
	debug.SetGCPercent(400)
	if o.CPUProfile == "" {
		return func() {}, nil
	}
	fh, err := os.Create(o.CPUProfile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(fh); err != nil {
		return nil, err
	}
	return pprof.StopCPUProfile, nil
}

// parseCommand sets up logging and parses the flags; -h (help printed) gives a nil o.
func parseCommand(args []string, serve bool) (*ShipOptions, []string, error) {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds | log.LUTC)
	o, files, err := parseShipFlags(args, serve)
	if errors.Is(err, flag.ErrHelp) {
		return nil, nil, nil
	}
	return o, files, err
}

func cmdShip(args []string, serve bool) error {
	o, files, err := parseCommand(args, serve)
	if o == nil || err != nil {
		return err
	}
	s, ctx, done, err := startShipper(o)
	if err != nil {
		return err
	}
	defer done()
	if serve {
		return s.serve(ctx)
	}
	return s.shipOnce(ctx, files)
}

// connectOnce connects within --connect-timeout, for commands that give up (not serve).
func (s *Shipper) connectOnce(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, s.o.ConnectTimeout)
	defer cancel()
	if err := s.connect(cctx); err != nil {
		return fmt.Errorf("kafka %s: %v", strings.Join(s.o.Kafka.Brokers, ","), err)
	}
	return nil
}

func (s *Shipper) shipOnce(ctx context.Context, files []string) error {
	if err := s.connectOnce(ctx); err != nil {
		return err
	}
	defer s.cl.Close()
	s.count.State = "backfill"
	defer func() { s.count.State = "stopped"; s.saveState() }()
	inSpool := map[string]bool{}
	if s.o.Pending {
		pend, _ := s.pendingFiles()
		for _, p := range pend {
			inSpool[p] = true
		}
		files = append(pend, files...)
	}
	var shipped, skipped, failed int
	var flows uint64
	for _, f := range files {
		if ctx.Err() != nil {
			break
		}
		name := s.relName(f)
		if _, ok := s.ledger[name]; ok && !s.o.Force {
			skipped++
			s.event(map[string]any{"event": "skipped", "file": name, "reason": "already in the ledger"})
			continue
		}
		st, err := s.shipFile(ctx, f)
		switch {
		case err == nil:
			shipped++
			flows += st.Flows
		case IsCorrupt(err) && inSpool[f]:
			failed++
			s.quarantine(f, err)
		default:
			failed++
			s.fail(err)
			s.event(map[string]any{"event": "failed", "file": name, "error": err.Error()})
			var ke errKafka
			if errors.As(err, &ke) {
				s.saveState()
				return err // Kafka is unhappy: stop instead of failing every file
			}
		}
		s.saveState()
	}
	s.event(map[string]any{"event": "summary", "shipped": shipped, "skipped": skipped, "failed": failed, "flows": flows})
	s.saveState()
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted")
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d files failed", failed, len(files))
	}
	return nil
}

func (s *Shipper) serve(ctx context.Context) error {
	log.Printf("INFO serving spool %s -> %s (transactional.id %s)", s.o.Spool, s.o.FlowsTopic, s.o.TxnID)
	backoff := time.Second
	var lastWarn time.Time
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	for ctx.Err() == nil {
		if s.cl == nil {
			s.count.State = "connecting"
			s.saveState()
			cctx, cancel := context.WithTimeout(ctx, s.o.ConnectTimeout)
			err := s.connect(cctx)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				s.count.State = "waiting_for_kafka"
				if s.ledger != nil { // unknown until the ledger was read once
					files, pendingBytes := s.pendingFiles()
					s.count.FilesPending, s.count.SpoolBytesPending = len(files), pendingBytes
				}
				s.fail(fmt.Errorf("kafka %s: %v (retrying in %s)", strings.Join(s.o.Kafka.Brokers, ","), err, backoff))
				s.saveState()
				if !sleep(backoff) {
					break
				}
				backoff = min(2*backoff, 30*time.Second)
				continue
			}
			backoff = time.Second
			log.Printf("INFO ledger has %d files", len(s.ledger))
		}
		s.count.State = "running"
		files, pendingBytes := s.pendingFiles()
		s.count.FilesPending, s.count.SpoolBytesPending = len(files), pendingBytes
		if s.o.SpoolWarnBytes > 0 && pendingBytes > s.o.SpoolWarnBytes && time.Since(lastWarn) > time.Minute {
			lastWarn = time.Now()
			log.Printf("WARNING %d unshipped files hold %d bytes in %s (more than %d): Kafka too slow or down?",
				len(files), pendingBytes, s.o.Spool, s.o.SpoolWarnBytes)
		}
		s.saveState()
		for _, f := range files {
			if ctx.Err() != nil {
				break
			}
			var size int64
			if info, err := os.Stat(f); err == nil {
				size = info.Size()
			}
			_, err := s.shipFile(ctx, f)
			if err == nil {
				s.count.FilesPending--
				s.count.SpoolBytesPending -= size
				s.saveState()
				continue
			}
			if ctx.Err() != nil {
				break
			}
			if IsCorrupt(err) {
				s.quarantine(f, err)
				s.count.FilesPending--
				s.count.SpoolBytesPending -= size
				s.saveState()
				continue
			}
			var ke errKafka
			if errors.As(err, &ke) {
				s.fail(err)
				s.cl.Close() // reconnecting fences the half-done transaction away
				s.cl = nil
				s.count.State = "waiting_for_kafka"
				s.saveState()
				break
			}
			s.fail(err) // I/O trouble with this file: retried next poll
			s.saveState()
		}
		if !sleep(s.o.Poll) {
			break
		}
	}
	if s.cl != nil {
		s.cl.Close()
	}
	s.count.State = "stopped"
	s.saveState()
	log.Printf("INFO stopped")
	return nil
}
