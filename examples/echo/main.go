// Command echo shows two-sided RDMA: SEND and RECV. The server posts receive
// work requests and sends every message it receives back; the client sends
// messages one at a time, checks each echo and prints the round-trip time.
//
// Run the server, then the client, each with its own RDMA device address
// (two loopback addresses stand for two hosts):
//
//	echo -server -addr 127.0.0.1
//	echo -addr 127.0.0.2 -connect 127.0.0.1:18520 -n 5
//
// Unlike RDMA READ and WRITE, a SEND needs the receiver's program: the
// message lands in the buffer of the receive work request the receiver
// posted, and the receiver learns of it from a completion. A SEND that finds
// no receive posted is refused with an RNR NAK ("receiver not ready") and
// retried later, so both sides post their receives before connecting.
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

// serverSlots is the number of receive work requests the server keeps
// posted, each with its own buffer slot.
const serverSlots = 16

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2) // the usage is printed
	case err != nil:
		fmt.Fprintln(os.Stderr, "echo:", err)
		os.Exit(1)
	}
}

// run parses the command line and runs the server or the client, writing
// what it does to stdout.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("echo", flag.ContinueOnError)
	fs.SetOutput(stdout)
	server := fs.Bool("server", false, "run the server (default: run the client)")
	addr := fs.String("addr", "", "IP address of this side's RDMA device (required)")
	port := fs.Int("port", 18520, "server: rdma_cm port to listen on (0 picks a free one)")
	size := fs.Int("size", 4096, "server: largest message it accepts, in bytes")
	connect := fs.String("connect", "", "client: the server's host:port (its rdma_cm port)")
	count := fs.Int("n", 5, "client: number of messages")
	msg := fs.String("msg", "ping", "client: message text (each gets its number appended)")
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
		if *size < 1 || *size > 1<<24 {
			return errors.New("-size must be 1 byte to 16 MiB")
		}
		return runServer(ctx, stdout, ip, *port, *size)
	}
	if *connect == "" {
		return errors.New("the client needs -connect host:port (or pass -server)")
	}
	if *count < 1 {
		return errors.New("-n must be at least 1")
	}
	return runClient(ctx, stdout, ip, *connect, *timeout, *msg, *count)
}

// endpoint is what every RDMA program sets up before it can connect: a device
// (the NIC), a protection domain, a registered buffer, a completion queue
// and a reliable-connected QP.
type endpoint struct {
	dev *verbs.Device
	mr  *verbs.MR
	cq  *verbs.CQ
	qp  *verbs.QP
}

// newEndpoint opens a device on ip, registers buf and creates a QP with room
// for wrs work requests in each direction. Close the device to release
// everything.
func newEndpoint(ip netip.Addr, buf []byte, wrs int) (*endpoint, error) {
	dev, err := verbs.Open(verbs.DeviceConfig{Addr: ip})
	if err != nil {
		return nil, err
	}
	e := &endpoint{dev: dev}
	if err := e.setup(buf, wrs); err != nil {
		dev.Close()
		return nil, err
	}
	return e, nil
}

func (e *endpoint) setup(buf []byte, wrs int) error {
	pd, err := e.dev.AllocPD()
	if err != nil {
		return err
	}
	// Local write lets the device store received messages in buf; SENDs
	// need no remote rights, as the peer never names our memory.
	if e.mr, err = pd.RegMR(buf, verbs.AccessLocalWrite); err != nil {
		return err
	}
	// One CQ for both directions, big enough for every work request.
	if e.cq, err = e.dev.CreateCQ(2*wrs, nil, 0); err != nil {
		return err
	}
	if e.qp, err = pd.CreateQP(verbs.QPInitAttr{
		QPType: verbs.QPTypeRC,
		SendCQ: e.cq,
		RecvCQ: e.cq,
		Cap:    verbs.QPCap{MaxSendWR: wrs, MaxRecvWR: wrs, MaxSendSGE: 1, MaxRecvSGE: 1},
	}); err != nil {
		return err
	}
	// Ready for receives before connecting (the peer's first SEND must
	// find one); the connection manager takes the QP on from there.
	return cm.PrepareQP(e.qp)
}

// postRecv posts a receive into slot i (of the given size) of the buffer. The
// work request ID tells, on completion, which slot holds the message.
func (e *endpoint) postRecv(i, size int) error {
	return e.qp.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{e.mr.SGE(i*size, size)}})
}

