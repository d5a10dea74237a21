package main

// The example runtime against the test daemon (SPAWND_SOCKET,
// SPAWND_CONNECTOR), as clients/go/run-tests runs it.

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// runtime runs the command with args and stdin, and gives its exit code,
// stdout and stderr.
func runtime(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	if os.Getenv("SPAWND_SOCKET") == "" {
		if os.Getenv("SPAWND_SKIP_DAEMON_TESTS") == "1" {
			t.Skip("no daemon (SPAWND_SKIP_DAEMON_TESTS=1)")
		}
		t.Fatal("SPAWND_SOCKET is not set: these tests need a running spawnd serve (set SPAWND_SKIP_DAEMON_TESTS=1 to skip them)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, strings.NewReader(stdin), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestTheRuntimeListsTheOperationsWithTheirParams(t *testing.T) {
	code, out, errs := runtime(t, "")
	if code != 0 || !strings.Contains(out, "  sh [readonly]") || !strings.Contains(out, "    script (string, required)") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
}

func TestTheRuntimeRunsAnOperationAndExitsWithItsCode(t *testing.T) {
	code, out, errs := runtime(t, "", "sh", "script=echo out; echo err >&2; exit 7")
	if code != 7 || out != "out\n" || errs != "err\n" {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
}

func TestTheRuntimeStreamsItsStdin(t *testing.T) {
	code, out, errs := runtime(t, "to the program\n", "-stdin", "sh", "script=tr a-z A-Z")
	if code != 0 || out != "TO THE PROGRAM\n" {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
}

func TestTheRuntimeSaysWhyTheGateRefused(t *testing.T) {
	code, out, errs := runtime(t, "", "sh", "script=true", "color=red")
	if code != 3 || out != "" || !strings.Contains(errs, "denied (arg_unknown)") || !strings.Contains(errs, "audit record ") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	code, _, errs = runtime(t, "", "no-such-op")
	if code != 6 || !strings.Contains(errs, "denied (op_unknown)") {
		t.Fatalf("exit %d\nstderr:\n%s", code, errs)
	}
}

func TestTheRuntimeRefusesAnArgumentWithoutAValue(t *testing.T) {
	code, _, errs := runtime(t, "", "sh", "script")
	if code != 2 || !strings.Contains(errs, "not key=value") {
		t.Fatalf("exit %d\nstderr:\n%s", code, errs)
	}
}
