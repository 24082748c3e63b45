package oob

import (
	"encoding/binary"
	"fmt"
	"math"
)

// BWReport is a bandwidth test's result as xchg_bw_reports exchanges it, so
// that the server, which in a one-way test does not measure anything, can
// print the client's numbers (and both can print both in --bidirectional
// runs).
type BWReport struct {
	// Size is the message size in bytes and Iters the number of
	// iterations run.
	Size  uint64
	Iters uint64
	// BWPeak and BWAvg are in the unit of the test's report format
	// (MB/s by default); MsgRateAvg in millions of messages per second.
	BWPeak     float64
	BWAvg      float64
	MsgRateAvg float64
	// The per-port values, exchanged only with --report_per_port
	// (BWReportLayout.PerPort).
	BWAvgP1      float64
	MsgRateAvgP1 float64
	BWAvgP2      float64
	MsgRateAvgP2 float64
}

// BWReportLayout is what the report's wire form depends on.
type BWReportLayout struct {
	// Iters32 sends the iteration count in 4 bytes rather than 8; perftest
	// does so toward peers older than 5.33.
	Iters32 bool
	// PerPort adds the four per-port values (--report_per_port, which both
	// sides must be given).
	PerPort bool
}

// layoutFor returns the report layout perftest uses toward a peer of
// version remote.
func layoutFor(remote float64, perPort bool) BWReportLayout {
	return BWReportLayout{Iters32: remote < versionIters64, PerPort: perPort}
}

// fieldSizes returns the sizes of the report's fields in wire order; each is
// a separate exchange (one write, one read) on the connection.
func (l BWReportLayout) fieldSizes() []int {
	iters := 8
	if l.Iters32 {
		iters = 4
	}
	if l.PerPort {
		return []int{8, iters, 8, 8, 8, 8, 8, 8, 8}
	}
	return []int{8, iters, 8, 8, 8}
}

// Size returns the number of bytes a report takes on the wire in layout l:
// 40, 36, 72 or 68.
func (l BWReportLayout) Size() int {
	n := 0
	for _, s := range l.fieldSizes() {
		n += s
	}
	return n
}

// AppendBWReport appends r in layout l: the size (unsigned long, 8 bytes on
// the 64-bit Linux perftest runs on), the iteration count, then the
// bandwidth and message-rate doubles, all big-endian (perftest's hton_long,
// hton_int and hton_double). In the 4-byte layout the iteration count is cut
// to 32 bits, as hton_int does.
func AppendBWReport(b []byte, r BWReport, l BWReportLayout) []byte {
	b = binary.BigEndian.AppendUint64(b, r.Size)
	if l.Iters32 {
		b = binary.BigEndian.AppendUint32(b, uint32(r.Iters))
	} else {
		b = binary.BigEndian.AppendUint64(b, r.Iters)
	}
	b = appendFloat64(b, r.BWPeak)
	b = appendFloat64(b, r.BWAvg)
	b = appendFloat64(b, r.MsgRateAvg)
	if l.PerPort {
		b = appendFloat64(b, r.BWAvgP1)
		b = appendFloat64(b, r.MsgRateAvgP1)
		b = appendFloat64(b, r.BWAvgP2)
		b = appendFloat64(b, r.MsgRateAvgP2)
	}
	return b
}

// ParseBWReport parses a report in layout l; b must be exactly l.Size()
// bytes. The doubles are taken bit for bit, NaN and infinities included: a
// perftest server that measured nothing sends whatever its stack held, and
// the receiver decides what to print.
func ParseBWReport(b []byte, l BWReportLayout) (BWReport, error) {
	var r BWReport
	if len(b) != l.Size() {
		return r, fmt.Errorf("%w: perftest bandwidth report of %d bytes, want %d", ErrMalformed, len(b), l.Size())
	}
	r.Size = binary.BigEndian.Uint64(b)
	b = b[8:]
	if l.Iters32 {
		r.Iters = uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	} else {
		r.Iters = binary.BigEndian.Uint64(b)
		b = b[8:]
	}
	r.BWPeak, b = float64At(b)
	r.BWAvg, b = float64At(b)
	r.MsgRateAvg, b = float64At(b)
	if l.PerPort {
		r.BWAvgP1, b = float64At(b)
		r.MsgRateAvgP1, b = float64At(b)
		r.BWAvgP2, b = float64At(b)
		r.MsgRateAvgP2, _ = float64At(b)
	}
	return r, nil
}

func appendFloat64(b []byte, f float64) []byte {
	return binary.BigEndian.AppendUint64(b, math.Float64bits(f))
}

func float64At(b []byte) (float64, []byte) {
	return math.Float64frombits(binary.BigEndian.Uint64(b)), b[8:]
}