// runServer echoes the messages of one client until it disconnects.
func runServer(ctx context.Context, stdout io.Writer, ip netip.Addr, port, size int) error {
	e, err := newEndpoint(ip, make([]byte, serverSlots*size), serverSlots)
	if err != nil {
		return err
	}
	defer e.dev.Close()
	for i := range serverSlots {
		if err := e.postRecv(i, size); err != nil {
			return err
		}
	}

	l, err := cm.Listen(net.JoinHostPort(ip.String(), strconv.Itoa(port)))
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Fprintf(stdout, "server: listening on %v; messages up to %d bytes\n", l.Addr(), size)
	req, err := l.Accept(ctx)
	if err != nil {
		return err
	}
	// The client learns our message size limit from the private data.
	conn, err := req.Accept(ctx, e.qp, &cm.Params{PrivateData: encodeLimit(size)})
	if err != nil {
		return err
	}
	defer conn.Close()
	fmt.Fprintf(stdout, "server: connected to QP %#x at %v\n", conn.Remote().QPN, conn.Remote().GID.Addr())

	// Serve until the client leaves: its disconnection cancels waiting.
	serveCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-conn.Done():
			cancel()
		case <-serveCtx.Done():
		}
	}()
	echoed, bytesEchoed := 0, 0
	wcs := make([]verbs.WorkCompletion, serverSlots)
	for {
		// Wait blocks until completions arrive and returns them all.
		n, err := e.cq.Wait(serveCtx, wcs)
		if err != nil {
			if ctx.Err() == nil && errors.Is(conn.Err(), cm.ErrDisconnected) {
				fmt.Fprintf(stdout, "server: client left after %d messages (%d bytes) echoed\n", echoed, bytesEchoed)
				return nil
			}
			if conn.Err() != nil {
				return fmt.Errorf("connection lost: %w", conn.Err())
			}
			return err
		}
		for _, wc := range wcs[:n] {
			if wc.Status == verbs.WCWRFlushErr && errors.Is(conn.Err(), cm.ErrDisconnected) {
				// The client's disconnect moved our QP to ERR: the
				// receives still posted come back flushed.
				fmt.Fprintf(stdout, "server: client left after %d messages (%d bytes) echoed\n", echoed, bytesEchoed)
				return nil
			}
			if err := wc.Err(); err != nil {
				return err
			}
			slot := int(wc.WRID)
			switch wc.Opcode {
			case verbs.WCRecv:
				// A message arrived in slot: send those bytes back. The
				// slot must not receive again until the device has sent
				// them.
				err = e.qp.PostSend(&verbs.SendWR{WRID: wc.WRID, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
					SGList: []verbs.SGE{e.mr.SGE(slot*size, int(wc.ByteLen))}})
				echoed++
				bytesEchoed += int(wc.ByteLen)
			case verbs.WCSend:
				// The echo is delivered: the slot can take the next message.
				err = e.postRecv(slot, size)
			}
			if err != nil {
				return err
			}
		}
	}
}

// runClient sends count messages one at a time and checks that each comes
// back intact.
func runClient(ctx context.Context, stdout io.Writer, ip netip.Addr, server string, timeout time.Duration, text string, count int) error {
	longest := len(fmt.Sprintf("%s #%d", text, count))
	// Two slots: slot 0 holds the message we send, slot 1 receives its echo.
	buf := make([]byte, 2*longest)
	out, in := buf[:longest], buf[longest:]
	e, err := newEndpoint(ip, buf, 1)
	if err != nil {
		return err
	}
	defer e.dev.Close()
	if err := e.postRecv(1, longest); err != nil {
		return err
	}

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
	limit, err := decodeLimit(conn.Remote().PrivateData)
	if err != nil {
		return err
	}
	if limit < longest {
		return fmt.Errorf("the server does not take messages of %d bytes, only up to %d", longest, limit)
	}
	fmt.Fprintf(stdout, "client: connected to %s\n", server)

	var total, fastest, slowest time.Duration
	wcs := make([]verbs.WorkCompletion, 2)
	for i := 1; i <= count; i++ {
		msg := fmt.Appendf(nil, "%s #%d", text, i)
		copy(out, msg)
		start := time.Now()
		err := e.qp.PostSend(&verbs.SendWR{WRID: 0, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{e.mr.SGE(0, len(msg))}})
		if err != nil {
			return err
		}
		// Two completions end the round: our SEND (acknowledged by the
		// server's device) and the RECV of the echo, in either order.
		var echo verbs.WorkCompletion
		for sent, received := false, false; !sent || !received; {
			n, err := e.cq.Wait(ctx, wcs)
			if err != nil {
				return err
			}
			for _, wc := range wcs[:n] {
				if err := wc.Err(); err != nil {
					return err
				}
				if wc.Opcode == verbs.WCRecv {
					echo, received = wc, true
				} else {
					sent = true
				}
			}
		}
		rtt := time.Since(start)
		if got := in[:echo.ByteLen]; !bytes.Equal(got, msg) {
			return fmt.Errorf("message %d: sent %q, echo %q", i, msg, got)
		}
		// Receive the next echo into the same slot.
		if err := e.postRecv(1, longest); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "client: echo of %q (%d bytes) in %v\n", msg, len(msg), rtt.Round(time.Microsecond))
		total += rtt
		if i == 1 || rtt < fastest {
			fastest = rtt
		}
		slowest = max(slowest, rtt)
	}
	avg := total / time.Duration(count)
	fmt.Fprintf(stdout, "client: %d echoes intact; round trip min %v, avg %v, max %v\n", count,
		fastest.Round(time.Microsecond), avg.Round(time.Microsecond), slowest.Round(time.Microsecond))
	return nil
}

// The server's private data is its message size limit: 4 bytes, big-endian.

func encodeLimit(n int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(n)) }

// decodeLimit parses the server's private data, which comes from the
// network.
func decodeLimit(b []byte) (int, error) {
	// The connection manager pads the private data to its field's size
	// (196 bytes in a reply): the wire carries no length.
	if len(b) < 4 {
		return 0, fmt.Errorf("the server sent %d bytes of private data, want at least 4 (its message size limit)", len(b))
	}
	return int(binary.BigEndian.Uint32(b)), nil
}
