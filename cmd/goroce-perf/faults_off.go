//go:build !goroce_faults

package main

import (
	"flag"

	"github.com/goroce/goroce/verbs"
)

// defineFaultFlags defines nothing: fault injection (--drop) exists only in
// binaries built with the goroce_faults tag.
func defineFaultFlags(*flag.FlagSet) {}

// openDevice opens the device.
func openDevice(dc verbs.DeviceConfig) (*verbs.Device, error) { return verbs.Open(dc) }
