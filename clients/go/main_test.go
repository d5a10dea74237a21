package spawnd_test

// The suite's two halves: TestWire… tests drive the client against a
// scripted peer in this process (wire_test.go), and the TestDaemon… tests
// and the examples against a real `spawnd serve` named by SPAWND_SOCKET,
// with the test connector SPAWND_CONNECTOR whose operation `sh` runs its
// `script` argument with bash (clients/go/run-tests; integration/clients.rs
// starts both). Without a daemon the suite fails, unless
// SPAWND_SKIP_DAEMON_TESTS=1 says to run only what needs none.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"spawnd.dev/go/spawnd"
)

var (
	socket    = os.Getenv("SPAWND_SOCKET")
	connector = envOr("SPAWND_CONNECTOR", "local://test/escape")
)

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}

func TestMain(m *testing.M) {
	flag.Parse()
	if socket == "" {
		if os.Getenv("SPAWND_SKIP_DAEMON_TESTS") != "1" {
			fmt.Fprintln(os.Stderr, "SPAWND_SOCKET is not set: the suite needs a running `spawnd serve` "+
				"(clients/go/run-tests with SPAWND_SOCKET and SPAWND_CONNECTOR, as integration/clients.rs runs it); "+
				"set SPAWND_SKIP_DAEMON_TESTS=1 to run only the tests that need no daemon")
			os.Exit(2)
		}
		// The examples print what a daemon answers: without one, only tests run.
		if run := flag.Lookup("test.run"); run != nil && run.Value.String() == "" {
			_ = flag.Set("test.run", "^Test")
		}
	}
	os.Exit(m.Run())
}

// dial connects to the test daemon, or skips the test when the suite was
// told to run without one.
func dial(t *testing.T) *spawnd.Client {
	t.Helper()
	if socket == "" {
		t.Skip("no daemon (SPAWND_SKIP_DAEMON_TESTS=1)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := spawnd.Dial(ctx, socket)
	if err != nil {
		t.Fatalf("dial %s: %v", socket, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testContext is a context for one test: generous, so that only a hang
// fails on time.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// sh is the test connector's `sh` operation with script.
func sh(script string) spawnd.SpawnOpParams {
	return spawnd.SpawnOpParams{Connector: connector, Op: "sh", Args: map[string]string{"script": script}}
}
