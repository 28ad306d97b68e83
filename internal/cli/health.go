package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/delayq/delayq/internal/config"
)

// runHealth is a container healthcheck: the image has no shell and no
// curl, so compose runs ["/dq", "health", "--url", "http://127.0.0.1:7070/healthz"].
func runHealth(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet("health", env)
	withUsage(fs, `Usage: dq health (--url URL | --kafka HOST:PORT) [flags]

Exits 0 when URL answers 2xx (or the Kafka broker answers), 1 otherwise:
a container healthcheck.`)
	url := fs.String("url", "", "GET this URL; healthy when it answers 2xx (e.g. http://127.0.0.1:7070/healthz)")
	kafka := fs.String("kafka", "", "instead of --url: healthy when the Kafka broker at host:port answers an ApiVersions request")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	ca := fs.String("ca", envOr(env, "DQ_CA", ""), "CA certificate file (PEM) trusted instead of the system's roots for an https --url (env DQ_CA)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	hc := http.DefaultClient
	if *ca != "" {
		pool, err := config.LoadCA(*ca)
		if err != nil {
			return fmt.Errorf("health: --ca (DQ_CA): %w", err)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		hc = &http.Client{Transport: tr}
		defer tr.CloseIdleConnections()
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	switch {
	case *url != "" && *kafka != "":
		return errors.New("health: give --url or --kafka, not both")
	case *url != "":
		status, err := probeHTTP(ctx, hc, *url)
		if err != nil {
			return fmt.Errorf("health %s: %w", *url, err)
		}
		fmt.Fprintf(env.Stdout, "healthy: %s %s\n", *url, status)
		return nil
	case *kafka != "":
		if err := probeKafka(ctx, *kafka); err != nil {
			return fmt.Errorf("health kafka %s: %w", *kafka, err)
		}
		fmt.Fprintf(env.Stdout, "healthy: kafka %s\n", *kafka)
		return nil
	default:
		return errors.New("health: --url or --kafka is required")
	}
}

// probeHTTP GETs url and returns the status line when it is 2xx.
func probeHTTP(ctx context.Context, hc *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return "", fmt.Errorf("%s: %s", resp.Status, body)
	}
	return resp.Status, nil
}
