package wire

import (
	"encoding/binary"
	"strconv"
	"time"
)

// AETHLen is the length of the ACK extended transport header.
const AETHLen = 4

const (
	aethSyndrome = 0
	aethMSN      = 0 // 32-bit word: syndrome, MSN
)

// AETH is a view of an ACK extended transport header: the syndrome (ACK, RNR
// NAK or NAK) and the responder's message sequence number. It follows the BTH
// of ACKNOWLEDGE, ATOMIC_ACKNOWLEDGE and the READ_RESPONSE FIRST, LAST and
// ONLY packets.
type AETH []byte

// Syndrome returns the syndrome byte.
func (b AETH) Syndrome() AETHSyndrome { return AETHSyndrome(b[aethSyndrome]) }

// MSN returns the message sequence number.
func (b AETH) MSN() MSN { return MSN(binary.BigEndian.Uint32(b[aethMSN:]) & MSNMask) }

// SetSyndrome sets the syndrome byte.
func (b AETH) SetSyndrome(s AETHSyndrome) { b[aethSyndrome] = byte(s) }

// SetMSN sets the message sequence number; only the low 24 bits are used.
func (b AETH) SetMSN(m MSN) { put24(b[aethMSN+1:], uint32(m)) }

// AETHFields holds the values of the AETH fields.
type AETHFields struct {
	Syndrome AETHSyndrome
	MSN      MSN
}

// Fields returns the values of all fields of b.
func (b AETH) Fields() AETHFields {
	_ = b[AETHLen-1]
	return AETHFields{Syndrome: b.Syndrome(), MSN: b.MSN()}
}

// Encode writes f into b.
func (b AETH) Encode(f *AETHFields) {
	binary.BigEndian.PutUint32(b[aethMSN:], uint32(f.Syndrome)<<24|uint32(f.MSN)&MSNMask)
}

// Append appends the encoded header to b and returns the extended slice.
func (f *AETHFields) Append(b []byte) []byte {
	b, h := grow(b, AETHLen)
	AETH(h).Encode(f)
	return b
}

// AETHSyndrome is the AETH syndrome byte. Bits 7:5 give its kind (bit 7 is
// reserved and must be 0, so rxe matches kinds with the mask 0xE0) and bits
// 4:0 its value: a credit count code for an ACK, a timer code for an RNR NAK,
// a NAK code for a NAK.
type AETHSyndrome uint8

// AETHKind is the kind of an AETH syndrome.
type AETHKind uint8

// Syndrome kinds, the values of bits 7:5.
const (
	AETHAck      AETHKind = 0x00
	AETHRNRNak   AETHKind = 0x20
	AETHReserved AETHKind = 0x40 // also returned for any syndrome with bit 7 set
	AETHNak      AETHKind = 0x60
)

const (
	syndromeKindMask  = 0xE0
	syndromeValueMask = 0x1F
)

// String returns "ACK", "RNR NAK", "reserved" or "NAK".
func (k AETHKind) String() string {
	switch k {
	case AETHAck:
		return "ACK"
	case AETHRNRNak:
		return "RNR NAK"
	case AETHNak:
		return "NAK"
	}
	return "reserved"
}

// NAKCode is the value of a NAK syndrome (bits 4:0).
type NAKCode uint8

// NAK codes, as the IBTA defines them.
const (
	NAKPSNSequenceError       NAKCode = 0
	NAKInvalidRequest         NAKCode = 1
	NAKRemoteAccessError      NAKCode = 2
	NAKRemoteOperationalError NAKCode = 3
	NAKInvalidRDRequest       NAKCode = 4 // RD only
)

var nakNames = [...]string{
	NAKPSNSequenceError:       "PSN sequence error",
	NAKInvalidRequest:         "invalid request",
	NAKRemoteAccessError:      "remote access error",
	NAKRemoteOperationalError: "remote operational error",
	NAKInvalidRDRequest:       "invalid RD request",
}

// String returns the IBTA description, e.g. "remote access error".
func (c NAKCode) String() string {
	if int(c) < len(nakNames) {
		return nakNames[c]
	}
	return "reserved code " + strconv.Itoa(int(c))
}

// SyndromeAckUnlimited is an ACK with credit code 31, "no end-to-end credit
// limit": what rxe sends, and the only credit code goroce sends.
const SyndromeAckUnlimited AETHSyndrome = 0x1F

// AckSyndrome returns an ACK syndrome with the given 5-bit credit code.
func AckSyndrome(credits uint8) AETHSyndrome {
	return AETHSyndrome(AETHAck) | AETHSyndrome(credits&syndromeValueMask)
}

// RNRNakSyndrome returns an RNR NAK syndrome with the given 5-bit RNR timer
// code (see RNRDelay).
func RNRNakSyndrome(timer uint8) AETHSyndrome {
	return AETHSyndrome(AETHRNRNak) | AETHSyndrome(timer&syndromeValueMask)
}

// NakSyndrome returns a NAK syndrome with the given code.
func NakSyndrome(code NAKCode) AETHSyndrome {
	return AETHSyndrome(AETHNak) | AETHSyndrome(code&syndromeValueMask)
}

// Kind returns the kind of s.
func (s AETHSyndrome) Kind() AETHKind {
	k := AETHKind(s & syndromeKindMask)
	if k&0x80 != 0 {
		return AETHReserved
	}
	return k
}

// Credits returns the credit count code of an ACK (bits 4:0). It is a code,
// not a count: 31 means no credit limit.
func (s AETHSyndrome) Credits() uint8 { return uint8(s & syndromeValueMask) }

// RNRTimer returns the RNR timer code of an RNR NAK (bits 4:0).
func (s AETHSyndrome) RNRTimer() uint8 { return uint8(s & syndromeValueMask) }

// NAKCode returns the code of a NAK (bits 4:0).
func (s AETHSyndrome) NAKCode() NAKCode { return NAKCode(s & syndromeValueMask) }

// String describes s: "ACK credits=31", "RNR NAK timer=12 (640µs)",
// "NAK remote access error", "reserved syndrome 0x40".
func (s AETHSyndrome) String() string {
	switch s.Kind() {
	case AETHAck:
		return "ACK credits=" + strconv.Itoa(int(s.Credits()))
	case AETHRNRNak:
		return "RNR NAK timer=" + strconv.Itoa(int(s.RNRTimer())) + " (" + RNRDelay(s.RNRTimer()).String() + ")"
	case AETHNak:
		return "NAK " + s.NAKCode().String()
	}
	return "reserved syndrome 0x" + strconv.FormatUint(uint64(s), 16)
}

// rnrDelayMicros maps the 5-bit RNR timer code to microseconds, as the IBTA
// and rxe_comp.c's rnrnak_usec define it. Code 0 is the longest delay.
var rnrDelayMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120,
	160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720,
	40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// RNRDelay returns the minimum time a requester waits before retrying after
// an RNR NAK with the given timer code; only the low 5 bits of code are used.
func RNRDelay(code uint8) time.Duration {
	return time.Duration(rnrDelayMicros[code&syndromeValueMask]) * time.Microsecond
}
