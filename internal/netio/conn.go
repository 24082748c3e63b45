package netio

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/goroce/goroce/internal/wire"
)

// Defaults of Config.
const (
	// DefaultReadBuffer is the default receive socket buffer: room for
	// about 2000 packets of 4 KiB, several full windows of a few QPs.
	DefaultReadBuffer = 8 << 20
	// DefaultWriteBuffer is the default send socket buffer of each
	// socket.
	DefaultWriteBuffer = 2 << 20
	// DefaultBatchSize is the default number of datagrams one recvmmsg or
	// sendmmsg call moves.
	DefaultBatchSize = 64
	// DefaultMaxDatagramSize is the default receive buffer per datagram:
	// the largest RoCEv2 packet (a 4096-byte payload, the largest path
	// MTU, plus at most 60 bytes of headers, 3 of pad and the ICRC) with
	// room to spare.
	DefaultMaxDatagramSize = 4096 + 256
	// DefaultEndBatchEvery is the default of Config.EndBatchEvery: a
	// quarter of goroce's default send window at path MTU 1024 (512
	// PSNs; half of its 256 PSNs at 4096). Each batch's end sends its
	// ACKs, a system call that on a veth path also runs the peer's
	// receive and wake-up: at link MTU 1500, 64 packets (64 KiB) made
	// them a quarter of a 64 KiB WRITE responder's CPU, and 128 took the
	// bandwidth up by a tenth and the CPU per GB of both ends down by as
	// much (alternating runs, GOMAXPROCS 1: 2,756-2,770 MB/s at 0.68
	// s/GB against 3,092-3,141 at 0.60-0.62). At MTU 4096, on loopback
	// and for 64-byte messages: no difference beyond the noise. A
	// requester with rxe's window of 128 PSNs lost nothing either
	// (1,348-2,153 against 2,061-2,168 MB/s): when its window is out,
	// the socket drains and the batch ends anyway.
	DefaultEndBatchEvery = 128
)

// Config configures Open.
type Config struct {
	// Addr is the local IP address: an IPv4 address (or its IPv4-mapped
	// IPv6 form, a RoCEv2 GID) or an IPv6 address. It must be a specific
	// unicast address, because the ICRC covers the source address the
	// kernel picks for each packet; link-local IPv6 addresses (with a
	// zone) are not supported.
	Addr netip.Addr
	// Port is the UDP port packets are received on; 0 means 4791, the
	// RoCEv2 port, which every other implementation sends to. A
	// different port only works between goroce peers (tests run several
	// devices on one host).
	Port uint16
	// ReadBuffer and WriteBuffer are the socket buffer sizes in bytes;
	// 0 means DefaultReadBuffer and DefaultWriteBuffer, a negative value
	// the system default.
	ReadBuffer  int
	WriteBuffer int
	// BatchSize is the number of datagrams moved per system call; 0
	// means DefaultBatchSize.
	BatchSize int
	// EndBatchEvery is how many packets a receive batch delivers at most
	// before the Handler's EndBatch runs (see BatchEnder); 0 means
	// DefaultEndBatchEvery, a negative value only at the end of each
	// batch. With UDP_GRO one recvmmsg can return a whole send window
	// (hundreds of packets): ending the batch only after the last of
	// them holds their acknowledgements back while the sender waits for
	// them with its window full, and the two ends then take turns instead
	// of overlapping.
	EndBatchEvery int
	// MaxDatagramSize is the largest UDP payload received; larger
	// datagrams are dropped and counted as malformed. 0 means
	// DefaultMaxDatagramSize.
	MaxDatagramSize int
	// StrictICRC accepts only packets whose ICRC matches with IPv4
	// identification 0 or with the identification predicted from the
	// previous packet of the same source (as goroce peers send them,
	// GSO segments included): a full 32-bit check, but packets from
	// Linux rxe (which counts identifications) are dropped whenever the
	// prediction misses. By default any identification is recovered from
	// the ICRC, which leaves a 16-bit check for such packets (see
	// wire.ICRCChecker).
	StrictICRC bool
	// NoGSO turns off UDP segmentation offload on send: every packet is
	// then its own sendmmsg entry. By default consecutive packets of one
	// flow go to the kernel as one datagram with UDP_SEGMENT, which the
	// kernel (or the NIC) cuts into the packets (see gso_linux.go).
	NoGSO bool
	// NoGRO turns off UDP receive offload: by default the receive socket
	// sets UDP_GRO, so that the kernel may hand over several packets of a
	// flow as one buffer, which Serve splits again.
	NoGRO bool
	// ECT sends every packet with the ECN field at ECT(0) (RFC 3168), as
	// RoCE NICs do when their congestion control is on, so that a queue
	// that marks ECN may mark goroce's packets CE instead of dropping
	// them. The ICRC masks the whole traffic class byte, so any receiver
	// accepts them. Linux only: the portable path sends Not-ECT.
	ECT bool
	// ReusePort sets SO_REUSEPORT on the receive socket, so that the
	// Conns of a receive group (OpenGroup) can bind the same address
	// and port and the kernel spreads the arriving flows among them.
	// Linux only (ReusePortSpreads): elsewhere Open fails with it set.
	// Use OpenGroup rather than setting it: OpenGroup first checks that
	// no other socket holds the port.
	ReusePort bool
	// Faults, if not nil, turns on the fault-injection tap, for tests
	// only: Open fails with ErrFaultsNotBuilt unless the binary was built
	// with the goroce_faults tag (see Faults).
	Faults *Faults
}

