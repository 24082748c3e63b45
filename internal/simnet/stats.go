package simnet

import "strings"

// Stats counts what a network, or one direction of one link, did with the
// datagrams sent on it. Every datagram handed to Send, plus every copy the
// network made, ends up in exactly one of Delivered, Lost, DroppedMTU,
// DroppedPartition and DroppedQueue, or is still InFlight:
//
//	Sent + Duplicated == Delivered + Lost + DroppedMTU + DroppedPartition + DroppedQueue + InFlight
type Stats struct {
	// Sent counts calls to Send, SentBytes their bytes.
	Sent, SentBytes uint64
	// Delivered counts copies handed to a receiver, DeliveredBytes their
	// bytes. Duplicates and corrupted copies are included.
	Delivered, DeliveredBytes uint64
	// Lost counts datagrams dropped at random (LinkConfig.Loss).
	Lost uint64
	// Duplicated counts the extra copies the network made.
	Duplicated uint64
	// Corrupted counts copies that had a bit flipped, whatever became of
	// them afterwards.
	Corrupted uint64
	// DroppedMTU counts datagrams longer than the link's MTU.
	DroppedMTU uint64
	// DroppedPartition counts copies dropped because their endpoints were
	// partitioned when they were sent or when they arrived.
	DroppedPartition uint64
	// DroppedQueue counts datagrams tail-dropped by a full link queue.
	DroppedQueue uint64
	// MarkedCE counts datagrams the link's queue marked Congestion
	// Experienced (LinkConfig.MarkMax), whatever became of them
	// afterwards.
	MarkedCE uint64
	// MaxBacklog is the most bytes a datagram found waiting for the
	// link's transmitter (LinkConfig.Bandwidth); ResetMaxBacklog starts
	// it again.
	MaxBacklog int64
	// InFlight is the number of copies scheduled and not yet delivered or
	// dropped.
	InFlight uint64
}

// countDrop increments the counter of the drop reason in fate.
func (s *Stats) countDrop(fate Fate) {
	switch {
	case fate&FateLost != 0:
		s.Lost++
	case fate&FateDroppedMTU != 0:
		s.DroppedMTU++
	case fate&FateDroppedQueue != 0:
		s.DroppedQueue++
	case fate&FateDroppedPartition != 0:
		s.DroppedPartition++
	}
}

// Fate says what happened to one copy of a datagram, as reported to a [Tap].
// It holds exactly one outcome (FateDelivered or one of the drops) and
// possibly the modifiers FateDuplicate and FateCorrupted.
type Fate uint8

// Outcomes and modifiers of a Fate.
const (
	// FateDelivered: the copy was handed to the receiver.
	FateDelivered Fate = 1 << iota
	// FateLost: dropped at random.
	FateLost
	// FateDroppedMTU: longer than the link's MTU.
	FateDroppedMTU
	// FateDroppedPartition: the endpoints were partitioned.
	FateDroppedPartition
	// FateDroppedQueue: tail-dropped by a full link queue.
	FateDroppedQueue
	// FateDuplicate marks the extra copy the network made of a datagram.
	FateDuplicate
	// FateCorrupted marks a copy with one bit flipped; the tap sees the
	// corrupted bytes.
	FateCorrupted
	// FateMarkedCE marks a copy the link's queue marked ECN Congestion
	// Experienced (LinkConfig.MarkMax).
	FateMarkedCE
)

var fateNames = [...]string{
	"delivered",
	"lost",
	"dropped-mtu",
	"dropped-partition",
	"dropped-queue",
	"duplicate",
	"corrupted",
	"marked-ce",
}

// Delivered reports whether the copy reached its receiver.
func (f Fate) Delivered() bool { return f&FateDelivered != 0 }

// Dropped reports whether the copy was dropped, for whatever reason.
func (f Fate) Dropped() bool {
	return f&(FateLost|FateDroppedMTU|FateDroppedPartition|FateDroppedQueue) != 0
}

// String returns the names of the set bits joined by "|", for example
// "delivered|duplicate".
func (f Fate) String() string {
	if f == 0 {
		return "none"
	}
	var b strings.Builder
	for i, name := range fateNames {
		if f&(1<<i) == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString(name)
	}
	return b.String()
}
