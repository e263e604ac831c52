// The sFlow tap (issue 35): what sfcapd 1.7.1 does not keep of the datagrams. sfcapd owns
// the sFlow port and writes the UDP sender as the exporter, counts no sequence gaps and
// keeps no datagram count; this reads a copy of every datagram on that port through a raw
// socket (as the sampling tap does for NetFlow) and keeps, per agent address and
// sub-agent id, the sender it came from, datagrams, datagrams lost (gaps in the datagram
// sequence numbers), sequence restarts (an agent rebooting), samples by kind, the sampling
// rates of its flow samples and the samples its own buffers dropped. Malformed datagrams
// are counted with the reason. State: DIR/sflow.json, rewritten every second. Discarded
// packet samples (0:5), which sfcapd skips, become flow records in nfcapd files of the
// tap's own in the spool (sflowdrops.go).
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// SFlowAgent is one agent/sub-agent line of sflow.json.
type SFlowAgent struct {
	Agent          string            `json:"agent"`     // the agent address inside the datagram
	SubAgent       uint32            `json:"sub_agent"` // sub-agent id
	Senders        map[string]uint64 `json:"senders"`   // UDP source address -> datagrams (what sfcapd names the exporter)
	Datagrams      uint64            `json:"datagrams"`
	Lost           uint64            `json:"lost"`      // datagrams missing from the sequence (gaps, less those that came late)
	Restarts       uint64            `json:"restarts"`  // sequence numbers that went back: the agent restarted
	Reordered      uint64            `json:"reordered"` // a number at most 64 behind the last one (late) or equal (duplicate)
	FlowSamples    uint64            `json:"flow_samples"`
	CountSamples   uint64            `json:"counter_samples"`
	OtherSamples   uint64            `json:"other_samples"`                    // formats sfcapd skips (enterprise or unknown)
	AgentDrops     uint64            `json:"agent_drops"`                      // samples the agent itself dropped (flow samples' drops field, summed)
	Rates          map[string]uint64 `json:"rates"`                            // sampling rate -> flow samples
	IfCounters     uint64            `json:"if_counter_records"`               // generic interface counters records read (sflowlake.go)
	DiscardSamp    uint64            `json:"discard_samples"`                  // discarded packet samples (0:5) and flow samples whose output is a discard
	Discards       map[string]uint64 `json:"discards,omitempty"`               // forwarding_status (IE 89, 128-191 dropped) -> discard samples
	Internal       uint64            `json:"internal_input"`                   // flow samples whose input is "internal" (0x3FFFFFFF: the agent's own packets)
	Multiple       uint64            `json:"multiple_output"`                  // flow samples sent to several interfaces (output format 2)
	OutCodes       uint64            `json:"output_codes_fixed"`               // discard/multiple flow samples with a correction for sfcapd's record (gaps.go)
	OutUnfixed     uint64            `json:"output_codes_unfixed,omitempty"`   // such samples without one: no parseable sampled header, or a write error
	DropRecords    uint64            `json:"drop_records"`                     // discarded packet samples written as flow records (sflowdrops.go)
	DropsUnwritten uint64            `json:"drop_records_unwritten,omitempty"` // readable ones not written: no --drops-dir, or a write error
	DropNotesLost  uint64            `json:"drop_notifications_lost"`          // drop notifications the agent did not send (the samples' drops field, summed)
	Bad            map[string]uint64 `json:"bad"`                              // reason -> samples or datagrams of this agent that could not be read
	Interval       *sflowInterval    `json:"interval"`                         // since the last health row
	LastSeq        uint32            `json:"last_sequence"`
	LastUptime     uint32            `json:"last_uptime_ms"`
	LastSeen       string            `json:"last_seen"`
}

// SFlowTapState is DIR/sflow.json.
type SFlowTapState struct {
	PID       int                    `json:"pid"`
	Port      int                    `json:"port"`
	Datagrams uint64                 `json:"datagrams"`
	Malformed map[string]uint64      `json:"malformed"` // reason -> datagrams
	Agents    map[string]*SFlowAgent `json:"agents"`    // "agent/sub-agent"
	UpdatedAt string                 `json:"updated_at"`
	// interface counters (sflowlake.go): the last raw values per "agent/sub-agent/ifIndex"
	CounterState map[string]*sflowIfPrev `json:"counter_state"`
	SkippedSNMP  uint64                  `json:"counter_rows_skipped_snmp"` // rows not written: SNMP polls that agent
	Pending      []sflowCounterRow       `json:"pending_counter_rows"`      // read, not yet in the lake
	fix          *fixWriter              // DIR/sflowfix: corrections of discard/multiple outputs (nil: none written)
	drops        *dropWriter             // --drops-dir: discarded packet samples as flow records (nil: not written)
}

