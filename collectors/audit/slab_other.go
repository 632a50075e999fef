//go:build !unix

package audit

func allocSlab(n int) []byte { return make([]byte, n) }

func freeSlab([]byte) {}
