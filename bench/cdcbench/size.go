package main

import (
	"unsafe"

	"github.com/outbox-exporter/outbox_exporter/collectors/cdc"
)

// sizeofState is one SlotState, kept per slot for the last collection.
const sizeofState = unsafe.Sizeof(cdc.SlotState{})
