package measure

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// ProcStatus returns a "kB" field of /proc/self/status in bytes (0 where
// there is no /proc), e.g. ProcStatus("VmRSS") or ProcStatus("VmHWM").
func ProcStatus(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), field+":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}
