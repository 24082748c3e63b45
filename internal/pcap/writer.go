package pcap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"
)

// Writer writes a classic pcap file in little-endian byte order. It is safe
// for concurrent use: each record's header and data are written together,
// so packets captured by several goroutines never interleave within a
// record. A Writer does no buffering of its own; give it a [bufio.Writer]
// (and flush that) when writing to a file.
type Writer struct {
	mu      sync.Mutex
	w       io.Writer
	snapLen int
	nano    bool
	hdr     [recordHeaderLen]byte
	err     error // sticky: after a failed write the file is unusable
}

// ErrTimestampRange is returned when a packet's timestamp cannot be stored
// in a pcap record: before 1970 or after early 2106.
var ErrTimestampRange = errors.New("pcap: timestamp out of the range of the pcap format")

// NewWriter writes a pcap file header with microsecond timestamps, the
// format every pcap reader understands, and returns a Writer for the
// records. Packets longer than snapLen are cut to it; a snapLen of 0 means
// [MaxSnapLen].
func NewWriter(w io.Writer, linkType LinkType, snapLen uint32) (*Writer, error) {
	return newWriter(w, linkType, snapLen, false)
}

// NewNanosecondWriter is like [NewWriter] but stores nanosecond timestamps
// (magic 0xa1b23c4d), which tcpdump, Wireshark and libpcap 1.5 and later
// read; packets of a RoCE flow are often less than a microsecond apart.
func NewNanosecondWriter(w io.Writer, linkType LinkType, snapLen uint32) (*Writer, error) {
	return newWriter(w, linkType, snapLen, true)
}

func newWriter(w io.Writer, linkType LinkType, snapLen uint32, nano bool) (*Writer, error) {
	if snapLen == 0 {
		snapLen = MaxSnapLen
	}
	if snapLen > MaxSnapLen {
		return nil, fmt.Errorf("pcap: snapshot length %d exceeds the maximum %d", snapLen, MaxSnapLen)
	}
	if linkType > 0xffff {
		// The upper 16 bits of the field carry FCS information, not type.
		return nil, fmt.Errorf("pcap: link type %d does not fit in 16 bits", uint32(linkType))
	}
	var h [fileHeaderLen]byte
	magic := uint32(magicMicro)
	if nano {
		magic = magicNano
	}
	binary.LittleEndian.PutUint32(h[0:], magic)
	binary.LittleEndian.PutUint16(h[4:], versionMajor)
	binary.LittleEndian.PutUint16(h[6:], versionMinor)
	// h[8:16]: thiszone and sigfigs stay 0, as the format's readers expect.
	binary.LittleEndian.PutUint32(h[16:], snapLen)
	binary.LittleEndian.PutUint32(h[20:], uint32(linkType))
	if _, err := w.Write(h[:]); err != nil {
		return nil, err
	}
	return &Writer{w: w, snapLen: int(snapLen), nano: nano}, nil
}

// WritePacket writes one record holding data, captured at ts. Only the first
// snapshot-length bytes are stored; the record's original length is
// len(data). It does not allocate.
func (w *Writer) WritePacket(ts time.Time, data []byte) error {
	return w.write(ts, data, len(data))
}

// WriteRecord writes rec as one record, keeping its original length when it
// exceeds len(rec.Data), as when copying records between files.
func (w *Writer) WriteRecord(rec Record) error {
	return w.write(rec.Timestamp, rec.Data, max(rec.OriginalLength, len(rec.Data)))
}

func (w *Writer) write(ts time.Time, data []byte, origLen int) error {
	sec := ts.Unix()
	if sec < 0 || sec > math.MaxUint32 {
		return fmt.Errorf("%w: %v", ErrTimestampRange, ts)
	}
	frac := uint32(ts.Nanosecond())
	if !w.nano {
		frac /= 1000
	}
	orig := uint32(math.MaxUint32)
	if int64(origLen) < math.MaxUint32 {
		orig = uint32(origLen)
	}
	capLen := min(len(data), w.snapLen)

	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	binary.LittleEndian.PutUint32(w.hdr[0:], uint32(sec))
	binary.LittleEndian.PutUint32(w.hdr[4:], frac)
	binary.LittleEndian.PutUint32(w.hdr[8:], uint32(capLen))
	binary.LittleEndian.PutUint32(w.hdr[12:], orig)
	if _, err := w.w.Write(w.hdr[:]); err != nil {
		w.err = err
		return err
	}
	if _, err := w.w.Write(data[:capLen]); err != nil {
		w.err = err
		return err
	}
	return nil
}