// sflowReorderWindow: a sequence number at most this far behind the last one, from an
// agent whose uptime did not go back by sflowRebootMs or more, is a late datagram; anything
// else behind is the agent restarting its numbering.
const (
	sflowRestart       = "sequence restart (the agent restarted its datagram numbering)"
	sflowReorderWindow = 64
	sflowRebootMs      = 1000
)

// sflowDatagram counts one datagram (p: the UDP payload) from sender.
func (st *SFlowTapState) sflowDatagram(sender netip.Addr, p []byte, now time.Time) {
	st.Datagrams++
	var a *SFlowAgent
	agentBad := func(reason string) {
		if a != nil {
			a.Bad[reason]++
			a.Interval.Bad[reason]++
		}
	}
	bad := func(reason string) {
		st.Malformed[reason]++
		agentBad(reason)
	}
	if len(p) < 8 {
		bad("truncated header")
		return
	}
	if v := binary.BigEndian.Uint32(p); v != 5 {
		bad("not sFlow v5 (version " + strconv.FormatUint(uint64(v), 10) + ")")
		return
	}
	var agent netip.Addr
	off := 8
	switch binary.BigEndian.Uint32(p[4:]) {
	case 1:
		if len(p) < off+4 {
			bad("truncated header")
			return
		}
		agent = netip.AddrFrom4([4]byte(p[off : off+4]))
		off += 4
	case 2:
		if len(p) < off+16 {
			bad("truncated header")
			return
		}
		agent = netip.AddrFrom16([16]byte(p[off : off+16]))
		off += 16
	default:
		bad("unknown agent address type")
		return
	}
	if len(p) < off+16 {
		bad("truncated header")
		return
	}
	sub := binary.BigEndian.Uint32(p[off:])
	seq := binary.BigEndian.Uint32(p[off+4:])
	uptime := binary.BigEndian.Uint32(p[off+8:])
	n := binary.BigEndian.Uint32(p[off+12:])
	off += 16
	key := fmt.Sprintf("%s/%d", agent, sub)
	a = st.Agents[key]
	if a == nil {
		a = &SFlowAgent{Agent: agent.String(), SubAgent: sub, Senders: map[string]uint64{}, Rates: map[string]uint64{}}
		st.Agents[key] = a
	}
	if a.Bad == nil {
		a.Bad = map[string]uint64{}
	}
	if a.Interval == nil {
		a.Interval = newInterval(now.UnixMilli())
	}
	iv := a.Interval
	lost, restarts, reordered := a.Lost, a.Restarts, a.Reordered
	if a.Datagrams > 0 {
		switch d := seq - a.LastSeq; {
		case d == 0: // a duplicate
			a.Reordered++
		case d > 1<<31 && a.LastSeq-seq <= sflowReorderWindow && a.LastUptime-uptime < sflowRebootMs:
			a.Reordered++ // late: the gap it left was counted lost
			if a.Lost > 0 {
				a.Lost--
			}
		case d > 1<<31:
			a.Restarts++
			agentBad(sflowRestart) // not malformed: counted per agent only
			st.agentRestarted(a)
		case d > 1:
			a.Lost += uint64(d - 1)
		}
	}
	if a.Datagrams == 0 || seq-a.LastSeq < 1<<31 || a.LastSeq-seq > sflowReorderWindow || a.LastUptime-uptime >= sflowRebootMs {
		a.LastSeq, a.LastUptime = seq, uptime
	}
	a.Datagrams++
	iv.Datagrams++
	iv.Lost += a.Lost - lost // a late datagram takes back one lost in this interval or an earlier one
	iv.Restarts += a.Restarts - restarts
	iv.Reordered += a.Reordered - reordered
	a.Senders[sender.String()]++
	iv.Senders[sender.String()]++
	a.LastSeen = now.UTC().Format(time.RFC3339Nano)
	for i := uint32(0); i < n; i++ {
		if len(p) < off+8 {
			bad("truncated sample")
			return
		}
		format := binary.BigEndian.Uint32(p[off:])
		length := int(binary.BigEndian.Uint32(p[off+4:]))
		off += 8
		if length < 0 || len(p) < off+length {
			bad("sample longer than the datagram")
			return
		}
		body := p[off : off+length]
		off += length
		iv.Samples++
		switch format {
		case 1, 3: // flow sample, expanded flow sample
			a.FlowSamples++
			iv.FlowSamples++
			rateAt, dropsAt := 8, 16
			if format == 3 {
				rateAt, dropsAt = 12, 20
			}
			if len(body) < dropsAt+4 {
				bad("flow sample too short")
				continue
			}
			rate := strconv.FormatUint(uint64(binary.BigEndian.Uint32(body[rateAt:])), 10)
			a.Rates[rate]++
			iv.Rates[rate]++
			drops := uint64(binary.BigEndian.Uint32(body[dropsAt:]))
			a.AgentDrops += drops
			iv.AgentDrops += drops
			a.sflowPorts(iv, format, body)
			st.sflowOutputFix(a, format, body, now)
		case 2, 4:
			a.CountSamples++
			iv.CountSamples++
			if reason := st.sflowCounterSample(a, format, body, uptime, now); reason != "" {
				bad(reason)
			}
		case 5: // discarded packet sample (sFlow drop notifications): sfcapd 1.7.1 skips it
			if reason := st.sflowDropSample(a, iv, body, now); reason != "" {
				bad(reason)
			}
		default:
			a.OtherSamples++
			iv.OtherSamples++
			agentBad(fmt.Sprintf("unknown sample format %d:%d", format>>12, format&0xfff)) // skipped, the datagram is fine
		}
	}
}

