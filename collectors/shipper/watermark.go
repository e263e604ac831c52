// Watermarks: how far the taps have read, so the shipper never resolves a file before the
// tap has written what it read of the same datagrams.
//
// nfcapd and the tap read the same datagram on two sockets, and nothing orders the two
// readers: on a busy box nfcapd can close a file before the tap has read (or flushed, once
// a second) the copies of its last datagrams. A flow the shipper looks up then finds no
// fingerprint, falls back to the rate history, and with two samplers in force its rate is
// unknown (CI saw a third of a burst land with sampling_rate 0).
//
// So each tap reads the kernel's receive time of every datagram (SO_TIMESTAMPNS; the
// same instant nfcapd's copy arrived) and, after flushing its files, writes its watermark:
// every datagram that arrived before it has been read and written. The queue is FIFO, so
// that is the arrival of the last datagram read, or, when a read times out on an empty
// queue, the instant that read began. A file nfcapd closed at T (its mtime) holds only
// datagrams that arrived before T, so the shipper waits until the watermark passes T.
package main

import (
	"encoding/binary"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	tapWatermarkFile   = "tap.watermark"   // the NetFlow/IPFIX tap (tap.go)
	sflowWatermarkFile = "sflow.watermark" // the sFlow tap (sflowtap.go)
	// the taps write their watermark at least this often, idle or busy
	watermarkEvery = time.Second
	// a watermark file not rewritten for this long belongs to a tap that is not running
	watermarkStale = 4 * time.Second
	// the longest a file waits for a running tap (a tap this far behind is reported)
	watermarkMaxWait = 20 * time.Second
	mtimeMargin      = 50 * time.Millisecond
)

// rawReader reads a raw socket with each datagram's kernel receive time.
type rawReader struct {
	conn   *net.IPConn
	oob    []byte
	stamps bool
}

func newRawReader(conn *net.IPConn) *rawReader {
	r := &rawReader{conn: conn, oob: make([]byte, 128)}
	rc, err := conn.SyscallConn()
	if err == nil {
		var serr error
		err = rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
		})
		if err == nil {
			err = serr
		}
	}
	if err != nil {
		log.Printf("WARNING no kernel receive times (%v): the tap's watermark is its read time, which can run ahead of a backlog", err)
	} else {
		r.stamps = true
	}
	return r
}

// read returns one datagram, its sender and when the kernel received it (else now).
func (r *rawReader) read(buf []byte) (int, *net.IPAddr, time.Time, error) {
	n, oobn, _, src, err := r.conn.ReadMsgIP(buf, r.oob)
	at := time.Now()
	if err == nil && src != nil && len(src.IP) == net.IPv4len {
		n = stripIPv4Header(n, buf) // ReadFromIP strips it, ReadMsgIP does not
	}
	if err != nil || oobn == 0 || !r.stamps {
		return n, src, at, err
	}
	msgs, perr := syscall.ParseSocketControlMessage(r.oob[:oobn])
	if perr != nil {
		return n, src, at, nil
	}
	for _, m := range msgs {
		if m.Header.Level == syscall.SOL_SOCKET && m.Header.Type == syscall.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
			sec := int64(binary.LittleEndian.Uint64(m.Data[0:]))
			nsec := int64(binary.LittleEndian.Uint64(m.Data[8:]))
			if k := time.Unix(sec, nsec); k.Before(at) {
				at = k
			}
		}
	}
	return n, src, at, nil
}

// stripIPv4Header as the net package's ReadFromIP does it: a raw IPv4 socket reads the header.
func stripIPv4Header(n int, b []byte) int {
	if n < 20 || b[0]>>4 != 4 {
		return n
	}
	l := int(b[0]&0x0f) << 2
	if l < 20 || l > n {
		return n
	}
	copy(b, b[l:n])
	return n - l
}

// watermark follows one tap's read position (ms since the epoch, never going back).
type watermark struct {
	path string
	ms   int64
}

func (w *watermark) read(at time.Time) {
	if ms := at.UnixMilli(); ms > w.ms {
		w.ms = ms
	}
}

// write publishes the watermark; call it only after the files it covers are flushed.
func (w *watermark) write() {
	if w.ms == 0 {
		return
	}
	tmp := w.path + ".tmp"
	if os.WriteFile(tmp, []byte(strconv.FormatInt(w.ms, 10)+"\n"), 0o644) == nil {
		_ = os.Rename(tmp, w.path)
	}
}

// readWatermark: a tap's watermark and whether the tap is writing it (running).
func readWatermark(path string, now time.Time) (int64, bool) {
	info, err := os.Stat(path)
	if err != nil || now.Sub(info.ModTime()) > watermarkStale {
		return 0, false
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	ms, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return ms, err == nil
}

// TapWait is what waiting for the taps cost, for `flowlake status`.
type TapWait struct {
	Files   uint64 `json:"files"`    // files that waited for a tap
	WaitMs  uint64 `json:"wait_ms"`  // their total wait
	Late    uint64 `json:"late"`     // files shipped before a tap caught up (rates may be unknown)
	LastLag string `json:"last_lag"` // the last late file and how far its tap was behind
}

// waitForTaps blocks until every running tap in dir has read past closed (a file's mtime):
// the tap's fingerprints and corrections of that file's records are then on disk.
func waitForTaps(dir string, closed time.Time, name string, w *TapWait) {
	if dir == "" || closed.IsZero() {
		return
	}
	// mtimes come from the kernel's coarse clock (a tick behind the precise one the packets
	// are stamped by): a margin keeps a datagram read in the file's last tick covered
	want := closed.Add(mtimeMargin).UnixMilli()
	start := time.Now()
	waited, late := false, false
	for _, f := range [2]string{tapWatermarkFile, sflowWatermarkFile} {
		path := filepath.Join(dir, f)
		for !late {
			ms, alive := readWatermark(path, time.Now())
			if !alive || ms >= want {
				break
			}
			if time.Since(start) > watermarkMaxWait {
				late = true
				w.LastLag = fmt.Sprintf("%s: %s %.1f s behind the file's close", name, f, float64(want-ms)/1000)
				log.Printf("WARNING %s: the sampling tap is %.1f s behind (%s): shipped without waiting longer; "+
					"flows it has not read resolve from the rate history", name, float64(want-ms)/1000, path)
				break
			}
			waited = true
			time.Sleep(20 * time.Millisecond)
		}
	}
	if late {
		w.Late++
	}
	if waited {
		w.Files++
		w.WaitMs += uint64(time.Since(start).Milliseconds())
	}
}
