package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/goroce/goroce/internal/oob"
	"github.com/goroce/goroce/internal/tooldev"
	"github.com/goroce/goroce/verbs"
)

// testKind is one of the eight perftest programs goroce-perf stands in for.
type testKind struct {
	name  string           // command-line name, e.g. "write_bw"
	kind  oob.PerftestKind // the out-of-band sequence it follows
	verb  verb
	lat   bool   // a latency (ping-pong) test rather than a bandwidth test
	title string // the banner line perftest prints, before " BW Test"/" Latency Test"
}

// verb is the operation a test measures.
type verb int

const (
	verbWrite verb = iota
	verbRead
	verbSend
	verbAtomic
)

var tests = []testKind{
	{"write_bw", oob.WriteBW, verbWrite, false, "RDMA_Write"},
	{"write_lat", oob.WriteLat, verbWrite, true, "RDMA_Write"},
	{"read_bw", oob.ReadBW, verbRead, false, "RDMA_Read"},
	{"read_lat", oob.ReadLat, verbRead, true, "RDMA_Read"},
	{"send_bw", oob.SendBW, verbSend, false, "Send"},
	{"send_lat", oob.SendLat, verbSend, true, "Send"},
	{"atomic_bw", oob.AtomicBW, verbAtomic, false, "Atomic"},
	{"atomic_lat", oob.AtomicLat, verbAtomic, true, "Atomic"},
}

func lookupTest(name string) (testKind, bool) {
	name = strings.TrimPrefix(name, "ib_")
	for _, t := range tests {
		if t.name == name {
			return t, true
		}
	}
	return testKind{}, false
}

// perftest's defaults (perftest_parameters.h).
const (
	defSizeBW      = 65536
	defSizeLat     = 2
	defItersBW     = 5000
	defItersLat    = 1000
	defTxBW        = 128
	defTxLat       = 1
	defRxSend      = 512
	ucMaxRx        = 16000      // UC_MAX_RX: the UC and UD receive depth's cap
	udQKey         = 0x11111111 // DEF_QKEY, the UD QPs' Q_Key
	defCQMod       = 100
	defDuration    = 5
	defQPTimeout   = 14
	defRetryCount  = 7
	defRNRRetry    = 7
	defMinRNRTimer = 12
	defHopLimit    = 64
	defPageSize    = 4096
	defCacheLine   = 64
	atomicSize     = 8
	// runAllMaxPow is the last power of two -a runs: perftest's sizes go
	// from 2 to 2^23 (8 MiB, its MAX_SIZE).
	runAllMaxPow = 23
	// msgSizeCQModLimit is the size above which perftest stops moderating
	// completions (MSG_SIZE_CQ_MOD_LIMIT).
	msgSizeCQModLimit = 8192
)

// config is the parsed command line.
type config struct {
	test       testKind
	host       string // server to connect to; empty: be the server
	size       int
	sizeSet    bool // -s was given
	all        bool
	iters      int
	duration   int // seconds; 0: run -n iterations
	port       int
	mtu        int // bytes; 0: the port's active MTU
	qps        int
	txDepth    int
	postList   int // -l: work requests per post
	cqModReq   int // -Q: work requests per signaled completion; 0 when not given
	outs       int // 0: the device maximum
	gidIndex   int
	ibDev      string
	hw         bool // -d names a kernel RDMA device (tooldev)
	gidAuto    bool // --hw without -x: the GID index is picked for the device
	bidir      bool
	atomicType string
	inline     int
	conn       string
	gbits      bool
	cpuFreqF   bool

	bind          string
	loopback      bool
	loopbackAddrs [2]netip.Addr
	udpPort       int
	check         bool
	sr            bool
	json          bool
	plot          string
	counters      bool
	qpTimeout     int // local ACK timeout code of the QPs (-u)
	busyPoll      bool
	rxQueues      int
	plotRef       string // LABEL=FILE: a reference latency distribution for the plot
	rdmaCM        bool   // -R: perftest's rdma_cm mode
	pskFile       string // --psk-file: seal the connections (cm.Security) with this key
	psk           []byte // its contents
	// Congestion control (DeviceConfig.CongestionControl): --no-ecn,
	// --rtt-cc and --rtt-target (microseconds, 0: the default).
	noECN      bool
	rttCC      bool
	rttTarget  int
	cpuProfile string // --cpuprofile: write a CPU profile of the run here
}

