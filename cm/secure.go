package cm

import (
	"errors"
	"fmt"

	"github.com/goroce/goroce/internal/ibcm"
	"github.com/goroce/goroce/internal/mad"
	"github.com/goroce/goroce/internal/seal"
	"github.com/goroce/goroce/verbs"
)

// Security turns on authenticated, encrypted RDMA between goroce peers for
// a connection of the net-like API (Params.Security, for Dial and
// Request.Accept). Both sides hold the same pre-shared key; the REQ and
// REP carry an X25519 key agreement authenticated by it
// (internal/seal's package documentation has the construction), and
// every packet of the connection is then sealed with AES-256-GCM under
// per-connection, per-direction keys, replays refused (verbs.QP.SetPacketKeys).
//
// The offer takes the last SecurityLen bytes of the REQ's private data
// (leaving MaxConnectPrivateData-SecurityLen, 4 bytes, to the
// application) and the answer the last SecurityLen bytes of the REP's
// (leaving 144). A peer that does not offer or answer gets a plain RoCEv2
// connection, unless Require is set: then the connection is refused, with
// a REJ whose private data names the reason, and both sides' errors say
// why. So rxe and RDMA NICs, which never offer, keep plain RoCEv2.
type Security struct {
	// PSK is the pre-shared key, at least 16 bytes (32 random bytes are
	// right): whoever holds it can connect, so it authenticates a group
	// of hosts, not one.
	PSK []byte
	// Require refuses a connection that would not be encrypted.
	Require bool
}

// SecurityLen is the size of the handshake's offer and answer in the
// private data.
const SecurityLen = seal.HelloLen

// ErrInsecure is wrapped by the error of a connection refused for its
// security: the peer did not offer encryption and Require was set, or the
// pre-shared keys differ.
var ErrInsecure = errors.New("cm: connection not secured")

// securing is an ID's handshake on the active side, from the REQ to the
// REP. Guarded by state.mu.
type securing struct {
	cfg  Security
	init *seal.Initiator
}

// offerPrivateData returns the REQ's private data with the offer at its
// end.
func offerPrivateData(s *Security, user []byte) ([]byte, *securing, error) {
	room := MaxConnectPrivateData - SecurityLen
	if len(user) > room {
		return nil, nil, fmt.Errorf("parameter PrivateData: %d bytes do not fit beside Security's %d-byte offer (at most %d): %w",
			len(user), SecurityLen, room, verbs.ErrInvalidArgument)
	}
	in, err := seal.NewInitiator(s.PSK)
	if err != nil {
		return nil, nil, fmt.Errorf("parameter Security: %v: %w", err, verbs.ErrInvalidArgument)
	}
	offer, err := in.Offer()
	if err != nil {
		return nil, nil, err
	}
	pd := make([]byte, MaxConnectPrivateData)
	copy(pd, user)
	copy(pd[room:], offer[:])
	return pd, &securing{cfg: *s, init: in}, nil
}

// tail returns the last SecurityLen bytes of private data b, or nil.
func tail(b []byte, size int) []byte {
	if len(b) < size {
		return nil
	}
	return b[size-SecurityLen : size]
}

// keysFrom converts the handshake's keys for verbs.
func keysFrom(k *seal.SessionKeys) *verbs.PacketKeys {
	return &verbs.PacketKeys{Send: k.Send, Recv: k.Recv}
}

