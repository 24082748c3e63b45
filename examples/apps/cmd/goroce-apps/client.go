package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/goroce/goroce/examples/apps/grpcecho"
	"github.com/goroce/goroce/examples/apps/httpblob"
	"github.com/goroce/goroce/examples/apps/kv"
	"github.com/goroce/goroce/rsocket"
	"google.golang.org/grpc"
)

// A workload connects, makes one untimed first request (which completes
// the connection: gRPC and net/http dial lazily), then calls op until the
// duration is over, timing each call.
type workload struct {
	app      string // the server's application
	size     int    // default message size
	perBytes bool   // report CPU per GB (a bulk transfer), not per request
	setup    func(ctx context.Context, o *options) (*session, error)
}

// session is a connected workload.
type session struct {
	// op makes one request and returns the payload bytes it carried
	// (both directions) and, if it knows better than the caller's timing
	// of the call, the request's latency.
	op    func(ctx context.Context) (n int, latency time.Duration, err error)
	close func() error
	torn  func() uint64 // kv over RDMA: READs discarded as torn
}

var workloads = map[string]workload{
	"grpc-unary":  {app: "grpc", size: 1024, setup: grpcUnary},
	"grpc-stream": {app: "grpc", size: 64 << 10, perBytes: true, setup: grpcStream},
	"http":        {app: "http", size: 1024, setup: httpGet},
	"http-1m":     {app: "http", size: 1 << 20, perBytes: true, setup: httpGet},
	"kv-get":      {app: "kv", setup: kvGet},
	"kv-put":      {app: "kv", setup: kvPut},
}

func workloadNames() string {
	var names []string
	for n := range workloads {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// dialer returns the dial function of o.net from o.local.
func dialer(o *options) (func(ctx context.Context, network, addr string) (net.Conn, error), error) {
	local, err := netip.ParseAddr(o.local)
	if err != nil {
		return nil, fmt.Errorf("-local: %w", err)
	}
	if o.net == "tcp" {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: local.AsSlice()}}
		return d.DialContext, nil
	}
	dev, err := openDevice(o, local)
	if err != nil {
		return nil, err
	}
	d := rsocket.Dialer{Device: dev}
	return d.DialContext, nil
}

func runClient(ctx context.Context, o *options, stdout io.Writer) error {
	w, ok := workloads[o.workload]
	if !ok {
		return fmt.Errorf("-workload %q: one of %s", o.workload, workloadNames())
	}
	if o.size == 0 {
		o.size = w.size
	}
	ss, err := w.setup(ctx, o)
	if err != nil {
		return err
	}
	if _, _, err := ss.op(ctx); err != nil { // connects
		ss.close()
		return fmt.Errorf("first request: %w", err)
	}
	lat := make([]time.Duration, 0, 1<<16)
	var bytes int64
	start := time.Now()
	for time.Since(start) < o.duration {
		t0 := time.Now()
		n, l, err := ss.op(ctx)
		if err != nil {
			ss.close()
			return fmt.Errorf("request %d: %w", len(lat)+1, err)
		}
		if l == 0 {
			l = time.Since(t0)
		}
		lat = append(lat, l)
		bytes += int64(n)
	}
	secs := time.Since(start).Seconds()
	var torn uint64
	if ss.torn != nil {
		torn = ss.torn()
	}
	if err := ss.close(); err != nil {
		return err
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e3
	}
	r := result{Side: "client", App: o.workload, Net: o.net, Ops: len(lat), Bytes: bytes, Secs: secs,
		P50: pct(0.50), P99: pct(0.99), P999: pct(0.999), PerBytes: w.perBytes, Torn: torn}
	return emit(stdout, o, r)
}

func grpcUnary(ctx context.Context, o *options) (*session, error) {
	c, err := grpcClient(o)
	if err != nil {
		return nil, err
	}
	req := bytes.Repeat([]byte{0xA5}, o.size)
	var resp []byte
	return &session{op: func(ctx context.Context) (int, time.Duration, error) {
		resp, err = c.Unary(ctx, req, resp)
		if err == nil && !bytes.Equal(resp, req) {
			err = fmt.Errorf("unary echo of %d bytes returned %d different bytes", len(req), len(resp))
		}
		return 2 * len(req), 0, err
	}, close: c.Close}, nil
}

