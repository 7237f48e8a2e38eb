package explorer

// The JSON API of KV bindings: scan, get, put, delete (docs/HTTP.md).

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/localcloud/localcloud/bindings/kv"
)

// keyJSON is one key of a scan page.
type keyJSON struct {
	Key  string `json:"key"`
	Size int    `json:"size"`
	// Preview is the value's first characters as text (Go-quoted escapes
	// for control bytes), or "0x" and its first bytes in hex when the value
	// is not UTF-8; "…" ends a cut one.
	Preview string `json:"preview"`
	// ExpiresAt is when the key expires (unix ms) and TTLMillis the time
	// left at the read; both 0 for a key without a TTL.
	ExpiresAt int64 `json:"expiresAt,omitempty"`
	TTLMillis int64 `json:"ttlMillis,omitempty"`
}

// previewRunes and previewBytes bound keyJSON.Preview.
const (
	previewRunes = 60
	previewBytes = 16
)

// toKeyJSON describes one scanned key at now.
func toKeyJSON(it kv.Item, now time.Time) keyJSON {
	k := keyJSON{Key: it.Key, Size: len(it.Value), Preview: valuePreview(it.Value)}
	if !it.ExpiresAt.IsZero() {
		k.ExpiresAt = it.ExpiresAt.UnixMilli()
		k.TTLMillis = max(it.ExpiresAt.Sub(now).Milliseconds(), 1)
	}
	return k
}

// valuePreview is keyJSON.Preview of v.
func valuePreview(v []byte) string {
	if !utf8.Valid(v) {
		n := min(len(v), previewBytes)
		s := "0x" + hex.EncodeToString(v[:n])
		if n < len(v) {
			s += "…"
		}
		return s
	}
	var b strings.Builder
	n := 0
	for _, r := range string(v) {
		if n == previewRunes {
			b.WriteString("…")
			break
		}
		if unicode.IsPrint(r) || r == ' ' {
			b.WriteRune(r)
		} else {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		n++
	}
	return b.String()
}

func (s *Server) apiScan(w http.ResponseWriter, r *http.Request) {
	k, release, err := s.openKV(r.Context(), r.PathValue("name"))
	if err != nil {
		writeErr(w, err)
		return
	}
	defer release()
	limit, err := intParam(r, "limit", DefaultPageSize, 1, kv.MaxScanLimit)
	if err != nil {
		writeErr(w, err)
		return
	}
	prefix, cursor := r.URL.Query().Get("prefix"), r.URL.Query().Get("cursor")
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	page, err := scan(ctx, k, prefix, limit, cursor)
	if err != nil {
		writeErr(w, err)
		return
	}
	keys := make([]keyJSON, 0, len(page.Items))
	now := s.opts.Now()
	for _, it := range page.Items {
		keys = append(keys, toKeyJSON(it, now))
	}
	writeJSON(w, http.StatusOK, map[string]any{"binding": r.PathValue("name"), "prefix": prefix, "keys": keys, "nextCursor": page.NextCursor})
}

// valueJSON is one key's value in every view.
type valueJSON struct {
	Key  string `json:"key"`
	Size int    `json:"size"`
	// ExpiresAt is unix ms; 0 without a TTL. TTLMillis is what is left.
	ExpiresAt int64 `json:"expiresAt"`
	TTLMillis int64 `json:"ttlMillis"`
	// Text is the value when it is UTF-8 text; JSON when it is JSON,
	// indented; Hex always; Base64 always.
	Text   *string `json:"text,omitempty"`
	JSON   string  `json:"json,omitempty"`
	Hex    string  `json:"hex"`
	Base64 string  `json:"base64"`
}

func toValueJSON(key string, e kv.Entry, now time.Time) valueJSON {
	v := valueJSON{Key: key, Size: len(e.Value), Hex: hexDump(e.Value), Base64: b64(e.Value)}
	if !e.ExpiresAt.IsZero() {
		v.ExpiresAt = e.ExpiresAt.UnixMilli()
		v.TTLMillis = max(0, e.ExpiresAt.Sub(now).Milliseconds())
	}
	if utf8.Valid(e.Value) {
		t := string(e.Value)
		v.Text = &t
		if json.Valid(e.Value) && len(strings.TrimSpace(t)) > 0 {
			v.JSON = prettyJSON(t)
		}
	}
	return v
}

func (s *Server) apiGet(w http.ResponseWriter, r *http.Request) {
	k, release, err := s.openKV(r.Context(), r.PathValue("name"))
	if err != nil {
		writeErr(w, err)
		return
	}
	defer release()
	key := r.URL.Query().Get("key")
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	e, ok, err := k.Lookup(ctx, key)
	if err != nil {
		writeErr(w, err)
		return
	}
	if !ok {
		writeErr(w, notFound("key: %s is not in %s (or has expired)", quoteTrunc(key), r.PathValue("name")))
		return
	}
	writeJSON(w, http.StatusOK, toValueJSON(key, e, s.opts.Now()))
}

type putRequest struct {
	Key   string `json:"key"`
	Value string `json:"value"`
	// Encoding of Value: "text" (default), "hex" or "base64".
	Encoding string `json:"encoding"`
	// TTL is a Go duration ("1h"); "" keeps the key forever.
	TTL         string `json:"ttl"`
	IfNotExists bool   `json:"ifNotExists"`
}

// maxTTL bounds a TTL typed into the explorer: ten years.
const maxTTL = 10 * 365 * 24 * time.Hour

func (s *Server) apiPut(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	k, release, err := s.openKV(r.Context(), name)
	if err != nil {
		writeErr(w, err)
		return
	}
	defer release()
	var req putRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	val, err := decodeValue(req.Encoding, req.Value)
	if err != nil {
		writeErr(w, err)
		return
	}
	ttl, err := parseDuration("ttl", req.TTL, maxTTL)
	if err != nil {
		writeErr(w, err)
		return
	}
	var opts []kv.PutOption
	if ttl > 0 {
		opts = append(opts, kv.WithTTL(ttl))
	}
	if req.IfNotExists {
		opts = append(opts, kv.IfNotExists())
	}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	defer s.feed.begin(name)()
	written, err := k.Put(ctx, req.Key, val, opts...)
	if err != nil {
		writeErr(w, err)
		return
	}
	if written {
		s.feed.action(name, "put", fmt.Sprintf("put %s (%d bytes) from the explorer", req.Key, len(val)))
	}
	writeJSON(w, http.StatusOK, map[string]any{"written": written})
}

type deleteRequest struct {
	Key string `json:"key"`
}

func (s *Server) apiDelete(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	k, release, err := s.openKV(r.Context(), name)
	if err != nil {
		writeErr(w, err)
		return
	}
	defer release()
	var req deleteRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	defer s.feed.begin(name)()
	if err := k.Delete(ctx, req.Key); err != nil {
		writeErr(w, err)
		return
	}
	s.feed.action(name, "delete", fmt.Sprintf("deleted %s from the explorer", req.Key))
	writeJSON(w, http.StatusOK, map[string]any{"deleted": true})
}
