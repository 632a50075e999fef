//go:build unix

package audit

import "syscall"

// allocSlab returns n zeroed bytes outside the Go heap. The sealed window
// buckets live there: they are most of the audit's memory and live for a
// whole window, and on the Go heap they would let the garbage collector's
// target (twice the live heap by default) double the resident size.
func allocSlab(n int) []byte {
	if n == 0 {
		return nil
	}
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]byte, n)
	}
	return b[:n:n]
}

// freeSlab releases a slab from allocSlab. Nothing may use it afterwards.
func freeSlab(b []byte) {
	if cap(b) == 0 {
		return
	}
	// A slab that fell back to make is not a mapping; munmap fails on it
	// with EINVAL and the garbage collector frees it instead.
	_ = syscall.Munmap(b[:cap(b)])
}
