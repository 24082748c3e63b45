package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/internal/pcap"
	"github.com/goroce/goroce/internal/wire"
)

// Exit statuses.
const (
	exitOK        = 0
	exitCheckFail = 1
	exitUsageOrIO = 2
)

// options are the command-line settings.
type options struct {
	verbose bool
	check   bool
	port    uint16
	mtu     int
	qpns    []wire.QPN // destination QPN filter; empty: all
}

func (o *options) wantQPN(q wire.QPN) bool {
	if len(o.qpns) == 0 {
		return true
	}
	for _, x := range o.qpns {
		if x == q {
			return true
		}
	}
	return false
}

// stats counts what the dump saw, over all files.
type stats struct {
	roce      int // RoCEv2 packets considered (after the QPN filter)
	malformed int // of which failed to parse
	badICRC   int // of which have a wrong ICRC
	other     int // frames that are not RoCEv2
	filtered  int // RoCEv2 packets left out by the QPN filter
}

func (s *stats) ok() bool { return s.malformed == 0 && s.badICRC == 0 }

// summary is the line --check prints at the end.
func (s *stats) summary(filtering bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "check: %d RoCEv2 packets, %d malformed, %d bad ICRC, %d other frames skipped",
		s.roce, s.malformed, s.badICRC, s.other)
	if filtering {
		fmt.Fprintf(&b, ", %d filtered out by --qpn", s.filtered)
	}
	if s.ok() {
		b.WriteString(": OK")
	} else {
		b.WriteString(": FAIL")
	}
	return b.String()
}

// run is the whole command: it parses args, dumps every file to stdout and
// reports problems on stderr. It returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	opt, files, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "goroce-dump: %v\n", err)
		return exitUsageOrIO
	}
	out := bufio.NewWriterSize(stdout, 64<<10)
	var st stats
	status := exitOK
	for _, path := range files {
		if len(files) > 1 {
			fmt.Fprintf(out, "==> %s <==\n", path)
		}
		if err := dumpFile(path, opt, out, &st); err != nil {
			// Keep stdout and stderr in order for a reader of both.
			out.Flush()
			fmt.Fprintf(stderr, "goroce-dump: %s: %v\n", path, err)
			status = exitUsageOrIO
		}
	}
	if opt.check {
		fmt.Fprintln(out, st.summary(len(opt.qpns) > 0))
		if !st.ok() && status == exitOK {
			status = exitCheckFail
		}
	}
	if err := out.Flush(); err != nil {
		fmt.Fprintf(stderr, "goroce-dump: writing output: %v\n", err)
		return exitUsageOrIO
	}
	return status
}

const usage = `usage: goroce-dump [flags] FILE.pcap...

Prints one line per RoCEv2 packet (UDP to port 4791) with its headers and
ICRC status. Flags may come before or after the files.

`

// parseArgs parses the flags, which may be mixed with the file names.
func parseArgs(args []string, stderr io.Writer) (*options, []string, error) {
	opt := &options{}
	fs := flag.NewFlagSet("goroce-dump", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	fs.BoolVar(&opt.verbose, "v", false, "print every header field, one header per line")
	fs.BoolVar(&opt.check, "check", false, "print a summary and exit 1 if any RoCEv2 packet is malformed or has a bad ICRC")
	port := fs.Uint("port", wire.RoCEv2Port, "UDP destination `port` of RoCEv2 packets")
	fs.IntVar(&opt.mtu, "mtu", 0, "check payload lengths against this path `MTU` (256, 512, 1024, 2048 or 4096; 0: off)")
	fs.Func("qpn", "only packets to these destination `QPNs` (0x-prefixed hex or decimal; comma-separated or repeated)", func(s string) error {
		for _, f := range strings.Split(s, ",") {
			q, err := parseQPN(strings.TrimSpace(f))
			if err != nil {
				return err
			}
			opt.qpns = append(opt.qpns, q)
		}
		return nil
	})

	// flag stops at the first file name; collect it and parse on, so that
	// "goroce-dump x.pcap --check" works too. After "--" every argument is
	// a file.
	var files []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return nil, nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			files = append(files, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		files = append(files, rest[0])
		args = rest[1:]
	}
	if *port == 0 || *port > 0xffff {
		return nil, nil, fmt.Errorf("--port %d: not a UDP port", *port)
	}
	opt.port = uint16(*port)
	switch opt.mtu {
	case 0, 256, 512, 1024, 2048, 4096:
	default:
		return nil, nil, fmt.Errorf("--mtu %d: not an InfiniBand MTU (256, 512, 1024, 2048 or 4096)", opt.mtu)
	}
	if len(files) == 0 {
		fs.Usage()
		return nil, nil, errors.New("no capture file given")
	}
	return opt, files, nil
}

// parseQPN reads a QPN as 0x-prefixed hexadecimal or as decimal. A leading
// 0 does not mean octal: QPNs are always shown in hex, so "014" is
// ambiguous and rejected.
func parseQPN(s string) (wire.QPN, error) {
	var v uint64
	var err error
	switch {
	case strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X"):
		v, err = strconv.ParseUint(s[2:], 16, 32)
	case len(s) > 1 && s[0] == '0':
		return 0, fmt.Errorf("QPN %q: write hexadecimal with 0x", s)
	default:
		v, err = strconv.ParseUint(s, 10, 32)
	}
	if err != nil || v > wire.QPNMask {
		return 0, fmt.Errorf("QPN %q: not a 24-bit number", s)
	}
	return wire.QPN(v), nil
}

// dumpFile prints the RoCEv2 packets of one capture and adds to st. It
// returns an error for a file it cannot read to the end; the packets before
// the damage are printed.
func dumpFile(path string, opt *options, out *bufio.Writer, st *stats) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return dumpStream(f, opt, out, st)
}

// dumpStream is dumpFile for a capture read from in.
func dumpStream(in io.Reader, opt *options, out *bufio.Writer, st *stats) error {
	r, err := pcap.NewReader(in)
	if err != nil {
		return err
	}
	lt := r.LinkType()
	if !lt.Supported() {
		return fmt.Errorf("%w: %v", pcap.ErrUnsupportedLinkType, lt)
	}
	d := decoder{opt: opt, linkType: lt, nano: r.Nanosecond()}
	var first time.Time
	for index := 1; ; index++ {
		rec, err := r.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if index == 1 {
			first = rec.Timestamp
		}
		p, kind := d.decode(index, rec.Timestamp.Sub(first), rec)
		switch kind {
		case kindOther:
			st.other++
			continue
		case kindFiltered:
			st.filtered++
			continue
		}
		st.roce++
		if p.malformed() {
			st.malformed++
		}
		if p.icrcBad() {
			st.badICRC++
		}
		writeLine(out, p)
		if opt.verbose {
			writeVerbose(out, p)
		}
	}
}
