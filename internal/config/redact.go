package config

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Redacted replaces a secret wherever a URL or address is logged.
const Redacted = "xxxxx"

// secretParams are the query parameter names whose values are secrets;
// a name also matches with a prefix ending in '_' or '-' (client_secret,
// x-api-key).
var secretParams = []string{
	"token", "key", "secret", "password", "passwd", "pass", "pwd", "sig", "signature", "access_token", "api_key", "apikey",
	"auth", "authorization", "bearer", "code", "session", "sessionid", "session_id", "credential", "credentials", "jwt",
	"assertion", "private_key", "privatekey", "client_secret", "hmac", "otp",
}

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
// (secretParams: token, key, secret, password, sig, signature, code,
// session, credential, jwt, ...; also with a prefix ending in '_' or
// '-', as client_secret or x-api-key) become xxxxx; everything else is kept, so the
// log still says where it points. It takes URLs with a scheme and bare
// addresses (user:password@host:port) alike, and never fails: what it
// cannot read as a URL comes back with every user info redacted.
func RedactURL(raw string) string {
	if !strings.Contains(raw, "://") {
		return redactUserinfo(raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return redactUnparsed(raw)
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

// redactUnparsed redacts a URL that url.Parse refuses (a bad escape, as
// in the error url.Parse returns for it): the user info's password and
// the secret parameters after '?' and '#'.
func redactUnparsed(raw string) string {
	s := redactUserinfo(raw)
	base, query, ok := strings.Cut(s, "?")
	if !ok {
		base, query, ok = strings.Cut(s, "#")
		if !ok {
			return s
		}
		return base + "#" + redactParams(query)
	}
	query, frag, hasFrag := strings.Cut(query, "#")
	out := base + "?" + redactParams(query)
	if hasFrag {
		out += "#" + redactParams(frag)
	}
	return out
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

// RedactError redacts the URL of every *url.Error in err's chain, in
// place, and returns err. net/http's errors (http.Client.Do,
// http.NewRequest) and url.Parse's carry the whole URL they were given:
// Go masks a password as "***" but keeps the query, so a webhook's
// ?token= would reach the task's last error, its dead letter, its outcome
// record and the log. Call it on the error as it comes from net/http or
// net/url, before it is wrapped (fmt.Errorf writes its message at once),
// returned or logged; the error's type and chain are kept.
func RedactError(err error) error {
	for e := err; e != nil; {
		var ue *url.Error
		if !errors.As(e, &ue) {
			break
		}
		ue.URL = RedactURL(ue.URL)
		e = ue.Err
	}
	return err
}

// CheckAddrs refuses addresses (host:port, or URLs for etcd) that carry
// credentials ("user:password@host:port"): no client of delayq reads
// them there, and each connection error would then show them (go-redis
// and kafka-go put the whole address in their dial errors, which reach
// the log, /readyz and GET /v1/stats). Credentials have settings of their
// own; instead says which. The error names the setting and shows the
// address redacted.
func CheckAddrs(setting, env, instead string, addrs []string) error {
	for _, a := range addrs {
		creds := strings.Contains(a, "@")
		if u, err := url.Parse(a); err == nil && strings.Contains(a, "://") {
			creds = u.User != nil
		}
		if creds {
			return fmt.Errorf("%s (%s) %q: credentials do not belong in an address (connection errors would show them); set %s",
				setting, env, RedactURL(a), instead)
		}
	}
	return nil
}
