package main

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func writeMark(t *testing.T, path string, ms int64) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strconv.FormatInt(ms, 10)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestWaitForTapsWaitsUntilTheWatermarkPassesTheFile(t *testing.T) {
	dir := t.TempDir()
	closed := time.Now()
	path := filepath.Join(dir, tapWatermarkFile)
	writeMark(t, path, closed.UnixMilli()-500)
	go func() {
		time.Sleep(300 * time.Millisecond)
		writeMark(t, path, closed.Add(mtimeMargin).UnixMilli())
	}()
	var w TapWait
	start := time.Now()
	waitForTaps(dir, closed, "f1", &w)
	if took := time.Since(start); took < 250*time.Millisecond || took > 2*time.Second {
		t.Fatalf("waited %v, want about 300 ms", took)
	}
	if w.Files != 1 || w.Late != 0 || w.WaitMs < 250 {
		t.Fatalf("counts %+v", w)
	}
	// passed already: no wait, nothing counted
	waitForTaps(dir, closed, "f2", &w)
	if w.Files != 1 {
		t.Fatalf("counted a file that did not wait: %+v", w)
	}
}

func TestWaitForTapsIgnoresATapThatIsNotRunning(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, sflowWatermarkFile)
	writeMark(t, path, 1)
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	var w TapWait
	start := time.Now()
	waitForTaps(dir, time.Now(), "f", &w)
	if time.Since(start) > time.Second || w.Files != 0 || w.Late != 0 {
		t.Fatalf("waited for a stopped tap: %v %+v", time.Since(start), w)
	}
}

// The kernel's receive time, not the read's: a datagram read 200 ms after it arrived
// carries its arrival (the watermark must not run ahead of a backlog).
func TestRawReaderGivesTheKernelsReceiveTime(t *testing.T) {
	conn, err := net.ListenIP("ip4:udp", &net.IPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatalf("raw socket (the tap needs root or CAP_NET_RAW): %v", err)
	}
	defer conn.Close()
	port := 47000 + os.Getpid()%1000
	if err := attachPortFilter(conn, false, port); err != nil {
		t.Fatal(err)
	}
	rd := newRawReader(conn)
	if !rd.stamps {
		t.Fatal("SO_TIMESTAMPNS refused")
	}
	out, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	time.Sleep(100 * time.Millisecond) // the kernel turns receive timestamps on in a deferred work item
	sent := time.Now()
	if _, err := out.Write([]byte("flowlake")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1<<16)
	n, _, at, err := rd.read(buf)
	read := time.Now()
	if err != nil || n != 8+8 {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	if at.Before(sent.Add(-time.Millisecond)) || read.Sub(at) < 150*time.Millisecond {
		t.Fatalf("sent %v, kernel time %v, read %v: not the receive time", sent, at, read)
	}
}