func (cfg Config) withDefaults() (Config, error) {
	if !cfg.Addr.IsValid() {
		return cfg, errors.New("netio: Config.Addr is not set")
	}
	cfg.Addr = cfg.Addr.Unmap()
	switch a := cfg.Addr; {
	case a.IsUnspecified():
		return cfg, fmt.Errorf("netio: Config.Addr %v is unspecified: a RoCE device binds one address", a)
	case a.IsMulticast():
		return cfg, fmt.Errorf("netio: Config.Addr %v is a multicast address", a)
	case a.Zone() != "":
		return cfg, fmt.Errorf("netio: Config.Addr %v has a zone: link-local addresses are not supported", a)
	}
	if cfg.Port == 0 {
		cfg.Port = wire.RoCEv2Port
	}
	if cfg.ReadBuffer == 0 {
		cfg.ReadBuffer = DefaultReadBuffer
	}
	if cfg.WriteBuffer == 0 {
		cfg.WriteBuffer = DefaultWriteBuffer
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.MaxDatagramSize <= 0 {
		cfg.MaxDatagramSize = DefaultMaxDatagramSize
	}
	if cfg.EndBatchEvery == 0 {
		cfg.EndBatchEvery = DefaultEndBatchEvery
	}
	if cfg.MaxDatagramSize < wire.BTHLen+wire.ICRCLen {
		return cfg, fmt.Errorf("netio: Config.MaxDatagramSize %d is smaller than the smallest RoCEv2 packet", cfg.MaxDatagramSize)
	}
	return cfg, nil
}

// Errors of the send path.
var (
	// ErrNoICRCRoom means a packet passed to Send has fewer than 4 bytes
	// of spare capacity, where the ICRC is appended.
	ErrNoICRCRoom = errors.New("netio: packet has no spare capacity for the ICRC")
	// ErrShortPacket means a packet passed to Send is shorter than a BTH
	// and the pad its BTH announces.
	ErrShortPacket = errors.New("netio: packet shorter than a BTH")
	// ErrDestination means a destination is not a valid address of the
	// local address's family, or has port 0.
	ErrDestination = errors.New("netio: bad destination address")
	// ErrServing means Serve was called while another Serve runs.
	ErrServing = errors.New("netio: Serve is already running")
)

// Conn is a RoCEv2 endpoint on UDP: one socket receiving on the configured
// address and port, and a pool of send sockets, one per source port in use
// (see Sender). It is safe for concurrent use, except that one Serve runs
// at a time.
type Conn struct {
	cfg   Config
	local netip.AddrPort
	v6    bool
	uc    *net.UDPConn
	rc    syscall.RawConn

	counters Counters
	tap      atomic.Pointer[captureTap]
	faults   *faultTap // nil unless Config.Faults; used by Serve only
	closing  atomic.Bool

	// rxMu is held by whoever reads the receive socket and delivers
	// what it read: Serve's loop, a batch at a time, or Poll. serveRx is
	// the receiver of the running Serve (nil when none runs), guarded by
	// rxMu.
	rxMu    sync.Mutex
	serveRx *receiver

	mu      sync.Mutex
	closed  bool
	serving bool
	rx      *receiver          // made by the first Serve, reused
	gso     bool               // senders start with segmentation offload
	gro     bool               // the receive socket has UDP_GRO set
	senders map[uint16]*Sender // by bound port
	aliases map[uint16]uint16  // requested port → bound port, when the bind moved on
	reply   *Sender            // on uc, made by the first ReplySender
}

// Open opens the receive socket of a RoCEv2 endpoint bound to
// cfg.Addr:cfg.Port. Run Serve to receive and Sender to send.
func Open(cfg Config) (*Conn, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	faults, err := newFaultTap(cfg.Faults, cfg.MaxDatagramSize)
	if err != nil {
		return nil, err
	}
	local := netip.AddrPortFrom(cfg.Addr, cfg.Port)
	uc, rc, err := listen(local, receiveSocket, &cfg)
	if err != nil {
		return nil, fmt.Errorf("netio: open %v: %w", local, err)
	}
	c := &Conn{
		cfg:     cfg,
		local:   local,
		v6:      cfg.Addr.Is6(),
		uc:      uc,
		rc:      rc,
		faults:  faults,
		senders: make(map[uint16]*Sender),
		aliases: make(map[uint16]uint16),
	}
	c.gso, c.gro = probeOffloads(rc, &cfg)
	return c, nil
}

// LocalAddr returns the address and port the Conn receives on.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// Counters returns the Conn's counters.
func (c *Conn) Counters() *Counters { return &c.counters }

// Close closes every socket of the Conn: a running Serve returns promptly
// (after the Handler call in progress, if any), and later sends fail with
// net.ErrClosed. Close does not wait for Serve to return, so it may be called
// from a Handler. While a Serve runs, the receive socket is closed by that
// Serve as it returns: the local port is free once Serve has returned.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return net.ErrClosed
	}
	c.closed = true
	c.closing.Store(true)
	serving := c.serving
	senders := c.senders
	c.senders, c.aliases = nil, nil
	tap := c.tap.Swap(nil)
	c.mu.Unlock()

	var err error
	if serving {
		// Serve delivers packets from inside the receive socket's
		// RawConn.Read (see receiver.read), and closing a socket waits
		// until its reads have returned: from a Handler, that would
		// wait for itself. Expire the read deadline instead, which
		// wakes a blocked Serve; Serve sees closing and closes the
		// socket as it returns (stopServing).
		_ = c.uc.SetReadDeadline(aLongTimeAgo)
	} else {
		err = c.uc.Close()
	}
	for _, s := range senders {
		s.closeSocket()
	}
	if tap != nil {
		tap.stop()
	}
	return err
}

// destination checks dst and returns it in the family of the local address
// (an IPv4-mapped address becomes IPv4).
func (c *Conn) destination(dst netip.AddrPort) (netip.AddrPort, error) {
	a := dst.Addr().Unmap()
	if !a.IsValid() || dst.Port() == 0 || a.Is6() != c.v6 || a.IsUnspecified() {
		return netip.AddrPort{}, fmt.Errorf("%w: %v from %v", ErrDestination, dst, c.local.Addr())
	}
	return netip.AddrPortFrom(a, dst.Port()), nil
}
