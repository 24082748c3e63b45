package main

import (
	"time"

	"github.com/goroce/goroce/verbs"
)

// regResult is the cost of registering and deregistering a region.
type regResult struct {
	Test     string  `json:"test"` // reg_mr
	Size     int     `json:"size"` // bytes per region
	Iters    int     `json:"iters"`
	USPerReg float64 `json:"us_per_reg"` // one RegMR + Dereg
	USPerMiB float64 `json:"us_per_mib"`
}

// registrationCost registers and deregisters a buffer of size bytes on pd
// until budget has passed (at least 3 and at most maxIters times), and
// returns the time per RegMR+Dereg pair and per MiB. The buffer is
// allocated once, outside the timing: the cost is the device's, not the
// allocator's.
func registrationCost(pd *verbs.PD, size int, budget time.Duration, maxIters int) (regResult, error) {
	buf := make([]byte, size)
	iters := 0
	start := time.Now()
	for iters < maxIters && (iters < 3 || time.Since(start) < budget) {
		mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
		if err != nil {
			return regResult{}, err
		}
		if err := mr.Dereg(); err != nil {
			return regResult{}, err
		}
		iters++
	}
	perReg := float64(time.Since(start)) / float64(time.Microsecond) / float64(iters)
	return regResult{
		Test:     "reg_mr",
		Size:     size,
		Iters:    iters,
		USPerReg: perReg,
		USPerMiB: perReg / (float64(size) / (1 << 20)),
	}, nil
}
