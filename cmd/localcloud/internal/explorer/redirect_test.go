package explorer

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// openRedirects is the usual open-redirect corpus: ways to write another
// host, or a scheme, that a check for "starts with /" lets through, raw
// and percent-encoded, with backslashes (slashes to browsers) and control
// characters (dropped by browsers).
var openRedirects = []string{
	"//evil.example/", "///evil.example/x", "////evil.example", "/\\evil.example", "\\\\evil.example", "/\\/evil.example",
	"/./\\evil.example/x", "/.//evil.example", "/./../\\evil.example", "/..//evil.example", "/a/../..//evil.example",
	"/%2F/evil.example", "/%2f%2fevil.example", "/%2F%2Fevil.example/x", "/.%2F%2Fevil.example",
	"/%5Cevil.example", "/%5cevil.example", "/%5C%5Cevil.example", "/.%5C%5Cevil.example", "/%2e/%5Cevil.example",
	"/%252F%252Fevil.example", "/%255Cevil.example",
	"http://evil.example", "https://evil.example/", "http:evil.example", "http:/evil.example", "HTTP://evil.example",
	"//evil.example@explorer/", "/\\evil.example@127.0.0.1", "javascript:alert(1)", "data:text/html,<script>x</script>",
	"/\t/evil.example", "/\n/evil.example", "/\r\n/evil.example", "/\x00/evil.example", "/\x7f/evil.example",
	"/%09/evil.example", "/%0a/evil.example", "/%0d%0a/evil.example", "/%00/evil.example",
	" //evil.example", "\t//evil.example", "evil.example", "", "?next=//evil.example", "#//evil.example",
	"/" + strings.Repeat("a", maxNext),
}

// sameOriginPath fails unless loc, from the Location header of base's
// response, leads to base's own host however a browser reads it.
func sameOriginPath(t *testing.T, base *url.URL, next, loc string) {
	t.Helper()
	if !strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "//") || strings.ContainsAny(loc, "\\\t\r\n\x00") {
		t.Errorf("next=%q: Location %q is not a plain path", next, loc)
		return
	}
	for _, l := range []string{loc, strings.ReplaceAll(loc, "\\", "/")} {
		u, err := url.Parse(l)
		if err != nil {
			t.Errorf("next=%q: Location %q does not parse: %v", next, loc, err)
			return
		}
		if r := base.ResolveReference(u); r.Host != base.Host || r.Scheme != base.Scheme {
			t.Errorf("next=%q: Location %q leads to %s", next, loc, r)
		}
		if dec, err := url.PathUnescape(u.Path); err != nil || strings.HasPrefix(dec, "//") || strings.HasPrefix(dec, "/\\") {
			t.Errorf("next=%q: Location %q decodes to %q", next, loc, dec)
		}
	}
}

// TestLoginNextRefusesOpenRedirects: POST /login with every entry of the
// corpus as next answers with a Location on the explorer itself; the login
// page (GET) carries only a checked next into its form.
func TestLoginNextRefusesOpenRedirects(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *Options) { o.Token = "s3cret" })
	base, err := url.Parse(e.ts.URL + "/login")
	if err != nil {
		t.Fatal(err)
	}
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded", CSRFHeader: ""}
	for _, next := range openRedirects {
		res, _ := e.do(http.MethodPost, "/login", "csrf="+e.srv.csrf+"&token=s3cret&next="+url.QueryEscape(next), form)
		if res.StatusCode != http.StatusSeeOther {
			t.Errorf("next=%q: login answered %d", next, res.StatusCode)
			continue
		}
		sameOriginPath(t, base, next, res.Header.Get("Location"))

		res, page := e.do(http.MethodGet, "/login?next="+url.QueryEscape(next), "", nil)
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET /login?next=%q: %d", next, res.StatusCode)
			continue
		}
		if want := `name="next" value="` + templateAttr(safeNext(next)) + `"`; !strings.Contains(page, want) {
			t.Errorf("GET /login?next=%q: the form does not carry %s", next, want)
		}
	}
	// Paths on the explorer survive, query and all, cleaned.
	for next, want := range map[string]string{
		"/queues/jobs":               "/queues/jobs",
		"/kv/carts?prefix=a%3Ab&x=1": "/kv/carts?prefix=a%3Ab&x=1",
		"/queues/jobs/":              "/queues/jobs/",
		"/queues/./jobs":             "/queues/jobs",
		"/queues/x/../jobs#frag":     "/queues/jobs",
		"/a%20b":                     "/a%20b",
		"/..//evil.example":          "/evil.example",
		"/%2F%2Fevil.example/x":      "/evil.example/x",
		"/kv/carts?next=//evil.ex":   "/kv/carts?next=//evil.ex",
	} {
		if got := safeNext(next); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", next, got, want)
		}
	}
}

// templateAttr is s as html/template writes it into an attribute value.
func templateAttr(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;", "+", "&#43;").Replace(s)
}
