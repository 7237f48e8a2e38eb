package explorer

import (
	"context"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
)

//go:embed assets
var assets embed.FS

var staticFS, _ = fs.Sub(assets, "assets/static")

var funcs = template.FuncMap{
	"clock": func(ms int64) string {
		if ms == 0 {
			return "-"
		}
		return time.UnixMilli(ms).Format("2006-01-02 15:04:05.000")
	},
	"age": func(ms int64) string {
		if ms <= 0 {
			return "-"
		}
		return fmtAge(time.Duration(ms) * time.Millisecond)
	},
}

func fmtAge(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// pages returns one template set per page, each with the layout, parsed
// at the first page served: every command of the binary used to parse them
// at its start (half a millisecond of CPU), which up needs only after its
// ready line.
var pages = sync.OnceValue(func() map[string]*template.Template {
	out := map[string]*template.Template{}
	for _, p := range []string{"overview", "queue", "kv", "activity", "env", "login"} {
		out[p] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(assets, "assets/layout.html", "assets/"+p+".html"))
	}
	return out
})

// page is what every page's layout needs.
type page struct {
	Title    string
	Nav      string
	Stack    string
	CSRF     string
	ReadOnly bool
	AsyncAPI bool
	Env      bool
	// Live turns the event stream on.
	Live bool
	Data any
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, name, title string, live bool, data any) {
	p := page{Title: title, Nav: name, Stack: s.opts.Source.Runtime().Stack, CSRF: s.csrf, ReadOnly: s.opts.ReadOnly,
		AsyncAPI: s.opts.AsyncAPI != nil, Env: s.opts.Env != nil, Live: live, Data: data}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := pages()[name].Execute(w, p); err != nil {
		s.log.Error("explorer: render page", "page", name, "err", err)
	}
}

func (s *Server) pageRoutes(m *http.ServeMux) {
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(staticFS)))
	m.HandleFunc("GET /{$}", s.pageOverview)
	m.HandleFunc("GET /queues/{name}", s.pageQueue)
	m.HandleFunc("GET /kv/{name}", s.pageKV)
	m.HandleFunc("GET /activity", s.pageActivity)
	m.HandleFunc("GET /env", s.pageEnv)
	m.HandleFunc("GET /asyncapi.json", s.apiAsyncAPI)
	m.HandleFunc("GET /login", s.pageLogin)
	m.HandleFunc("POST /login", s.postLogin)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such page: "+r.URL.Path, http.StatusNotFound)
	})
}

func (s *Server) pageOverview(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, "overview", "Overview", true, s.allBindings(r.Context()))
}

type queuePage struct {
	B         bindingJSON
	Messages  []messageJSON
	Page      int // 1-based
	PageSize  int
	Prev      int // 0: none
	Next      int // 0: none
	Queues    []string
	IsDLQ     bool
	PeekLimit int
	Err       string
}

func (s *Server) pageQueue(w http.ResponseWriter, r *http.Request) {
	q, b, err := s.openQueue(r.PathValue("name"))
	if err != nil {
		s.pageErr(w, err)
		return
	}
	rt := s.opts.Source.Runtime()
	maxPage := queue.MaxPeekLimit / DefaultPageSize
	pg, err := intParam(r, "page", 1, 1, maxPage)
	if err != nil {
		s.pageErr(w, err)
		return
	}
	d := queuePage{B: s.describe(r.Context(), rt, b), Page: pg, PageSize: DefaultPageSize, PeekLimit: queue.MaxPeekLimit}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	ms, more, err := peekPage(ctx, q, (pg-1)*DefaultPageSize, DefaultPageSize)
	if err != nil {
		d.Err = err.Error()
	}
	now := s.opts.Now()
	for _, m := range ms {
		d.Messages = append(d.Messages, toMessageJSON(m, now))
	}
	if pg > 1 {
		d.Prev = pg - 1
	}
	if more && pg < maxPage {
		d.Next = pg + 1
	}
	for _, o := range rt.Bindings {
		if o.Type == "queue" && o.Name != b.Name {
			d.Queues = append(d.Queues, o.Name)
		}
	}
	d.IsDLQ = len(d.B.DeadLetterFor) > 0 || (d.B.Queue != nil && d.B.Queue.DeadLetters > 0)
	s.render(w, r, "queue", "Queue "+b.Name, true, d)
}

