package rsocket

import (
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"syscall"

	"github.com/goroce/goroce/verbs"
)

// The iomap (rsockets' riomap, riowrite and riounmap): one side maps a
// buffer of its own, registering it for remote writes and announcing it
// in the peer's iomap table (the entries after the target SGL ring in the
// peer's target region, as many as the peer's target_iomap_size) by
// writing an rs_iomap there with RS_OP_IOMAP_SGL, the entry's index, as
// immediate data. The peer then writes into the buffer by offset with
// plain RDMA WRITEs, through the send buffer as data messages are, which
// nothing on the mapping side completes: the mapping side learns of them
// by watching its buffer (riostream spins on its last byte; here
// verbs.MR.WaitRemoteWrite).

// ErrNoIOMap is wrapped by the error of an IOWrite to an offset that no
// mapping the peer announced holds.
var ErrNoIOMap = errors.New("rsocket: no iomap at that offset")

// ioMaps is a connection's view of the two iomap tables. Guarded by the
// connection's mu.
type ioMaps struct {
	remote sge     // the peer's table: address, rkey, entries
	peer   []ioMap // the entries the peer announced into this side's table
}

// newIOMaps starts with the peer's table as its rs_conn_data announces
// it (rs_save_conn_data), and sizes the endpoint's list of this side's
// mappings to it.
func newIOMaps(ep *endpoint, peer *connData) ioMaps {
	m := ioMaps{peer: make([]ioMap, ep.ioMaps)}
	if peer.flags&connFlagIOMap != 0 {
		m.remote = sge{addr: peer.targetSGL.addr + uint64(peer.targetSGL.length)*sgeLen,
			key: peer.targetSGL.key, length: uint32(fromScale(peer.iomapSize))}
	}
	ep.mapped = make([]*verbs.MR, m.remote.length)
	return m
}

// announced applies the peer's RS_OP_IOMAP_SGL: the entry index of this
// side's table, in tbuf (the target region), now holds a mapping.
func (m *ioMaps) announced(tbuf []byte, index uint32) error {
	if index >= uint32(len(m.peer)) {
		return fmt.Errorf("%w: iomap entry %d of a table of %d", errProtocol, index, len(m.peer))
	}
	e, err := parseIOMap(tbuf[sglSize*sgeLen+int(index)*ioMapLen:])
	if err != nil {
		return err
	}
	m.peer[index] = e
	return nil
}

// find returns the peer's mapping that holds offset off, or nil
// (rs_find_iomap: the first in the table).
func (m *ioMaps) find(off uint64) *ioMap {
	for i := range m.peer {
		if m.peer[i].covers(off) {
			return &m.peer[i]
		}
	}
	return nil
}

// IOMap registers buf for the peer's writes and announces it at offset
// in the peer's iomap table (rsockets' riomap with PROT_WRITE): the
// peer's IOWrite or riowrite to offsets offset through offset+len(buf)-1
// then stores into buf, telling nothing. Watch the region returned
// (RemoteWrites, WaitRemoteWrite) to learn of the stores; the bytes of
// one write are in buf before the count that includes its last packet.
// The announcement is posted in order with Write's messages: a peer that
// read a message written after IOMap may write into the mapping. It waits
// for send resources as Write does, and fails with an error wrapping
// syscall.ENOMEM when the peer's table (its Config.IOMapSize, or
// RDMA_IOMAPSIZE) has no free entry. IOUnmap or Close releases the region.
func (c *Conn) IOMap(buf []byte, offset uint64) (*verbs.MR, error) {
	if len(buf) == 0 || len(buf) > math.MaxUint32 || offset+uint64(len(buf)) < offset {
		return nil, c.opError("iomap", syscall.EINVAL)
	}
	c.wrMu.Lock()
	defer c.wrMu.Unlock()
	c.postMu.Lock()
	defer c.postMu.Unlock()
	c.mu.Lock()
	if err := c.sendable(); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	idx := slices.Index(c.ep.mapped, nil)
	if idx < 0 {
		c.mu.Unlock()
		return nil, c.opError("iomap", fmt.Errorf("the peer's iomap table of %d entries is full: %w", c.maps.remote.length, syscall.ENOMEM))
	}
	mr, err := c.ep.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		c.mu.Unlock()
		return nil, c.opError("iomap", err)
	}
	c.ep.mapped[idx] = mr
	seg := c.snd.reserveOwn(ioMapLen, true)
	seg.dst = sge{addr: c.maps.remote.addr + uint64(idx)*ioMapLen, key: c.maps.remote.key}
	c.mu.Unlock()
	var entry [ioMapLen]byte
	appendIOMap(entry[:0], ioMap{offset: offset, region: sge{addr: mr.IOVA(), key: mr.RKey(), length: uint32(len(buf))}}, c.peerBE)
	if err := c.postWrite(entry[:], seg, msg(opIOMapSGL, uint32(idx)), true); err != nil {
		c.fail(err)
		return nil, c.opError("iomap", err)
	}
	return mr, nil
}

