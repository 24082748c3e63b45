package mad

import "encoding/binary"

// field locates a field of a message body the way IBA's tables (and the
// kernel's IBA_FIELD*_LOC macros) do: byte offset, bit offset from the most
// significant bit of that byte, width in bits. A field of up to 32 bits lies
// inside one aligned big-endian 32-bit word; 64-bit fields are aligned
// on 4 bytes (TestFieldsInsideWords checks every table).
type field struct {
	off, bit, width int
}

// shift is how far right of the word's least significant bit f ends.
func (f field) shift() int { return 32 - (f.off&3)*8 - f.bit - f.width }

func (f field) mask() uint64 { return 1<<f.width - 1 }

// get reads f from b.
func (f field) get(b []byte) uint64 {
	if f.width == 64 {
		return binary.BigEndian.Uint64(b[f.off:])
	}
	w := binary.BigEndian.Uint32(b[f.off&^3:])
	return uint64(w>>f.shift()) & f.mask()
}

// put writes v, which must fit, into f in b, leaving the other bits of the
// word as they are.
func (f field) put(b []byte, v uint64) {
	if f.width == 64 {
		binary.BigEndian.PutUint64(b[f.off:], v)
		return
	}
	p := b[f.off&^3:]
	m := uint32(f.mask()) << f.shift()
	w := binary.BigEndian.Uint32(p)&^m | uint32(v)<<f.shift()&m
	binary.BigEndian.PutUint32(p, w)
}

// fits reports whether v can be stored in f.
func (f field) fits(v uint64) bool { return f.width == 64 || v>>f.width == 0 }

// span is a byte range of a message body that holds bytes rather than a
// number: a GID, the ARI, the private data.
type span struct{ off, len int }

func (s span) of(b []byte) []byte { return b[s.off : s.off+s.len : s.off+s.len] }

// encoder writes fields into a zeroed message body, remembering the first
// value that does not fit.
type encoder struct {
	b   []byte
	msg AttrID
	n   int // length of the slice before grow
	err error
}

func (e *encoder) set(f field, v uint64, name string) {
	if !f.fits(v) {
		e.overflow(name, v, f.width)
		return
	}
	f.put(e.b, v)
}

// overflow records that v does not fit in bits.
func (e *encoder) overflow(name string, v uint64, bits int) {
	if e.err == nil {
		e.err = &FieldError{Msg: e.msg, Field: name, Value: v, Bits: bits}
	}
}

// refuse records that v is not allowed in a field of the given width
// although it fits (a reserved enumeration value).
func (e *encoder) refuse(name string, v uint64, bits int) {
	if e.err == nil {
		e.err = &FieldError{Msg: e.msg, Field: name, Value: v, Bits: bits, Reserved: true}
	}
}

func (e *encoder) flag(f field, v bool, name string) {
	e.set(f, b2u(v), name)
}

// bytes copies v into s, which must be at least as long; the rest of s
// stays zero.
func (e *encoder) bytes(s span, v []byte, name string) {
	if len(v) > s.len {
		if e.err == nil {
			e.err = &FieldError{Msg: e.msg, Field: name, Value: uint64(len(v)), Bytes: s.len}
		}
		return
	}
	copy(s.of(e.b), v)
}

func b2u(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// grow extends b by BodySize zero bytes and returns an encoder over the
// new body and the extended slice.
func grow(b []byte, msg AttrID) (encoder, []byte) {
	n := len(b)
	b = append(b, make([]byte, BodySize)...)
	return encoder{b: b[n : n+BodySize : n+BodySize], msg: msg, n: n}, b
}

// done returns b, or b as it was before grow and the error if a value did
// not fit.
func (e *encoder) done(b []byte) ([]byte, error) {
	if e.err != nil {
		return b[:e.n], e.err
	}
	return b, nil
}
