package transport

// The QP's attributes (what verbs' modify_qp hands over): their defaults
// and setters, each checking its range.

import (
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/wire"
)

// Defaults of the attributes a QP starts with; they are those of rdma-core's
// tools and of rxe (see roce-facts.md 2.3 and design.md).
const (
	DefaultPathMTU        = 1024
	DefaultTimeout        = 14 // 4.096 µs × 2^14 ≈ 67 ms
	DefaultRetryCnt       = 7
	DefaultRNRRetry       = 7 // infinite
	DefaultMinRNRTimer    = 12
	DefaultMaxUnackedPSNs = 256 // twice rxe's RXE_MAX_UNACKED_PSNS, at MTU 4096 (see SetMaxUnackedPSNs)
	DefaultAckEvery       = 64  // rxe RXE_MAX_PKT_PER_ACK
)

// DefaultWindowBytes is what the requester's default window holds in
// bytes: DefaultMaxUnackedPSNs packets at MTU 4096. At a smaller path MTU
// the default window has more PSNs, up to MaxDefaultWindow, since what
// keeps a path busy is the bytes in flight: on a veth path at link MTU
// 1500 (IB MTU 1024) 256 PSNs, 256 KiB, left 64 KiB WRITEs waiting for ACKs
// (alternating runs: 546-995 MB/s, where 512 PSNs gave 765-1,106). Small
// packets count at least smallPacket bytes each (windowFor).
const DefaultWindowBytes = DefaultMaxUnackedPSNs * 4096

// MaxDefaultWindow bounds the default window in PSNs, whatever the MTU:
// receivers queue packets, not bytes (Linux's netdev_max_backlog is 1,000
// packets, a NIC's ring 512 to 4,096 descriptors, a tap device's queue
// 1,000), and a window's burst must fit. With 1,024 PSNs at MTU 1024, rxe
// in a VM lost the ends of goroce's bursts: no later packet drew a
// sequence NAK, and the requester waited for its timer (test/interop's
// rxe counters, 3,000 timed-out resends in the 64 KiB scenarios).
const MaxDefaultWindow = 512

// defaultWindow returns the default window, in PSNs, at path MTU mtu.
func defaultWindow(mtu uint32) int {
	return max(DefaultMaxUnackedPSNs, min(DefaultWindowBytes/int(mtu), MaxDefaultWindow))
}

// SetPathMTU sets the path MTU in bytes: 256, 512, 1024, 2048 or 4096.
// Unless SetMaxUnackedPSNs set the window, it becomes the default for the
// MTU (DefaultWindowBytes).
func (qp *QP) SetPathMTU(mtu int) error {
	switch mtu {
	case 256, 512, 1024, 2048, 4096:
		if !qp.windowSet && uint32(mtu) != qp.mtu {
			qp.setWindow(defaultWindow(uint32(mtu)))
		}
		qp.mtu = uint32(mtu)
		return nil
	}
	return ErrBadAttr
}

// PathMTU returns the path MTU in bytes.
func (qp *QP) PathMTU() int { return int(qp.mtu) }

// SetSQPSN sets the first PSN the requester sends (sq_psn).
func (qp *QP) SetSQPSN(p psn.PSN) {
	p = p.Add(0)
	qp.req.psn, qp.req.sentHigh, qp.comp.psn = p, p, p
}

// SetRQPSN sets the first PSN the responder expects (rq_psn).
func (qp *QP) SetRQPSN(p psn.PSN) { qp.resp.epsn = p.Add(0) }

// SetDestQPN sets the remote QP number (dest_qp_num).
func (qp *QP) SetDestQPN(q uint32) { qp.destQPN = q & wire.QPNMask }

// SetTimeout sets the local ACK timeout exponent: the retransmit timer is
// 4.096 µs × 2^t; 0 disables it.
func (qp *QP) SetTimeout(t uint8) error {
	if t > 31 {
		return ErrBadAttr
	}
	qp.timeout = t
	return nil
}

// SetRetryCnt sets how many times a request is retransmitted after a timeout
// or a PSN sequence error before the work request fails with RETRY_EXC_ERR.
// 7 means 7 retries, not infinite.
func (qp *QP) SetRetryCnt(n uint8) error {
	if n > 7 {
		return ErrBadAttr
	}
	qp.retryCnt, qp.comp.retryLeft = n, n
	return nil
}

