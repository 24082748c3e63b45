package main

import (
	"encoding/json"
	"fmt"
	"io"
)

func (r *report) writeJSON(w io.Writer) error {
	return json.NewEncoder(w).Encode(r)
}

// writeTable prints the report as a markdown table.
func (r *report) writeTable(w io.Writer) {
	fmt.Fprintf(w, "| measure | value |\n|---|---|\n")
	row := func(name, format string, a ...any) {
		fmt.Fprintf(w, "| %s | %s |\n", name, fmt.Sprintf(format, a...))
	}
	row("connected QP pairs", "%d (send queue depth %d)", r.QPs, r.SQDepth)
	row("memory per QP (Go heap)", "%.0f bytes", r.QPHeapBytes)
	row("memory per QP (RSS)", "%.0f bytes", r.QPRSSBytes)
	row("QP pairs created and connected", "%.0f /s", r.QPRate)
	if r.MRs > 0 {
		mrs := fmt.Sprintf("%d of %d bytes", r.MRs, r.MRSize)
		if r.MRs < r.MRsAsked {
			mrs += fmt.Sprintf(" (%d asked; max_mr is %d)", r.MRsAsked, r.MaxMR)
		}
		row("memory regions", "%s", mrs)
		row("memory per MR (Go heap)", "%.0f bytes", r.MRHeapBytes)
		row("memory per MR (RSS)", "%.0f bytes", r.MRRSSBytes)
		row("registration rate", "%.0f MRs/s", r.RegRate)
		row("deregistration rate", "%.0f MRs/s", r.DeregRate)
	}
	if r.Active > 0 {
		row("WRITE throughput, 1 QP", "%.1f MB/s (%d-byte WRITEs, %d outstanding)", r.OneQPMBps, r.Size, r.Window)
		row(fmt.Sprintf("WRITE throughput, %d QPs", r.Active), "%.1f MB/s (%d QPs carried traffic)", r.ManyQPMBps, r.ActiveTouched)
		row(fmt.Sprintf("%d QPs / 1 QP", r.Active), "%.2f", r.ManyQPRatio)
		row("losses, 1 QP run", "%d retransmission timeouts, %d UDP receive buffer drops", r.OneQPTimeouts, r.OneQPRcvbufErrors)
		row(fmt.Sprintf("losses, %d QP run", r.Active), "%d retransmission timeouts, %d UDP receive buffer drops", r.ManyQPTimeouts, r.ManyQPRcvbufErrors)
	}
	row("GOMAXPROCS", "%d", r.GoMaxProcs)
}
