package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/goroce/goroce/internal/rsperf"
	"github.com/goroce/goroce/internal/tooldev"
	"github.com/goroce/goroce/rsocket"
)

// tester runs rstream's tests on one side.
type tester struct {
	cfg    *config
	out    io.Writer
	client bool
	ln     net.Listener
	conn   net.Conn
	hw     tooldev.Toward // --hw: the kernel device, opened once
	buf    []byte

	name       string
	size       int
	count      int
	iterations int

	sendByte, recvByte byte  // rstream's format_buf and verify_buf counters
	verified           int64 // bytes verified (verify_buf's total_bytes)
}

func newTester(cfg *config, out io.Writer) *tester {
	t := &tester{cfg: cfg, out: out, client: cfg.Server != "", name: "custom",
		size: cfg.Size, count: cfg.Count, iterations: cfg.Iterations}
	n := rsperf.Sizes[len(rsperf.Sizes)-1].Size
	if cfg.Custom {
		n = cfg.Size
	}
	t.buf = make([]byte, max(n, 16))
	return t
}

func (t *tester) run(ctx context.Context) error {
	defer t.hw.Close()
	if !t.client {
		if err := t.listen(ctx); err != nil {
			return err
		}
		defer t.ln.Close()
		defer context.AfterFunc(ctx, func() { t.ln.Close() })()
	}
	fmt.Fprint(t.out, rsperf.Header)
	if t.cfg.Custom {
		if err := t.connect(ctx); err != nil {
			return err
		}
		defer t.conn.Close()
		return t.runTest()
	}
	return rsperf.RunTable(t.cfg.AllSizes, func() error { return t.connect(ctx) }, func() error { return t.conn.Close() },
		func(x rsperf.Test) error {
			t.name, t.size, t.count, t.iterations = x.Name, x.Size, x.Count, x.Iterations
			return t.runTest()
		})
}

// listen opens the server's listener.
func (t *tester) listen(ctx context.Context) error {
	var err error
	if t.cfg.tcp {
		var lc net.ListenConfig
		t.ln, err = lc.Listen(ctx, "tcp", hostPort(t.cfg.Bind, t.cfg.Port))
		return err
	}
	lc := rsocket.ListenConfig{UDPPort: uint16(t.cfg.UDPPort), Config: t.buffers()}
	if t.cfg.hw {
		if lc.Device, err = t.hw.Open(ctx, netip.MustParseAddr(t.cfg.Bind), ""); err != nil {
			return err
		}
	}
	t.ln, err = lc.Listen(ctx, "rdma", hostPort(t.cfg.Bind, t.cfg.Port))
	return err
}

// buffers are rstream's: -B, or 512 KiB, which rsockets doubles; and
// the keepalive period, -k.
func (t *tester) buffers() rsocket.Config {
	n := t.cfg.BufSize
	if n == 0 {
		n = 1 << 19
	}
	return rsocket.Config{SendBuffer: 2 * n, ReceiveBuffer: 2 * n, KeepAlive: time.Duration(t.cfg.keepalive) * time.Second}
}

// connect accepts the next connection (server) or dials (client).
func (t *tester) connect(ctx context.Context) error {
	var err error
	switch {
	case !t.client:
		t.conn, err = t.ln.Accept()
	case t.cfg.tcp:
		var d net.Dialer
		if t.cfg.Bind != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(t.cfg.Bind)}
		}
		t.conn, err = d.DialContext(ctx, "tcp", hostPort(t.cfg.Server, t.cfg.Port))
	default:
		d := rsocket.Dialer{UDPPort: uint16(t.cfg.UDPPort), Config: t.buffers()}
		if t.cfg.Bind != "" {
			d.LocalAddr = netip.MustParseAddr(t.cfg.Bind) // parseArgs checked it
		}
		if t.cfg.hw {
			if d.Device, err = t.hw.Open(ctx, d.LocalAddr, t.cfg.Server); err != nil {
				return err
			}
		}
		t.conn, err = d.DialContext(ctx, "rdma", hostPort(t.cfg.Server, t.cfg.Port))
	}
	if c, ok := t.conn.(*net.TCPConn); ok && err == nil {
		err = c.SetNoDelay(true)
	}
	return err
}

// runTest is rstream's run_test: a 16-byte exchange, then the timed
// iterations, each count transfers from the client and count back.
func (t *tester) runTest() error {
	if err := t.exchange(16, 1); err != nil {
		return err
	}
	start := time.Now()
	if err := t.exchange(t.size, t.count); err != nil {
		return err
	}
	for i := 1; i < t.iterations; i++ {
		if err := t.exchange(t.size, t.count); err != nil {
			return err
		}
	}
	t.showPerf(time.Since(start))
	return nil
}

// exchange sends count transfers of size bytes one way, then receives
// as many back (the client sends first).
func (t *tester) exchange(size, count int) error {
	for _, sending := range []bool{t.client, !t.client} {
		for range count {
			var err error
			if sending {
				err = t.send(size)
			} else {
				err = t.recv(size)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *tester) send(size int) error {
	b := t.buf[:size]
	if t.cfg.Verify {
		for i := range b {
			b[i] = t.sendByte
			t.sendByte++
		}
	}
	_, err := t.conn.Write(b)
	return err
}

func (t *tester) recv(size int) error {
	b := t.buf[:size]
	if _, err := io.ReadFull(t.conn, b); err != nil {
		return fmt.Errorf("rrecv: %w", err)
	}
	if !t.cfg.Verify {
		return nil
	}
	for i := range b {
		if b[i] != t.recvByte {
			return fmt.Errorf("data verification failed byte %d", t.verified)
		}
		t.recvByte++
		t.verified++
	}
	return nil
}

// showPerf prints rstream's line for the test just run.
func (t *tester) showPerf(d time.Duration) {
	fmt.Fprint(t.out, rsperf.Line(t.name, t.size, t.count, t.iterations, d))
}
