// flowlake-shipper: nfcapd files -> Kafka, one Avro record per flow, each file in
// one Kafka transaction together with its ledger entry (exactly once per file).
//
//	flowlake-shipper stats FILE...           per-file totals as JSON (like nfdump -I)
//	flowlake-shipper dump FILE...            flows as JSON lines (for cross-checks)
//	flowlake-shipper ship [flags] FILE...    ship given files (skips those in the ledger)
//	flowlake-shipper ship --pending [flags]  ship every closed file in the spool not yet shipped
//	flowlake-shipper serve [flags]           watch the spool and ship files as nfcapd closes them
//	flowlake-shipper import [flags] PATH...  ship archive files and trees, known by content (import.go)
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"
)

const usage = `usage: flowlake-shipper COMMAND [flags] [FILE...]

commands:
  stats FILE...   per-file flows/packets/bytes as JSON, like nfdump -I
  dump [--sampling-settings F] [--tap-dir D] [--decode-counts F] FILE...
                  flows as JSON lines, fields named as the FLOW schema; with the sampling
                  flags, rates and packets/bytes resolved as shipped, and what nfcapd lost
                  completed from the tap's own decode (gaps.go; counts per exporter to F)
  ship FILE...    ship files to Kafka (skips files already in the ledger; --force reships)
  ship --pending  ship every closed nfcapd file under --spool not yet in the ledger
  serve           watch --spool and ship each file nfcapd closes, until SIGTERM
  tap             read a copy of every datagram sent to the collector port (raw socket) and
                  record the sampling each exporter announces (see tap.go), until SIGTERM
  sflow-tap       read a copy of every sFlow datagram sent to sfcapd's port (raw socket) and
                  count per agent and sub-agent: datagrams, lost (sequence gaps), restarts,
                  samples by kind, sampling rates, malformed (see sflowtap.go), until SIGTERM
  import PATH...  ship nfcapd files and archive trees beside the live shipper (flowlake import)

run "flowlake-shipper ship -h" for the Kafka flags (the Python wrapper, "flowlake ship",
fills them in from flowlake.toml).
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "stats":
		err = cmdStats(os.Args[2:])
	case "dump":
		err = cmdDump(os.Args[2:])
	case "ship":
		err = cmdShip(os.Args[2:], false)
	case "serve":
		err = cmdShip(os.Args[2:], true)
	case "tap":
		err = cmdTap(os.Args[2:])
	case "sflow-tap":
		err = cmdSFlowTap(os.Args[2:])
	case "import":
		err = cmdImport(os.Args[2:])
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "flowlake-shipper: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "flowlake-shipper: %v\n", err)
		os.Exit(1)
	}
}

func cmdStats(files []string) error {
	if len(files) == 0 {
		return fmt.Errorf("stats: give at least one nfcapd file")
	}
	out := json.NewEncoder(os.Stdout)
	failed := 0
	for _, f := range files {
		st, err := ReadFile(f, nil)
		if err != nil {
			fmt.Fprintf(os.Stderr, "flowlake-shipper: %v\n", err)
			failed++
			continue
		}
		if err := out.Encode(st); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d files could not be read", failed, len(files))
	}
	return nil
}

func cmdDump(args []string) error {
	fs := flag.NewFlagSet("dump", flag.ContinueOnError)
	settings := fs.String("sampling-settings", "", "resolve sampling with these settings (JSON)")
	tapDir := fs.String("tap-dir", "", "resolve sampling with the tap's records in this directory")
	decodeCounts := fs.String("decode-counts", "", "with --tap-dir: write the records completed from the tap's own decode per exporter (JSON) here")
	decoded := map[string]*ExporterDecodeCounts{}
	checkTimes := fs.Bool("check-times", false, "check times against arrival as shipping does: corrected and quarantined flows say why")
	var rules TimeRules
	fs.DurationVar(&rules.MaxFuture, "max-future", time.Hour, "with --check-times: a flow ending this long after it arrived is quarantined")
	fs.DurationVar(&rules.MaxAge, "max-age", 0, "with --check-times: a flow starting this long before it arrived is quarantined (0: no bound)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	files := fs.Args()
	var res *Resolver
	if *settings != "" || *tapDir != "" {
		var err error
		if res, err = NewResolver(*settings, *tapDir); err != nil {
			return err
		}
	}
	if len(files) == 0 {
		return fmt.Errorf("dump: give at least one nfcapd file")
	}
	w := bufio.NewWriterSize(os.Stdout, 1<<20)
	defer w.Flush()
	var buf []byte
	for _, file := range files {
		if res != nil {
			res.reset()
		}
		var pre func(*Flow)
		if res != nil {
			pre = res.Complete
		}
		_, err := ReadFileWith(file, pre, func(f *Flow) error {
			if res != nil {
				res.Resolve(f)
			}
			buf = appendFlowJSON(buf[:0], f, file)
			if *checkTimes {
				corrected, reject := rules.checkTimes(f)
				if reject == "" {
					reject = f.Reject
				}
				buf = appendFlowJSON(buf[:0], f, file)
				buf = buf[:len(buf)-2]
				buf = strconv.AppendQuote(append(buf, `,"time_corrected":`...), corrected)
				buf = strconv.AppendQuote(append(buf, `,"quarantine_reason":`...), reject)
				buf = append(buf, '}', '\n')
			}
			_, err := w.Write(buf)
			return err
		})
		if err != nil {
			return err
		}
		if res != nil {
			MergeDecodeCounts(decoded, res.fix.Counts)
		}
	}
	if *decodeCounts != "" {
		data, _ := json.Marshal(decoded)
		return os.WriteFile(*decodeCounts, data, 0o644)
	}
	return nil
}

// optionalJSON: the revision-3 fields in schema order, for dump's JSON lines.
var optionalJSON = []struct {
	name string
	id   fieldID
}{
	{"flow_direction", fFlowDir}, {"next_hop", fNextHop}, {"bgp_next_hop", fBGPNextHop},
	{"src_mask", fSrcMask}, {"dst_mask", fDstMask}, {"src_mac", fSrcMAC}, {"dst_mac", fDstMAC},
	{"mpls_labels", fMPLSLabels}, {"ingress_vrf", fIngressVRF}, {"egress_vrf", fEgressVRF},
	{"forwarding_status", fFwdStatus}, {"icmp_type", fICMPType}, {"icmp_code", fICMPCode},
	{"src_addr_nat", fSrcAddrNAT}, {"dst_addr_nat", fDstAddrNAT}, {"src_port_nat", fSrcPortNAT},
	{"dst_port_nat", fDstPortNAT}, {"nat_event", fNATEvent}, {"biflow_half", fBiflowHalf},
}

func appendFlowJSON(b []byte, f *Flow, file string) []byte {
	num := func(name string, v int64) {
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		b = strconv.AppendInt(b, v, 10)
	}
	str := func(name string, v []byte) {
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		b = strconv.AppendQuote(b, string(v))
	}
	var tmp [48]byte
	b = append(b, `{"time_start":`...)
	b = strconv.AppendInt(b, f.TimeStart, 10)
	num("time_end", f.TimeEnd)
	str("exporter", []byte(f.Exporter.Addr))
	num("input_if", int64(f.InputIf))
	num("output_if", int64(f.OutputIf))
	str("src_addr", appendAddr(tmp[:0], &f.SrcAddr, f.V6))
	str("dst_addr", appendAddr(tmp[:0], &f.DstAddr, f.V6))
	num("src_port", int64(f.SrcPort))
	num("dst_port", int64(f.DstPort))
	num("proto", int64(f.Proto))
	num("tcp_flags", int64(f.TCPFlags))
	num("tos", int64(f.Tos))
	num("packets", int64(f.Packets))
	num("bytes", int64(f.Bytes))
	num("sampling_rate", int64(f.SamplingRate))
	num("src_as", int64(f.SrcAS))
	num("dst_as", int64(f.DstAS))
	str("source_file", []byte(file))
	num("file_seq", f.Seq)
	num("src_vlan", int64(f.SrcVlan))
	num("dst_vlan", int64(f.DstVlan))
	null := func(name string) {
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, `":null`...)
	}
	for _, o := range optionalJSON {
		switch {
		case o.id == fMPLSLabels:
			if f.NMPLS == 0 {
				null(o.name)
				continue
			}
			b = append(append(append(b, ',', '"'), o.name...), `":[`...)
			for k, v := range f.MPLS[:f.NMPLS] {
				if k > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendUint(b, uint64(v), 10)
			}
			b = append(b, ']')
		case o.id.isString():
			if s, ok := flowOptString(tmp[:0], f, o.id); ok {
				str(o.name, s)
			} else {
				null(o.name)
			}
		default:
			if v, ok := flowOptInt(f, o.id); ok {
				num(o.name, v)
			} else {
				null(o.name)
			}
		}
	}
	return append(b, '}', '\n')
}
