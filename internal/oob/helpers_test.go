package oob

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/goroce/goroce/internal/pcap"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
)

// tcpSegment is one TCP segment with payload from a capture.
type tcpSegment struct {
	frame      int  // 1-based, as tshark numbers frames
	fromClient bool // sent by the side that connected
	payload    []byte
}

// oobCapture is the out-of-band TCP connection of a capture: its segments
// in capture order and the reassembled byte stream of each direction.
type oobCapture struct {
	name     string
	segments []tcpSegment
	c2s, s2c []byte
}

// loadOOBCapture reads the rxe capture name.pcap (testkit.Captures: real
// traffic with its out-of-band TCP exchanges, perftest 6.06 and rdma-core's
// pingpong examples on both sides) and returns the TCP connection to port,
// or skips the test if the captures are absent. Retransmitted bytes are
// dropped; a gap in either direction fails the test.
func loadOOBCapture(t testing.TB, name string, port uint16) oobCapture {
	t.Helper()
	path := testkit.Captures(t, name+".pcap")[0]
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcap.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	c := oobCapture{name: name}
	// next holds the sequence number expected next in each direction, set
	// by the SYNs.
	var next [2]uint32
	var synSeen [2]bool
	for frame := 1; ; frame++ {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		fr, err := pcap.DecodeFrame(r.LinkType(), rec.Data)
		if !errors.Is(err, pcap.ErrNotUDP) || fr.Protocol != 6 {
			continue // not TCP
		}
		tcp := fr.IPPacket[len(fr.IPHeader):]
		if len(tcp) < 20 {
			t.Fatalf("%s frame %d: short TCP header", name, frame)
		}
		sport, dport := binary.BigEndian.Uint16(tcp), binary.BigEndian.Uint16(tcp[2:])
		if sport != port && dport != port {
			continue
		}
		fromClient := dport == port
		dir := 0
		if !fromClient {
			dir = 1
		}
		seq := binary.BigEndian.Uint32(tcp[4:])
		doff := int(tcp[12]>>4) * 4
		flags := tcp[13]
		if flags&0x02 != 0 { // SYN
			next[dir], synSeen[dir] = seq+1, true
			continue
		}
		payload := tcp[doff:]
		if len(payload) == 0 {
			continue
		}
		if !synSeen[dir] {
			t.Fatalf("%s frame %d: data before the SYN", name, frame)
		}
		// Drop what was already seen (retransmissions); refuse gaps.
		if d := int32(next[dir] - seq); d > 0 {
			if int(d) >= len(payload) {
				continue
			}
			payload = payload[d:]
		} else if d < 0 {
			t.Fatalf("%s frame %d: %d bytes missing before this segment", name, frame, -d)
		}
		next[dir] += uint32(len(payload))
		p := bytes.Clone(payload)
		c.segments = append(c.segments, tcpSegment{frame: frame, fromClient: fromClient, payload: p})
		if fromClient {
			c.c2s = append(c.c2s, p...)
		} else {
			c.s2c = append(c.s2c, p...)
		}
	}
	if len(c.segments) == 0 {
		t.Fatalf("%s: no TCP payload on port %d", name, port)
	}
	return c
}

// sizes returns the payload sizes of the segments sent by the client (or
// the server), in order.
func (c oobCapture) sizes(fromClient bool) []int {
	var s []int
	for _, seg := range c.segments {
		if seg.fromClient == fromClient {
			s = append(s, len(seg.payload))
		}
	}
	return s
}

// readLog returns the log of the tools that made the capture name, or
// skips the test.
func readLog(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testkit.CapturesDir(), name+".log"))
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("log %s absent", name)
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		c   net.Conn
		err error
	}
	accepted := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		accepted <- result{c, err}
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-accepted
	if r.err != nil {
		client.Close()
		t.Fatal(r.err)
	}
	t.Cleanup(func() {
		client.Close()
		r.c.Close()
	})
	return client, r.c
}

// peer runs fn on its own goroutine, as the other side of a connection, and
// returns a function that waits for it and reports its error.
func peer(fn func() error) (wait func() error) {
	var (
		once sync.Once
		done = make(chan error, 1)
		err  error
	)
	go func() { done <- fn() }()
	return func() error {
		once.Do(func() { err = <-done })
		return err
	}
}

// readExactly reads n bytes from c.
func readExactly(c net.Conn, n int) ([]byte, error) {
	b := make([]byte, n)
	_, err := io.ReadFull(c, b)
	return b, err
}

// expectEOF checks that nothing more comes from c: the read ends with EOF
// or, when the other side closed with our bytes unread, a reset.
func expectEOF(r io.Reader) error {
	var b [64]byte
	n, err := r.Read(b[:])
	if n > 0 {
		return fmt.Errorf("unexpected extra bytes %q", b[:n])
	}
	if errors.Is(err, io.EOF) || isReset(err) {
		return nil
	}
	return fmt.Errorf("want EOF, got %v", err)
}

func isReset(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe"))
}

// checkOneLine fails the test if err is nil or its message spans lines.
func checkOneLine(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	if strings.ContainsAny(err.Error(), "\n\r") {
		t.Errorf("error spans lines: %q", err)
	}
}
