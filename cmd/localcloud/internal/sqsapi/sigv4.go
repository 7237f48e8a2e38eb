package sqsapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

// maxSkew is how far a signed request's X-Amz-Date may be from now.
const maxSkew = 15 * time.Minute

// verify checks a request's AWS Signature Version 4 (the Authorization
// header) against the stack's key pair, as SQS does: the access key, the
// region and service of the scope, the time and the signature over the
// method, path, query, signed headers and body.
func (s *Server) verify(r *http.Request, body []byte) *apiError {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return errf(codeMissingAuthToken, "the request is not signed: this stack sets sqs.accessKeyId and sqs.secretAccessKey, so every request must carry an AWS Signature Version 4")
	}
	const algo = "AWS4-HMAC-SHA256"
	if !strings.HasPrefix(auth, algo+" ") {
		return errf(codeSignatureDoesNotMatch, "the Authorization header must use %s", algo)
	}
	var cred, signed, sig string
	for _, part := range strings.Split(strings.TrimPrefix(auth, algo+" "), ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "Credential":
			cred = v
		case "SignedHeaders":
			signed = v
		case "Signature":
			sig = v
		}
	}
	scope := strings.Split(cred, "/")
	if len(scope) != 5 || signed == "" || sig == "" {
		return errf(codeSignatureDoesNotMatch, "the Authorization header must hold Credential=KEY/DATE/REGION/SERVICE/aws4_request, SignedHeaders and Signature")
	}
	if scope[0] != s.opts.AccessKeyID {
		return errf(codeInvalidClientTokenID, "the access key id %s is not this stack's sqs.accessKeyId", scope[0])
	}
	if scope[2] != s.opts.Region || scope[3] != "sqs" || scope[4] != "aws4_request" {
		return errf(codeSignatureDoesNotMatch, "the credential scope %s must be DATE/%s/sqs/aws4_request", strings.Join(scope[1:], "/"), s.opts.Region)
	}
	amzDate := r.Header.Get("X-Amz-Date")
	at, err := time.Parse("20060102T150405Z", amzDate)
	if err != nil || !strings.HasPrefix(amzDate, scope[1]) {
		return errf(codeSignatureDoesNotMatch, "header X-Amz-Date %q must be the signing time YYYYMMDDTHHMMSSZ of the scope's date %s", amzDate, scope[1])
	}
	if d := s.opts.Now().Sub(at); d > maxSkew || d < -maxSkew {
		return errf(codeRequestExpired, "the request was signed at %s, more than %s from the server's time", amzDate, maxSkew)
	}
	sum := sha256.Sum256(body)
	payload := hex.EncodeToString(sum[:])
	if h := r.Header.Get("X-Amz-Content-Sha256"); h != "" && h != payload {
		// The signature covers this header's hash: it must be the body's.
		return errf(codeSignatureDoesNotMatch, "header X-Amz-Content-Sha256 is not the SHA-256 of the request body")
	}
	headers := strings.Split(signed, ";")
	var canon strings.Builder
	for _, h := range headers {
		var v string
		switch h {
		case "host":
			v = r.Host
		case "content-length":
			v = r.Header.Get("Content-Length")
			if v == "" {
				v = strings.TrimSpace(strings.Join(r.Header.Values(h), ","))
			}
		default:
			vals := r.Header.Values(h)
			for i := range vals {
				vals[i] = strings.Join(strings.Fields(vals[i]), " ")
			}
			v = strings.Join(vals, ",")
		}
		canon.WriteString(h + ":" + v + "\n")
	}
	creq := strings.Join([]string{r.Method, canonicalPath(r.URL), canonicalQuery(r.URL.Query()), canon.String(), signed, payload}, "\n")
	hreq := sha256.Sum256([]byte(creq))
	sts := strings.Join([]string{algo, amzDate, strings.Join(scope[1:], "/"), hex.EncodeToString(hreq[:])}, "\n")
	key := hmacSHA256([]byte("AWS4"+s.opts.SecretAccessKey), scope[1])
	for _, p := range scope[2:] {
		key = hmacSHA256(key, p)
	}
	want := hex.EncodeToString(hmacSHA256(key, sts))
	if !hmac.Equal([]byte(want), []byte(sig)) {
		return errf(codeSignatureDoesNotMatch, "the request signature we calculated does not match the signature you provided: check sqs.secretAccessKey and the client's secret key")
	}
	return nil
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// canonicalPath is the URI-encoded path ("/" when empty).
func canonicalPath(u *url.URL) string {
	p := u.EscapedPath()
	if p == "" {
		return "/"
	}
	return p
}

// canonicalQuery is the query sorted by name and value, each encoded as
// SigV4 asks (RFC 3986 unreserved characters kept, %20 for space).
func canonicalQuery(q url.Values) string {
	var pairs []string
	for k, vs := range q {
		for _, v := range vs {
			pairs = append(pairs, awsEscape(k)+"="+awsEscape(v))
		}
	}
	sort.Strings(pairs)
	return strings.Join(pairs, "&")
}

func awsEscape(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}