// IOUnmap deregisters a region IOMap returned (riounmap) and frees its
// entry of the peer's table for the next IOMap. The peer is not told: a
// write of its into the old region from then on fails, and with it the
// connection, as with rsockets.
func (c *Conn) IOUnmap(mr *verbs.MR) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return c.opError("iounmap", net.ErrClosed)
	}
	i := slices.Index(c.ep.mapped, mr)
	if mr == nil || i < 0 {
		c.mu.Unlock()
		return c.opError("iounmap", syscall.EINVAL)
	}
	c.ep.mapped[i] = nil
	c.mu.Unlock()
	if err := mr.Dereg(); err != nil {
		return c.opError("iounmap", err)
	}
	return nil
}

// IOWrite writes b into the peer's mappings at offset (rsockets'
// riowrite): RDMA WRITEs of up to 256 KiB copied through the send buffer,
// without immediate data, so the peer's program is not told. It returns
// once every write is posted; the bytes reach the peer's memory before
// any message written afterwards. Mappings are those the peer announced
// (its IOMap or riomap) before the messages read so far: when none holds
// the next offset, IOWrite returns what it wrote and an error wrapping
// ErrNoIOMap.
func (c *Conn) IOWrite(b []byte, offset uint64) (int, error) {
	if offset+uint64(len(b)) < offset {
		return 0, c.opError("iowrite", syscall.EINVAL)
	}
	c.wrMu.Lock()
	defer c.wrMu.Unlock()
	done := 0
	for done < len(b) {
		c.postMu.Lock()
		c.mu.Lock()
		seg, err := c.reserveIOWrite(len(b)-done, offset+uint64(done))
		c.mu.Unlock()
		if err != nil {
			c.postMu.Unlock()
			return done, err
		}
		err = c.postWrite(b[done:done+seg.n], seg, msg(opWrite, uint32(seg.n)), false)
		c.postMu.Unlock()
		if err != nil {
			c.fail(err)
			return done, c.opError("iowrite", err)
		}
		done += seg.n
	}
	return done, nil
}

// reserveIOWrite waits for send resources and takes the next write of an
// IOWrite: up to left bytes to the peer's offset off, within one of its
// mappings. The caller holds wrMu, postMu and mu.
func (c *Conn) reserveIOWrite(left int, off uint64) (segment, error) {
	if err := c.sendable(); err != nil {
		return segment{}, err
	}
	m := c.maps.find(off)
	if m == nil {
		return segment{}, c.opError("iowrite", fmt.Errorf("%w %d", ErrNoIOMap, off))
	}
	n := int(min(uint64(left), maxMessage, uint64(c.snd.sbufAvail), m.offset+uint64(m.region.length)-off))
	seg := c.snd.reserveOwn(n, false)
	seg.dst = sge{addr: m.region.addr + (off - m.offset), key: m.region.key}
	return seg, nil
}