func grpcClient(o *options) (*grpcecho.Client, error) {
	dial, err := dialer(o)
	if err != nil {
		return nil, err
	}
	return grpcecho.Dial(o.addr, func(ctx context.Context, addr string) (net.Conn, error) { return dial(ctx, "tcp", addr) },
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
}

// grpcStream echoes messages on one bidirectional stream, pipelined: a
// goroutine keeps streamWindow messages ahead of the echoes, and each op
// is one message's round trip (from its Send to its echo's Recv).
func grpcStream(ctx context.Context, o *options) (*session, error) {
	const streamWindow = 4
	c, err := grpcClient(o)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	s, err := c.Stream(sctx)
	if err != nil {
		cancel()
		c.Close()
		return nil, err
	}
	msg := bytes.Repeat([]byte{0x5A}, o.size)
	sent := make(chan time.Time, streamWindow)
	sendErr := make(chan error, 1)
	credit := make(chan struct{}, streamWindow)
	for range streamWindow {
		credit <- struct{}{}
	}
	go func() {
		for {
			select {
			case <-credit:
			case <-sctx.Done():
				sendErr <- nil
				return
			}
			sent <- time.Now()
			if err := s.Send(msg); err != nil {
				sendErr <- err
				return
			}
		}
	}()
	var got []byte
	op := func(ctx context.Context) (int, time.Duration, error) {
		t0 := <-sent
		got, err = s.Recv(got)
		credit <- struct{}{}
		if err == nil && !bytes.Equal(got, msg) {
			err = fmt.Errorf("stream echo of %d bytes returned %d different bytes", len(msg), len(got))
		}
		return 2 * len(msg), time.Since(t0), err
	}
	closeFn := func() error {
		cancel()
		<-sendErr
		return c.Close()
	}
	return &session{op: op, close: closeFn}, nil
}

func httpGet(ctx context.Context, o *options) (*session, error) {
	dial, err := dialer(o)
	if err != nil {
		return nil, err
	}
	c := httpblob.NewClient(dial, 1)
	var buf []byte
	first := true
	return &session{op: func(ctx context.Context) (int, time.Duration, error) {
		buf, err = httpblob.Get(ctx, c, o.addr, o.size, buf, first) // the first body is checked byte by byte
		first = false
		return len(buf), 0, err
	}, close: func() error { c.CloseIdleConnections(); return nil }}, nil
}

// kvStore is what both key-value clients offer.
type kvStore interface {
	Get(ctx context.Context, key, dst []byte) ([]byte, error)
	Put(ctx context.Context, key, value []byte) error
	Close() error
}

// kvConnect connects a key-value client over o.net: a TCP connection,
// or a goroce device, its PD and an RC connection through the CM.
func kvConnect(ctx context.Context, o *options) (kvStore, *session, error) {
	local, err := netip.ParseAddr(o.local)
	if err != nil {
		return nil, nil, fmt.Errorf("-local: %w", err)
	}
	if o.net == "tcp" {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: local.AsSlice()}}
		c, err := d.DialContext(ctx, "tcp", o.addr)
		if err != nil {
			return nil, nil, err
		}
		s := kv.NewTCPClient(c)
		return s, &session{close: s.Close}, nil
	}
	dev, err := openDevice(o, local)
	if err != nil {
		return nil, nil, err
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return nil, nil, err
	}
	c, err := kv.DialRDMA(ctx, pd, o.addr)
	if err != nil {
		return nil, nil, err
	}
	return c, &session{torn: c.TornReads, close: func() error {
		return errors.Join(c.Close(), pd.Dealloc())
	}}, nil
}

// kvGet GETs random preloaded keys, checking each value.
func kvGet(ctx context.Context, o *options) (*session, error) {
	c, ss, err := kvConnect(ctx, o)
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(1, 2))
	var got, want []byte
	ss.op = func(ctx context.Context) (int, time.Duration, error) {
		i := r.IntN(o.keys)
		got, err = c.Get(ctx, kvKey(i), got)
		if want = kvValue(i, o.valueMax, want); err == nil && !bytes.Equal(got, want) {
			err = fmt.Errorf("GET key %d: %d bytes, not its value", i, len(got))
		}
		return len(got), 0, err
	}
	return ss, nil
}

// kvPut overwrites random preloaded keys with their own values.
func kvPut(ctx context.Context, o *options) (*session, error) {
	c, ss, err := kvConnect(ctx, o)
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(3, 4))
	var v []byte
	ss.op = func(ctx context.Context) (int, time.Duration, error) {
		i := r.IntN(o.keys)
		v = kvValue(i, o.valueMax, v)
		return len(v), 0, c.Put(ctx, kvKey(i), v)
	}
	return ss, nil
}
