package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
)

// checkEach runs check on every entry of m in name order and prints its
// report, or "KIND NAME: FAIL err" when it could not run. It reports
// whether every check ran and passed.
func checkEach[V any](w io.Writer, kind string, m map[string]V, check func(name string, v V) (text string, ok bool, err error)) bool {
	ok := true
	for _, name := range slices.Sorted(maps.Keys(m)) {
		text, passed, err := check(name, m[name])
		if err != nil {
			fmt.Fprintf(w, "%s %s: FAIL %v\n", kind, name, err)
			ok = false
			continue
		}
		fmt.Fprint(w, text)
		ok = ok && passed
	}
	return ok
}
