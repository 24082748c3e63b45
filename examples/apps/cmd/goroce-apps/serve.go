package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/examples/apps/grpcecho"
	"github.com/goroce/goroce/examples/apps/httpblob"
	"github.com/goroce/goroce/examples/apps/kv"
	"github.com/goroce/goroce/rsocket"
	"google.golang.org/grpc"
)

// serve runs o.app on o.net until ctx ends, then prints the server's
// result.
func serve(ctx context.Context, o *options, stdout io.Writer) error {
	var ops func() uint64
	var err error
	switch o.app {
	case "grpc", "http":
		ops, err = serveStream(ctx, o, stdout)
	case "kv":
		ops, err = serveKV(ctx, o, stdout)
	default:
		return fmt.Errorf("-app %q: grpc, http or kv", o.app)
	}
	if err != nil {
		return err
	}
	return emit(stdout, o, result{Side: "server", App: o.app, Net: o.net, AppOps: ops()})
}

// listen listens on o.addr over o.net: an rsocket listener (which opens
// the goroce device on the address) or a TCP one.
func listen(ctx context.Context, o *options) (net.Listener, error) {
	if o.net == "tcp" {
		var lc net.ListenConfig
		return lc.Listen(ctx, "tcp", o.addr)
	}
	ap, err := netip.ParseAddrPort(o.addr)
	if err != nil {
		return nil, err
	}
	dev, err := openDevice(o, ap.Addr())
	if err != nil {
		return nil, err
	}
	lc := rsocket.ListenConfig{Device: dev}
	return lc.Listen(ctx, "rdma", o.addr)
}

// serveStream serves gRPC or HTTP on a stream listener until ctx ends.
func serveStream(ctx context.Context, o *options, stdout io.Writer) (func() uint64, error) {
	l, err := listen(ctx, o)
	if err != nil {
		return nil, err
	}
	var count atomic.Uint64
	var serveErr error
	fmt.Fprintf(stdout, "server: listening on %s\n", l.Addr())
	switch o.app {
	case "grpc":
		s := grpcecho.NewServer(grpc.MaxRecvMsgSize(64<<20), grpc.MaxSendMsgSize(64<<20),
			grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				count.Add(1)
				return h(ctx, req)
			}),
			grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				return h(srv, &countingStream{ServerStream: ss, n: &count})
			}))
		go func() { <-ctx.Done(); s.Stop() }()
		serveErr = s.Serve(l)
	case "http":
		s := httpblob.NewServer()
		h := s.Handler
		s.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { count.Add(1); h.ServeHTTP(w, r) })
		go func() { <-ctx.Done(); s.Close() }()
		if serveErr = s.Serve(l); errors.Is(serveErr, http.ErrServerClosed) {
			serveErr = nil
		}
	}
	return count.Load, serveErr
}

// countingStream counts the messages a streaming handler receives.
type countingStream struct {
	grpc.ServerStream
	n *atomic.Uint64
}

func (s *countingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.n.Add(1)
	}
	return err
}

// kvKey and kvValue are key i and its value as the server preloads them:
// the client checks what it reads against them.
func kvKey(i int) []byte { return []byte("key-" + strconv.Itoa(i)) }

func kvValue(i, n int, b []byte) []byte {
	b = b[:0]
	for j := range n {
		b = append(b, byte(i*7+j))
	}
	return b
}

// serveKV preloads a table of o.keys keys (twice as many slots) and serves
// it until ctx ends.
func serveKV(ctx context.Context, o *options, stdout io.Writer) (func() uint64, error) {
	t, err := kv.NewTable(2*o.keys, o.valueMax)
	if err != nil {
		return nil, err
	}
	var v []byte
	for i := range o.keys {
		v = kvValue(i, o.valueMax, v)
		if err := t.Put(kvKey(i), v); err != nil {
			return nil, fmt.Errorf("preloading key %d: %w", i, err)
		}
	}
	if o.net == "tcp" {
		l, err := listen(ctx, o)
		if err != nil {
			return nil, err
		}
		s := kv.NewTCPServer(t)
		fmt.Fprintf(stdout, "server: listening on %s\n", l.Addr())
		go func() { <-ctx.Done(); l.Close() }()
		_ = s.Serve(l) // returns once ctx closed l and the clients are gone
		return func() uint64 { return s.Gets() + s.Puts() }, nil
	}
	ap, err := netip.ParseAddrPort(o.addr)
	if err != nil {
		return nil, err
	}
	dev, err := openDevice(o, ap.Addr())
	if err != nil {
		return nil, err
	}
	s, err := kv.NewRDMAServer(dev, t)
	if err != nil {
		return nil, err
	}
	l, err := cm.Listen(o.addr)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "server: listening on %s\n", l.Addr())
	_ = s.Serve(ctx, l) // returns when ctx ends
	l.Close()
	if err := s.Close(); err != nil {
		return nil, err
	}
	return s.Puts, nil
}
