package oob

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"

	"github.com/goroce/goroce/internal/ibv"
)

// PerftestConfig configures a PerftestConn.
type PerftestConfig struct {
	// Role is Client (the side that connected, perftest run with a server
	// name) or Server.
	Role Role
	// Version is the perftest version announced to the peer; empty means
	// DefaultPerftestVersion. It must be a number in [5.70, 6.28): older
	// ones are refused by every current perftest and newer ones make 6.28+
	// peers start the binary negotiation, which embeds a raw struct
	// ibv_device_attr. Versions before 6.17 also write "done" when closing.
	Version string
	// KeyFormat is the key-line layout; the zero value, KeyFormatGID, is
	// what perftest uses on RoCE. The peer must use the same one. The
	// rdma_cm formats are for perftest's -R, its exchanges carried by
	// SENDs on a control connection (nc reads and writes one message per
	// block): the keys are binary and Close writes no "done".
	KeyFormat KeyFormat
	// ReportPerPort adds the per-port values to the bandwidth report, as
	// perftest's --report_per_port (set on both sides) does.
	ReportPerPort bool
}

// PerftestConn is one side of perftest's out-of-band TCP connection. The
// exchange methods, called in the order the test program uses (see
// PerftestSequence, or let Run drive them), each write a block and read the
// peer's in the order of c's role.
//
// After any error the connection is out of step with its peer and every
// later exchange returns that first error; only Close remains useful. A
// PerftestConn is not safe for concurrent use.
type PerftestConn struct {
	nc      net.Conn
	cfg     PerftestConfig
	version float64 // ours, parsed

	remoteVersion string
	remote        float64 // the peer's, parsed; 0 until ExchangeVersions

	barrierDest Dest // the Dest of QP 0, re-sent by barriers
	haveDest    bool

	buf  []byte // outgoing block
	rbuf []byte // incoming block
	err  error  // sticky
}

// NewPerftestConn wraps nc, a connected TCP connection, for the role and
// options in cfg. It fails only on an invalid configuration. The
// PerftestConn owns nc from then on: Close and Run close it.
func NewPerftestConn(nc net.Conn, cfg PerftestConfig) (*PerftestConn, error) {
	if cfg.Role != Client && cfg.Role != Server {
		return nil, errBadRole
	}
	if cfg.Version == "" {
		cfg.Version = DefaultPerftestVersion
	}
	v, err := checkLocalVersion(cfg.Version)
	if err != nil {
		return nil, err
	}
	if cfg.KeyFormat.Size() == 0 {
		return nil, fmt.Errorf("oob: unknown %v", cfg.KeyFormat)
	}
	return &PerftestConn{
		nc:      nc,
		cfg:     cfg,
		version: v,
		buf:     make([]byte, 0, keyMsgSizeGIDDV),
		rbuf:    make([]byte, keyMsgSizeGIDDV),
	}, nil
}

// Role returns the connection's role.
func (c *PerftestConn) Role() Role { return c.cfg.Role }

// Version returns the version c announces.
func (c *PerftestConn) Version() string { return c.cfg.Version }

// RemoteVersion returns the version the peer announced, or "" before
// ExchangeVersions.
func (c *PerftestConn) RemoteVersion() string { return c.remoteVersion }

// NetConn returns the underlying connection, for its addresses.
func (c *PerftestConn) NetConn() net.Conn { return c.nc }

// xchg exchanges one block: out is written and len(in) bytes are read into
// in, the client writing first and the server reading first
// (ctx_xchg_data_ethernet, ctx_hand_shake).
func (c *PerftestConn) xchg(ctx context.Context, out, in []byte, what string) error {
	if c.err != nil {
		return c.err
	}
	err := withContext(ctx, c.nc, func() error {
		if c.cfg.Role == Client {
			if err := writeBlock(c.nc, out, what); err != nil {
				return err
			}
			return readBlock(c.nc, in, what)
		}
		if err := readBlock(c.nc, in, what); err != nil {
			return err
		}
		return writeBlock(c.nc, out, what)
	})
	if err != nil {
		c.err = c.fail(err)
	}
	return c.err
}

// fail prefixes err with the package and role, once.
func (c *PerftestConn) fail(err error) error {
	return fmt.Errorf("oob: perftest %v: %w", c.cfg.Role, err)
}

