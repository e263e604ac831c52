package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// KafkaConf holds what every client of ours needs.
type KafkaConf struct {
	Brokers       []string
	SecurityProto string // PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
	SASLMechanism string // PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
	SASLUser      string
	SASLPassword  string // from $FLOWLAKE_KAFKA_SASL_PASSWORD, never a flag (ps shows flags)
	CAFile        string
}

func (k *KafkaConf) baseOpts() ([]kgo.Opt, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(k.Brokers...), kgo.ClientID("flowlake-shipper")}
	proto := strings.ToUpper(k.SecurityProto)
	if strings.HasSuffix(proto, "SSL") {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if k.CAFile != "" {
			pem, err := os.ReadFile(k.CAFile)
			if err != nil {
				return nil, fmt.Errorf("kafka CA file: %v", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("kafka CA file %s: no PEM certificates in it", k.CAFile)
			}
			cfg.RootCAs = pool
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if strings.HasPrefix(proto, "SASL") {
		var mech sasl.Mechanism
		switch strings.ToUpper(k.SASLMechanism) {
		case "PLAIN":
			mech = plain.Auth{User: k.SASLUser, Pass: k.SASLPassword}.AsMechanism()
		case "SCRAM-SHA-256":
			mech = scram.Auth{User: k.SASLUser, Pass: k.SASLPassword}.AsSha256Mechanism()
		case "SCRAM-SHA-512":
			mech = scram.Auth{User: k.SASLUser, Pass: k.SASLPassword}.AsSha512Mechanism()
		default:
			return nil, fmt.Errorf("kafka SASL mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", k.SASLMechanism)
		}
		opts = append(opts, kgo.SASL(mech))
	}
	return opts, nil
}

// LedgerEntry is the value of a ledger record; the key is the file path below the spool.
type LedgerEntry struct {
	File      string `json:"file"`
	Flows     uint64 `json:"flows"`
	Packets   uint64 `json:"packets"`
	Bytes     uint64 `json:"bytes"`
	ShippedAt string `json:"shipped_at"`
	// flows of the file not shipped: impossible times (lake/quarantine/flows/)
	Quarantined uint64 `json:"quarantined,omitempty"`
	// set by `import` (archive files are known by content, not by path)
	Origin     string            `json:"origin,omitempty"`
	SHA256     string            `json:"sha256,omitempty"`       // of the file's bytes
	FlowDigest string            `json:"flows_sha256,omitempty"` // of its decoded flows (the ledger key)
	Size       int64             `json:"size,omitempty"`
	MTime      int64             `json:"mtime_ns,omitempty"`
	Days       map[string]uint64 `json:"days,omitempty"` // flows per UTC day of time_start
}

// barrierPrefix marks the ledger records a shipper writes at start-up to know when it
// has read everything committed before it (readers of the ledger skip these keys).
const barrierPrefix = "__barrier__/"

// ensureTopics creates the compacted ledger topic if missing, checks the flows
// topic exists (the broker does not auto-create topics) and returns its partition count.
func ensureTopics(ctx context.Context, cl *kgo.Client, flowsTopic, ledgerTopic string) (int, error) {
	adm := kadm.NewClient(cl)
	details, err := adm.ListTopics(ctx, flowsTopic, ledgerTopic)
	if err != nil {
		return 0, err
	}
	if d, ok := details[ledgerTopic]; !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		compact := "compact"
		resp, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &compact}, ledgerTopic)
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return 0, fmt.Errorf("creating ledger topic %s: %v", ledgerTopic, err)
		}
		if resp.Err != nil && !errors.Is(resp.Err, kerr.TopicAlreadyExists) {
			return 0, fmt.Errorf("creating ledger topic %s: %v", ledgerTopic, resp.Err)
		}
	} else if d.Err != nil {
		return 0, fmt.Errorf("ledger topic %s: %v", ledgerTopic, d.Err)
	}
	if d, ok := details[flowsTopic]; !ok || d.Err != nil {
		why := "missing"
		if ok {
			why = d.Err.Error()
		}
		return 0, fmt.Errorf("flows topic %s: %s (start the stack with `flowlake up`, which creates it)", flowsTopic, why)
	}
	return len(details[flowsTopic].Partitions), nil
}

// readLedger returns every file in the ledger, reading with isolation read_committed
// up to a barrier record this shipper committed itself just before: everything
// committed earlier (by us or a fenced predecessor) is then known.
func readLedger(ctx context.Context, k *KafkaConf, topic, barrier string) (map[string]LedgerEntry, error) {
	opts, err := k.baseOpts()
	if err != nil {
		return nil, err
	}
	opts = append(opts,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DisableFetchSessions(),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	out := map[string]LedgerEntry{}
	for {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading ledger topic %s: %v", topic, err)
		}
		var ferr error
		fetches.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("ledger %s[%d]: %v", t, p, err) })
		if ferr != nil {
			return nil, ferr
		}
		done := false
		fetches.EachRecord(func(r *kgo.Record) {
			key := string(r.Key)
			if strings.HasPrefix(key, barrierPrefix) {
				if string(r.Value) == barrier {
					done = true
				}
				return
			}
			if r.Value == nil { // tombstone: the file was forgotten (reship allowed)
				delete(out, key)
				return
			}
			var e LedgerEntry
			if json.Unmarshal(r.Value, &e) == nil {
				out[key] = e
			}
		})
		if done {
			return out, nil
		}
	}
}

// newProducer makes the transactional producer; loading the producer id fences any
// earlier shipper with the same transactional id and aborts its open transaction.
func newProducer(ctx context.Context, k *KafkaConf, txnID string, o *ShipOptions) (*kgo.Client, error) {
	opts, err := k.baseOpts()
	if err != nil {
		return nil, err
	}
	codec := kgo.Lz4Compression()
	compression := o.Compression
	if o.Format == "arrow" {
		compression = "none" // FlowBatch bodies are zstd-compressed by Arrow already
	}
	switch compression {
	case "none":
		codec = kgo.NoCompression()
	case "zstd":
		codec = kgo.ZstdCompression()
	case "snappy":
		codec = kgo.SnappyCompression()
	case "gzip":
		codec = kgo.GzipCompression()
	}
	opts = append(opts,
		kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(o.TxnTimeout),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(codec),
		kgo.ProducerLinger(o.Linger),
		kgo.MaxBufferedRecords(o.MaxBuffered),
		kgo.ProducerBatchMaxBytes(int32(o.BatchBytes)),
		kgo.RecordDeliveryTimeout(o.DeliveryTimeout),
	)
	if o.Format == "arrow" {
		// FlowBatch messages name their partition (a conversation's flows stay in one).
		opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	if _, _, err := cl.ProducerID(ctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("kafka %s: cannot initialise the transactional producer: %v", strings.Join(k.Brokers, ","), err)
	}
	return cl, nil
}

// writeBarrier commits a unique barrier record so readLedger knows where "now" is.
func writeBarrier(ctx context.Context, cl *kgo.Client, topic, txnID string) (string, error) {
	barrier := fmt.Sprintf("%s/%d/%d", txnID, os.Getpid(), time.Now().UnixNano())
	if err := cl.BeginTransaction(); err != nil {
		return "", err
	}
	rec := &kgo.Record{Topic: topic, Key: []byte(barrierPrefix + txnID), Value: []byte(barrier)}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		_ = cl.EndTransaction(ctx, kgo.TryAbort)
		return "", err
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return "", err
	}
	return barrier, nil
}
