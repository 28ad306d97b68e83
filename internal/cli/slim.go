//go:build dqslim

package cli

import (
	"context"
	"errors"
)

// The dqslim build (the delayq container image) leaves out the embedded
// etcd server and Kafka broker: they are development stand-ins that would
// double the image. The delayq-dev image (deploy/build-images.sh) and a
// plain go build have them.
var errSlim = errors.New("not part of this build of dq (the slim image carries only the applications and the API client); use the delayq-dev image or a dq built without -tags dqslim")

func runDevEtcd(context.Context, Env, []string) error  { return errSlim }
func runDevKafka(context.Context, Env, []string) error { return errSlim }
func runDevAll(context.Context, Env, []string) error   { return errSlim }

func probeKafka(context.Context, string) error { return errSlim }