// protocolError records a parse or validation error of the peer's block as
// the connection's sticky error and returns it.
func (c *PerftestConn) protocolError(err error) error {
	c.err = c.fail(err)
	return c.err
}

// ExchangeVersions exchanges the 16-byte version strings
// (exchange_versions) and checks the peer's as check_version_compatibility
// does: a peer older than 5.70 gives ErrIncompatibleVersion. It returns the
// peer's version, which decides the shape of the later blocks.
func (c *PerftestConn) ExchangeVersions(ctx context.Context) (string, error) {
	out := appendVersionBlock(c.buf[:0], c.cfg.Version)
	in := c.rbuf[:perftestVersionSize]
	if err := c.xchg(ctx, out, in, "version"); err != nil {
		return "", err
	}
	s, v, err := parseVersionBlock(in)
	if err != nil {
		return "", c.protocolError(err)
	}
	c.remoteVersion, c.remote = s, v
	if v < versionMinCompatible {
		return s, c.protocolError(fmt.Errorf("%w: peer announced %s, perftest requires 5.70 or later", ErrIncompatibleVersion, s))
	}
	return s, nil
}

// errNoVersion is returned by exchanges that depend on the peer's version
// when ExchangeVersions has not succeeded.
var errNoVersion = errors.New("oob: perftest: exchange versions first")

func (c *PerftestConn) needVersion() error {
	if c.err != nil {
		return c.err
	}
	if c.remoteVersion == "" {
		return errNoVersion
	}
	return nil
}

// ExchangeSysData exchanges the cycle buffer (page) size and the cache line
// size (check_sys_data), each as a big-endian 32-bit block, and returns the
// peer's values; both sides then use local.Max(remote). Peers older than
// 5.32 do not have the step: it returns the zero SysData without any I/O.
// Values that are not powers of two up to 2^30 are refused (ErrMalformed):
// they size and align the test buffers.
func (c *PerftestConn) ExchangeSysData(ctx context.Context, local SysData) (SysData, error) {
	if err := c.needVersion(); err != nil {
		return SysData{}, err
	}
	if c.remote < versionSysData {
		return SysData{}, nil
	}
	out := appendSysData(c.buf[:0], local)
	in := c.rbuf[:2*sysDataFieldSize]
	if err := c.xchg(ctx, out[:sysDataFieldSize], in[:sysDataFieldSize], "cycle buffer size"); err != nil {
		return SysData{}, err
	}
	if err := c.xchg(ctx, out[sysDataFieldSize:], in[sysDataFieldSize:], "cache line size"); err != nil {
		return SysData{}, err
	}
	remote := SysData{
		CycleBuffer:   int32(binary.BigEndian.Uint32(in)),
		CacheLineSize: int32(binary.BigEndian.Uint32(in[sysDataFieldSize:])),
	}
	if err := remote.check(); err != nil {
		return SysData{}, c.protocolError(err)
	}
	return remote, nil
}

// ExchangeMTU exchanges the active MTU (check_mtu): the ibv_mtu enum as
// decimal text, in a 2-byte block toward peers from 5.31 on. It returns the
// peer's MTU; both sides then use the smaller one. Peers older than 5.1 do
// not have the step: it returns local without any I/O.
func (c *PerftestConn) ExchangeMTU(ctx context.Context, local ibv.MTU) (ibv.MTU, error) {
	if err := c.needVersion(); err != nil {
		return 0, err
	}
	if !local.Valid() {
		return 0, fmt.Errorf("oob: perftest: invalid local %v", local)
	}
	if c.remote < versionMTU {
		return local, nil
	}
	size := mtuBlockSize(c.remote)
	out := appendMTUBlock(c.buf[:0], local, size)
	in := c.rbuf[:size]
	if err := c.xchg(ctx, out, in, "MTU"); err != nil {
		return 0, err
	}
	m, err := parseMTUBlock(in)
	if err != nil {
		return 0, c.protocolError(err)
	}
	return m, nil
}

