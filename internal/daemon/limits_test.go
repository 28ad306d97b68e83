package daemon

import (
	"net/http"
	"testing"
)

// The daemon serves the rate-limit endpoints (limits.go) behind its
// bearer token, with rules stored in etcd.
func TestLimitsAPIMounted(t *testing.T) {
	_, _, cfg := startRedisEtcd(t)
	cfg.APIToken = "s3cret"
	a := startApp(t, cfg)

	if got := a.doHeader("GET", "/v1/limits", "", http.Header{}); got.Status != http.StatusUnauthorized {
		t.Fatalf("limits without token: %d %s", got.Status, got.Raw)
	}
	put := a.do("PUT", "/v1/limits/order.cancel", `{"window_quota":{"limit":600,"window":"10s"}}`)
	if put.Status != http.StatusOK {
		t.Fatalf("put rule: %d %s", put.Status, put.Raw)
	}
	get := a.do("GET", "/v1/limits/order.cancel", "")
	rule, _ := get.JSON["rule"].(map[string]any)
	wq, _ := rule["window_quota"].(map[string]any)
	if get.Status != http.StatusOK || wq["limit"] != float64(600) || wq["window"] != "10s" {
		t.Fatalf("get rule: %d %s", get.Status, get.Raw)
	}
	if bad := a.do("PUT", "/v1/limits/order.cancel", `{"window_quota":{"limit":-1,"window":"0s"}}`); bad.Status/100 != 4 {
		t.Fatalf("hostile rule: %d %s", bad.Status, bad.Raw)
	}
	if del := a.do("DELETE", "/v1/limits/order.cancel", ""); del.Status != http.StatusOK && del.Status != http.StatusNoContent {
		t.Fatalf("delete rule: %d %s", del.Status, del.Raw)
	}
	if gone := a.do("GET", "/v1/limits/order.cancel", ""); gone.Status != http.StatusNotFound {
		t.Fatalf("deleted rule: %d %s", gone.Status, gone.Raw)
	}
}

func TestLimitsAPIDisabledWithoutEtcd(t *testing.T) {
	r := startRedis(t)
	a := startApp(t, testConfig(t, r.Addr))
	if got := a.do("GET", "/v1/limits", ""); got.Status != http.StatusServiceUnavailable || got.errCode() != "unavailable" {
		t.Fatalf("limits without etcd: %d %s", got.Status, got.Raw)
	}
}
