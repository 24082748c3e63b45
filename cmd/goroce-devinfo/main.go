// Command goroce-devinfo prints the attributes of a goroce RDMA device (or,
// with --hw, of a kernel one) the way rdma-core's ibv_devinfo prints those
// of a kernel device: the same field names, values and tab layout, so that
// scripts and eyes used to ibv_devinfo read it unchanged.
//
// A goroce device is not found in a system list: a program opens one on an IP
// address (the address its GID table and its RoCEv2 traffic use). So the
// device shown is the one a goroce program gets when it opens --bind ADDR
// with the default settings:
//
//	goroce-devinfo                      # the device on 127.0.0.1
//	goroce-devinfo --bind 10.99.0.1 -v  # limits and GID table too
//	goroce-devinfo -l                   # the device's name only
//
// Options (ibv_devinfo's, plus --bind and --udp-port):
//
//	-d, --ib-dev=NAME    name the device NAME (default goroce0)
//	-i, --ib-port=PORT   print port PORT only (a goroce device has port 1);
//	    --port=PORT      the same
//	-l, --list           print only the device name
//	-v, --verbose        print all the attributes, limits and GID table
//	    --bind=ADDR      IP address the device binds (default 127.0.0.1)
//	    --udp-port=PORT  UDP port the device binds (default 4791)
//	    --hw             -d names a kernel RDMA device (rxe0, mlx5_0), opened
//	                     through libibverbs; without -d, every one
//
// With --hw (a binary built with cgo and -tags goroce_ibverbs) it prints
// the kernel's RDMA devices instead, through libibverbs, as ibv_devinfo
// does: every device, or -d's; -l lists their names:
//
//	goroce-devinfo --hw                 # every kernel RDMA device
//	goroce-devinfo --hw -d rxe0 -v
//
// Opening the device binds its UDP socket, as any goroce program does, for
// the moment it takes to print; --udp-port picks another port when a program
// already holds 4791 on the address. The node GUID is derived from the
// address and the UDP port.
//
// The exit status follows ibv_devinfo: 0 on success, 4 for a port the device
// does not have, 255 when the device cannot be opened, 1 for bad usage.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"

	"github.com/goroce/goroce/internal/tooldev"
	"github.com/goroce/goroce/verbs"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses, those of ibv_devinfo.
const (
	exitOK       = 0
	exitUsage    = 1
	exitBadPort  = 4   // "Invalid port requested for device"
	exitNoDevice = 255 // ibv_devinfo returns -1 when no device is found
)

// options is the parsed command line.
type options struct {
	name    string
	addr    netip.Addr
	udpPort uint16
	ibPort  int // 0: every port
	list    bool
	verbose bool
	hw      bool // kernel RDMA devices (tooldev)
	nameSet bool // -d was given
}

const usageText = `Usage: goroce-devinfo             print the ca attributes

Options:
  -d, --ib-dev=<dev>     name of the goroce device (default goroce0)
  -i, --ib-port=<port>   use port <port> of the device (default all ports)
      --port=<port>      the same as --ib-port
  -l, --list             print only the device name
  -v, --verbose          print all the attributes of the device
      --bind=<addr>      IP address the device binds (default 127.0.0.1)
      --udp-port=<port>  UDP port the device binds (default 4791)
      --hw               -d names a kernel RDMA device (rxe0, mlx5_0), opened
                         through libibverbs (a build with -tags goroce_ibverbs);
                         without -d, every kernel RDMA device
`

