package oob

import (
	"encoding/binary"
	"fmt"
)

// perftest's rdma_cm mode (-R, and -z) carries its exchanges in SENDs on
// a control connection instead of TCP, and the QPs' keys as struct
// pingpong_dest itself (rdma_write_keys, rdma_read_keys): every integer
// big-endian (perftest built with endian.h), in the C layout of x86-64
// and aarch64:
//
//	 0 lid, 4 out_reads, 8 qpn, 12 psn, 16 rkey   (32-bit each)
//	20 padding, 24 vaddr (64-bit)
//	[32 tail_markers_vaddr (64-bit), --data_validation builds from 2026]
//	32 (40) gid (16 bytes), 48 (56) srqn, 52 (60) gid_index (32-bit)
//
// 56 bytes, or 64 with the tail markers. The padding is whatever was on
// perftest's stack: it is ignored, and sent as zeros.

// Binary key sizes (sizeof(struct pingpong_dest)).
const (
	keyBinSize   = 56
	keyBinSizeDV = 64
)

// binary reports whether f is one of the rdma_cm binary formats.
func (f KeyFormat) binary() bool {
	return f == KeyFormatRDMACM || f == KeyFormatRDMACMDataValidation
}

// keyBinPad is the offset of the 4 padding bytes of the binary formats.
const keyBinPad = 20

func appendKeyBin(b []byte, d Dest, f KeyFormat) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(d.LID))
	b = binary.BigEndian.AppendUint32(b, uint32(d.OutReads))
	b = binary.BigEndian.AppendUint32(b, d.QPN&0xffffff)
	b = binary.BigEndian.AppendUint32(b, d.PSN&0xffffff)
	b = binary.BigEndian.AppendUint32(b, d.RKey)
	b = append(b, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, d.VAddr)
	if f.hasTailMarkers() {
		b = binary.BigEndian.AppendUint64(b, d.TailMarkersVAddr)
	}
	b = append(b, d.GID[:]...)
	b = binary.BigEndian.AppendUint32(b, d.SRQN)
	return binary.BigEndian.AppendUint32(b, d.GIDIndex)
}

// parseKeyBin parses a binary key: exactly f.Size() bytes, LID and
// OUT_READS within 16 bits, QPN and PSN within 24.
func parseKeyBin(m []byte, f KeyFormat) (Dest, error) {
	size := f.Size()
	if len(m) != size {
		return Dest{}, fmt.Errorf("%w: perftest %v key of %d bytes, want %d", ErrMalformed, f, len(m), size)
	}
	u32 := func(off int) uint32 { return binary.BigEndian.Uint32(m[off:]) }
	d := Dest{QPN: u32(8), PSN: u32(12), RKey: u32(16), VAddr: binary.BigEndian.Uint64(m[24:])}
	off := 32
	if f.hasTailMarkers() {
		d.TailMarkersVAddr = binary.BigEndian.Uint64(m[32:])
		off = 40
	}
	copy(d.GID[:], m[off:off+16])
	d.SRQN, d.GIDIndex = u32(off+16), u32(off+20)
	for _, c := range []struct {
		name string
		v    uint32
		bits uint
	}{{"LID", u32(0), 16}, {"OUT_READS", u32(4), 16}, {"QPN", d.QPN, 24}, {"PSN", d.PSN, 24}} {
		if c.v>>c.bits != 0 {
			return Dest{}, fmt.Errorf("%w: perftest %v key: %s %#x does not fit %d bits", ErrMalformed, f, c.name, c.v, c.bits)
		}
	}
	d.LID, d.OutReads = uint16(u32(0)), uint16(u32(4))
	return d, nil
}