func cmdSFlowTap(args []string) error {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds | log.LUTC)
	fs := flag.NewFlagSet("sflow-tap", flag.ContinueOnError)
	bind := fs.String("bind", "127.0.0.1", "sfcapd's listen address (sfcapd -b)")
	port := fs.Int("port", 6343, "sfcapd's UDP port (sfcapd -p)")
	dir := fs.String("dir", "", "where sflow.json goes")
	lake := fs.String("lake", "", "the lake: interface counters and agent health are written there (empty: not written)")
	snmpFile := fs.String("snmp-interfaces", "", "the SNMP poller's interfaces.json: its exporters' counters come from SNMP, not here")
	flush := fs.Duration("flush", time.Minute, "how often counter rows and health rows are written to the lake")
	keep := fs.Duration("keep", 6*time.Hour, "correction files (DIR/sflowfix) older than this are deleted")
	dropsDir := fs.String("drops-dir", "", "discarded packet samples (0:5) as flow records in nfcapd files here, for the shipper (a folder of its spool; empty: not written)")
	dropsRotate := fs.Duration("drops-rotate", time.Minute, "a drop records file is closed (shipped) after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return fmt.Errorf("sflow-tap: --dir is required")
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	network, laddr := "ip4:udp", &net.IPAddr{}
	if ip := net.ParseIP(*bind); ip != nil && ip.To4() == nil {
		network = "ip6:udp"
	}
	if ip := net.ParseIP(*bind); ip != nil && !ip.IsUnspecified() {
		laddr.IP = ip
	}
	conn, err := net.ListenIP(network, laddr)
	if err != nil {
		return fmt.Errorf("sflow-tap: raw socket for %s (needs root or CAP_NET_RAW): %v", network, err)
	}
	_ = conn.SetReadBuffer(8 << 20)
	if err := attachPortFilter(conn, network == "ip6:udp", *port); err != nil {
		log.Printf("WARNING no socket filter (every UDP datagram of this host is read and dropped here): %v", err)
	}
	path := filepath.Join(*dir, "sflow.json")
	st := &SFlowTapState{Malformed: map[string]uint64{}, Agents: map[string]*SFlowAgent{}}
	if data, err := os.ReadFile(path); err == nil { // a restarted tap keeps its totals
		_ = json.Unmarshal(data, st)
	}
	st.PID, st.Port = os.Getpid(), *port
	if st.Malformed == nil {
		st.Malformed = map[string]uint64{}
	}
	if st.Agents == nil {
		st.Agents = map[string]*SFlowAgent{}
	}
	if st.CounterState == nil {
		st.CounterState = map[string]*sflowIfPrev{}
	}
	if err := os.MkdirAll(filepath.Join(*dir, "sflowfix"), 0o755); err != nil {
		return err
	}
	st.fix = &fixWriter{dir: *dir, sub: "sflowfix"}
	if *dropsDir != "" {
		if st.drops, err = newDropWriter(*dropsDir, *dropsRotate); err != nil {
			return fmt.Errorf("sflow-tap: --drops-dir %s: %v", *dropsDir, err)
		}
	}
	prune := func() {
		cut := time.Now().Add(-*keep).UTC().Format("200601021504")
		files, _ := filepath.Glob(filepath.Join(*dir, "sflowfix", "*.bin"))
		for _, f := range files {
			if strings.TrimSuffix(filepath.Base(f), ".bin") < cut {
				_ = os.Remove(f)
			}
		}
	}
	save := func() {
		st.fix.flush() // the corrections before the state that names their agents (gaps.go reads both)
		if st.drops != nil {
			if err := st.drops.flush(time.Now()); err != nil {
				log.Printf("ERROR drop records to %s: %v (kept in memory, written at the next flush)", *dropsDir, err)
			}
		}
		st.UpdatedAt = time.Now().UTC().Format(time.RFC3339Nano)
		data, _ := json.MarshalIndent(st, "", "  ")
		if os.WriteFile(path+".tmp", data, 0o644) == nil {
			_ = os.Rename(path+".tmp", path)
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sig; conn.Close() }()
	log.Printf("INFO sflow tap on %s port %d -> %s", network, *port, path)
	save()
	last, flushed := time.Now(), time.Now()
	toLake := func() {
		if err := st.flushLake(*lake, *snmpFile, time.Now()); err != nil {
			log.Printf("ERROR %v (kept in memory, written at the next flush)", err)
			return
		}
		save() // the raw values the written deltas came from, right after the files
		prune()
		last, flushed = time.Now(), time.Now()
	}
	buf := make([]byte, 1<<16)
	rd := newRawReader(conn)
	wm := watermark{path: filepath.Join(*dir, sflowWatermarkFile)}
	dirty := false
	for {
		if time.Since(flushed) >= *flush {
			toLake()
		}
		began := time.Now()
		_ = conn.SetReadDeadline(began.Add(250 * time.Millisecond))
		n, src, at, err := rd.read(buf)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				wm.read(began) // the queue was empty when this read began
				if dirty || time.Since(last) > watermarkEvery {
					save()
					wm.write()
					last, dirty = time.Now(), false
				}
				continue
			}
			break // closed by the signal
		}
		dirty = true
		if n >= 8 && int(binary.BigEndian.Uint16(buf[2:])) == *port {
			ulen := int(binary.BigEndian.Uint16(buf[4:]))
			if ulen < 8 || ulen > n {
				ulen = n
			}
			addr, _ := netip.AddrFromSlice(src.IP)
			known := len(st.Agents)
			st.sflowDatagram(addr.Unmap(), buf[8:ulen], at)
			if len(st.Agents) != known {
				last = time.Time{} // a new agent: the shipper must know it before its records
			}
		}
		wm.read(at)
		if time.Since(last) > watermarkEvery {
			save()
			wm.write()
			last, dirty = time.Now(), false
		}
	}
	toLake()
	save()
	wm.write()
	if st.drops != nil {
		if err := st.drops.close(); err != nil {
			log.Printf("ERROR closing the drop records file in %s: %v", *dropsDir, err)
		}
	}
	log.Printf("INFO sflow tap stopped")
	return nil
}

