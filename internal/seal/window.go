package seal

// WindowSize is how many counters behind the highest one seen a receiver
// still accepts, each once: packets reordered by up to WindowSize are
// taken, anything older is dropped as a replay. goroce's send windows and
// GSO batches reorder far less.
const WindowSize = 1024

// Window is a sliding replay window over a sender's transmit counters
// (RFC 6479's bitmap, as IPsec and WireGuard use): bit c mod WindowSize
// records counter c for the WindowSize counters below top.
type Window struct {
	top  uint64 // the highest counter seen plus one; 0 before the first
	bits [WindowSize / 64]uint64
}

// Fresh reports whether c may be accepted: above every counter seen, or
// inside the window and not seen yet. It changes nothing: Mark does,
// once the packet authenticated.
func (w *Window) Fresh(c uint64) bool {
	switch {
	case c >= w.top:
		return true
	case w.top-c > WindowSize:
		return false
	}
	return w.bits[(c/64)%(WindowSize/64)]&(1<<(c%64)) == 0
}

// Mark records c as seen, sliding the window forward when c is the new
// highest. The caller checked Fresh(c).
func (w *Window) Mark(c uint64) {
	if c >= w.top {
		if c-w.top >= WindowSize {
			w.bits = [WindowSize / 64]uint64{}
		} else {
			for k := w.top; k < c; k++ { // forget what the slide passes over
				w.bits[(k/64)%(WindowSize/64)] &^= 1 << (k % 64)
			}
		}
		w.bits[(c/64)%(WindowSize/64)] &^= 1 << (c % 64)
		w.top = c + 1
	}
	w.bits[(c/64)%(WindowSize/64)] |= 1 << (c % 64)
}
