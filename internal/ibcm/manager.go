package ibcm

import (
	"errors"
	"math/bits"
	"net/netip"
	"time"

	"github.com/goroce/goroce/internal/mad"
)

// Errors of the Manager's calls.
var (
	// ErrUnknownID: no connection has that ID (or the driver destroyed it).
	ErrUnknownID = errors.New("ibcm: unknown connection ID")
	// ErrState: the call is not valid in the connection's state.
	ErrState = errors.New("ibcm: not valid in the connection's state")
	// ErrTooMany: Limits.Records connection records exist.
	ErrTooMany = errors.New("ibcm: too many connection records")
)

// Counters count what a Manager received, sent and refused.
type Counters struct {
	Received [11]uint64 // per CM message, indexed by AttrID-0x10
	Sent     [11]uint64 // first transmissions and answers
	Resent   uint64     // retransmissions of REQ, REP, DREQ, SIDR_REQ

	Malformed  uint64 // MADs that failed to parse
	Duplicates uint64 // duplicate REQ, REP, RTU, DREQ, SIDR_REQ, MRA
	Unmatched  uint64 // messages for no connection, or a state that ignores them
	Limited    uint64 // requests dropped by HalfOpenPerSource or Records
	Dropped    uint64 // requests Listening told to drop
	Refused    uint64 // DREQs, REJs and stale verdicts Disconnecting refused
	Evicted    uint64 // half-open requests evicted by HalfOpen
	Timeouts   uint64 // messages unanswered after all retransmissions
}

// Manager is the CM of one device: its connections, their timers and the
// limits on what peers can make it hold. It does no I/O, starts no
// goroutine and never reads the clock: every call takes the time and
// appends the MADs to send and the events to an Output.
//
// A Manager is not safe for concurrent use: the caller serialises calls.
type Manager struct {
	cfg Config

	conns       map[ID]*conn
	byRemoteID  map[remoteKey]*conn
	byRemoteQPN map[remoteKey]*conn
	bySIDR      map[sidrKey]*conn
	timers      timerHeap
	idSeq       uint32

	halfOpen       int
	perSource      map[netip.Addr]int
	hoHead, hoTail *conn // half-open, oldest first
	twHead, twTail *conn // timewait, oldest first
	counters       Counters

	buf []byte // encoding scratch
	// Parse scratch: one message of each type, so that receiving does not
	// allocate until a message changes state.
	rx struct {
		req  mad.REQ
		mra  mad.MRA
		rej  mad.REJ
		rep  mad.REP
		rtu  mad.RTU
		dreq mad.DREQ
		drep mad.DREP
		sreq mad.SIDRREQ
		srep mad.SIDRREP
		lap  mad.LAP
		apr  mad.APR
	}
}

// New returns a Manager.
func New(cfg Config) *Manager {
	return &Manager{
		cfg:         cfg.withDefaults(),
		conns:       make(map[ID]*conn),
		byRemoteID:  make(map[remoteKey]*conn),
		byRemoteQPN: make(map[remoteKey]*conn),
		bySIDR:      make(map[sidrKey]*conn),
		perSource:   make(map[netip.Addr]int),
		buf:         make([]byte, 0, mad.MADSize),
	}
}

// Counters returns the Manager's counters.
func (m *Manager) Counters() Counters { return m.counters }

// Len returns the number of connection records, timewait included.
func (m *Manager) Len() int { return len(m.conns) }

// HalfOpen returns the number of half-open passive requests held.
func (m *Manager) HalfOpen() int { return m.halfOpen }

// State returns the state of connection id.
func (m *Manager) State(id ID) (State, bool) {
	c, ok := m.conns[id]
	if !ok || c.destroyed {
		return StateIdle, false
	}
	return c.state, true
}

