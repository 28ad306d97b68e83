package config

import (
	"net/url"
	"regexp"
	"strings"
)

// Redacted replaces a secret wherever a URL or address is logged.
const Redacted = "xxxxx"

// secretParams are the query parameter names whose values are secrets;
// a name also matches with a prefix ending in '_' or '-' (client_secret,
// x-api-key).
var secretParams = []string{"token", "key", "secret", "password", "pass", "sig", "signature", "access_token", "api_key", "apikey", "auth"}

func secretParam(name string) bool {
	n := strings.ToLower(name)
	for _, s := range secretParams {
		if n == s || strings.HasSuffix(n, "_"+s) || strings.HasSuffix(n, "-"+s) {
			return true
		}
	}
	return false
}

// RedactURL is raw fit for a log line: the password of its user info and
// the values of query (and fragment) parameters named like secrets
// (token, key, secret, password, pass, sig, signature, access_token,
// api_key, apikey, auth) become xxxxx; everything else is kept, so the
// log still says where it points. It takes URLs with a scheme and bare
// addresses (user:password@host:port) alike, and never fails: what it
// cannot read as a URL comes back with every user info redacted.
func RedactURL(raw string) string {
	if !strings.Contains(raw, "://") {
		return redactUserinfo(raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return redactUserinfo(raw)
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), Redacted)
		}
	}
	u.RawQuery = redactParams(u.RawQuery)
	if u.Fragment != "" {
		u.RawFragment = redactParams(u.EscapedFragment())
		u.Fragment, _ = url.PathUnescape(u.RawFragment)
	}
	return u.String()
}

// redactUserinfo redacts "user:password@" in text that is not a URL.
func redactUserinfo(s string) string {
	at := strings.LastIndex(s, "@")
	if at < 0 {
		return s
	}
	start := strings.Index(s, "://") + 1
	if start > 0 {
		start += 2
	}
	colon := strings.Index(s[start:at], ":")
	if colon < 0 {
		return s
	}
	return s[:start+colon+1] + Redacted + s[at:]
}

// redactParams redacts the values of secret parameters of a raw query,
// keeping the order and encoding of the rest.
func redactParams(q string) string {
	if q == "" {
		return q
	}
	parts := strings.Split(q, "&")
	for i, p := range parts {
		k, _, ok := strings.Cut(p, "=")
		if !ok {
			continue
		}
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		if secretParam(name) {
			parts[i] = k + "=" + Redacted
		}
	}
	return strings.Join(parts, "&")
}

var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>,]+`)

// Redact applies RedactURL to every URL in free text (a JSON document, a
// list of addresses, a message).
func Redact(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return urlInText.ReplaceAllStringFunc(s, RedactURL)
}
