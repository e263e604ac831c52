// `import`: ship files and whole nfdump/NfSen archive trees beside the live shipper.
//
// The live shipper (`serve`) owns the spool and knows its files by their path below
// it. An archive is the operator's: its files may be mounted anywhere, copied twice,
// recompressed or imported again from another path, so `import` knows a file by its
// flows (the SHA-256 of its decoded flows; ledger key "flows-sha256:<hex>"), computed as
// the file is read: a file with the flows of one in the ledger aborts its transaction.
// The SHA-256 of a file's bytes is taken only for files that do not decode (the
// quarantine knows them by it) and empty ones. Exactly once comes from the
// ledger as for the live shipper: one Kafka transaction holds a file's flows and its
// ledger record. Every import uses one transactional id per ledger (flowlake passes
// it), so a second import fences the first instead of racing it, and a rerun after a
// kill aborts the killed run's open transaction before it reads the ledger. A flock
// gives a clear message on the same host. Files inside the live spool are left to
// the live shipper (it ships them; two writers of one file would race).
//
// A file the native reader rejects is handed to nfdump itself (`nfdump -r F -w T`):
// every file nfdump 1.7 reads (layout 1 of nfdump 1.6 included) is imported; a file
// nfdump cannot read either is copied to quarantine with both reasons, and the
// import goes on.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

var reasonSHA = regexp.MustCompile(`(?m)^sha256: ([0-9a-f]{64})$`)

func cmdImport(args []string) error {
	o, paths, err := parseCommand(args, false)
	if o == nil || err != nil {
		return err
	}
	if o.Pending {
		return fmt.Errorf("import: --pending is for the live spool (flowlake ship --pending)")
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("import: %v", err)
		}
	}
	o.Events = true
	s, ctx, done, err := startShipper(o)
	var locked errLocked
	if errors.As(err, &locked) {
		return fmt.Errorf("another import (pid %s) is running for this ledger (lock %s): wait for it, or stop it and rerun (the ledger skips what it committed)",
			locked.owner, locked.path)
	}
	if err != nil {
		return err
	}
	defer done()
	s.origin, s.copyBad = "import", true
	return s.importPaths(ctx, paths)
}

