package wire

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// Receive-side ICRC and the IPv4 identification field.
//
// The ICRC of a RoCEv2 packet over IPv4 covers the IP header's
// identification field, but a UDP socket does not hand the IP header to the
// receiver. Every other covered field can be rebuilt from what the socket
// does report (addresses, ports, the datagram length; DF and IHL 5 are
// assumed, as every RoCEv2 sender uses them), so the receiver knows the
// covered message except for 16 bits.
//
// CRC-32 is affine over GF(2): for two messages of the same length that
// differ only in the identification field,
//
//	crc(id = X) = crc(id = 0) XOR L_n(X)
//
// where L_n is a linear map from the 16 id bits to the 32 CRC bits. It is the
// CRC register contribution of the id bytes, shifted through the n covered
// bytes that follow them, and depends only on n. Given the received ICRC and
// the ICRC computed with id 0, the difference (the syndrome) must lie in the
// image of L_n; if it does, solving L_n(X) = syndrome recovers the id the
// sender used. L_n is injective (a nonzero polynomial of degree < 16 times a
// power of x is never a multiple of the CRC-32 generator, which is coprime to
// x), so the recovered id is unique.
//
// Strength: when the sender used id 0 (goroce peers: unconnected sockets with
// DF send id 0), the first comparison is a full 32-bit check. The recovery
// path accepts any syndrome in a 16-dimensional subspace of the 2^32 possible
// ones, so a corrupted packet passes it with probability about 2^-16: for
// packets whose sender used a non-zero id (Linux rxe counts ids per socket)
// the ICRC is a 16-bit check, and a corrupted id-0 packet can also be
// misread as an intact packet with some other id at that rate. Errors are
// not random, though, and the structure helps: a single flipped bit passes
// only if it lies at least 26767 bytes after the id field (tested), so every
// single-bit error in a RoCEv2 packet is still detected. Strict checking
// (netio's Config.StrictICRC) turns the recovery off for deployments that
// only talk to senders using id 0.
//
// A predicted id keeps the full strength: the segments of a GSO send carry
// ids 0, 1, 2, ... (see internal/netio/gso_linux.go), and a sender that
// counts ids sends runs of consecutive ones, so ICRCChecker also accepts
// the id after the previous packet's from the same source, solved from the
// syndrome and compared. Two syndromes out of 2^32 (id 0 and the predicted
// one) pass that check, so it is a 31-bit check, reported apart
// (ICRCIDPredicted) and accepted in strict mode.
//
// The DF bit sits in the same covered word. It is assumed set (rxe always
// sets it, and RoCEv2 packets must not be fragmented); a sender that clears
// it fails the check.

// crcPoly is the reflected IEEE 802.3 CRC-32 generator, the one hash/crc32's
// IEEE table and the RoCEv2 ICRC use.
const crcPoly = 0xEDB88320

// idBits is the width of the IPv4 identification field.
const idBits = 16

// idCoveredAfter is the number of bytes the ICRC covers after the IPv4
// identification field and before the transport headers: the rest of the
// 20-byte IPv4 header (flags and fragment offset, TTL, protocol, checksum,
// addresses: 14 bytes) and the 8-byte UDP header.
const idCoveredAfter = 14 + 8

// gf2Op is a linear operator on 32-bit vectors over GF(2), stored by columns:
// op[j] is the image of the vector with only bit j set.
type gf2Op [32]uint32

// apply returns op(v): the sum (XOR) of the columns selected by v's bits.
func (op *gf2Op) apply(v uint32) uint32 {
	var r uint32
	for v != 0 {
		r ^= op[bits.TrailingZeros32(v)]
		v &= v - 1
	}
	return r
}

// squared returns op∘op.
func (op *gf2Op) squared() gf2Op {
	var r gf2Op
	for j := range op {
		r[j] = op.apply(op[j])
	}
	return r
}

// crcStepByte advances a raw CRC-32 register (no initial value, no final
// inversion) by one message byte, bit by bit as the reflected algorithm is
// defined. It runs only while the tables below are built.
func crcStepByte(reg uint32, b byte) uint32 {
	reg ^= uint32(b)
	for range 8 {
		if reg&1 != 0 {
			reg = reg>>1 ^ crcPoly
		} else {
			reg >>= 1
		}
	}
	return reg
}

// maxZeroShiftLog bounds the shifts zeroShift supports: 2^17-1 bytes, more
// than the largest UDP datagram plus the IP and UDP headers.
const maxZeroShiftLog = 17

// Tables built once at start-up (about 20k XORs, no I/O).
var (
	// zeroBytePow[k] advances a raw CRC register through 2^k zero bytes,
	// which is multiplication by x^(8·2^k) modulo the generator.
	zeroBytePow [maxZeroShiftLog]gf2Op
	// idContribution[i] is the raw CRC register after processing the two
	// id bytes (big-endian, as on the wire) of an id with only bit i set,
	// starting from a zero register.
	idContribution [idBits]uint32
)

