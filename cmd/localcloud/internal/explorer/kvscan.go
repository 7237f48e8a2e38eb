package explorer

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/localcloud/localcloud/bindings/kv"
)

// keyFirstBytes are the bytes a key may start with, in byte order: a scan
// of every key is a scan of each of them in turn, since kv.Scan needs a
// non-empty prefix.
const keyFirstBytes = "-.0123456789:ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"

// allCursorPrefix starts the cursor of a scan of every key:
// "all1.<index into keyFirstBytes>.<kv cursor within that prefix>".
const allCursorPrefix = "all1."

// scan returns a page of the live keys with prefix; an empty prefix lists
// every key. The cursor is kv.Scan's for a prefix, the explorer's own for
// every key.
func scan(ctx context.Context, k *kv.Store, prefix string, limit int, cursor string) (kv.Page, error) {
	if prefix != "" {
		return k.Scan(ctx, prefix, limit, cursor)
	}
	idx, sub := 0, ""
	if cursor != "" {
		rest, ok := strings.CutPrefix(cursor, allCursorPrefix)
		i, c, ok2 := strings.Cut(rest, ".")
		n, err := strconv.Atoi(i)
		if !ok || !ok2 || err != nil || n < 0 || n >= len(keyFirstBytes) || strconv.Itoa(n) != i {
			return kv.Page{}, badRequest("cursor: not a cursor returned for the empty prefix, got %s", quoteTrunc(cursor))
		}
		idx, sub = n, c
	}
	var out kv.Page
	for ; idx < len(keyFirstBytes); idx, sub = idx+1, "" {
		p, err := k.Scan(ctx, keyFirstBytes[idx:idx+1], limit-len(out.Items), sub)
		if err != nil {
			return kv.Page{}, err
		}
		out.Items = append(out.Items, p.Items...)
		if p.NextCursor != "" {
			out.NextCursor = allCursorPrefix + strconv.Itoa(idx) + "." + p.NextCursor
			return out, nil
		}
		if len(out.Items) == limit {
			// Full at the end of a prefix: the next page starts at the
			// next prefix that holds a key, if any.
			for j := idx + 1; j < len(keyFirstBytes); j++ {
				p, err := k.Scan(ctx, keyFirstBytes[j:j+1], 1, "")
				if err != nil {
					return kv.Page{}, err
				}
				if len(p.Items) > 0 {
					out.NextCursor = allCursorPrefix + strconv.Itoa(j) + "."
					break
				}
			}
			return out, nil
		}
	}
	return out, nil
}

// decodeValue turns a put's value into bytes.
func decodeValue(encoding, v string) ([]byte, error) {
	switch encoding {
	case "", "text":
		return []byte(v), nil
	case "hex":
		b, err := hex.DecodeString(strings.Join(strings.Fields(v), ""))
		if err != nil {
			return nil, badRequest("value: encoding hex but not hex digits: %v", err)
		}
		return b, nil
	case "base64":
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
		if err != nil {
			return nil, badRequest("value: encoding base64 but not standard base64: %v", err)
		}
		return b, nil
	}
	return nil, badRequest("encoding: must be text, hex or base64, got %s", quoteTrunc(encoding))
}

// hexDump is b as rows of 16 bytes: offset, hex, printable ASCII.
func hexDump(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return strings.TrimRight(hex.Dump(b), "\n")
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
