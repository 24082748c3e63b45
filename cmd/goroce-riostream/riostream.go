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
	"github.com/goroce/goroce/verbs"
)

// tester runs riostream's tests on one side.
type tester struct {
	cfg    *config
	out    io.Writer
	client bool
	ln     net.Listener
	conn   *rsocket.Conn
	buf    []byte
	hw     tooldev.Toward // --hw: the kernel device, opened once

	name       string
	size       int
	count      int
	iterations int

	formatByte, verifyByte byte  // common.c's format_buf and verify_buf counters
	verified               int64 // bytes verified (verify_buf's total_bytes)
	settle                 time.Duration
}

func newTester(cfg *config, out io.Writer) *tester {
	t := &tester{cfg: cfg, out: out, client: cfg.Server != "", name: "custom",
		size: cfg.Size, count: cfg.Count, iterations: cfg.Iterations, settle: settle}
	n := rsperf.Sizes[len(rsperf.Sizes)-1].Size
	if cfg.Custom {
		n = cfg.Size
	}
	t.buf = make([]byte, n)
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
		return t.runTest(ctx)
	}
	return rsperf.RunTable(t.cfg.AllSizes, func() error { return t.connect(ctx) }, func() error { return t.conn.Close() },
		func(x rsperf.Test) error {
			t.name, t.size, t.count, t.iterations = x.Name, x.Size, x.Count, x.Iterations
			return t.runTest(ctx)
		})
}

// config is riostream's set_options: -B, or 512 KiB, which rsockets
// doubles, and an iomap table of one entry.
func (t *tester) config() rsocket.Config {
	n := t.cfg.BufSize
	if n == 0 {
		n = 1 << 19
	}
	return rsocket.Config{SendBuffer: 2 * n, ReceiveBuffer: 2 * n, IOMapSize: 1}
}

// listen opens the server's listener.
func (t *tester) listen(ctx context.Context) error {
	lc := rsocket.ListenConfig{UDPPort: uint16(t.cfg.UDPPort), Config: t.config()}
	var err error
	if t.cfg.hw {
		if lc.Device, err = t.hw.Open(ctx, netip.MustParseAddr(t.cfg.Bind), ""); err != nil {
			return err
		}
	}
	t.ln, err = lc.Listen(ctx, "rdma", net.JoinHostPort(t.cfg.Bind, t.cfg.Port))
	return err
}

// connect accepts the next connection (server) or dials (client).
func (t *tester) connect(ctx context.Context) error {
	var c net.Conn
	var err error
	if t.client {
		d := rsocket.Dialer{UDPPort: uint16(t.cfg.UDPPort), Config: t.config()}
		if t.cfg.Bind != "" {
			d.LocalAddr = netip.MustParseAddr(t.cfg.Bind) // parseArgs checked it
		}
		if t.cfg.hw {
			if d.Device, err = t.hw.Open(ctx, d.LocalAddr, t.cfg.Server); err != nil {
				return err
			}
		}
		c, err = d.DialContext(ctx, "rdma", net.JoinHostPort(t.cfg.Server, t.cfg.Port))
	} else {
		c, err = t.ln.Accept()
	}
	if err != nil {
		return err
	}
	t.conn = c.(*rsocket.Conn)
	return nil
}

// runTest is riostream's run_test: map the buffer, exchange 16 bytes each
// way (which also tells each side that the other's mapping is in its
// table), then the timed iterations.
func (t *tester) runTest(ctx context.Context) error {
	buf := t.buf[:t.size]
	buf[t.size-1] = 0xff
	mr, err := t.conn.IOMap(buf, 0)
	if err != nil {
		return fmt.Errorf("riomap: %w", err)
	}
	if err := t.syncTest(); err != nil {
		return err
	}
	var marker byte
	start := time.Now()
	for range t.iterations {
		if !t.client {
			if err := t.recvXfer(ctx, mr, buf, marker); err != nil {
				return err
			}
			marker++
		}
		if err := t.sendXfers(buf, marker); err != nil {
			return err
		}
		marker++
		if t.client {
			if err := t.recvXfer(ctx, mr, buf, marker); err != nil {
				return err
			}
			marker++
		}
	}
	fmt.Fprint(t.out, rsperf.Line(t.name, t.size, t.count, t.iterations, time.Since(start)))
	if err := t.conn.IOUnmap(mr); err != nil {
		return fmt.Errorf("riounmap: %w", err)
	}
	return nil
}

