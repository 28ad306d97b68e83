package main

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/delayq/delayq/bench/internal/host"
	"github.com/delayq/delayq/bench/internal/report"
	"github.com/delayq/delayq/bench/internal/systems"
)

func describeMachine(ctx context.Context, in *systems.Infra) report.Machine {
	m := report.Machine{
		CPUs:         runtime.NumCPU(),
		CPUModel:     cpuModel(),
		OS:           runtime.GOOS + "/" + runtime.GOARCH,
		GoVersion:    runtime.Version(),
		AsynqVersion: "unknown",
		LoadStart:    host.LoadAverage(),
	}
	if v, err := in.RedisVersion(ctx); err == nil {
		m.RedisVersion = v
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/hibiken/asynq" {
				m.AsynqVersion = d.Version
			}
		}
	}
	return m
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
