package pcap

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// File and record header sizes and magic numbers of the classic pcap format.
const (
	fileHeaderLen   = 24
	recordHeaderLen = 16

	magicMicro = 0xa1b2c3d4 // timestamps in seconds + microseconds
	magicNano  = 0xa1b23c4d // timestamps in seconds + nanoseconds
	// magicModified is Alexey Kuznetzov's "modified pcap" whose record
	// headers are 8 bytes longer; recognised only to name it in the error.
	magicModified = 0xa1b2cd34
	// magicPcapNG is the block type of a pcapng Section Header Block, the
	// first 4 bytes of every pcapng file; it reads the same in both orders.
	magicPcapNG = 0x0a0d0d0a

	versionMajor = 2
	versionMinor = 4
)

// MaxSnapLen is the largest capture length this package reads or writes,
// the same bound libpcap applies (its MAXIMUM_SNAPLEN). A record claiming more
// is corrupt, and refusing it keeps a damaged file from causing a huge
// allocation.
const MaxSnapLen = 256 << 10

// Errors returned by [NewReader] and [Reader.ReadPacket], usually wrapped
// with details; test them with [errors.Is].
var (
	// ErrTruncated means the data ended inside a header or a record, or a
	// frame is shorter than its headers say.
	ErrTruncated = errors.New("pcap: truncated")
	// ErrPcapNG means the file is in pcapng format, which this package does
	// not read.
	ErrPcapNG = errors.New("pcap: file is pcapng, not classic pcap (convert it with: editcap -F pcap IN OUT)")
	// ErrNotPcap means the file does not start with a pcap magic number, or
	// uses a pcap variant this package does not read.
	ErrNotPcap = errors.New("pcap: not a classic pcap file")
	// ErrBadLength means a record header claims a capture length larger
	// than the file's snapshot length or [MaxSnapLen]: the file is corrupt.
	ErrBadLength = errors.New("pcap: bad record length")
)

// Record is one captured packet.
type Record struct {
	// Timestamp is when the packet was captured, in UTC.
	Timestamp time.Time
	// OriginalLength is the length of the packet on the wire, which is more
	// than len(Data) when the capture was cut at the snapshot length.
	OriginalLength int
	// Data holds the captured bytes; its length is the capture length.
	Data []byte
}

// CaptureLength returns the number of bytes captured, len(r.Data).
func (r Record) CaptureLength() int { return len(r.Data) }

// Truncated reports whether the capture holds fewer bytes than were on the
// wire.
func (r Record) Truncated() bool { return len(r.Data) < r.OriginalLength }

// Reader reads records from a classic pcap file. It is not safe for
// concurrent use.
type Reader struct {
	r         io.Reader
	bigEndian bool
	nano      bool
	major     uint16
	minor     uint16
	linkInfo  uint32 // link type field, with the FCS bits
	snapLen   uint32
	limit     int // bound on a record's capture length

	hdr    [recordHeaderLen]byte
	buf    []byte // Next's buffer
	n      int    // records returned so far
	offset int64  // file offset of the next record header
	err    error  // sticky: the stream cannot be resynchronised
}

// NewReader reads the file header from r and returns a Reader positioned at
// the first record. If r does not implement [io.ByteReader] (as in-memory
// and already buffered readers do) it is wrapped in a [bufio.Reader], so
// that reading a record from a file costs no system call of its own.
func NewReader(r io.Reader) (*Reader, error) {
	if _, ok := r.(io.ByteReader); !ok {
		r = bufio.NewReaderSize(r, 64<<10)
	}
	var h [fileHeaderLen]byte
	// Read the magic first so that a short pcapng or foreign file is named
	// for what it is rather than reported as a truncated pcap header.
	if n, err := io.ReadFull(r, h[:4]); err != nil {
		return nil, headerError(n, err)
	}
	rd := &Reader{r: r}
	switch le, be := binary.LittleEndian.Uint32(h[:4]), binary.BigEndian.Uint32(h[:4]); {
	case le == magicMicro:
	case be == magicMicro:
		rd.bigEndian = true
	case le == magicNano:
		rd.nano = true
	case be == magicNano:
		rd.bigEndian, rd.nano = true, true
	case le == magicPcapNG:
		return nil, ErrPcapNG
	case le == magicModified || be == magicModified:
		return nil, fmt.Errorf("%w: modified (Kuznetzov) pcap format is not supported (convert it with: editcap -F pcap IN OUT)", ErrNotPcap)
	default:
		return nil, fmt.Errorf("%w: unknown magic number % x", ErrNotPcap, h[:4])
	}
	if n, err := io.ReadFull(r, h[4:]); err != nil {
		return nil, headerError(4+n, err)
	}
	rd.major = rd.u16(h[4:])
	rd.minor = rd.u16(h[6:])
	// h[8:16] are thiszone and sigfigs, which every writer sets to 0.
	rd.snapLen = rd.u32(h[16:])
	rd.linkInfo = rd.u32(h[20:])
	if rd.major != versionMajor {
		return nil, fmt.Errorf("%w: unsupported format version %d.%d", ErrNotPcap, rd.major, rd.minor)
	}
	// libpcap treats a snapshot length of 0 or above its maximum as "no
	// limit" (such files exist); the record bound is then MaxSnapLen.
	rd.limit = MaxSnapLen
	if rd.snapLen != 0 && rd.snapLen < MaxSnapLen {
		rd.limit = int(rd.snapLen)
	}
	rd.offset = fileHeaderLen
	return rd, nil
}

