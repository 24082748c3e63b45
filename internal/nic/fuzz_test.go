//go:build linux

package nic

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/goroce/goroce/internal/nicproto"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

var fuzzEnv struct {
	once sync.Once
	sess *session
	pd   *pdObj
	cq   *cqObj
	err  error
}

// FuzzRings writes arbitrary bytes into a QP's send and receive rings, as a
// buggy or hostile client could, and runs the pump's draining over them:
// every index and count is untrusted, and nothing may panic or touch memory
// outside the ring.
func FuzzRings(f *testing.F) {
	seed := make([]byte, 4+2*nicproto.SWQESize+64)
	binary.LittleEndian.PutUint16(seed[0:], 2) // two send slots
	binary.LittleEndian.PutUint16(seed[2:], 1) // one receive slot
	f.Add(uint8(verbs.QPTypeRC), seed)
	f.Add(uint8(verbs.QPTypeUD), seed)
	f.Add(uint8(verbs.QPTypeUC), []byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3})
	f.Fuzz(func(t *testing.T, typ uint8, data []byte) {
		sess, pd, cq := fuzzSession(t)
		qpType := []verbs.QPType{verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD}[int(typ)%3]
		qp, err := pd.pd.CreateQP(verbs.QPInitAttr{QPType: qpType, SendCQ: cq.cq, RecvCQ: cq.cq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 32}})
		if err != nil {
			t.Fatal(err)
		}
		q := &qpObj{sess: sess, qp: qp, pd: pd, sendCQ: cq, recvCQ: cq}
		_, fds, err := q.setup()
		if err != nil {
			t.Fatal(err)
		}
		closeFDs(fds[:1]) // the ring's descriptor, the client's; the doorbell stays with q
		defer q.release()
		if len(data) < 4 {
			return
		}
		// The first bytes say how far prod runs ahead; the rest fills
		// the slots (both rings, in order).
		atomic.StoreUint64(&q.sq.hdr.Prod, uint64(binary.LittleEndian.Uint16(data[0:])))
		atomic.StoreUint64(&q.rq.hdr.Prod, uint64(binary.LittleEndian.Uint16(data[2:])))
		sqBytes := unsafe.Slice((*byte)(q.sq.slots), int(q.sq.entries)*int(q.sq.stride))
		rqBytes := unsafe.Slice((*byte)(q.rq.slots), int(q.rq.entries)*int(q.rq.stride))
		n := copy(sqBytes, data[4:])
		copy(rqBytes, data[4+n:])
		q.mu.Lock()
		q.drainSend()
		q.drainRecv()
		q.mu.Unlock()
		if q.sq.hasWork() || q.rq.hasWork() {
			t.Fatal("rings not drained")
		}
		// Completions of whatever was posted map back or are refused.
		for _, wrid := range []uint64{wridSend, wridRecv | 1, wridSRQ, 1 << 61} {
			q.complete(wrid)
		}
	})
}

func fuzzSession(t *testing.T) (*session, *pdObj, *cqObj) {
	fuzzEnv.once.Do(func() {
		srv := &Server{cfg: Config{Logf: func(string, ...any) {}}}
		sess := newSession(srv, nil)
		dev, err := verbs.Open(verbs.DeviceConfig{Addr: testkit.Addr(9), NoStatsEndpoint: true})
		if err != nil {
			fuzzEnv.err = err
			return
		}
		sess.dev = &device{dev: dev}
		pd, err := dev.AllocPD()
		if err != nil {
			fuzzEnv.err = err
			return
		}
		cq, err := dev.CreateCQ(1024, nil, 0)
		if err != nil {
			fuzzEnv.err = err
			return
		}
		fuzzEnv.sess, fuzzEnv.pd, fuzzEnv.cq = sess, &pdObj{pd: pd}, &cqObj{cq: cq}
	})
	if fuzzEnv.err != nil {
		t.Fatal(fuzzEnv.err)
	}
	// Drain what earlier inputs completed, so the CQ never overruns.
	wc := make([]verbs.WorkCompletion, 64)
	for {
		n, _ := fuzzEnv.cq.cq.Poll(wc)
		if n == 0 {
			break
		}
	}
	return fuzzEnv.sess, fuzzEnv.pd, fuzzEnv.cq
}
