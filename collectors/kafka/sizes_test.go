package kafka

import (
	"reflect"
	"testing"
	"unsafe"

	dto "github.com/prometheus/client_model/go"
)

// TestRetainedSizes pins the size of what the collector keeps per group
// and per cached offset between collections, and of what it makes per
// partition in each collection: at 10,000 groups a field more in one of
// them is megabytes, and a pointer in committed makes the garbage
// collector scan 240,000 of them per scrape.
func TestRetainedSizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"probeKey (the probe cache's map key)", unsafe.Sizeof(probeKey{}), 16},
		{"cachedProbe (one per distinct cached offset)", unsafe.Sizeof(cachedProbe{}), 56},
		{"gauge (one per exported series)", unsafe.Sizeof(gauge{}), 72},
		{"labelSet (one per label set)", unsafe.Sizeof(labelSet{}), 64},
		{"committed (one per partition of each group, each scrape)", unsafe.Sizeof(committed{}), 16},
		{"partPlan (one per partition of each group, each scrape)", unsafe.Sizeof(partPlan{}), 64},
		{"pair (one per label pair in use)", unsafe.Sizeof(pair{}), 96},
		{"sharePart (one per partition of each share group, each scrape)", unsafe.Sizeof(sharePart{}), 80},
	} {
		if c.got > c.want {
			t.Errorf("%s is %d bytes, want at most %d", c.name, c.got, c.want)
		}
	}
	if hasPointers(reflect.TypeFor[committed]()) {
		t.Error("committed holds a pointer: every group's commits become memory the garbage collector scans")
	}
	if hasPointers(reflect.TypeFor[sharePart]()) {
		t.Error("sharePart holds a pointer: every share group's partitions become memory the garbage collector scans")
	}
	// The gauge's dto.Gauge is protobuf's; if it grows, the bound above
	// is the one to revisit, not a field of ours.
	if s := unsafe.Sizeof(dto.Gauge{}); s != 48 {
		t.Logf("dto.Gauge is %d bytes (48 when gauge's bound was set)", s)
	}
}

// hasPointers reports whether values of t hold a pointer.
func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Slice, reflect.Map, reflect.String, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return true
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
	case reflect.Array:
		return t.Len() > 0 && hasPointers(t.Elem())
	}
	return false
}
