package explorer

import (
	"crypto/subtle"
	"net/http"
	"net/url"
	"strings"
)

// The names of the security rules' parts.
const (
	// CSRFHeader carries the CSRF token on API calls.
	CSRFHeader = "X-CSRF-Token"
	// csrfField carries it in a form (the login page).
	csrfField = "csrf"
	// SessionCookie is the cookie set once the notify.token was given.
	SessionCookie = "localcloud_explorer"
)

// guard applies the security rules before any handler runs:
//  1. the Host header must be the listen address or localhost on its port
//     (a DNS-rebinding page has its own host name);
//  2. with a token, every request needs the session cookie or
//     "Authorization: Bearer <token>" (the login page aside);
//  3. every method but GET and HEAD must be a POST from the same origin with
//     the CSRF token;
//  4. with ReadOnly, every POST but the login is refused.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Referrer-Policy", "same-origin")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
		if !s.hosts[strings.ToLower(r.Host)] {
			s.deny(w, r, http.StatusForbidden, "host: "+quoteTrunc(r.Host)+" is not the explorer's listen address or localhost (a request through another host name is refused against DNS rebinding)")
			return
		}
		login := r.URL.Path == "/login"
		switch r.Method {
		case http.MethodGet, http.MethodHead:
		case http.MethodPost:
			if msg := s.sameOrigin(r); msg != "" {
				s.deny(w, r, http.StatusForbidden, msg)
				return
			}
			if !s.validCSRF(r) {
				s.deny(w, r, http.StatusForbidden, "csrf: missing or wrong "+CSRFHeader+" (GET /api/session gives the token; pages send it)")
				return
			}
		default:
			w.Header().Set("Allow", "GET, HEAD, POST")
			s.deny(w, r, http.StatusMethodNotAllowed, "method: "+r.Method+" is not allowed; changes are POSTs")
			return
		}
		if !login && !s.authorized(r) {
			if isAPI(r) || r.Method != http.MethodGet {
				s.deny(w, r, http.StatusUnauthorized, "token: this stack sets notify.token; log in at /login or send Authorization: Bearer <token>")
				return
			}
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if s.opts.ReadOnly && r.Method == http.MethodPost && !login {
			s.deny(w, r, http.StatusForbidden, "readOnly: the stack sets explorer.readOnly: true, so the explorer changes nothing")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func isAPI(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/api/") }

// sameOrigin checks that a POST comes from one of the explorer's own pages:
// its Origin header (which browsers send on every POST) must be the
// explorer; without one, Sec-Fetch-Site must say same-origin (or none, for
// a request the user typed); a client that sends neither (curl, a script)
// still needs the CSRF token.
func (s *Server) sameOrigin(r *http.Request) string {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Scheme != "http" || !s.hosts[strings.ToLower(u.Host)] {
			return "origin: " + quoteTrunc(o) + " is not the explorer; changes are accepted from its own pages only"
		}
		return ""
	}
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
		return ""
	default:
		return "origin: Sec-Fetch-Site is " + quoteTrunc(site) + "; changes are accepted from the explorer's own pages only"
	}
}

func (s *Server) validCSRF(r *http.Request) bool {
	tok := r.Header.Get(CSRFHeader)
	if tok == "" && r.URL.Path == "/login" {
		tok = r.PostFormValue(csrfField)
	}
	return tok != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.csrf)) == 1
}

// authorized reports whether r may see the explorer: always without a
// token; with one, by the session cookie or a bearer token.
func (s *Server) authorized(r *http.Request) bool {
	if s.opts.Token == "" {
		return true
	}
	if c, err := r.Cookie(SessionCookie); err == nil && subtle.ConstantTimeCompare([]byte(c.Value), []byte(s.sessID)) == 1 {
		return true
	}
	if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return subtle.ConstantTimeCompare([]byte(b), []byte(s.opts.Token)) == 1
	}
	return false
}

// deny answers a refused request: JSON for the API, a plain page
// otherwise.
func (s *Server) deny(w http.ResponseWriter, r *http.Request, code int, msg string) {
	s.log.Info("explorer refused a request", "method", r.Method, "path", r.URL.Path, "status", code, "reason", msg)
	if isAPI(r) || r.Method == http.MethodPost {
		writeJSON(w, code, apiError{Error: msg})
		return
	}
	http.Error(w, msg, code)
}

func quoteTrunc(s string) string {
	if len(s) > 100 {
		s = s[:100] + "..."
	}
	return "\"" + strings.ReplaceAll(s, "\"", "'") + "\""
}