func init() {
	for j := range zeroBytePow[0] {
		zeroBytePow[0][j] = crcStepByte(1<<j, 0)
	}
	for k := 1; k < len(zeroBytePow); k++ {
		zeroBytePow[k] = zeroBytePow[k-1].squared()
	}
	for i := range idContribution {
		id := uint16(1) << i
		idContribution[i] = crcStepByte(crcStepByte(0, byte(id>>8)), byte(id))
	}
}

// zeroShift advances the raw CRC register v through n zero bytes by
// square-and-multiply over the precomputed powers: O(log n) operator
// applications instead of n byte steps.
func zeroShift(v uint32, n int) uint32 {
	for k := 0; n != 0 && k < len(zeroBytePow); k, n = k+1, n>>1 {
		if n&1 != 0 {
			v = zeroBytePow[k].apply(v)
		}
	}
	return v
}

// idSyndrome returns L_n(id): how the ICRC of a packet changes when its IPv4
// identification goes from 0 to id, with n covered bytes after the id field.
// The receive path never calls it (it solves the inverse problem with an
// idBasis); it is the forward map the tests check against hash/crc32.
func idSyndrome(id uint16, n int) uint32 {
	var v uint32
	for i := range idBits {
		if id&(1<<i) != 0 {
			v ^= idContribution[i]
		}
	}
	return zeroShift(v, n)
}

// idBasis is L_n in reduced row-echelon form, ready to invert: row k has a
// single pivot bit that no other row has, and tag[k] records which id bits
// were combined into it.
type idBasis struct {
	n     int  // covered bytes after the id field
	built bool // false in an empty cache slot
	rank  int
	pivot [idBits]uint32
	vec   [idBits]uint32
	tag   [idBits]uint16
	// image is L_n by bytes, L_n(id) = image[0][id&0xff] ^
	// image[1][id>>8]: checking the predicted id of a packet (the common
	// case: a GSO datagram's segments number up from the first) is two
	// loads, where solve takes 16 steps with a branch each (solve was
	// 5 % of a receiving process's CPU at MTU 1024).
	image [2][256]uint32
}

// build computes the basis for n covered bytes after the id field: the image
// of each id bit, then Gauss-Jordan elimination over GF(2).
func (b *idBasis) build(n int) {
	*b = idBasis{n: n, built: true}
	var col [idBits]uint32
	for i := range idBits {
		col[i] = zeroShift(idContribution[i], n)
	}
	for h := range b.image {
		for x := 1; x < len(b.image[h]); x++ {
			b.image[h][x] = b.image[h][x&(x-1)] ^ col[8*h+bits.TrailingZeros(uint(x))]
		}
	}
	for i := range idBits {
		v, t := col[i], uint16(1)<<i
		for k := range b.rank {
			if v&b.pivot[k] != 0 {
				v ^= b.vec[k]
				t ^= b.tag[k]
			}
		}
		if v == 0 {
			// Cannot happen for CRC-32 (L_n is injective, see above);
			// a dependent row would only mean fewer ids to tell apart.
			continue
		}
		p := v & -v
		for k := range b.rank {
			if b.vec[k]&p != 0 {
				b.vec[k] ^= v
				b.tag[k] ^= t
			}
		}
		b.pivot[b.rank], b.vec[b.rank], b.tag[b.rank] = p, v, t
		b.rank++
	}
}

// syndromeOf returns L_n(id), as idSyndrome does.
func (b *idBasis) syndromeOf(id uint16) uint32 {
	return b.image[0][id&0xff] ^ b.image[1][id>>8]
}

// solve returns the id X with L_n(X) = syndrome, and false when the syndrome
// is outside the image of L_n, that is when no id explains the mismatch.
// Each row's pivot bit occurs in no other row, so clearing the pivots one by
// one in any order leaves zero exactly when the syndrome is in the span.
func (b *idBasis) solve(syndrome uint32) (uint16, bool) {
	var id uint16
	for k := range b.rank {
		if syndrome&b.pivot[k] != 0 {
			syndrome ^= b.vec[k]
			id ^= b.tag[k]
		}
	}
	return id, syndrome == 0
}

// idCacheSize is the number of datagram lengths whose basis is kept. A flow
// of RoCE traffic has few distinct lengths (full-MTU packets, the last
// packet of each message, ACKs), so a handful of slots makes rebuilds rare;
// a peer sending every length costs one rebuild (a few microseconds) per
// packet, nothing more.
const idCacheSize = 8

