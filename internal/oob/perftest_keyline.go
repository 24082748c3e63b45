package oob

import "fmt"

// Dest is what perftest tells its peer about one local QP (perftest's
// struct pingpong_dest), carried as a key line.
type Dest struct {
	// LID is the port's LID; 0 on RoCE.
	LID uint16
	// OutReads is the number of outstanding RDMA READ and atomic requests
	// the QP will issue (max_rd_atomic); the peer uses it as its
	// max_dest_rd_atomic. perftest sends 1 for tests without reads.
	OutReads uint16
	// QPN and PSN are 24-bit: the QP number and the first packet sequence
	// number the QP will send.
	QPN uint32
	PSN uint32
	// RKey and VAddr name the buffer the peer may read, write or run
	// atomics on.
	RKey  uint32
	VAddr uint64
	// TailMarkersVAddr is the address of the data-validation tail markers;
	// it is carried only in the --data_validation key formats.
	TailMarkersVAddr uint64
	// GID is the port GID in network byte order (for RoCEv2 over IPv4,
	// ::ffff:a.b.c.d); it is carried only in the GID key formats.
	GID [16]byte
	// SRQN is the XRC SRQ number or the DC target number, 0 otherwise.
	SRQN uint32
	// GIDIndex is the sender's GID index; only the rdma_cm binary formats
	// carry it.
	GIDIndex uint32
}

// KeyFormat is one of perftest's four key-line layouts. Both sides must use
// the same one: perftest picks it from its own --gid-index and
// --data_validation options and reads the peer's line with the same size.
type KeyFormat uint8

const (
	// KeyFormatGID is the line with the GID, sent whenever a GID index is
	// in use, which is always on RoCE: "%04x:%04x:%06x:%06x:%08x:%016llx:"
	// then 16 x "%02x:" then "%08x:", 108 bytes with the NUL.
	KeyFormatGID KeyFormat = iota
	// KeyFormatLID is the line without GID (InfiniBand without -x):
	// "%04x:%04x:%06x:%06x:%08x:%016llx:%08x", 59 bytes with the NUL.
	KeyFormatLID
	// KeyFormatGIDDataValidation is KeyFormatGID with the tail-markers
	// address ("%016llx:") after VADDR, 125 bytes (--data_validation).
	KeyFormatGIDDataValidation
	// KeyFormatLIDDataValidation is KeyFormatLID with the tail-markers
	// address after VADDR, 76 bytes.
	KeyFormatLIDDataValidation
	// KeyFormatRDMACM is the binary struct pingpong_dest perftest sends
	// in rdma_cm mode (-R), 56 bytes (see perftest_keybin.go).
	KeyFormatRDMACM
	// KeyFormatRDMACMDataValidation is KeyFormatRDMACM with the
	// tail-markers address, 64 bytes.
	KeyFormatRDMACMDataValidation
)

// Key-line sizes including the NUL terminator (perftest's KEY_MSG_SIZE_*).
const (
	keyMsgSizeGID   = 108
	keyMsgSize      = 59
	keyMsgSizeGIDDV = 125
	keyMsgSizeDV    = 76
)

// Size returns the length of a key line in f, NUL terminator included: 108,
// 59, 125 or 76 bytes. It returns 0 for an unknown format.
func (f KeyFormat) Size() int {
	switch f {
	case KeyFormatGID:
		return keyMsgSizeGID
	case KeyFormatLID:
		return keyMsgSize
	case KeyFormatGIDDataValidation:
		return keyMsgSizeGIDDV
	case KeyFormatLIDDataValidation:
		return keyMsgSizeDV
	case KeyFormatRDMACM:
		return keyBinSize
	case KeyFormatRDMACMDataValidation:
		return keyBinSizeDV
	}
	return 0
}

// String names the format.
func (f KeyFormat) String() string {
	switch f {
	case KeyFormatGID:
		return "GID"
	case KeyFormatLID:
		return "LID"
	case KeyFormatGIDDataValidation:
		return "GID+data-validation"
	case KeyFormatLIDDataValidation:
		return "LID+data-validation"
	case KeyFormatRDMACM:
		return "rdma_cm binary"
	case KeyFormatRDMACMDataValidation:
		return "rdma_cm binary+data-validation"
	}
	return fmt.Sprintf("KeyFormat(%d)", uint8(f))
}

func (f KeyFormat) hasGID() bool {
	return f == KeyFormatGID || f == KeyFormatGIDDataValidation
}

func (f KeyFormat) hasTailMarkers() bool {
	return f == KeyFormatGIDDataValidation || f == KeyFormatLIDDataValidation || f == KeyFormatRDMACMDataValidation
}

// check reports a Dest field that does not fit its width in the key line.
func (d Dest) check() error {
	if d.QPN > 0xffffff {
		return fmt.Errorf("oob: QPN %#x does not fit 24 bits", d.QPN)
	}
	if d.PSN > 0xffffff {
		return fmt.Errorf("oob: PSN %#x does not fit 24 bits", d.PSN)
	}
	return nil
}