// SetRNRRetry sets how many RNR NAKs a request survives before failing with
// RNR_RETRY_EXC_ERR; 7 means infinite.
func (qp *QP) SetRNRRetry(n uint8) error {
	if n > 7 {
		return ErrBadAttr
	}
	qp.rnrRetry, qp.comp.rnrLeft = n, n
	return nil
}

// SetMinRNRTimer sets the RNR timer code the responder sends in RNR NAKs
// (wire.RNRDelay).
func (qp *QP) SetMinRNRTimer(code uint8) error {
	if code > 31 {
		return ErrBadAttr
	}
	qp.minRNRTimer = code
	return nil
}

// SetMaxRdAtomic sets the initiator depth: how many READ and atomic
// requests the requester keeps outstanding.
func (qp *QP) SetMaxRdAtomic(n int) error {
	if n < 0 {
		return ErrBadAttr
	}
	qp.maxRdAtomic = uint32(n)
	return nil
}

// SetMaxDestRdAtomic sets the number of responder resources: the size of
// the ring that remembers READ and atomic requests for duplicate replay.
// Changing it forgets the ring's contents.
func (qp *QP) SetMaxDestRdAtomic(n int) error {
	if n < 0 || n > 1<<16 {
		return ErrBadAttr
	}
	qp.maxDestRdAtomic = uint32(n)
	qp.resp.res = make([]rdResource, n)
	qp.resp.resNext = 0
	// One more reply than resources: a duplicate can be queued behind a
	// full window of new requests.
	qp.resp.replies = make([]reply, n+1)
	qp.dropReplies()
	return nil
}

// SetAccessFlags sets which incoming RDMA operations the responder accepts
// (qp_access_flags): AccessRemoteWrite, AccessRemoteRead,
// AccessRemoteAtomic. Others are ignored.
func (qp *QP) SetAccessFlags(a ibv.AccessFlags) { qp.access = a }

// SetMaxUnackedPSNs sets the maximum of the requester's window: how far the
// next PSN may be ahead of the oldest unacknowledged one, from then on
// whatever the path MTU. The default, 256 at MTU 4096 and as many bytes'
// worth at smaller MTUs up to 512 PSNs (defaultWindow), is twice rxe's
// 128 or more: the window only bounds the requester (a responder takes
// any PSN in sequence), and at 128 PSNs (512 KiB at MTU 4096) a loopback
// connection waits for ACKs with a core idle: 64 KiB WRITEs went from
// ~2.6 to ~4.0 GB/s with 256, no further with 512 or 1024. A larger
// window also means more to resend after a loss under go-back-N, so the
// effective window shrinks toward 128 on retries and grows back to n as
// PSNs are acknowledged (window.go, doc.go); with n at most 128 it is fixed
// at n. The window starts at n. With selective repeat on it is at most
// 1,024.
func (qp *QP) SetMaxUnackedPSNs(n int) error {
	if n < 1 || n > 1<<22 {
		return ErrBadAttr
	}
	qp.windowSet = true
	qp.setWindow(n)
	return nil
}

// setWindow sets the window's maximum to n PSNs and starts the effective
// window there.
func (qp *QP) setWindow(n int) {
	qp.window = uint32(n)
	if qp.ssr.on {
		// Selective repeat tracks at most maxSRWindow PSNs, in rings
		// sized for the window: size them again.
		qp.window = min(qp.window, maxSRWindow)
		qp.ssr.slots = nil
		qp.rsr = srResponder{}
	}
	qp.req.win, qp.req.winCredit = qp.window, 0
}

// SetAckEvery sets how many packets the requester sends at most without
// asking for an acknowledgement (default 64); the last packet of every
// message asks anyway. While a retry has narrowed the window below its
// maximum the interval shrinks in proportion (window.go).
func (qp *QP) SetAckEvery(n int) error {
	if n < 1 {
		return ErrBadAttr
	}
	qp.ackEvery = uint32(n)
	return nil
}

// timeoutDuration is the local ACK timeout, 4.096 µs × 2^timeout.
func (qp *QP) timeoutDuration() time.Duration {
	return time.Duration(4096<<qp.timeout) * time.Nanosecond
}
