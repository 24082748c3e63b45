// Command rdma-rw shows one-sided RDMA: a client writes into, reads from and
// atomically increments the memory of a server whose program does nothing
// while that happens.
//
// Run the server, then the client, each with its own RDMA device address
// (two loopback addresses stand for two hosts):
//
//	rdma-rw -server -addr 127.0.0.1
//	rdma-rw -addr 127.0.0.2 -connect 127.0.0.1:18520
//
// The server registers a buffer for remote access and tells the client where
// it is (a verbs.RemoteRegion: address, rkey, length, 16 bytes) when it
// accepts the connection. From then on
// the server never posts a work request nor polls a completion queue: its
// device answers the client's RDMA WRITE, RDMA READ and FETCH_AND_ADD on its
// own, as a NIC does. When the client disconnects the server prints what its
// buffer holds.
//
// The server's buffer is laid out as:
//
//	bytes 0-7   a 64-bit counter, the target of the FETCH_AND_ADD
//	bytes 8-... room for the client's message
//
// The counter is in the server's native byte order: atomics apply to memory
// as the server's CPU sees it (both ends are little-endian on common hosts).
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/verbs"
)

// Where things are in the server's buffer.
const (
	counterOffset = 0 // 8-byte aligned, as atomics require
	messageOffset = 8
)

// The counter's starting value, so the client's fetch-and-add visibly
// changes something.
const counterStart = 100

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2) // the usage is printed
	case err != nil:
		fmt.Fprintln(os.Stderr, "rdma-rw:", err)
		os.Exit(1)
	}
}

// run parses the command line and runs the server or the client, writing
// what it does to stdout.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("rdma-rw", flag.ContinueOnError)
	fs.SetOutput(stdout)
	server := fs.Bool("server", false, "run the server (default: run the client)")
	addr := fs.String("addr", "", "IP address of this side's RDMA device (required)")
	port := fs.Int("port", 18520, "server: rdma_cm port to listen on (0 picks a free one)")
	connect := fs.String("connect", "", "client: the server's host:port (its rdma_cm port)")
	msg := fs.String("msg", "hello over RDMA", "client: the message to write")
	size := fs.Int("size", 64<<10, "server: size of the buffer offered to the client")
	timeout := fs.Duration("timeout", 10*time.Second, "client: how long to wait for the server to answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	ip, err := netip.ParseAddr(*addr)
	if err != nil {
		return fmt.Errorf("-addr: %v", err)
	}
	if *server {
		if *size < messageOffset+1 || *size > 1<<30 {
			return fmt.Errorf("-size must be %d bytes to 1 GiB", messageOffset+1)
		}
		return runServer(ctx, stdout, ip, *port, *size)
	}
	if *connect == "" {
		return errors.New("the client needs -connect host:port (or pass -server)")
	}
	if *msg == "" {
		return errors.New("-msg must not be empty")
	}
	return runClient(ctx, stdout, ip, *connect, *timeout, []byte(*msg))
}

// endpoint is what every RDMA program sets up before it can connect: a device
// (the NIC), a protection domain that ties memory to QPs, a registered buffer,
// a completion queue and a reliable-connected queue pair.
type endpoint struct {
	dev *verbs.Device
	mr  *verbs.MR
	cq  *verbs.CQ
	qp  *verbs.QP
}

// newEndpoint opens a device on ip and registers buf with the given rights.
// Close the device to release everything.
func newEndpoint(ip netip.Addr, buf []byte, access verbs.AccessFlags) (*endpoint, error) {
	dev, err := verbs.Open(verbs.DeviceConfig{Addr: ip})
	if err != nil {
		return nil, err
	}
	e := &endpoint{dev: dev}
	if err := e.setup(buf, access); err != nil {
		dev.Close()
		return nil, err
	}
	return e, nil
}

func (e *endpoint) setup(buf []byte, access verbs.AccessFlags) error {
	pd, err := e.dev.AllocPD()
	if err != nil {
		return err
	}
	// Registration gives the device the right to touch buf and names it with
	// a key: the lkey for our own work requests, the rkey for the peer's.
	if e.mr, err = pd.RegMR(buf, access); err != nil {
		return err
	}
	if e.cq, err = e.dev.CreateCQ(16, nil, 0); err != nil {
		return err
	}
	e.qp, err = pd.CreateQP(verbs.QPInitAttr{
		QPType: verbs.QPTypeRC, // reliable connected: acknowledged, in order
		SendCQ: e.cq,
		RecvCQ: e.cq,
		Cap:    verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1},
	})
	return err
}

