package cm

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/goroce/goroce/verbs"
)

// hwOption is one of an ID's options that librdmacm sets on an ID of a
// kernel RDMA device (hw_id.go).
type hwOption int

const (
	hwOptionTOS hwOption = iota
	hwOptionReuseAddr
	hwOptionAFOnly
	hwOptionAckTimeout
)

// hwStateErr makes librdmacm's EINVAL, a call the ID's state does not
// allow, match verbs.ErrInvalidState too.
func hwStateErr(err error) error {
	if errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("%w (%w)", err, verbs.ErrInvalidState)
	}
	return err
}
