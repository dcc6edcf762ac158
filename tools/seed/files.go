package seed

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// fileWriters is the number of goroutines creating data files. Creating a file is a few
// system calls that mostly wait on the file system; a few at once fill a small machine's
// cores while the generator builds the next blocks.
const fileWriters = 4

// fileWriter creates data files in the background; the first error is kept and returned by
// every later write and by close.
type fileWriter struct {
	paths chan string
	wg    sync.WaitGroup
	once  sync.Once

	mu   sync.Mutex
	err  error
	dirs map[string]bool // directories known to exist
}

func newFileWriter(n int) *fileWriter {
	w := &fileWriter{paths: make(chan string, 1024), dirs: map[string]bool{}}
	for range n {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for p := range w.paths {
				if w.failed() != nil {
					continue
				}
				if err := w.create(p); err != nil {
					w.mu.Lock()
					if w.err == nil {
						w.err = err
					}
					w.mu.Unlock()
				}
			}
		}()
	}
	return w
}

func (w *fileWriter) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *fileWriter) write(path string) error {
	if err := w.failed(); err != nil {
		return err
	}
	w.paths <- path
	return nil
}

// close waits for every queued file; it may be called more than once.
func (w *fileWriter) close() error {
	w.once.Do(func() { close(w.paths) })
	w.wg.Wait()
	return w.failed()
}

func (w *fileWriter) create(path string) error {
	dir := filepath.Dir(path)
	w.mu.Lock()
	known := w.dirs[dir]
	w.mu.Unlock()
	if !known {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
		w.mu.Lock()
		w.dirs[dir] = true
		w.mu.Unlock()
	}
	if err := os.WriteFile(path, []byte("kv"), 0o644); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	return nil
}