// runServer offers a buffer to one client and waits until it leaves.
func runServer(ctx context.Context, stdout io.Writer, ip netip.Addr, port, size int) error {
	buf := make([]byte, size)
	binary.NativeEndian.PutUint64(buf[counterOffset:], counterStart)

	// The peer may write, read and run atomics on this memory. (Remote
	// write and atomic rights require local write as well.) Our QP must
	// allow the same operations: see Accept below.
	remoteRights := verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	e, err := newEndpoint(ip, buf, verbs.AccessLocalWrite|remoteRights)
	if err != nil {
		return err
	}
	defer e.dev.Close()

	l, err := cm.Listen(net.JoinHostPort(ip.String(), strconv.Itoa(port)))
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Fprintf(stdout, "server: listening on %v; buffer of %d bytes, rkey %#x, address %#x\n",
		l.Addr(), e.mr.Len(), e.mr.RKey(), e.mr.IOVA())

	req, err := l.Accept(ctx)
	if err != nil {
		return err
	}
	// Accepting brings our QP to RTS, connected to the client's, with the
	// rights our MR grants, and hands the client the three numbers it
	// needs to address our buffer.
	region, err := e.mr.Remote().MarshalBinary()
	if err != nil {
		return err
	}
	conn, err := req.Accept(ctx, e.qp, &cm.Params{PrivateData: region, Access: remoteRights})
	if err != nil {
		return err
	}
	defer conn.Close()
	fmt.Fprintf(stdout, "server: connected to QP %#x at %v; serving RDMA without posting or polling\n",
		conn.Remote().QPN, conn.Remote().GID.Addr())

	select {
	case <-conn.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	if !errors.Is(conn.Err(), cm.ErrDisconnected) {
		return fmt.Errorf("connection lost: %w", conn.Err())
	}
	// Closing the device deregisters the buffer, which waits for remote
	// accesses in flight: afterwards the buffer is ours alone to read.
	conn.Close()
	if err := e.dev.Close(); err != nil {
		return err
	}
	end := bytes.IndexByte(buf[messageOffset:], 0)
	if end < 0 {
		end = len(buf) - messageOffset
	}
	fmt.Fprintf(stdout, "server: client left; counter = %d, message = %q\n",
		binary.NativeEndian.Uint64(buf[counterOffset:]), buf[messageOffset:messageOffset+end])
	return nil
}

// runClient connects to the server, writes msg into its buffer, reads it
// back, increments its counter and checks every result.
func runClient(ctx context.Context, stdout io.Writer, ip netip.Addr, server string, timeout time.Duration, msg []byte) error {
	// Local memory: the message to write, room for what we read back, and
	// room for the counter's old value that the fetch-and-add returns. Local
	// write is what lets the device store READ and atomic results here.
	n := len(msg)
	buf := make([]byte, 2*n+8)
	src, back, old := 0, n, 2*n
	copy(buf[src:], msg)
	e, err := newEndpoint(ip, buf, verbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	defer e.dev.Close()

	// Connect, giving up if the server does not answer in time. (Once
	// connected, a server that vanishes makes work requests fail with a
	// retry error after the transport's retries.)
	dialCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := cm.Dial(dialCtx, server, e.qp, nil)
	if err != nil {
		return err
	}
	defer conn.Close()
	// The connection manager pads the private data to its field's size
	// (196 bytes in a reply; the wire carries no length): the region is
	// its first 16 bytes.
	pd := conn.Remote().PrivateData
	if len(pd) < verbs.RemoteRegionSize {
		return fmt.Errorf("the server sent %d bytes of private data, want at least %d", len(pd), verbs.RemoteRegionSize)
	}
	var remote verbs.RemoteRegion
	if err := remote.UnmarshalBinary(pd[:verbs.RemoteRegionSize]); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "client: connected to %s; its buffer: %d bytes at %#x, rkey %#x\n",
		server, remote.Length, remote.Addr, remote.RKey)

	// do posts a work request that a RemoteRegion method built (which
	// checked it against the server's buffer first) and waits for its
	// completion: nil, or an error that says what went wrong.
	do := func(wr verbs.SendWR, err error) error {
		if err != nil {
			return err
		}
		_, err = e.qp.PostSendWait(ctx, &wr)
		return err
	}

	// RDMA WRITE: our bytes go straight into the server's memory. The
	// work request names local memory with an SGE (lkey) and remote memory
	// with an offset in the server's region.
	if err := do(remote.Write(messageOffset, e.mr.SGE(src, n))); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "client: RDMA WRITE of %d bytes to %#x done\n", n, remote.Addr+messageOffset)

	// RDMA READ: the same bytes come back from the server's memory into
	// another part of ours.
	if err := do(remote.Read(messageOffset, e.mr.SGE(back, n))); err != nil {
		return err
	}
	if !bytes.Equal(buf[back:back+n], msg) {
		return fmt.Errorf("read back %q, wrote %q", buf[back:back+n], msg)
	}
	fmt.Fprintf(stdout, "client: RDMA READ of %d bytes matches what was written\n", n)

	// FETCH_AND_ADD: the server's device adds 1 to the counter atomically
	// and returns the value it had before into our memory.
	if err := do(remote.FetchAdd(counterOffset, e.mr.SGE(old, 8), 1)); err != nil {
		return err
	}
	before := binary.NativeEndian.Uint64(buf[old:])

	// Check the addition with one more READ of the counter.
	if err := do(remote.Read(counterOffset, e.mr.SGE(old, 8))); err != nil {
		return err
	}
	after := binary.NativeEndian.Uint64(buf[old:])
	if after != before+1 {
		return fmt.Errorf("counter went from %d to %d after adding 1", before, after)
	}
	fmt.Fprintf(stdout, "client: FETCH_AND_ADD +1: counter was %d, is now %d\n", before, after)
	return nil
}