// ExchangeDest sends local's key line and returns the peer's (one
// ctx_hand_shake). The first Dest exchanged is remembered as the one
// barriers re-send, as perftest re-sends QP 0's.
func (c *PerftestConn) ExchangeDest(ctx context.Context, local Dest) (Dest, error) {
	if c.err != nil {
		return Dest{}, c.err
	}
	if err := local.check(); err != nil {
		return Dest{}, err
	}
	if !c.haveDest {
		c.barrierDest, c.haveDest = local, true
	}
	return c.handShake(ctx, local, "key line")
}

// ExchangeDests runs ExchangeDest for each QP in order, as perftest's loops
// over num_of_qps do, and returns the peer's Dests.
func (c *PerftestConn) ExchangeDests(ctx context.Context, local []Dest) ([]Dest, error) {
	remote := make([]Dest, len(local))
	for i, d := range local {
		r, err := c.ExchangeDest(ctx, d)
		if err != nil {
			return nil, err
		}
		remote[i] = r
	}
	return remote, nil
}

// Barrier waits until the peer reaches the same point: perftest's
// synchronisation is a ctx_hand_shake that re-sends the key line of QP 0
// (the first Dest exchanged; a zero Dest before any) and ignores the
// answer, which must still be a well-formed key line.
func (c *PerftestConn) Barrier(ctx context.Context) error {
	_, err := c.handShake(ctx, c.barrierDest, "barrier key line")
	return err
}

func (c *PerftestConn) handShake(ctx context.Context, local Dest, what string) (Dest, error) {
	f := c.cfg.KeyFormat
	out := AppendKeyLine(c.buf[:0], local, f)
	in := c.rbuf[:f.Size()]
	if err := c.xchg(ctx, out, in, what); err != nil {
		return Dest{}, err
	}
	d, err := ParseKeyLine(in, f)
	if err != nil {
		return Dest{}, c.protocolError(err)
	}
	return d, nil
}

// ExchangeBWReport exchanges bandwidth reports (xchg_bw_reports): each
// field is its own block, size first, with 4-byte iteration counts toward
// peers older than 5.33. It returns the peer's report.
func (c *PerftestConn) ExchangeBWReport(ctx context.Context, local BWReport) (BWReport, error) {
	if err := c.needVersion(); err != nil {
		return BWReport{}, err
	}
	l := layoutFor(c.remote, c.cfg.ReportPerPort)
	out := AppendBWReport(c.buf[:0], local, l)
	in := c.rbuf[:l.Size()]
	off := 0
	for i, n := range l.fieldSizes() {
		if err := c.xchg(ctx, out[off:off+n], in[off:off+n], reportFieldNames[i]); err != nil {
			return BWReport{}, err
		}
		off += n
	}
	r, err := ParseBWReport(in, l)
	if err != nil {
		return BWReport{}, c.protocolError(err)
	}
	return r, nil
}

var reportFieldNames = [...]string{
	"report size", "report iterations", "report peak bandwidth", "report average bandwidth",
	"report message rate", "report port 1 bandwidth", "report port 1 message rate",
	"report port 2 bandwidth", "report port 2 message rate",
}

// Close ends the exchange as ctx_close_connection does, a last barrier,
// then, when announcing a version before 6.17, writes "done\0" as those
// versions did, and closes the connection. Nobody reads the "done": a
// failure to write it (the peer may already have closed) is ignored. After
// an earlier error Close only closes the connection and returns that error.
func (c *PerftestConn) Close(ctx context.Context) error {
	if c.err != nil {
		c.nc.Close()
		return c.err
	}
	if err := c.Barrier(ctx); err != nil {
		c.nc.Close()
		return err
	}
	// In rdma_cm mode (a binary key format) perftest writes no "done".
	if c.version < versionNoDone && !c.cfg.KeyFormat.binary() {
		_ = withContext(ctx, c.nc, func() error { return writeBlock(c.nc, doneMsg, "done") })
	}
	if err := c.nc.Close(); err != nil {
		return c.fail(fmt.Errorf("close: %w", err))
	}
	c.err = c.fail(net.ErrClosed)
	return nil
}

// abort closes the connection without the closing barrier, as a perftest
// test that has no ctx_close_connection (ib_write_lat) does on exit.
func (c *PerftestConn) abort() error {
	err := c.nc.Close()
	if c.err == nil {
		c.err = c.fail(net.ErrClosed)
	}
	return err
}
