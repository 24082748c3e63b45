// Command goroce-rping is rping (rdma-core's librdmacm/examples, packaged
// in rdmacm-utils) for goroce: it connects through the RDMA connection
// manager and runs rping's ping loop, on the wire as rping does, so either
// side can be the real rping on a host with Soft-RoCE or a RoCE NIC.
//
// Usage, as rping's:
//
//	goroce-rping -s [-vVd] [-S size] [-C count] -a addr [-p port] [-P]
//	goroce-rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port] [-t tos]
//
// Each ping: the client fills its start buffer with "rdma-ping-N: " and a
// run of letters, and SENDs its address, rkey and size (rping's struct
// rping_rdma_info: a 64-bit address, a 32-bit rkey and a 32-bit size, in
// network byte order); the server READs the buffer and SENDs a go-ahead;
// the client SENDs the address of its rdma buffer, which the server
// WRITEs the data into; the server SENDs again and the client, with -V,
// compares both buffers. -v prints each ping's data ("ping data: ..." on
// the client, "server ping data: ..." on the server); -d prints what each
// side does. -C 0 (the default) pings until interrupted; the server
// serves one client (-P: any number, concurrently) and ends when it
// disconnects.
//
// goroce is a device of this process, bound to an address: the server's
// is -a (rping's default, every address, has no goroce equivalent), the
// client's -I, or the address the kernel's routing picks toward -a. With
// --hw (a binary built with cgo and -tags goroce_ibverbs) the device is
// instead the kernel RDMA device (rxe0, mlx5_0) whose GID table has that
// address, and package cm connects through librdmacm, as rping does.
// -q (rping: the program moves its own QP) changes nothing here: goroce's
// cm always connects a QP the program created.
//
// The sizes are rping's: 26 to 65535 bytes, 64 by default; the server's
// -S must be at least the client's, as with rping.
//
// Errors are printed on stderr; the exit status is 0 on success, 1 when
// the ping fails and 2 for a bad command line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"

	"github.com/goroce/goroce/internal/tooldev"
	"github.com/goroce/goroce/verbs"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// rping's limits: the smallest buffer holds the message format and the
// longest ping number (sizeof(stringify(INT_MAX)) + sizeof("rdma-ping-%d: ")),
// the largest is one less than its 64 KiB buffer.
const (
	minSize     = 26
	maxSize     = 64*1024 - 1
	defaultSize = 64
	defaultPort = 7174
)

// config is the parsed command line.
type config struct {
	server, client bool
	addr, source   netip.Addr
	port           int
	count          int
	size           int
	verbose        bool
	validate       bool
	debug          bool
	persistent     bool
	tos            int
	udpPort        int  // goroce's: the devices' RoCEv2 port (tests)
	hw             bool // the kernel RDMA device of the address (tooldev)
}

func parseArgs(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("goroce-rping", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var addr, source string
	fs.BoolVar(&c.server, "s", false, "server side")
	fs.BoolVar(&c.client, "c", false, "client side")
	fs.StringVar(&addr, "a", "", "address (server: the one to listen on; client: the server's)")
	fs.StringVar(&source, "I", "", "source address to bind to for client")
	fs.IntVar(&c.port, "p", defaultPort, "port")
	fs.IntVar(&c.count, "C", 0, "ping count times (0: until interrupted)")
	fs.IntVar(&c.size, "S", defaultSize, "ping data size")
	fs.BoolVar(&c.verbose, "v", false, "display ping data to stdout")
	fs.BoolVar(&c.validate, "V", false, "validate ping data")
	fs.BoolVar(&c.debug, "d", false, "debug printfs")
	fs.BoolVar(&c.persistent, "P", false, "persistent server mode allowing multiple connections")
	fs.IntVar(&c.tos, "t", 0, "type of service (IP traffic class) of the connection")
	fs.Bool("q", false, "use self-created, self-modified QP (always so with goroce)")
	fs.IntVar(&c.udpPort, "udp-port", 4791, "RoCEv2 UDP port of the device (goroce peers only)")
	fs.BoolVar(&c.hw, tooldev.Flag, false, "run on the kernel RDMA device (rxe0, mlx5_0) that has the address, opened through libibverbs and connected through librdmacm (a build with -tags goroce_ibverbs)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := tooldev.GorocOnly(fs, c.hw, "udp-port"); err != nil {
		return nil, err
	}
	switch {
	case c.server == c.client:
		return nil, errors.New("give one of -s (server) and -c (client)")
	case addr == "":
		return nil, errors.New("-a ADDR is required (server: goroce's device binds it)")
	case c.size < minSize || c.size > maxSize:
		return nil, fmt.Errorf("invalid size %d (valid range is %d to %d)", c.size, minSize, maxSize+1)
	case c.count < 0:
		return nil, fmt.Errorf("invalid count %d", c.count)
	case c.port < 0 || c.port > 65535:
		return nil, fmt.Errorf("-p %d: not a port", c.port)
	case c.tos < 0 || c.tos > 255:
		return nil, fmt.Errorf("-t %d: want 0..255", c.tos)
	case c.udpPort < 1 || c.udpPort > 65535:
		return nil, fmt.Errorf("-udp-port %d: not a UDP port", c.udpPort)
	}
	var err error
	if c.addr, err = netip.ParseAddr(addr); err != nil {
		return nil, fmt.Errorf("-a: %v", err)
	}
	c.addr = c.addr.Unmap()
	if source != "" {
		if c.source, err = netip.ParseAddr(source); err != nil {
			return nil, fmt.Errorf("-I: %v", err)
		}
		c.source = c.source.Unmap()
	}
	return c, nil
}

// run is the whole program: it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "goroce-rping:", err)
		return 2
	}
	lg := &logger{out: stdout, err: stderr, debug: cfg.debug}
	if cfg.server {
		err = runServer(ctx, cfg, lg)
	} else {
		err = runClient(ctx, cfg, lg)
	}
	if err != nil {
		fmt.Fprintln(stderr, "goroce-rping:", err)
		return 1
	}
	return 0
}

// openDevice opens the device on addr: a goroce device bound to it, or
// with --hw the kernel RDMA device that has it.
func openDevice(cfg *config, addr netip.Addr) (*verbs.Device, error) {
	if cfg.hw {
		return tooldev.OpenAddr(addr)
	}
	return verbs.Open(verbs.DeviceConfig{Addr: addr, Port: uint16(cfg.udpPort)})
}

// routeSource is the address the kernel's routing sends from toward dst:
// a UDP connect sends nothing.
func routeSource(dst netip.Addr, port int) (netip.Addr, error) {
	c, err := net.Dial("udp", net.JoinHostPort(dst.String(), strconv.Itoa(port)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to %v: %w", dst, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}
