package oob

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/goroce/goroce/internal/ibv"
)

// DefaultPerftestVersion is the version goroce announces to perftest peers.
//
// What a perftest sends after the version exchange depends only on the
// version its peer announced: the system data from 5.32, a 2-byte MTU from
// 5.31, 8-byte iteration counts from 5.33, and, from 6.28, a binary
// parameter negotiation whose payload embeds a raw struct ibv_device_attr
// (negotiate_params). Every perftest also exits if its peer is older than
// 5.70. Any version in [5.70, 6.28) therefore gets the same, reproducible,
// exchange from every perftest from 5.70 to at least 6.29. 6.06 is the
// version of the perftest the reference captures were made with (Debian
// bookworm), so announcing it makes goroce's byte streams identical in shape
// to a real 6.06's, including the "done" it writes when closing.
const DefaultPerftestVersion = "6.06"

// Version thresholds, compared the way perftest does: atof of the peer's
// version string against a double constant.
const (
	versionMinCompatible = 5.70 // check_version_compatibility
	versionSysData       = 5.32 // check_sys_data
	versionMTU           = 5.1  // check_mtu exchanges at all
	versionMTUTwoBytes   = 5.31 // check_mtu sends char[2] rather than an int
	versionIters64       = 5.33 // xchg_bw_reports sends 8-byte iters
	versionNoDone        = 6.17 // ctx_close_connection stopped writing "done" (perftest 23.10)
	versionNegotiate     = 6.28 // negotiate_params exchanges a raw struct
)

// perftestVersionSize is sizeof(char version[MAX_VERSION]).
const perftestVersionSize = 16

// parseVersion parses a perftest version string: digits, optionally a dot
// and more digits ("6.06", "5.70"). perftest compares versions with atof,
// which would accept more; perftest's own versions always have this form.
func parseVersion(s string) (float64, error) {
	dot := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
		case c == '.' && !dot && i > 0 && i < len(s)-1:
			dot = true
		default:
			return 0, fmt.Errorf("%w: perftest version %s is not a number like 6.06", ErrMalformed, strconv.Quote(s))
		}
	}
	if s == "" {
		return 0, fmt.Errorf("%w: empty perftest version", ErrMalformed)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: perftest version %s: %v", ErrMalformed, strconv.Quote(s), err)
	}
	return v, nil
}

// parseVersionBlock parses the 16-byte version block: a C string, NUL
// terminated within the block. Bytes after the NUL are ignored, as
// perftest's atof ignores them (perftest itself zero-fills them).
func parseVersionBlock(b []byte) (string, float64, error) {
	if len(b) != perftestVersionSize {
		return "", 0, fmt.Errorf("%w: perftest version block of %d bytes, want %d", ErrMalformed, len(b), perftestVersionSize)
	}
	n := bytes.IndexByte(b, 0)
	if n < 0 {
		return "", 0, fmt.Errorf("%w: perftest version not NUL-terminated: %s", ErrMalformed, quoteBytes(b))
	}
	s := string(b[:n])
	v, err := parseVersion(s)
	if err != nil {
		return "", 0, err
	}
	return s, v, nil
}

// appendVersionBlock appends version NUL-padded to 16 bytes, as perftest's
// strncpy into char version[16] leaves it.
func appendVersionBlock(b []byte, version string) []byte {
	b = append(b, version...)
	return append(b, make([]byte, perftestVersionSize-len(version))...)
}

// checkLocalVersion validates the version a PerftestConn will announce.
func checkLocalVersion(s string) (float64, error) {
	if len(s) >= perftestVersionSize {
		return 0, fmt.Errorf("oob: perftest version %q longer than %d bytes", s, perftestVersionSize-1)
	}
	v, err := parseVersion(s)
	if err != nil {
		return 0, fmt.Errorf("oob: local %w", err)
	}
	if v < versionMinCompatible || v >= versionNegotiate {
		return 0, fmt.Errorf("oob: perftest version %s outside [5.70, 6.28): peers would refuse it or ask for the binary parameter negotiation", s)
	}
	return v, nil
}

// SysData is what check_sys_data exchanges: the page size perftest cycles
// buffers by and the CPU cache line size. Each side keeps the larger of its
// own and its peer's value ([SysData.Max]).
type SysData struct {
	CycleBuffer   int32
	CacheLineSize int32
}

// Max returns the field-wise maximum of s and o, as both perftest sides
// settle on.
func (s SysData) Max(o SysData) SysData {
	return SysData{CycleBuffer: max(s.CycleBuffer, o.CycleBuffer), CacheLineSize: max(s.CacheLineSize, o.CacheLineSize)}
}

// maxSysDataValue bounds the sizes a peer may announce: they size and align
// buffers, and a hostile peer must not make us allocate gigabytes.
const maxSysDataValue = 1 << 30

// sysDataFieldSize is sizeof(int) of each check_sys_data field.
const sysDataFieldSize = 4

func checkSysDataValue(name string, v int32) error {
	if v <= 0 || v > maxSysDataValue || v&(v-1) != 0 {
		return fmt.Errorf("%w: perftest %s %d is not a power of two in [1, 2^30]", ErrMalformed, name, v)
	}
	return nil
}

func (s SysData) check() error {
	if err := checkSysDataValue("cycle buffer size", s.CycleBuffer); err != nil {
		return err
	}
	return checkSysDataValue("cache line size", s.CacheLineSize)
}

// mtuBlockSize returns the size of check_mtu's block for a peer of the
// given version: char[2] from 5.31, sizeof(int) before. perftest holds the
// peer's version in a float there, so the comparison is done in float32.
func mtuBlockSize(remote float64) int {
	if float64(float32(remote)) >= versionMTUTwoBytes {
		return 2
	}
	return 4
}

// appendMTUBlock appends m as check_mtu writes it: the enum as decimal text
// with its NUL ("3\0"), in a block of size bytes. In the 4-byte form perftest
// sends the two bytes after the NUL uninitialised; goroce sends zeros.
func appendMTUBlock(b []byte, m ibv.MTU, size int) []byte {
	b = strconv.AppendInt(b, int64(m), 10)
	b = append(b, 0)
	for i := 2; i < size; i++ {
		b = append(b, 0)
	}
	return b
}

// parseMTUBlock parses check_mtu's block: a digit from 1 to 5 and a NUL;
// anything after the NUL (the 4-byte form's stack garbage) is ignored.
// perftest would quietly keep its own MTU on garbage; an invalid value here
// is an error, since it means the stream is out of step.
func parseMTUBlock(b []byte) (ibv.MTU, error) {
	if len(b) < 2 {
		return 0, fmt.Errorf("%w: perftest MTU block of %d bytes", ErrMalformed, len(b))
	}
	if b[1] != 0 || b[0] < '0'+byte(ibv.MTU256) || b[0] > '0'+byte(ibv.MTU4096) {
		return 0, fmt.Errorf("%w: perftest MTU %s is not an ibv_mtu value 1-5 with its NUL", ErrMalformed, quoteBytes(b))
	}
	return ibv.MTU(b[0] - '0'), nil
}

func appendSysData(b []byte, s SysData) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(s.CycleBuffer))
	return binary.BigEndian.AppendUint32(b, uint32(s.CacheLineSize))
}
