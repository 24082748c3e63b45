//go:build !(linux && cgo && goroce_ibverbs)

package verbs

import "context"

// openHardware is OpenHardware in a build without the libibverbs backend.
func openHardware(string) (*Device, error) { return nil, errNoBackend("OpenHardware") }

// hardwareDevices is HardwareDevices in a build without the backend.
func hardwareDevices() ([]string, error) { return nil, errNoBackend("HardwareDevices") }

// AllocBuffer returns n bytes of memory for registered buffers. Without
// the hardware backend it is an ordinary Go slice: goroce devices copy in
// and out of registered memory under their own locks and need no pinning.
func AllocBuffer(n int) ([]byte, error) {
	if n <= 0 {
		return nil, errorf("AllocBuffer", "length", ErrInvalidArgument, "%d", n)
	}
	return make([]byte, n), nil
}

// FreeBuffer releases a buffer from AllocBuffer; it must no longer be
// registered.
func FreeBuffer([]byte) error { return nil }

// The data path's hardware calls (see hw.go). Without the backend no
// object has hardware, so nothing calls them; they report as OpenHardware
// does.

func hwPoll(*CQ, []WorkCompletion) (int, error) { return 0, errNoBackend("PollCQ") }

func hwPark(*CQ, context.Context, []WorkCompletion) (int, error) { return 0, errNoBackend("WaitCQ") }

func hwPostSend(*QP, []SendWR) (int, error) { return 0, errNoBackend("PostSend") }

func hwPostRecv(*QP, []RecvWR) (int, error) { return 0, errNoBackend("PostRecv") }

func hwPostSRQRecv(*SRQ, []RecvWR) (int, error) { return 0, errNoBackend("PostSRQRecv") }

func hwModify(*QP, *QPAttr, QPAttrMask) error { return errNoBackend("ModifyQP") }

func errNoBackend(op string) error {
	return newError(op, "", ErrNotSupported,
		"built without the hardware backend: build with cgo and -tags goroce_ibverbs on Linux")
}