// idRecoverer recovers IPv4 identification values from ICRC syndromes with a
// small cache of per-length bases. The zero value is ready to use. It is not
// safe for concurrent use: each receive loop owns one.
type idRecoverer struct {
	slots [idCacheSize]idBasis
	next  int // slot to replace next (round robin)
}

// recoverID returns the IPv4 identification that explains syndrome, the XOR
// of the received ICRC and the ICRC computed with id 0, for a packet with n
// covered bytes after the id field; false means no id does and the packet
// is corrupt. A predicted id next (0: none) is tried first, in two loads.
func (r *idRecoverer) recoverID(n int, syndrome uint32, next uint16) (uint16, bool) {
	b := r.basis(n)
	if next != 0 && b.syndromeOf(next) == syndrome {
		return next, true
	}
	return b.solve(syndrome)
}

func (r *idRecoverer) basis(n int) *idBasis {
	for i := range r.slots {
		if r.slots[i].built && r.slots[i].n == n {
			return &r.slots[i]
		}
	}
	b := &r.slots[r.next]
	r.next = (r.next + 1) % len(r.slots)
	b.build(n)
	return b
}

// idCoveredBytes returns n, the number of bytes the ICRC covers after the
// IPv4 identification field, for a UDP payload (BTH through ICRC) of
// udpPayloadLen bytes: the rest of the IP and UDP headers plus the transport
// bytes, without the 4-byte ICRC itself.
func idCoveredBytes(udpPayloadLen int) int {
	return idCoveredAfter + udpPayloadLen - ICRCLen
}

// ICRCResult is the outcome of a receive-side ICRC check (ICRCChecker).
type ICRCResult uint8

const (
	ICRCBad         ICRCResult = iota // no IPv4 identification explains the ICRC
	ICRCOK                            // full 32-bit match: IPv6, or IPv4 identification 0
	ICRCIDRecovered                   // match after recovering a non-zero IPv4 identification (16-bit check)
	ICRCIDPredicted                   // match for the predicted non-zero IPv4 identification (31-bit check)
)

// String returns the result's name, for test and log output.
func (r ICRCResult) String() string {
	switch r {
	case ICRCOK:
		return "ok"
	case ICRCIDRecovered:
		return "recovered"
	case ICRCIDPredicted:
		return "predicted"
	}
	return "bad"
}

// ICRCChecker checks the ICRC of the packets a UDP socket receives, which
// does not report the IPv4 identification the ICRC covers: it predicts
// the identification per source and recovers it from the ICRC (see
// above), with a small cache of the bases it solves with. The zero value is
// ready to use. It is not safe for concurrent use: each receive loop owns
// one.
type ICRCChecker struct {
	ids idRecoverer
	// hash computes the ICRCs: a GRO batch's packets share their
	// addresses, ports and length.
	hash ICRCHasher

	// prevFrom and prevID are the source and IPv4 identification of the
	// last packet accepted, from which the next one's is predicted.
	prevFrom netip.AddrPort
	prevID   uint16
}

// Check verifies the ICRC of udpPayload (BTH through ICRC, as Packet.Parse
// accepted it, so that the pad fits) received from from on local, with the
// IP and UDP headers rebuilt as IPUDPHeaders does. It returns how the ICRC
// matched and, for IPv4, the identification the sender used. Identification
// 0 and the one after the previous accepted packet's from the same source
// (the prediction) are full checks, since only two of the 2^32 syndromes
// pass; any other identification is recovered only when strict is false,
// which is a 16-bit check. An accepted packet's identification is the base
// of the next prediction for its source.
//
// One function, not a prediction wrapped around a check: it runs for every
// packet received, and a second call level with two addresses by value
// cost the receive path about 30 instructions per packet.
func (k *ICRCChecker) Check(from, local netip.AddrPort, udpPayload []byte, strict bool) (ICRCResult, uint16) {
	var next uint16 // 0: no prediction (0 is always checked first)
	if from == k.prevFrom {
		next = k.prevID + 1
	}
	n := len(udpPayload) - ICRCLen
	syndrome := k.hash.Addrs(from, local, 0, udpPayload[:n]) ^ binary.LittleEndian.Uint32(udpPayload[n:])
	var id uint16
	if syndrome != 0 {
		if (strict && next == 0) || !from.Addr().Unmap().Is4() {
			return ICRCBad, 0
		}
		var ok bool
		// A solved id is never 0: L_n is injective and the syndrome is not 0.
		id, ok = k.ids.recoverID(idCoveredBytes(len(udpPayload)), syndrome, next)
		if !ok || (strict && id != next) {
			return ICRCBad, 0
		}
	}
	k.prevFrom, k.prevID = from, id
	switch {
	case id == 0:
		return ICRCOK, 0
	case id == next:
		return ICRCIDPredicted, id
	}
	return ICRCIDRecovered, id
}