// parseArgs parses "TEST [flags] [server-host] [flags]".
func parseArgs(args []string, stderr io.Writer) (*config, error) {
	if len(args) == 0 {
		return nil, errors.New("missing TEST: one of " + testNames())
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		fmt.Fprintf(stderr, "usage: goroce-perf TEST [flags] [server-host]\n"+
			"TEST is one of %s; \"goroce-perf TEST -h\" lists the flags.\n", testNames())
		return nil, flag.ErrHelp
	}
	t, ok := lookupTest(args[0])
	if !ok {
		return nil, fmt.Errorf("unknown test %q: want one of %s", args[0], testNames())
	}
	c := &config{test: t}
	fs := flag.NewFlagSet("goroce-perf "+t.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	size, iters, txDepth := -1, -1, -1
	loopAddrs := "127.0.0.1,127.0.0.2"
	c.defineFlags(fs, &size, &iters, &txDepth, &loopAddrs)

	rest := args[1:]
	for {
		if err := fs.Parse(rest); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		if c.host != "" {
			return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
		}
		c.host = fs.Arg(0)
		rest = fs.Args()[1:]
	}

	c.setDefaults(size, iters, txDepth)
	if err := tooldev.GorocOnly(fs, c.hw, goroceOnlyFlags...); err != nil {
		return nil, err
	}
	c.gidAuto = c.hw && !tooldev.Given(fs, "x", "gid-index")
	if tooldev.Given(fs, "Q", "cq-mod") && c.cqModReq < 1 {
		return nil, fmt.Errorf("-Q %d: at least one work request per completion", c.cqModReq)
	}
	return c, c.validate(loopAddrs)
}

// goroceOnlyFlags configure or report what only a goroce device has: a
// kernel device (--hw) refuses them rather than ignore them. (-m is the
// device's MTU on goroce, the path MTU on a kernel device; --busy-poll
// spins this program's loops on either.)
var goroceOnlyFlags = []string{"udp-port", "receive-queues", "no-ecn", "rtt-cc", "rtt-target",
	"selective-repeat", "psk-file", "counters", "drop", "mark-ce"}

// defineFlags defines the flags on fs, each under perftest's short name,
// long name or both. Those whose default depends on the test (-s, -n, -t)
// and --loopback-addrs land in the variables given, for parseArgs to
// resolve.
func (c *config) defineFlags(fs *flag.FlagSet, size, iters, txDepth *int, loopAddrs *string) {
	both := func(p any, short, long string, def any, usage string) {
		for _, name := range []string{short, long} {
			if name == "" {
				continue
			}
			switch p := p.(type) {
			case *int:
				fs.IntVar(p, name, def.(int), usage)
			case *string:
				fs.StringVar(p, name, def.(string), usage)
			case *bool:
				fs.BoolVar(p, name, def.(bool), usage)
			}
		}
	}
	both(size, "s", "size", -1, "message size in bytes (default 65536 for bw, 2 for lat, 8 for atomics)")
	both(&c.all, "a", "all", false, "run sizes from 2 to 2^23 bytes")
	both(iters, "n", "iters", -1, "iterations per size (default 5000 bw, 1000 lat)")
	both(&c.duration, "D", "duration", 0, "run each size for this many seconds instead of -n iterations")
	both(&c.port, "p", "port", oob.DefaultPort, "TCP port of the out-of-band exchange")
	both(&c.mtu, "m", "mtu", 0, "path MTU in bytes (256..4096); default the port's active MTU")
	both(&c.qps, "q", "qp", 1, "number of QPs")
	both(txDepth, "t", "tx-depth", -1, "send queue depth (default 128 bw, 1 lat)")
	both(&c.postList, "l", "post_list", 1, "post lists of this many send work requests at once (bandwidth tests)")
	both(&c.cqModReq, "Q", "cq-mod", 0, "signal one send completion per this many work requests (bandwidth tests; default 100, and 1 for messages above 8 KiB or with -D unless given)")
	both(&c.outs, "o", "outs", 0, "outstanding RDMA READs/atomics (default the device maximum)")
	both(&c.qpTimeout, "u", "qp-timeout", defQPTimeout, "QP timeout: retransmission after 4.096 usec * 2^timeout (0..31)")
	both(&c.gidIndex, "x", "gid-index", 1, "GID index of the local port (goroce: 1, the GID of the bound address; with --hw default the RoCE v2 GID of the local address, else of the first IPv4 one)")
	both(&c.ibDev, "d", "ib-dev", verbs.DefaultDeviceName, "device name")
	both(&c.hw, "", tooldev.Flag, false, strings.ReplaceAll(tooldev.Usage, "\n", " "))
	both(&c.bidir, "b", "bidirectional", false, "traffic in both directions (bandwidth tests)")
	both(&c.atomicType, "A", "atomic_type", "FETCH_AND_ADD", "CMP_AND_SWAP or FETCH_AND_ADD")
	both(&c.inline, "I", "inline_size", 0, "send WRITEs and SENDs up to this size inline")
	both(&c.conn, "c", "connection", "RC", "connection type: RC, UC (WRITE and SEND tests) or UD (SEND tests)")
	both(&c.gbits, "", "report_gbits", false, "report bandwidth in Gb/sec instead of MB/sec")
	both(&c.rdmaCM, "R", "rdma_cm", false, "connect the QPs with rdma_cm, and exchange perftest's blocks on an rdma_cm control connection instead of TCP")
	both(&c.pskFile, "", "psk-file", "", "with -R, authenticate and encrypt every packet (goroce peers only: cm.Security, required) under keys agreed from the pre-shared key in FILE (at least 16 bytes; surrounding white space ignored)")
	both(&c.cpuFreqF, "F", "", false, "accepted for perftest compatibility (no CPU frequency check here)")
	both(&c.bind, "", "bind", "", "local IP address of the device (default: the address the TCP connection uses)")
	both(&c.loopback, "", "loopback", false, "run server and client in this process")
	both(loopAddrs, "", "loopback-addrs", *loopAddrs, "the server's and the client's addresses with --loopback")
	both(&c.udpPort, "", "udp-port", verbs.DefaultUDPPort, "RoCEv2 UDP port of both devices (only goroce peers can change it)")
	both(&c.check, "", "check", false, "validate the data end to end (goroce peers only)")
	both(&c.sr, "", "selective-repeat", false, "RC: selective repeat and an adaptive retransmission timeout instead of go-back-N (goroce peers only: give it on both sides)")
	both(&c.json, "", "json", false, "print one JSON object per result line instead of the table")
	both(&c.counters, "", "counters", false, "print the device's counters (rxe's hw_counters and goroce's own) at the end")
	both(&c.busyPoll, "", "busy-poll", false, "poll completions and memory in a tight loop that also receives the device's packets (DeviceConfig.BusyPoll), never yielding the processor (lowest latency; burns a core per waiting side)")
	both(&c.rxQueues, "", "receive-queues", 1, "receive the device's packets on this many sockets and goroutines, QPs spread over them by number (DeviceConfig.ReceiveQueues; Linux only)")
	both(&c.plotRef, "", "plot-ref", "", "LABEL=FILE: draw FILE's latencies (one per line, usec) in the plot's CDF as LABEL, e.g. a UDP ping-pong")
	both(&c.noECN, "", "no-ecn", false, "turn off ECN: no ECT(0), no CNPs, no DCQCN (DeviceConfig.CongestionControl.NoECN)")
	both(&c.rttCC, "", "rtt-cc", false, "RC: the RTT-based congestion window, for paths whose queues mark no ECN (CongestionControl.RTT)")
	both(&c.rttTarget, "", "rtt-target", 0, "with --rtt-cc, the target round trip in microseconds (default 1000)")
	both(&c.cpuProfile, "", "cpuprofile", "", "write a CPU profile of the whole run (connection set-up included) to `file`, for go tool pprof")
	defineFaultFlags(fs)
	both(&c.plot, "", "plot", "", "write plots of bandwidth against message size (use -a) and a latency CDF to FILE.svg or FILE.png")
}

// setDefaults resolves -s, -n and -t (negative: not given) to perftest's
// defaults for the test.
func (c *config) setDefaults(size, iters, txDepth int) {
	switch {
	case size >= 0:
		c.size, c.sizeSet = size, true
	case c.test.verb == verbAtomic:
		c.size = atomicSize
	case c.test.lat:
		c.size = defSizeLat
	default:
		c.size = defSizeBW
	}
	switch {
	case iters >= 0:
		c.iters = iters
	case c.test.lat:
		c.iters = defItersLat
	default:
		c.iters = defItersBW
	}
	switch {
	case txDepth >= 0:
		c.txDepth = txDepth
	case c.test.lat:
		c.txDepth = defTxLat
	default:
		c.txDepth = defTxBW
	}
	if c.iters > 0 && c.txDepth > c.iters {
		c.txDepth = c.iters // force_dependecies
	}
}

func testNames() string {
	var n []string
	for _, t := range tests {
		n = append(n, t.name)
	}
	return strings.Join(n, ", ")
}

// validate checks what can be checked before touching the network, and
// puts the connection and atomic types and the addresses in their final
// form.
func (c *config) validate(loopAddrs string) error {
	if err := c.checkValues(); err != nil {
		return err
	}
	if err := c.checkConnType(); err != nil {
		return err
	}
	if err := c.readPSK(); err != nil {
		return err
	}
	return c.checkAddrs(loopAddrs)
}

// readPSK reads --psk-file.
func (c *config) readPSK() error {
	if c.pskFile == "" {
		return nil
	}
	if !c.rdmaCM {
		return errors.New("--psk-file needs -R: the keys are agreed in the rdma_cm handshake")
	}
	b, err := os.ReadFile(c.pskFile)
	if err != nil {
		return fmt.Errorf("--psk-file: %w", err)
	}
	c.psk = bytes.TrimSpace(b)
	return nil
}

// checkValues checks the numbers and the combinations of flags, and reads
// --plot-ref.
func (c *config) checkValues() error {
	switch {
	case c.size < 1:
		return fmt.Errorf("-s %d: the message size must be at least 1", c.size)
	case c.test.verb == verbAtomic && c.size != atomicSize:
		return fmt.Errorf("-s %d: atomics move exactly 8 bytes", c.size)
	case c.test.verb == verbAtomic && c.all:
		return errors.New("-a: atomic tests have a single size (8 bytes)")
	case c.iters < 1 && c.duration == 0:
		return fmt.Errorf("-n %d: at least one iteration", c.iters)
	case c.test.lat && c.duration == 0 && c.iters < 5:
		// print_report_lat drops the first delta and the two largest.
		return fmt.Errorf("-n %d: latency tests need at least 5 iterations", c.iters)
	case c.duration < 0:
		return fmt.Errorf("-D %d: the duration must be positive", c.duration)
	case (c.port < 1 && !(c.port == 0 && c.loopback)) || c.port > 65535:
		return fmt.Errorf("-p %d: not a TCP port", c.port)
	case c.udpPort < 1 || c.udpPort > 65535:
		return fmt.Errorf("--udp-port %d: not a UDP port", c.udpPort)
	case c.qps < 1:
		return fmt.Errorf("-q %d: at least one QP", c.qps)
	case c.test.lat && c.qps != 1:
		return errors.New("-q: latency tests use one QP")
	case c.txDepth < 1:
		return fmt.Errorf("-t %d: the send queue depth must be at least 1", c.txDepth)
	case c.outs < 0:
		return fmt.Errorf("-o %d: must be positive", c.outs)
	case c.qpTimeout < 0 || c.qpTimeout > 31:
		return fmt.Errorf("-u %d: the QP timeout is a 5-bit code (0..31)", c.qpTimeout)
	case c.postList < 1:
		return fmt.Errorf("-l %d: a post list holds at least one work request", c.postList)
	case c.postList > 1 && c.test.lat:
		return errors.New("-l: post lists are for bandwidth tests")
	case c.hw && c.gidIndex < 0:
		return fmt.Errorf("-x %d: not a GID index", c.gidIndex)
	case !c.hw && c.gidIndex != 1:
		// Index 0 is a link-local GID derived from the node GUID: no
		// address the device sends from or receives on.
		return fmt.Errorf("-x %d: a goroce port carries traffic on GID index 1 only (0 is its link-local GID)", c.gidIndex)
	case c.inline < 0:
		return fmt.Errorf("-I %d: must be positive", c.inline)
	case c.bidir && c.test.lat:
		return errors.New("-b: bidirectional runs are for bandwidth tests")
	case c.duration > 0 && (c.test.verb == verbSend || c.test.lat && c.test.verb == verbWrite):
		// Both sides must stop after the same message; perftest
		// synchronises that with timers, goroce-perf does not yet.
		return fmt.Errorf("-D: not supported by %s yet; use -n", c.test.name)
	case c.plotRef != "" && c.plot == "":
		return errors.New("--plot-ref needs --plot")
	case c.plot != "" && !plotFormatOK(c.plot):
		return fmt.Errorf("--plot %s: want a .svg or .png file", c.plot)
	}
	if c.plotRef != "" {
		// Read it now: a bad file should not wait for the end of the run.
		if _, err := loadPlotRef(c.plotRef); err != nil {
			return err
		}
	}
	if c.mtu != 0 {
		if m := verbs.MTUFromBytes(c.mtu); !m.Valid() || m.Bytes() != c.mtu {
			return fmt.Errorf("-m %d: want 256, 512, 1024, 2048 or 4096", c.mtu)
		}
	}
	return nil
}

// checkConnType checks -c against the test, as perftest's change_conn_type
// (UC has no READ or atomics, UD only SEND), and -A.
func (c *config) checkConnType() error {
	switch conn := strings.ToUpper(c.conn); conn {
	case "RC":
		c.conn = conn
	case "UC", "UD":
		if c.rdmaCM {
			return fmt.Errorf("-c %s: goroce-perf -R connects RC QPs only", conn)
		}
	}
	switch conn := strings.ToUpper(c.conn); conn {
	case "RC":
	case "UC":
		if c.test.verb == verbRead || c.test.verb == verbAtomic {
			return fmt.Errorf("-c UC: UC connection not possible in READ/ATOMIC verbs (%s)", c.test.name)
		}
		c.conn = conn
	case "UD":
		if c.test.verb != verbSend {
			return fmt.Errorf("-c UD: UD connection only possible in SEND verb (%s)", c.test.name)
		}
		c.conn = conn
	case "XRC", "DC", "SRD":
		return fmt.Errorf("-c %s: only RC, UC and UD are supported", c.conn)
	default:
		return fmt.Errorf("-c %s: unknown connection type", c.conn)
	}
	switch strings.ToUpper(c.atomicType) {
	case "FETCH_AND_ADD", "CMP_AND_SWAP":
		c.atomicType = strings.ToUpper(c.atomicType)
	default:
		return fmt.Errorf("-A %s: want CMP_AND_SWAP or FETCH_AND_ADD", c.atomicType)
	}
	return nil
}

// checkAddrs parses --loopback-addrs and --bind.
func (c *config) checkAddrs(loopAddrs string) error {
	if c.loopback {
		if c.host != "" {
			return errors.New("--loopback runs both sides: no server host")
		}
		parts := strings.Split(loopAddrs, ",")
		if len(parts) != 2 {
			return fmt.Errorf("--loopback-addrs %q: want SERVER,CLIENT", loopAddrs)
		}
		for i, p := range parts {
			a, err := netip.ParseAddr(strings.TrimSpace(p))
			if err != nil {
				return fmt.Errorf("--loopback-addrs: %v", err)
			}
			c.loopbackAddrs[i] = a
		}
		if c.loopbackAddrs[0] == c.loopbackAddrs[1] {
			return errors.New("--loopback-addrs: the two addresses must differ (one device each)")
		}
		if c.bind != "" {
			return errors.New("--bind and --loopback exclude each other")
		}
	}
	if c.bind != "" {
		if _, err := netip.ParseAddr(c.bind); err != nil {
			return fmt.Errorf("--bind: %v", err)
		}
	}
	return nil
}

// sizes returns the message sizes to run.
func (c *config) sizes() []int {
	if !c.all {
		return []int{c.size}
	}
	var s []int
	for i := 1; i <= runAllMaxPow; i++ {
		s = append(s, 1<<i)
	}
	return s
}

// maxSize is the largest message of the run, which sizes the buffers.
func (c *config) maxSize() int {
	s := c.sizes()
	return s[len(s)-1]
}

// cqMod is how many send work requests share one signaled completion:
// perftest's -Q, default 100, at most the TX depth; 1 for messages above
// 8 KiB unless -Q was given or -a runs (perftest keeps it then, with a
// warning, warnCQMod), and 1 with -D unless -Q was given (a timed run that
// moderates ends each QP's work with a signaled request, bwLoop.post).
func (c *config) cqMod(size int) int {
	if c.test.lat {
		return 1
	}
	if c.cqModReq > 0 {
		return min(c.cqModReq, c.txDepth)
	}
	m := min(defCQMod, c.txDepth)
	if size > msgSizeCQModLimit && !c.all || c.duration > 0 {
		m = 1
	}
	return max(m, 1)
}

// warnCQMod is perftest's warning for a moderated run of large messages:
// its per-message times are those of the completion that covers each.
func (c *config) warnCQMod(size int) bool {
	return !c.test.lat && c.cqModReq > 1 && c.txDepth > 1 && size > msgSizeCQModLimit
}

// rxDepth is how many receives the send tests keep posted: perftest's 512,
// at most -n, and with UC and UD -n up to 16000, so that every message
// finds a receive posted before the start (force_dependecies): these
// transports have no RNR flow control, a message that finds none is lost.
func (c *config) rxDepth() int {
	d := defRxSend
	switch {
	case c.duration != 0:
	case c.conn == "UC" || c.conn == "UD":
		d = min(c.iters, ucMaxRx)
	case c.iters < d:
		d = c.iters
	}
	return d
}