// sflowAgentMap gives sfcapd's exporters (the UDP sender, the sub-agent id as observation
// domain) the sFlow agent address the tap read in their datagrams. A sender/sub-agent
// pair seen with more than one agent address (a relay merging agents that reuse a
// sub-agent id) stays the sender: which agent a record came from is not in sfcapd's file.
type sflowAgentMap struct {
	mod    time.Time
	agents map[string]netip.Addr // "sender/sub" -> agent; invalid: ambiguous
	self   map[string]bool       // "agent/sub": agents by their own address (the tap's drop records name them so)
	done   map[*Exporter]bool
}

// load (re)reads the tap's sflow.json when it changed; once per shipped file.
func (m *sflowAgentMap) load(path string) {
	m.done = map[*Exporter]bool{}
	info, err := os.Stat(path)
	if err != nil || (m.agents != nil && !info.ModTime().After(m.mod)) {
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var st SFlowTapState
	if json.Unmarshal(data, &st) != nil {
		return
	}
	m.mod, m.agents, m.self = info.ModTime(), map[string]netip.Addr{}, map[string]bool{}
	for _, a := range st.Agents {
		agent, err := netip.ParseAddr(a.Agent)
		if err != nil {
			continue
		}
		m.self[fmt.Sprintf("%s/%d", agent, a.SubAgent)] = true
		for sender := range a.Senders {
			key := fmt.Sprintf("%s/%d", sender, a.SubAgent)
			if prev, ok := m.agents[key]; ok && prev != agent {
				m.agents[key] = netip.Addr{}
				continue
			}
			m.agents[key] = agent
		}
	}
}

// apply renames an sfcapd exporter (shared by all its records) to its agent address, once.
func (m *sflowAgentMap) apply(e *Exporter) {
	if e == nil || m.done[e] || len(m.agents) == 0 {
		return
	}
	m.done[e] = true
	key := fmt.Sprintf("%s/%d", e.Addr, e.Domain)
	agent, ok := m.agents[key]
	if !ok || !agent.IsValid() || (m.self[key] && agent.String() != e.Addr) {
		return
	}
	e.Addr = agent.String()
	if agent.Is4() {
		a := agent.As4()
		e.addrRaw = a[:]
	} else {
		a := agent.As16()
		e.addrRaw = a[:]
	}
}