// finishActive checks the REP's answer and gives id's QP its keys; it
// returns the application's part of the REP's private data. A REP
// without an answer leaves the connection plain unless Require. The
// caller holds state.mu; on error it rejects the REP with
// seal.RejectData(seal.CodeOf(err)).
func (id *ID) finishActive(rep *mad.REP) ([]byte, error) {
	s := id.sec
	id.sec = nil
	answer := tail(rep.PrivateData, MaxAcceptPrivateData)
	if !seal.Present(answer) {
		if s.cfg.Require {
			return nil, fmt.Errorf("%w: the peer did not answer the encryption offer (Params.Security.Require): %w", ErrInsecure, seal.ErrNoOffer)
		}
		return rep.PrivateData, nil
	}
	t := seal.Transcript{ServiceID: uint64(mad.RDMAServiceID(mad.PortSpace(id.ps), id.dst.Port())),
		ActiveGID: id.route.SGID, PassiveGID: id.route.DGID, ActiveQPN: id.qp.QPN(), PassiveQPN: rep.LocalQPN,
		ActivePSN: id.psn, PassivePSN: rep.StartingPSN}
	keys, err := s.init.Finish(answer, &t)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInsecure, err)
	}
	if err := id.qp.SetPacketKeys(keysFrom(keys)); err != nil {
		return nil, err
	}
	id.discKey = &keys.Disconnect
	return rep.PrivateData[:MaxAcceptPrivateData-SecurityLen], nil
}

// respond checks the offer of r's REQ, if Security asks for it, gives qp
// its keys and returns the REP's private data with the answer. On error
// the request must be rejected with seal.RejectData(seal.CodeOf(err)).
func (r *Request) respond(s *Security, qp *verbs.QP, user []byte) ([]byte, error) {
	offer := tail(r.remote.PrivateData, MaxConnectPrivateData)
	if !seal.Present(offer) {
		if s.Require {
			return nil, fmt.Errorf("%w: the peer offered no encryption (Params.Security.Require): %w", ErrInsecure, seal.ErrNoOffer)
		}
		return user, nil
	}
	room := MaxAcceptPrivateData - SecurityLen
	if len(user) > room {
		return nil, fmt.Errorf("parameter PrivateData: %d bytes do not fit beside Security's %d-byte answer (at most %d): %w",
			len(user), SecurityLen, room, verbs.ErrInvalidArgument)
	}
	lock()
	req, t := r.id.req, seal.Transcript{PassivePSN: r.id.psn, PassiveQPN: qp.QPN()}
	unlock()
	t.ServiceID, t.ActiveGID, t.PassiveGID = uint64(req.ServiceID), req.Primary.LocalGID, req.Primary.RemoteGID
	t.ActiveQPN, t.ActivePSN = req.LocalQPN, req.StartingPSN
	answer, keys, err := seal.Respond(s.PSK, offer, &t)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInsecure, err)
	}
	if err := qp.SetPacketKeys(keysFrom(keys)); err != nil {
		return nil, err
	}
	lock()
	r.id.discKey = &keys.Disconnect
	unlock()
	pd := make([]byte, MaxAcceptPrivateData)
	copy(pd, user)
	copy(pd[room:], answer[:])
	r.remote.PrivateData = r.remote.PrivateData[:MaxConnectPrivateData-SecurityLen]
	return pd, nil
}

// explainReject adds to the error of a rejected connection the reason a
// handshake's REJ names.
func explainReject(err error) error {
	var re *RejectError
	if errors.As(err, &re) {
		if code, ok := seal.ParseReject(re.PrivateData); ok {
			return fmt.Errorf("%w: %w: %v", err, ErrInsecure, code)
		}
	}
	return err
}

// disconnectData is the private data of the ID's DREQ or DREP: the tag
// that shows a secured connection's peer it comes from this side. The
// caller holds state.mu.
func (id *ID) disconnectData() []byte {
	if id.discKey == nil || id.qp == nil {
		return nil
	}
	return seal.DisconnectData(id.discKey, id.qp.QPN(), id.attrs.DestQPN)
}

// disconnecting is the Manager's Disconnecting: a secured connection
// takes only a DREQ, or a REJ once established, tagged by its peer, so
// that whoever learnt the comm IDs and QP number (an on-path attacker)
// cannot tear it down; nor does a new REQ or REP reusing its peer's QPN
// (privateData nil) end it as stale. A refusal is counted by the
// Manager. The caller holds state.mu.
func (a *agent) disconnecting(cmID ibcm.ID, privateData []byte) bool {
	id := a.ids[cmID]
	if id == nil || id.discKey == nil || id.qp == nil {
		return true
	}
	return seal.CheckDisconnect(id.discKey, privateData, id.attrs.DestQPN, id.qp.QPN())
}