// AppendKeyLine appends d as a key line in format f (for the rdma_cm
// formats, the binary struct), NUL terminator
// included, exactly as perftest's sprintf writes it (f.Size() bytes). QPN
// and PSN are cut to their 24 bits. An unknown format appends nothing.
func AppendKeyLine(b []byte, d Dest, f KeyFormat) []byte {
	if f.Size() == 0 {
		return b
	}
	if f.binary() {
		return appendKeyBin(b, d, f)
	}
	b = appendHex(b, uint64(d.LID), 4)
	b = append(b, ':')
	b = appendHex(b, uint64(d.OutReads), 4)
	b = append(b, ':')
	b = appendHex(b, uint64(d.QPN), 6)
	b = append(b, ':')
	b = appendHex(b, uint64(d.PSN), 6)
	b = append(b, ':')
	b = appendHex(b, uint64(d.RKey), 8)
	b = append(b, ':')
	b = appendHex(b, d.VAddr, 16)
	b = append(b, ':')
	if f.hasTailMarkers() {
		b = appendHex(b, d.TailMarkersVAddr, 16)
		b = append(b, ':')
	}
	if f.hasGID() {
		for _, g := range d.GID {
			b = appendHex(b, uint64(g), 2)
			b = append(b, ':')
		}
		b = appendHex(b, uint64(d.SRQN), 8)
		b = append(b, ':')
	} else {
		b = appendHex(b, uint64(d.SRQN), 8)
	}
	return append(b, 0)
}

// ParseKeyLine parses a key line in format f: exactly f.Size() bytes, every
// field with its exact number of hex digits (either case), the separators
// where perftest puts them and the NUL terminator last. perftest itself
// parses with strtol field by field and would accept more; this parser
// accepts only what a perftest of any version writes, and says which field
// is wrong otherwise.
func ParseKeyLine(line []byte, f KeyFormat) (Dest, error) {
	var d Dest
	size := f.Size()
	if size == 0 {
		return d, fmt.Errorf("oob: perftest key line: unknown %v", f)
	}
	if f.binary() {
		return parseKeyBin(line, f)
	}
	if len(line) != size {
		return d, fmt.Errorf("%w: perftest %v key line of %d bytes, want %d: %s", ErrMalformed, f, len(line), size, quoteBytes(line))
	}
	if line[size-1] != 0 {
		return d, fmt.Errorf("%w: perftest key line not NUL-terminated: %s", ErrMalformed, quoteBytes(line))
	}
	p := keyLineParser{line: line[:size-1], format: f}
	d.LID = uint16(p.field("LID", 4, ':'))
	d.OutReads = uint16(p.field("OUT_READS", 4, ':'))
	d.QPN = uint32(p.field("QPN", 6, ':'))
	d.PSN = uint32(p.field("PSN", 6, ':'))
	d.RKey = uint32(p.field("RKEY", 8, ':'))
	d.VAddr = p.field("VADDR", 16, ':')
	if f.hasTailMarkers() {
		d.TailMarkersVAddr = p.field("TAIL_MARKERS_VADDR", 16, ':')
	}
	if f.hasGID() {
		for i := range d.GID {
			d.GID[i] = byte(p.field(gidByteNames[i], 2, ':'))
		}
		d.SRQN = uint32(p.field("SRQN", 8, ':'))
	} else {
		d.SRQN = uint32(p.field("SRQN", 8, 0))
	}
	if p.err != nil {
		return Dest{}, p.err
	}
	return d, nil
}

// gidByteNames names the GID bytes in errors without formatting at parse
// time.
var gidByteNames = [16]string{
	"GID[0]", "GID[1]", "GID[2]", "GID[3]", "GID[4]", "GID[5]", "GID[6]", "GID[7]",
	"GID[8]", "GID[9]", "GID[10]", "GID[11]", "GID[12]", "GID[13]", "GID[14]", "GID[15]",
}

// keyLineParser walks a key line (without its NUL) field by field; the first
// error sticks and later fields parse as 0.
type keyLineParser struct {
	line   []byte
	off    int
	format KeyFormat
	err    error
}

// field parses width hex digits followed by sep (0: the end of the line).
func (p *keyLineParser) field(name string, width int, sep byte) uint64 {
	if p.err != nil {
		return 0
	}
	end := p.off + width
	if end > len(p.line) {
		p.fail(name, "line ends inside the field")
		return 0
	}
	v, ok := parseHex(p.line[p.off:end])
	if !ok {
		p.fail(name, fmt.Sprintf("%s is not %d hex digits", quoteBytes(p.line[p.off:end]), width))
		return 0
	}
	switch {
	case sep == 0 && end != len(p.line):
		p.fail(name, fmt.Sprintf("unexpected %s after the last field", quoteBytes(p.line[end:])))
		return 0
	case sep != 0 && (end >= len(p.line) || p.line[end] != sep):
		p.fail(name, fmt.Sprintf("want %q after %d hex digits", sep, width))
		return 0
	}
	p.off = end
	if sep != 0 {
		p.off++
	}
	return v
}

func (p *keyLineParser) fail(name, why string) {
	p.err = fmt.Errorf("%w: perftest %v key line, field %s at byte %d: %s", ErrMalformed, p.format, name, p.off, why)
}
