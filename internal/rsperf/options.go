package rsperf

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// Options is the command line rstream and riostream share.
type Options struct {
	Server     string // -s: the server's address (client mode)
	Bind       string // -b
	Port       string // -p
	BufSize    int    // -B (0: rsockets' default)
	Iterations int    // -I
	Count      int    // -C
	Size       int    // -S
	Custom     bool   // -I, -C or -S N: one custom test instead of the table
	AllSizes   bool   // -S all
	Verify     bool   // -T v
	UDPPort    int    // goroce's: the devices' RoCEv2 port
}

// Flags parses the shared command line. A command adds its own flags to
// FS before Parse.
type Flags struct {
	FS                        *flag.FlagSet
	o                         *Options
	iters, count, size, tests string
	format                    *string
	minSize                   int
}

// NewFlags registers the shared flags of the command name, with the
// defaults of rstream and riostream, on a new flag set; minSize is the
// smallest -S the command's test can run; testsUsage describes -T.
func NewFlags(name string, stderr io.Writer, o *Options, minSize int, testsUsage string) *Flags {
	*o = Options{Iterations: 1, Count: 1000, Size: 1000}
	f := &Flags{FS: flag.NewFlagSet(name, flag.ContinueOnError), o: o, minSize: minSize}
	fs := f.FS
	fs.SetOutput(stderr)
	fs.StringVar(&o.Server, "s", "", "server address (client mode)")
	fs.StringVar(&o.Bind, "b", "", "bind address")
	f.format = fs.String("f", "", "address format: ip or name (gid is not supported)")
	fs.IntVar(&o.BufSize, "B", 0, "buffer size (SO_SNDBUF and SO_RCVBUF; 0: 512 KiB)")
	fs.Int("i", 64, "inline size (ignored)")
	fs.StringVar(&f.iters, "I", "", "iterations")
	fs.StringVar(&f.count, "C", "", "transfer count")
	fs.StringVar(&f.size, "S", "", "transfer size or all")
	fs.StringVar(&o.Port, "p", "7471", "port number")
	fs.StringVar(&f.tests, "T", "", testsUsage)
	fs.IntVar(&o.UDPPort, "udp-port", 4791, "RoCEv2 UDP port of the device (goroce peers only)")
	return f
}

// testWords are rstream's and riostream's long -T options.
var testWords = map[string]string{"socket": "s", "async": "a", "block": "b", "nonblock": "n",
	"resolve": "r", "verify": "v", "fork": "f"}

// Parse parses args. -T v sets Verify; any other -T letter (a long
// option mapped to its letter first) goes to testOption, which refuses
// what its command does not take.
func (f *Flags) Parse(args []string, testOption func(letter string) error) error {
	o := f.o
	if err := f.FS.Parse(args); err != nil {
		return err
	}
	if f.FS.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", f.FS.Arg(0))
	}
	for _, n := range []struct {
		flag, s string
		dst     *int
	}{{"-I", f.iters, &o.Iterations}, {"-C", f.count, &o.Count}} {
		if n.s == "" {
			continue
		}
		v, err := strconv.Atoi(n.s)
		if err != nil || v < 1 {
			return fmt.Errorf("%s %q: want a positive number", n.flag, n.s)
		}
		*n.dst, o.Custom = v, true
	}
	switch {
	case strings.HasPrefix(strings.ToLower(f.size), "all"):
		o.AllSizes = true
	case f.size != "":
		v, err := strconv.Atoi(f.size)
		if err != nil || v < f.minSize {
			return fmt.Errorf("-S %q: want a size of %d bytes or more, or all", f.size, f.minSize)
		}
		o.Size, o.Custom = v, true
	}
	if f.tests != "" {
		letter := strings.ToLower(f.tests)
		if len(letter) > 1 {
			for w, l := range testWords {
				if strings.HasPrefix(letter, w) {
					letter = l
				}
			}
		}
		var err error
		if letter == "v" {
			o.Verify = true
		} else {
			err = testOption(letter)
		}
		if err != nil {
			return fmt.Errorf("-T %q: %w", f.tests, err)
		}
	}
	switch {
	case strings.HasPrefix(strings.ToLower(*f.format), "gid"):
		return errors.New("-f gid: AF_IB addresses are not supported")
	case o.BufSize < 0:
		return fmt.Errorf("-B %d: want a size", o.BufSize)
	case o.UDPPort < 1 || o.UDPPort > 65535:
		return fmt.Errorf("-udp-port %d: not a UDP port", o.UDPPort)
	}
	return nil
}

// ErrUnknownTest is testOption's answer to a letter its command lacks.
var ErrUnknownTest = errors.New("unknown test option")

// CheckBind checks -b, the address goroce's device binds: a server needs
// one (rstream's default, every address, has no goroce equivalent).
func (o *Options) CheckBind() error {
	if o.Server == "" && o.Bind == "" {
		return errors.New("-b ADDR is required for the server: goroce's device binds it")
	}
	if o.Bind != "" {
		if _, err := netip.ParseAddr(o.Bind); err != nil {
			return fmt.Errorf("-b: %v", err)
		}
	}
	return nil
}