// walkArchive calls fn for every regular file under paths, in order: a directory's
// files in lexical order, which is time order in nfdump/NfSen trees
// (YYYY/MM/DD/nfcapd.YYYYMMDDhhmm). It holds one directory listing at a time.
func walkArchive(paths []string, fn func(path string, info fs.FileInfo) error) error {
	for _, root := range paths {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return fmt.Errorf("reading %s: %v", p, err)
			}
			if !d.Type().IsRegular() {
				return nil // directories, symlinks, sockets
			}
			info, err := d.Info()
			if err != nil {
				return fmt.Errorf("reading %s: %v", p, err)
			}
			return fn(p, info)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func fileSHA256(path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func statKey(abs string, info fs.FileInfo) string {
	return fmt.Sprintf("%s\x00%d\x00%d", abs, info.Size(), info.ModTime().UnixNano())
}

// floorDiv: days before 1970 stay on their own day.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func dayNames(days map[int64]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(days))
	for d, n := range days {
		out[time.UnixMilli(d*86_400_000).UTC().Format("2006-01-02")] = n
	}
	return out
}

// rewriteWithNfdump asks nfdump to read a file the native reader rejected and
// write it again as an nfdump 1.7 file. nfdump exits 0 on files it cannot open, so
// anything on its stderr counts as failure.
func rewriteWithNfdump(path, tmpDir string) (string, error) {
	nfdump, err := exec.LookPath("nfdump")
	if err != nil {
		return "", fmt.Errorf("nfdump is not installed to try it")
	}
	if err := os.MkdirAll(tmpDir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(tmpDir, fmt.Sprintf("rewrite.%d", os.Getpid()))
	_ = os.Remove(out)
	var stderr bytes.Buffer
	cmd := exec.Command(nfdump, "-r", path, "-w", out)
	cmd.Stderr = &stderr
	cmd.Stdout = io.Discard
	runErr := cmd.Run()
	msg := strings.Join(strings.Fields(stderr.String()), " ")
	if runErr != nil || msg != "" {
		_ = os.Remove(out)
		if msg == "" {
			msg = runErr.Error()
		}
		return "", fmt.Errorf("nfdump 1.7 cannot read it either: %s", msg)
	}
	return out, nil
}

func (s *Shipper) importPaths(ctx context.Context, paths []string) error {
	var files, total int64
	if err := walkArchive(paths, func(_ string, info fs.FileInfo) error {
		files++
		total += info.Size()
		return nil
	}); err != nil {
		return err
	}
	s.event(map[string]any{"event": "plan", "files": files, "bytes": total})

	if err := s.connectOnce(ctx); err != nil {
		return err
	}
	defer s.cl.Close()
	// What is already in the ledger: by the SHA-256 of a file's decoded flows (a copy,
	// recompressed or not, has the same flows), and by path, size and mtime to skip
	// without reading. Bounded by the files ever imported. (Not by the SHA-256 of a
	// file's bytes before reading it: that was a second pass over every file, 6 % of the
	// importer's CPU on uncompressed archives, to skip copies the flow digest refuses.)
	byHash := map[string]string{}
	byStat := map[string]string{}            // path, size, mtime -> flow digest
	daysOf := map[string]map[string]uint64{} // flow digest -> flows per day
	for _, e := range s.ledger {
		if e.FlowDigest != "" {
			byHash[e.FlowDigest] = e.File
			daysOf[e.FlowDigest] = e.Days
			if e.Origin == "import" {
				byStat[fmt.Sprintf("%s\x00%d\x00%d", e.File, e.Size, e.MTime)] = e.FlowDigest
			}
		}
	}
	// Files quarantined by an earlier import (their .reason names the content): a
	// rerun skips them instead of quarantining them again.
	if reasons, err := filepath.Glob(filepath.Join(s.o.QuarantineDir, "*.reason")); err == nil {
		for _, r := range reasons {
			data, _ := os.ReadFile(r)
			if m := reasonSHA.FindSubmatch(data); m != nil {
				byHash[string(m[1])] = "quarantined: " + r
			}
		}
	}
	s.count.State = "importing"
	s.count.FilesPending = int(files)
	s.saveState()
	defer func() { s.count.State = "stopped"; s.count.FilesPending = 0; s.saveState() }()
	tmpDir := filepath.Join(filepath.Dir(s.o.LockFile), "import-tmp")
	defer os.RemoveAll(tmpDir)

	var shipped, skipped, quarantined int
	toQuarantine := func(path, sum string, cause error) {
		quarantined++
		if r := s.quarantine(path, cause); r != "" {
			if fh, err := os.OpenFile(r, os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
				fmt.Fprintf(fh, "sha256: %s\n", sum)
				fh.Close()
			}
		}
		byHash[sum] = "quarantined: see the .reason files in " + s.o.QuarantineDir
	}
	var flows uint64
	// a file skipped as imported before still names its days: their reports are rebuilt
	skip := func(path string, size int64, why string, days map[string]uint64) {
		skipped++
		s.event(map[string]any{"event": "skipped", "file": path, "reason": why, "size": size, "days": days})
	}
	walkErr := walkArchive(paths, func(path string, info fs.FileInfo) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.count.FilesPending--
		abs, err := filepath.Abs(path)
		if err != nil {
			return err
		}
		if rel, err := filepath.Rel(s.o.Spool, abs); err == nil && !strings.HasPrefix(rel, "..") {
			skip(abs, info.Size(), "in the live spool: the shipper service ships it (`flowlake ship --pending` while the stack is down)", nil)
			return nil
		}
		if sum, ok := byStat[statKey(abs, info)]; ok {
			skip(abs, info.Size(), "already imported (ledger)", daysOf[sum])
			return nil
		}
		var days dayCounts
		dig := newFlowDigest()
		var flowsSum string // set by Seal
		id := fileID{Key: "", Source: abs,
			Entry: LedgerEntry{Origin: "import", Size: info.Size(), MTime: info.ModTime().UnixNano()},
			OnFlow: func(f *Flow) {
				days.add(f.TimeStart)
				if f.BiflowHalf != 2 { // the file's records: a reverse half is derived from its initiator
					dig.add(f)
				}
			},
			Seal: func(id *fileID, st *Stats) error {
				flowsSum = dig.sum()
				if st.Flows == 0 { // nfcapd writes empty files in quiet intervals: not copies of each other
					sum, err := fileSHA256(path)
					if err != nil {
						return fmt.Errorf("reading %s: %v", path, err)
					}
					flowsSum, id.Entry.SHA256 = "empty/"+sum, sum
				}
				if first, ok := byHash[flowsSum]; ok {
					return errSameFlows{first, flowsSum}
				}
				id.Key = "flows-sha256:" + flowsSum
				id.Entry.FlowDigest, id.Entry.Days = flowsSum, dayNames(days.total())
				return nil
			}}
		st, err := s.shipAs(ctx, path, id)
		if err != nil && IsCorrupt(err) {
			// not a file this reader knows: quarantined before (known by its bytes), or
			// nfdump itself gets the last word
			sum, shaErr := fileSHA256(path)
			if shaErr != nil {
				return fmt.Errorf("reading %s: %v", path, shaErr)
			}
			if first, ok := byHash[sum]; ok {
				skip(abs, info.Size(), "already "+first, nil)
				return nil
			}
			tmp, nfErr := rewriteWithNfdump(path, tmpDir)
			if nfErr != nil {
				toQuarantine(path, sum, fmt.Errorf("%v; %v", err, nfErr))
				return nil
			}
			id.Read, id.Entry.SHA256 = tmp, sum
			days = dayCounts{}
			dig = newFlowDigest()
			log.Printf("INFO %s: %v; nfdump read it, shipping its rewrite", abs, err)
			st, err = s.shipAs(ctx, path, id)
			_ = os.Remove(tmp)
			if err != nil && IsCorrupt(err) {
				toQuarantine(path, id.Entry.SHA256, fmt.Errorf("nfdump rewrote it but the rewrite does not decode: %v", err))
				return nil
			}
		}
		var same errSameFlows
		if errors.As(err, &same) {
			skip(abs, info.Size(), "already shipped (the same flows as "+same.first+")", daysOf[same.digest])
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.fail(err)
			s.event(map[string]any{"event": "failed", "file": abs, "error": err.Error()})
			return err // Kafka trouble or unreadable file: stop; a rerun resumes
		}
		shipped++
		flows += st.Flows
		byHash[flowsSum] = abs
		s.event(map[string]any{"event": "days", "file": abs, "days": dayNames(days.total())})
		byStat[statKey(abs, info)] = flowsSum
		daysOf[flowsSum] = dayNames(days.total())
		s.saveState()
		return nil
	})
	s.event(map[string]any{"event": "summary", "shipped": shipped, "skipped": skipped, "quarantined": quarantined, "flows": flows})
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted: %d files imported; rerun to go on (the ledger skips them)", shipped)
	}
	return walkErr
}

