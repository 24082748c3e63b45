//go:build linux && cgo && goroce_ibverbs

package verbs

import "github.com/goroce/goroce/internal/ibverbs"

// hardwareDevices is HardwareDevices on libibverbs.
func hardwareDevices() ([]string, error) {
	names, err := ibverbs.Devices()
	if err != nil {
		return nil, hwError("HardwareDevices", err)
	}
	return names, nil
}
