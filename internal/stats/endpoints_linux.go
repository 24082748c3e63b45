package stats

import (
	"os"
	"strconv"
	"strings"

	"github.com/goroce/goroce/verbs"
)

// Endpoints lists the counters endpoints of the goroce devices open on
// this machine (in this network namespace). Each device listens on an
// abstract Unix socket whose name begins with verbs.StatsSocketPrefix;
// Linux lists the listening ones in /proc/net/unix.
func Endpoints() ([]string, error) {
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return nil, err
	}
	return parseProcNetUnix(string(b)), nil
}

// parseProcNetUnix returns the goroce endpoints of a /proc/net/unix table,
// each once, in the table's order.
func parseProcNetUnix(table string) []string {
	var names []string
	seen := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		// Num RefCount Protocol Flags Type St Inode Path: listening
		// sockets have the __SO_ACCEPTCON flag (0x10000) set.
		if len(f) < 8 || !strings.HasPrefix(f[7], verbs.StatsSocketPrefix) {
			continue
		}
		if flags, err := strconv.ParseUint(f[3], 16, 32); err != nil || flags&0x10000 == 0 {
			continue
		}
		if !seen[f[7]] {
			seen[f[7]] = true
			names = append(names, f[7])
		}
	}
	return names
}