// HandleMAD processes b, the 256-byte payload of a UD packet to QP 1
// received from the address from. Malformed MADs, MADs of other classes
// and MADs for no connection are counted and dropped.
func (m *Manager) HandleMAD(from netip.Addr, b []byte, now time.Time, out *Output) {
	h, err := mad.ParseCMHeader(b)
	if err != nil {
		m.counters.Malformed++
		return
	}
	msg := m.scratch(h.AttrID)
	if err := msg.Parse(b); err != nil {
		m.counters.Malformed++
		return
	}
	m.counters.Received[h.AttrID-mad.AttrREQ]++
	switch msg := msg.(type) {
	case *mad.REQ:
		m.handleREQ(from, &h, msg, now, out)
	case *mad.MRA:
		m.handleMRA(msg, now)
	case *mad.REJ:
		m.handleREJ(msg, now, out)
	case *mad.REP:
		m.handleREP(from, &h, msg, now, out)
	case *mad.RTU:
		m.handleRTU(msg, out)
	case *mad.DREQ:
		m.handleDREQ(from, &h, msg, now, out)
	case *mad.DREP:
		m.handleDREP(msg, now, out)
	case *mad.SIDRREQ:
		m.handleSIDRREQ(from, &h, msg, now, out)
	case *mad.SIDRREP:
		m.handleSIDRREP(msg, out)
	case *mad.LAP:
		m.handleLAP(from, &h, msg, out)
	case *mad.APR:
		// goroce never sends a LAP: an APR answers nothing.
		m.counters.Unmatched++
	}
}

func (m *Manager) scratch(a mad.AttrID) mad.Message {
	switch a {
	case mad.AttrREQ:
		return &m.rx.req
	case mad.AttrMRA:
		return &m.rx.mra
	case mad.AttrREJ:
		return &m.rx.rej
	case mad.AttrREP:
		return &m.rx.rep
	case mad.AttrRTU:
		return &m.rx.rtu
	case mad.AttrDREQ:
		return &m.rx.dreq
	case mad.AttrDREP:
		return &m.rx.drep
	case mad.AttrSIDRREQ:
		return &m.rx.sreq
	case mad.AttrSIDRREP:
		return &m.rx.srep
	case mad.AttrLAP:
		return &m.rx.lap
	}
	return &m.rx.apr
}

// listening asks Config.Listening about a new request.
func (m *Manager) listening(sid mad.ServiceID, from netip.Addr, pd []byte) Verdict {
	if m.cfg.Listening == nil {
		return NoListener
	}
	return m.cfg.Listening(sid, from, pd)
}

// lookup returns connection id if its remote comm ID is remote, as the
// kernel's cm_acquire_id matches both IDs (remote 0 before the REP).
func (m *Manager) lookup(id, remote uint32) *conn {
	c := m.conns[ID(id)]
	if c == nil || c.remoteID != remote {
		return nil
	}
	return c
}

// newConn makes a record with a fresh ID, or returns nil at the Records
// limit after freeing the oldest timewait record if there is one.
func (m *Manager) newConn(state State, peer netip.Addr) *conn {
	if len(m.conns) >= m.cfg.Limits.Records {
		if m.twHead == nil {
			return nil
		}
		m.free(m.twHead) // its stale protection ends early
	}
	var id ID
	for {
		m.idSeq++
		id = ID(m.idSeq ^ m.cfg.IDSeed)
		if _, used := m.conns[id]; id != 0 && !used {
			break
		}
	}
	c := &conn{id: id, state: state, peer: peer, heapIdx: -1}
	m.conns[id] = c
	return c
}

// tid returns the transaction ID of a request c starts: TIDHigh and the
// local comm ID with its bytes reversed. That is what the kernel's
// cm_form_tid gives on a little-endian host (it widens the big-endian
// comm ID as stored), so goroce's MADs are byte for byte the kernel's.
func (m *Manager) tid(c *conn) uint64 {
	return uint64(m.cfg.TIDHigh)<<32 | uint64(bits.ReverseBytes32(uint32(c.id)))
}