// copyFile copies src to dst (quarantine keeps the operator's archive intact).
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// errSameFlows refuses a file whose flows were shipped already from another file.
type errSameFlows struct{ first, digest string }

func (e errSameFlows) Error() string { return "the same flows as " + e.first }

// dayCounts counts flows per UTC day of their start; flows come in time order, so
// mostly a run of one day (a map update per flow was 1.4 % of the importer's CPU).
type dayCounts struct {
	m   map[int64]uint64
	day int64
	n   uint64
}

func (d *dayCounts) add(startMs int64) {
	if day := floorDiv(startMs, 86_400_000); day != d.day || d.n == 0 {
		d.flush()
		d.day = day
	}
	d.n++
}

func (d *dayCounts) flush() {
	if d.n > 0 {
		if d.m == nil {
			d.m = map[int64]uint64{}
		}
		d.m[d.day] += d.n
		d.n = 0
	}
}

func (d *dayCounts) total() map[int64]uint64 {
	d.flush()
	if d.m == nil {
		return map[int64]uint64{}
	}
	return d.m
}

// flowDigest is the SHA-256 of a file's decoded flows in file order: a file's
// identity whatever its compression, name or place.
type flowDigest struct {
	h   hash.Hash
	buf []byte
}

func newFlowDigest() *flowDigest { return &flowDigest{h: sha256.New(), buf: make([]byte, 0, 64<<10)} }

func (d *flowDigest) add(f *Flow) {
	b := d.buf
	b = binary.LittleEndian.AppendUint64(b, uint64(f.TimeStart))
	b = binary.LittleEndian.AppendUint64(b, uint64(f.TimeEnd))
	b = append(b, byte(len(f.Exporter.addrRaw)))
	b = append(b, f.Exporter.addrRaw...)
	b = binary.LittleEndian.AppendUint32(b, f.InputIf)
	b = binary.LittleEndian.AppendUint32(b, f.OutputIf)
	b = append(b, f.SrcAddr[:]...)
	b = append(b, f.DstAddr[:]...)
	b = binary.LittleEndian.AppendUint16(b, f.SrcPort)
	b = binary.LittleEndian.AppendUint16(b, f.DstPort)
	b = append(b, f.Proto, f.TCPFlags, f.Tos)
	if f.V6 {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.LittleEndian.AppendUint64(b, f.Packets)
	b = binary.LittleEndian.AppendUint64(b, f.Bytes)
	b = binary.LittleEndian.AppendUint32(b, f.SamplingRate)
	b = binary.LittleEndian.AppendUint32(b, f.SrcAS)
	b = binary.LittleEndian.AppendUint32(b, f.DstAS)
	if len(b) > cap(b)-256 {
		d.h.Write(b)
		b = b[:0]
	}
	d.buf = b
}

func (d *flowDigest) sum() string {
	d.h.Write(d.buf)
	d.buf = d.buf[:0]
	return hex.EncodeToString(d.h.Sum(nil))
}
