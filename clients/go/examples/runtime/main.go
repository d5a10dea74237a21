// Command runtime is an example connector runtime on the spawnd Go client.
// Without an operation it lists the connector's operations and their
// params (connectors_status); with one it runs it with key=value arguments
// (spawn_op with notifications), streams its output as it comes, streams
// its own stdin to the program's with -stdin, and says why when the gate
// refuses.
//
//	runtime [-socket PATH] -connector FQN
//	runtime [-socket PATH] -connector FQN [-mode TIER] [-stdin] OP [key=value]…
//
// It exits with the program's code (128+N after signal N, 124 after its
// wall time), 2 for a usage error, 3 for a refusal, 5 when the daemon
// cannot be reached or fails, and 6 when the connector or operation is
// not found: the exit codes of `spawnd run`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"spawnd.dev/go/spawnd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run is the whole command, with its streams passed in so tests can run it.
func run(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("runtime", flag.ContinueOnError)
	flags.SetOutput(stderr)
	socket := flags.String("socket", os.Getenv("SPAWND_SOCKET"), "the daemon's socket (default $SPAWND_SOCKET, else "+spawnd.DefaultSocket+")")
	connector := flags.String("connector", os.Getenv("SPAWND_CONNECTOR"), "the connector's FQN (default $SPAWND_CONNECTOR)")
	mode := flags.String("mode", "", "the invocation's tier (readonly when empty)")
	withStdin := flags.Bool("stdin", false, "stream this command's stdin to the program's")
	if err := flags.Parse(argv); err != nil {
		return 2
	}
	if *connector == "" {
		fmt.Fprintln(stderr, "runtime: -connector is required")
		return 2
	}
	c, err := spawnd.Dial(ctx, *socket)
	if err != nil {
		fmt.Fprintf(stderr, "runtime: %v\n", err)
		return 5
	}
	defer c.Close()
	if flags.NArg() == 0 {
		return list(ctx, c, *connector, stdout, stderr)
	}
	args := map[string]string{}
	for _, kv := range flags.Args()[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			fmt.Fprintf(stderr, "runtime: argument %q is not key=value\n", kv)
			return 2
		}
		if _, dup := args[k]; dup {
			fmt.Fprintf(stderr, "runtime: argument %q is given twice\n", k)
			return 2
		}
		args[k] = v
	}
	p := spawnd.SpawnOpParams{Connector: *connector, Op: flags.Arg(0), Args: args, Mode: *mode,
		Notify: true, StdinStream: *withStdin}
	return runOp(ctx, c, p, stdin, stdout, stderr)
}

// list prints the connector's operations, each param on a line of its own.
func list(ctx context.Context, c *spawnd.Client, connector string, stdout, stderr io.Writer) int {
	status, err := c.ConnectorsStatus(ctx)
	if err != nil {
		return failed(err, stderr)
	}
	conn := status.Connectors[connector]
	if conn == nil || conn.Status == "disabled_by_admin" {
		// A disabled connector is neither offered nor described.
		fmt.Fprintf(stderr, "runtime: %s is not available to this user\n", connector)
		return 6
	}
	fmt.Fprintf(stdout, "%s %s (%s)\n", connector, conn.Version, conn.Status)
	for _, op := range conn.Operations {
		line := fmt.Sprintf("  %s [%s]", op.Name, op.Mode)
		if op.Description != "" {
			line += ": " + op.Description
		}
		if len(op.Network) > 0 {
			line += " (network: " + strings.Join(op.Network, ", ") + ")"
		}
		fmt.Fprintln(stdout, line)
		for _, p := range op.Params {
			fmt.Fprintf(stdout, "    %s\n", describe(p))
		}
	}
	return 0
}

// describe is one param as a line: name, kind, required or default, rules.
func describe(p *spawnd.Param) string {
	facts := []string{p.Kind}
	switch {
	case p.Default != nil:
		facts = append(facts, fmt.Sprintf("default %q", *p.Default))
	case p.Required:
		facts = append(facts, "required")
	default:
		facts = append(facts, "optional")
	}
	if len(p.Values) > 0 {
		facts = append(facts, "one of "+strings.Join(p.Values, "|"))
	}
	if p.Pattern != "" {
		facts = append(facts, "pattern /"+p.Pattern+"/")
	}
	if p.AllowDash {
		facts = append(facts, "allow_dash")
	}
	line := fmt.Sprintf("%s (%s)", p.Name, strings.Join(facts, ", "))
	if p.Description != "" {
		line += ": " + p.Description
	}
	return line
}