func headerError(n int, err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		if n == 0 {
			return fmt.Errorf("%w: empty file", ErrTruncated)
		}
		return fmt.Errorf("%w: file header has %d of %d bytes", ErrTruncated, n, fileHeaderLen)
	}
	return err
}

func (r *Reader) u16(b []byte) uint16 {
	if r.bigEndian {
		return binary.BigEndian.Uint16(b)
	}
	return binary.LittleEndian.Uint16(b)
}

func (r *Reader) u32(b []byte) uint32 {
	if r.bigEndian {
		return binary.BigEndian.Uint32(b)
	}
	return binary.LittleEndian.Uint32(b)
}

// LinkType returns the link-layer header type of every record in the file
// (the low 16 bits of the header's link type field).
func (r *Reader) LinkType() LinkType { return LinkType(r.linkInfo & 0xffff) }

// FCSLength returns the length in bytes of the frame check sequence at the
// end of every record, and whether the file says it at all (most do not).
func (r *Reader) FCSLength() (n int, known bool) {
	if r.linkInfo&0x04000000 == 0 {
		return 0, false
	}
	// The length is stored in 16-bit units in the top 4 bits.
	return int(r.linkInfo>>28) * 2, true
}

// SnapLen returns the snapshot length from the file header: the most bytes
// of a packet the capture kept.
func (r *Reader) SnapLen() uint32 { return r.snapLen }

// Nanosecond reports whether the file's timestamps have nanosecond rather
// than microsecond resolution.
func (r *Reader) Nanosecond() bool { return r.nano }

// BigEndian reports whether the file was written in big-endian byte order.
func (r *Reader) BigEndian() bool { return r.bigEndian }

// Version returns the format version from the file header, normally 2.4.
func (r *Reader) Version() (major, minor uint16) { return r.major, r.minor }

// ReadPacket reads the next record into buf, reusing its storage when
// cap(buf) is large enough; the returned Data is buf[:caplen] in that case
// and a new slice otherwise. Passing the previous record's Data back in reads
// a whole file with one allocation. At the end of the file it returns
// [io.EOF]; a record cut short returns an error wrapping [ErrTruncated] and a
// corrupt length one wrapping [ErrBadLength], after which the Reader keeps
// returning that error.
func (r *Reader) ReadPacket(buf []byte) (Record, error) {
	if r.err != nil {
		return Record{}, r.err
	}
	n, err := io.ReadFull(r.r, r.hdr[:])
	switch {
	case err == io.EOF:
		r.err = io.EOF
		return Record{}, io.EOF
	case err == io.ErrUnexpectedEOF:
		return Record{}, r.fail(fmt.Errorf("%w: record %d at offset %d: header has %d of %d bytes",
			ErrTruncated, r.n+1, r.offset, n, recordHeaderLen))
	case err != nil:
		return Record{}, r.fail(err)
	}
	sec := r.u32(r.hdr[0:])
	frac := r.u32(r.hdr[4:])
	capLen := r.u32(r.hdr[8:])
	origLen := r.u32(r.hdr[12:])
	if uint64(capLen) > uint64(r.limit) {
		return Record{}, r.fail(fmt.Errorf("%w: record %d at offset %d: capture length %d exceeds snapshot length %d",
			ErrBadLength, r.n+1, r.offset, capLen, r.limit))
	}
	c := int(capLen)
	data := buf[:0]
	if cap(data) < c {
		data = make([]byte, c)
	}
	data = data[:c]
	if n, err := io.ReadFull(r.r, data); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			err = fmt.Errorf("%w: record %d at offset %d: %d of %d captured bytes present",
				ErrTruncated, r.n+1, r.offset, n, c)
		}
		return Record{}, r.fail(err)
	}
	r.n++
	r.offset += recordHeaderLen + int64(c)
	nsec := int64(frac)
	if !r.nano {
		nsec *= 1000
	}
	// time.Unix normalises a fraction that overflows into the seconds, which
	// some writers produce.
	return Record{
		Timestamp:      time.Unix(int64(sec), nsec).UTC(),
		OriginalLength: int(origLen),
		Data:           data,
	}, nil
}

// Next reads the next record into a buffer owned by the Reader. The
// returned Data is valid only until the next call to Next. Errors are as for
// [Reader.ReadPacket].
func (r *Reader) Next() (Record, error) {
	rec, err := r.ReadPacket(r.buf)
	if err == nil {
		r.buf = rec.Data
	}
	return rec, err
}

// Offset returns the file offset of the next record header, which locates a
// corrupt record for a hex dump.
func (r *Reader) Offset() int64 { return r.offset }

func (r *Reader) fail(err error) error {
	r.err = err
	return err
}
