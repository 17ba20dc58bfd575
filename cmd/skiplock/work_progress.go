package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
)

// progressFD is the file descriptor an --exec child reports progress on
// ($SKIPLOCK_PROGRESS_FD): the first of exec.Cmd.ExtraFiles.
const progressFD = 3

// progressPipe carries an --exec child's progress lines, "DONE [TOTAL
// [NOTE]]", to skiplock.SetProgress (which coalesces them).
type progressPipe struct {
	r, w *os.File
	done chan struct{} // closed when the reader has ended
}

func startProgressPipe(c *exec.Cmd) (*progressPipe, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	c.ExtraFiles = append(c.ExtraFiles, w)
	c.Env = append(c.Env, "SKIPLOCK_PROGRESS_FD="+strconv.Itoa(progressFD))
	return &progressPipe{r: r, w: w, done: make(chan struct{})}, nil
}

// started closes our copy of the write end and reads the child's lines
// until every holder of the write end has closed it (or drain).
func (p *progressPipe) started(ctx context.Context) {
	_ = p.w.Close()
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(p.r)
		sc.Buffer(make([]byte, 0, 1024), 4096)
		for sc.Scan() {
			if done, total, note, ok := parseProgress(sc.Text()); ok {
				_ = skiplock.SetProgress(ctx, done, total, note)
			}
		}
	}()
}

// drain waits up to d for the child's last lines, then closes the pipe.
func (p *progressPipe) drain(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
	}
	_ = p.r.Close()
	<-p.done
}

func (p *progressPipe) close() {
	_ = p.r.Close()
	_ = p.w.Close()
}

// parseProgress reads one progress line: DONE, then optionally TOTAL and
// a NOTE (the rest of the line). A line that does not start with a
// non-negative integer is ignored.
func parseProgress(line string) (done, total int64, note string, ok bool) {
	f := strings.SplitN(strings.TrimSpace(line), " ", 3)
	done, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || done < 0 {
		return 0, 0, "", false
	}
	if len(f) > 1 {
		if total, err = strconv.ParseInt(f[1], 10, 64); err != nil || total < 0 {
			return 0, 0, "", false
		}
	}
	if len(f) > 2 {
		note = strings.TrimSpace(f[2])
	}
	return done, total, note, true
}