// runOp runs the operation, copies its output as notifications bring it,
// and exits as the program did.
func runOp(ctx context.Context, c *spawnd.Client, p spawnd.SpawnOpParams, stdin io.Reader, stdout, stderr io.Writer) int {
	s, err := c.SpawnOp(ctx, p)
	if err != nil {
		return failed(err, stderr)
	}
	defer func() {
		// A program still running (this command was interrupted) is
		// killed with its handle.
		_ = c.SpawnRelease(context.Background(), s.Handle)
	}()
	stdinDone := make(chan error, 1)
	if p.StdinStream {
		go func() {
			w := c.NewStdinWriter(ctx, s.Handle)
			_, err := io.Copy(w, stdin)
			if err == nil {
				err = w.Close()
			}
			stdinDone <- err
		}()
	}
	var status *spawnd.Status
	out := [2]io.Writer{stdout, stderr}
	notifications := c.Notifications(s.Handle)
follow:
	for {
		select {
		case n, open := <-notifications:
			if !open {
				break follow
			}
			switch n.Method {
			case spawnd.MethodSpawnOutput:
				if n.Skipped > 0 {
					fmt.Fprintf(stderr, "runtime: %d bytes of %s were lost: this reader fell behind\n", n.Skipped, n.Which)
				}
				_, _ = out[n.Which&1].Write(n.Data)
			case spawnd.MethodSpawnExited:
				status = n.Status
			}
		case <-ctx.Done():
			// The deferred release kills the program.
			fmt.Fprintf(stderr, "runtime: interrupted: %v\n", ctx.Err())
			return 130
		}
	}
	if status == nil {
		// The channel closed without the end: the connection ended.
		return failed(c.Err(), stderr)
	}
	if p.StdinStream {
		select {
		case err := <-stdinDone:
			// A program that ends without reading all of its stdin
			// makes the next write not found: that is not this
			// command's failure.
			if err != nil && !errors.Is(err, spawnd.ErrNotFound) {
				fmt.Fprintf(stderr, "runtime: stdin: %v\n", err)
			}
		default:
		}
	}
	return exitCode(status, stderr)
}

// exitCode is the program's code as `spawnd run` exits with it.
func exitCode(s *spawnd.Status, stderr io.Writer) int {
	if s.State == spawnd.StateTimedOut {
		fmt.Fprintln(stderr, "runtime: the wall time ran out; the sandbox was killed")
		return 124
	}
	if n, ok := s.Exit.SignalNumber(); ok {
		return 128 + n
	}
	if code, ok := s.Exit.Exited(); ok {
		return code
	}
	fmt.Fprintf(stderr, "runtime: the spawn ended %s: %s\n", s.State, s.Error)
	return 5
}

// failed says why a call failed and picks the exit code for it.
func failed(err error, stderr io.Writer) int {
	var denial *spawnd.Denial
	if errors.As(err, &denial) {
		fmt.Fprintf(stderr, "runtime: denied (%s): %s\n", denial.Reason, denial.Message)
		if denial.AuditID != "" {
			fmt.Fprintf(stderr, "runtime: audit record %s\n", denial.AuditID)
		}
		if errors.Is(err, spawnd.ErrNotFound) {
			return 6
		}
		if errors.Is(err, spawnd.ErrCredential) {
			return 4
		}
		return 3
	}
	fmt.Fprintf(stderr, "runtime: %v\n", err)
	switch {
	case errors.Is(err, spawnd.ErrNotFound):
		return 6
	case errors.Is(err, spawnd.ErrInvalidParams), errors.Is(err, spawnd.ErrInvalidRequest), errors.Is(err, spawnd.ErrUnknownMethod):
		return 2
	default:
		return 5
	}
}
