package verbs_test

import (
	"context"
	"encoding/binary"
	"hash/crc64"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// A versioned record in registered memory, as a one-sided key-value store
// keeps its values, and the two ways to READ it consistently while its
// owner's CPU rewrites it (see "Memory consistency" in the package
// documentation: an RDMA READ of bytes the CPU is writing may return any
// mixture of old and new bytes, read in no particular order).
//
//	[0, 8)        version: even when stable, odd while the owner writes
//	[8, 8+n)      payload
//	[8+n, 16+n)   check: CRC-64 of the version and the payload
//
// The words are in the owner's byte order, as atomics are.
const recordOverhead = 16

var crcTable = crc64.MakeTable(crc64.ECMA)

// recordCheck is the check word of a version and payload.
func recordCheck(version uint64, payload []byte) uint64 {
	var v [8]byte
	binary.NativeEndian.PutUint64(v[:], version)
	return crc64.Update(crc64.Update(0, crcTable, v[:]), crcTable, payload)
}

// word is the 8-aligned word at b[0], for atomic stores by the owner.
func word(b []byte) *atomic.Uint64 {
	if uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
		panic("record word not 8-byte aligned")
	}
	return (*atomic.Uint64)(unsafe.Pointer(&b[0]))
}

// writeRecord is the owner's update of rec with payload: version to odd,
// the payload, the check of the next even version, then that version.
// The atomic stores keep that order on the owner's CPU; the reader of the
// three-READ protocol needs it, the checked single READ does not. One
// writer at a time (a mutex among several).
func writeRecord(rec, payload []byte) {
	n := len(rec) - recordOverhead
	v := word(rec).Load()
	word(rec).Store(v + 1)
	copy(rec[8:8+n], payload)
	word(rec[8+n:]).Store(recordCheck(v+2, payload))
	word(rec).Store(v + 2)
}

// readResult is what a reader got: the version and payload it accepted,
// or why it did not.
type readResult struct {
	version  uint64
	payload  []byte // valid until the next read into the same memory
	odd      bool   // a write was in progress
	mismatch bool   // the check or the versions did not match: a torn read
}

// readChecked reads the record in one RDMA READ into local (len(rec)
// bytes of registered memory) and accepts it if the version is even and
// the check matches. A torn read fails the check unless CRC-64 maps the
// mixture onto the check word read with it (probability 2^-64).
func readChecked(ctx context.Context, qp *verbs.QP, rec verbs.RemoteRegion, mr *verbs.MR, off int) (readResult, error) {
	n := int(rec.Length)
	wr, err := rec.Read(0, mr.SGE(off, n))
	if err != nil {
		return readResult{}, err
	}
	if _, err := qp.PostSendWait(ctx, &wr); err != nil {
		return readResult{}, err
	}
	b := mr.Buf()[off : off+n]
	r := readResult{version: binary.NativeEndian.Uint64(b), payload: b[8 : n-8]}
	switch {
	case r.version%2 == 1:
		r.odd = true
	case binary.NativeEndian.Uint64(b[n-8:]) != recordCheck(r.version, r.payload):
		r.mismatch = true
	}
	return r, nil
}

// readSeqlock reads the record as a seqlock reader does, in three READs,
// each posted after the previous one completed (PostSendWait; a pipelined
// reader sets SendFence on the second and third): the version, the
// record, the version again. The owner did not write the record while the
// second READ read it if both versions are the same even value: exact,
// whatever order the device copies bytes in, at three round trips.
func readSeqlock(ctx context.Context, qp *verbs.QP, rec verbs.RemoteRegion, mr *verbs.MR, off int) (readResult, error) {
	n := int(rec.Length)
	b := mr.Buf()[off : off+n+16]
	read := func(roff, loff, len int) error {
		wr, err := rec.Read(roff, mr.SGE(off+loff, len))
		if err != nil {
			return err
		}
		_, err = qp.PostSendWait(ctx, &wr)
		return err
	}
	if err := read(0, n, 8); err != nil {
		return readResult{}, err
	}
	if err := read(0, 0, n); err != nil {
		return readResult{}, err
	}
	if err := read(0, n+8, 8); err != nil {
		return readResult{}, err
	}
	before, after := binary.NativeEndian.Uint64(b[n:]), binary.NativeEndian.Uint64(b[n+8:])
	r := readResult{version: before, payload: b[8 : n-8]}
	switch {
	case before%2 == 1:
		r.odd = true
	case after != before:
		r.mismatch = true
	}
	return r, nil
}

// payloadFor fills p with the payload of version v: words that differ
// from those of every other version, so that the tests can tell a torn
// payload without the record's own check.
func payloadFor(p []byte, v uint64) {
	for i := 0; i+8 <= len(p); i += 8 {
		binary.NativeEndian.PutUint64(p[i:], v*0x9E3779B97F4A7C15+uint64(i))
	}
}

// consistent reports whether p is exactly version v's payload.
func consistent(p []byte, v uint64) bool {
	for i := 0; i+8 <= len(p); i += 8 {
		if binary.NativeEndian.Uint64(p[i:]) != v*0x9E3779B97F4A7C15+uint64(i) {
			return false
		}
	}
	return true
}

// TestVersionedRecordStates walks a record through the states a reader can
// meet, one at a time (no write races a READ here, so it also runs under
// the race detector): stable, a write in progress, a torn mixture with an
// even version, and the next stable version.
func TestVersionedRecordStates(t *testing.T) {
	server, client := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	ctx := testkit.Context(t)
	const n = 512
	rec := server.Buf[:n+recordOverhead]
	payload := make([]byte, n)
	payloadFor(payload, 2)
	writeRecord(rec, payload) // version 2
	remote, err := server.MR.Remote().Slice(0, len(rec))
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, wantOK bool, wantVersion uint64) {
		t.Helper()
		for _, read := range []func(context.Context, *verbs.QP, verbs.RemoteRegion, *verbs.MR, int) (readResult, error){
			readChecked, readSeqlock} {
			r, err := read(ctx, client.QP, remote, client.MR, 4096)
			if err != nil {
				t.Fatal(err)
			}
			ok := !r.odd && !r.mismatch
			if ok != wantOK || ok && (r.version != wantVersion || !consistent(r.payload, r.version)) {
				t.Errorf("%s: read %+v (accepted %v), want accepted %v at version %d", what, r, ok, wantOK, wantVersion)
			}
		}
	}
	check("stable", true, 2)

	// The owner is half-way through version 4.
	word(rec).Store(3)
	payloadFor(payload, 4)
	copy(rec[8:8+n/2], payload)
	check("write in progress", false, 0)

	// A READ that took the new version word and an old half of the
	// payload: even, but torn. The single READ's check refuses it; a
	// reader that trusted the even version would not.
	word(rec).Store(4)
	if r, _ := readChecked(ctx, client.QP, remote, client.MR, 4096); !r.mismatch || consistent(r.payload, r.version) {
		t.Errorf("torn record: %+v", r)
	}

	// The owner's next update starts from there: 4 → 5 → 6.
	payloadFor(payload, 6)
	writeRecord(rec, payload)
	check("next stable version", true, 6)
}
