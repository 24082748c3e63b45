package transport

import (
	"math"
	"reflect"
	"testing"

	"github.com/goroce/goroce/internal/ibv"
)

// TestRingsAcrossCounterWrap: the free-running head and tail counters wrap
// at 2^32 with entries in flight, for capacities that are and are not
// powers of two; each entry keeps a slot of its own, and a ring takes
// exactly its capacity.
func TestRingsAcrossCounterWrap(t *testing.T) {
	for _, n := range []int{1, 2, 3, 100, 128, 129} {
		sq := newSendRing(n, 1, 0)
		rq := newRecvRing(n, 1)
		start := uint32(math.MaxUint32 - n/2) // the counters wrap halfway
		sq.head, sq.tail, rq.head, rq.tail = start, start, start, start
		for round := range 3 {
			for i := range n {
				if sq.full() || rq.full() {
					t.Fatalf("capacity %d: full after %d entries", n, i)
				}
				id := uint64(round*1000 + i)
				sq.push(&SendWQE{WRID: id, SGL: []SGE{{Length: 1}}}, 1)
				rq.push(&RecvWQE{WRID: id, SGL: []SGE{{Length: 1}}})
			}
			if !sq.full() || !rq.full() {
				t.Fatalf("capacity %d: not full with %d entries", n, n)
			}
			for i := range n {
				want := uint64(round*1000 + i)
				if s := sq.at(sq.head); s.wqe.WRID != want {
					t.Fatalf("capacity %d, round %d: send entry %d (counter %#x) holds WR %d", n, round, want, sq.head, s.wqe.WRID)
				}
				if s := rq.at(rq.head); s.wrid != want {
					t.Fatalf("capacity %d, round %d: receive entry %d (counter %#x) holds WR %d", n, round, want, rq.head, s.wrid)
				}
				sq.head++
				rq.head++
			}
		}
	}
}

// TestSendRingPushCopiesEveryField: push (copyScalars) carries every field
// of the work request into the slot, and clears the slot's progress from
// the entry that used it before.
func TestSendRingPushCopiesEveryField(t *testing.T) {
	r := newSendRing(1, 2, 8)
	var w SendWQE
	v := reflect.ValueOf(&w).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch name := v.Type().Field(i).Name; name {
		case "SGL":
			w.SGL = []SGE{{Addr: 1, Length: 2, LKey: 3}}
		case "Inline":
			// Only with SendInline, which the next push tests.
		default:
			setNonZero(t, name, f, uint64(i+1))
		}
	}
	w.Flags &^= ibv.SendInline
	old := r.at(0)
	old.started, old.firstPSN, old.lastPSN, old.readDone, old.failed, old.status = true, 5, 6, 7, true, ibv.WCRemAccessErr
	s := r.push(&w, 2)
	got := s.wqe
	if !reflect.DeepEqual(got, w) || &got.SGL[0] == &w.SGL[0] {
		t.Errorf("pushed %+v, slot holds %+v (its own copy of the SGL)", w, got)
	}
	want := sendSlot{wqe: s.wqe, sgl: s.sgl, inline: s.inline, length: 2}
	if !reflect.DeepEqual(*s, want) {
		t.Errorf("slot after push = %+v, want the previous entry's progress cleared", *s)
	}

	r.head++
	w.Flags |= ibv.SendInline
	w.SGL, w.Inline = nil, []byte("inline")
	s = r.push(&w, 6)
	if string(s.wqe.Inline) != "inline" || s.wqe.SGL != nil || &s.wqe.Inline[0] == &w.Inline[0] {
		t.Errorf("inline push: slot holds SGL %v, inline %q (its own copy)", s.wqe.SGL, s.wqe.Inline)
	}
}

// setNonZero sets f, a field of SendWQE, to a value derived from n.
func setNonZero(t *testing.T, name string, f reflect.Value, n uint64) {
	switch f.Kind() {
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint:
		f.SetUint(n)
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Int:
		f.SetInt(int64(n))
	case reflect.Bool:
		f.SetBool(true)
	case reflect.Interface:
		f.Set(reflect.ValueOf(n))
	case reflect.Struct:
		for i := range f.NumField() {
			setNonZero(t, name+"."+f.Type().Field(i).Name, f.Field(i), n*100+uint64(i)+1)
		}
	default:
		t.Fatalf("field %s: kind %v not handled: extend setNonZero", name, f.Kind())
	}
}
