// Package seal is the wire format of goroce's authenticated, encrypted RDMA
// between goroce peers: the per-packet AEAD framing, the replay window and
// the key agreement carried in the connection manager's private data. It
// holds no QP state and does no I/O: package verbs keeps a Sealer and an
// Opener per QP, package cm runs the handshake.
//
// # Packet format
//
// A sealed packet is a RoCEv2 packet whose BTH stays in the clear (it is
// routing: opcode, destination QP, PSN) and whose extension headers,
// payload and pad are encrypted with AES-256-GCM:
//
//	BTH (12) | counter (8) | AES-256-GCM(extension headers | payload | pad) | tag (16) | ICRC (4)
//
// The counter is the sender's per-direction transmit count: every packet
// sent, retransmissions included, takes the next one, so a GCM nonce
// (4 zero bytes and the counter) never repeats under a key even when a
// retransmitted payload differs (a READ response re-read from memory).
// The BTH is the additional authenticated data, with its byte 4 (FECN,
// BECN and reserved bits, which the ICRC also masks since the network may
// set them) zeroed. The ICRC is computed over the sealed packet as usual,
// so that switches, captures and Wireshark still parse the BTH; a packet
// grows by Overhead (24) bytes, the IB MTU is unchanged.
//
// The receiver checks the counter against a sliding window of
// WindowSize counters (Window), authenticates and decrypts in place in
// its receive buffer, and only then marks the counter seen and hands the
// plain packet on: unauthenticated bytes never reach registered memory,
// and a replayed, forged or altered packet changes nothing.
//
// # Key agreement
//
// Both sides hold a pre-shared key (PSK, at least MinPSKLen bytes). The
// construction follows the pattern of Noise NNpsk0 (ephemeral-ephemeral
// X25519 with a PSK) without being Noise:
//
//   - Offer, in the REQ: the active side's ephemeral X25519 public key e_a
//     and tag_a = HMAC-SHA256(K_offer, magic | e_a) truncated to 16 bytes,
//     where K_offer = HKDF-SHA256(PSK, info "goroce seal v1 offer").
//   - Answer, in the REP: the passive side's ephemeral key e_p and
//     tag_p = HMAC-SHA256(K_confirm, "answer" | T) truncated to 16 bytes.
//   - T, the transcript, binds the rdma_cm service ID, both GIDs, both QP
//     numbers, both starting PSNs and both public keys.
//   - The session keys are HKDF-SHA256(secret = X25519(e_a, e_p) | PSK,
//     salt = SHA-256(T), info "goroce seal v1 keys"), 128 bytes split
//     into the active-to-passive and passive-to-active packet keys,
//     K_confirm and the disconnect key.
//
// What it guarantees: both sides know the PSK (the passive side checks
// tag_a before it answers, the active side tag_p before its QP goes to
// RTR); the packet keys are fresh per connection and bound to its QPs
// and PSNs; forward secrecy, since they come from ephemeral keys that are
// forgotten once the keys are derived (a PSK stolen later does not open
// recorded traffic). What it does not: identity hiding (QP numbers and
// addresses are in the clear, as in any RoCE packet), and proof that the
// active side is live before its first packet: a replayed REQ makes the
// passive side accept a connection over which nobody can send it a packet
// it would take. Anyone holding the PSK is a peer: it authenticates a
// group, not a host.
package seal