// encode encodes a MAD into the scratch buffer. The messages are built
// here from checked values; a failure is a bug.
func (m *Manager) encode(tid uint64, attrMod uint32, msg mad.Message) []byte {
	h := mad.CMHeader(msg.AttrID(), tid)
	h.AttrMod = attrMod
	b, err := mad.AppendMAD(m.buf[:0], &h, msg)
	if err != nil {
		panic("ibcm: encoding a CM message: " + err.Error())
	}
	m.buf = b
	return b
}

// send encodes msg and appends it to out for to.
func (m *Manager) send(out *Output, to netip.Addr, tid uint64, msg mad.Message) {
	out.send(to, m.encode(tid, 0, msg))
	m.counters.Sent[msg.AttrID()-mad.AttrREQ]++
}

// event appends an event for c unless the driver destroyed it.
func (m *Manager) event(out *Output, c *conn, e Event) {
	if c.destroyed {
		return
	}
	e.ID, e.Peer = c.id, c.peer
	out.event(e)
}

// indexRemote records c's remote comm ID and QPN for duplicate and stale
// detection.
func (m *Manager) indexRemote(c *conn) {
	m.byRemoteID[remoteKey{c.remoteID, c.remoteGUID}] = c
	m.byRemoteQPN[remoteKey{c.remoteQPN, c.remoteGUID}] = c
	c.inRemoteID, c.inRemoteQPN = true, true
}

// free forgets c entirely.
func (m *Manager) free(c *conn) {
	m.unschedule(c)
	m.leaveHalfOpen(c)
	m.leaveTimewait(c)
	if c.inRemoteID {
		delete(m.byRemoteID, remoteKey{c.remoteID, c.remoteGUID})
	}
	if c.inRemoteQPN {
		delete(m.byRemoteQPN, remoteKey{c.remoteQPN, c.remoteGUID})
	}
	if c.inSIDR {
		delete(m.bySIDR, c.sidr)
	}
	c.inRemoteID, c.inRemoteQPN, c.inSIDR = false, false, false
	c.pend = nil
	c.state = StateIdle
	delete(m.conns, c.id)
}

// enterTimewait closes c: it stays known for IBATime(avTimeout) so that a
// stale REQ reusing its remote QPN or comm ID is refused.
func (m *Manager) enterTimewait(c *conn, now time.Time) {
	m.leaveHalfOpen(c)
	c.pend = nil
	c.state = StateTimewait
	m.joinTimewait(c)
	m.schedule(c, timerTimewait, now.Add(IBATime(c.avTimeout)))
}

// Deadline returns when OnTimer is next due; ok is false with no timer.
func (m *Manager) Deadline() (t time.Time, ok bool) {
	if len(m.timers) == 0 {
		return time.Time{}, false
	}
	return m.timers[0].deadline, true
}

// OnTimer runs the timers due at now: retransmissions, timeouts, the end
// of timewait and of the accept wait.
func (m *Manager) OnTimer(now time.Time, out *Output) {
	for len(m.timers) > 0 && !m.timers[0].deadline.After(now) {
		c := m.timers[0]
		kind := c.timer
		m.unschedule(c)
		switch kind {
		case timerRetransmit:
			m.retransmit(c, now, out)
		case timerAccept:
			m.abandon(c, out)
		case timerTimewait:
			m.event(out, c, Event{Type: EventTimewaitExit})
			m.free(c)
		}
	}
}

// abandon drops a half-open passive request without a word to the peer.
func (m *Manager) abandon(c *conn, out *Output) {
	m.event(out, c, Event{Type: EventAbandoned})
	m.free(c)
}

// get returns the live connection id.
func (m *Manager) get(id ID) (*conn, error) {
	c, ok := m.conns[id]
	if !ok || c.destroyed {
		return nil, ErrUnknownID
	}
	return c, nil
}