// parseArgs parses the command line. A request for help returns
// flag.ErrHelp.
func parseArgs(args []string) (*options, error) {
	fs := flag.NewFlagSet("goroce-devinfo", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are printed by run, with the usage
	o := &options{}
	bind := fs.String("bind", "127.0.0.1", "")
	udpPort := fs.Uint("udp-port", verbs.DefaultUDPPort, "")
	for _, n := range []string{"d", "ib-dev"} {
		fs.StringVar(&o.name, n, verbs.DefaultDeviceName, "")
	}
	const allPorts = -1 // no -i: distinguishes "-i 0", which is refused
	for _, n := range []string{"i", "ib-port", "port"} {
		fs.IntVar(&o.ibPort, n, allPorts, "")
	}
	for _, n := range []string{"l", "list"} {
		fs.BoolVar(&o.list, n, false, "")
	}
	for _, n := range []string{"v", "verbose"} {
		fs.BoolVar(&o.verbose, n, false, "")
	}
	fs.BoolVar(&o.hw, tooldev.Flag, false, "")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := tooldev.GorocOnly(fs, o.hw, "bind", "udp-port"); err != nil {
		return nil, err
	}
	o.nameSet = tooldev.Given(fs, "d", "ib-dev")
	switch {
	case o.ibPort == allPorts:
		o.ibPort = 0
	case o.ibPort <= 0:
		// ibv_devinfo refuses them too; 0 would silently mean every port.
		return nil, fmt.Errorf("invalid port %d", o.ibPort)
	}
	var err error
	if o.addr, err = netip.ParseAddr(*bind); err != nil {
		return nil, fmt.Errorf("--bind: %v", err)
	}
	if *udpPort == 0 || *udpPort > 0xffff {
		return nil, fmt.Errorf("--udp-port %d: want 1 to 65535", *udpPort)
	}
	o.udpPort = uint16(*udpPort)
	if o.name == "" {
		return nil, errors.New("--ib-dev: empty device name")
	}
	return o, nil
}

// run is the whole program: it parses args, prints the device to stdout and
// returns the exit status; diagnostics go to stderr.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usageText)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "goroce-devinfo: %v\n", err)
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}

	names := []string{o.name}
	if o.hw && !o.nameSet {
		// ibv_devinfo without -d: every device.
		if names, err = verbs.HardwareDevices(); err != nil {
			fmt.Fprintf(stderr, "goroce-devinfo: %v\n", err)
			return exitNoDevice
		}
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	if o.list && o.hw {
		fmt.Fprintf(w, "%d HCA%s found:\n", len(names), plural(len(names)))
		for _, n := range names {
			fmt.Fprintf(w, "\t%s\n", n)
		}
		fmt.Fprintln(w)
		return exitOK
	}
	if len(names) == 0 {
		fmt.Fprintln(stderr, "No IB devices found")
		return exitNoDevice
	}
	for _, name := range names {
		if code := show(w, stderr, o, name); code != exitOK {
			return code
		}
	}
	return exitOK
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// show opens the device name and prints it (-l: its name only); it
// returns the exit status.
func show(w *bufio.Writer, stderr io.Writer, o *options, name string) int {
	dev, err := tooldev.Open(o.hw, name, verbs.DeviceConfig{Addr: o.addr, Port: o.udpPort}, verbs.Open)
	if err != nil {
		if o.hw {
			fmt.Fprintf(stderr, "goroce-devinfo: cannot open device %s: %v\n", name, err)
		} else {
			fmt.Fprintf(stderr, "goroce-devinfo: cannot open device %s on %v: %v\n", name, o.addr, err)
		}
		return exitNoDevice
	}
	defer dev.Close()
	if o.list {
		// One device: the one opened on the address.
		fmt.Fprintf(w, "1 HCA found:\n\t%s\n\n", dev.Name())
		return exitOK
	}
	attr := dev.Query()
	if o.ibPort != 0 && o.ibPort > attr.PhysPortCnt {
		w.Flush()
		fmt.Fprintln(stderr, "Invalid port requested for device")
		return exitBadPort
	}
	if err := printDevice(w, dev, o.ibPort, o.verbose); err != nil {
		w.Flush()
		fmt.Fprintf(stderr, "goroce-devinfo: %v\n", err)
		return exitNoDevice
	}
	return exitOK
}
