// Package grpcecho is a gRPC service (grpc-go) whose messages are raw
// bytes: a unary echo and a bidirectional streaming echo. It needs no
// generated code: the service is described by hand and a codec passes the
// bytes through, so that what is measured is gRPC's HTTP/2 framing and
// the transport under it, rsocket or TCP, not protobuf.
//
// The transport is the caller's: Serve takes any net.Listener (an
// rsocket.Listener), Dial any dial function (rsocket.Dialer.DialContext).
package grpcecho

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
)

const (
	serviceName  = "goroce.apps.Echo"
	unaryMethod  = "/" + serviceName + "/Unary"
	streamMethod = "/" + serviceName + "/Stream"
)

// codec passes a *[]byte through as the message (a copy of it).
type codec struct{}

func (codec) Name() string { return "goroce-raw" }

func (codec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("grpcecho: cannot marshal %T", v)
	}
	// gRPC may still be sending the bytes after SendMsg returns, while
	// the caller reuses its slice: a copy, as protobuf's Marshal makes.
	return bytes.Clone(*b), nil
}

func (codec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("grpcecho: cannot unmarshal into %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

var _ encoding.Codec = codec{}

// echoServer is the handler type the service description names.
type echoServer interface{ echo() }

type server struct{}

func (server) echo() {}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*echoServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Unary",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new([]byte)
			if err := dec(in); err != nil {
				return nil, err
			}
			echo := func(_ context.Context, req any) (any, error) { return req, nil }
			if icpt == nil {
				return echo(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: unaryMethod}, echo)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Stream",
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(_ any, stream grpc.ServerStream) error {
			var m []byte
			for {
				if err := stream.RecvMsg(&m); errors.Is(err, io.EOF) {
					return nil // the client closed its side
				} else if err != nil {
					return err
				}
				if err := stream.SendMsg(&m); err != nil {
					return err
				}
			}
		},
	}},
}

// NewServer returns a gRPC server with the echo service registered, with
// opts (for example grpc.MaxRecvMsgSize).
func NewServer(opts ...grpc.ServerOption) *grpc.Server {
	s := grpc.NewServer(append([]grpc.ServerOption{grpc.ForceServerCodec(codec{})}, opts...)...)
	s.RegisterService(&serviceDesc, server{})
	return s
}

// Client calls the echo service.
type Client struct {
	cc *grpc.ClientConn
}

// Dial returns a client of the server at addr, which dial connects to
// (grpc.WithContextDialer: addr is passed to it as it is).
func Dial(addr string, dial func(ctx context.Context, addr string) (net.Conn, error), opts ...grpc.DialOption) (*Client, error) {
	cc, err := grpc.NewClient("passthrough:///"+addr, append([]grpc.DialOption{
		grpc.WithContextDialer(dial),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(codec{})),
	}, opts...)...)
	if err != nil {
		return nil, err
	}
	return &Client{cc: cc}, nil
}

// Unary sends req and returns the reply in resp[:0].
func (c *Client) Unary(ctx context.Context, req, resp []byte) ([]byte, error) {
	err := c.cc.Invoke(ctx, unaryMethod, &req, &resp)
	return resp, err
}

// Stream is an open bidirectional echo stream.
type Stream struct {
	s grpc.ClientStream
}

// Stream opens a stream; end it with CloseSend or by ending ctx.
func (c *Client) Stream(ctx context.Context) (*Stream, error) {
	s, err := c.cc.NewStream(ctx, &serviceDesc.Streams[0], streamMethod)
	if err != nil {
		return nil, err
	}
	return &Stream{s: s}, nil
}

// Send sends one message.
func (s *Stream) Send(m []byte) error { return s.s.SendMsg(&m) }

// Recv receives the next echoed message into m[:0].
func (s *Stream) Recv(m []byte) ([]byte, error) {
	err := s.s.RecvMsg(&m)
	return m, err
}

// CloseSend ends the client's side; Recv then returns io.EOF once the
// server has echoed everything.
func (s *Stream) CloseSend() error { return s.s.CloseSend() }

// Close closes the client's connection.
func (c *Client) Close() error { return c.cc.Close() }
