package observe

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"

	"golang.org/x/sys/unix"
)

// ShareWatch's decoding of fanotify's event records: the fixed header, then the info records (a
// directory's or an entry's file handle with its name, the process's pidfd).

// rawEvent is one event's fields, decoded.
type rawEvent struct {
	mask           uint64
	pid            int
	pidfd          int32
	fsid           [2]int32
	dirKey, name   string // the directory (key of its handle) and the entry's name
	oldKey, old    string // a rename's old directory and name
	target         string // the entry's own handle key (directories only matter)
	dirFH, oldFH   fh
	hasDir, hasOld bool
}

// fh is a file handle as the event carries it (bytes point into the read buffer: used before the next
// read only).
type fh struct {
	typ   int32
	bytes []byte
}

// decodeEvent reads an event's metadata and information records. It reads every record whatever it
// finds wrong in one, so that the pidfd the kernel installed is always known (and closed).
func decodeEvent(b []byte) (rawEvent, error) {
	ev := rawEvent{mask: binary.NativeEndian.Uint64(b[8:]), pid: int(int32(binary.NativeEndian.Uint32(b[20:]))), pidfd: -1}
	meta := int(binary.NativeEndian.Uint16(b[6:]))
	if meta < unix.FAN_EVENT_METADATA_LEN || meta > len(b) {
		return ev, errMalformed
	}
	var first error
	for r := b[meta:]; len(r) >= 4; {
		typ, n := r[0], int(binary.NativeEndian.Uint16(r[2:]))
		if n < 4 || n > len(r) {
			return ev, errMalformed
		}
		rec := r[4:n]
		r = r[n:]
		if typ == unix.FAN_EVENT_INFO_TYPE_PIDFD {
			if len(rec) >= 4 {
				ev.pidfd = int32(binary.NativeEndian.Uint32(rec))
			}
			continue
		}
		h, name, fsid, key, err := decodeFid(rec)
		if err != nil {
			first = cmp.Or(first, err)
			continue
		}
		switch typ {
		case unix.FAN_EVENT_INFO_TYPE_DFID_NAME, unix.FAN_EVENT_INFO_TYPE_DFID, unix.FAN_EVENT_INFO_TYPE_NEW_DFID_NAME:
			ev.fsid, ev.dirFH, ev.dirKey, ev.name, ev.hasDir = fsid, h, key, name, true
		case unix.FAN_EVENT_INFO_TYPE_OLD_DFID_NAME:
			ev.oldFH, ev.oldKey, ev.old, ev.hasOld = h, key, name, true
		case unix.FAN_EVENT_INFO_TYPE_FID:
			ev.target = key
		}
	}
	switch {
	case first != nil:
		return ev, first
	case ev.mask&(unix.FAN_CREATE|unix.FAN_DELETE|unix.FAN_RENAME) != 0 && !ev.hasDir,
		ev.mask&unix.FAN_RENAME != 0 && !ev.hasOld:
		return ev, errors.New("a file event without its directory")
	}
	return ev, nil
}

var errMalformed = errors.New("a malformed file event")

// decodeFid reads a fid record after its header: fsid, file_handle, and the name that may follow. key
// is the fsid and handle as they came, which names the object.
func decodeFid(rec []byte) (h fh, name string, fsid [2]int32, key string, err error) {
	if len(rec) < 16 {
		return fh{}, "", fsid, "", errMalformed
	}
	fsid[0], fsid[1] = int32(binary.NativeEndian.Uint32(rec)), int32(binary.NativeEndian.Uint32(rec[4:]))
	hb := int(binary.NativeEndian.Uint32(rec[8:]))
	if hb > len(rec)-16 || hb > maxHandleBytes {
		return fh{}, "", fsid, "", errMalformed
	}
	h = fh{typ: int32(binary.NativeEndian.Uint32(rec[12:])), bytes: rec[16 : 16+hb : 16+hb]}
	n := rec[16+hb:]
	if i := bytes.IndexByte(n, 0); i >= 0 {
		n = n[:i]
	}
	if len(n) > maxNameBytes {
		return fh{}, "", fsid, "", errMalformed
	}
	return h, string(n), fsid, string(rec[:16+hb]), nil
}