// syncTest is sync_test: the client sends 16 bytes and receives 16, the
// server the other way round.
func (t *tester) syncTest() error {
	var b [16]byte
	for _, sending := range []bool{t.client, !t.client} {
		var err error
		if sending {
			_, err = t.conn.Write(b[:])
		} else {
			_, err = io.ReadFull(t.conn, b[:])
		}
		if err != nil {
			return fmt.Errorf("sync: %w", err)
		}
	}
	return nil
}

// sendXfers writes count transfers of buf into the peer's mapping; the
// last carries marker in its last byte and, with -T v, format_buf's
// pattern before it.
func (t *tester) sendXfers(buf []byte, marker byte) error {
	for i := range t.count {
		if i == t.count-1 {
			buf[len(buf)-1] = marker
			if t.cfg.Verify {
				for j := range buf[:len(buf)-1] {
					buf[j] = t.formatByte
					t.formatByte++
				}
			}
		}
		if _, err := t.conn.IOWrite(buf, 0); err != nil {
			return fmt.Errorf("riowrite: %w", err)
		}
	}
	return nil
}

// settle bounds how long a verification that failed waits for the rest
// of the last packet: see recvXfer.
const settle = 10 * time.Second

// waitStore waits until the count of the peer's stores into mr differs
// from seen. A kernel device cannot tell (its NIC writes behind the
// runtime's back, and MR.WaitRemoteWrite is ErrNotSupported there): it
// sleeps a moment instead, and the caller looks at the memory again, as
// rdma-core's riostream spins on it.
func (t *tester) waitStore(ctx context.Context, mr *verbs.MR, seen uint64) error {
	if t.cfg.hw {
		time.Sleep(time.Microsecond)
		return ctx.Err()
	}
	_, err := mr.WaitRemoteWrite(ctx, seen)
	return err
}

// recvXfer is recv_xfer: it waits until the peer's marker is in the last
// byte of the buffer and, with -T v, checks the bytes before it against
// verify_buf's counter.
//
// The peer's writes land with no message: the device counts each packet
// it stores into the region, and reading the count first, then the byte,
// parks on the count (WaitRemoteWrite) without missing the marker. The
// bytes of one packet are stored in no defined order, so when the marker
// shows, the rest of its packet may still be on its way; all the earlier
// packets are in. A verification that fails therefore waits for the count
// to move (the packet's store ending) and checks again from the byte that
// differed; a count that stays still for settle means the bytes are wrong.
func (t *tester) recvXfer(ctx context.Context, mr *verbs.MR, buf []byte, marker byte) error {
	last := len(buf) - 1
	for {
		seen := mr.RemoteWrites()
		if buf[last] == marker {
			break
		}
		if err := t.waitStore(ctx, mr, seen); err != nil {
			return fmt.Errorf("waiting for the peer's transfer: %w", err)
		}
	}
	if !t.cfg.Verify {
		return nil
	}
	var failed time.Time // on a kernel device: since the first mismatch
	for i := 0; i < last; {
		seen := mr.RemoteWrites()
		for ; i < last && buf[i] == t.verifyByte+byte(i); i++ {
		}
		if i == last {
			break
		}
		wctx, cancel := context.WithTimeout(ctx, t.settle)
		err := t.waitStore(wctx, mr, seen)
		cancel()
		if t.cfg.hw {
			if failed.IsZero() {
				failed = time.Now()
			}
			if err == nil && time.Since(failed) > t.settle {
				err = context.DeadlineExceeded
			}
		}
		if err != nil {
			return fmt.Errorf("data verification failed byte %d", t.verified+int64(i))
		}
	}
	t.verifyByte += byte(last)
	t.verified += int64(last)
	return nil
}