type kvPage struct {
	B          bindingJSON
	Prefix     string
	Cursor     string
	Keys       []keyJSON
	NextCursor string
	Key        string
	Value      *valueJSON
	Err        string
	MaxValue   int
}

func (s *Server) pageKV(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	k, release, err := s.openKV(r.Context(), name)
	if err != nil {
		s.pageErr(w, err)
		return
	}
	defer release()
	rt, b, _ := s.lookup(name)
	qv := r.URL.Query()
	d := kvPage{B: s.describe(r.Context(), rt, b), Prefix: qv.Get("prefix"), Cursor: qv.Get("cursor"), Key: qv.Get("key"), MaxValue: kv.MaxValueBytes}
	limit := DefaultPageSize
	if l, err := strconv.Atoi(qv.Get("limit")); err == nil && l >= 1 && l <= kv.MaxScanLimit {
		limit = l
	}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	p, err := scan(ctx, k, d.Prefix, limit, d.Cursor)
	if err != nil {
		d.Err = err.Error()
	}
	now := s.opts.Now()
	for _, it := range p.Items {
		d.Keys = append(d.Keys, toKeyJSON(it, now))
	}
	d.NextCursor = p.NextCursor
	if d.Key != "" {
		e, ok, err := k.Lookup(ctx, d.Key)
		switch {
		case err != nil:
			d.Err = err.Error()
		case !ok:
			d.Err = fmt.Sprintf("key %q is not in %s (or has expired)", d.Key, name)
		default:
			v := toValueJSON(d.Key, e, s.opts.Now())
			d.Value = &v
		}
	}
	s.render(w, r, "kv", "KV "+name, true, d)
}

func (s *Server) pageActivity(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, "activity", "Live activity", true, nil)
}

func (s *Server) pageEnv(w http.ResponseWriter, r *http.Request) {
	vars, err := s.maskedEnv()
	if err != nil {
		s.pageErr(w, err)
		return
	}
	s.render(w, r, "env", "Environment", false, vars)
}

func (s *Server) pageErr(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	if he, ok := err.(*httpError); ok {
		status = he.status
	}
	http.Error(w, err.Error(), status)
}

type loginPage struct {
	Next string
	Err  string
}

// maxNext bounds the login's next parameter.
const maxNext = 2048

// safeNext returns where the login may send the browser: next when it is
// a path on the explorer that stays one once decoded and cleaned (as
// http.Redirect cleans it, and as browsers read a backslash as a slash and
// drop tabs and line breaks), else "/". The answer is rebuilt from the
// decoded, cleaned path and the query, so the Location header carries
// exactly what was checked.
func safeNext(next string) string {
	const home = "/"
	if next == "" || len(next) > maxNext || next[0] != '/' || unsafeInURL(next) {
		return home
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return home
	}
	// Decoded: %2F, %5C and %09 are what they stand for here. No page of
	// the explorer has a % in its path (binding names and keys cannot),
	// so one left after decoding (%252F) is refused too: decoded once
	// more it would be another host.
	p := u.Path
	if p == "" || p[0] != '/' || unsafeInURL(p) || strings.Contains(p, "%") {
		return home
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	out := (&url.URL{Path: clean, RawQuery: u.RawQuery}).String()
	if !strings.HasPrefix(out, "/") || strings.HasPrefix(out, "//") || unsafeInURL(out) {
		return home
	}
	return out
}

// unsafeInURL reports a backslash (a slash to browsers) or a control
// character (tabs and line breaks are dropped by browsers, so "/\t/host"
// would become "//host").
func unsafeInURL(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '\\' || c < 0x20 || c == 0x7f {
			return true
		}
	}
	return false
}

func (s *Server) pageLogin(w http.ResponseWriter, r *http.Request) {
	if s.opts.Token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	s.render(w, r, "login", "Log in", false, loginPage{Next: safeNext(r.URL.Query().Get("next"))})
}

func (s *Server) postLogin(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.PostFormValue("next"))
	if s.opts.Token == "" {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	r.Header.Set("Authorization", "Bearer "+r.PostFormValue("token"))
	if !s.authorized(r) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		s.render(w, r, "login", "Log in", false, loginPage{Next: next, Err: "token: that is not the stack's notify.token"})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: s.sessID, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, next, http.StatusSeeOther)
}
